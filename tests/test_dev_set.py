"""The real-code development set (a folder named by `KLLINT_DEV_SET` holding `tools/real_corpus.py`
and `real/labels.jsonl`; it is not part of the repository): every labelled rule
that kllint finds today must still be found (a snapshot of passing labels, updated on purpose
with `KLLINT_UPDATE_DEV_SET=1`), and the figure is printed.

The same run also pins every finding on the 22 release trees (code, span, message, help, trace,
fix: kllint's JSON report, paths relative to each tree) against `tests/golden/dev_set_findings.json`
(tests/snapshot.py), updated on purpose with `KLLINT_UPDATE_SNAPSHOT=1`. The scorer runs kllint
through tests/devset_tee.py, which keeps a copy of each JSON report in a folder of this test.

Marked `network` and `devset`: it downloads 22 pinned releases from PyPI into a cache (the
scorer's default, under the temporary folder) and runs `kllint check` on each; it is skipped
when `KLLINT_DEV_SET` is unset (a clone on its own) or offline (`KLLINT_OFFLINE=1`).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from devset_tee import sites_line
from snapshot import check_snapshot, snapshot_of_reports

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KLLINT_DEV_SET") or "/nonexistent-kllint-dev-set")
SCORER = SHARED / "tools" / "real_corpus.py"
LABELS = SHARED / "real" / "labels.jsonl"
SNAPSHOT = Path(__file__).resolve().parent / "golden" / "dev_set_passing.json"
FINDINGS = Path(__file__).resolve().parent / "golden" / "dev_set_findings.json"
TEE = Path(__file__).resolve().parent / "devset_tee.py"
MISS = re.compile(r"^MISS (?P<code>KL\d{3}) (?P<label>\S+) ")
FALSE = re.compile(r"^FALSE (?P<code>KL\d{3}) (?P<label>\S+) ")

pytestmark = [pytest.mark.network, pytest.mark.devset]


def _expected_pairs() -> set[str]:
    pairs = set()
    for line in LABELS.read_text().splitlines():
        if line.strip():
            label = json.loads(line)
            pairs.update(f"{label['id']} {code}" for code in label["expected_rules"])
            if not label["expected_rules"]:
                pairs.add(f"{label['id']} clean")
    return pairs


@pytest.mark.skipif(not SCORER.is_file() or not LABELS.is_file(), reason="KLLINT_DEV_SET does not name the development set")
def test_labels_found_today_stay_found(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    command = [sys.executable, str(SCORER), "--kllint", shlex.join([sys.executable, str(TEE), str(reports)])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3000, cwd=ROOT)
    lines = done.stdout.splitlines()
    assert lines and lines[-1].startswith("labels="), done.stdout[-2000:] + done.stderr[-2000:]
    print("\n".join(line for line in lines if not line.startswith(("UNLABELLED", "REVIEWED-FP"))))
    print(sites_line(reports))  # issue 36: how many roles a name decided, how many dataflow
    skipped = re.search(r"skipped=(\d+)", lines[-1])
    if skipped and int(skipped.group(1)):
        pytest.skip(f"{skipped.group(1)} labels skipped: a release could not be downloaded ({done.stderr[-300:]})")
    failing = {f"{m['label']} {m['code']}" for m in map(MISS.match, lines) if m}
    failing |= {f"{m['label']} clean" for m in map(FALSE.match, lines) if m}
    passing = _expected_pairs() - failing
    if os.environ.get("KLLINT_UPDATE_DEV_SET"):
        SNAPSHOT.write_text(json.dumps(sorted(passing), indent=1) + "\n")
    recorded = set(json.loads(SNAPSHOT.read_text()))
    lost = sorted(recorded - passing)
    problems = [f"labels that passed before and fail now: {lost}"] if lost else []
    try:
        check_snapshot(FINDINGS, snapshot_of_reports(reports))
    except AssertionError as error:
        problems.append(str(error))
    assert not problems, "\n\n".join(problems)
