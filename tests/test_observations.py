"""The analysis observes API calls (kl_div arguments and reductions, optax's KL, reference
forwards) as typed facts with no codes and no wording; the rules in `kllint.rules.api` decide
which of them are findings and say why."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from kllint.analysis.facts import ClassMeanOfKlDiv, KlDivCall, KlDivLossConstruction, OptaxKlCall, ReferenceForward
from kllint.analysis.index import ProjectIndex
from kllint.analysis.interpreter import Interpreter
from kllint.rules.dispatch import check_source

KL_DIV = '''import torch
import torch.nn.functional as F


def distill_loss(student_logits, teacher_logits):
    probs = F.softmax(student_logits, dim=-1)
    target = F.log_softmax(teacher_logits, dim=-1)
    elementwise = F.kl_div(probs, target, reduction="none")
    return elementwise.mean(-1).sum()


def kd_loss(student_logits, teacher_logits):
    criterion = torch.nn.KLDivLoss(reduction="batchmean", log_target=True)
    return criterion(F.log_softmax(student_logits, -1), F.log_softmax(teacher_logits, -1))
'''

OPTAX = '''import jax
import optax


def kd_loss(student_logits, teacher_logits):
    return optax.kl_divergence(jax.nn.softmax(student_logits), jax.nn.softmax(teacher_logits)).mean()
'''

REFERENCE = '''import torch


def dpo_step(policy, ref_model, batch):
    logits = policy(batch["input_ids"])
    with torch.no_grad():
        ref_cold = ref_model(batch["input_ids"])
    ref_logits = ref_model(batch["input_ids"])
    return logits, ref_cold, ref_logits
'''


def _observations(text: str, kind: type) -> list:
    index = ProjectIndex()
    module = index.module_for_file(text, Path("train.py"), "train.py")
    interpreter = Interpreter(module, index)
    interpreter.run()
    return [fact for fact in interpreter.facts if isinstance(fact, kind)]


def test_kl_div_calls_are_observed_with_their_argument_spaces_and_reductions() -> None:
    calls = _observations(KL_DIV, KlDivCall)
    assert [(c.api, c.input_space, c.target_space, c.log_target, c.reduction, c.explicit_reduction)
            for c in calls] == [("F.kl_div", "prob", "logprob", False, "none", True),
                                ("nn.KLDivLoss", "logprob", "logprob", True, "batchmean", True)]
    [made] = _observations(KL_DIV, KlDivLossConstruction)
    assert (made.reduction, made.explicit_reduction) == ("batchmean", True)
    [mean] = _observations(KL_DIV, ClassMeanOfKlDiv)
    assert mean.anchor.span.line == 9


def test_the_rules_judge_the_kl_div_observations() -> None:
    found = sorted((d.code, d.span.line, d.message) for d in check_source(KL_DIV, "train.py", Path("train.py")))
    assert found == [
        ("KL501", 8, "`F.kl_div` treats `input` as log-probabilities but gets probabilities: the result is not "
                     "a KL (it can be negative) and its gradient is wrong"),
        ("KL502", 9, "kl_div with reduction='none' is then averaged over the class dimension: the KL is divided "
                     "by the vocabulary size"),
    ]


def test_optax_kl_is_observed_with_the_space_of_its_predictions_and_judged() -> None:
    [call] = _observations(OPTAX, OptaxKlCall)
    assert (call.function, call.predictions_space) == ("kl_divergence", "prob")
    assert [d.code for d in check_source(OPTAX, "train.py", Path("train.py"))] == ["KL501"]


def test_reference_forwards_are_observed_with_or_without_gradient_tracking() -> None:
    forwards = _observations(REFERENCE, ReferenceForward)
    assert [(f.anchor.span.line, f.model, f.taped, f.tracking, f.frozen) for f in forwards] == [
        (7, "ref_model", True, False, False), (8, "ref_model", True, True, False)]
    found = check_source(REFERENCE, "train.py", Path("train.py"))
    assert [(d.code, d.span.line) for d in found] == [("KL503", 8)]
    assert found[0].fix is not None and found[0].fix.applicability == "safe"


def test_observations_carry_no_codes_and_no_wording() -> None:
    for kind in (KlDivCall, KlDivLossConstruction, ClassMeanOfKlDiv, OptaxKlCall, ReferenceForward):
        assert not {"code", "message", "help"} & {f.name for f in fields(kind)}, kind
