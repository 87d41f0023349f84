"""The findings in one output format: `render` (files, pipes, reports) and `write_stdout` (a
terminal gets the full format through rich, at its width). Names that are not valid UTF-8 are
escaped in every format but SARIF (`kllint.report.paths`). `GuardedOutput` makes a failed write
(a full disk, a closed pipe) one `OutputError` naming where the output was going."""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import TextIO

from kllint.diagnostics import Diagnostic


class OutputError(Exception):
    """The output could not be written; the message names where it was going and why."""


class GuardedOutput:
    """A text stream whose failed writes and flushes raise `OutputError` with `message` (a
    format string given the reason: "cannot write to standard output: {}"); the rest is the
    stream's."""

    def __init__(self, stream: TextIO, message: str) -> None:
        self._stream = stream
        self._message = message

    def _failed(self, exc: Exception) -> OutputError:
        return OutputError(self._message.format(getattr(exc, "strerror", None) or exc))

    def write(self, text: str) -> int:
        """Write `text`. Raises: OutputError: the stream refused it."""
        try:
            return self._stream.write(text)
        except (OSError, ValueError) as exc:  # ValueError: a closed stream
            raise self._failed(exc) from None

    def flush(self) -> None:
        """Flush the stream. Raises: OutputError: the stream refused it."""
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            raise self._failed(exc) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@dataclass
class OutputContext:
    """What a format needs besides the findings."""

    selected: frozenset[str]
    internal_errors: list[str]
    sources: dict[str, str] | None = None  # display -> text of buffers not read from disk (stdin)
    unsafe_fixes: bool = False
    sites: list | None = None  # `--show-sites`: the KL estimates seen (`kllint.report.sites`), else None


def with_sites(fmt: str, text: str, diagnostics: list[Diagnostic], context: OutputContext) -> str:
    """`text` (the findings in `fmt`) with the KL estimates seen, when the run lists them:
    the JSON object form, or a section after the findings (`kllint.report.sites`)."""
    if context.sites is None:
        return text
    from kllint.report import sites

    if fmt == "json":
        return sites.render_json(diagnostics, context.sites)
    return text + ("\n" if text.strip() else "") + sites.render_text(context.sites, diagnostics)


def render(fmt: str, diagnostics: list[Diagnostic], context: OutputContext) -> str:
    """The text of one output format (for files, and for stdout except `full` on a terminal),
    with the KL estimates seen when `context.sites` holds them."""
    return with_sites(fmt, _render(fmt, diagnostics, context), diagnostics, context)


def _render(fmt: str, diagnostics: list[Diagnostic], context: OutputContext) -> str:
    if fmt != "sarif":  # SARIF percent-encodes file names itself
        from kllint.report.paths import printable

        diagnostics = printable(diagnostics)
    if fmt == "json":
        from kllint.report import json as report_json

        return report_json.render(diagnostics)
    if fmt == "concise":
        from kllint.report import concise

        return concise.render(diagnostics, unsafe=context.unsafe_fixes)
    if fmt == "sarif":
        from kllint.report import sarif

        return sarif.render(diagnostics, selected=context.selected, notifications=context.internal_errors)
    if fmt == "github":
        from kllint.report import github

        return github.render(diagnostics)
    from rich.console import Console  # only the text formats need rich

    from kllint.report import text

    buffer = io.StringIO()
    text.render(diagnostics, Console(file=buffer, no_color=True, highlight=False, width=200, soft_wrap=True),
                sources=context.sources, unsafe=context.unsafe_fixes)
    return buffer.getvalue()


def write_stdout(fmt: str, diagnostics: list[Diagnostic], context: OutputContext, stdout: TextIO) -> None:
    """Write the findings to `stdout`: rich's full output on a terminal, else `render`."""
    if fmt == "full" and stdout.isatty():
        from rich.console import Console

        from kllint.report import text
        from kllint.report.paths import printable

        text.render(printable(diagnostics), Console(file=stdout, no_color=bool(os.environ.get("NO_COLOR")),
                                         highlight=False), sources=context.sources, unsafe=context.unsafe_fixes)
        if context.sites is not None:
            stdout.write(with_sites(fmt, "", diagnostics, context))
            stdout.flush()
        return
    stdout.write(render(fmt, diagnostics, context))
    stdout.flush()
