"""The diagnostic data model shared by the analysis, the rules and every reporter.

Positions are 1-based lines and 1-based columns, end exclusive (as Ruff and SARIF show them);
libcst's 0-based columns are converted in exactly one place, `Span.from_code_range`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]
Applicability = Literal["safe", "unsafe", "display-only"]


@dataclass(frozen=True, order=True)
class Span:
    """A source range: 1-based `line`/`column`, end exclusive."""

    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def from_code_range(cls, code_range: Any) -> "Span":
        """Convert a libcst `CodeRange` (1-based lines, 0-based columns) to a Span."""
        return cls(
            code_range.start.line,
            code_range.start.column + 1,
            code_range.end.line,
            code_range.end.column + 1,
        )


@dataclass(frozen=True)
class TraceStep:
    """One step of the path from a KL estimate to its sink (CodeQL-style path explanation).

    `cell` is the notebook cell (1-based, `line` is then within the cell), None in a Python file."""

    path: str
    line: int
    column: int
    note: str
    cell: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "cell": self.cell, "line": self.line, "column": self.column, "note": self.note}


@dataclass(frozen=True)
class Fix:
    """A suggested rewrite: `replacement` is the new text of the diagnostic's primary span. A fix
    that rewrites more than that span (whole lines around it: a name bound on the line before, a
    statement wrapped in a `with` block, a stale comment replaced) also has `span`, the region
    it replaces, and `content`, the region's new text (which holds the replacement).

    `applicability` follows Ruff: `safe` keeps gradient and value, `unsafe` changes the
    training gradient on purpose, `display-only` needs a human choice.
    """

    applicability: Applicability
    description: str
    replacement: str | None = None
    span: Span | None = None
    content: str | None = None

    def to_json(self) -> dict[str, Any]:
        region = None
        if self.span is not None:
            region = {"line": self.span.line, "column": self.span.column,
                      "end_line": self.span.end_line, "end_column": self.span.end_column, "content": self.content}
        return {
            "applicability": self.applicability,
            "description": self.description,
            "replacement": self.replacement,
            "region": region,
        }


@dataclass(frozen=True)
class Estimate:
    """The KL estimate behind a finding, for the runtime gradient checker (`--confirm`).

    `source` is the final expression as written in the user's code and `setup` the assignments
    (as written, in order) that define the intermediate names it uses, e.g.
    `("log_ratio = logp - base_logp",)` before `0.5 * log_ratio.square()`. `roles` maps each
    free name to `policy` (live log-probs, `[batch, tokens]`), `policy_detached`, `reference`,
    `old` (rollout policy) or `mask`; other free names are opaque (bound to ones). `usage` is
    `loss` or `reward`; `granularity` is `per-token` or `sequence`; `framework` is `torch` or
    `jax` (the module aliases used, e.g. `torch`, `F`, `jnp`, `jax`, are in `aliases`).
    """

    source: str
    roles: tuple[tuple[str, str], ...]
    usage: str
    granularity: str
    setup: tuple[str, ...] = ()
    framework: str = "torch"
    aliases: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Diagnostic:
    """One finding: a rule code at a primary span, with the trace to its sink.

    In a notebook `cell` is the 1-based position of the cell among all the notebook's cells and
    `span` is within that cell (kllint.notebook); it is None in a Python file."""

    code: str
    name: str
    severity: Severity
    path: str
    span: Span
    message: str
    help: str = ""
    trace: tuple[TraceStep, ...] = ()
    fix: Fix | None = None
    estimate: Estimate | None = None
    confirmed: dict[str, Any] | None = field(default=None, compare=False)
    cell: int | None = None

    @property
    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.span.line, self.span.column, self.code)

    def to_json(self) -> dict[str, Any]:
        """The stable JSON contract documented in the README."""
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "path": self.path,
            "cell": self.cell,
            "line": self.span.line,
            "column": self.span.column,
            "end_line": self.span.end_line,
            "end_column": self.span.end_column,
            "message": self.message,
            "help": self.help,
            "trace": [step.to_json() for step in self.trace],
            "fix": self.fix.to_json() if self.fix else None,
            "confirmed": self.confirmed,
        }
