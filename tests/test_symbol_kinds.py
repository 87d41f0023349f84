"""Symbol kinds come from the class the analysis made them with, never from their names: a
variable of the analysed code may be called `K`, `S` or `X_t` like the analysis' own symbols."""
from __future__ import annotations

import pytest

from kllint.analysis.symbolic import KLTermSymbol, SymbolTable
from kllint.analysis.values import Tensor, _opaque, _signature


@pytest.mark.parametrize("user_name", ["K", "Kp", "S", "G", "X_state", "t"])
def test_a_value_named_like_an_internal_symbol_is_opaque(user_name: str) -> None:
    table = SymbolTable()
    assert _opaque(table.fresh(user_name, positive=True))


@pytest.mark.parametrize("kind", ["kl_term", "named_kl", "reduction", "loop"])
def test_internal_symbols_are_not_opaque_whatever_their_name(kind: str) -> None:
    table = SymbolTable()
    assert not _opaque(table.fresh("t", kind, real=True))


def test_only_kl_term_symbols_count_as_kl_content() -> None:
    table = SymbolTable()
    user_k, term = table.fresh("K", real=True), table.fresh("K", "kl_term", real=True)
    assert isinstance(term, KLTermSymbol) and not isinstance(user_k, KLTermSymbol)
    assert _signature(Tensor(user_k + term))[1] == frozenset({term.name})


def test_a_reduction_symbol_is_made_by_the_table() -> None:
    table = SymbolTable()
    total = table.reduce(table.fresh("x", real=True))
    assert table.is_reduction(total) and not _opaque(total)
