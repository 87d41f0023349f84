"""A name a package re-exports with `from .module import *` resolves to the module's
definition: a configuration class imported through its package gives its defaults to the
messages (`... is 'k3' (the default)`)."""
from __future__ import annotations

from pathlib import Path

from kllint.api import check_paths

SETTINGS = '''\
from dataclasses import dataclass


@dataclass
class ActorSettings:
    penalty: str = "k3"
'''

ACTOR = '''\
import torch

from proj.config import ActorSettings


def token_penalty(logp, ref_logp, mode):
    if mode == "k1":
        return logp - ref_logp
    if mode == "k3":
        d = ref_logp - logp
        return torch.exp(d) - d - 1
    raise ValueError(mode)


class Actor:
    def __init__(self, settings: ActorSettings):
        self.settings = settings

    def loss(self, logp, ref_logp, mask):
        kl = token_penalty(logp, ref_logp, self.settings.penalty)
        return (kl * mask).sum() / mask.sum()
'''


def _project(tmp_path: Path, reexport: str) -> Path:
    config = tmp_path / "proj" / "config"
    config.mkdir(parents=True)
    (tmp_path / "proj" / "__init__.py").write_text("", encoding="utf-8")
    (config / "__init__.py").write_text(reexport, encoding="utf-8")
    (config / "actor.py").write_text(SETTINGS, encoding="utf-8")
    actor = tmp_path / "proj" / "actor.py"
    actor.write_text(ACTOR, encoding="utf-8")
    return actor


def _k3_message(path: Path) -> str:
    found = [d for d in check_paths([str(path)]).diagnostics if d.code == "KL102"]
    assert len(found) == 1, found
    return found[0].message


def test_a_class_re_exported_by_a_star_import_gives_its_defaults(tmp_path: Path) -> None:
    actor = _project(tmp_path, "from .actor import *  # noqa: F401\n")
    assert "`self.settings.penalty` is 'k3' (the default)" in _k3_message(actor)


def test_a_package_without_the_name_gives_no_default(tmp_path: Path) -> None:
    actor = _project(tmp_path, "")
    assert "(the default)" not in _k3_message(actor)
