"""A definition is parsed by libcst only when the analysis runs its body
(`kllint.analysis.definitions.LazyFunction`): a constructor whose parameters a call binds, a
method tested for `@property`, a function referenced but never called cost no libcst parse, and
what the analysis finds is the same."""
from __future__ import annotations

from kllint.analysis import module as module_index
from kllint.api import check_source

SOURCE = '''\
import torch


def unused_callback(batch):
    return batch


class Config:
    def __init__(self, beta, mode="k3"):
        self.beta = beta
        self.mode = mode


class Trainer:
    def __init__(self, config, tokenizer):
        self.config = config
        self.tokenizer = tokenizer

    @property
    def beta(self):
        return 0.1

    @staticmethod
    def never_called(x):
        return x

    def kl(self, logp, ref_logp):
        return (logp - ref_logp).mean()

    def loss(self, logp, ref_logp):
        callback = unused_callback
        method = self.never_called
        return self.kl(logp, ref_logp) * self.beta


def step(logp, ref_logp):
    trainer = Trainer(Config(0.1), None)
    loss = trainer.loss(logp, ref_logp)
    loss.backward()
'''


def _parsed_names(monkeypatch) -> tuple[list[str], list]:
    parsed: list[str] = []
    original = module_index.ModuleInfo._parse_site

    def recording(self, site):
        if site not in self._parsed:
            parsed.append(self.text_of(site).lstrip().split("(")[0])
        return original(self, site)

    monkeypatch.setattr(module_index.ModuleInfo, "_parse_site", recording)
    return parsed, check_source(SOURCE, "train.py")


def test_only_definitions_that_run_are_parsed(monkeypatch):
    parsed, diagnostics = _parsed_names(monkeypatch)
    # the property runs; no `__init__` (constructor calls bind their parameters from the outline),
    # no callback, no static method
    assert sorted(parsed) == ["@property\n    def beta", "def kl", "def loss", "def step"]
    assert [d.code for d in diagnostics]  # the loss's KL is still found


def test_findings_are_those_of_the_parsed_definitions(monkeypatch):
    """The same findings when every definition is parsed up front."""
    _, lazy = _parsed_names(monkeypatch)
    monkeypatch.undo()
    original = module_index.ModuleInfo.__post_init__

    def eager(self):
        original(self)
        for name in list(self.functions):
            self.functions.get(name)
        for cls in self.classes.values():
            for name in cls.method_names:
                cls.method(name)

    monkeypatch.setattr(module_index.ModuleInfo, "__post_init__", eager)
    assert check_source(SOURCE, "train.py") == lazy
