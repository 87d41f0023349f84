"""What a finding says (issue 13, items 10 and 11): the trace steps in source order within each
function with what happens at each (the log-ratio, `k3 built from the log-ratio`, `returned by`
a helper, `reduced over tokens by`, `added to the loss`, `backpropagated`); the configuration
that picks a wrong estimator named once, as the code reads it (`self.config.kl_loss_type`,
`args.kl_estimator`, the loop over `range(args.num_iterations)`); and help in the spelling of
the framework the code computes with (decided from its imports and calls, not from words)."""
from __future__ import annotations

from pathlib import Path

from kllint.api import check_paths

HELPERS = '''import torch


def average_over(x, mask):
    return (x * mask).sum() / mask.sum()


def token_reduce(values, mask, how="mean"):
    if how == "mean":
        return average_over(values, mask)
    return (values * mask).sum(-1).mean()


def divergence(logp, ref, kind):
    if kind in ("kl", "k1"):
        return logp - ref
    if kind in ("mse", "k2"):
        return 0.5 * (logp - ref).square()
    if kind in ("low_var_kl", "k3"):
        gap = ref - logp
        gap = torch.clamp(gap, min=-20, max=20)
        ratio = torch.exp(gap)
        value = (ratio - gap - 1).contiguous()
        return torch.clamp(value, min=-10, max=10)
    raise NotImplementedError(kind)
'''

ACTOR = '''import torch

from helpers import divergence, token_reduce


class Actor:
    def __init__(self, config, model):
        self.config = config
        self.model = model

    def update(self, batch):
        logp = self.token_logp(batch)
        pg_loss = -(logp * batch["advantages"]).mean()
        kld = divergence(logp, batch["ref_log_prob"], kind=self.config.kl_loss_type)
        kl_loss = token_reduce(kld, batch["mask"])
        loss = pg_loss + kl_loss * self.config.kl_coef
        loss.backward()

    def token_logp(self, batch):
        logits = self.model(batch["input_ids"])
        return torch.log_softmax(logits, -1).gather(-1, batch["labels"][..., None]).squeeze(-1)
'''

ARGS_LOOP = '''"""A PPO step whose estimator comes from its arguments."""
import torch


def token_logprobs(net, ids):
    out = net(ids[:, :-1])
    return torch.log_softmax(out, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def kl_value(logp, ref, kind):
    if kind == "k1":
        return logp - ref
    if kind in ("low_var_kl", "k3"):
        gap = ref - logp
        return torch.exp(gap) - gap - 1
    raise ValueError(kind)


def train_step(args, policy, batch, opt):
    for _ in range(args.num_iterations):
        logp = token_logprobs(policy, batch["ids"])
        est = kl_value(logp, batch["ref_logp"], args.kl_estimator)
        loss = -(logp * batch["adv"]).mean() + args.beta * est.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def default_mode_loss(logp, ref, mask, kl_loss_type="low_var_kl"):
    est = kl_value(logp, ref, kl_loss_type)
    return (est * mask).sum() / mask.sum()
'''

ITERATIONS = '''import torch


class Trainer:
    def __init__(self, ppo_updates, beta):
        self.ppo_updates = ppo_updates
        self.beta = beta

    def compute_loss(self, logp, batch):
        behaviour = batch["old_logp"] if self.ppo_updates > 1 else logp.detach()
        weight = torch.exp(logp - behaviour)
        ref = batch["ref_logp"]
        kl = torch.exp(ref - logp) - (ref - logp) - 1
        per_token = -weight * batch["adv"].unsqueeze(-1) + self.beta * kl
        return (per_token * batch["mask"]).sum() / batch["mask"].sum()
'''

JAX_LOSS = '''"""A JAX GRPO loss; the PyTorch trainer it replaces used `.detach()` and torch.flip."""
import jax
import jax.numpy as jnp


def loss_fn(params, tokens, ref_logp, adv, mask, beta=0.04):
    logits = jnp.einsum("btd,dv->btv", params["emb"][tokens[:, :-1]], params["out"])
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], axis=-1)[..., 0]
    d = ref_logp - logp
    kl = jnp.exp(d) - d - 1
    per_token = -adv[:, None] * jnp.exp(logp - jax.lax.stop_gradient(logp)) + beta * kl
    return jnp.sum(per_token * mask) / jnp.sum(mask)


def step(params, tokens, ref_logp, adv, mask):
    return jax.grad(loss_fn)(params, tokens, ref_logp, adv, mask)
'''

