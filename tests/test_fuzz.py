"""Issue 14 fuzzing (marker `fuzz`, in the default run and so in `.ci/run`; fixed seeds, about a
minute on two cores):

- `test_hypothesmith_programs`: programs from the Python grammar (hypothesmith), each analysed
  without the prefilter (so the whole analysis sees them): no exception escapes, no internal
  error, and KL900 exactly when Python's own parser rejects the program.
- `test_mutated_corpus_in_one_run`: a few hundred files made from the fixtures by seeded
  mutations (deleted, duplicated and swapped lines, inserted tokens, NUL bytes, invalid UTF-8,
  truncation, very long `and` chains, deep nesting, foreign encodings) checked in one
  `kllint check -j 2` run and again over the cache it filled: exit 0 or 1, no traceback and no
  internal error, KL900 on every file Python rejects, the same output warm as cold, and the
  untouched fixtures keep their findings.
"""
from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings

from kllint.config import Settings
from kllint.pipeline.discovery import Discovered
from kllint.pipeline.run import run
from kllint.pipeline.prefilter import parse_or_error
from prefilter_oracle import prefilter_admits
from test_hostile_files import kllint

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "fixtures").rglob("*.py"))
SEED = 14
MUTATED_FILES = 240

pytestmark = pytest.mark.fuzz


def _python_accepts(data: bytes) -> bool:
    """Whether CPython's parser takes the bytes (decoded as Python does) in a fresh-ish stack,
    or they are valid newer Python that kllint checks all the same (`kllint.compat`: PEP 695
    type parameters on Python 3.11)."""
    try:
        ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        from kllint.compat import newer_syntax_outline

        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        if not isinstance(error, SyntaxError):
            return False
        outline, _ = newer_syntax_outline(text, error)
        return outline is not None
    return True


@settings(max_examples=120, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(source=hypothesmith.from_grammar())
def test_hypothesmith_programs(tmp_path_factory, source):
    folder = tmp_path_factory.mktemp("prog")
    target = folder / "prog.py"
    target.write_text(source, encoding="utf-8", errors="surrogatepass")
    result = run([Discovered(target, "prog.py")], Settings(), prefilter=False)
    assert result.internal_errors == [], result.internal_errors
    kl900 = [d for d in result.diagnostics if d.code == "KL900"]
    if _python_accepts(target.read_bytes()):
        assert not kl900 or "too deep" in kl900[0].message or "stopped" in kl900[0].message, kl900[0].message
    elif parse_or_error(source)[0] is None:  # no outline, not even from the newer-grammar rewrite
        assert kl900, "Python rejects this program: KL900 expected"
    assert [d.path for d in result.diagnostics] == ["prog.py"] * len(result.diagnostics)


TOKENS = ["(", ")", "[", "]", "{", "}", ":", ",", ".", "\\", "'", '"', '"""', "#", "@", "=", "**", "-",
          "def", "lambda", "yield", "return", "async", "await", "class", "if", "else:", "try:", "with",
          "\t", "    ", "\n", "\r", "\x00", "\ufeff", "é", "torch.exp(", ".detach()", "ref_logp",
          "logp - ref", "loss.backward()", "with torch.no_grad():", "kl = ", "global x", "nonlocal y",
          "f'{", "match x:", "case _:", "*args", "...", "1e400", "0" * 50, "type T = int", "def g[T](x): pass"]


def _mutate(rng: random.Random, text: str) -> bytes:
    lines = text.splitlines(keepends=True) or [""]
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["delete", "duplicate", "swap", "insert", "insert", "truncate", "indent", "chain",
                           "nest", "invalid-utf8", "latin1"])
        at = rng.randrange(len(lines))
        if kind == "delete" and len(lines) > 1:
            del lines[at]
        elif kind == "duplicate":
            lines.insert(at, lines[at])
        elif kind == "swap":
            other = rng.randrange(len(lines))
            lines[at], lines[other] = lines[other], lines[at]
        elif kind == "insert":
            column = rng.randint(0, len(lines[at]))
            lines[at] = lines[at][:column] + rng.choice(TOKENS) + lines[at][column:]
        elif kind == "indent":
            lines[at] = rng.choice(["  ", "\t", "        "]) + lines[at]
        elif kind == "chain":
            lines.insert(at, "kl = " + " or ".join(["a"] * rng.choice([10, 3000, 9000])) + "\n")
        elif kind == "nest":
            depth = rng.choice([50, 150, 1000])
            lines.insert(at, "kl = " + "(" * depth + "a" + ")" * depth + "\n")
        elif kind == "truncate":
            joined = "".join(lines)
            lines = joined[:rng.randint(0, len(joined))].splitlines(keepends=True) or [""]
        elif kind == "invalid-utf8":
            return "".join(lines).encode("utf-8", "surrogatepass") + b"\xff\xfe"
        elif kind == "latin1":
            body = "".join(lines).encode("latin-1", "replace")
            return b"# -*- coding: latin-1 -*-\n" + body + b"\n# caf\xe9\n"
    return "".join(lines).encode("utf-8", "surrogatepass")


@pytest.mark.slow
def test_mutated_corpus_in_one_run(tmp_path):
    rng = random.Random(SEED)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'fuzz'\n")
    written: dict[str, bytes] = {}
    for number in range(MUTATED_FILES):
        source = rng.choice(FIXTURES)
        data = _mutate(rng, source.read_text(encoding="utf-8"))
        name = f"corpus/m{number:03d}_{source.stem}.py"
        (tmp_path / name).write_bytes(data)
        written[name] = data
    intact = FIXTURES[:: max(len(FIXTURES) // 6, 1)][:6]
    for source in intact:
        (tmp_path / f"corpus/intact_{source.parent.name}_{source.name}").write_bytes(source.read_bytes())
    args = ["check", "-j", "2", "--output-format", "json", "--cache-dir", str(tmp_path / "cache"), "corpus"]
    cold = kllint(args, tmp_path, timeout=900)
    assert cold.returncode in (0, 1), cold.stderr[-3000:]
    assert "Traceback" not in cold.stderr and "internal error" not in cold.stderr, cold.stderr[-3000:]
    found = json.loads(cold.stdout)
    kl900 = {d["path"] for d in found if d["code"] == "KL900"}
    rejected = {name for name, data in written.items() if not _python_accepts(data)}
    # a file that names no KL is skipped unparsed: its syntax error is not reported
    admitted = {name for name in rejected if prefilter_admits(written[name])}
    assert admitted <= kl900, sorted(admitted - kl900)[:10]
    assert not (rejected - admitted) & kl900, sorted((rejected - admitted) & kl900)[:10]
    for source in intact:
        mine = [d for d in found if d["path"].endswith(f"intact_{source.parent.name}_{source.name}")]
        expected = source.read_text(encoding="utf-8").count("# expect:")
        assert len({d["line"] for d in mine}) >= min(expected, 1), (source, mine)
    warm = kllint(args, tmp_path, timeout=900)
    assert warm.stdout == cold.stdout
    assert warm.returncode == cold.returncode
