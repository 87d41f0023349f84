"""Abstract values of the interpreter.

A `Tensor` is a term (`kllint.analysis.terms`) over role symbols (see `symbolic`), opaque symbols (anything
the analysis does not model: advantages, coefficients, masks) and KL-term symbols (a KL estimate
that met other terms; its meaning is kept in a `KLTerm`). `Alts` holds the alternatives of a value
that depends on a branch (if/else, mode strings from config).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from contextvars import ContextVar
from functools import cached_property
from typing import Any, Callable

import libcst as cst
from kllint.analysis import terms as tm

from kllint.analysis.symbolic import InternalSymbol, KLTermSymbol, symbols_of
from kllint.diagnostics import Span, TraceStep

MAX_ALTERNATIVES = 16


@dataclass(frozen=True)
class Condition:
    """A branch condition on a mode variable: `name` takes one of `options` (or not, if negated).

    `name` is the value the condition is about as the code reads it where it comes from: the
    configuration value (`self.config.kl_loss_type`, `args.kl_estimator`) when the tested
    variable holds one, else the tested expression; `tested` is the expression the branch tests
    (a helper's parameter `kind`); `default` the project default when visible."""

    name: str
    options: tuple[str, ...]
    negated: bool = False
    default: str | None = None
    tested: str = ""
    predicate: str = "in"  # `in`: takes one of `options`; `endswith` / `startswith`: ends / starts with options[0]
    from_config: bool = False  # `name` is a configuration value (the same text is the same value)

    def admits(self, option: str) -> bool:
        """Whether the value being `option` satisfies this condition."""
        if self.predicate == "endswith":
            holds = option.endswith(self.options[0])
        elif self.predicate == "startswith":
            holds = option.startswith(self.options[0])
        else:
            holds = option in self.options
        return holds != self.negated

    def negate(self) -> "Condition":
        """The condition of the other branch."""
        return replace(self, negated=not self.negated)


@dataclass(frozen=True, init=False)
class Anchor:
    """Where a value was formed: the expression the user must rewrite. Its span is computed on
    first use (positions of a module are costly and most anchors are never reported)."""

    path: str
    node_id: int
    node: cst.CSTNode = field(compare=False, hash=False, repr=False)
    module: Any = field(compare=False, hash=False, repr=False)
    conditions: tuple[Condition, ...] = ()
    function: str = ""
    root: Any = field(default=None, compare=False, hash=False, repr=False)
    # formed in a branch the caller chose by an argument (`kl_penalty(..., mode)` running its
    # `if mode == "k3":`): the call site is where the choice, and the finding, is made
    chosen: bool = field(default=False, compare=False, hash=False, repr=False)
    # the call sites of the frames it was formed in, outermost first (a memoised call re-stated
    # at another call site keeps those of its first computation)
    stack: tuple = field(default=(), compare=False, hash=False, repr=False)

    def __init__(self, path: str, node_id: int, node: cst.CSTNode, module: Any, conditions: tuple[Condition, ...] = (),
                 function: str = "", root: Any = None, chosen: bool = False, stack: tuple = ()) -> None:
        # one update instead of a frozen dataclass's attribute-by-attribute `object.__setattr__`:
        # an anchor is made at most operations of the interpreter
        self.__dict__.update(path=path, node_id=node_id, node=node, module=module, conditions=conditions,
                             function=function, root=root, chosen=chosen, stack=stack)

    def with_conditions(self, conditions: tuple[Condition, ...], chosen: bool = False) -> "Anchor":
        """The same place under `conditions` (chosen by the caller if it was, or if `chosen`)."""
        return Anchor(self.path, self.node_id, self.node, self.module, conditions, self.function, self.root,
                      self.chosen or chosen, self.stack)

    @cached_property
    def span(self) -> Span:
        return self.module.span(self.node, self.root)

    def step(self, note: str) -> TraceStep:
        return TraceStep(self.path, self.span.line, self.span.column, note)


@dataclass(frozen=True)
class Formed:
    """A place where a value on the way to a KL estimate was formed, with the expression formed
    there (what it is, a log-ratio, a ratio, an estimator, a clamp, is for the rules to say)."""

    anchor: Anchor
    expr: tm.Term = field(compare=False, hash=False)


@dataclass(frozen=True)
class Reduced:
    """Where a value carrying a KL estimate was first reduced: `kind` is `sum` (a sum or mean)
    or `rtg` (a cumulative sum, reward-to-go); `at` is the call stack there, ending with the
    reducing call (a call of a project helper in it is where the reduction happened, as seen
    from its caller)."""

    kind: str
    at: tuple[Anchor, ...]


@dataclass(frozen=True, init=False)
class Tensor:
    """A tensor-valued expression.

    `anchor`: where the KL-relevant (pure) expression was last formed; `trace`: earlier steps;
    `space`: `logprob`, `prob`, `logits` or None (for kl_div input checks); `kind`: `count` for a
    sum of a mask (a positive normaliser), `mask` for a mask, and markers of a log-softmax or a
    token selection written out by hand (`tensor_calls`): `vocab_max` (a maximum over the
    vocabulary axis, `vocabulary_max`), `exp_logits` (exp of logits), `partition` (their sum over
    the vocabulary), `log_normaliser`, `one_hot` / `one_hot_selected`, `distribution` (the
    parameter of a `Categorical`), `pieces` (a tensor cut by `chunk` / `split`); `vocab`: has a
    vocabulary axis.
    `call_sites`: call sites the value crossed on its way back to the caller (innermost first).
    `assumed`: the policy role comes from a name (a parameter `logp`), so its gradient is assumed.
    `trace` holds `Formed` steps; `reduced`: where the (still pure) estimate was first reduced.
    """

    expr: tm.Term
    anchor: Anchor | None = None
    trace: tuple["Formed", ...] = ()
    space: str | None = None
    kind: str | None = None
    vocab: bool = False
    call_sites: tuple[Anchor, ...] = ()
    assumed: bool = False  # its policy log-prob role comes from a name, not from a forward pass
    reduced: Reduced | None = field(default=None, compare=False, hash=False)  # a pure estimate's first reduction
    # its roles come from names only (a parameter or key named as log-probs), not from a forward
    named: bool = field(default=False, compare=False, hash=False)

    def __init__(self, expr: tm.Term, anchor: Anchor | None = None, trace: tuple["Formed", ...] = (),
                 space: str | None = None, kind: str | None = None, vocab: bool = False,
                 call_sites: tuple[Anchor, ...] = (), assumed: bool = False, reduced: "Reduced | None" = None,
                 named: bool = False) -> None:
        self.__dict__.update(expr=expr, anchor=anchor, trace=trace, space=space, kind=kind, vocab=vocab,
                             call_sites=call_sites, assumed=assumed, reduced=reduced, named=named)  # as `Anchor` does

    def with_(self, **changes: Any) -> "Tensor":
        """A copy with `changes` (field name -> value), as `dataclasses.replace` makes it, without
        its per-call inspection of the fields (tensors are copied at most operations)."""
        unknown = changes.keys() - _TENSOR_FIELDS
        if unknown:
            raise TypeError(f"Tensor has no field {sorted(unknown)[0]!r}")
        copy = object.__new__(Tensor)
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(changes)
        return copy


_TENSOR_FIELDS = frozenset(f.name for f in fields(Tensor))


@dataclass(frozen=True)
class Model:
    """A network (callable) whose outputs are log-prob-like tensors of `role`."""

    role: str  # policy | reference
    name: str = ""
    frozen: bool = False


@dataclass(frozen=True)
class FunctionRef:
    """A function defined in the project (resolved lazily through the index). `definition` is
    its libcst node (a nested definition, a lambda) or, for a top-level function or a method, a
    `kllint.analysis.definitions.LazyFunction`, parsed only when `node` is read."""

    qualname: str
    definition: Any = field(compare=False, hash=False, repr=False)
    module: Any = field(compare=False, hash=False, repr=False)
    bound_self: Any = field(default=None, compare=False, hash=False, repr=False)
    class_name: str | None = None
    owner: Any = field(default=None, compare=False, hash=False, repr=False)  # the defining ClassRef

    @property
    def node(self) -> cst.FunctionDef | cst.Lambda | None:
        """The function's libcst node, parsed on first use (None when libcst rejects it)."""
        definition = self.definition
        return definition if isinstance(definition, (cst.FunctionDef, cst.Lambda)) else definition.node


@dataclass(frozen=True)
class Partial:
    """`functools.partial(function, *args, **kwargs)`: calling it calls `function` with these first."""

    function: Any
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Keyed:
    """A callable read from a mapping by a key only known at run time (`LOSSES[cfg.mode]`):
    calling it runs `function` under `condition` (the key takes this entry's key)."""

    function: Any
    condition: Condition


@dataclass(frozen=True)
class ClassRef:
    """A class defined in the project (`self` inside its methods is an `Instance`). `node` is a
    `kllint.analysis.definitions.LazyClass` for a top-level class, a `cst.ClassDef` for a nested one."""

    name: str
    node: Any = field(compare=False, hash=False, repr=False)
    module: Any = field(compare=False, hash=False, repr=False)


STARRED = "*"  # in an instance's `state`: its constructor call passed `*args` or `**kwargs`


@dataclass(frozen=True)
class Instance:
    """`self` (or an instance) of a project class. `state`: the constructor's arguments that are
    known without running anything (strings, numbers, dicts and tuples of them, classes), by the
    name of the `__init__` parameter they bind, any other argument as `Unknown` (`STARRED`: the
    call also passed `*args` or `**kwargs`); empty when no argument is known."""

    cls: ClassRef
    state: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ModuleRef:
    """An imported module or external name, by qualified name (`torch.nn.functional`)."""

    qualname: str


@dataclass(frozen=True)
class Literal:
    """A Python constant (str, int, float, bool, None)."""

    value: Any


@dataclass(frozen=True)
class ConfigValue:
    """A value read from configuration: unknown, with the project default when visible.
    `source`: the expression it was read from, as written (`self.config.kl_loss_type`)."""

    name: str
    default: Any = None
    source: str | None = field(default=None, compare=False, hash=False)
    suffix: str = ""  # the value read with this suffix removed (`mode[:-1]` where `mode.endswith("+")`)
    prefix: str = ""  # the value read with this prefix removed

    def spelled(self, option: str) -> str:
        """The configured value that reads as `option` here."""
        return self.prefix + option + self.suffix


@dataclass(frozen=True)
class Sequence:
    """A tuple or list of values."""

    items: tuple[Any, ...]


@dataclass(frozen=True)
class Mapping:
    """A dict with literal string keys."""

    items: tuple[tuple[str, Any], ...]
    name: str = ""

    def get(self, key: str) -> Any:
        for k, v in self.items:
            if k == key:
                return v
        return None


@dataclass(frozen=True)
class GradOf:
    """`jax.grad(f)` / `jax.value_and_grad(f)`: calling it differentiates `f`'s result."""

    function: Any
    has_aux: bool = False
    transform: str = field(default="jax.grad", compare=False, hash=False)  # its qualified name
    argnums: tuple[int, ...] | None = (0,)  # the differentiated positions (None: not known, any)


@dataclass(frozen=True)
class Unknown:
    """Nothing is known (not a tensor we can reason about)."""

    name: str = ""


@dataclass(frozen=True)
class Alts:
    """Alternative values (branches); never nested, at most MAX_ALTERNATIVES."""

    options: tuple[Any, ...]


Value = Any


def alternatives(value: Value) -> tuple[Value, ...]:
    return value.options if isinstance(value, Alts) else (value,)


def join(*values: Value) -> Value:
    """Merge values from branches, dropping duplicates."""
    if len(values) == 1 and values[0] is not None:
        return values[0]  # a single value, or alternatives already merged
    options: list[Value] = []
    keys: set = set()
    plain_seen = False
    for option in _round_robin(values):
        if option is None:
            continue
        if plain(option):
            # alternatives that carry no log-prob, KL or estimate are all alike to the rules
            if plain_seen:
                continue
            plain_seen = True
        key = identity_key(option)
        if key not in keys:
            keys.add(key)
            options.append(option)
    if not options:
        return Unknown()
    if len(options) == 1:
        return options[0]
    if len(options) > MAX_ALTERNATIVES:
        options = _diverse(options)
    return Alts(tuple(options[:MAX_ALTERNATIVES]))


def _round_robin(values: tuple[Value, ...]) -> list[Value]:
    """The options of `values`, the first of each value, then the second of each, and so on: when
    alternatives are capped, every joined value (each branch, each `return`) keeps a share."""
    lists = [alternatives(v) for v in values if v is not None]
    if len(lists) == 1 or sum(map(len, lists)) <= MAX_ALTERNATIVES:
        return [option for options in lists for option in options]
    longest = max((len(options) for options in lists), default=0)
    return [options[i] for i in range(longest) for options in lists if i < len(options)]


KL_CONTENT: ContextVar[Callable[[Any], frozenset] | None] = ContextVar("kl_content", default=None)


def _signature(value: Value) -> tuple:
    """What distinguishes alternatives for the rules: the KL terms and estimate they carry (also
    inside reductions, through the running analysis' `KL_CONTENT`)."""
    if isinstance(value, Tensor):
        content = KL_CONTENT.get()
        if content is not None:
            return ("tensor", content(value.expr), value.anchor.node_id if value.anchor else None)
        kl = frozenset(s.name for s in symbols_of(value.expr) if isinstance(s, KLTermSymbol))
        return ("tensor", kl, value.anchor.node_id if value.anchor else None)
    if isinstance(value, Sequence) and value.items:  # `return loss, metrics`: by what the items hold
        return ("sequence",) + tuple(_signature(item) for item in value.items[:2])
    return (type(value).__name__,)


def _diverse(options: list[Value]) -> list[Value]:
    """Alternatives reordered so that each distinct KL content comes before any repeat."""
    first, rest, seen = [], [], set()
    for option in options:
        signature = _signature(option)
        (rest if signature in seen else first).append(option)
        seen.add(signature)
    return first + rest


def plain(value: Value) -> bool:
    if isinstance(value, Unknown):
        return True
    if isinstance(value, Tensor):
        return value.anchor is None and value.kind is None and value.space is None and _opaque(value.expr)
    return False


_OPAQUE: dict[Any, bool] = {}


def _opaque(expr: Any) -> bool:
    """Built only from opaque symbols (no role, reduction, KL term or loop placeholder); memoised."""
    found = _OPAQUE.get(expr)
    if found is None:
        if len(_OPAQUE) > 20_000:
            _OPAQUE.clear()
        found = _OPAQUE[expr] = all("__" in s.name and not isinstance(s, InternalSymbol) for s in symbols_of(expr))
    return found


def identity_key(value: Value) -> object:
    """A hashable identity for de-duplicating alternatives (terms hash structurally)."""
    if isinstance(value, Tensor):
        return ("tensor", value.expr, value.anchor)
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return value
