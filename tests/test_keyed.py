"""Values chosen by a run-time key (`kllint.analysis.keyed`): conditions that hold together are
merged, contradicting ones drop the combination, and string methods of a known string cut it
into known parts (`"pkg.mod.Class".rsplit(".", 1)`)."""
import pytest

from kllint.analysis import keyed
from kllint.analysis.conditions import narrowed
from kllint.analysis.callables import string_method
from kllint.analysis.symbolic import LP
from kllint.analysis.values import (
    ClassRef, Condition, Keyed, Literal, ModuleRef, Sequence, Tensor, Unknown, alternatives, join,
)


def picks(*options: str, negated: bool = False, name: str = "cfg.kind") -> Condition:
    return Condition(name, tuple(options), negated)


@pytest.mark.parametrize("conditions, expected", [
    ((picks("k1", "k3"), picks("k3")), (picks("k3"),)),
    ((picks("k1"), picks("k3")), None),
    ((picks("k1", "k3"), picks("k1", negated=True)), (picks("k3"),)),
    ((picks("k1", negated=True), picks("k2", negated=True)), (picks("k1", "k2", negated=True),)),
    ((picks("k1"), picks("on", name="cfg.flag")), (picks("k1"), picks("on", name="cfg.flag"))),
])
def test_conditions_of_one_lookup_are_merged_or_contradict(conditions, expected) -> None:
    assert narrowed(conditions, strict=True) == expected


def test_lifted_keeps_only_coherent_pairs() -> None:
    modules = [Keyed(Sequence((Literal("pkg.mod"), Literal(name))), picks(key)) for name, key in (("K1", "k1"), ("K3", "k3"))]
    paths = keyed.lifted(lambda pair: pair.items[0], modules[0]), keyed.lifted(lambda pair: pair.items[0], modules[1])
    names = keyed.lifted(lambda pair: pair.items[1], modules[0]), keyed.lifted(lambda pair: pair.items[1], modules[1])
    joined = keyed.lifted(lambda path, name: Literal(f"{path.value}:{name.value}"), join(*paths), join(*names))
    found = {(inner.value, tuple(c.options for c in held)) for inner, held in keyed.conditioned(joined)}
    assert found == {("pkg.mod:K1", (("k1",),)), ("pkg.mod:K3", (("k3",),))}


def test_under_wraps_objects_not_tensors() -> None:
    cls = ClassRef("K3", None, None)
    assert keyed.under(cls, (picks("k3"),)) == Keyed(cls, picks("k3"))
    tensor = Tensor(LP)
    assert keyed.under(tensor, (picks("k3"),)) is tensor
    assert isinstance(keyed.under(Unknown("x"), (picks("k3"),)), Unknown)
    assert keyed.static(Keyed(ModuleRef("project:pkg.mod"), picks("k3")))


@pytest.mark.parametrize("text, method, args, expected", [
    ("pkg.mod.K3", "rsplit", [Literal("."), Literal(1)], Sequence((Literal("pkg.mod"), Literal("K3")))),
    ("pkg.mod.K3", "rpartition", [Literal(".")], Sequence((Literal("pkg.mod"), Literal("."), Literal("K3")))),
    ("k3+", "endswith", [Literal("+")], Literal(True)),
])
def test_string_methods_of_a_known_string(text, method, args, expected) -> None:
    assert string_method(text, method, args) == expected


def test_string_method_with_an_unknown_argument() -> None:
    assert isinstance(string_method("pkg.mod.K3", "rsplit", [Unknown("sep")]), Unknown)
    assert all(isinstance(o, Unknown) for o in alternatives(string_method("a.b", "rsplit", [Literal("."), Literal(True)])))
