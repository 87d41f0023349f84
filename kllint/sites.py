"""The KL estimates an analysis saw (`kllint check --show-sites`): observations only, no verdict.

A `Site` is one place where an estimate is written (where a finding about it would be placed):
its estimator (per option when a branch chooses among several), its fates (where its value
ends: a differentiated loss, a reward or advantage, a logged metric; `unknown` when none is
seen), the evidence for each role it reads, and the findings the rules made about it before
selection and suppressions (`judged`). The verdict is joined at report time, with the findings
actually reported (`kllint.report.sites`). A leaf: plain data that worker processes return.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

FATES = ("loss", "reward", "metric")
UNKNOWN = "unknown"
# how the estimators are named in the listing (the analysis's names otherwise)
ESTIMATOR_NAMES = {"analytic": "full-vocabulary", "k3-inverted": "inverted k3", "reference-ratio": "ratio pi/pi_ref",
                   None: "unseen (a value named as a KL)"}


@dataclass(frozen=True)
class RoleSeen:
    """The evidence for one role of an estimate (`policy`, `reference`, `old`, `kl`): `role` as
    the evidence names it (`policy, no gradient`), where it was decided (in a helper: `via` the
    call of the entry point that ran it)."""

    role: str
    evidence: str
    path: str
    line: int
    column: int
    via: tuple[str, int, int] | None = None  # the call, in the entry point, that led there
    cell: int | None = None  # in a notebook: the cell of `line`
    via_cell: int | None = None  # ... and of `via`

    @property
    def by_name(self) -> bool:
        """Decided by a name (the last resort), not by dataflow."""
        return self.evidence.startswith("name ")

    @property
    def decided_by(self) -> str:
        """`name`, `dataflow`, or `none` when the analysis recorded no evidence for the role."""
        return "none" if not self.evidence else "name" if self.by_name else "dataflow"

    def to_json(self) -> dict:
        place = {"path": self.path, "cell": self.cell, "line": self.line, "column": self.column} if self.evidence \
            else {"path": None, "cell": None, "line": None, "column": None}
        via = {"path": self.via[0], "cell": self.via_cell, "line": self.via[1], "column": self.via[2]} \
            if self.via else None
        return {"role": self.role, "evidence": self.evidence or None, "decided_by": self.decided_by, **place,
                "via": via}


@dataclass(frozen=True)
class EstimatorSeen:
    """An estimator of a site, and the configuration choosing it (`when`; empty: always)."""

    name: str
    when: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "when": self.when or None}


@dataclass(frozen=True)
class Site:
    """One place where a KL estimate is written, and what the analysis saw of it."""

    path: str
    line: int
    column: int
    estimators: tuple[EstimatorSeen, ...]
    fates: tuple[str, ...]
    roles: tuple[RoleSeen, ...]
    judged: tuple[tuple[str, str, int, int], ...] = ()  # (code, path, line, column) of the findings about it
    cell: int | None = None

    @property
    def key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.column)

    def merged(self, other: "Site") -> "Site":
        """This site as seen by two analyses (of two files calling the same helper)."""
        fates = tuple(f for f in FATES if f in self.fates or f in other.fates) or (UNKNOWN,)
        return replace(self, estimators=_union(self.estimators, other.estimators), fates=fates,
                       roles=_union(self.roles, other.roles), judged=_union(self.judged, other.judged))


def _union(first: tuple, second: tuple) -> tuple:
    return tuple(dict.fromkeys(first + second))


def merge_sites(sites: list[Site]) -> list[Site]:
    """One site per place, sorted by place."""
    by_place: dict[tuple, Site] = {}
    for site in sites:
        known = by_place.get(site.key)
        by_place[site.key] = site if known is None else known.merged(site)
    return [by_place[key] for key in sorted(by_place)]
