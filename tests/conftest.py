"""Shared pytest set-up: `tests/` on sys.path (for `releases`), this checkout first on the
`PYTHONPATH` of every subprocess a test starts (`python -m kllint` there runs the code under
test, not another installed copy), and an offline switch.

Tests that download pinned releases are marked `network` (registered in pyproject.toml);
deselect them with `-m "not network"`, or set `KLLINT_OFFLINE=1` to skip them.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
_CHECKOUT = str(Path(__file__).resolve().parents[1])
_PATHS = os.environ.get("PYTHONPATH", "")
if _PATHS.split(os.pathsep)[:1] != [_CHECKOUT]:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_CHECKOUT, _PATHS) if p)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KLLINT_OFFLINE", "") not in ("", "0"):
        skip = pytest.mark.skip(reason="KLLINT_OFFLINE is set: pinned releases are not downloaded")
        for item in items:
            if "network" in item.keywords:
                item.add_marker(skip)
