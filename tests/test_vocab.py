"""`[tool.kllint.vocab]` teaches the analysis a project's own names: log-prob helpers,
stop-gradient helpers, loss sinks and reference names. Without them the same code is silent."""
from __future__ import annotations

import json
from pathlib import Path

from test_cli_support import run_cli, write

CONFIG = """[tool.kllint.vocab]
logprob-functions = ["token_scores"]
stop-gradient-functions = ["freeze"]
loss-sinks = ["optimise"]
reference-names = ["anchor_lp"]
"""

TRAIN = """import torch


def step(policy, batch, beta=0.1):
    lp = token_scores(policy, batch)
    kl = torch.exp(batch["anchor_lp"] - lp) - (batch["anchor_lp"] - lp) - 1
    pg = -lp * batch["adv"]
    optimise((pg + beta * kl).mean())


def step_frozen(policy, batch, beta=0.1):
    lp = freeze(token_scores(policy, batch))
    kl = 0.5 * (lp - batch["anchor_lp"]) ** 2
    pg = -torch.exp(token_scores(policy, batch))
    optimise(pg.mean() + beta * kl.mean())
"""


def _findings(args: list[str]) -> set[tuple[str, int]]:
    result = run_cli(["check", "--no-cache", "--output-format", "json", *args])
    assert result.exit_code in (0, 1), result.stderr
    return {(f["code"], f["line"]) for f in json.loads(result.stdout)}


def test_vocab_names_reach_the_analysis(tmp_path: Path, monkeypatch) -> None:
    write(tmp_path / "pyproject.toml", CONFIG)
    write(tmp_path / "train.py", TRAIN)
    monkeypatch.chdir(tmp_path)
    # configured: the helper gives live policy log-probs, `anchor_lp` is the reference,
    # `optimise` differentiates, and `freeze` stops the gradient
    assert _findings(["train.py"]) == {("KL102", 6), ("KL201", 6), ("KL104", 15)}
    # the same code without the vocabulary: nothing is known to be a log-prob or a loss
    assert _findings(["--isolated", "train.py"]) == set()
