"""Settings: defaults, overridden by `[tool.kllint]` in pyproject.toml (or kllint.toml), then the CLI.

The closest configuration file to a checked file wins, as in Ruff.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kllint.rules.registry import select_codes

DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "build", "dist", "site-packages",
    "node_modules", "__pycache__", ".kllint_cache", ".mypy_cache", ".pytest_cache", ".ruff_cache",
)

KNOWN_KEYS = (
    "select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores",
    "output-format", "vocab", "respect-gitignore", "blanket-noqa", "time-budget", "line-length",
)
DEFAULT_LINE_LENGTH = 88  # as Ruff and Black
MAX_LINE_LENGTH = 320  # as Ruff
DEFAULT_TIME_BUDGET = 60.0  # CPU s; the heaviest real trainer file (verl dp_actor.py) takes ~7-20 s
OUTPUT_FORMATS = ("full", "concise", "json", "sarif", "github")
CONFIG_NAMES = ("kllint.toml", "pyproject.toml")
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
    blanket_noqa: bool = False
    vocab: Vocab = field(default_factory=Vocab)
    time_budget: float = DEFAULT_TIME_BUDGET
    line_length: int = DEFAULT_LINE_LENGTH  # the longest line a fix writes
    source: Path | None = None

    @property
    def active_codes(self) -> frozenset[str]:
        """The rule codes enabled by `select`, `extend-select` and `ignore`."""
        return select_codes(self.select, self.ignore, self.extend_select)

    @property
    def root(self) -> Path | None:
        """The folder of the configuration file: excludes and per-file-ignores are relative to it."""
        return self.source.parent if self.source is not None else None

    def with_overrides(self, **changes: Any) -> "Settings":
        """A copy with the given fields replaced (None values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def for_path(self, path: Path) -> "Settings":
        """The settings of one file: a plain Settings applies to every file (see SettingsResolver)."""
        return self

    def for_folder(self, folder: Path, real_folder: Path | None = None) -> "Settings":
        """The settings of one folder (see `SettingsResolver.for_folder`)."""
        return self


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array (write [tool.kllint], not [[tool.kllint]])"
    return f"{type(value).__name__} {value!r}"[:80]


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


def _no_empty_selector(values: tuple[str, ...], key: str, where: str) -> None:
    """An empty selector would match every code (`ignore = [""]` would silently disable all rules)."""
    if any(not value.strip() for value in values):
        raise ConfigError(f"{where}: `{key}` has an empty selector (name a code, a prefix such as KL1, or ALL)")


def _check_patterns(patterns: tuple[str, ...], key: str, where: str) -> None:
    """Every exclude pattern must be a valid gitignore pattern."""
    if not patterns:
        return  # pathspec not imported for nothing (kllint.pipeline.discovery: `_spec`)
    import pathspec

    for pattern in patterns:
        try:
            pathspec.GitIgnoreSpec.from_lines([pattern])
        except Exception as exc:  # noqa: BLE001 - pathspec raises several types
            raise ConfigError(f"{where}: `{key}`: invalid pattern {pattern!r} ({exc})") from None


def parse_table(table: dict[str, Any], where: str, base: Settings | None = None) -> Settings:
    """Build Settings from a `[tool.kllint]` table.

    Raises:
        ConfigError: unknown keys (with a did-you-mean hint), wrong types, unknown rule codes.
    """
    base = base or Settings()
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: `tool.kllint` must be a table ([tool.kllint]), not {_kind(table)}")
    for key in table:
        if key not in KNOWN_KEYS:
            raise ConfigError(f"{where}: unknown key `{key}`{_did_you_mean(key, KNOWN_KEYS)}")
    changes: dict[str, Any] = {}
    for key, attr in (("select", "select"), ("extend-select", "extend_select"), ("ignore", "ignore"),
                      ("extend-exclude", "extend_exclude")):
        value = _str_list(table, key, where)
        if value is not None:
            if attr != "extend_exclude":
                _no_empty_selector(value, key, where)
            changes[attr] = value
    exclude = _str_list(table, "exclude", where)
    if exclude is not None:
        changes["exclude"] = DEFAULT_EXCLUDES + exclude
    for key in ("exclude", "extend-exclude"):
        _check_patterns(_str_list(table, key, where) or (), key, where)
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
        changes["per_file_ignores"] = tuple(
            (pattern, tuple(_str_list(pfi, pattern, f"{where}: per-file-ignores") or ())) for pattern in pfi
        )
        for pattern, codes in changes["per_file_ignores"]:
            _no_empty_selector(codes, f"per-file-ignores.{pattern!r}", where)
    if "time-budget" in table:
        budget = table["time-budget"]
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 <= budget < 1e9:
            raise ConfigError(f"{where}: `time-budget` must be a number of seconds (0: no limit), not {budget!r}")
        changes["time_budget"] = float(budget)
    if "line-length" in table:
        changes["line_length"] = _line_length(table["line-length"], f"{where}: `line-length`")
    if "output-format" in table:
        fmt = table["output-format"]
        if fmt not in OUTPUT_FORMATS:
            raise ConfigError(f"{where}: `output-format` must be one of {', '.join(OUTPUT_FORMATS)}, "
                              f"not {fmt!r}")
        changes["output_format"] = fmt
    for key, attr in (("respect-gitignore", "respect_gitignore"), ("blanket-noqa", "blanket_noqa")):
        if key in table:
            if not isinstance(table[key], bool):
                raise ConfigError(f"{where}: `{key}` must be true or false")
            changes[attr] = table[key]
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


def _line_length(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LINE_LENGTH:
        raise ConfigError(f"{what} must be a whole number of characters from 1 to {MAX_LINE_LENGTH}, not {value!r}")
    return value


def _formatter_line_length(tool: dict[str, Any]) -> int | None:
    """`line-length` of `[tool.ruff]` or `[tool.black]` in the same pyproject.toml (the file's
    style when `[tool.kllint]` does not set one); None when neither sets a valid one."""
    for name in ("ruff", "black"):
        table = tool.get(name)
        value = table.get("line-length") if isinstance(table, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LINE_LENGTH:
            return value
    return None


MAX_CONFIG_BYTES = 4 * 1024 * 1024


def _read_config(path: Path) -> str:
    """A configuration file's text: a regular file of at most `MAX_CONFIG_BYTES`, UTF-8."""
    from kllint.pipeline.source import read_regular

    return read_regular(path, MAX_CONFIG_BYTES).decode("utf-8")


def _toml() -> Any:
    """`tomllib` (`tomli` on Python 3.10), imported when a configuration file is first read: a run
    with none (a pre-commit hook in a checkout without one) does not pay for importing it."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def load_file(path: Path, base: Settings | None = None) -> Settings | None:
    """Settings from one pyproject.toml (None when it has no [tool.kllint]) or kllint.toml.

    Raises:
        ConfigError: unreadable TOML or an invalid table.
    """
    tomllib = _toml()
    try:
        data = tomllib.loads(_read_config(path))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: cannot read configuration: {getattr(exc, 'strerror', None) or exc}") from None
    if path.name == "kllint.toml":
        table = data
    else:
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(f"{path}: `tool` must be a table, not {_kind(tool)}")
        table = tool.get("kllint")
        if table is None:
            return None
        if isinstance(table, dict) and "line-length" not in table:
            inherited = _formatter_line_length(tool)
            if inherited is not None:
                base = replace(base or Settings(), line_length=inherited)
    settings = parse_table(table, str(path), base)
    return replace(settings, source=path)


def find_config(start: Path, known: dict[Path, Path | None] | None = None) -> Path | None:
    """The closest kllint.toml or pyproject.toml with [tool.kllint], from `start` upwards.

    `known` memoises the answer per folder (the folders of one checkout share their parents).
    """
    known = {} if known is None else known
    folder = start  # a file holds no configuration file: the search goes on from its folder
    walked: list[Path] = []
    found: Path | None = None
    while True:  # from the folder upwards, each parent made only when the one below has none
        if folder in known:
            found = known[folder]
            break
        walked.append(folder)
        found = _config_in(folder)
        if found is not None or folder.parent == folder:
            break
        folder = folder.parent
    for folder in walked:
        known[folder] = found
    return found


def _is_file(path: Path) -> bool:
    """`path.is_file()`, false also when it cannot be looked up (a folder that can be listed but
    not searched, chmod a-x: PermissionError)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _config_in(folder: Path) -> Path | None:
    """The configuration file of `folder` itself, if any (none where it cannot be looked up)."""
    for name in ("kllint.toml", "pyproject.toml"):
        candidate = folder / name
        if _is_file(candidate):
            if name == "kllint.toml":
                return candidate
            tomllib = _toml()
            try:
                tool = tomllib.loads(_read_config(candidate)).get("tool", {})
                if not isinstance(tool, dict) or "kllint" in tool:
                    return candidate  # an invalid `tool` is reported when loaded
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError):
                return candidate  # reported when loaded
    return None


@dataclass(frozen=True)
class CliOverrides:
    """Options given on the command line, applied on top of every configuration file (Ruff-style).

    `select` replaces the configured selection; `extend_select` and `ignore` add to it.
    `exclude` replaces the configured exclude patterns (the default ones stay), `extend_exclude`
    adds to them; patterns are relative to the folder of the configuration file, as there.
    """

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] | None = None  # replaces the configured `exclude` (defaults kept)
    extend_exclude: tuple[str, ...] = ()
    time_budget: float | None = None

    def validate(self) -> None:
        """Raises ConfigError when a selector names no rule or an exclude pattern is invalid."""
        try:
            select_codes(self.select or ("ALL",), self.ignore, self.extend_select)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        _check_patterns(self.exclude or (), "--exclude", "command line")
        _check_patterns(self.extend_exclude, "--extend-exclude", "command line")

    def apply(self, settings: Settings) -> Settings:
        """`settings` with these overrides applied."""
        return replace(
            settings,
            select=self.select if self.select is not None else settings.select,
            extend_select=settings.extend_select + self.extend_select,
            ignore=settings.ignore + self.ignore,
            exclude=DEFAULT_EXCLUDES + self.exclude if self.exclude is not None else settings.exclude,
            extend_exclude=settings.extend_exclude + self.extend_exclude,
            time_budget=self.time_budget if self.time_budget is not None else settings.time_budget,
        )


class SettingsResolver:
    """Settings per checked file: the closest configuration file to each file wins (as in Ruff).

    For a file, the folders from the file's own folder upwards are searched for `kllint.toml` or a
    `pyproject.toml` with a `[tool.kllint]` table; the first found applies, on top of the defaults,
    and then the command-line overrides. `config` (the `--config` option) makes one file apply to
    every checked file; `isolated` ignores all configuration files. Lookups are cached per folder
    and each file is parsed once. The object has the same `for_path` method as `Settings`, so
    `discovery.discover` and `pipeline.run.run` accept either.
    """

    def __init__(self, overrides: CliOverrides | None = None, config: Path | None = None,
                 isolated: bool = False) -> None:
        """Raises ConfigError when `config` cannot be read or is invalid, or both options are used."""
        if config is not None and isolated:
            raise ConfigError("--config and --isolated cannot be used together")
        self.overrides = overrides or CliOverrides()
        self.overrides.validate()
        self.isolated = isolated
        self._by_folder: dict[str, Settings] = {}  # by the folder's name: a cheap lookup per file
        self._config_of: dict[Path, Path | None] = {}  # resolved folder -> its closest configuration
        self._by_file: dict[Path | None, Settings] = {}
        self._fixed: Settings | None = None
        if isolated:
            self._fixed = self.overrides.apply(Settings())
        elif config is not None:
            config = Path(config).resolve()
            loaded = load_file(config)
            self._fixed = self.overrides.apply(loaded or Settings(source=config))

    def _for_config(self, config: Path | None) -> Settings:
        if config not in self._by_file:
            loaded = load_file(config) if config is not None else None
            self._by_file[config] = self.overrides.apply(loaded or Settings())
        return self._by_file[config]

    def for_path(self, path: Path) -> Settings:
        """The settings that apply to `path` (a file or a folder).

        Raises:
            ConfigError: the closest configuration file is invalid.
        """
        if self._fixed is not None:
            return self._fixed
        path = path if isinstance(path, Path) else Path(path)
        known = self._by_folder.get(os.fspath(path))  # a folder asked before: no need to look at it again
        if known is None and not os.path.isdir(path):  # False, not PermissionError, where it cannot be looked up
            known = self._by_folder.get(os.path.dirname(path) or ".")  # the folder of a file, asked before
            path = path.parent
        return known if known is not None else self.for_folder(path)

    def for_folder(self, folder: Path, real_folder: Path | None = None) -> Settings:
        """The settings that apply to the files of `folder`; `real_folder`, its resolved path
        when the caller knows it (discovery walks real folders), spares resolving it. Later
        `for_path` calls for the files of `folder`, as named, are answered from memory.

        Raises:
            ConfigError: the closest configuration file is invalid.
        """
        if self._fixed is not None:
            return self._fixed
        known = self._by_folder.get(os.fspath(folder))
        if known is None:  # resolved once per folder: a costly call
            found = find_config(real_folder or folder.resolve(), self._config_of)
            known = self._by_folder[os.fspath(folder)] = self._for_config(found.resolve() if found else None)
        return known

    def used(self) -> list[Settings]:
        """Every distinct Settings resolved so far (for run-wide reports such as SARIF rules)."""
        if self._fixed is not None:
            return [self._fixed]
        return list(self._by_file.values())
