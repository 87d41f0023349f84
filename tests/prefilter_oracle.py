"""Which damaged files a run reads past the prefilter (the others are skipped unparsed, so their
syntax errors are never reported)."""
from __future__ import annotations

from kllint.pipeline.prefilter import might_matter
from kllint.pipeline.source import decode_source


def prefilter_admits(data: bytes) -> bool:
    """Whether a run reads the file past the prefilter: text that names a KL, or bytes that do not
    decode (reported whatever they hold)."""
    try:
        return might_matter(decode_source(data))
    except (UnicodeDecodeError, LookupError, SyntaxError, ValueError):
        return True
