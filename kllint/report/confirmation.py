"""How a `--confirm` result reads in the full and concise outputs: a `confirmed:` line only
when the gradient checker agrees with the finding; otherwise `not confirmed: <reason>` or
`contradicted: <which says what>`."""
from __future__ import annotations

from typing import Any


def status(confirmed: dict[str, Any]) -> str:
    """`confirmed`, `contradicted` or `not confirmed` (results without a status are judged by `agrees`)."""
    if confirmed.get("status"):
        return str(confirmed["status"])
    agrees = confirmed.get("agrees")
    if confirmed.get("verdict") == "not-evaluated" or agrees is None:
        return "not confirmed"
    return "confirmed" if agrees else "contradicted"


def line(confirmed: dict[str, Any]) -> tuple[str, str]:
    """The label and the text of the full output's confirmation line."""
    label = status(confirmed)
    if label == "confirmed":
        return label, str(confirmed.get("summary", ""))
    return label, str(confirmed.get("reason") or confirmed.get("summary") or "no reason given")
