"""Configuration: `[tool.kllint]` / kllint.toml, keys, errors, and the closest file per checked file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_cli_support import fake_analysis, run_cli, write  # noqa: F401 - fixture

from kllint.config import (KNOWN_KEYS, CliOverrides, ConfigError, Settings, SettingsResolver, Vocab,
                           load_file, parse_table)
from kllint.pipeline.discovery import discover


def _codes(result) -> list[tuple[str, str]]:
    return [(d["path"], d["code"]) for d in json.loads(result.stdout)]


# --- parsing ------------------------------------------------------------------------------


def test_every_documented_key_parses():
    settings = parse_table({
        "select": ["KL1", "KL2"], "extend-select": ["KL5"], "ignore": ["KL201"],
        "exclude": ["gen"], "extend-exclude": ["vendor/"], "per-file-ignores": {"tests/*": ["KL1"]},
        "output-format": "sarif", "respect-gitignore": False, "blanket-noqa": True,
        "vocab": {"logprob-functions": ["my_logprobs"], "stop-gradient-functions": ["sg"],
                  "loss-sinks": ["trainer.step"], "reference-names": ["anchor"]},
    }, "pyproject.toml")
    assert settings.select == ("KL1", "KL2")
    assert settings.extend_select == ("KL5",)
    assert "KL201" not in settings.active_codes and "KL502" in settings.active_codes
    assert "gen" in settings.exclude and ".git" in settings.exclude
    assert settings.extend_exclude == ("vendor/",)
    assert settings.per_file_ignores == (("tests/*", ("KL1",)),)
    assert settings.output_format == "sarif"
    assert settings.respect_gitignore is False and settings.blanket_noqa is True
    assert settings.vocab == Vocab(("my_logprobs",), ("sg",), ("trainer.step",), ("anchor",))


@pytest.mark.parametrize("table,message", [
    ({"extend_select": ["KL1"]}, "unknown key `extend_select` (did you mean 'extend-select'?)"),
    ({"selct": ["KL1"]}, "unknown key `selct` (did you mean 'select'?)"),
    ({"blanket_noqa": True}, "(did you mean 'blanket-noqa'?)"),
    ({"zzz": 1}, "unknown key `zzz`"),
    ({"vocab": {"loss-sink": ["x"]}}, "unknown key `vocab.loss-sink` (did you mean 'loss-sinks'?)"),
    ({"select": "KL1"}, "`select` must be a list of strings"),
    ({"select": ["KL77"]}, "unknown rule selector 'KL77'"),
    ({"per-file-ignores": {"a.py": ["NOPE1"]}}, "unknown rule selector 'NOPE1'"),
    ({"output-format": "xml"}, "`output-format` must be one of"),
    ({"blanket-noqa": "yes"}, "`blanket-noqa` must be true or false"),
])
def test_invalid_tables(table, message):
    with pytest.raises(ConfigError) as info:
        parse_table(table, "pyproject.toml")
    assert message in str(info.value)
    assert str(info.value).startswith("pyproject.toml: ")


def test_blanket_noqa_is_a_known_key():
    assert "blanket-noqa" in KNOWN_KEYS


def test_pyproject_without_table_and_kllint_toml(tmp_path):
    plain = write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    assert load_file(plain) is None
    own = write(tmp_path / "kllint.toml", "ignore = ['KL5']\n")
    settings = load_file(own)
    assert settings.ignore == ("KL5",) and settings.source == own
    broken = write(tmp_path / "b" / "kllint.toml", "select = [\n")
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_file(broken)


# --- per-file resolution -------------------------------------------------------------------


@pytest.fixture
def nested(tmp_path):
    """root/pyproject.toml ignores KL5; root/sub/kllint.toml ignores KL1; root/plain has a
    pyproject.toml without [tool.kllint] (so root's applies)."""
    write(tmp_path / "pyproject.toml", "[tool.kllint]\nignore = ['KL5']\n")
    write(tmp_path / "sub" / "kllint.toml", "ignore = ['KL1']\n")
    write(tmp_path / "plain" / "pyproject.toml", "[project]\nname = 'p'\n")
    for folder in ("", "sub/", "sub/deep/", "plain/"):
        write(tmp_path / f"{folder}m.py", "a = BAD(x)\nb = WARN(y)\nc = LOOP(z)\n")
    return tmp_path


def test_resolver_closest_config_wins(nested):
    resolver = SettingsResolver()
    assert resolver.for_path(nested / "m.py").source == (nested / "pyproject.toml").resolve()
    assert resolver.for_path(nested / "sub" / "deep" / "m.py").source == (nested / "sub" / "kllint.toml").resolve()
    assert resolver.for_path(nested / "plain" / "m.py").source == (nested / "pyproject.toml").resolve()
    assert resolver.for_path(nested / "sub").ignore == ("KL1",)
    # each configuration file is parsed once and shared
    assert resolver.for_path(nested / "sub" / "m.py") is resolver.for_path(nested / "sub" / "deep" / "m.py")
    assert len(resolver.used()) == 2


def test_resolver_answers_files_from_their_folder_as_named(nested, monkeypatch):
    # for_path answers a file from the settings of its folder asked before (by name, as discovery
    # walks it), relative names included; a folder named like a module file is still a folder
    monkeypatch.chdir(nested / "sub")
    resolver = SettingsResolver()
    write(nested / "sub" / "pkg.py" / "m.py", "")
    assert resolver.for_folder(Path("deep")).ignore == ("KL1",)
    assert resolver.for_path(Path("deep") / "m.py") is resolver.for_folder(Path("deep"))
    assert resolver.for_path("m.py") is resolver.for_path(nested / "sub" / "deep" / "m.py")
    assert resolver.for_path(Path("pkg.py")) is resolver.for_path(Path("pkg.py") / "m.py")
    assert resolver.for_path("../m.py").ignore == ("KL5",) and resolver.for_path("..").ignore == ("KL5",)


def test_resolver_overrides_and_options(nested):
    over = SettingsResolver(CliOverrides(select=("KL1", "KL5"), ignore=("KL101",)))
    assert over.for_path(nested / "m.py").active_codes == frozenset({"KL102", "KL103", "KL104", "KL105"})
    isolated = SettingsResolver(isolated=True)
    assert isolated.for_path(nested / "sub" / "m.py") == Settings()
    fixed = SettingsResolver(config=nested / "sub" / "kllint.toml")
    assert fixed.for_path(nested / "m.py").ignore == ("KL1",)
    with pytest.raises(ConfigError, match="cannot be used together"):
        SettingsResolver(config=nested / "pyproject.toml", isolated=True)
    with pytest.raises(ConfigError, match="unknown rule selector"):
        SettingsResolver(CliOverrides(ignore=("XX1",)))


def test_cli_applies_closest_config_per_file(nested, monkeypatch, fake_analysis):
    monkeypatch.chdir(nested)
    result = run_cli(["check", "--output-format", "json", "m.py", "sub", "plain"])
    assert sorted(_codes(result)) == sorted([
        ("m.py", "KL101"), ("m.py", "KL102"),
        ("plain/m.py", "KL101"), ("plain/m.py", "KL102"),
        ("sub/m.py", "KL502"), ("sub/deep/m.py", "KL502"),
    ])
    # the order of paths on the command line does not matter
    reverse = run_cli(["check", "--output-format", "json", "sub", "m.py"])
    assert ("m.py", "KL102") in _codes(reverse) and ("sub/m.py", "KL101") not in _codes(reverse)


def test_cli_config_and_isolated(nested, monkeypatch, fake_analysis):
    monkeypatch.chdir(nested)
    isolated = run_cli(["check", "--isolated", "--output-format", "json", "sub/m.py"])
    assert sorted(code for _, code in _codes(isolated)) == ["KL101", "KL102", "KL502"]
    forced = run_cli(["check", "--config", "pyproject.toml", "--output-format", "json", "sub/m.py"])
    assert sorted(code for _, code in _codes(forced)) == ["KL101", "KL102"]
    extended = run_cli(["check", "--extend-select", "KL1", "--ignore", "KL102", "--output-format", "json", "m.py"])
    assert [code for _, code in _codes(extended)] == ["KL101"]
    missing = run_cli(["check", "--config", "nope.toml", "m.py"])
    assert missing.exit_code == 2 and "cannot read configuration" in missing.stderr


def test_unknown_key_in_nested_config_is_exit_2_one_line(nested, monkeypatch, fake_analysis):
    write(nested / "sub" / "kllint.toml", "ignor = ['KL1']\n")
    monkeypatch.chdir(nested)
    result = run_cli(["check", "."])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "kllint.toml: unknown key `ignor` (did you mean 'ignore'?)" in lines[0]


def test_output_format_from_config(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "pyproject.toml", "[tool.kllint]\noutput-format = 'concise'\n")
    write(tmp_path / "m.py", "a = BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "m.py"])
    assert result.stdout == "m.py:1:5: KL102 [*] BAD misuses the KL gradient.\n"
    assert run_cli(["check", "--output-format", "json", "m.py"]).stdout.startswith("[")


def test_per_file_ignores_relative_to_config(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "proj" / "pyproject.toml",
          "[tool.kllint]\nper-file-ignores = { 'tests/*' = ['KL1'], 'legacy.py' = ['ALL'] }\n")
    write(tmp_path / "proj" / "tests" / "t.py", "a = BAD(x)\nb = WARN(y)\n")
    write(tmp_path / "proj" / "legacy.py", "a = BAD(x)\n")
    write(tmp_path / "proj" / "src" / "tests.py", "a = BAD(x)\n")
    monkeypatch.chdir(tmp_path)  # paths shown as proj/...: patterns still apply relative to proj/
    result = run_cli(["check", "--output-format", "json", "proj"])
    assert sorted(_codes(result)) == [("proj/src/tests.py", "KL102"), ("proj/tests/t.py", "KL502")]


def test_excludes_relative_to_their_config(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "pyproject.toml", "[tool.kllint]\nextend-exclude = ['generated/', '/top.py']\n")
    write(tmp_path / "generated" / "g.py", "a = BAD(x)\n")
    write(tmp_path / "top.py", "a = BAD(x)\n")
    write(tmp_path / "pkg" / "top.py", "a = BAD(x)\n")
    write(tmp_path / "lib" / "kllint.toml", "exclude = ['skip_me.py']\n")
    write(tmp_path / "lib" / "skip_me.py", "a = BAD(x)\n")
    write(tmp_path / "lib" / "generated" / "kept.py", "a = BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    result = run_cli(["check", "--output-format", "json", "."])
    assert sorted(path for path, _ in _codes(result)) == ["lib/generated/kept.py", "pkg/top.py"]
    # a file named explicitly is checked, unless --force-exclude
    named = run_cli(["check", "--output-format", "json", "generated/g.py", "lib/skip_me.py"])
    assert len(_codes(named)) == 2
    forced = run_cli(["check", "--force-exclude", "--output-format", "json", "generated/g.py",
                      "lib/skip_me.py", "pkg/top.py"])
    assert _codes(forced) == [("pkg/top.py", "KL102")]
    assert forced.exit_code == 1
    nothing = run_cli(["check", "--force-exclude", "generated/g.py"])
    assert nothing.exit_code == 0


def test_discover_accepts_plain_settings(tmp_path):
    write(tmp_path / "a.py", "")
    write(tmp_path / "build" / "b.py", "")
    found = [d.path.name for d in discover([str(tmp_path)], Settings())]
    assert found == ["a.py"]


def test_gitignore_respected_unless_disabled(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / ".gitignore", "ignored/\n")
    write(tmp_path / "ignored" / "x.py", "a = BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    assert run_cli(["check", "."]).exit_code == 0
    write(tmp_path / "kllint.toml", "respect-gitignore = false\n")
    assert run_cli(["check", "."]).exit_code == 1


def test_a_gitignore_is_read_through_a_symbolic_link_and_not_from_a_folder(tmp_path):
    # discovery reads `.gitignore` only when the folder's listing names it among its files
    write(tmp_path / "shared.ignore", "skipped.py\n")
    for folder in ("linked", "folder"):
        write(tmp_path / folder / "skipped.py", "")
        write(tmp_path / folder / "kept.py", "")
    (tmp_path / "linked" / ".gitignore").symlink_to(tmp_path / "shared.ignore")
    write(tmp_path / "folder" / ".gitignore" / "skipped.py", "")
    found = sorted(d.path.relative_to(tmp_path).as_posix() for d in discover([str(tmp_path)], Settings()))
    assert found == ["folder/.gitignore/skipped.py", "folder/kept.py", "folder/skipped.py", "linked/kept.py"]


def test_settings_for_path_is_identity():
    settings = Settings()
    assert settings.for_path(Path("anything.py")) is settings


def test_an_empty_select_selects_no_rule():
    """As in Ruff: `select = []` enables nothing, and `extend-select` adds to that nothing."""
    assert Settings(select=()).active_codes == frozenset()
    assert Settings(select=(), extend_select=("KL102",)).active_codes == frozenset({"KL102"})
    assert "KL102" in Settings().active_codes


def test_a_run_without_a_configuration_file_never_imports_tomllib(tmp_path: Path):
    import os
    import subprocess
    import sys

    import kllint

    env = dict(os.environ, PYTHONPATH=str(Path(kllint.__file__).resolve().parents[1]))  # this checkout's kllint
    (tmp_path / "train.py").write_text("import torch\n\n\ndef loss(logp, ref):\n"
                                       "    return (torch.exp(ref - logp) - (ref - logp) - 1).mean()\n")
    probe = ("import contextlib, io, json, sys\nfrom kllint.cli import cli\nout = io.StringIO()\n"
             "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
             "    cli(['check', 'train.py', '--no-cache', '--output-format', 'json'], standalone_mode=False)\n"
             "print(len(json.loads(out.getvalue())), 'tomllib' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path,
                          env=env)
    assert done.stdout.split() == ["2", "False"]
    (tmp_path / "pyproject.toml").write_text('[tool.kllint]\nignore = ["KL201"]\n')
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path,
                          env=env)
    assert done.stdout.split() == ["1", "True"]
