"""`kllint clean`: remove the result cache."""
from __future__ import annotations

from pathlib import Path

from kllint.session import UsageError


def run_clean(paths: tuple[str, ...] = (".",), cache_dir: str | None = None) -> list[str]:
    """`kllint clean`: remove the result cache of `paths` (or `cache_dir`); returns what to say.

    Raises:
        UsageError: the folder is not a kllint cache, or cannot be removed.
    """
    from kllint.pipeline.cache import clean, default_directory

    directory = Path(cache_dir) if cache_dir else default_directory(paths or (".",))
    try:
        return clean(directory).lines(directory)
    except OSError as exc:
        raise UsageError(f"cannot remove {directory}: {exc.strerror or exc}") from None
