"""The branch conditions of one path, read as a conjunction.

A path through mode branches holds several conditions on one configuration value: `mode` ends
with '+' (a straight-through variant), `mode[:-1]` is 'k3' (read as `mode` is 'k3+'), `mode` is
not 'k2'. `narrowed` folds them into the options that satisfy all of them, so that a message says
which configured values lead to a finding, and tells a path that no value can take (the finding
of such a path is not reported: no configuration runs it).
"""
from __future__ import annotations

from dataclasses import replace

from kllint.analysis.values import Condition


def narrowed(conditions: tuple[Condition, ...], strict: bool = False) -> tuple[Condition, ...] | None:
    """`conditions` with the conditions on each value known to take one of some options (a
    positive `in` condition) replaced by one `in` condition on the options all of them admit,
    and its `is not` conditions joined into one.

    Returns None when the conditions on a configuration value admit no option at all (the path
    is impossible). Conditions on a plain local name are judged so only when `strict` (they all
    come from one lookup, `kllint.analysis.keyed`): two helpers may test different values under
    one parameter name.
    """
    groups: dict[str, list[Condition]] = {}
    for condition in conditions:
        groups.setdefault(condition.name, []).append(condition)
    if all(len(group) == 1 for group in groups.values()):
        return conditions
    out: list[Condition] = []
    for name, group in groups.items():
        positive = [c for c in group if c.predicate == "in" and not c.negated]
        if len(group) == 1:
            out.extend(group)
            continue
        if not positive:
            out.extend(_without_excluded(_negations_joined(group)))
            continue
        options = tuple(o for o in positive[0].options if all(c.admits(o) for c in group))
        if not options:
            if strict or all(c.from_config for c in group):
                return None
            out.extend(group)  # a local name reused: keep what each test said
            continue
        default = next((c.default for c in group if c.default is not None), None)
        out.append(Condition(name, options, False, default, positive[0].tested, "in",
                             all(c.from_config for c in group)))
    return tuple(out)


def _negations_joined(group: list[Condition]) -> list[Condition]:
    """`is not 'a'` and `is not 'b'` as one `is not 'a' or 'b'`."""
    negations = [c for c in group if c.predicate == "in" and c.negated]
    if len(negations) < 2:
        return group
    joined = replace(negations[0], options=tuple(dict.fromkeys(o for c in negations for o in c.options)))
    return [joined if c is negations[0] else c for c in group if c is negations[0] or c not in negations]


def _without_excluded(group: list[Condition]) -> list[Condition]:
    """`is not` conditions without the options another condition already excludes (`ends with
    '+'` and `is not 'k2' or 'k2+'` is `ends with '+'` and `is not 'k2+'`)."""
    affixes = [c for c in group if c.predicate != "in"]
    if not affixes:
        return group
    out = []
    for condition in group:
        if condition.predicate == "in" and condition.negated:
            kept = tuple(o for o in condition.options if all(a.admits(o) for a in affixes))
            if kept:
                out.append(replace(condition, options=kept))
        else:
            out.append(condition)
    return out
