"""`Cls.apply(*args)` of a project subclass of `torch.autograd.Function` runs `Cls.forward`: the
class is recognised by its bases resolved through imports (also a Function defined in another
module of the project, a subclass of a project base, a module-level alias of `apply`), never by
its name."""
from __future__ import annotations

from pathlib import Path

from kllint.api import check_paths, check_source

KERNELS = '''import torch
from torch.autograd import Function


class TokenPick(Function):
    @staticmethod
    def forward(ctx, logits, ids):
        ctx.save_for_backward(logits, ids)
        return torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class KernelBase(torch.autograd.Function):
    pass


class SplitPick(KernelBase):
    @staticmethod
    def forward(logits, ids):
        return torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)


fused_kernel = TokenPick.apply
'''

CALLERS = '''import torch
from pkg.kernels import TokenPick, SplitPick, fused_kernel
from pkg import kernels


def class_loss(logits, batch, beta=0.1):
    out = TokenPick.apply(logits, batch["input_ids"])
    k3 = torch.exp(batch["ref_log_probs"] - out) - (batch["ref_log_probs"] - out) - 1
    return beta * (k3 * batch["mask"]).sum()


def subclass_loss(logits, batch, beta=0.1):
    out = SplitPick.apply(logits, batch["input_ids"])
    k3 = torch.exp(batch["ref_log_probs"] - out) - (batch["ref_log_probs"] - out) - 1
    return beta * (k3 * batch["mask"]).sum()


def imported_alias_loss(logits, batch, beta=0.1):
    out = fused_kernel(logits, batch["input_ids"])
    k3 = torch.exp(batch["ref_log_probs"] - out) - (batch["ref_log_probs"] - out) - 1
    return beta * (k3 * batch["mask"]).sum()


def module_alias_loss(logits, batch, beta=0.1):
    out = kernels.fused_kernel(logits, batch["input_ids"])
    k3 = torch.exp(batch["ref_log_probs"] - out) - (batch["ref_log_probs"] - out) - 1
    return beta * (k3 * batch["mask"]).sum()


def no_grad_loss(logits, batch, beta=0.1):
    with torch.no_grad():
        out = TokenPick.apply(logits, batch["input_ids"])
    k3 = torch.exp(batch["ref_log_probs"] - out) - (batch["ref_log_probs"] - out) - 1
    return beta * (k3 * batch["mask"]).sum()
'''


def _findings(tmp_path: Path, callers: str) -> set[tuple[str, int]]:
    (tmp_path / "pyproject.toml").write_text("")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text(KERNELS)
    (package / "callers.py").write_text(callers)
    result = check_paths([str(package / "callers.py")])
    assert not result.internal_errors
    return {(d.code, d.span.line) for d in result.diagnostics}


def test_apply_of_a_function_of_another_module_runs_its_forward(tmp_path: Path) -> None:
    found = _findings(tmp_path, CALLERS)
    lines = {line for code, line in found if code == "KL102"}
    # the k3 line of each loss whose log-probs keep their gradient (not the one under no_grad)
    assert lines == {8, 14, 20, 26}, sorted(found)
    assert {line for code, line in found if code == "KL201"} == lines


LOOKALIKE = '''import torch


class Function:
    pass


class LocalOp(Function):
    @staticmethod
    def forward(ctx, logits, ids):
        return torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def loss(logits, batch, beta=0.1):
    out = LocalOp.apply(logits, batch["input_ids"])
    ref = batch["ref_log_probs"]
    k3 = torch.exp(ref - out) - (ref - out) - 1
    return beta * (k3 * batch["mask"]).sum()
'''


def test_a_class_named_function_that_is_not_torchs_is_not_followed() -> None:
    assert not check_source(LOOKALIKE, "lookalike.py")
    real = LOOKALIKE.replace("class Function:\n    pass\n", "from torch.autograd import Function\n")
    assert {d.code for d in check_source(real, "real.py")} == {"KL102", "KL201"}
