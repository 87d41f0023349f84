"""Roles of operands from names: the last resort when dataflow says nothing (design.md, item 3).

A name is split into lower-case tokens (`ref_per_token_logps` -> ref, per, token, logps;
`refLogProbs` -> ref, log, probs). Roles: `policy` / `reference` / `old` log-probabilities, a
`model` (policy or reference network), a `mask`, a `kl` estimate of unknown form.
"""
from __future__ import annotations

import re
from functools import lru_cache

_WHITESPACE = re.compile(r"\s")
_SPLIT = re.compile(r"[^a-zA-Z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

REFERENCE_TOKENS = frozenset({"ref", "reference", "base", "init", "initial", "sft", "teacher", "prior", "frozen"})
# reference words that name the reference only next to a log-prob or model word, and even then
# often name the policy's own backbone or initialisation (`base_model`, `init_model`)
WEAK_REFERENCE_TOKENS = frozenset({"base", "init", "initial", "prior"})
OLD_TOKENS = frozenset({"old", "behav", "behavior", "behaviour", "rollout", "sampler", "sampling", "prev", "previous", "mu", "inference", "vllm", "gen", "generation"})
LOGPROB_TOKENS = frozenset({"logp", "logps", "lp", "lps", "logprob", "logprobs", "logpi", "logit", "logits"})
MODEL_TOKENS = frozenset({"model", "models", "net", "network", "module", "policy", "actor", "engine", "lm", "llm", "wrapper", "params", "state"})
NOT_TENSOR_TOKENS = frozenset({"config", "cfg", "args", "tokenizer", "processor", "fn", "func", "type", "name", "mode", "coef", "coeff", "beta", "ctl", "ctrl", "controller", "metrics", "stats", "optimizer", "opt", "scheduler", "path", "dir", "weight", "target", "threshold", "horizon", "estimator", "penalty", "loss", "clip"})
KL_TOKENS = frozenset({"kl", "kls", "kld"})
COMPOUND_PREFIXES = ("reference", "ref", "old")
COMPOUND_SUFFIXES = frozenset({"model", "policy", "net", "logp", "logps", "logprob", "logprobs", "lp", "lps"})


@lru_cache(maxsize=16384)
def words(name: str) -> list[str]:
    """The lower-case words of a snake_case or camelCase name, in order."""
    return [p.lower() for p in _SPLIT.split(name) if p]


def tokens(name: str) -> tuple[str, ...]:
    """The lower-case tokens of a name or key; none for a string with whitespace (a message such
    as `"the reference model"`, never a key or a name), which therefore gives no role."""
    if _WHITESPACE.search(name):
        return ()
    parts = words(name)
    joined = "_".join(parts)
    # "log_probs", "log_prob", "log_p" -> one token as well
    extra = []
    for pattern, token in (("log_probs", "logprobs"), ("log_prob", "logprob"), ("log_p", "logp"), ("log_pi", "logpi")):
        if pattern in joined:
            extra.append(token)
    for part in parts:  # "refmodel", "reflogps", "oldlogprobs": a role word glued to a model or log-prob word
        for prefix in COMPOUND_PREFIXES:
            rest = part[len(prefix):]
            if part.startswith(prefix) and rest in COMPOUND_SUFFIXES:
                extra += [prefix, rest]
    return tuple(parts + extra)


def _has(name: str, vocabulary: frozenset[str]) -> bool:
    return any(t in vocabulary for t in tokens(name))


@lru_cache(maxsize=16384)  # asked of the same names at every step of the interpreter
def is_logprob_name(name: str) -> bool:
    toks = tokens(name)
    return any(t in LOGPROB_TOKENS for t in toks) or any(t.endswith("logprobs") or t.endswith("logps") for t in toks)


@lru_cache(maxsize=16384)
def is_logits_name(name: str) -> bool:
    return any(t in ("logit", "logits") for t in tokens(name))


# The head noun of a snake_case name is its last word, and a count its first: a name that ends in
# one of these (`logps_micro_batch_size`, `logprob_chunk_len`) or starts with `num`
# (`num_logps`) names a number about log-probs, never the log-probs themselves
QUANTITY_TAIL_TOKENS = frozenset({"size", "sizes", "count", "counts", "len", "length", "lengths", "dim", "dims",
                                  "shape", "shapes", "idx", "index", "indices", "bytes"})
QUANTITY_HEAD_TOKENS = frozenset({"num", "n"})


def names_a_quantity(name: str) -> bool:
    """Whether a name of several words names a number (a size, count, length, index) by its
    head word: `compute_logps_micro_batch_size`, `num_logps`."""
    toks = words(name)
    return len(toks) > 1 and (toks[-1] in QUANTITY_TAIL_TOKENS or toks[0] in QUANTITY_HEAD_TOKENS)


@lru_cache(maxsize=16384)
def logprob_role(name: str) -> str | None:
    """`reference`, `old` or `policy` for a log-prob-like name; None otherwise (also for a name
    of a number about log-probs, `names_a_quantity`)."""
    if not is_logprob_name(name) and name.lower() not in ("ref", "reference", "pi_ref", "base", "old"):
        return None
    if names_a_quantity(name):
        return None
    if _has(name, NOT_TENSOR_TOKENS - {"params", "state"}) and not is_logprob_name(name):
        return None
    if _has(name, REFERENCE_TOKENS):
        return "reference"
    if _has(name, OLD_TOKENS):
        return "old"
    return "policy"


NON_MODEL_TOKENS = frozenset({
    "loss", "losses", "optim", "optimizer", "lr", "scheduler", "grad", "grads", "step", "steps", "kl", "reward",
    "rewards", "ratio", "adv", "advantage", "advantages", "entropy", "clip", "coef", "weight", "weights", "mask",
    "metrics", "stats", "path", "dir", "name", "id", "ids", "type", "cls", "class", "kwargs", "num", "size",
})


# A name led by one of these verbs names an action (`init_model_parallel`, `build_model_config`)
# unless it ends with a network noun (`init_model`, the initial model).
ACTION_VERBS = frozenset({"init", "initialize", "initialise", "setup", "build", "create", "make", "load", "get",
                          "prepare", "compute", "calc", "calculate", "fetch", "save", "sync", "update", "wrap",
                          "unwrap", "run", "configure"})


# Verbs that lead a getter or factory: `get_ref_model(...)`, `build_policy(...)` return a
# network when called; they are not one (not `init_model`, the initial model).
GETTER_VERBS = frozenset({"get", "build", "create", "make", "load", "fetch", "prepare", "unwrap", "wrap"})


@lru_cache(maxsize=16384)
def is_getter_name(name: str) -> bool:
    """A name led by a getter or factory verb and naming something more (`get_base_model`)."""
    toks = tokens(name)
    return len(toks) > 1 and toks[0] in GETTER_VERBS


# Head words of a name for data fed to or gathered about a network, not the network itself
# (`model_inputs`, `policy_batch`, `actor_data`), and the container words that may follow the
# head (`model_inputs_list`: a list of model inputs).
DATA_HEAD_TOKENS = frozenset({"input", "inputs", "batch", "batches", "data", "sample", "samples", "example",
                              "examples", "feature", "features", "micro", "minibatch", "microbatch"})
CONTAINER_TAIL_TOKENS = frozenset({"list", "lst", "dict", "tuple", "seq", "iter", "iterator", "items"})


def names_data_for_a_network(name: str) -> bool:
    """Whether a name with a network word is headed by a data word (`model_inputs`,
    `model_inputs_list`, `policy_batch`): the head noun of a snake_case name is its last word,
    after any container word."""
    toks = words(name)
    while len(toks) > 1 and toks[-1] in CONTAINER_TAIL_TOKENS:
        toks = toks[:-1]
    return len(toks) > 1 and toks[-1] in DATA_HEAD_TOKENS


@lru_cache(maxsize=16384)
def model_role(name: str) -> str | None:
    """`reference` or `policy` for a network-like name (`ref_model`, `self.policy`); else None
    (also for an action led by a verb that does not end with a network: `init_model_parallel`,
    and for data headed by a data word: `model_inputs`)."""
    toks = tokens(name)
    if len(toks) > 1 and toks[0] in ACTION_VERBS and toks[-1] not in MODEL_TOKENS:
        return None
    if names_data_for_a_network(name):
        return None
    if not any(t in MODEL_TOKENS for t in toks) or any(t in NON_MODEL_TOKENS for t in toks):
        return None
    if any(t in LOGPROB_TOKENS for t in toks) or any(t in NOT_TENSOR_TOKENS - {"params", "state"} for t in toks):
        return None
    if any(t in REFERENCE_TOKENS for t in toks):
        return "reference"
    if any(t in OLD_TOKENS for t in toks) or "critic" in toks or "reward" in toks or "value" in toks:
        return None
    return "policy"


# Attributes that reach an object's own sub-network, whatever their words say: HF's
# `PreTrainedModel.base_model` (the backbone under the head), PEFT's `PeftModel.base_model`.
BACKBONE_ATTRIBUTES = frozenset({"base_model"})


def is_backbone_attribute(attr: str) -> bool:
    """Whether `obj.<attr>` is a sub-network of `obj` itself (never a reference by its name)."""
    return attr in BACKBONE_ATTRIBUTES


# words that lead the name of a setting about a tensor rather than the tensor (`use_ref_logprobs`,
# `compute_old_logps`, `return_logits`): a verb or a flag word before the noun
SETTING_LEAD_TOKENS = ACTION_VERBS | frozenset({
    "use", "enable", "enabled", "disable", "return", "do", "skip", "apply", "keep", "need", "needs", "require",
    "requires", "is", "has", "should", "with", "without", "no", "log", "store", "cache", "recompute"})


@lru_cache(maxsize=16384)
def names_a_tensor_field(name: str) -> bool:
    """Whether a field's own name makes it a tensor whatever holds it (`x.ref_logprobs`,
    `x.attention_mask` of a container named `step_kwargs` or `cfg`): its head word (the last)
    is a log-prob, logits or mask noun and its first word is not a verb or flag word of a
    setting about one (`use_ref_logprobs`, `return_logits`, `ref_logprobs_key`)."""
    parts = words(name)
    if not parts or parts[0] in SETTING_LEAD_TOKENS:
        return False
    head = parts[-1]
    if head in LOGPROB_TOKENS or head.endswith(("logprobs", "logps", "mask", "masks")):
        return True
    return len(parts) > 1 and parts[-2:] in (["log", "probs"], ["log", "prob"], ["log", "p"])


@lru_cache(maxsize=16384)
def is_mask_name(name: str) -> bool:
    # `completion_segmentation`: a segment-id array, zero on padding, used as a 0/1 mask (JAX trainers)
    return any(t in ("mask", "masks", "attention_mask", "segmentation") or t.endswith("mask") for t in tokens(name))


@lru_cache(maxsize=16384)
def is_kl_name(name: str) -> bool:
    """A name for a KL estimate (`kl`, `per_token_kl`, `kls`), not a coefficient or config."""
    toks = tokens(name)
    return any(t in KL_TOKENS for t in toks) and not any(
        t in NOT_TENSOR_TOKENS or t in ("loss", "target", "penalty", "estimator", "div", "fn") for t in toks)


OUTPUT_TOKENS = frozenset({"output", "outputs", "out", "outs", "preds", "predictions", "forward", "fwd"})


@lru_cache(maxsize=16384)
def is_output_name(name: str) -> bool:
    """A container of a model forward's results (`output["log_probs"]`, `outputs.logprobs`): its
    log-probs carry the gradient, unlike those read from a batch of stored rollouts."""
    return any(t in OUTPUT_TOKENS for t in tokens(name))


def is_sequence_name(name: str) -> bool:
    return any(t in ("seq", "sequence", "total", "sum", "summed", "mean") for t in tokens(name))


# "scores" (reward-model scores) yes; a singular "score" is too generic (verl's `forward_score`)
REWARD_SINK_TOKENS = frozenset({"reward", "rewards", "rew", "rews", "scores"})
# preference optimisation (DPO, KTO, BCO): "rewards" there are implicit rewards of a pairwise loss,
# never score-function coefficients
PREFERENCE_TOKENS = frozenset({"chosen", "rejected", "margin", "margins", "implicit", "preferred", "dispreferred", "winner", "loser"})
RETURN_SINK_TOKENS = frozenset({"return", "returns", "advantage", "advantages", "adv", "advs", "ret", "rets", "gae"})


@lru_cache(maxsize=16384)
def sink_kind(name: str) -> str | None:
    """`returns` for return/advantage names (coefficients of the score function), `rewards` for
    reward names (later turned into returns), else None. A grouping qualifier names no sink:
    `kl_per_reward`, `mean_by_advantage` (the words after `per` / `by` are not the value)."""
    toks = tokens(name)
    for qualifier in ("per", "by"):
        if qualifier in toks[1:]:
            toks = toks[:toks.index(qualifier, 1)]
    if any(t in PREFERENCE_TOKENS for t in toks):
        return None
    if any(t in RETURN_SINK_TOKENS for t in toks):
        return "returns"
    if any(t in REWARD_SINK_TOKENS for t in toks):
        return "rewards"
    return None


def is_loss_function_name(name: str) -> bool:
    toks = tokens(name)
    return any(t in ("loss", "losses", "objective") for t in toks) or name in ("compute_loss", "forward_loss")


@lru_cache(maxsize=16384)
def names_reference_strongly(name: str) -> bool:
    """Whether a name holds a reference word that is not a weak one (`ref_model`,
    `teacher`, `frozen_policy`; not `base_model` or `init_model`)."""
    return any(t in REFERENCE_TOKENS - WEAK_REFERENCE_TOKENS for t in tokens(name))
