"""Strings known by their literal parts: keys made at run time (`f"ref_log_probs_{name}"`,
`"ref_" + name`, `"a" if flag else "b"`), read by what they are known to be (design.md, item 3:
roles of a batch key from its words, or from what its writer stored)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kllint.analysis.values import Literal, alternatives


@dataclass(frozen=True)
class KeyPattern:
    """A string built at run time whose literal parts are known (`f"ref_log_probs_{name}"`,
    `"ref_" + name`): `text` holds the literal parts with `{}` for each part known only at run
    time. A container read with it reads by its literal parts: the words of `text` name the
    value, and a writer that used the same pattern stored it."""

    text: str


def read_keys(key: Any) -> tuple[Any, ...] | None:
    """The keys a container read with `key` may use, each a string `Literal`, when `key` is a
    string known by its literal parts (a `KeyPattern`, read as its text) or a choice of such
    strings made at run time (`"a" if flag else "b"`); None for any other key."""
    found = []
    for option in alternatives(key):
        if isinstance(option, KeyPattern):
            found.append(Literal(option.text))
        elif isinstance(option, Literal) and isinstance(option.value, str):
            found.append(option)
        else:
            return None
    return tuple(found) if len(found) > 1 or isinstance(key, KeyPattern) else None
