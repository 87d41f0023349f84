"""Shared pytest set-up: `tests/` on sys.path (for `releases`), and an offline switch.

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KLLINT_OFFLINE", "") not in ("", "0"):
        skip = pytest.mark.skip(reason="KLLINT_OFFLINE is set: pinned releases are not downloaded")
        for item in items:
            if "network" in item.keywords:
                item.add_marker(skip)