TORCH_LOSS = '''"""A PyTorch GRPO loss; a JAX port would write jax.lax.stop_gradient and jnp.flip."""
import torch


def grpo_loss(logp, ref_logp, adv, mask, beta=0.04):
    # jnp.exp(d) - d - 1 in the jax port
    d = ref_logp - logp
    kl = torch.exp(d) - d - 1
    per_token = -adv.unsqueeze(-1) * torch.exp(logp - logp.detach()) + beta * kl
    return (per_token * mask).sum() / mask.sum()
'''

MIXED = '''import jax
import jax.numpy as jnp
import torch


def torch_side(x):
    return torch.as_tensor(x)


def loss_fn(params, logp_of, ref_logp, mask, beta=0.1):
    logp = logp_of(params)
    d = ref_logp - logp
    kl = jnp.exp(d) - d - 1
    return jnp.sum(beta * kl * mask) / jnp.sum(mask)


def step(params, logp_of, ref_logp, mask):
    return jax.grad(loss_fn)(params, logp_of, ref_logp, mask)
'''


def _findings(tmp_path: Path, files: dict[str, str], checked: str) -> list:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return check_paths([str(tmp_path / checked)]).diagnostics


def _steps(diagnostic) -> list[tuple[str, int, str]]:
    return [(Path(step.path).name, step.line, step.note) for step in diagnostic.trace]


def test_trace_says_what_happens_at_each_step_in_source_order(tmp_path):
    found = _findings(tmp_path, {"helpers.py": HELPERS, "actor.py": ACTOR}, "actor.py")
    k3 = next(d for d in found if d.code == "KL102")
    assert (k3.span.line, k3.span.column) == (14, 15)
    assert _steps(k3) == [
        ("helpers.py", 20, "the log-ratio log(pi_ref / pi)"),
        ("helpers.py", 21, "the log-ratio log(pi_ref / pi), clamped"),
        ("helpers.py", 22, "the ratio pi_ref / pi (exp of the log-ratio)"),
        ("helpers.py", 23, "k3 built from the log-ratio"),
        ("helpers.py", 24, "k3, clamped"),
        ("actor.py", 14, "returned by `divergence`"),
        ("actor.py", 15, "reduced over tokens by `token_reduce`"),
        ("actor.py", 16, "added to the loss"),
        ("actor.py", 17, "backpropagated by `.backward()`"),
    ]
    k1 = next(d for d in found if d.code == "KL101")
    assert _steps(k1)[0] == ("helpers.py", 16, "k1, the log-ratio log(pi / pi_ref)")
    for diagnostic in found:  # no step is the old generic wording
        assert not any("computed here" in note or note.endswith(" here") for _, _, note in _steps(diagnostic))


def test_one_place_reached_with_several_estimators_names_each_option_once(tmp_path):
    found = _findings(tmp_path, {"helpers.py": HELPERS, "actor.py": ACTOR}, "actor.py")
    by_code = {d.code: d.message for d in found}
    assert by_code["KL102"].endswith(
        "(when `self.config.kl_loss_type` is 'low_var_kl' or 'k3')")
    assert by_code["KL101"].endswith("(when `self.config.kl_loss_type` is 'kl' or 'k1')")
    assert by_code["KL201"] == (
        "per-token KL loss terms are reduced over tokens: each token's gradient misses the KL of the tokens it "
        "causes later (partial gradient); the estimate is k2 when `self.config.kl_loss_type` is 'mse' or 'k2', "
        "k3 when `self.config.kl_loss_type` is 'low_var_kl' or 'k3'")
    for message in by_code.values():
        assert "configurable" not in message and "estimators reaching here" not in message


