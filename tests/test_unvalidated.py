"""libcst parses without node validation (`kllint.unvalidated`): the same trees as a validated
parse, validation skipped only in the parsing thread and only during the parse, and a plain
validated parse where libcst's internals are not as expected."""
from __future__ import annotations

import threading

import libcst
import pytest

from kllint import unvalidated
from kllint.api import check_source
from kllint.unvalidated import install, parse_unvalidated, skips_validation

VARIED = [
    "x = 1if y else 2\n",
    "x = a if(b)else c\n",
    "del(a)\nassert(x), 'm'\nraise(E)\n",
    "from.a import b\nimport a.b as c\nglobal g\n",
    "with(a)as b, c: pass\nfor(x)in(y): pass\n",
    "x = {**a, 'b': 1}; y = [*a, *b]; z = (w := 1)\n",
    "x = f'{a!r:>{w}}' 'b' r'\\\\'\ny = b'a' rb'\\\\'\n",
    "x = ~-+a @ b ** -c // d\ny = a<b>c!=d is not(e) not in f\n",
    "class A(B, metaclass=M):\n    '''doc'''\n    x: int = 0\n\n    @property\n    def f(self, a, /, b, *c, d=1, **k) -> 'A':\n        return(self)\n",
    "async def f():\n    await(x)\n    async for a in b:\n        yield(a)\n    async with c as d: pass\n",
    "try:\n    pass\nexcept(E)as e:\n    pass\nelse:\n    pass\nfinally:\n    pass\n",
    "match x:\n    case [1, *rest] if(rest): pass\n    case {'a': 1, **kw}: pass\n    case A(b=1)|B(): pass\n",
    "def loss(logp, ref):  # a comment\n    kl = (ref - logp).exp() - (ref - logp) - 1\n\n    return kl.mean(-1)[..., 1:, ::2]\n",
    "x = lambda *a, **k: (yield)\nprint(*a, sep='', **k)\n",
    "x = 'caf\u00e9'  # non-ASCII\n",
]


@pytest.mark.parametrize("text", VARIED)
def test_the_tree_is_that_of_a_validated_parse(text: str) -> None:
    tree = parse_unvalidated(text)
    assert tree.deep_equals(libcst.parse_module(text))
    assert tree.code == text


def test_validation_is_skipped_only_inside_the_block() -> None:
    assert skips_validation()  # libcst's internals as this kllint expects them
    with unvalidated.unvalidated():
        assert libcst.Name("").value == ""  # not validated
        with unvalidated.unvalidated():  # nested: still skipped, and the outer block survives
            libcst.Name("")
        libcst.Name("")
    with pytest.raises(libcst.CSTValidationError):
        libcst.Name("")


def test_nodes_built_after_a_parse_are_validated() -> None:
    parse_unvalidated("x = 1\n")
    with pytest.raises(libcst.CSTValidationError):
        libcst.Name("")
    with pytest.raises(libcst.ParserSyntaxError):
        parse_unvalidated("x = = 1\n")
    with pytest.raises(libcst.CSTValidationError):  # the failed parse left the scope too
        libcst.Name("")


def test_other_threads_validate_during_a_parse() -> None:
    caught: list[BaseException] = []

    def build() -> None:
        try:
            libcst.Name("")
        except libcst.CSTValidationError as exc:
            caught.append(exc)

    with unvalidated.unvalidated():
        thread = threading.Thread(target=build)
        thread.start()
        thread.join()
    assert len(caught) == 1


def test_valid_python_that_only_the_validation_rejects_is_analysed() -> None:
    # libcst issue 1061: the validation of a conditional expression raises a TypeError on this
    # valid line, which stopped the file's analysis with an internal error
    text = ("import torch\n\n\ndef loss(logp, ref):\n"
            "    kl = torch.exp(ref - logp) - (ref - logp) - 1\n"
            "    empty = () if 0 else(lambda:())\n"
            "    kl.mean().backward()\n")
    assert parse_unvalidated(text).code == text
    assert {(d.code, d.span.line) for d in check_source(text, "loss.py")} == {("KL102", 5), ("KL201", 5)}


def _node_class(post_init):
    class Node:
        validated = 0

        def _validate(self) -> None:
            type(self).validated += 1

    Node.__post_init__ = post_init
    return Node


def test_install_wraps_a_plain_call_of_validate() -> None:
    def __post_init__(self) -> None:
        self._validate()

    node = _node_class(__post_init__)
    scope = install(node)
    assert scope is not None and install(node) is scope  # installed once
    node().__post_init__()
    scope.active = True
    node().__post_init__()
    scope.active = False
    node().__post_init__()
    assert node.validated == 2


@pytest.mark.parametrize("source", [
    "def __post_init__(self):\n    self._validate()\n    self.extra = 1\n",  # does more than validate
    "def __post_init__(self, *args):\n    self._validate()\n",
    "def __post_init__(self):\n    self.check()\n",
])
def test_install_leaves_other_internals_alone(source: str) -> None:
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - a function body under test
    node = _node_class(namespace["__post_init__"])
    assert install(node) is None
    assert node.__dict__["__post_init__"] is namespace["__post_init__"]


def test_where_it_cannot_install_the_parse_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unvalidated, "_tried", True)
    monkeypatch.setattr(unvalidated, "_scope", None)
    assert not skips_validation()
    text = "def f(a):\n    return a if(a)else-a\n"
    assert parse_unvalidated(text).deep_equals(libcst.parse_module(text))
    with unvalidated.unvalidated(), pytest.raises(libcst.CSTValidationError):
        libcst.Name("")
