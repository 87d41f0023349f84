"""Behaviour snapshots: every finding kllint reports on a corpus, recorded in full and compared.

A snapshot is the project's own JSON report (`Diagnostic.to_json`: code, name, severity, path,
cell, span, message, help, trace steps, fix with its replacement and rewritten region) of every
finding, with paths relative to the corpus root and that root scrubbed from every text. Findings
read from `kllint.api.check_paths` also carry `estimate` (what `--confirm` hands to the gradient
checker). The document is deterministic: files and findings sorted, no absolute path, no time.

`KLLINT_UPDATE_SNAPSHOT=1` rewrites the recorded files instead of comparing (review the
`git diff` of `tests/golden/` before committing it). Used by tests/test_snapshot.py (fixtures,
annotated cases) and tests/test_dev_set.py (the real-code development set); `analyse` is the
session-wide run that tests/test_fixtures.py shares, so each file is analysed once per session.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

UPDATE_VARIABLE = "KLLINT_UPDATE_SNAPSHOT"
GOLDEN = Path(__file__).resolve().parent / "golden"
SHOWN_DIFFERENCES = 25
FIELDS_SHOWN = 4
TEXT_SHOWN = 160

STOPPED = "analysis stopped after"  # the KL900 message of a file that ran out of its time budget

_RUNS: dict[Path, Any] = {}


def updating() -> bool:
    """Whether this run rewrites the snapshots (`KLLINT_UPDATE_SNAPSHOT` set, not `0`)."""
    return os.environ.get(UPDATE_VARIABLE, "") not in ("", "0")


def analyse(path: Path):
    """`kllint.api.check_paths([path])` (default settings, no result cache), once per session."""
    from kllint.api import check_paths

    key = path.resolve()
    result = _RUNS.get(key)
    if result is None:
        result = _RUNS[key] = check_paths([str(path)])
    return result


# --- records -------------------------------------------------------------------------------------


def relative_path(path: str, root: Path) -> str:
    """`path` (absolute, or relative to the working folder) relative to `root`, POSIX style; a
    path outside `root` keeps only its file name, marked `<outside>/`."""
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = Path.cwd() / candidate
    for base, target in ((root, candidate), (root.resolve(), candidate.resolve())):
        try:
            return target.relative_to(base).as_posix()
        except ValueError:
            continue
    return "<outside>/" + candidate.name


def _scrub(value: Any, prefixes: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for prefix in prefixes:
            value = value.replace(prefix, "")
        return value
    if isinstance(value, (list, tuple)):
        return [_scrub(item, prefixes) for item in value]
    if isinstance(value, dict):
        return {key: _scrub(item, prefixes) for key, item in value.items()}
    return value


def normalise(finding: dict[str, Any], root: Path) -> dict[str, Any]:
    """A JSON-report finding with its own and its trace steps' paths relative to `root`, and
    `root` removed from every other text (messages, notes, rewritten regions)."""
    finding = dict(finding)
    finding["path"] = relative_path(finding["path"], root)
    finding["trace"] = [dict(step, path=relative_path(step["path"], root)) for step in finding.get("trace") or []]
    prefixes = tuple(dict.fromkeys(f"{base}{os.sep}" for base in (root, root.resolve())))
    return _scrub(finding, prefixes)


def record(diagnostic, root: Path) -> dict[str, Any]:
    """The snapshot record of one `Diagnostic`: its JSON report plus its `estimate`."""
    finding = normalise(diagnostic.to_json(), root)
    estimate = diagnostic.estimate
    finding["estimate"] = _scrub(dataclasses.asdict(estimate), ()) if estimate is not None else None
    return finding


def _order(finding: dict[str, Any]) -> tuple:
    return (finding["path"], finding.get("cell") or 0, finding["line"], finding["column"], finding["code"],
            json.dumps(finding, sort_keys=True))


def sort_findings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings in report order, ties broken by their whole text (a total, stable order)."""
    return sorted(findings, key=_order)


def snapshot_of_files(files: list[Path], root: Path) -> dict[str, Any]:
    """The snapshot of `files` (each analysed alone by `analyse`): per file relative to `root`,
    its findings (an empty list for a clean file) and the run's internal errors, if any."""
    found: dict[str, list] = {}
    errors: dict[str, list] = {}
    prefixes = (f"{root}{os.sep}", f"{root.resolve()}{os.sep}")
    for file in files:
        result = analyse(file)
        name = relative_path(str(file), root)
        found[name] = sort_findings([record(d, root) for d in result.diagnostics])
        if result.internal_errors:
            errors[name] = _scrub(list(result.internal_errors), prefixes)
    return {"files": dict(sorted(found.items())), "internal_errors": dict(sorted(errors.items()))}


def snapshot_of_reports(reports: Path) -> dict[str, Any]:
    """The snapshot of the JSON reports tests/devset_tee.py kept in the folder `reports` (one
    per checked tree): every finding per `<tree name>/<path in the tree>`, and each tree's exit
    code (a tree whose run failed, exit 2, fails the snapshot with kllint's stderr).

    A file whose analysis ran out of its time budget (KL900 "analysis stopped") is listed under
    `stopped` instead: how far a file near the budget gets depends on the machine, so
    `differences` leaves the files stopped in either snapshot out of the comparison."""
    files: dict[str, list] = {}
    exits: dict[str, int] = {}
    stopped: set[str] = set()
    for report in sorted(reports.glob("*.json")):
        run = json.loads(report.read_text(encoding="utf-8"))
        root = Path(run["root"])
        exits[root.name] = run["exit"]
        assert run["exit"] in (0, 1), f"kllint exit {run['exit']} on {root.name}: {run['stderr_tail']}"
        for finding in json.loads(run["stdout"] or "[]"):
            finding = normalise(finding, root)
            name = f"{root.name}/{finding['path']}"
            if finding["code"] == "KL900" and finding["message"].startswith(STOPPED):
                stopped.add(name)
            else:
                files.setdefault(name, []).append(finding)
    return {"exit_codes": dict(sorted(exits.items())), "stopped": sorted(stopped),
            "files": {name: sort_findings(found) for name, found in sorted(files.items())}}


