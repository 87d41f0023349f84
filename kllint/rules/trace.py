"""The numbered trace of a finding: from the log-probs to the estimate, then where the estimate
goes (returned by a helper, reduced over tokens, added to the loss, differentiated), each step
saying what happens there.

The analysis observes the places (`Formed` steps with the expression formed there, call sites,
the first reduction, where the term joins another, the sink and how it differentiates); the
words are chosen here. Steps are grouped by the function they are in (in the order the value
passes through them) and in source order within each function; notes of one line are joined.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import libcst as cst
from kllint.analysis import terms as tm

from kllint.analysis import frameworks as fw
from kllint.analysis.algebra import ANALYTIC_KL
from kllint.analysis.estimators import classify_value
from kllint.analysis.facts import KLTerm, LossFact, RewardFact, SinkKind
from kllint.analysis.module import dotted_name
from kllint.analysis.symbolic import LP, LPD, OLD, REF, Clamp, SymbolTable
from kllint.analysis.values import Anchor
from kllint.diagnostics import TraceStep
from kllint.rules.wording import as_code, short_name

ROLE_WORDS = {LP: "the policy's log-probs", LPD: "the policy's log-probs, detached", REF: "the reference log-probs",
              OLD: "the rollout policy's log-probs"}


class Step(NamedTuple):
    """A trace step before it is placed: where, and what happens there."""

    anchor: Anchor
    note: str


def _unclamped(expr: tm.Term) -> tuple[tm.Term, bool]:
    if isinstance(expr, Clamp):
        return expr.args[0], True
    return expr, False


_PAIRS = ((LP, REF, "pi", "pi_ref"), (LPD, REF, "pi", "pi_ref"), (LP, OLD, "pi", "pi_old"),
          (LPD, OLD, "pi", "pi_old"), (LP, LPD, "pi", "stopgrad(pi)"))
_RATIOS = tuple((tm.expand(top - bottom), tm.expand(bottom - top), top_name, bottom_name)
                for top, bottom, top_name, bottom_name in _PAIRS)
_EXPANDED: dict[tm.Term, tm.Term] = {}


def _expanded(expr: tm.Term) -> tm.Term:
    """`tm.expand(expr)`, memoised (trace steps describe the same values again and again)."""
    found = _EXPANDED.get(expr)
    if found is None:
        if len(_EXPANDED) > 20_000:
            _EXPANDED.clear()
        found = _EXPANDED[expr] = tm.expand(expr)
    return found


def _log_ratio_words(expr: tm.Term, table: SymbolTable) -> str | None:
    """`the log-ratio log(pi / pi_ref)` for logp - ref (either sign, detached or not, summed;
    also against the rollout policy)."""
    expr, clamped = _unclamped(expr)
    summed = ""
    if expr in table.reductions and table.reductions[expr].kind == "sum":
        expr, summed = table.reductions[expr].inner, ", summed over tokens"
    expanded = _expanded(expr)
    for forward, backward, top_name, bottom_name in _RATIOS:
        if expanded == forward:
            return f"the log-ratio log({top_name} / {bottom_name}){summed}" + (", clamped" if clamped else "")
        if expanded == backward:
            return f"the log-ratio log({bottom_name} / {top_name}){summed}" + (", clamped" if clamped else "")
    return None


def describe_value(expr: tm.Term, table: SymbolTable, estimate_seen: set[str], log_ratio_seen: bool) -> str:
    """What a value on the way to a KL estimate is: the policy's log-probs, the log-ratio, the
    ratio, `k3 built from the log-ratio`, `k3, clamped`. `estimate_seen` collects the estimators
    already described (the first mention says what it is built from)."""
    core, clamped = _unclamped(expr)
    if core in ROLE_WORDS:
        return ROLE_WORDS[core]
    ratio = _log_ratio_words(expr, table)
    if ratio is not None:
        return ratio
    if isinstance(core, tm.exp):
        inner = _log_ratio_words(core.args[0], table)
        if inner is not None:
            direction = inner[len("the log-ratio log("):].split(")", 1)[0]
            what = "the importance ratio" if "pi_old" in direction or "stopgrad" in direction else "the ratio"
            sequence = " of the sequence" if "summed" in inner else ""
            return f"{what} {direction}{sequence} (exp of the log-ratio)" + (", clamped" if clamped else "")
    if core in table.reductions and table.reductions[core].inner in ROLE_WORDS:
        return ROLE_WORDS[table.reductions[core].inner] + ", summed over tokens"
    if isinstance(core, ANALYTIC_KL):
        return "the analytic KL(pi || ref) over the vocabulary"
    match = classify_value(expr, table)
    if match is not None:
        name = short_name(match.name)
        # `k3 * exp(logp - old)` has the value of k3 on-policy
        present = table.role_symbols(core)
        ratio = len(present & {LP, LPD, OLD}) >= 2  # two of the policy's log-probs: a ratio of them
        weighted = ratio and match.name not in ("reference-ratio", "surrogate")
        suffix = (", times the importance ratio" if weighted else "") + (", clamped" if clamped else "")
        if match.name not in estimate_seen:
            estimate_seen.add(match.name)
            return (f"{name} built from the log-ratio" if log_ratio_seen else f"{name} estimate") + suffix
        return f"{name}{suffix}" if suffix else f"{name} again"
    return "computed from the log-probs"


def at_anchor(term: KLTerm, table: SymbolTable) -> tm.Term:
    """The estimate as formed at its anchor: without the reductions applied to it afterwards
    (a pure estimate reduced by `agg_loss` keeps its anchor) and without a constant factor."""
    expr = term.expr
    if term.reduced is None:
        return expr
    for _ in range(4):
        factor, rest = expr.as_coeff_Mul() if isinstance(expr, tm.Mul) else (1, expr)
        if rest in table.reductions:
            expr = table.reductions[rest].inner
        else:
            break
    return expr


def root_cause(term: KLTerm, table: SymbolTable, sink: Anchor) -> tuple[tuple, Step | None]:
    """What a finding on `term` reaching `sink` is about: the place where the estimate was formed
    before a clamp applied to it last (`x.clamp(...)` keeps the estimate: a clamp that may or may
    not run is the same root cause either way), and the step of that clamp (None if the estimate
    is not a clamp of the value formed before it)."""
    expr = at_anchor(term, table)
    if isinstance(expr, Clamp) and term.trace and term.trace[-1].expr == expr.args[0]:
        before = term.trace[-1].anchor
        return (before.path, before.node_id, sink.node_id), Step(term.anchor, "also used clamped")
    return (term.anchor.path, term.anchor.node_id, sink.node_id), None


def formation_steps(term: KLTerm, table: SymbolTable, estimate: str | None = None) -> list[Step]:
    """The places the estimate was built at, ending with the estimate itself (one step per line:
    the value completed there). `estimate`: the note of the estimate's own step instead of its
    description (a straight-through term)."""
    seen: set[str] = set()
    log_ratio = False
    steps = []
    here = (term.anchor.path, term.anchor.span.line)
    last: dict[tuple[str, int], object] = {}
    for item in term.trace:
        key = (item.anchor.path, item.anchor.span.line)
        if key != here:
            last.pop(key, None)
            last[key] = item  # the value completed on that line
    # helpers first (where the log-probs are computed), then the estimate's own function; source order in each
    home = _where(term.anchor)
    formed = sorted(last.values(), key=lambda f: (_where(f.anchor) == home, f.anchor.path, f.anchor.span.line,
                                                  f.anchor.span.column))
    for item in formed:
        note = describe_value(item.expr, table, seen, log_ratio)
        log_ratio = log_ratio or note.startswith("the log-ratio")
        steps.append(Step(item.anchor, note))
    if estimate is None:
        if term.estimator is None:
            estimate = "a KL term whose estimator is not visible here"
        else:
            estimate = describe_value(at_anchor(term, table), table, seen, log_ratio)
            if term.estimator.name == "k1" and estimate.startswith("the log-ratio"):
                estimate = f"k1, {estimate}"
    steps.append(Step(term.anchor, estimate))
    return steps


def per_token(term: KLTerm, table: SymbolTable) -> bool:
    """Whether the estimate, as formed, is per token (it still holds token log-probs)."""
    return bool(at_anchor(term, table).free_symbols & set(ROLE_WORDS))


def callee(node: cst.CSTNode | None) -> str:
    """`kl_penalty` of `core_algos.kl_penalty(...)`, `.sum()` of `x.sum(-1)`, `torch.mean` of `torch.mean(x)`."""
    if not isinstance(node, cst.Call):
        return "the helper"
    func = node.func
    if isinstance(func, cst.Attribute):
        attr = func.attr.value
        base = dotted_name(func.value)
        if base is not None and base.split(".")[0] in ("torch", "jnp", "jax", "np", "F", "mx", "nn", "numpy"):
            return f"{base}.{attr}"
        if attr in fw.REDUCTIONS or attr in fw.CUMULATIVE:
            return f".{attr}()"
        return attr
    return dotted_name(func) or "the helper"


def _where(anchor: Anchor) -> tuple[str, str]:
    """The function an anchor is in (a method is named alike whether the analysis entered it
    directly or followed a call into it)."""
    return anchor.path, (anchor.function or "").rsplit(".", 1)[-1]


def _flow_functions(term: KLTerm, others: Iterable[Anchor]) -> set[tuple[str, str]]:
    found = {_where(f.anchor) for f in term.trace}
    found.add(_where(term.anchor))
    found.update(_where(a) for a in others if a is not None)
    return found


def flow_steps(term: KLTerm, table: SymbolTable, after: Iterable[Anchor] = ()) -> list[Step]:
    """Where the estimate goes until it joins other terms: the helpers it is returned from, the
    call that reduces it over tokens. `after`: the anchors of later steps (the entry, the sink),
    whose functions the reduction is shown in."""
    sites = list(term.call_sites)
    reduced = term.reduced
    place = None
    if reduced is not None and reduced.at:
        functions = _flow_functions(term, after)
        # the innermost call of the reduction that happens in a function the value flows through;
        # a reduction elsewhere (a metric computed from the same estimate) is not this path's
        place = next((a for a in reversed(reduced.at) if _where(a) in functions), None)
        if place is not None:
            depth = reduced.at.index(place)
            inner = {a.node_id for a in reduced.at[depth + 1:]}
            sites = [s for s in sites if s.node_id not in inner]
    steps = []
    for site in sites:
        if place is not None and site.node_id == place.node_id:
            continue
        steps.append(Step(site, f"returned by {as_code(callee(site.node))}"))
    shown = {site.node_id for site in sites} | ({place.node_id} if place is not None else set())
    for other in term.other_call_sites:  # the same estimate through other chains of calls
        for site in other:
            if site.node_id not in shown:
                shown.add(site.node_id)
                steps.append(Step(site, f"also returned by {as_code(callee(site.node))}"))
    if place is not None:
        how = callee(place.node)
        if reduced.kind == "rtg":
            words = f"summed from each token to the end (reward-to-go) by {as_code(how)}"
        else:
            words = f"reduced over tokens by {as_code(how)}" if per_token(term, table) else f"reduced by {as_code(how)}"
        steps.append(Step(place, words))
    return steps


SINK_WORDS = {
    SinkKind.BACKWARD_METHOD: "backpropagated by `.backward()`",
    SinkKind.BACKWARD_CALL: "backpropagated by `{name}`",
    SinkKind.AUTOGRAD: "differentiated by `{name}`",
    SinkKind.GRAD_TRANSFORM: "differentiated by `{name}`",
    SinkKind.CONFIGURED: "differentiated by `{name}` (a configured loss sink)",
    SinkKind.LOSS_RETURN: "returned as the loss by `{name}`",
    SinkKind.LOSS_ENTRY: "returned as `{key}` by the loss `{name}`",
}


def sink_step(fact: LossFact) -> Step:
    """How the loss is differentiated, at the sink."""
    return Step(fact.sink, SINK_WORDS[fact.kind].format(name=fact.name, key=fact.entry_key))


def loss_trace(term: KLTerm, fact: LossFact, table: SymbolTable, estimate: str | None = None) -> list[Step]:
    """Estimate -> helpers and reductions -> added to the loss -> differentiated (`estimate`:
    the note of the estimate's step instead of its description)."""
    later = [a for a in (term.entry, fact.sink) if a is not None]
    steps = formation_steps(term, table, estimate) + flow_steps(term, table, later)
    if term.entry is not None:
        steps.append(Step(term.entry, "added to the loss"))
    return steps + [sink_step(fact)]


def reward_trace(term: KLTerm, fact: RewardFact, table: SymbolTable) -> list[Step]:
    """Estimate -> helpers -> the reward, return or advantage it enters."""
    return formation_steps(term, table) + flow_steps(term, table, [fact.sink]) + [Step(fact.sink, f"enters {as_code(fact.target)}")]


def render(steps: Iterable[Step | TraceStep]) -> tuple[TraceStep, ...]:
    """Place the steps: grouped by function in the order the value reaches them, in source order
    within each function; the notes of steps on one line are joined (in flow order)."""
    order: dict[tuple[str, str], int] = {}
    lines: dict[tuple[str, int], list] = {}
    for index, step in enumerate(steps):
        if isinstance(step, TraceStep):
            key, function, column = (step.path, step.line), (step.path, f"<step {index}>"), step.column
        else:
            span = step.anchor.span
            key, function, column = (step.anchor.path, span.line), _where(step.anchor), span.column
        order.setdefault(function, len(order))
        entry = lines.get(key)
        if entry is None:
            lines[key] = [order[function], key[1], column, key[0], [step.note], index]
        elif step.note not in entry[4]:
            entry[4].append(step.note)
    placed = sorted(lines.values(), key=lambda e: (e[0], e[1], e[5]))
    return tuple(TraceStep(path, line, column, "; ".join(notes)) for _, line, column, path, notes, _ in placed)
