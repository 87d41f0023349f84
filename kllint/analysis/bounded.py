"""Bounded expressions: every value the algebra builds stays below a size, so that the symbolic
work on it (derivatives, substitutions, numeric evaluation, the rules' walks) is polynomial in
the size of the code.

Terms share sub-expressions in memory, and their free symbols, hashes and substitutions are
computed on the graph, but derivatives, numeric evaluation and the rules' walks go through the
tree. `kl = torch.exp(kl) - kl - 1` repeated
n times is a graph of about 3n nodes and a tree of about 7 * 2^n: 20 repetitions (703 bytes of
code) took minutes. The size here is the tree's, counted through the inner expressions of
reductions (what `SymbolTable.expand_reductions`, the chain rule of `coefficients._derivative` and
the rules' walk of a loss traverse): `kl = kl.mean() + kl` doubles it too.

Beyond `MAX_SIZE` nodes the innermost sub-expressions of the largest operands are replaced by
opaque atoms `opaque(N, ...)`, an unknown function of what the replaced part depends on: the role
symbols (also through reductions), the KL terms, and one marker symbol if it also held anything
else (so that a value that was not pure stays so). An atom keeps which log-probs a value depends
on (purity, roles, whether it carries the policy's gradient, detaching by substitution) and the
KL terms in it, as any unknown function does (in a nonlinear place); it loses its value, so it is
never an estimator and its gradient coefficient is unknown. The outer structure (the sums and
products through which a KL term reaches the loss linearly) is kept. Real code stays far below
the bounds: over the fixtures and 27 trainer releases nothing is ever replaced (the largest value
has 860 nodes through its reductions; as a tree, about 100 in the five test releases).

The substitutions that expand reductions and set stop-gradients to the policy run on the graph
as well (`substitute_in_order`).

A value nested deeper than `MAX_TERM_DEPTH` levels has what lies below made opaque the same way
(`torch.log` applied 150 times, in one expression or one statement after the other): sort keys
compare in the square of the depth and derivatives multiply one factor per level, so 144 nested
calls took 6.7 s. And a file that keeps building values past the bound (each shrink costs about
1.5 ms: 100 if/else reassignments of a k3 chain shrank 2,821 values, 4.9 s) shrinks at most
`MAX_SHRINKS` of them; past that a value too large becomes one atom.
"""
from __future__ import annotations

from kllint.analysis import terms as tm

MAX_SIZE = 400  # nodes of the tree (real code: about 100)
MAX_EXPANDED = 4000  # nodes through reductions (real code: at most about 860)
MAX_TERM_DEPTH = 48  # nesting of the tree (real code: at most 18, over the fixtures and 22 releases)
MIN_SHARE = 8  # below this many nodes a part becomes one atom
MAX_SHRINKS = 100  # values shrunk per file (real code: none); past it a value too large is one atom
MAX_DEPTH = 100  # nesting levels the shrinking descends before it makes an atom
IMPURE = tm.Symbol("opaque__impure", real=True)
OPAQUE = tm.Function("opaque")  # opaque(n, symbols...): the n-th atom of a file
_BINDING = (tm.Derivative, tm.Subs)  # nodes with a bound variable


def _no_kl_symbols(expr: tm.Term) -> frozenset:
    return frozenset()


