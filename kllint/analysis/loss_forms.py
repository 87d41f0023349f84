"""What makes a value a loss by what it computes, whatever the function returning it is called:
a KL term combined with a policy-gradient surrogate. A surrogate carries the policy's gradient
through its log-probs as a score function: a live importance ratio `exp(logp - stopgrad(logp))`
or `exp(logp - old)` (also as the weight of the KL term itself, `ratio * k3`), or the live
log-probs times a coefficient without gradient (`logp * advantage`). Such a value is
differentiated by whatever runs it (an engine, a service outside the project): a loss.
"""
from __future__ import annotations

from kllint.analysis import terms as tm
from kllint.analysis.algebra import Algebra
from kllint.analysis.symbolic import LP, LPD, OLD, REF
from kllint.analysis.values import Tensor

MAX_NODES = 4_000  # nodes visited before giving up (a large value is not judged by its content)


def combines_kl_with_surrogate(algebra: Algebra, value: Tensor) -> bool:
    """Whether `value` holds a KL term and a policy-gradient surrogate (see the module)."""
    expr = value.expr  # not `algebra.wrap`: judging a value must not register it as a KL term
    whole = algebra.is_kl_candidate(value)  # the value is itself a KL estimate (`ratio * k3`)
    if not (whole or algebra.kl_symbols(expr)) or not algebra.live(expr):
        return False
    table = algebra.table
    stack: list[tuple[tm.Term, bool]] = [(expr, whole)]  # (node, inside a KL term)
    seen: set[tuple[tm.Term, bool]] = set()
    while stack and len(seen) < MAX_NODES:
        node, inside = stack.pop()
        if (node, inside) in seen:
            continue
        seen.add((node, inside))
        if node.is_Symbol:
            if node in algebra.kterms and algebra.kterms[node].expr != node:
                stack.append((algebra.kterms[node].expr, True))
            elif node in table.reductions:
                stack.append((table.reductions[node].inner, inside))
            continue
        if _live_ratio(algebra, node) or (not inside and _score_function(algebra, node)):
            return True
        stack.extend((arg, inside) for arg in node.args)
    return False


def _live_ratio(algebra: Algebra, node: tm.Term) -> bool:
    """`exp(logp - stopgrad(logp))` or `exp(logp - old)`: the policy's probability ratio to
    itself or to the sampling policy, with gradient (not the reference's: that is a KL part)."""
    if not isinstance(node, tm.exp):
        return False
    roles = algebra.table.role_symbols(node.args[0])
    return LP in roles and bool(roles & {LPD, OLD}) and REF not in roles


def _score_function(algebra: Algebra, node: tm.Term) -> bool:
    """`logp * coefficient`: a product with the live log-prob as a factor and, among the other
    factors, something that is neither a number nor a log-prob (an advantage, a reward)."""
    if not node.is_Mul or LP not in node.args:
        return False
    others = [arg for arg in node.args if arg != LP]
    return any(not arg.is_number and not algebra.table.role_symbols(arg) and not algebra.kl_symbols(arg)
               for arg in others)
