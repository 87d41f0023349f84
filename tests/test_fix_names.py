"""Rewrites bind only the names they need (issue 37, item 5): a name is introduced only for
an expression that is not already a plain name, an expression a name in scope already holds
is written with that name, and no value gets two names."""
from __future__ import annotations

import ast
import json
from pathlib import Path

from test_cli_support import run_cli

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"

HEAD = '''import torch


def loss_fn(policy, reference, tokens, advantages, beta=0.1):
    logp = torch.log_softmax(policy(tokens).logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        ref_logp = torch.log_softmax(reference(tokens).logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
'''
TAIL = '''    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    loss = (-(advantages * logp) + beta * kl).mean()
    loss.backward()
'''


def _fixes(*paths: Path) -> list[dict]:
    result = run_cli(["check", "--no-cache", "--unsafe-fixes", "--output-format", "json", *map(str, paths)])
    return [d for d in json.loads(result.stdout) if d["fix"] and d["fix"]["region"]]


def _bindings(content: str) -> list[tuple[str, ast.expr]]:
    """The `name = value` statements a fix writes (all but its last statement, the rewritten one)."""
    body = ast.parse("if True:\n" + "\n".join("    " + line for line in content.splitlines())).body[0].body
    return [(s.targets[0].id, s.value) for s in body[:-1]
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)]


def test_no_fix_of_a_fixture_aliases_a_name_or_names_a_value_twice():
    offenders = []
    for finding in _fixes(*sorted(p for p in FIXTURES.iterdir() if p.is_dir())):
        bindings = _bindings(finding["fix"]["region"]["content"])
        values = [ast.dump(value) for _, value in bindings]
        for name, value in bindings:
            if isinstance(value, ast.Name):
                offenders.append(f"{finding['path']}:{finding['line']} {finding['code']}: {name} = {value.id}")
        if len(set(values)) != len(values):
            offenders.append(f"{finding['path']}:{finding['line']} {finding['code']}: one value, two names")
    assert not offenders, "\n".join(offenders)


def test_a_k1_shifted_by_a_constant_uses_the_log_ratio_it_binds():
    (finding,) = _fixes(FIXTURES / "KL101" / "greedy_token_k1_plus_constant.py")
    assert finding["fix"]["region"]["content"].splitlines() == [
        "    log_ratio = logp - ref_logp",
        "    k2 = 0.5 * log_ratio ** 2",
        "    penalty = (k2 - k2.detach() + log_ratio.detach()) + math.log(vocab_size)  # expect: KL101",
    ]


def _k3_fix_lines(tmp_path: Path, setup: str) -> list[str]:
    """The lines the KL102 fix of the k3 loss (`TAIL`) writes after `setup` in the step."""
    path = tmp_path / "train.py"
    path.write_text(HEAD + setup + TAIL, encoding="utf-8")
    (finding,) = [f for f in _fixes(path) if f["code"] == "KL102"]
    return finding["fix"]["region"]["content"].splitlines()


def test_a_name_that_already_holds_the_log_ratio_is_reused(tmp_path):
    assert _k3_fix_lines(tmp_path, "    d = ref_logp - logp\n    print(d.mean().item())\n") == [
        "    k2 = 0.5 * d ** 2",
        "    kl = k2 - k2.detach() + (torch.exp(d) - d - 1).detach()",
    ]


def test_a_name_whose_operands_changed_since_is_not_reused(tmp_path):
    assert _k3_fix_lines(tmp_path, "    d = ref_logp - logp\n    print(d.mean().item())\n"
                                   "    ref_logp = ref_logp.clamp(-20.0, 0.0)\n") == [
        "    log_ratio = ref_logp - logp",
        "    k2 = 0.5 * log_ratio ** 2",
        "    kl = k2 - k2.detach() + (torch.exp(log_ratio) - log_ratio - 1).detach()",
    ]


def test_the_opposite_log_ratio_is_not_taken_for_the_same_value(tmp_path):
    lines = _k3_fix_lines(tmp_path, "    gap = logp - ref_logp\n    print(gap.mean().item())\n")
    assert lines[0] == "    log_ratio = ref_logp - logp"
