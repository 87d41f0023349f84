"""Project layouts seen in real trainers that the module index must resolve."""
from __future__ import annotations

from pathlib import Path

from kllint.api import check_paths

LOG_RATIO_HELPER = '''def log_ratio(logp, ref_logp):
    return ref_logp - logp
'''

K3_ACTOR = '''import torch

from pkg.losses import log_ratio


def actor_loss(logp, ref_logp, mask):
    log_r = log_ratio(logp, ref_logp)
    kl = torch.exp(log_r) - log_r - 1
    return (kl * mask).sum() / mask.sum()
'''


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_subfolder_without_init_inside_a_package_resolves_absolute_imports(tmp_path: Path) -> None:
    # `pkg/workers/` has no __init__.py (a PEP 420 namespace subpackage): its modules still
    # import `pkg.losses` by its absolute name, and the helper's estimate is judged
    # (the helper computes the log-ratio, the actor writes the k3 estimate: the findings are
    # placed where it is written, and only a resolved helper makes it an estimate)
    _write(tmp_path / "pkg" / "__init__.py", "")
    _write(tmp_path / "pkg" / "losses.py", LOG_RATIO_HELPER)
    actor = _write(tmp_path / "pkg" / "workers" / "actor.py", K3_ACTOR)
    codes = sorted({d.code for d in check_paths([str(actor)]).diagnostics})
    assert codes == ["KL102", "KL201"]
