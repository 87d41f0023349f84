#!/usr/bin/env python3
"""Time kllint on small files whose analysis used to explode (issue 14, item 4).

Usage:
    python bench/bench_pathological.py            # a markdown table on stdout
    python bench/bench_pathological.py --json
    python bench/bench_pathological.py --only k3chain20,k3chain40
    python bench/bench_pathological.py --deep     # the inputs of bench/deep_inputs.py (issue 35)

Each input is written to a temporary folder and checked in this process with
`kllint.api.check_paths` and the default settings (a 60 s CPU time budget per file). The table
shows the CPU seconds of the check (all threads of this process) and its wall time, how the file
was handled (`analysed`, or `stopped by the time budget`), the number of functions abandoned,
the number of findings (a KL900 "not checked" counts), and whether the time is within the
target (`TARGET_SECONDS` of CPU; for the `deep_*` inputs of issue 35, bench/deep_inputs.py,
`DEEP_TARGET_SECONDS` of wall time, each finishing or giving up on its own). The first input
is a warm-up (imports of libcst and the analysis) and is not shown. Exit status 1 if an input missed
the target or was not analysed to the end.

`--checkout PATH` times the kllint of another checkout (e.g. one from before the change).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0  # a sixth of the default time budget
DEEP_TARGET_SECONDS = 5.0  # wall, on 2 cores: each input of bench/deep_inputs.py ends (or gives up) in seconds
sys.path.insert(0, str(Path(__file__).resolve().parent))
from deep_inputs import SHAPES  # noqa: E402
HEAD = "import torch\n\n\ndef loss_fn(logp, ref_logp, beta):\n    kl = ref_logp - logp\n"
LOSS = "    loss = kl.mean()\n    loss.backward()\n"
GOOD = ("\n\ndef loss_fn(logp, ref_logp):\n    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n" + LOSS)


def _k3_chain(length: int) -> str:
    return HEAD + "    kl = torch.exp(kl) - kl - 1\n" * length + LOSS


def _k3_then_chain(length: int) -> str:
    return (HEAD + "    kl = torch.exp(kl) - kl - 1\n    loss = beta * kl.mean()\n    chain = kl\n"
            + "    chain = torch.exp(chain) - chain - 1\n" * length + "    loss = loss + chain.mean()\n    loss.backward()\n")


def _nested(line: str, length: int) -> str:
    return HEAD + line * length + LOSS


def _findings(count: int) -> str:
    return "import torch\n" + "".join(GOOD.replace("loss_fn", f"loss_{i}") for i in range(count // 2))


def _nested_ifs(depth: int) -> str:
    text = "import torch\n\ndef f(logp, ref_logp, a):\n    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n"
    return text + "".join("    " * (i + 1) + "if a:\n" for i in range(depth)) + "    " * (depth + 1) + "kl.mean().backward()\n"


# A trainer whose update runs helpers that read attributes of objects the analysis knows nothing
# about (`self.options.gamma`: reads of the container-field store), and test functions that each
# build one (`Trainer(model=policy, ...)`: the constructor stores `model`, a write to that store).
TRAINER = """import torch
from transformers import AutoModelForCausalLM


def masked_average(values, mask):
    return (values * mask).sum() / mask.sum()


def masked_spread(values, mask):
    centred = values - masked_average(values, mask)
    return masked_average(centred ** 2, mask)


def standardise(values, mask):
    return (values - masked_average(values, mask)) * torch.rsqrt(masked_spread(values, mask) + 1e-8)


class Trainer:
    def __init__(self, model, ref_model, options):
        self.model = model
        self.ref_model = ref_model
        self.options = options

    def penalty(self, logp, ref_logp):
        if self.options.penalty == "k1":
            return logp - ref_logp
        if self.options.penalty == "abs":
            return (logp - ref_logp).abs()
        if self.options.penalty == "k2":
            return 0.5 * (logp - ref_logp) ** 2
        return torch.exp(ref_logp - logp) - (ref_logp - logp) - 1

    def shaped_rewards(self, scores, logp, ref_logp, mask):
        rewards = -self.options.beta * self.penalty(logp, ref_logp)
        if self.options.whiten:
            rewards = standardise(rewards, mask)
        return rewards + scores

    def advantages(self, values, rewards, mask):
        running = 0
        steps = []
        for t in reversed(range(rewards.shape[-1])):
            delta = rewards[:, t] + self.options.gamma * values[:, t + 1] - values[:, t]
            running = delta + self.options.gamma * self.options.lam * running
            steps.append(running)
        advantages = torch.stack(steps[::-1], 1)
        return standardise(advantages, mask).detach(), advantages + values

    def losses(self, logp, old_logp, values, advantages, returns, mask):
        ratio = torch.exp(logp - old_logp)
        clipped = torch.clamp(ratio, 1 - self.options.clip, 1 + self.options.clip)
        policy_loss = masked_average(torch.max(-advantages * ratio, -advantages * clipped), mask)
        value_loss = masked_average((values - returns) ** 2, mask)
        stats = {"ratio": masked_average(ratio, mask).detach(), "spread": masked_spread(returns, mask).detach(),
                 "approx_kl": masked_average((logp - old_logp) ** 2, mask).detach()}
        return policy_loss, value_loss, stats

    def update(self, scores, batch):
        with torch.no_grad():
            old_logp = torch.log_softmax(self.model(batch["input_ids"]).logits, -1)
            ref_logp = torch.log_softmax(self.ref_model(batch["input_ids"]).logits, -1)
            values = self.model.value(batch["input_ids"])
            rewards = self.shaped_rewards(scores, old_logp, ref_logp, batch["mask"])
            advantages, returns = self.advantages(values, rewards, batch["mask"])
        history = []
        for _ in range(self.options.epochs):
            logp = torch.log_softmax(self.model(batch["input_ids"]).logits, -1)
            policy_loss, value_loss, stats = self.losses(logp, old_logp, values, advantages, returns, batch["mask"])
            (policy_loss + value_loss).backward()
            history.append(stats)
        return history
