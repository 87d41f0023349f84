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


def _vocab_pattern(reference_names: tuple[str, ...]) -> re.Pattern[str] | None:
    if not reference_names:
        return None
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(re.escape(n) for n in reference_names) + r")(?![A-Za-z0-9_])")


_VOCAB_PATTERNS: dict[tuple[str, ...], re.Pattern[str] | None] = {}


def might_matter(text: str, vocab: object | None = None) -> bool:
    """True when the text mentions a KL or reference word (or a KL API), or one of the
    configured reference names of `vocab` (`[tool.kllint.vocab] reference-names`)."""
    if CANDIDATE.search(text):
        return True
    names = tuple(getattr(vocab, "reference_names", ()) or ())
    if not names:
        return False
    if names not in _VOCAB_PATTERNS:
        _VOCAB_PATTERNS[names] = _vocab_pattern(names)
    pattern = _VOCAB_PATTERNS[names]
    return bool(pattern is not None and pattern.search(text))


def parse_or_error(text: str) -> tuple[ast.Module | None, SyntaxError | None]:
    """The `ast` tree of a file, or the syntax error Python reports for it."""
    try:
        return ast.parse(text[1:] if text.startswith("\ufeff") else text), None  # a UTF-8 BOM is valid
    except SyntaxError as exc:
        return None, exc
    except (ValueError, RecursionError, MemoryError) as exc:
        error = SyntaxError(str(exc))
        error.lineno, error.offset = 1, 1
        return None, error

