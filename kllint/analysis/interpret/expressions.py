"""Expressions: the dispatch of `eval` on the node type, literals, operators (with the pairing of
alternatives both sides cover), displays, conditional expressions, lambdas and comprehensions."""
from __future__ import annotations

import ast
import functools

import libcst as cst

from kllint.analysis.algebra import OPERATORS
from kllint.analysis.conditions import narrowed
from kllint.analysis.callables import UnresolvedAttribute as _Attr
from kllint.analysis.facts import BranchChoice
from kllint.analysis.interpret.frames import Frame
from kllint.analysis.symbolic import OLD
from kllint.analysis.values import (
    ConfigValue, FunctionRef, Literal, Mapping, Model, Sequence, Tensor, Unknown, Value, alternatives, join,
)
from kllint.analysis.strings import KeyPattern


_MISSING = object()
_EVALUATORS: dict[tuple[type, type], object] = {}  # (interpreter class, node type) -> unbound `eval_<type>` or None


class Expressions:
    """Evaluates expressions (a mixin of the interpreter)."""

    # ------------------------------------------------------------------ expressions
    def eval(self, node: cst.BaseExpression | None, frame: Frame) -> Value:
        if node is None:
            return Unknown()
        self.tick()
        key = (type(self), type(node))
        method = _EVALUATORS.get(key, _MISSING)
        if method is _MISSING:  # the handler of a node type, looked up once per type
            method = _EVALUATORS[key] = getattr(key[0], f"eval_{key[1].__name__}", None)
        if method is None:
            return Unknown()
        return method(self, node, frame)

    def eval_BinaryOperation(self, node: cst.BinaryOperation, frame: Frame) -> Value:
        op = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.Divide: "/", cst.Power: "**",
              cst.FloorDivide: "/", cst.MatrixMultiply: "*"}.get(type(node.operator))
        left = self.eval(node.left, frame)
        right = self.eval(node.right, frame)
        if op is None:
            return Unknown()
        return self.arith(op, left, right, node, frame)

    def arith(self, op: str, left: Value, right: Value, node: cst.CSTNode, frame: Frame) -> Value:
        options = []
        lefts, rights = alternatives(left), alternatives(right)
        pairs = covering_pairs(len(lefts), len(rights))
        for i, j in pairs:
            a, b = lefts[i], rights[j]
            if True:
                if isinstance(a, Literal) and isinstance(b, Literal):
                    try:
                        options.append(Literal(OPERATORS[op](a.value, b.value)))
                    except Exception:  # noqa: BLE001
                        options.append(Unknown())
                    continue
                if isinstance(a, Sequence) and isinstance(b, Sequence) and op == "+":
                    options.append(Sequence(a.items + b.items))
                    continue
                if op == "+" and (_text(a) is not None or _text(b) is not None) and not (
                        _numeric(a) and _numeric(b)):
                    # `"ref_" + name`: a string known by its literal parts
                    options.append(KeyPattern((_text(a) or "{}") + (_text(b) or "{}")))
                    continue
                if not _numeric(a) or not _numeric(b):
                    options.append(Unknown())
                    continue
                if isinstance(a, Model) or isinstance(b, Model):
                    # a layer of the network (x @ W, W + b): logits of the model's role
                    model = a if isinstance(a, Model) else b
                    options.append(self.as_tensor(model))
                    continue
                ta, tb = self.as_tensor(a), self.as_tensor(b)
                options.append(self.algebra.binary(op, ta, tb, self.anchor(node, frame)))
        return join(*options)

    def eval_UnaryOperation(self, node: cst.UnaryOperation, frame: Frame) -> Value:
        value = self.eval(node.expression, frame)
        if isinstance(node.operator, cst.Minus):
            options = []
            for option in alternatives(value):
                if isinstance(option, Literal) and isinstance(option.value, (int, float)):
                    options.append(Literal(-option.value))
                elif _numeric(option):
                    options.append(self.algebra.unary(self.as_tensor(option), lambda e: -e, self.anchor(node, frame)))
                else:
                    options.append(Unknown())
            return join(*options)
        if isinstance(node.operator, cst.Not):
            return Unknown()
        return value

    def eval_Integer(self, node: cst.Integer, frame: Frame) -> Value:
        try:
            return Literal(int(node.value.replace("_", ""), 0))
        except ValueError:
            return Unknown()

    def eval_Float(self, node: cst.Float, frame: Frame) -> Value:
        try:
            return Literal(float(node.value.replace("_", "")))
        except ValueError:
            return Unknown()

    def eval_SimpleString(self, node: cst.SimpleString, frame: Frame) -> Value:
        try:
            return Literal(string_value(node.value))
        except Exception:  # noqa: BLE001
            return Unknown()

    def eval_ConcatenatedString(self, node: cst.ConcatenatedString, frame: Frame) -> Value:
        return Unknown()

    def eval_Tuple(self, node: cst.Tuple, frame: Frame) -> Value:
        return Sequence(tuple(self.eval(e.value, frame) for e in node.elements))

    eval_List = eval_Tuple

    def eval_Dict(self, node: cst.Dict, frame: Frame) -> Value:
        items = []
        for element in node.elements:
            if isinstance(element, cst.DictElement):
                key = self.eval(element.key, frame)
                if isinstance(key, Literal):
                    items.append((str(key.value), self.eval(element.value, frame)))
        return Mapping(tuple(items))

    def eval_IfExp(self, node: cst.IfExp, frame: Frame) -> Value:
        decision, then_paths, else_paths = self.branch_paths(node.test, frame)
        if not frame.chosen and self.chosen_by_caller(node.test, frame):
            frame = frame.child(chosen=True)
        if decision is True:
            return self.eval(node.body, frame)
        if decision is False:
            return self.eval(node.orelse, frame)
        # each branch under its conditions, as the branches of an `if` (not under none it can take)
        then_paths = tuple(p for p in then_paths if narrowed(frame.conditions + p) is not None) or then_paths
        else_paths = tuple(p for p in else_paths if narrowed(frame.conditions + p) is not None) or else_paths
        then = join(*(self.eval(node.body, frame.child(conditions=frame.conditions + path) if path else frame)
                      for path in then_paths))
        other = join(*(self.eval(node.orelse, frame.child(conditions=frame.conditions + path) if path else frame)
                       for path in else_paths))
        if frame.emit:
            self._note_choice(node, then, other, frame)
        return join(then, other)

    def _note_choice(self, node: cst.IfExp, then: Value, other: Value, frame: Frame) -> None:
        """Record an undecided `a if test else b` whose branches carry the rollout policy's
        log-probs in one branch only (`BranchChoice`)."""
        def old_in(value: Value) -> bool:
            return any(isinstance(o, Tensor) and OLD in self.algebra.table.role_symbols(o.expr) for o in alternatives(value))

        in_then, in_other = old_in(then), old_in(other)
        if in_then != in_other:
            source = frame.module.source
            self.facts.append(BranchChoice(self.anchor(node, frame), source(node.test).strip(), in_then,
                                           source(node.body if in_then else node.orelse).strip(), frame.call_stack))

    def eval_Lambda(self, node: cst.Lambda, frame: Frame) -> Value:
        self._closures[id(node)] = frame.env
        return FunctionRef("<lambda>", node, frame.module)

    def eval_Await(self, node: cst.Await, frame: Frame) -> Value:
        return self.eval(node.expression, frame)

    def eval_NamedExpr(self, node: cst.NamedExpr, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        self.assign(node.target, value, frame, node)
        return value

    def _comprehension(self, node, frame: Frame) -> Frame:
        inner = frame.child(env=dict(frame.env))
        generator = node.for_in
        while generator is not None:
            iterable = self.eval(generator.iter, inner)
            element = self._element(iterable, generator.iter, inner)
            self.assign(generator.target, element, inner, node)
            generator = generator.inner_for_in
        return inner

    def eval_ListComp(self, node: cst.ListComp, frame: Frame) -> Value:
        inner = self._comprehension(node, frame)
        return Sequence((self.eval(node.elt, inner),))

    eval_GeneratorExp = eval_ListComp
    eval_SetComp = eval_ListComp

    def eval_DictComp(self, node: cst.DictComp, frame: Frame) -> Value:
        self._comprehension(node, frame)
        return Unknown()

    def eval_Comparison(self, node: cst.Comparison, frame: Frame) -> Value:
        self.eval(node.left, frame)
        for comparison in node.comparisons:
            self.eval(comparison.comparator, frame)
        return Unknown("comparison")

    def eval_BooleanOperation(self, node: cst.BooleanOperation, frame: Frame) -> Value:
        return join(self.eval(node.left, frame), self.eval(node.right, frame))

    def eval_StarredElement(self, node: cst.StarredElement, frame: Frame) -> Value:
        return self.eval(node.value, frame)

    def eval_FormattedString(self, node: cst.FormattedString, frame: Frame) -> Value:
        """A string with its literal parts known: a `Literal` when every replacement field is a
        name or attribute holding a literal string or number, else a `KeyPattern` (`{}` for
        each other field; only names and attributes are evaluated, never calls)."""
        parts, pattern = [], False
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value.replace("{{", "{").replace("}}", "}"))
                continue
            value = Unknown()
            if isinstance(part.expression, (cst.Name, cst.Attribute)) and part.conversion is None \
                    and part.format_spec is None:
                value = self.eval(part.expression, frame.child(emit=False))
            if isinstance(value, Literal) and isinstance(value.value, (str, int)) and not isinstance(value.value, bool):
                parts.append(str(value.value))
            else:
                parts.append("{}")
                pattern = True
        text = "".join(parts)
        return KeyPattern(text) if pattern else Literal(text)