"""
TEST = """

def test_update_{i}():
    policy = AutoModelForCausalLM.from_pretrained("policy")
    reference = AutoModelForCausalLM.from_pretrained("policy")
    trainer = Trainer(model=policy, ref_model=reference, options=None)
    history = trainer.update([1.0], {{"input_ids": None}})
    assert history
"""


def _tests_of_one_trainer(count: int) -> str:
    """`count` test functions, each building the trainer and running its update: the update is
    analysed once, not once per test (a field written by one test's constructor is not one the
    update reads)."""
    return TRAINER + "".join(TEST.format(i=i) for i in range(count))


INPUTS = {
    **{f"k3chain{n}": (f"{n} chained `kl = torch.exp(kl) - kl - 1`", _k3_chain(n)) for n in (5, 10, 20, 40)},
    "k3then40": ("a k3 in the loss, then 40 chained k3 of it", _k3_then_chain(40)),
    "means20": ("20 chained `kl = kl.mean() + kl`", _nested("    kl = kl.mean() + kl\n", 20)),
    "means40": ("40 chained `kl = kl.mean() + kl`", _nested("    kl = kl.mean() + kl\n", 40)),
    "meanmul20": ("20 chained `kl = kl * kl.mean() + kl`", _nested("    kl = kl * kl.mean() + kl\n", 20)),
    "mulchain40": ("40 chained `kl = torch.exp(kl) * kl + kl`", _nested("    kl = torch.exp(kl) * kl + kl\n", 40)),
    "findings1000": ("1,000 findings in one file (500 loss functions)", _findings(1000)),
    "ifs90": ("90 nested `if`s", _nested_ifs(90)),
    "tests100": ("100 test functions, each building a trainer and running its update", _tests_of_one_trainer(100)),
    **{f"deep_{name}": (shape.label, shape.make) for name, shape in SHAPES.items()},
}


def measure(keys: list[str], checkout: Path = ROOT) -> list[dict]:
    """Check each input in a fresh folder with the kllint of `checkout`; one row per input."""
    sys.path.insert(0, str(checkout))
    from kllint.api import check_paths
    from kllint.config import Settings

    rows = []
    with tempfile.TemporaryDirectory(prefix="kllint-bench-") as base:
        warm = Path(base) / "warm.py"
        warm.write_text(_k3_chain(1))
        check_paths([str(warm)], Settings())
        for key in keys:
            label, text = INPUTS[key]
            deep = key.startswith("deep_")
            text = text() if callable(text) else text
            path = Path(base) / (SHAPES[key[5:]].file if deep else f"{key}.py")
            path.write_text(text)
            started, wall = time.process_time(), time.monotonic()
            result = check_paths([str(path)], Settings())
            seconds, wall = time.process_time() - started, time.monotonic() - wall
            status = result.file_status.get(str(path), "?")
            within = wall <= DEEP_TARGET_SECONDS if deep else seconds <= TARGET_SECONDS
            rows.append({"input": label, "bytes": len(text.encode()), "cpu_seconds": round(seconds, 2),
                         "wall_seconds": round(wall, 2), "status": status, "abandoned": len(result.abandoned),
                         "findings": len(result.diagnostics),
                         "ok": within and status == "analysed" and not result.abandoned})
    return rows


def table(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    lines = ["| input | bytes | CPU s | wall s | handled | abandoned | findings | within the target |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['input']} | {row['bytes']} | {row['cpu_seconds']:.2f} | {row['wall_seconds']:.2f} | "
                     f"{row['status']} | {row['abandoned']} | {row['findings']} | {'yes' if row['ok'] else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    """Command line: print the table (or JSON); exit 1 if an input missed the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--only", help="comma-separated input keys: " + ", ".join(INPUTS))
    parser.add_argument("--deep", action="store_true", help="only the deep_* inputs (issue 35)")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the kllint checkout to time (default: this one)")
    options = parser.parse_args()
    keys = [k for k in INPUTS if (not options.only or k in options.only.split(","))
            and (not options.deep or k.startswith("deep_"))]
    rows = measure(keys, options.checkout.resolve())
    print(json.dumps(rows, indent=2) if options.json else table(rows))
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
