"""Decide from the text alone whether a file can hold a finding, before any parsing.

Every finding needs a reference-side or KL-side name as one word of an identifier (the analysis
takes the reference role only from names: `ref_logp`, `base_model`, `teacher`,
`batch["ref_log_probs"]`; `kl_coef`, `per_token_kl`) or a KL API (`kl_div`, `KLDivLoss`,
`kl_divergence`). A helper in another module is checked where it is defined. Files with none of
these are only checked for syntax (`ast`, much cheaper than libcst).
"""
from __future__ import annotations

import ast
import re

from kllint.analysis.roles import REFERENCE_TOKENS

# words that name the reference or a KL on their own; `base`, `init`, `initial` and `prior` only
# next to a log-prob or model word (`base_logp`, `init_model`), since `__init__` is everywhere
_WEAK = ("base", "init", "initial", "prior")
_WORDS = sorted((REFERENCE_TOKENS - set(_WEAK)) | {"kl", "kld", "kls", "reference"}, key=len, reverse=True)
_START = r"(?:(?<![A-Za-z])|(?<=[a-z])(?=[A-Z]))"
# a word of an identifier: `_` and camelCase humps separate words, so `ref_logp`, `refLogp` and
# `KLDivLoss` match while `prefix` or `database` do not
CANDIDATE = re.compile(
    _START + r"(?i:" + "|".join(re.escape(w) for w in _WORDS) + r")(?![a-z])"
    + r"|" + _START + r"(?i:" + "|".join(_WEAK) + r")_?(?i:log|lp|model|policy|logit|actor)"
    + r"|(?i:log_?probs?|logps?|lps?|logits)_(?i:" + "|".join(_WEAK) + r")(?![a-z])"
)


def might_matter(text: str) -> bool:
    """True when the file mentions a KL or reference word (or a KL API)."""
    return bool(CANDIDATE.search(text))


def syntax_error(text: str) -> SyntaxError | None:
    """The syntax error of a file that is not analysed (None when it compiles)."""
    try:
        ast.parse(text[1:] if text.startswith("\ufeff") else text)  # a UTF-8 BOM is valid
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError) as exc:
        error = SyntaxError(str(exc))
        error.lineno, error.offset = 1, 1
        return error
    return None
