"""kllint on pinned releases of real RL training libraries, downloaded at test time.

Each release is fetched once into the release cache (`tests/releases.py`; never committed)
and checked once per module (module-scoped fixtures). Lines are exact: they were read from
the pinned releases, and `test_source_lines_are_as_read` guards that reading.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from releases import release_tree

pytestmark = pytest.mark.network

TRL_NEW = "trl==0.14.0"
TRL_OLD = "trl==0.11.4"
TUNIX = "google-tunix==0.1.7"
VERL = "verl==0.9.1"

# (release, package folder checked)
PACKAGES = {TRL_NEW: "trl", TRL_OLD: "trl", TUNIX: "tunix", VERL: "verl"}

GRPO = "trl/trainer/grpo_trainer.py"
PPOV2 = "trl/trainer/ppov2_trainer.py"
TUNIX_ALGO = "tunix/rl/algo_core.py"
VERL_LOSSES = "verl/workers/utils/losses.py"

# (release, file, line, text the line contains): the locations the assertions below are about.
LOCATIONS = [
    (TRL_NEW, GRPO, 454, "per_token_kl = torch.exp(ref_per_token_logps - per_token_logps)"),
    (TRL_NEW, GRPO, 530, "mean_kl = ((per_token_kl * completion_mask).sum(dim=1)"),
    (TUNIX, TUNIX_ALGO, 258, "kl = common.compute_kl_divergence("),
    (TUNIX, TUNIX_ALGO, 261, '"kl",'),
    (TRL_OLD, PPOV2, 416, "kl = logprobs - ref_logprobs"),
    (TRL_OLD, PPOV2, 417, "non_score_reward = -args.kl_coef * kl"),
    (VERL, VERL_LOSSES, 135, "kld = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, "
                             "kl_penalty=config.kl_loss_type)"),
]


def _package(spec: str) -> Path:
    return release_tree(spec) / PACKAGES[spec]


@pytest.fixture(scope="module")
def all_four(tmp_path_factory) -> dict:
    """One CLI run (JSON, two workers, no cache) over the four package trees, as a user runs it."""
    folders = [str(_package(spec).resolve()) for spec in PACKAGES]
    cwd = tmp_path_factory.mktemp("run")
    proc = subprocess.run(
        [sys.executable, "-m", "kllint", "check", *folders, "--output-format", "json", "-j", "2", "--no-cache"],
        capture_output=True, text=True, cwd=cwd, timeout=3600,
    )
    return {"proc": proc, "folders": dict(zip(PACKAGES, folders)), "findings": json.loads(proc.stdout or "[]")}


def _release(all_four: dict, spec: str) -> SimpleNamespace:
    """The findings of one release, shaped like `check_paths`' result."""
    root = all_four["folders"][spec] + "/"
    diagnostics = [
        SimpleNamespace(code=f["code"], path=f["path"], message=f["message"],
                        span=SimpleNamespace(line=f["line"], column=f["column"]))
        for f in all_four["findings"] if f["path"].startswith(root)
    ]
    return SimpleNamespace(diagnostics=diagnostics)


@pytest.fixture(scope="module")
def trl_new(all_four):
    return _release(all_four, TRL_NEW)


@pytest.fixture(scope="module")
def trl_old(all_four):
    return _release(all_four, TRL_OLD)


@pytest.fixture(scope="module")
def tunix(all_four):
    return _release(all_four, TUNIX)


@pytest.fixture(scope="module")
def verl(all_four):
    return _release(all_four, VERL)


def _in_file(result, suffix: str) -> list:
    return [d for d in result.diagnostics
            if d.path.replace("\\", "/") == suffix or d.path.replace("\\", "/").endswith("/" + suffix)]


def _on_lines(result, suffix: str, first: int, last: int | None = None) -> list:
    last = first if last is None else last
    return [d for d in _in_file(result, suffix) if first <= d.span.line <= last]


def _codes(diagnostics) -> set[str]:
    return {d.code for d in diagnostics}


def _show(result, suffix: str, line: int, radius: int = 15) -> str:
    """The findings near `line`, for assertion messages."""
    near = _on_lines(result, suffix, line - radius, line + radius)
    rows = [f"  {d.code} {d.path}:{d.span.line}:{d.span.column} {d.message}" for d in near]
    return f"findings in {suffix} lines {line - radius}..{line + radius}:\n" + ("\n".join(rows) or "  (none)")


