"""The rich console on stderr for summaries, notes and progress, made when first used: importing
rich takes about 20 ms, and a run with nothing to say on stderr (a machine-readable format, a
warm cache) never needs it."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def stderr_console() -> Console:
    """The console for summaries and progress (stderr; no colour with NO_COLOR)."""
    from rich.console import Console

    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)


class LazyStderr:
    """Stands for `stderr_console()`, which it makes on the first use of any attribute."""

    _console: Console | None = None

    def get(self) -> Console:
        """The console itself (for rich's own classes, such as a progress bar)."""
        if self._console is None:
            self._console = stderr_console()
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)
