"""Abstract interpretation of Python functions over libcst trees.

Each function of the checked module is run once as an entry point (its parameters get values
from their names: `logp` is the policy's log-prob, `ref_logp` the reference's, `old_logp` the
rollout policy's; `self` is an instance of its class), and helpers are followed into their bodies
(same module, other project modules, methods on `self`) with the caller's values bound to their
parameters. Branches on mode strings are specialised when the string is a literal and explored
all together otherwise. Loss, reward and API facts are recorded for the rules.
"""
from __future__ import annotations

from typing import Any

import libcst as cst

from kllint.analysis.algebra import Algebra
from kllint.analysis.fields import FieldStore
from kllint.analysis.index import ProjectIndex
from kllint.analysis.interpret.attributes import Attributes
from kllint.analysis.interpret.bindings import Bindings
from kllint.analysis.interpret.branches import Branches
from kllint.analysis.interpret.entry import EntryPoints
from kllint.analysis.interpret.evidence import RoleDecisions
from kllint.analysis.interpret.expressions import Expressions
from kllint.analysis.interpret.following import MAX_DEPTH, Calls
from kllint.analysis.interpret.frames import MAX_STEPS, Budget, Frame
from kllint.analysis.interpret.names import Names
from kllint.analysis.interpret.statements import Statements
from kllint.analysis.module import ModuleInfo
from kllint.analysis.values import Value

__all__ = ["MAX_DEPTH", "Budget", "Frame", "Interpreter"]


class Interpreter(EntryPoints, RoleDecisions, Statements, Branches, Bindings, Expressions, Names, Attributes, Calls):
    """Runs the entry points of one module and collects facts."""

    def __init__(self, entry: ModuleInfo, index: ProjectIndex, vocab: Any = None) -> None:
        """`vocab` (config `[tool.kllint.vocab]`) names the project's own log-prob helpers,
        stop-gradient helpers, loss sinks and reference names."""
        self.entry = entry
        self.index = index
        self.vocab = vocab
        self.algebra = Algebra()
        self.fields = FieldStore(self.algebra)  # values kept on containers (`experience.kl = kl`)
        self.facts: list[Any] = []
        self._abandoned: dict[tuple[str, str, str], tuple[cst.CSTNode | None, ModuleInfo, cst.CSTNode | None]] = {}
        self.steps = 0
        self.step_limit = MAX_STEPS  # lowered while a followed call runs on its share (`call_share`)
        self.call_share = 0  # steps one followed call may spend (0: no limit but the entry point's)
        self.over_budget: set[int] = set()  # definitions whose call spent its share in this entry point
        self.grad_targets: set[str] = set()
        self.grad_positions: dict[str, tuple[int, ...] | None] = {}  # the parameters each differentiates
        self.name_roles: dict[tuple[str, str], dict[str, set[str]]] = {}
        self._nested_done: set[int] = set()
        self._open_aliases: set = set()  # aliases, module instances and constructor stores being resolved
        self._instance_attributes: dict[tuple[int, str], Value | None] = {}
        self._module_instances: dict[int, Value | None] = {}  # module-level instances of project classes
        self._plain_calls = {}  # memoised helper calls (typed on `Calls`)
        self._cutoffs = 0  # calls not followed (depth limit, recursion) so far
        self._open_calls = []  # the followed calls in progress, innermost last (typed on `Calls`)
        self.carrying_calls: set[int] = set()  # ids of project-call nodes whose arguments carry log-probs, KL or a model
        self.pairing_calls: set[int] = set()  # ... whose arguments pair the policy's log-probs with the reference's
        self.choosing_calls: set[int] = set()  # calls whose callee the receiver's class or a run-time key picks
        self.followed_with_roles: set[int] = set()  # definitions a caller ran with log-probs among its arguments
        self.passes_choice: set[int] = set()  # calls whose callee chose by what the caller's own caller passed
        self.forwards: dict[str, set[bool]] = {}  # network name -> whether its forwards ran with gradient tracking on
        self.reference_networks: dict[str, str] = {}  # networks that are the reference by dataflow -> the evidence
        self.noted_roles: set[tuple] = set()  # (node id, role, evidence) of the `RoleEvidence` recorded
        self.unit_forwards: dict[str, set[bool]] = {}  # as `forwards`, in the entry point running
        self.forward_log: list[tuple[str, bool]] = []  # every forward noted, in order (replayed by memoised calls)
        self.reference_candidates: dict[str, list[str]] = {}  # network -> the networks trained beside it
