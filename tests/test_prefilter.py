"""The prefilter is sound: findings are the same with and without it (issue 6, item 1).

The file prefilter (`kllint.pipeline.prefilter.might_matter`) and the choice of entry points share one
test (a KL, reference or KL-API word), so a file it rejects can hold no finding. The real
releases get the same check in tests/test_real_releases.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from extra_cases import SKIP_REASON, extra_cases_dir

from kllint.analysis.index import ProjectIndex
from kllint.analysis.relevance import entry_units
from kllint.config import Settings, Vocab
from kllint.pipeline.discovery import discover
from kllint.pipeline.run import run
from kllint.pipeline.prefilter import code_might_matter, might_matter, parse_or_error
from kllint.report import json as report_json

ROOT = Path(__file__).resolve().parents[1]
EXTRA_CASES = extra_cases_dir()

CALLER_HOLDS_THE_SINK = '''\
import torch


def penalty(logp, batch):
    ref_logp = batch["ref_logps"]
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def training_step(model, batch, optimizer):
    logp = torch.log_softmax(model(batch["input_ids"]), dim=-1)
    loss = penalty(logp, batch).mean()
    loss.backward()
    optimizer.step()


def collate(items):
    return [item * 2 for item in items]


class Trainer:
    def step(self, batch):
        return training_step(self.model, batch, self.optimizer)

    def log(self, metrics):
        print(metrics)
'''


def _json(paths: list[Path], prefilter: bool) -> str:
    settings = Settings()
    files = list(discover([str(p) for p in paths], settings))
    result = run(files, settings, jobs=1, prefilter=prefilter)
    assert not result.internal_errors
    return report_json.render(result.diagnostics)


@pytest.mark.parametrize("folder", [ROOT / "fixtures", pytest.param(EXTRA_CASES, marks=pytest.mark.skipif(
    EXTRA_CASES is None, reason=SKIP_REASON))], ids=["fixtures", "extra-cases"])
def test_same_findings_with_and_without_prefilter(folder):
    if not folder.is_dir():
        pytest.skip(f"{folder} is not next to this checkout")
    with_prefilter = _json([folder], prefilter=True)
    assert with_prefilter.count('"code"') > 20  # the folders are full of findings
    assert _json([folder], prefilter=False) == with_prefilter


def test_a_file_without_kl_words_is_not_analysed_and_has_no_findings(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n\ndef loss(logp, advantages):\n    return -(logp * advantages).mean()\n")
    assert not might_matter(plain.read_text())
    assert _json([plain], prefilter=False) == _json([plain], prefilter=True) == "[]\n"


# (source, whether its code, not its comments or docstrings, names a KL or the reference)
CODE_NAMES = {
    "KL only in a comment": ("def step(x):\n    # the KL to the reference policy\n    return x * 2\n", False),
    "KL only in docstrings": ('"""Adds a KL penalty."""\n\n\ndef step(x):\n    """ref_logps minus logps."""\n'
                              '    return x\n', False),
    "a KL word as a name": ("def step(logp, ref_logp):\n    return logp - ref_logp\n", True),
    "a reference key in a string": ('def step(batch):\n    return batch["ref_logps"]\n', True),
    "an escaped reference key": ('def step(batch):\n    return batch["\\x72ef_logps"]\n', True),
    "a KL API under an alias": ("from torch.nn.functional import kl_div as divergence\n\n\n"
                                "def loss(p, q):\n    return divergence(p, q)\n", True),
    "a KL module imported whole": ("import trainer.kl_utils as helpers\n\n\n"
                                   "def loss(p, q):\n    return helpers.penalty(p, q)\n", True),
    "a KL API imported and never used": ("from torch.nn.functional import kl_div as divergence\n\n\n"
                                         "def loss(p, q):\n    return p - q\n", False),
    "a reference-named constant a function reads": ('KEY = "ref_logps"\n\n\ndef read(batch):\n'
                                                    '    return batch[KEY]\n', True),
    "a reference-named constant nothing reads": ('KEY = "ref_logps"\n\n\ndef read(batch):\n'
                                                 '    return batch["logps"]\n', True),
    "the reference only in a configuration class's fields": (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass Config:\n"
        "    ref_model: str = ''\n    kl_coef: float = 0.1\n", False),
    "the reference in a configuration class's method": (
        "class Config:\n    def check(self):\n        return self.ref_model\n", True),
    "the reference in a top-level statement": ("ref_logps = load()\n", True),
    "a KL word in an f-string": ('def log(kl):\n    print(f"{kl:.3f}")\n', True),
    "the reference only in a message": ('def check(cfg):\n    if not cfg.ready:\n'
                                        '        raise ValueError("the reference model is not loaded")\n', False),
    "the reference only in a path with spaces": ('URL = "see docs/en/reference/alloc.md for details"\n', False),
    "a reference key built by an f-string": ('def key(batch, i):\n    return batch[f"ref_logps_{i}"]\n', True),
    "a KL metric key with a slash": ('def log(metrics, x):\n    metrics["actor/kl"] = x\n', True),
}


@pytest.mark.parametrize("name", sorted(CODE_NAMES))
def test_the_code_alone_decides_whether_a_file_is_analysed(name):
    source, expected = CODE_NAMES[name]
    outline, error = parse_or_error(source)
    assert error is None
    assert might_matter(source)
    assert code_might_matter(outline) is expected


def test_a_key_with_whitespace_gives_no_role_so_prose_strings_can_be_skipped():
    # the prefilter ignores the words of strings with whitespace because the analysis never
    # reads a role from such a string: a key `"ref logps"` is an opaque tensor, `"ref_logps"` is not
    from kllint.analysis import roles

    assert roles.logprob_role("ref_logps") == "reference"
    assert roles.logprob_role("ref logps") is None
    assert roles.model_role("the reference model") is None
    assert not roles.is_kl_name("per token kl")


def test_code_might_matter_reads_the_configured_reference_names():
    outline, _ = parse_or_error("def loss(logp, anchor_lp):\n    return (anchor_lp - logp).mean()\n")
    assert not code_might_matter(outline)
    assert code_might_matter(outline, Vocab(reference_names=("anchor_lp",)))


def test_a_file_naming_kl_only_in_comments_never_loads_the_analysis(tmp_path):
    source, _ = CODE_NAMES["KL only in docstrings"]
    (tmp_path / "notes.py").write_text(source)
    probe = ("import sys\nfrom kllint.api import check_paths\nfrom kllint.config import Settings\n"
             f"result = check_paths([{str(tmp_path / 'notes.py')!r}], Settings())\n"
             "print(len(result.diagnostics), 'kllint.analysis.terms' in sys.modules, 'libcst' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "False", "False"]
    assert _json([tmp_path / "notes.py"], prefilter=False) == "[]\n"


def test_a_configuration_class_naming_the_reference_is_skipped_and_reports_what_its_analysis_does(tmp_path):
    source, expected = CODE_NAMES["the reference only in a configuration class's fields"]
    assert expected is False
    (tmp_path / "config.py").write_text(source)
    probe = ("import sys\nfrom kllint.api import check_paths\nfrom kllint.config import Settings\n"
             f"result = check_paths([{str(tmp_path / 'config.py')!r}], Settings())\n"
             "print(len(result.diagnostics), 'kllint.analysis.terms' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "False"]
    assert _json([tmp_path / "config.py"], prefilter=False) == "[]\n"


def test_configured_reference_names_pass_the_prefilter():
    text = "def loss(logp, anchor_lp):\n    return (anchor_lp - logp).mean()\n"
    assert not might_matter(text)
    assert might_matter(text, Vocab(reference_names=("anchor_lp",)))
    assert not might_matter(text, Vocab(reference_names=("anchor",)))  # whole identifiers only


def test_entry_points_are_kl_definitions_and_their_callers_in_the_module(tmp_path):
    path = tmp_path / "step.py"
    path.write_text(CALLER_HOLDS_THE_SINK)
    index = ProjectIndex()
    module = index.module_for_file(path.read_text(), path, "step.py")
    assert list(entry_units(module, index, None)) == [
        ("", "penalty"), ("", "training_step"), ("Trainer", "step")]


def test_the_sink_in_a_caller_without_kl_words_is_found(tmp_path):
    path = tmp_path / "step.py"
    path.write_text(CALLER_HOLDS_THE_SINK)
    found = {(d["code"], d["line"]) for d in json.loads(_json([path], prefilter=True))}
    assert found == {("KL102", 7), ("KL201", 7)}


# Inputs an adversarial review found to crash the lazy parsing or to lose their finding; each
# must give exactly its finding, with and without the prefilter.
TRICKY = {
    "continuation at the end of a def": ('def loss(logp, ref_logp):\n    kl = logp - ref_logp\n'
                                          '    return kl.mean() \\\n\nx = 1\n', {("KL101", 2)}),
    "constant in a one-line if": ('import torch\n\nif True: BETA = 0.1\n\n\ndef loss(logp, ref_logp):\n'
                                  '    kl = logp - ref_logp\n    return (BETA * kl).mean()\n', {("KL101", 7)}),
    "constant in a one-line try": ('import torch\n\ntry: BETA = 0.1\nexcept Exception: pass\n\n\n'
                                   'def loss(logp, ref_logp):\n    kl = logp - ref_logp\n'
                                   '    return (BETA * kl).mean()\n', {("KL101", 8)}),
    "KL API under an import alias": ('from torch.nn.functional import kl_div as divergence\n\n\n'
                                     'def distill(log_p, target_probs):\n    return divergence(log_p, target_probs)\n',
                                     {("KL502", 5)}),
    "reference key in a module constant": ('KEY = "ref_logps"\n\n\ndef loss(logp, batch):\n'
                                           '    d = logp - batch[KEY]\n    return d.mean()\n', {("KL101", 5)}),
    "fallback def in an except branch": ('try:\n    import flash_attn\nexcept ImportError:\n'
                                         '    def loss(logp, ref_logp):\n        kl = logp - ref_logp\n'
                                         '        return kl.mean()\n', {("KL101", 5)}),
    "form feed before a def": ('x = 1\n\x0cdef loss(logp, ref_logp):\n    kl = logp - ref_logp\n'
                               '    return kl.mean()\n', {("KL101", 3)}),
    "form feed before a method": ('class T:\n    x = 1\n\x0c    def loss(self, logp, ref_logp):\n'
                                  '        kl = logp - ref_logp\n        return kl.mean()\n', {("KL101", 4)}),
    "overload stub before the method": ('from typing import overload\n\n\nclass T:\n    @overload\n'
                                        '    def loss(self, logp: int) -> int: ...\n\n'
                                        '    def loss(self, logp, ref_logp):\n        kl = logp - ref_logp\n'
                                        '        return kl.mean()\n', {("KL101", 9)}),
    "escaped reference key": ('def loss(logp, batch):\n    d = logp - batch["\\x72ef_logps"]\n    return d.mean()\n',
                              {("KL101", 2)}),
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_tricky_sources_keep_their_finding(tmp_path, name):
    source, expected = TRICKY[name]
    path = tmp_path / "case.py"
    path.write_bytes(source.encode())
    for prefilter in (True, False):
        settings = Settings()
        result = run(list(discover([str(path)], settings)), settings, jobs=1, prefilter=prefilter)
        assert not result.internal_errors, result.internal_errors
        assert {(d.code, d.span.line) for d in result.diagnostics} == expected, (name, prefilter)


def test_helper_module_with_a_coding_cookie_is_followed(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kl.py").write_bytes(
        b"# -*- coding: latin-1 -*-\n# caf\xe9\n\ndef penalty(logp, ref_logp):\n"
        b"    log_r = ref_logp - logp\n    return log_r.exp() - log_r - 1\n")
    (package / "train.py").write_text(
        "from pkg.kl import penalty\n\n\ndef compute_loss(logp, ref_logp):\n"
        "    return penalty(logp, ref_logp).mean()\n")
    settings = Settings()
    # the estimate is written in the helper module: reported there (one place per finding),
    # found through its caller in the other module, whose sink decides it is a loss
    result = run(list(discover([str(package / "kl.py")], settings)), settings, jobs=1)
    assert {(Path(d.path).name, d.code) for d in result.diagnostics} >= {("kl.py", "KL102")}
    result = run(list(discover([str(package / "train.py")], settings)), settings, jobs=1)
    assert not result.diagnostics  # nothing is written in the checked file


def test_a_number_about_log_probs_is_not_log_probs():
    # a size, count or length named after the log-probs it measures (`num_logps`, a chunk size
    # of a log-prob service) is a number: reading it as log-probs turned the result of a call it
    # was passed to into a policy log-prob (fixture KL302/logprob_chunk_size_is_a_number.py)
    from kllint.analysis import roles

    for name in ("compute_logps_micro_batch_size", "_logprob_chunk_size", "num_logps", "ref_logps_len"):
        assert roles.logprob_role(name) is None, name
    for name in ("ref_logps_chunk", "old_per_token_logps", "logps_batch", "seq_logps"):
        assert roles.logprob_role(name) is not None, name
