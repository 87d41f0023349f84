"""`kllint check -`: the source from stdin, `--stdin-filename` for configuration, module
resolution and the reported path; `--fix` prints the fixed source on stdout (as Ruff)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
K3_LOSS = (FIXTURES / "fixes" / "kl102_grpo_token_k3.py").read_text(encoding="utf-8")
K3_FIXED = (FIXTURES / "fixes" / "kl102_grpo_token_k3.unsafe.fixed.py").read_text(encoding="utf-8")


def kllint(args: list[str], source: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kllint", "check", *args], input=source, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_stdin_is_checked_and_reported_at_the_stdin_filename(tmp_path):
    proc = kllint(["-", "--stdin-filename", "src/train.py", "--output-format", "json"], K3_LOSS, tmp_path)
    assert proc.returncode == 1, proc.stderr
    found = json.loads(proc.stdout)
    assert {(d["path"], d["code"], d["line"]) for d in found} == {("src/train.py", "KL102", 19),
                                                                 ("src/train.py", "KL201", 19)}
    assert not (tmp_path / "src").exists()  # the named file need not exist
    assert not (tmp_path / ".kllint_cache").exists()  # a buffer is never cached


def test_stdin_without_a_filename_is_reported_as_dash(tmp_path):
    proc = kllint(["-", "--output-format", "concise"], K3_LOSS, tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith("-:19:10: KL102 ")


def test_stdin_filename_alone_reads_stdin_and_full_output_frames_the_buffer(tmp_path):
    (tmp_path / "train.py").write_text("x = 1\n", encoding="utf-8")  # the disk copy differs
    proc = kllint(["--stdin-filename", "train.py"], K3_LOSS, tmp_path)
    assert proc.returncode == 1
    assert "train.py:19:10: KL102" in proc.stdout
    assert "kl = torch.exp(ref_logp - logp)" in proc.stdout  # the code frame shows the buffer


def test_stdin_filename_selects_the_closest_configuration(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "pyproject.toml").write_text("[tool.kllint]\nignore = ['KL201']\n", encoding="utf-8")
    inside = kllint(["-", "--stdin-filename", "pkg/train.py", "--output-format", "json"], K3_LOSS, tmp_path)
    outside = kllint(["-", "--stdin-filename", "train.py", "--output-format", "json"], K3_LOSS, tmp_path)
    assert [d["code"] for d in json.loads(inside.stdout)] == ["KL102"]
    assert [d["code"] for d in json.loads(outside.stdout)] == ["KL102", "KL201"]


def test_stdin_filename_resolves_helpers_of_its_project(tmp_path):
    # the helper computes the log-ratio, the buffer writes the k3 estimate of it (findings are
    # placed where the estimate is written): only a resolved helper makes it a KL estimate
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (tmp_path / "helpers.py").write_text(
        "def log_ratio(logprob, ref_logprob):\n"
        "    return ref_logprob - logprob\n", encoding="utf-8")
    source = ("from helpers import log_ratio\n\n\ndef loss_fn(logprob, ref_logprob):\n"
              "    log_r = log_ratio(logprob, ref_logprob)\n"
              "    return (log_r.exp() - log_r - 1).mean()\n")
    named = kllint(["-", "--stdin-filename", "train.py", "--output-format", "json"], source, tmp_path)
    assert "KL102" in {d["code"] for d in json.loads(named.stdout)}, named.stderr
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other"
    elsewhere.mkdir()
    unnamed = kllint(["-", "--output-format", "json"], source, elsewhere)
    assert "KL102" not in {d["code"] for d in json.loads(unnamed.stdout)}


def test_fix_prints_the_fixed_source_on_stdout_and_findings_on_stderr(tmp_path):
    (tmp_path / "train.py").write_text(K3_LOSS, encoding="utf-8")
    proc = kllint(["-", "--stdin-filename", "train.py", "--fix", "--unsafe-fixes", "--output-format", "concise"],
                  K3_LOSS, tmp_path)
    # the fix pair's expected file also updates the fixture's `# expect:` comment
    assert proc.stdout.replace("# expect: KL102,KL201", "# expect: KL201") == K3_FIXED
    assert "train.py:22:10: KL201" in proc.stderr and "KL102" not in proc.stderr
    assert proc.returncode == 1  # KL201 remains
    assert (tmp_path / "train.py").read_text(encoding="utf-8") == K3_LOSS  # no file is written


def test_fix_without_applicable_fixes_echoes_the_source(tmp_path):
    proc = kllint(["-", "--fix", "--output-format", "concise"], K3_LOSS, tmp_path)  # the fix is unsafe
    assert proc.stdout == K3_LOSS
    assert "-:19:10: KL102" in proc.stderr


def test_diff_with_stdin(tmp_path):
    proc = kllint(["-", "--stdin-filename", "train.py", "--diff", "--unsafe-fixes"], K3_LOSS, tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    assert "+    k2 = 0.5 * log_ratio ** 2\n+    kl = k2 - k2.detach() + k3.detach()" in proc.stdout


def test_force_exclude_applies_to_the_stdin_filename(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.kllint]\nextend-exclude = ['vendor']\n", encoding="utf-8")
    proc = kllint(["-", "--stdin-filename", "vendor/train.py", "--force-exclude", "--output-format", "json"],
                  K3_LOSS, tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    fixed = kllint(["-", "--stdin-filename", "vendor/train.py", "--force-exclude", "--fix"], K3_LOSS, tmp_path)
    assert fixed.stdout == K3_LOSS  # the source comes back unchanged
    checked = kllint(["-", "--stdin-filename", "vendor/train.py", "--output-format", "json"], K3_LOSS, tmp_path)
    assert checked.returncode == 1


def test_bad_stdin_usage_is_exit_2(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n", encoding="utf-8")
    mixed = kllint(["-", "a.py"], "", tmp_path)
    assert mixed.returncode == 2 and "cannot be combined" in mixed.stderr
    named = kllint(["a.py", "--stdin-filename", "b.py"], "", tmp_path)
    assert named.returncode == 2 and "--stdin-filename" in named.stderr
    noqa = kllint(["-", "--add-noqa"], K3_LOSS, tmp_path)
    assert noqa.returncode == 2


def test_stdin_that_does_not_parse_is_kl900(tmp_path):
    proc = kllint(["-", "--stdin-filename", "t.py", "--output-format", "concise"], "def kl_penalty(:\n", tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith("t.py:1:") and "KL900" in proc.stdout
    # text that names no KL nor reference is let go unparsed: no KL900 for it
    quiet = kllint(["-", "--stdin-filename", "t.py", "--output-format", "concise"], "def f(:\n", tmp_path)
    assert quiet.returncode == 0 and "KL900" not in quiet.stdout
