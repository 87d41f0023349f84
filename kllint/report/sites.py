"""`kllint check --show-sites`: the KL estimates the analysis saw (`kllint.sites`), each with
its verdict: the codes of the findings reported about it (after selection, suppressions and
the baseline), or `correct`. Text: a "KL estimates seen" section after the findings, one block
per site, at most 80 columns. JSON: the object `{"findings": [...], "sites": [...],
"summary": {...}}` instead of the bare array of findings (only with `--show-sites`).

The summary counts the roles of the sites by what decided them: dataflow (a forward and its
gradient mode, a detach, a ratio, a log-softmax, ...) or a name (evidence `name ...`, the last
resort); a role without recorded evidence counts as neither."""
from __future__ import annotations

import json
import textwrap

from kllint.diagnostics import Diagnostic
from kllint.report.locations import location
from kllint.report.paths import escape_path
from kllint.report.visible import visible
from kllint.sites import Site

WIDTH = 80
SHOWN_WITH = ("full", "concise", "json")  # the formats that can carry the sites


def verdict(site: Site, findings: list[Diagnostic]) -> tuple[str, ...]:
    """The codes of the findings reported at the site or about its estimate (none: correct)."""
    place = (site.path, site.cell, site.line, site.column)
    return tuple(sorted({d.code for d in findings
                         if (d.path, d.cell, d.span.line, d.span.column) == place
                         or (d.code, d.path, d.span.line, d.span.column) in site.judged}))


def role_counts(sites: list[Site]) -> dict[str, int]:
    """How many roles of the sites were decided by dataflow, by a name, by nothing recorded."""
    counts = {"dataflow": 0, "name": 0, "none": 0}
    for site in sites:
        decided: dict[str, str] = {}
        for role in site.roles:  # a role is decided by dataflow when any of its evidence is dataflow
            family = role.role.removeprefix("network:").split(",")[0]
            if decided.get(family) != "dataflow":
                decided[family] = role.decided_by
        for way in decided.values():
            counts[way] += 1
    return counts


def summary(sites: list[Site]) -> str:
    """`KL estimates seen: 3 (roles decided by dataflow: 4, by a name: 2)`."""
    counts = role_counts(sites)
    line = (f"KL estimates seen: {len(sites)} (roles decided by dataflow: {counts['dataflow']}, "
            f"by a name: {counts['name']}")
    return line + (f", without evidence: {counts['none']})" if counts["none"] else ")")


def _estimators(site: Site) -> str:
    return "; ".join(f"{e.name} when {e.when}" if e.when else e.name for e in site.estimators) or "unknown"


def _where(site: Site, path: str, line: int, column: int, cell: int | None = None) -> str:
    if path != site.path:
        return location(escape_path(path), line, column, cell)
    return f"cell {cell}:{line}:{column}" if cell is not None else f"line {line}:{column}"


def render_text(sites: list[Site], findings: list[Diagnostic]) -> str:
    """The "KL estimates seen" section."""
    out = [summary(sites)]
    for site in sites:
        codes = verdict(site, findings)
        lines = [location(escape_path(site.path), site.line, site.column, site.cell),
                 f"estimator: {_estimators(site)}", f"fate: {', '.join(site.fates)}",
                 f"verdict: {', '.join(codes) if codes else 'correct'}"]
        out.append("")
        out.append(visible(lines[0]))
        for line in lines[1:]:
            out.extend(textwrap.wrap(visible(line), WIDTH, initial_indent="  ", subsequent_indent="    ",
                                     break_on_hyphens=False))
        for role in site.roles:
            via = f", called at {_where(site, *role.via, role.via_cell)}" if role.via else ""
            label = f"{role.role.removeprefix('network:')} network" if role.role.startswith("network:") else role.role
            text = (f"{label}: {role.evidence} ({_where(site, role.path, role.line, role.column, role.cell)}{via})"
                    if role.evidence else f"{label}: no evidence recorded")
            out.extend(textwrap.wrap(visible(text), WIDTH, initial_indent="    ", subsequent_indent="      ",
                                     break_on_hyphens=False))
    return "\n".join(out) + "\n"


def site_json(site: Site, findings: list[Diagnostic]) -> dict:
    """One site in the JSON output (schema in README.md, "Listing the KL estimates")."""
    codes = verdict(site, findings)
    return {"path": escape_path(site.path), "cell": site.cell, "line": site.line, "column": site.column,
            "estimators": [e.to_json() for e in site.estimators], "fate": list(site.fates),
            "verdict": "findings" if codes else "correct", "codes": list(codes),
            "roles": [_role_json(r) for r in site.roles]}


def _role_json(role) -> dict:
    document = role.to_json()
    document["path"] = escape_path(role.path) if role.path else None
    if role.via:
        document["via"]["path"] = escape_path(role.via[0])
    return document


def render_json(findings: list[Diagnostic], sites: list[Site]) -> str:
    """`{"findings": [...], "sites": [...], "summary": {...}}`; findings as in the plain JSON output."""
    from kllint.report.paths import printable

    counts = role_counts(sites)
    document = {"findings": [d.to_json() for d in sorted(printable(findings), key=lambda d: d.sort_key)],
                "sites": [site_json(site, findings) for site in sites],
                "summary": {"sites": len(sites), "roles_by_dataflow": counts["dataflow"],
                            "roles_by_name": counts["name"], "roles_without_evidence": counts["none"]}}
    return json.dumps(document, indent=2) + "\n"