@pytest.mark.parametrize("spec,suffix,line,text", LOCATIONS, ids=[f"{s}:{f}:{n}" for s, f, n, _ in LOCATIONS])
def test_source_lines_are_as_read(spec: str, suffix: str, line: int, text: str) -> None:
    source = (release_tree(spec) / suffix).read_text(encoding="utf-8").splitlines()
    assert text in source[line - 1], f"{spec} {suffix}:{line} is {source[line - 1]!r}"


# --- trl 0.14.0: GRPO loss adds the per-token k3 KL, then a token mean -----------------------

def test_trl_grpo_k3_in_loss(trl_new) -> None:
    found = _codes(_on_lines(trl_new, GRPO, 454))
    assert {"KL102", "KL201"} <= found, _show(trl_new, GRPO, 454)


def test_trl_grpo_kl_metric_is_silent(trl_new) -> None:
    assert _on_lines(trl_new, GRPO, 530, 531) == [], _show(trl_new, GRPO, 530)


# --- google-tunix 0.1.7: JAX PPO loss, k1 via a helper in tunix/rl/common.py, mode "kl" -------

def test_tunix_ppo_loss_k1(tunix) -> None:
    found = _codes(_on_lines(tunix, TUNIX_ALGO, 258))
    assert "KL101" in found, _show(tunix, TUNIX_ALGO, 258)


def test_tunix_ppo_loss_k1_is_not_per_token(tunix) -> None:
    # k1 gets KL101 alone, never KL201 (rules.md); the whole KL block is lines 256..266.
    assert "KL201" not in _codes(_on_lines(tunix, TUNIX_ALGO, 256, 266)), _show(tunix, TUNIX_ALGO, 258)


# --- trl 0.11.4: PPOv2 puts the detached k1 into the per-token reward, then GAE -------------

def test_trl_ppov2_k1_reward_is_silent(trl_old) -> None:
    assert _on_lines(trl_old, PPOV2, 416, 418) == [], _show(trl_old, PPOV2, 416)


# --- verl 0.9.1: actor KL loss, estimator chosen by config.kl_loss_type ------------------------

def test_verl_kl_loss_by_config(verl) -> None:
    here = _on_lines(verl, VERL_LOSSES, 135)
    assert {"KL101", "KL102", "KL103", "KL201"} <= _codes(here), _show(verl, VERL_LOSSES, 135)


def test_verl_kl_loss_messages_name_the_options(verl) -> None:
    here = _on_lines(verl, VERL_LOSSES, 135)
    k3 = [d.message for d in here if d.code == "KL102"]
    assert k3 and any("low_var_kl" in m or "k3" in m for m in k3), _show(verl, VERL_LOSSES, 135)
    non_kl = [d.message for d in here if d.code == "KL103"]
    assert non_kl and any("abs" in m for m in non_kl), _show(verl, VERL_LOSSES, 135)


# --- all four together: no internal errors -----------------------------------------------------

def test_all_four_releases_without_internal_errors(all_four) -> None:
    proc = all_four["proc"]
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    assert "internal error" not in proc.stderr, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    findings = all_four["findings"]
    assert isinstance(findings, list)
    assert "KL900" not in {f["code"] for f in findings}, [f for f in findings if f["code"] == "KL900"][:5]


def test_releases_same_findings_without_prefilter(all_four) -> None:
    """Issue 6, item 1: every file analysed in one process gives the findings of the prefiltered
    two-worker CLI run."""
    from kllint.config import Settings
    from kllint.pipeline.discovery import discover
    from kllint.pipeline.run import run

    settings = Settings()
    files = list(discover(list(all_four["folders"].values()), settings))
    result = run(files, settings, jobs=1, prefilter=False)
    assert not result.internal_errors
    unfiltered = sorted((str(Path(d.path).resolve()), d.span.line, d.span.column, d.code) for d in result.diagnostics)
    cli = sorted((str(Path(f["path"]).resolve()), f["line"], f["column"], f["code"]) for f in all_four["findings"])
    assert unfiltered == cli
