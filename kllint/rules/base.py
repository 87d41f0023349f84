"""What rules share: the context that turns analysis anchors into diagnostics in the checked file."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from kllint.analysis import terms as tm

from kllint.analysis.algebra import Algebra
from kllint.analysis.conditions import narrowed
from kllint.analysis.facts import KLTerm
from kllint.analysis.module import ModuleInfo
from kllint.analysis.values import Anchor
from kllint.diagnostics import Diagnostic, Estimate, Fix, TraceStep
from kllint.rules.registry import BY_CODE
from kllint.rules.trace import Step, render
from kllint.rules.wording import ESTIMATOR_WORDS, merge_paths, short_name, unnamed_defaults


@dataclass
class RuleContext:
    """Per-file state for the rules: the entry module, the algebra, found diagnostics."""

    entry: ModuleInfo
    algebra: Algebra
    modules: dict[str, ModuleInfo] = field(default_factory=dict)
    name_roles: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)
    differentiating: set[str] = field(default_factory=set)  # functions whose results are differentiated
    carrying_calls: set[int] | None = None  # call sites that hand log-probs, KL or a model to a callee
    pairing_calls: set[int] = field(default_factory=set)  # ... that hand it the log-ratio (policy and reference paired)
    choosing_calls: set[int] = field(default_factory=set)  # calls whose callee the receiver's class or a key picks
    passes_choice: set[int] = field(default_factory=set)  # calls passing on their caller's choice to the callee
    differentiated: set = field(default_factory=set)  # KL-term symbols found in a differentiated value
    named_rewards: dict = field(default_factory=dict)  # KL-term symbol -> the first reward fact storing it
    losses: list = field(default_factory=list)  # (loss fact, its value expanded), see `kllint.rules.flow`
    line_length: int = 88  # the longest line a fix writes (`line-length`)
    choices: list = field(default_factory=list)  # `BranchChoice` facts: where the rollout log-probs come in
    direct_forwards: set = field(default_factory=set)  # node ids of reference forwards seen with no call stack
    about: dict = field(default_factory=dict)  # (code, place) of a finding -> the KL-term symbols it judges
    _pending: dict = field(default_factory=dict)
    _once: set = field(default_factory=set)

    def first(self, code: str, key: object) -> bool:
        """True the first time (code, key) is seen: for findings reported once per KL term."""
        if (code, key) in self._once:
            return False
        self._once.add((code, key))
        return True

    def localize(self, anchor: Anchor, returned_through: Iterable[Anchor] = ()) -> tuple[Anchor, tuple[Step, ...]]:
        """The place of a finding: where the estimate is written, in whichever module.

        One root cause, one place, whichever module's entry point runs it: the anchor itself,
        unless the call that runs the anchor's function made the estimate what it is, then that
        call (the anchor becomes a step), and so on outwards. A call makes it so when the
        receiver's class or a run-time key picks its callee (`choosing_calls`: a hook, a
        template method, a registry entry); or when the estimate comes back from it as such
        (`returned_through`: the calls it crossed before meeting other terms) and the call chose
        it by an argument (`Anchor.chosen`: `kl_penalty(logp, ref, mode)` running its `if mode
        == "k3":`; `passes_choice`: a call handing that argument on to another helper) or handed
        the callee the log-ratio already paired (`pairing_calls`). An estimate its helper turns
        into a loss or a reward itself stays in the helper."""
        crossed = {site.node_id for site in returned_through}
        place, steps = anchor, ()
        while place.stack:
            site = place.stack[-1]
            by_argument = site.node_id in crossed and (place.chosen or place.node_id in self.passes_choice
                                                       or site.node_id in self.pairing_calls)
            if not (by_argument or site.node_id in self.choosing_calls):
                break
            steps += (Step(place, f"in `{place.function}`" if place.function else "here"),)
            place = site
        return place, steps

    def report(self, code: str, anchor: Anchor, message: str, help: str = "", trace: Iterable[Step | TraceStep] = (),
               call_sites: Iterable[Anchor] = (), call_stack: Iterable[Anchor] = (), fix: Fix | None = None,
               estimate: Estimate | None = None, fallback: Anchor | None = None, variant: str = "",
               subject: str = "", root: object = None, clamped: Step | None = None, about: object = None) -> None:
        """Record a finding at `anchor` (localised in the checked file). `message` may hold
        `{subject}`, the estimate's words (`subject`); findings of one code at one place from
        several paths are merged, each configuration said once (`diagnostics`).

        `root` names the estimate and sink a finding is about; `clamped`, the step where that
        estimate was clamped on this path, after it was formed. An estimate that reaches the sink
        clamped on one path and unclamped on another is one root cause: `diagnostics` keeps the
        finding of the unclamped path and shows the clamp as a step of its trace. `about`: the
        KL-term symbol judged (for `--show-sites`, which lists it with the estimate)."""
        if narrowed(anchor.conditions) is None:
            return  # no configuration takes this path
        located = self.localize(anchor, call_sites)
        if located is None:
            return
        primary, extra = located
        if primary is not anchor and fix is not None and fix.replacement:
            fix = Fix("display-only", fix.description)
        info = BY_CODE[code]
        trace = tuple(trace)
        lines = {(s.path, s.line) if isinstance(s, TraceStep) else (s.anchor.path, s.anchor.span.line) for s in trace}
        extra = tuple(s for s in extra if (s.anchor.path, s.anchor.span.line) not in lines)
        key = (code, primary.span)
        if about is not None:
            self.about.setdefault((code, primary.path, primary.span), set()).add(about)
        # a path whose root cause is not named is never a clamped echo: it keeps its finding
        path = (anchor.conditions, variant, subject, fix, (code, root) if root is not None else None, clamped)
        if key in self._pending:
            _, paths, steps = self._pending[key]
            paths.append(path)
            # each further estimate merged into this finding keeps the step where it is formed
            if anchor is not primary and anchor.module is not None and (anchor.path, anchor.span.line) not in {
                    (s.path, s.line) if isinstance(s, TraceStep) else (s.anchor.path, s.anchor.span.line) for s in steps}:
                steps.append(Step(anchor, f"{short_name(variant)} estimate" if variant else "the estimate"))
            return
        diagnostic = Diagnostic(code, info.name, info.severity, primary.path, primary.span,
                                message, help, (), fix, estimate)
        self._pending[key] = (diagnostic, [path], list(extra + trace))

    def diagnostics(self) -> list[Diagnostic]:
        """The findings, one per code and place. The configurations that lead to one are merged
        into its message, each value named once (`when kl_loss_type is 'k3' or 'low_var_kl'`);
        when they lead to different estimators, the message says which one each gives."""
        out = []
        self._merge_clamped_echoes()
        for diagnostic, paths, steps in self._pending.values():
            diagnostic = replace(diagnostic, trace=render(steps))
            fixes = {p[3] for p in paths}
            fix = diagnostic.fix
            if len(fixes) > 1 and fix is not None and fix.replacement:
                # the paths to this place need different rewrites (branches, modes): none fits all
                fix = Fix("display-only", fix.description)
            out.append(replace(diagnostic, message=_merged_message(diagnostic, paths), fix=fix))
        return sorted(out, key=lambda d: d.sort_key)

    def _merge_clamped_echoes(self) -> None:
        """Drop the findings that only repeat another's root cause through a clamp (every path to
        them clamps an estimate that also reaches the same sink unclamped, reported elsewhere),
        and add their clamp steps to the trace of the finding that stays."""
        unclamped: dict = {}
        for key, (_, paths, _) in self._pending.items():
            for *_, root, clamp in paths:
                if clamp is None and root is not None:
                    unclamped.setdefault(root, key)
        for key, (_, paths, _) in list(self._pending.items()):
            if not all(clamp is not None and root is not None and unclamped.get(root, key) != key
                       for *_, root, clamp in paths):
                continue
            del self._pending[key]
            for *_, root, clamp in paths:
                steps = self._pending[unclamped[root]][2]
                if all(getattr(s, "anchor", None) != clamp.anchor for s in steps):
                    steps.append(clamp)


def _merged_message(diagnostic: Diagnostic, paths: list[tuple]) -> str:
    variants = list(dict.fromkeys(p[1] for p in paths if p[1]))
    subjects = list(dict.fromkeys(p[2] for p in paths if p[2]))
    unconditional = any(not p[0] for p in paths)
    if len(variants) <= 1:
        message = diagnostic.message.replace("{subject}", subjects[0] if subjects else "the KL estimate")
        if unconditional:
            return message
        when = merge_paths([p[0] for p in paths])
        return f"{message} (when {when})" if when else message
    message = diagnostic.message.replace("{subject}", "the KL estimate")
    if unconditional:
        return f"{message}; the estimate is {_or(short_name(v) for v in variants)} here, depending on the branch"
    parts = []
    for variant in variants:
        when = merge_paths([p[0] for p in paths if p[1] == variant], defaults=False)
        parts.append(f"{short_name(variant)} when {when}" if when else short_name(variant))
    return f"{message}; the estimate is {', '.join(parts)}{unnamed_defaults([p[0] for p in paths])}"


def _or(words) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def sign_of(expr: tm.Term) -> int:
    """1 or -1 when the assumptions of its symbols prove `expr` positive or negative, else 0
    (a product with a symbol that may be zero is neither)."""
    sign = _SIGNS.get(expr)
    if sign is None:
        if len(_SIGNS) > 20_000:
            _SIGNS.clear()
        sign = _SIGNS[expr] = _sign_of(expr)
    return sign


_SIGNS: dict[tm.Term, int] = {}


def _sign_of(expr: tm.Term) -> int:
    factors = expr.args if expr.is_Mul else (expr,)
    if any(factor.is_Symbol and factor.is_zero is not False for factor in factors):
        return 0
    if expr.is_positive:
        return 1
    if expr.is_negative:
        return -1
    return 0


@dataclass(frozen=True)
class Place:
    """One occurrence of a KL term in a value: its sign there (0: unknown), how it is reduced
    (`none`, `sum` over tokens, `rtg` inside reward-to-go / returns), and whether it multiplies
    a term that carries the policy's gradient (then it is a score-function coefficient, a reward,
    and `reduced` counts only the reductions inside the coefficient). `affine`: linear but for
    functions the analysis cannot see into (`whiten(advantages)`). `scaled`: linear but for batch
    statistics that scale it (group normalisation `(A - mean(A)) / std(A)`); `in_scale`: the
    occurrence is inside such a batch statistic (the `std(A)` itself). `token_coefficient`:
    the live factor multiplies it inside its own token reduction."""

    sign: int
    reduced: str
    coefficient_of_live: bool
    linear: bool = True
    affine: bool = True
    token_coefficient: bool = False
    scaled: bool = True
    in_scale: bool = False


def occurrences(expr: tm.Term, algebra: Algebra) -> dict[tm.Symbol, list[Place]]:
    """Where each KL term occurs in `expr`."""
    found: dict[tm.Symbol, list[Place]] = {}
    _walk_occurrences(expr, 1, "none", False, (True, True, True, False), 0, algebra, found, False)
    return found


def _walk_occurrences(node: tm.Term, sign: int, reduced: str, live: bool, linear: tuple[bool, bool, bool, bool], depth: int,
                      algebra: Algebra, found: dict[tm.Symbol, list[Place]], live_here: bool) -> None:
    """`linear` is (linear, affine, scaled, in_scale), see `Place`; `live_here`: a live factor multiplies the node
    inside the innermost reduction around it."""
    # a module-level function, not a nested one: a recursive closure is a reference cycle that
    # would keep the whole analysis of a file alive until the garbage collector runs
    if depth > 60:
        return
    if node in algebra.kterms:
        found.setdefault(node, []).append(Place(sign, reduced, live, linear[0], linear[1], live_here, linear[2], linear[3]))
        return

    def walk(child: tm.Term, child_sign: int, child_reduced: str, child_live: bool, keep: bool,
             child_here: bool, through_call: bool = False, through_scale: bool = False,
             into_scale: bool = False) -> None:
        child_linear = (linear[0] and keep, linear[1] and (keep or through_call), linear[2] and (keep or through_scale),
                        linear[3] or into_scale)
        _walk_occurrences(child, child_sign, child_reduced, child_live, child_linear, depth + 1, algebra, found,
                          child_here)

    reduction = algebra.table.reductions.get(node)
    if reduction is not None:
        walk(reduction.inner, sign, "rtg" if reduction.kind == "rtg" or reduced == "rtg" else "sum", live, True,
             False)
        return
    if isinstance(node, tm.Add):
        for arg in node.args:
            walk(arg, sign, reduced, live, True, live_here)
    elif isinstance(node, tm.Mul):
        for index, arg in enumerate(node.args):
            others = tm.Mul(*(a for i, a in enumerate(node.args) if i != index))
            kl_factor = bool(algebra.kl_symbols(others))
            live_others = algebra.live(others)
            # a coefficient of the score function counts only the reductions inside it: the sum
            # over tokens of `logp_t * c_t` still gives each token its own coefficient
            coefficient = not live and live_others
            # whitening `(A - mean(A)) * rsqrt(var(A))`: a batch scale keeps A's terms affine
            scaled = kl_factor and all(_batch_scale(a, algebra) for i, a in enumerate(node.args)
                                       if i != index and algebra.kl_symbols(a))
            # a score-function coefficient's sign is that of its weight on the live log-probs
            factor = tm.Mul(*(a for a in others.args if not algebra.live(a))) if coefficient and others.is_Mul \
                else (tm.ONE if coefficient else others)
            walk(arg, sign * sign_of(factor), "none" if coefficient else reduced, live or live_others,
                 not kl_factor, live_here or live_others, through_call=scaled, through_scale=scaled,
                 into_scale=kl_factor and bool(algebra.kl_symbols(arg)) and _batch_scale(arg, algebra))
    elif isinstance(node, tm.Pow):
        base, exponent = node.args
        # a positive normaliser (x / n) keeps the term linear; x**2, 1/x do not
        walk(base, sign if exponent == 1 else 0, reduced, live, exponent == 1, live_here)
        walk(exponent, 0, reduced, live, False, live_here)
    else:
        opaque = isinstance(node, tm.Undefined) and node.name.startswith("call_") and len(node.args) == 1
        for arg in node.args:
            walk(arg, 0, reduced, live, False, live_here, through_call=opaque)


_SCALE_CALLS = frozenset({"call_rsqrt", "call_std", "call_var", "call_sqrt", "call_norm"})


def _batch_scale(factor: tm.Term, algebra: Algebra) -> bool:
    """A positive batch statistic that scales a value: `rsqrt(var)`, `1 / (std + eps)`,
    `1 / sum(mask)` (advantage whitening and normalisers), not a per-token function."""
    if isinstance(factor, tm.Undefined):
        return factor.name == "call_rsqrt"
    if isinstance(factor, tm.Pow) and factor.exp.is_number and factor.exp.is_negative:
        base = factor.base
        terms = base.args if isinstance(base, tm.Add) else (base,)
        return all(t.is_number or (isinstance(t, tm.Undefined) and t.name in _SCALE_CALLS)
                   or (isinstance(t, tm.Pow) and t.exp == tm.HALF and _statistic(t.base, algebra))
                   or _statistic(t, algebra) for t in terms)
    return False


def _statistic(expr: tm.Term, algebra: Algebra) -> bool:
    """A reduction (a batch sum or mean), a positive symbol (a token count) or a product of them."""
    if isinstance(expr, tm.Symbol):
        return algebra.table.is_reduction(expr) or bool(expr.is_positive)
    return isinstance(expr, tm.Mul) and all(a.is_number and a.is_positive or _statistic(a, algebra)
                                            for a in expr.args)


def returned_through(term: KLTerm) -> tuple[Anchor, ...]:
    """Every call site the estimate was returned through, still an estimate, on any path."""
    return tuple(term.call_sites) + tuple(site for chain in term.other_call_sites for site in chain)


def estimator_words(term: KLTerm) -> str:
    """The estimate in words: `k3 (exp(ref - logp) - (ref - logp) - 1)`."""
    if term.estimator is None:
        return "a KL estimate"
    words = ESTIMATOR_WORDS.get(term.estimator.name, term.estimator.name)
    return f"{words} plus a constant" if term.estimator.offset else words
