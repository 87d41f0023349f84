"""Evidence, in a function's own code, that a value it reads carries the policy's gradient.

Log-probs read from a container (`inputs.logprobs`, `batch["log_probs"]`) are taken as stored,
without gradient, when only their name gives their role. The code that uses them can say
otherwise, whatever they are called (design.md, item 3):

- it detaches them explicitly (`(ref - logp).detach()`, `stop_gradient(logp)`): detaching a value
  that has no gradient would be pointless;
- it takes the exponential of their difference with another value as an importance ratio
  (`exp(logp - inputs.sampler_logps)`, `(logp - old).exp()`): a ratio is a weight of the live
  policy (the numerator) against the one that sampled (the denominator, stored: never made
  live, even where the code also detaches it defensively). A difference with the reference
  (`exp(logp - ref_logp)`) is a KL estimator's density ratio, no evidence.

`live_reads(function)` gives the reads (names, attributes, subscripts with a literal key, in a
canonical spelling) that the function's code treats so, with the local names bound to them
(`logp = inputs.learner_logprobs` makes `inputs.learner_logprobs` one when `logp` is).
"""
from __future__ import annotations

import ast
from functools import lru_cache

import libcst as cst

from kllint.analysis import roles

EXPONENTIALS = frozenset({"exp"})
DETACHING = frozenset({"detach", "stop_gradient"})
# calls that pass a tensor through unchanged in value and role (`logp.float()`, `x.to(dev)`)
PASSING = frozenset({"float", "double", "half", "bfloat16", "to", "contiguous", "clone", "squeeze", "unsqueeze",
                     "view", "reshape", "flatten", "cuda", "cpu"})


def canonical(node: cst.CSTNode) -> str | None:
    """A read's spelling independent of quotes and spacing: `a`, `a.b`, `a["k"]` (also for
    `a.get("k")`); None for any other expression."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = canonical(node.value)
        return f"{base}.{node.attr.value}" if base is not None else None
    key = base = None
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        key, base = node.slice[0].slice.value, canonical(node.value)
    elif (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in ("get", "pop")
          and node.args and node.args[0].keyword is None):
        key, base = node.args[0].value, canonical(node.func.value)  # `d.get("k")` reads as `d["k"]`
    if key is not None:
        if base is None or not isinstance(key, cst.SimpleString):
            return None
        try:
            text = ast.literal_eval(key.value)
        except (ValueError, SyntaxError):
            return None
        return f"{base}[{text!r}]"
    return None


def _reads(node: cst.CSTNode) -> set[str]:
    """The reads an expression combines (each name, attribute or keyed subscript in its
    arithmetic, as a whole), not those inside calls other than pass-through methods."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        spelled = canonical(current)
        if spelled is not None:
            found.add(spelled)
            continue
        if isinstance(current, cst.Call):
            if isinstance(current.func, cst.Attribute) and current.func.attr.value in PASSING:
                stack.append(current.func.value)
            continue
        if isinstance(current, (cst.BinaryOperation, cst.UnaryOperation)):
            stack.extend(c for c in current.children if isinstance(c, cst.BaseExpression))
    return found


def _called(node: cst.Call) -> str:
    func = node.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def _difference(node: cst.BaseExpression) -> cst.BinaryOperation | None:
    """`a - b` (parenthesised or not) as the argument of an exponential."""
    return node if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract) else None


def _last_name(spelled: str) -> str:
    """The name a read ends with: `b` of `a.b`, `k` of `a['k']`."""
    if spelled.endswith("]"):
        return spelled[spelled.rindex("[") + 2:-2]
    return spelled.rsplit(".", 1)[-1]


class _Evidence(cst.CSTVisitor):
    def __init__(self) -> None:
        self.live: set[str] = set()
        self.behaviour: set[str] = set()
        self.aliases: dict[str, set[str]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        name = _called(node)
        if name in DETACHING:
            if isinstance(node.func, cst.Attribute) and name != "stop_gradient" and not node.args:
                self.live |= _reads(node.func.value)
            elif node.args:
                self.live |= _reads(node.args[0].value)
        elif name in EXPONENTIALS:
            operand = node.args[0].value if node.args else (
                node.func.value if isinstance(node.func, cst.Attribute) else None)
            difference = _difference(operand) if operand is not None else None
            if difference is None:
                return
            behaviour = _reads(difference.right)
            if any(roles.logprob_role(_last_name(read)) == "reference" for read in behaviour):
                return  # `exp(logp - ref)`: a KL estimator's density ratio, not an importance weight
            self.live |= _reads(difference.left)
            self.behaviour |= behaviour

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            value = node.value
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value in PASSING:
                value = value.func.value
            spelled = canonical(value)
            if spelled is not None:
                self.aliases.setdefault(node.targets[0].target.value, set()).add(spelled)

    def closed(self, reads: set[str]) -> set[str]:
        """`reads` with the reads the local names among them are bound to."""
        found = set(reads)
        pending = list(found)
        while pending:
            for source in self.aliases.get(pending.pop(), ()):
                if source not in found:
                    found.add(source)
                    pending.append(source)
        return found


@lru_cache(maxsize=512)
def live_reads(function: cst.CSTNode) -> frozenset[str]:
    """The reads `function`'s code treats as carrying gradient (see the module docstring),
    closed over its simple local aliases: detached explicitly, or the numerator of an
    importance ratio, and never the denominator of one (the sampling policy's stored
    log-probs, detached in the same code only defensively). Nested definitions count with
    the function that holds them: a nested function runs with the root of its outermost
    definition (`Frame.root`)."""
    visitor = _Evidence()
    body = function.body if isinstance(function, (cst.FunctionDef, cst.Lambda)) else function
    body.visit(visitor)
    return frozenset(visitor.closed(visitor.live) - visitor.closed(visitor.behaviour))
