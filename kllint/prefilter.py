"""Decide from the text alone whether a file can hold a finding, before any parsing.

Every KL finding needs a reference-side or KL-side name (the analysis takes the reference role
only from names: `ref_logp`, `base_model`, `teacher`, `batch["ref_log_probs"]`), a KL API
(`kl_div`, `KLDivLoss`, `kl_divergence`), or a helper imported from the project that may compute
one. Files with none of these are only checked for syntax (`ast`, much cheaper than libcst).
"""
from __future__ import annotations

import ast
import re

from kllint.analysis.roles import REFERENCE_TOKENS

_WORDS = sorted(REFERENCE_TOKENS | {"kl", "kld", "kl_div", "kldivloss", "kl_divergence", "reference"})
CANDIDATE = re.compile(
    r"(?i)(?:kl|" + "|".join(re.escape(w) for w in _WORDS) + r")"
)
PROJECT_IMPORT = re.compile(r"^\s*from\s+\.", re.MULTILINE)


def might_matter(text: str) -> bool:
    """True when the file mentions a KL or reference token, or imports from its own package."""
    return bool(CANDIDATE.search(text)) or bool(PROJECT_IMPORT.search(text))


def syntax_error(text: str) -> SyntaxError | None:
    """The syntax error of a file that is not analysed (None when it compiles)."""
    try:
        ast.parse(text)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError) as exc:
        error = SyntaxError(str(exc))
        error.lineno, error.offset = 1, 1
        return error
    return None