def covering_pairs(m: int, n: int) -> list[tuple[int, int]]:
    """Index pairs of two alternative lists, ordered so that every option of either side comes
    in the first max(m, n) pairs (alternatives are capped: a left option times the first right
    option only would drop the right side's later options, e.g. the fourth estimator of a
    mode-dispatching helper), then the rest by (max(i, j), i, j)."""
    cover = [(k % m, k % n) for k in range(max(m, n))]
    seen = set(cover)
    rest = sorted(((i, j) for i in range(m) for j in range(n) if (i, j) not in seen), key=lambda ij: (max(ij), ij))
    return cover + rest


@functools.lru_cache(maxsize=20_000)
def string_value(source: str) -> str | bytes:
    """The value of a string literal from its source text (`ast.literal_eval`, memoised: it
    parses the text and leaves cyclic garbage for the collector on every call)."""
    return ast.literal_eval(source)


def _text(value: Value) -> str | None:
    """The known text of a string value: a literal string, or the literal parts of a
    `KeyPattern`; None for anything else."""
    if isinstance(value, Literal) and isinstance(value.value, str):
        return value.value
    return value.text if isinstance(value, KeyPattern) else None


def _numeric(value: Value) -> bool:
    if isinstance(value, Literal):
        return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    return isinstance(value, (Tensor, Model, ConfigValue, Unknown, _Attr))

