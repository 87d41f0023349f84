"""`kllint check --show-sites` (issue 36, item 6): every KL estimate the analysis saw, with its
place, estimator, fate, verdict and the evidence for each role; the JSON object form; the count
of roles decided by a name versus by dataflow; the same listing with the cache and with workers."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kllint.pipeline import parallel
from test_cli_support import run_cli, write

TRAIN = '''\
import torch


def token_logps(net, ids):
    return torch.log_softmax(net(ids).logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def k3_loss_step(policy, ids, ref_logprobs, adv, mask, opt, beta=0.1):
    logprobs = token_logps(policy, ids)
    log_ratio = ref_logprobs - logprobs
    kl = torch.exp(log_ratio) - log_ratio - 1
    pg = -(logprobs * adv * mask).sum()
    loss = pg + beta * (kl * mask).sum() / mask.sum()
    loss.backward()
    opt.step()


def k1_reward_step(policy, anchor_net, ids, scores, mask, opt, beta=0.05):
    anchor_net.requires_grad_(False)
    logps = token_logps(policy, ids)
    with torch.no_grad():
        anchored = token_logps(anchor_net, ids)
    penalty = logps.detach() - anchored
    rewards = -beta * penalty
    rewards[:, -1] += scores
    returns = torch.flip(torch.cumsum(torch.flip(rewards, [1]), 1), [1])
    loss = -(logps * returns * mask).sum()
    loss.backward()
    opt.step()


def kl_metric(logps, ref_logps, mask, metrics):
    kl = logps - ref_logps
    metrics["kl"] = ((kl * mask).sum() / mask.sum()).item()
    return metrics
'''

MODES = '''\
def kl_penalty(logp, ref_logp, mode):
    if mode == "k1":
        return logp - ref_logp
    if mode == "k3":
        log_ratio = ref_logp - logp
        return log_ratio.exp() - log_ratio - 1
    raise ValueError(mode)


def train_step(config, logp, ref_logp, adv, mask, opt):
    kl = kl_penalty(logp, ref_logp, config.kl_estimator)
    loss = -(logp * adv * mask).sum() + 0.1 * (kl * mask).sum()
    loss.backward()
    opt.step()
'''

SECTION = '''\
KL estimates seen: 3 (roles decided by dataflow: 3, by a name: 3)

train.py:11:10
  estimator: k3
  fate: loss
  verdict: KL102, KL201
    policy: forward of `policy` with gradient tracking on (line 5:30, called at
      line 9:16)
    reference: name `ref_logprobs` (line 8:31)

train.py:23:15
  estimator: k1
  fate: reward
  verdict: correct
    policy: forward of `policy` with gradient tracking on (line 5:30, called at
      line 20:13)
    reference: forward of `anchor_net` only with gradient tracking off, in a
      step that runs `policy` with it on (line 5:30, called at line 22:20)

train.py:33:10
  estimator: k1
  fate: metric
  verdict: correct
    policy: name `logps` (line 32:15)
    reference: name `ref_logps` (line 32:22)
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    write(tmp_path / "train.py", TRAIN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _sites(args: list[str]) -> dict:
    result = run_cli(["check", "-q", "--output-format", "json", "--show-sites", *args])
    assert result.exit_code == 1, result.output
    return json.loads(result.stdout)


def test_text_lists_each_estimate_after_the_findings(project):
    result = run_cli(["check", "-q", "--no-cache", "--output-format", "concise", "--show-sites", "train.py"])
    assert result.exit_code == 1
    findings, section = result.stdout.split("\n\n", 1)
    assert [line.split(" ", 2)[:2] for line in findings.splitlines()] == [
        ["train.py:11:10:", "KL102"], ["train.py:11:10:", "KL201"]]
    assert section == SECTION
    assert max(len(line) for line in section.splitlines()) <= 80


def test_full_format_ends_with_the_same_section(project):
    result = run_cli(["check", "-q", "--no-cache", "--show-sites", "train.py"])
    assert result.stdout.endswith("\n\n" + SECTION)


def test_json_object_form_and_site_schema(project):
    document = _sites(["--no-cache", "train.py"])
    assert set(document) == {"findings", "sites", "summary"}
    assert [(d["code"], d["line"], d["column"]) for d in document["findings"]] == [("KL102", 11, 10), ("KL201", 11, 10)]
    k3, reward, metric = document["sites"]
    assert k3 == {
        "path": "train.py", "cell": None, "line": 11, "column": 10,
        "estimators": [{"name": "k3", "when": None}], "fate": ["loss"],
        "verdict": "findings", "codes": ["KL102", "KL201"],
        "roles": [
            {"role": "policy", "evidence": "forward of `policy` with gradient tracking on", "decided_by": "dataflow",
             "path": "train.py", "cell": None, "line": 5, "column": 30,
             "via": {"path": "train.py", "cell": None, "line": 9, "column": 16}},
            {"role": "reference", "evidence": "name `ref_logprobs`", "decided_by": "name",
             "path": "train.py", "cell": None, "line": 8, "column": 31, "via": None},
        ],
    }
    # the frozen network forwarded under no_grad beside the trained one is the reference by dataflow
    assert (reward["line"], reward["column"], reward["fate"], reward["verdict"], reward["codes"]) == (
        23, 15, ["reward"], "correct", [])
    assert [(r["role"], r["decided_by"], r["evidence"]) for r in reward["roles"]] == [
        ("policy", "dataflow", "forward of `policy` with gradient tracking on"),
        ("reference", "dataflow",
         "forward of `anchor_net` only with gradient tracking off, in a step that runs `policy` with it on"),
    ]
    assert reward["roles"][1]["via"] == {"path": "train.py", "cell": None, "line": 22, "column": 20}
    assert (metric["line"], metric["estimators"], metric["fate"], metric["verdict"]) == (
        33, [{"name": "k1", "when": None}], ["metric"], "correct")
    assert [(r["role"], r["decided_by"], r["evidence"]) for r in metric["roles"]] == [
        ("policy", "name", "name `logps`"), ("reference", "name", "name `ref_logps`")]


def test_summary_counts_roles_decided_by_a_name_and_by_dataflow(project):
    assert _sites(["--no-cache", "train.py"])["summary"] == {
        "sites": 3, "roles_by_dataflow": 3, "roles_by_name": 3, "roles_without_evidence": 0}


def test_a_role_without_evidence_of_its_own_shows_its_network(project):
    """JAX: the log-probs of the weights a grad transform differentiates are the policy's; the
    evidence is the network's (`network:policy`), counted as dataflow."""
    shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "KL101" / "jax_grpo_log_ratio.py", "jax_step.py")
    document = _sites(["--no-cache", "jax_step.py"])
    [site] = document["sites"]
    assert [(r["role"], r["evidence"], r["decided_by"], r["line"]) for r in site["roles"]] == [
        ("network:policy", "an argument the grad transform of `grpo_loss` differentiates", "dataflow", 22),
        ("reference", "name `ref_logp`", "name", 26)]
    assert document["summary"]["roles_by_dataflow"] == document["summary"]["roles_by_name"] == 1