class SizeBound:
    """Tree sizes (through reductions) of one file's expressions, and their shrinking.

    `table` is the file's `SymbolTable`."""

    def __init__(self, table) -> None:
        self.table = table
        self.kl_symbols = _no_kl_symbols  # set for the duration of `bound` (no reference cycle)
        self._sizes: dict[tm.Term, tuple[int, int, int]] = {}
        self._free: dict[int, tuple] = {}
        self._atoms: dict[tm.Term, tm.Term] = {}
        self._shrunk: dict[tuple, tm.Term] = {}  # (node, budget, expanded, depth) -> the shrunk node
        self.atoms_made = 0
        self.shrinks = 0

    def size(self, expr: tm.Term, expanded: bool = False) -> int:
        """Nodes of `expr` as a tree (`expanded`: a reduction counting its inner expression),
        memoised, so linear in the expression's graph, not its tree."""
        known = self._sizes.get(expr)
        if known is None:
            known = self._measure(expr)
        return known[1] if expanded else known[0]

    def _measure(self, expr: tm.Term) -> tuple[int, int, int]:
        sizes = self._sizes
        stack = [(expr, False)]
        while stack:
            node, ready = stack.pop()
            if node in sizes:
                continue
            reduction = self.table.reductions.get(node) if node.is_Symbol else None
            children = (reduction.inner,) if reduction is not None else node.args
            if not ready:
                stack.append((node, True))
                stack.extend((child, False) for child in children if child not in sizes)
            elif reduction is not None:
                sizes[node] = (1, 1 + sizes[reduction.inner][1], 1)
            else:
                sizes[node] = (1 + sum(sizes[child][0] for child in children),
                               1 + sum(sizes[child][1] for child in children),
                               1 + max((sizes[child][2] for child in children), default=0))
        return sizes[expr]

    def depth(self, expr: tm.Term) -> int:
        """Nesting of `expr` as a tree (a reduction is one node here), memoised."""
        known = self._sizes.get(expr)
        return (known if known is not None else self._measure(expr))[2]

    def bound(self, expr: tm.Term, kl_symbols=None) -> tm.Term:
        """`expr` itself when it has at most `MAX_SIZE` nodes (`MAX_EXPANDED` through its
        reductions), else `expr` with its innermost large parts replaced by opaque atoms (see
        the module's docstring). `kl_symbols(expr)` gives the KL-term symbols of an expression
        (`Algebra.kl_symbols`)."""
        if expr.is_Atom and expr not in self.table.reductions:
            return expr
        direct, expanded = self.size(expr), self.size(expr, expanded=True)
        deep = self.depth(expr) > MAX_TERM_DEPTH
        if direct <= MAX_SIZE and expanded <= MAX_EXPANDED and not deep:
            return expr
        self.kl_symbols = kl_symbols or _no_kl_symbols
        self.shrinks += 1
        try:
            if self.shrinks > MAX_SHRINKS:  # a file that keeps building huge values: about 1.5 ms each
                return self.atom(expr)
            if deep:
                expr = self._cut(expr, MAX_TERM_DEPTH, {})
            if self.size(expr) > MAX_SIZE:
                expr = self._shrink(expr, MAX_SIZE, False, 0)
            if self.size(expr, expanded=True) > MAX_EXPANDED:
                expr = self._shrink(expr, MAX_EXPANDED, True, 0)
            return expr
        finally:
            self._free.clear()
            self.kl_symbols = _no_kl_symbols

    def _shrink(self, node: tm.Term, budget: int, expanded: bool, depth: int) -> tm.Term:
        if self.size(node, expanded) <= budget:
            return node
        key = (node, budget, expanded, depth)
        known = self._shrunk.get(key)
        if known is None:
            if len(self._shrunk) > 100_000:
                self._shrunk.clear()
            known = self._shrunk[key] = self._shrink_node(node, budget, expanded, depth)
        return known

    def _shrink_node(self, node: tm.Term, budget: int, expanded: bool, depth: int) -> tm.Term:
        if budget < MIN_SHARE or depth > MAX_DEPTH:
            return self.atom(node)
        reduction = self.table.reductions.get(node) if node.is_Symbol else None
        if reduction is not None:  # only met when counting through reductions
            return self.table.reduce(self._shrink(reduction.inner, budget - 1, expanded, depth + 1), reduction.kind)
        if not node.args:
            return self.atom(node)
        # the smaller operands keep their size, the larger ones share what is left
        args = list(node.args)
        order = sorted(range(len(args)), key=lambda i: self.size(args[i], expanded))
        remaining = budget - 1
        for position, index in enumerate(order):
            share = max(remaining // (len(args) - position), 0)
            args[index] = self._shrink(args[index], share, expanded, depth + 1)
            remaining -= self.size(args[index], expanded)
        try:  # unevaluated: a shrunk node keeps its shape
            rebuilt = node.raw(tuple(args))
        except (TypeError, ValueError, ZeroDivisionError, AttributeError):
            return self.atom(node)
        return rebuilt if self.size(rebuilt, expanded) <= budget + MIN_SHARE else self.atom(node)

    def _cut(self, node: tm.Term, levels: int, memo: dict) -> tm.Term:
        """`node` with what lies deeper than `levels` below it made opaque atoms (iterative:
        the term may be deeper than Python's recursion limit)."""
        stack = [(node, levels, False)]
        while stack:
            current, left, ready = stack.pop()
            key = (current, left)
            if key in memo:
                continue
            if self.depth(current) <= left:
                memo[key] = current
            elif left <= 1 or not current.args:
                memo[key] = self.atom(current)
            elif not ready:
                stack.append((current, left, True))
                stack.extend((child, left - 1, False) for child in current.args)
            else:
                args = tuple(memo[child, left - 1] for child in current.args)
                try:  # unevaluated: a cut node keeps its shape
                    memo[key] = current.raw(args)
                except (TypeError, ValueError, ZeroDivisionError, AttributeError):
                    memo[key] = self.atom(current)
        return memo[node, levels]

    def atom(self, node: tm.Term) -> tm.Term:
        """The opaque atom that stands for `node` (the same one each time)."""
        known = self._atoms.get(node)
        if known is not None:
            return known
        table = self.table
        direct = free_symbols(node, self._free)
        keep: set[tm.Symbol] = set()
        impure = False
        for symbol in direct:
            roles = table.role_symbols(symbol)
            kls = self.kl_symbols(symbol)
            keep |= roles | kls
            if not table.is_pure(symbol) and not kls:
                impure = True
        args = sorted(keep, key=str) + ([IMPURE] if impure else [])
        self.atoms_made += 1
        made = OPAQUE(tm.Num(self.atoms_made), *args) if args else tm.Symbol(f"opaque__{self.atoms_made}", real=True)
        self._atoms[node] = made
        return made


# ---------------------------------------------------------------------------------------------
# Replacement on the expression graph: each shared sub-expression is rebuilt once.

def free_symbols(expr: tm.Term, memo: dict) -> frozenset:
    """`expr.free_symbols` (kept on each node; `memo` is not needed any more and kept for the
    callers' signature)."""
    return expr.free_symbols


def replace_all(expr: tm.Term, mapping: dict, free: dict | None = None) -> tm.Term:
    """`expr.xreplace(mapping)` for a mapping of symbols (simultaneous, nodes rebuilt and
    evaluated), each shared sub-expression visited once instead of once per occurrence in the
    tree; with `free` (a memo of `free_symbols`), parts without those symbols are not entered."""
    if not mapping:
        return expr
    keys = frozenset(mapping)
    memo: dict[int, tuple] = {}
    stack = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        key = id(node)
        if key in memo:
            continue
        if node in mapping:
            memo[key] = (node, mapping[node])
        elif not node.args or (free is not None and not keys & free_symbols(node, free)):
            memo[key] = (node, node)
        elif isinstance(node, _BINDING):
            memo[key] = (node, node.xreplace(mapping))
        elif ready:
            args = tuple(memo[id(child)][1] for child in node.args)
            unchanged = all(new is old for new, old in zip(args, node.args))
            memo[key] = (node, node if unchanged else node.rebuild(args))
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in node.args if id(child) not in memo)
    return memo[id(expr)][1]


def substitute_in_order(expr: tm.Term, mapping: dict) -> tm.Term:
    """`expr` with the symbols of `mapping` substituted one after the other (in `sort_key`
    order, so that a symbol met in the replacement of an earlier one is replaced too), each walk
    entering only the parts that hold its symbol."""
    free: dict[int, tuple] = {}
    for symbol in sorted(mapping, key=tm.default_sort_key):
        expr = replace_all(expr, {symbol: mapping[symbol]}, free)
    return expr
