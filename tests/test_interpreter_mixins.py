"""The interpreter is assembled from one mixin per concern (`kllint/analysis/interpret/`): a
method name defined by two mixins would silently replace one of them for the whole interpreter
(the method resolution order picks the first), so every name belongs to one mixin."""
from __future__ import annotations

import collections

from kllint.analysis.interpreter import Interpreter


def test_no_two_mixins_define_the_same_method():
    owners: dict[str, list[str]] = collections.defaultdict(list)
    for mixin in Interpreter.__mro__[1:-1]:  # the mixins, without Interpreter itself and object
        for name, member in vars(mixin).items():
            if not name.startswith("__") and (callable(member) or isinstance(member, (property, staticmethod, classmethod))):
                owners[name].append(mixin.__name__)
    assert len(Interpreter.__mro__) > 4  # the mixins are there to compare
    assert {name: found for name, found in owners.items() if len(found) > 1} == {}