def test_plain_json_is_unchanged_without_show_sites(project):
    result = run_cli(["check", "-q", "--no-cache", "--output-format", "json", "train.py"])
    document = json.loads(result.stdout)
    assert isinstance(document, list) and [d["code"] for d in document] == ["KL102", "KL201"]


def test_reports_keep_their_format(project):
    result = run_cli(["check", "-q", "--no-cache", "--show-sites", "--output-format", "json",
                      "--report", "json:report.json", "train.py"])
    assert "sites" in json.loads(result.stdout)
    assert isinstance(json.loads((project / "report.json").read_text()), list)


def test_verdict_is_what_is_reported(project):
    """Selection applies: an ignored code is not the site's verdict."""
    document = _sites(["--no-cache", "--ignore", "KL102", "train.py"])
    assert [d["code"] for d in document["findings"]] == ["KL201"]
    assert document["sites"][0]["codes"] == ["KL201"]
    result = run_cli(["check", "-q", "--no-cache", "--output-format", "json", "--show-sites", "--ignore", "KL1,KL2",
                      "train.py"])
    assert result.exit_code == 0
    assert [site["verdict"] for site in json.loads(result.stdout)["sites"]] == ["correct"] * 3


def test_estimator_per_option(project):
    write(project / "modes.py", MODES)
    [site] = _sites(["--no-cache", "modes.py"])["sites"]
    assert (site["line"], site["column"]) == (11, 10)  # the call that chooses the estimator
    assert site["estimators"] == [{"name": "k1", "when": "`config.kl_estimator` is 'k1'"},
                                  {"name": "k3", "when": "`config.kl_estimator` is 'k3'"}]
    assert site["fate"] == ["loss"] and site["codes"] == ["KL101", "KL102", "KL201"]


