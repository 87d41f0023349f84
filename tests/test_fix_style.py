"""How fixes are written (issue 13, items 13 and 14): the configured line length (`line-length`,
or the formatter's in the same pyproject.toml, default 88), when the safe fixes of KL503 and
KL601 apply and when they are only shown, and that the findings left after a rewrite describe
the new code."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from test_cli_support import run_cli

from kllint.api import check_paths
from kllint.config import ConfigError, load_file

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "fixtures" / "fixes"

LONG = '''import torch


def token_kl_loss(policy_logprobs, reference_logprobs, advantages, response_mask, kl_coef=0.05):
    kl = torch.exp(torch.clamp(reference_logprobs - policy_logprobs, -9.0, 9.0)) - torch.clamp(reference_logprobs - policy_logprobs, -9.0, 9.0) - 1
    per_token = -advantages * torch.exp(policy_logprobs - policy_logprobs.detach()) + kl_coef * kl
    return (per_token * response_mask).sum() / response_mask.sum()
'''


def _fix_content(tmp_path: Path, source: str, pyproject: str | None, code: str = "KL102") -> str:
    """The lines the fix of the `code` finding writes, as `kllint check` reports it (closest
    configuration)."""
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    path = tmp_path / "train.py"
    path.write_text(source, encoding="utf-8")
    result = run_cli(["check", "--no-cache", "--output-format", "json", str(path)])
    found = next(d for d in json.loads(result.stdout) if d["code"] == code)
    assert found["fix"]["region"] is not None
    return found["fix"]["region"]["content"]


def test_default_line_length_binds_the_value_when_the_line_would_be_too_long(tmp_path):
    content = _fix_content(tmp_path, LONG, None)
    assert content.splitlines() == [  # 88: the k3 value bound too, and written over several lines
        "    log_ratio = reference_logprobs - policy_logprobs",
        "    k3 = (",
        "        torch.exp(torch.clamp(log_ratio, -9.0, 9.0))",
        "        - torch.clamp(log_ratio, -9.0, 9.0)",
        "        - 1",
        "    )",
        "    k2 = 0.5 * log_ratio ** 2",
        "    kl = k2 - k2.detach() + k3.detach()",
    ]


def test_a_longer_configured_line_keeps_the_value_inline(tmp_path):
    content = _fix_content(tmp_path, LONG, "[tool.kllint]\nline-length = 130\n")
    assert content.splitlines() == [
        "    log_ratio = reference_logprobs - policy_logprobs",
        "    k2 = 0.5 * log_ratio ** 2",
        "    kl = k2 - k2.detach() + (torch.exp(torch.clamp(log_ratio, -9.0, 9.0)) - torch.clamp(log_ratio, -9.0, 9.0) - 1).detach()",
    ]


def test_the_formatters_line_length_is_the_files_style(tmp_path):
    content = _fix_content(tmp_path, LONG, "[tool.ruff]\nline-length = 40\n\n[tool.kllint]\nselect = ['ALL']\n")
    assert content.splitlines() == [
        "    log_ratio = (",
        "        reference_logprobs",
        "        - policy_logprobs",
        "    )",
        "    k3 = (",
        "        torch.exp(torch.clamp(log_ratio, -9.0, 9.0))",
        "        - torch.clamp(log_ratio, -9.0, 9.0)",
        "        - 1",
        "    )",
        "    k2 = 0.5 * log_ratio ** 2",
        "    kl = k2 - k2.detach() + k3.detach()",
    ]


def test_line_length_is_validated_and_shown(tmp_path):
    bad = tmp_path / "kllint.toml"
    bad.write_text("line-length = 0\n", encoding="utf-8")
    try:
        load_file(bad)
    except ConfigError as exc:
        assert "`line-length` must be a whole number" in str(exc)
    else:
        raise AssertionError("line-length = 0 accepted")
    good = tmp_path / "proj"
    good.mkdir()
    (good / "kllint.toml").write_text("line-length = 100\n", encoding="utf-8")
    (good / "train.py").write_text("x = 1\n", encoding="utf-8")
    result = run_cli(["check", "--show-settings", str(good / "train.py")])
    assert "line-length = 100" in result.stdout


# -- safe fixes: applied where the page says, shown elsewhere ---------------------------------------------------

REFERENCE = '''import torch


def logps(net, ids):
    return torch.log_softmax(net(ids).logits, -1)


def loss_parts(policy, ref_model, ids, mask):
    both = (logps(policy, ids), logps(ref_model, ids))
    logp, ref_logp = both
    return 0.5 * ((logp - ref_logp) * mask).sum(-1) ** 2


def sequence_loss(policy, ref_model, ids, mask, use_ref=True):
    logp = logps(policy, ids)
    ref_logp = logps(ref_model, ids) if use_ref else logp.detach()
    return 0.5 * ((logp - ref_logp) * mask).sum(-1) ** 2
'''


def test_no_grad_is_only_offered_for_a_statement_that_reads_no_policy(tmp_path):
    path = tmp_path / "ref.py"
    path.write_text(REFERENCE, encoding="utf-8")
    found = {d.span.line: d.fix for d in check_paths([str(path)]).diagnostics if d.code == "KL503"}
    assert found[9].applicability == "display-only"  # the same statement runs the policy
    assert found[16].applicability == "display-only"  # a branch of a conditional expression


CLAMPS = '''import jax
import jax.numpy as jnp
import torch


def tensor_cap_loss(logp, ref_logp, mask, cap):
    d = ref_logp - logp
    kl = torch.clamp(torch.exp(d), max=cap) - d - 1
    return (kl * mask).sum() / mask.sum()


def k3_capped_loss(logp, ref_logp, mask):
    d = ref_logp - logp
    kl = (torch.exp(d) - d - 1).clamp(max=10.0)
    return (kl * mask).sum() / mask.sum()


def jax_cap(params, ref_logp, mask, logp_of, cap=1e3):
    logp = logp_of(params)
    d = ref_logp - logp
    kl = jnp.clip(jnp.exp(d), None, cap) - d - 1.0
    return jnp.sum(kl * mask) / jnp.sum(mask)


def step(params, ref_logp, mask, logp_of):
    return jax.grad(jax_cap)(params, ref_logp, mask, logp_of)
'''


def test_clamp_fix_is_safe_only_for_a_direct_exp_with_a_bound_it_can_take_the_log_of(tmp_path):
    path = tmp_path / "clamps.py"
    path.write_text(CLAMPS, encoding="utf-8")
    found = {d.span.line: d.fix for d in check_paths([str(path)]).diagnostics if d.code == "KL601"}
    assert found[8].applicability == "display-only"  # a PyTorch bound that may be a tensor
    assert found[14].applicability == "display-only"  # the clamp bounds k3, not exp
    assert (found[21].applicability, found[21].replacement) == ("safe", "jnp.exp(jnp.clip(d, None, jnp.log(cap)))")


# -- after the rewrite, the findings describe the new code --------------------------------------------------------

def test_findings_left_after_a_rewrite_describe_the_new_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for case in ("kl102_grpo_token_k3", "kl101_token_k1_loss", "jax_kl102_grpo_token_k3", "kl102_stale_comments"):
        target = tmp_path / f"{case}.py"
        shutil.copyfile(PAIRS / f"{case}.py", target)
        run_cli(["check", "--fix", "--unsafe-fixes", "--no-cache", target.name])
        text = target.read_text(encoding="utf-8").splitlines()
        left = check_paths([str(target)]).diagnostics
        assert [d.code for d in left] == ["KL201"], case
        rewritten = left[0].span.line
        assert "k2.detach()" in text[rewritten - 1] or "stop_gradient(k2)" in text[rewritten - 1]
        notes = {step.line: step.note for step in left[0].trace}
        assert notes[rewritten].startswith("straight-through term"), (case, notes)
        for line, note in notes.items():  # every step is a line of the new code, saying what it is now
            assert text[line - 1].strip() and "k1 (the log-ratio" not in note and "k3 estimate" not in note
        assert "(0.5 *" not in "\n".join(text)  # no repeated surrogate left behind


def test_the_full_output_shows_the_lines_a_fix_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copyfile(PAIRS / "kl102_grpo_token_k3.py", tmp_path / "train.py")
    out = run_cli(["check", "--no-cache", "--select", "KL102", "train.py"]).stdout
    assert "  fix (unsafe): lines 18-19 become\n" in out
    assert "    | log_ratio = ref_logp - logp\n    | k3 = torch.exp(log_ratio) - log_ratio - 1\n" in out
    assert "    | kl = k2 - k2.detach() + k3.detach()  # expect: KL102,KL201\n" in out
