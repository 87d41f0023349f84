"""Branch tests: decided statically, or the configurations under which each branch runs.

A test on a mode value (`kind == "k3"`, `mode in ("k1", "kl")`, `mode.endswith("+")`) gives a
`Condition`; `and`, `or` and `not` combine them into the paths (conjunctions of conditions) that
take each branch, so that `if not mode.endswith("+") or mode == "k2":` is known to fall through
only when `mode` ends with '+' and is not 'k2'.
"""
from __future__ import annotations

import libcst as cst

from kllint.analysis import keyed
from kllint.analysis.interpret.frames import Frame
from kllint.analysis.interpret.walk import values_used
from kllint.analysis.module import dotted_name
from kllint.analysis.values import Condition, ConfigValue, Literal, Sequence, Tensor, Value, alternatives, join

# more paths than this for one branch are not followed one by one: the branch then runs once,
# under no condition of this test (what it did before tests were combined)
MAX_PATHS = 2

Paths = tuple[tuple[Condition, ...], ...]  # a disjunction of conjunctions
_ANY: Paths = ((),)  # the branch may run under any configuration
_STRING_TESTS = ("endswith", "startswith")


class Branches:
    """Decides branch tests (a mixin of the interpreter)."""

    def branch_paths(self, test: cst.BaseExpression, frame: Frame) -> tuple[bool | None, Paths, Paths]:
        """`(decision, then, else)`: `decision` is True / False when the test is decided
        statically; `then` and `else` are the paths (tuples of conditions, any one of which
        holds) under which each branch runs."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            decision, then, other = self.branch_paths(test.expression, frame)
            return (None if decision is None else not decision), other, then
        if isinstance(test, cst.BooleanOperation):
            return self._combined(test, frame)
        decision, condition = self.decide(test, frame)
        if condition is None:
            return decision, _ANY, _ANY
        return decision, ((condition,),), ((condition.negate(),),)

    def _combined(self, test: cst.BooleanOperation, frame: Frame) -> tuple[bool | None, Paths, Paths]:
        left, left_then, left_else = self.branch_paths(test.left, frame)
        right, right_then, right_else = self.branch_paths(test.right, frame)
        is_or = isinstance(test.operator, cst.Or)
        settles = is_or  # the value of one side that decides the whole
        if left is settles or right is settles:
            return settles, _ANY, _ANY
        if left is not None:  # it does not settle it: the other side does
            return right, right_then, right_else
        if right is not None:
            return left, left_then, left_else
        if is_or:  # a or b: a, or (not a and b); neither: not a and not b
            return None, _union(left_then, _product(left_else, right_then)), _product(left_else, right_else)
        return None, _product(left_then, right_then), _union(left_else, _product(left_then, right_else))

    def chosen_by_caller(self, test: cst.BaseExpression, frame: Frame) -> bool:
        """Whether a branch test reads a parameter the caller passed explicitly (`mode == "k3"`,
        `cfg.kl_type in (...)`, `use_k3`): the branch that runs is then the caller's choice, and
        so is an estimate formed in it (`kllint.rules.base.RuleContext.localize`)."""
        if not frame.explicit or not _a_choice(test):
            return frame.chosen
        read = values_used(test)
        if frame.explicit.isdisjoint(read) and frame.derived.isdisjoint(read):
            return frame.chosen
        if not frame.inherited.isdisjoint(read):
            frame.passed_choice.append(True)  # the caller passed on its own caller's choice
        return True

    def decide(self, test: cst.BaseExpression, frame: Frame) -> tuple[bool | None, Condition | None]:
        """Decide a single test statically (True/False) or return a condition on a mode value."""
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            if isinstance(test.left, cst.Name) and test.left.value == "__name__":
                return True, None
            passed = self._passed_tensor_is_none(test, frame)
            if passed is not None:
                return passed, None
            # a string a run-time key picked is tested as the string itself
            left = _unkeyed(self.eval(test.left, frame))
            right = _unkeyed(self.eval(comparison.comparator, frame))
            operator = comparison.operator
            options = self._literal_options(right)
            tested_node = test.left
            if options is None:
                if isinstance(operator, (cst.In, cst.NotIn)):
                    return None, None  # `"key" in batch.keys()`: a membership test, not a mode taking a value
                options, left = self._literal_options(left), right
                tested_node = comparison.comparator
            if options is not None:
                negated = isinstance(operator, (cst.NotEqual, cst.NotIn, cst.IsNot))
                if not isinstance(operator, (cst.Equal, cst.NotEqual, cst.In, cst.NotIn, cst.Is, cst.IsNot)):
                    return None, None
                return self._mode_test(left, tuple(str(o) for o in options), negated, "in", tested_node, frame)
        if isinstance(test, cst.Call) and isinstance(test.func, cst.Attribute) and test.func.attr.value in _STRING_TESTS \
                and len(test.args) == 1 and test.args[0].keyword is None and not test.args[0].star:
            affix = self.eval(test.args[0].value, frame)
            if isinstance(affix, Literal) and isinstance(affix.value, str):
                value = self.eval(test.func.value, frame)
                return self._mode_test(value, (affix.value,), False, test.func.attr.value, test.func.value, frame)
        value = self.eval(test, frame)
        known = [o for o in alternatives(value) if isinstance(o, Literal)]
        if known and len(known) == len(alternatives(value)):
            truths = {bool(o.value) for o in known}
            if len(truths) == 1:
                return truths.pop(), None
        return None, None

    def _passed_tensor_is_none(self, test: cst.Comparison, frame: Frame) -> bool | None:
        """`x is None` / `x is not None` on a parameter the caller passed a tensor for: decided
        (a tensor read or guessed from a name elsewhere may be None, so only this is)."""
        comparison = test.comparisons[0]
        if not (isinstance(comparison.operator, (cst.Is, cst.IsNot)) and isinstance(test.left, cst.Name)
                and isinstance(comparison.comparator, cst.Name) and comparison.comparator.value == "None"
                and test.left.value in frame.explicit):
            return None
        options = alternatives(frame.env.get(test.left.value))
        if not options or not all(isinstance(o, Tensor) for o in options):
            return None
        return isinstance(comparison.operator, cst.IsNot)

    def _mode_test(self, value: Value, options: tuple[str, ...], negated: bool, predicate: str,
                   tested_node: cst.BaseExpression, frame: Frame) -> tuple[bool | None, Condition | None]:
        """The test that `value` satisfies `predicate` over `options` (or not, `negated`)."""
        probe = Condition("", options, negated, predicate=predicate)
        values = alternatives(value)
        known = [o.value for o in values if isinstance(o, Literal)]
        tested = dotted_name(tested_node) or frame.module.source(tested_node).strip()
        if known and len(known) == len(values):
            if predicate != "in" and not all(isinstance(k, str) for k in known):
                return None, None
            hits = [probe.admits(str(k)) for k in known]
            if all(hits):
                return True, None
            if not any(hits):
                return False, None
            return None, Condition(tested, options, negated, tested=tested, predicate=predicate)
        configs = [o for o in values if isinstance(o, ConfigValue)]
        if not configs:
            return None, Condition(tested, options, negated, tested=tested, predicate=predicate)
        config = configs[0]
        same = [c for c in configs if (c.source or c.name) == (config.source or config.name)]
        if predicate != "in":
            if any(c.suffix or c.prefix for c in same):
                return None, None  # a test of a value already cut: not a test of the configured value
        else:  # `mode[:-1] == "k3"` under `mode.endswith("+")` reads as `mode == "k3+"`
            options = tuple(dict.fromkeys(c.spelled(o) for c in same for o in options))
        default = config.default if isinstance(config.default, str) else None
        return None, Condition(config.source or config.name, options, negated, default, tested, predicate, True)

    def _literal_options(self, value: Value) -> tuple | None:
        if isinstance(value, Literal) and isinstance(value.value, str):
            return (value.value,)
        if isinstance(value, Sequence) and value.items and all(isinstance(i, Literal) for i in value.items):
            return tuple(i.value for i in value.items)
        return None


def _union(first: Paths, second: Paths) -> Paths:
    """Either set of paths; any path with no condition makes the whole unconditional."""
    paths = tuple(dict.fromkeys(first + second))
    if () in paths or len(paths) > MAX_PATHS:
        return _ANY
    return paths


def _product(first: Paths, second: Paths) -> Paths:
    """Both: each path of one joined with each path of the other."""
    paths = tuple(dict.fromkeys(tuple(dict.fromkeys(a + b)) for a in first for b in second))
    return paths if len(paths) <= MAX_PATHS else _ANY


def _unkeyed(value: Value) -> Value:
    """`value` without the conditions of run-time keys that picked its alternatives."""
    return join(*(inner for inner, _ in keyed.conditioned(value))) if keyed.has_keyed(value) else value


def _a_choice(test: cst.BaseExpression) -> bool:
    """Whether a branch test picks among options (`mode == "k3"`, `kind in ("k1", "kl")`,
    `mode.endswith("+")`, a flag `use_k3`), rather than testing that an optional value was
    given (`ref is not None`)."""
    if isinstance(test, cst.UnaryOperation):
        return _a_choice(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _a_choice(test.left) or _a_choice(test.right)
    if isinstance(test, cst.Comparison):
        return not any(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in test.comparisons)
    return True