def test_notebook_sites_are_placed_per_cell(project):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# training"]}] + [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": part.splitlines(True)}
        for part in TRAIN.split("\n\n\n")]
    notebook = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    write(project / "train.ipynb", json.dumps(notebook))
    k3, reward, metric = _sites(["--no-cache", "train.ipynb"])["sites"]
    assert (k3["cell"], k3["line"], k3["column"], k3["codes"]) == (4, 4, 10, ["KL102", "KL201"])
    assert [(r["cell"], r["line"], r["column"], r["via"]) for r in k3["roles"]] == [
        (3, 2, 30, {"path": "train.ipynb", "cell": 4, "line": 2, "column": 16}), (4, 1, 31, None)]
    assert (reward["cell"], reward["fate"], metric["cell"], metric["fate"]) == (5, ["reward"], 6, ["metric"])
    result = run_cli(["check", "-q", "--no-cache", "--output-format", "concise", "--show-sites", "train.ipynb"])
    assert "train.ipynb:cell 4:4:10\n  estimator: k3\n" in result.stdout
    assert "    reference: name `ref_logprobs` (cell 4:1:31)\n" in result.stdout


def test_cache_gives_the_same_sites(project):
    """A run that fills the cache, then one with --show-sites: the sites are not lost to it."""
    fresh = _sites(["--no-cache", "train.py"])
    assert run_cli(["check", "-q", "train.py"]).exit_code == 1  # fills .kllint_cache
    assert (project / ".kllint_cache").is_dir()
    assert _sites(["train.py"]) == fresh
    assert _sites(["train.py"]) == fresh  # and again: --show-sites wrote nothing stale


def test_workers_return_the_sites(project, monkeypatch):
    for number in range(parallel.THRESHOLD + 2):
        shutil.copy(project / "train.py", project / f"copy{number}.py")
    (project / "train.py").unlink()
    calls = []
    analyse = parallel.analyse

    def spy(tasks, jobs, track, done, sites=False):
        calls.append(sites)
        return analyse(tasks, jobs, track, done, sites)

    monkeypatch.setattr(parallel, "analyse", spy)
    two = _sites(["--no-cache", "-j", "2", "."])
    assert calls == [True]
    one = _sites(["--no-cache", "-j", "1", "."])
    assert two == one
    assert len(two["sites"]) == 3 * (parallel.THRESHOLD + 2)
    assert two["summary"]["roles_by_name"] == 3 * (parallel.THRESHOLD + 2)


def test_the_dev_set_tee_keeps_the_plain_findings_and_counts_the_roles(project, tmp_path_factory, capsys):
    from devset_tee import main, sites_line

    plain = run_cli(["check", "--no-cache", "--output-format", "json", str(project)]).stdout
    reports = tmp_path_factory.mktemp("reports")
    assert main([str(reports), "check", str(project), "--output-format", "json", "--no-cache"]) == 1
    assert capsys.readouterr().out == plain
    [record] = [json.loads(path.read_text()) for path in reports.glob("*.json")]
    assert record["stdout"] == plain
    assert record["sites"] == {"sites": 3, "roles_by_dataflow": 3, "roles_by_name": 3, "roles_without_evidence": 0}
    assert sites_line(reports) == ("KL estimates seen: 3; roles decided by dataflow: 3, by a name: 3, "
                                   "without evidence: 0")


@pytest.mark.parametrize("args, message", [
    (["--output-format", "sarif"], "--show-sites needs the full, concise or json output format, not sarif"),
    (["--statistics"], "--show-sites cannot be combined with --statistics"),
    (["--fix"], "--show-sites cannot be combined with --fix"),
])
def test_usage(project, args, message):
    result = run_cli(["check", "--show-sites", *args, "train.py"])
    assert result.exit_code == 2
    assert message in result.output


def test_help_describes_the_option():
    result = run_cli(["check", "--help"])
    assert "--show-sites" in result.stdout and "KL estimate" in result.stdout


def test_a_helper_checked_by_its_absolute_path_lists_the_site_its_caller_sees(tmp_path, monkeypatch):
    # the helper writes the k3 estimate, its caller (a context file of the run) makes it a loss:
    # the site is seen by the caller's analysis and listed under the checked file's display
    write(tmp_path / "pyproject.toml", "[project]\nname = 'p'\n")
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "kl.py", "def kl_penalty(logprob, ref_logprob):\n"
                                      "    log_r = ref_logprob - logprob\n    return log_r.exp() - log_r - 1\n")
    write(tmp_path / "pkg" / "train.py", "from pkg.kl import kl_penalty\n\n\ndef loss_fn(logprob, ref_logprob):\n"
                                         "    return kl_penalty(logprob, ref_logprob).mean()\n")
    monkeypatch.chdir(tmp_path)
    absolute = (tmp_path / "pkg" / "kl.py").as_posix()
    for shown in ("pkg/kl.py", absolute):
        document = _sites(["--no-cache", shown])
        assert {(d["path"], d["code"]) for d in document["findings"]} == {(shown, "KL102"), (shown, "KL201")}
        assert [(s["path"], s["line"], s["fate"]) for s in document["sites"]] == [(shown, 3, ["loss"])]
