"""Python source bytes to text, the way Python itself decodes a module (PEP 263)."""
from __future__ import annotations

import io
import tokenize


def decode_source(raw: bytes) -> str:
    """Source bytes to text with the encoding Python would use (PEP 263 cookie or BOM, else UTF-8).

    Raises:
        UnicodeDecodeError, LookupError, SyntaxError: undecodable bytes or a bad encoding cookie.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    return raw.decode(encoding)
