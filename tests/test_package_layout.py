"""Project layouts seen in real trainers that the module index must resolve."""
from __future__ import annotations

from pathlib import Path

from kllint.api import check_paths

HELPER = '''import torch


def k3(logp, ref_logp):
    log_r = ref_logp - logp
    return torch.exp(log_r) - log_r - 1
'''

ACTOR = '''from pkg.losses import k3


def actor_loss(logp, ref_logp, mask):
    kl = k3(logp, ref_logp)
    return (kl * mask).sum() / mask.sum()
'''


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_subfolder_without_init_inside_a_package_resolves_absolute_imports(tmp_path: Path) -> None:
    # `pkg/workers/` has no __init__.py (a PEP 420 namespace subpackage): its modules still
    # import `pkg.losses` by its absolute name, and the helper's estimate is judged
    _write(tmp_path / "pkg" / "__init__.py", "")
    _write(tmp_path / "pkg" / "losses.py", HELPER)
    actor = _write(tmp_path / "pkg" / "workers" / "actor.py", ACTOR)
    codes = sorted({d.code for d in check_paths([str(actor)]).diagnostics})
    assert codes == ["KL102", "KL201"]