def test_attribute_configs_defaults_and_the_loop_of_updates_are_named(tmp_path):
    found = _findings(tmp_path, {"train.py": ARGS_LOOP}, "train.py")
    by_code = {(d.code, d.span.line): d.message for d in found}
    # `kl_value`'s estimator is chosen by its caller's argument: each finding is placed at the
    # call that chose it (one place per finding), the `args` attribute's at line 22, the
    # parameter default's at line 30, each naming its own configuration
    assert by_code[("KL102", 22)].endswith("(when `args.kl_estimator` is 'low_var_kl' or 'k3')")
    assert by_code[("KL102", 30)].endswith("(when `kl_loss_type` is 'low_var_kl' (the default) or 'k3')")
    assert by_code[("KL101", 22)].endswith("(when `args.kl_estimator` is 'k1')")
    assert by_code[("KL101", 30)].endswith(
        "(when `kl_loss_type` is 'k1' (`kl_loss_type` defaults to 'low_var_kl'))")
    assert by_code[("KL401", 22)] == (
        "the KL estimate is a loss on samples from the rollout policy (the loss runs once per item of "
        "`range(args.num_iterations)`, several updates per batch) without the importance weight pi/pi_old: "
        "biased gradient; the estimate is k1 when `args.kl_estimator` is 'k1', k3 when `args.kl_estimator` is "
        "'low_var_kl' or 'k3'")
    assert ("KL401", 30) not in by_code  # `default_mode_loss` runs in no loop of updates
    k3 = next(d for d in found if d.code == "KL102" and d.span.line == 22)
    assert _steps(k3) == [
        ("train.py", 14, "the log-ratio log(pi_ref / pi)"),
        ("train.py", 15, "k3 built from the log-ratio"),
        ("train.py", 22, "returned by `kl_value`"),
        ("train.py", 23, "reduced over tokens by `.mean()`; added to the loss"),
        ("train.py", 25, "backpropagated by `.backward()`"),
    ]


def test_the_configuration_that_brings_in_the_rollout_logprobs_is_named(tmp_path):
    found = _findings(tmp_path, {"trainer.py": ITERATIONS}, "trainer.py")
    off_policy = next(d for d in found if d.code == "KL401")
    assert off_policy.message == (
        "k3 (exp(ref - logp) - (ref - logp) - 1) is a loss on samples from the rollout policy (the same loss uses "
        "the rollout log-probs `batch[\"old_logp\"]` when `self.ppo_updates > 1`) without the importance weight "
        "pi/pi_old: biased gradient")


def test_jax_findings_get_jax_help_whatever_the_words_in_the_file(tmp_path):
    found = _findings(tmp_path, {"jax_loss.py": JAX_LOSS}, "jax_loss.py")
    help_of = {d.code: d.help for d in found}
    assert help_of["KL102"] == (
        "route the gradient through k2 and keep the logged value: `k2 = 0.5 * (logp - ref) ** 2` then "
        "`kl = k2 - jax.lax.stop_gradient(k2) + jax.lax.stop_gradient(kl)`, or multiply k3 by a live ratio "
        "`jnp.exp(logp - old)`; better, put detached k1 in the reward with returns over the whole response")
    assert help_of["KL201"].startswith(
        "credit each token with the KL of the tokens after it: "
        "`kl_rtg = jnp.flip(jnp.flip(jax.lax.stop_gradient((logp - ref) * mask), -1).cumsum(-1), -1)`")
    assert all(".detach()" not in h and "torch." not in h for h in help_of.values())
    k3 = next(d for d in found if d.code == "KL102")
    assert _steps(k3)[-1] == ("jax_loss.py", 12, "reduced over tokens by `jnp.sum`; returned as the loss by `loss_fn`")


def test_pytorch_findings_get_pytorch_help_whatever_the_words_in_the_file(tmp_path):
    found = _findings(tmp_path, {"torch_loss.py": TORCH_LOSS}, "torch_loss.py")
    help_of = {d.code: d.help for d in found}
    assert "`kl = k2 - k2.detach() + kl.detach()`" in help_of["KL102"]
    assert help_of["KL201"].startswith(
        "credit each token with the KL of the tokens after it: "
        "`kl_rtg = torch.flip(torch.flip(((logp - ref) * mask).detach(), [-1]).cumsum(-1), [-1])`")
    assert all("jax" not in h and "jnp" not in h for h in help_of.values())


def test_in_a_module_importing_both_the_function_decides(tmp_path):
    found = _findings(tmp_path, {"mixed.py": MIXED}, "mixed.py")
    k3 = next(d for d in found if d.code == "KL102")
    assert "jax.lax.stop_gradient(k2)" in k3.help and ".detach()" not in k3.help
