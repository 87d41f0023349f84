"""Upward-exposed reads of a loop body: the names an iteration may read before it binds them.

Only such a name can carry a value from one iteration to the next (an accumulator such as
`total = total + x`, a reward-to-go `ret = r + gamma * ret`); a name the body always binds before
reading it (the loop's own target, `loss = ...; loss.backward()`) cannot. The interpreter probes a
loop body once with a placeholder for each carried name (`statements.exec_loop`); naming only the
exposed ones skips that probe for most loops, and with it the doubling of work per nesting level.

The test is the classic definite-assignment analysis (Aho, Lam, Sethi and Ullman, *Compilers*,
2nd ed., section 9.2.5, live variables), conservative where Python is hard to follow: a branch
binds a name only if every branch does, a `try`, a loop or a `match` binds nothing for what follows,
and every name read inside a nested function, class or lambda counts as exposed.
"""
from __future__ import annotations

import libcst as cst

from kllint.analysis.interpret.walk import bound_names, cached_per_node, walk_nodes


def exposed_names(loop: cst.For | cst.While) -> frozenset[str]:
    """The names the loop's body (and, for `while`, its test) may read before binding them in the
    same iteration; the `for` target counts as bound. Memoised per loop node."""
    return cached_per_node("exposed", loop, lambda: frozenset(_loop_exposure(loop)))


def _loop_exposure(loop: cst.For | cst.While) -> set[str]:
    exposed: set[str] = set()
    bound: frozenset[str] = frozenset()
    if isinstance(loop, cst.For):
        bound = frozenset(_bare_names(loop.target))
        exposed |= _target_reads(loop.target)
    else:
        exposed |= _reads(loop.test)
    _block(list(loop.body.body), bound, exposed)
    return exposed


def _block(statements: list[cst.CSTNode], bound: frozenset[str], exposed: set[str]) -> frozenset[str]:
    """Adds to `exposed` what the statements read unbound; returns the names bound after them."""
    for statement in statements:
        bound = _statement(statement, bound, exposed)
    return bound


def _statement(node: cst.CSTNode, bound: frozenset[str], exposed: set[str]) -> frozenset[str]:
    if isinstance(node, cst.SimpleStatementLine):
        for small in node.body:
            bound = _small(small, bound, exposed)
        return bound
    if isinstance(node, cst.If):
        exposed |= _reads(node.test) - bound
        then = _block(list(node.body.body), bound, exposed)
        if node.orelse is None:
            return bound
        other = _statement(node.orelse, bound, exposed) if isinstance(node.orelse, cst.If) \
            else _block(list(node.orelse.body.body), bound, exposed)
        return then & other
    if isinstance(node, cst.For):
        exposed |= (_reads(node.iter) | _target_reads(node.target)) - bound
        _block(list(node.body.body), bound | _bare_names(node.target), exposed)
        _orelse(node, bound, exposed)
        return bound
    if isinstance(node, cst.While):
        exposed |= _reads(node.test) - bound
        _block(list(node.body.body), bound, exposed)
        _orelse(node, bound, exposed)
        return bound
    if isinstance(node, cst.With):
        for item in node.items:
            exposed |= _reads(item.item) - bound
            if item.asname is not None:
                exposed |= _target_reads(item.asname.name) - bound
                bound = bound | _bare_names(item.asname.name)
        return _block(list(node.body.body), bound, exposed)
    if isinstance(node, (cst.Try, cst.TryStar)):
        body = _block(list(node.body.body), bound, exposed)
        for handler in node.handlers:
            if handler.type is not None:
                exposed |= _reads(handler.type) - bound
            names = _bare_names(handler.name.name) if handler.name is not None else frozenset()
            _block(list(handler.body.body), bound | names, exposed)
        if node.orelse is not None:
            _block(list(node.orelse.body.body), body, exposed)
        if node.finalbody is not None:
            return _block(list(node.finalbody.body.body), bound, exposed)
        return bound
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        exposed |= _all_names(node)
        return bound | {node.name.value}
    exposed |= _all_names(node)  # match statements and anything else: every name, bound nothing
    return bound


def _orelse(node: cst.For | cst.While, bound: frozenset[str], exposed: set[str]) -> None:
    if node.orelse is not None:
        _block(list(node.orelse.body.body), bound, exposed)


def _small(node: cst.CSTNode, bound: frozenset[str], exposed: set[str]) -> frozenset[str]:
    if isinstance(node, cst.Assign):
        exposed |= _reads(node.value) - bound
        for target in node.targets:
            exposed |= _target_reads(target.target) - bound
        for target in node.targets:
            bound = bound | _bare_names(target.target)
        return bound
    if isinstance(node, cst.AugAssign):
        exposed |= (_reads(node.value) | _reads(node.target)) - bound
        return bound | _bare_names(node.target)
    if isinstance(node, cst.AnnAssign):
        if node.value is None:
            return bound
        exposed |= (_reads(node.value) | _target_reads(node.target)) - bound
        return bound | _bare_names(node.target)
    exposed |= _reads(node) - bound
    return bound


def _reads(node: cst.CSTNode) -> set[str]:
    """Names an expression reads where it stands (`a` of `a.b`), plus every name inside a lambda."""
    names: set[str] = set()
    for item in walk_nodes(node, skip=(cst.Lambda,), attribute_values=True):
        if isinstance(item, cst.Name):
            names.add(item.value)
        elif isinstance(item, cst.Lambda):
            names |= _all_names(item)
    return names


def _all_names(node: cst.CSTNode) -> set[str]:
    return {item.value for item in walk_nodes(node) if isinstance(item, cst.Name)}


def _bare_names(target: cst.CSTNode) -> frozenset[str]:
    return frozenset(bound_names(target))


def _target_reads(target: cst.CSTNode) -> set[str]:
    """What a binding target reads: `a` and `i` of `a[i] = ...`, `a` of `a.b = ...`."""
    if isinstance(target, cst.Name):
        return set()
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_target_reads(element.value) for element in target.elements))
    if isinstance(target, cst.StarredElement):
        return _target_reads(target.value)
    return _reads(target)
