"""Settings: defaults, overridden by `[tool.kllint]` in pyproject.toml (or kllint.toml), then the CLI.

The closest configuration file to a checked file wins, as in Ruff.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from kllint.rules.registry import select_codes

DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "build", "dist", "site-packages",
    "node_modules", "__pycache__", ".kllint_cache", ".mypy_cache", ".pytest_cache", ".ruff_cache",
)

KNOWN_KEYS = (
    "select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores",
    "output-format", "vocab", "respect-gitignore",
)
VOCAB_KEYS = ("logprob-functions", "stop-gradient-functions", "loss-sinks", "reference-names")


class ConfigError(Exception):
    """A configuration file or option is invalid; the message is shown to the user as is."""


@dataclass(frozen=True)
class Vocab:
    """Project-specific names: log-prob helpers, stop-gradient helpers, loss sinks, reference names."""

    logprob_functions: tuple[str, ...] = ()
    stop_gradient_functions: tuple[str, ...] = ()
    loss_sinks: tuple[str, ...] = ()
    reference_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    """Frozen, fully resolved settings for one run (or one configuration file)."""

    select: tuple[str, ...] = ("ALL",)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    output_format: str | None = None
    respect_gitignore: bool = True
    vocab: Vocab = field(default_factory=Vocab)
    source: Path | None = None

    @property
    def active_codes(self) -> frozenset[str]:
        return select_codes(self.select, self.ignore, self.extend_select)

    def with_overrides(self, **changes: Any) -> "Settings":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _did_you_mean(key: str, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _str_list(table: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(value)


def parse_table(table: dict[str, Any], where: str, base: Settings | None = None) -> Settings:
    """Build Settings from a `[tool.kllint]` table.

    Raises:
        ConfigError: unknown keys (with a did-you-mean hint), wrong types, unknown rule codes.
    """
    base = base or Settings()
    for key in table:
        if key not in KNOWN_KEYS:
            raise ConfigError(f"{where}: unknown key `{key}`{_did_you_mean(key, KNOWN_KEYS)}")
    changes: dict[str, Any] = {}
    for key, attr in (("select", "select"), ("extend-select", "extend_select"), ("ignore", "ignore"),
                      ("extend-exclude", "extend_exclude")):
        value = _str_list(table, key, where)
        if value is not None:
            changes[attr] = value
    exclude = _str_list(table, "exclude", where)
    if exclude is not None:
        changes["exclude"] = DEFAULT_EXCLUDES + exclude
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
        changes["per_file_ignores"] = tuple(
            (pattern, tuple(_str_list(pfi, pattern, where) or ())) for pattern in pfi
        )
    if "output-format" in table:
        changes["output_format"] = str(table["output-format"])
    if "respect-gitignore" in table:
        changes["respect_gitignore"] = bool(table["respect-gitignore"])
    if "vocab" in table:
        vocab = table["vocab"]
        if not isinstance(vocab, dict):
            raise ConfigError(f"{where}: `vocab` must be a table")
        for key in vocab:
            if key not in VOCAB_KEYS:
                raise ConfigError(f"{where}: unknown key `vocab.{key}`{_did_you_mean(key, VOCAB_KEYS)}")
        changes["vocab"] = Vocab(*(tuple(_str_list(vocab, k, where) or ()) for k in VOCAB_KEYS))
    settings = replace(base, **changes)
    try:
        settings.active_codes
        for _, codes in settings.per_file_ignores:
            select_codes(["ALL"], list(codes))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return settings


def load_file(path: Path, base: Settings | None = None) -> Settings | None:
    """Settings from one pyproject.toml (None when it has no [tool.kllint]) or kllint.toml.

    Raises:
        ConfigError: unreadable TOML or an invalid table.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from None
    if path.name == "kllint.toml":
        table = data
    else:
        table = data.get("tool", {}).get("kllint")
        if table is None:
            return None
    settings = parse_table(table, str(path), base)
    return replace(settings, source=path)


def find_config(start: Path) -> Path | None:
    """The closest kllint.toml or pyproject.toml with [tool.kllint], from `start` upwards."""
    directory = start if start.is_dir() else start.parent
    for folder in (directory, *directory.parents):
        for name in ("kllint.toml", "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file():
                if name == "kllint.toml":
                    return candidate
                try:
                    if "kllint" in tomllib.loads(candidate.read_text(encoding="utf-8")).get("tool", {}):
                        return candidate
                except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                    return candidate  # reported when loaded
    return None
