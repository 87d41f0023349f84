"""Upward-exposed reads of loop bodies (`kllint.analysis.interpret.exposure`): which names can
carry a value from one iteration to the next."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from kllint.analysis.interpret.exposure import exposed_names


def _loop(source: str) -> cst.For | cst.While:
    module = cst.parse_module(textwrap.dedent(source))
    loop = module.body[-1]
    assert isinstance(loop, (cst.For, cst.While))
    return loop


CASES = [
    ("accumulator", "for x in xs:\n    total = total + x\n", {"total"}),
    ("augmented assignment reads its target", "for x in xs:\n    total += x\n", {"total"}),
    ("the loop target is bound", "for data in batches:\n    data = data.to(device)\n", {"device"}),
    ("bound before read", "for x in xs:\n    loss = f(x)\n    loss.backward()\n", {"f"}),
    ("reward-to-go", "for t in steps:\n    ret = r[t] + gamma * ret\n", {"r", "gamma", "ret"}),
    ("bound in one branch only", "for x in xs:\n    if c:\n        y = x\n    z = y\n", {"c", "y"}),
    ("bound in every branch", "for x in xs:\n    if c:\n        y = x\n    else:\n        y = 0\n    z = y\n", {"c"}),
    ("elif chain without else", "for x in xs:\n    if a:\n        y = 1\n    elif b:\n        y = 2\n    z = y\n",
     {"a", "b", "y"}),
    ("read in the next statement of an inner loop", "for e in es:\n    for b in bs:\n        d = g(b)\n    h(d)\n",
     {"bs", "g", "h", "d"}),
    ("inner loop target shadows", "for e in es:\n    for d in bs:\n        h(d)\n", {"bs", "h"}),
    ("with binds its name", "for x in xs:\n    with ctx() as c:\n        y = c\n    z = y\n", {"ctx"}),
    ("try binds nothing for what follows", "for x in xs:\n    try:\n        y = f(x)\n    except E:\n        pass\n    z = y\n",
     {"f", "E", "y"}),
    ("a lambda counts as reading its names", "for x in xs:\n    f = lambda: acc\n    acc = f()\n", {"acc"}),
    ("a nested def counts as reading its names", "for x in xs:\n    def g():\n        return acc\n    acc = g()\n",
     {"acc", "g"}),
    ("subscript target reads its container", "for k in keys:\n    table[k] = 1\n", {"table"}),
    ("attribute is not a name read", "for x in xs:\n    self.data = x.data\n", {"self"}),
    ("while reads its test each iteration", "while n > 0:\n    n = n - 1\n", {"n"}),
    ("tuple target", "for i, (a, b) in pairs:\n    s = a + b + i\n", set()),
]


@pytest.mark.parametrize("name, source, expected", CASES, ids=[case[0] for case in CASES])
def test_exposed_names(name: str, source: str, expected: set[str]) -> None:
    assert exposed_names(_loop(source)) == expected


def test_match_statement_exposes_every_name() -> None:
    source = "for x in xs:\n    match x:\n        case 1:\n            y = acc\n    acc = 2\n"
    assert {"acc", "y", "x"} <= exposed_names(_loop(source))