def dumps(snapshot: dict[str, Any]) -> str:
    """The committed text of a snapshot: sorted keys, one field per line, a final newline."""
    return json.dumps(snapshot, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


# --- comparison ----------------------------------------------------------------------------------


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= TEXT_SHOWN else text[:TEXT_SHOWN - 3] + "..."


def field_differences(old: Any, new: Any, where: str = "") -> list[str]:
    """`field: old -> new` for each differing leaf of two JSON values (lists element-wise)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            if old.get(key, "<absent>") != new.get(key, "<absent>"):
                out += field_differences(old.get(key, "<absent>"), new.get(key, "<absent>"),
                                         f"{where}.{key}" if where else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and old != new:
        out = [f"{where}: {len(old)} -> {len(new)} items"] if len(old) != len(new) else []
        for index, (a, b) in enumerate(zip(old, new)):
            out += field_differences(a, b, f"{where}[{index}]")
        if len(old) != len(new):
            extra, label = (old[len(new):], "removed") if len(old) > len(new) else (new[len(old):], "added")
            out += [f"{where}[{len(min(old, new, key=len)) + i}] {label}: {_short(item)}" for i, item in enumerate(extra)]
        return out
    return [] if old == new else [f"{where}: {_short(old)} -> {_short(new)}"]


def _label(finding: dict[str, Any]) -> str:
    cell = f"cell {finding['cell']}:" if finding.get("cell") else ""
    return f"{finding['code']} at {cell}{finding['line']}:{finding['column']}"


def _pair(lost: list[dict], new: list[dict]) -> list[tuple[dict | None, dict | None]]:
    """Pairs of (recorded, current) findings of one file: each lost finding with the current
    one of the same code that differs in the fewest fields (ties: the nearest line)."""
    pairs: list[tuple[dict | None, dict | None]] = []
    left = list(new)
    for old in lost:
        same = [n for n in left if n["code"] == old["code"]]
        if not same:
            pairs.append((old, None))
            continue
        best = min(same, key=lambda n: (len(field_differences(old, n)), abs(n["line"] - old["line"])))
        left.remove(best)
        pairs.append((old, best))
    pairs += [(None, n) for n in left]
    return pairs


def _file_differences(name: str, recorded: list[dict], current: list[dict]) -> list[str]:
    pending = [json.dumps(f, sort_keys=True) for f in current]
    lost = []
    for finding in recorded:
        text = json.dumps(finding, sort_keys=True)
        if text in pending:
            pending.remove(text)
        else:
            lost.append(finding)
    new = [json.loads(text) for text in pending]
    out = []
    for old, now in _pair(lost, new):
        if now is None:
            out.append(f"{name}: finding gone: {_label(old)}: {old['message']}")
        elif old is None:
            out.append(f"{name}: new finding: {_label(now)}: {now['message']}")
        else:
            changes = field_differences(old, now)
            more = f" (and {len(changes) - FIELDS_SHOWN} more fields)" if len(changes) > FIELDS_SHOWN else ""
            out.append(f"{name}: {_label(old)} changed{more}:\n      " + "\n      ".join(changes[:FIELDS_SHOWN]))
    return out


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What changed from the recorded snapshot to the current one, one line per finding (files
    that appeared or disappeared, findings gone or new, findings whose fields changed). Files
    listed under `stopped` (time budget) in either are not compared."""
    out: list[str] = []
    for key in sorted(set(recorded) | set(current)):
        if key in ("files", "stopped"):
            continue
        if recorded.get(key) != current.get(key):
            out += [f"{key}: {line}" for line in field_differences(recorded.get(key), current.get(key))]
    old_files, new_files = recorded.get("files", {}), current.get("files", {})
    volatile = set(recorded.get("stopped", ())) | set(current.get("stopped", ()))
    for name in sorted((set(old_files) | set(new_files)) - volatile):
        if name not in new_files:
            out.append(f"{name}: no longer in the corpus (had {len(old_files[name])} findings)")
        elif name not in old_files:
            out.append(f"{name}: new in the corpus, {len(new_files[name])} findings")
        elif old_files[name] != new_files[name]:
            out += _file_differences(name, old_files[name], new_files[name])
    return out


def check_snapshot(golden: Path, current: dict[str, Any]) -> None:
    """Compare `current` with the snapshot recorded in `golden` (rewrite it when updating);
    fails with the first differences, readable, on any change."""
    text = dumps(current)
    if updating():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        return
    assert golden.is_file(), f"{golden.name} is not recorded: run with {UPDATE_VARIABLE}=1 to record it"
    recorded = json.loads(golden.read_text(encoding="utf-8"))
    found = differences(recorded, json.loads(text))
    if not found:
        return
    shown = "\n  ".join(found[:SHOWN_DIFFERENCES])
    more = f"\n  ... and {len(found) - SHOWN_DIFFERENCES} more" if len(found) > SHOWN_DIFFERENCES else ""
    shown_path = golden.relative_to(GOLDEN.parent.parent) if golden.is_relative_to(GOLDEN.parent.parent) else golden
    raise AssertionError(f"behaviour changed from {shown_path} "
                         f"({len(found)} differences):\n  {shown}{more}\n"
                         f"If the change is intended, rerun with {UPDATE_VARIABLE}=1 and review the diff.")
