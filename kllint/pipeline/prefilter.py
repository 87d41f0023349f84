"""Decide from the text alone whether a file can hold a finding, before any parsing.

Every finding needs a KL or the reference policy, and the analysis takes both only from names:
the reference role from an identifier `kllint.analysis.roles` reads as a reference log-prob or
reference model (`ref_logp`, `teacher_logits`, `ref_model`, `batch["ref_log_probs"]`, a bare
`ref`), a KL from a KL word (`kl`, `per_token_kl`, `kls`) or a KL API (`kl_div`, `KLDivLoss`,
`kl_divergence`). So a file (or a function: the entry points use the same test) that names
none of them cannot hold a finding; a helper in another module is checked where it is defined.
Files that cannot are only checked for syntax (`ast`, much cheaper than libcst).

A file whose text names one only in comments or docstrings has no entry point either: its code
is asked too (`code_might_matter`, from the `ast` tree the syntax check built), before the
analysis and its libcst are ever imported.
"""
from __future__ import annotations

import ast
import re
import unicodedata

from kllint.analysis import roles
from kllint.analysis.outline import entry_names, identifiers

# `base`, `init`, `initial` and `prior` read as reference words only next to a log-prob or
# model word (`base_logp`, `init_model`): `__init__`, `BaseModel` and `base` are everywhere
_WEAK = tuple(sorted(roles.WEAK_REFERENCE_TOKENS))
_STRONG = roles.REFERENCE_TOKENS - roles.WEAK_REFERENCE_TOKENS
_START = r"(?:(?<![A-Za-z])|(?<=[a-z])(?=[A-Z]))"
# a word of an identifier: `_` and camelCase humps separate words, so `per_token_kl`, `useKL`
# and `KLDivLoss` match while `skl` or `klass` do not
_KL_WORD = re.compile(_START + r"(?i:kls?|kld)(?![a-z])|(?i:kl_?div)")
_WEAK_NEXT_TO_MODEL = re.compile(_START + r"(?i:" + "|".join(_WEAK) + r")_?(?i:log|lp|model|policy|logit|actor)")


def names_kl_or_reference(identifier: str) -> bool:
    """Whether one identifier names a KL, a KL API, or (as the analysis reads names) the
    reference policy's log-probs or model."""
    if _KL_WORD.search(identifier):
        return True
    if roles.logprob_role(identifier) != "reference" and roles.model_role(identifier) != "reference":
        return False
    return (any(token in _STRONG for token in roles.tokens(identifier)) or roles.is_logprob_name(identifier)
            or _WEAK_NEXT_TO_MODEL.search(identifier) is not None)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPE = re.compile(r"\\(?:x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|N\{[^}\n]+\}|[0-7]{1,3})")
_VERDICTS: dict[str, bool] = {}


def _names_a_candidate(identifier: str) -> bool:
    verdict = _VERDICTS.get(identifier)
    if verdict is None:
        if len(_VERDICTS) > 200_000:
            _VERDICTS.clear()
        verdict = _VERDICTS[identifier] = names_kl_or_reference(identifier)
    return verdict


# A reference can also be decided by dataflow, whatever the names: a network other than the
# trained one, forwarded only with gradient tracking off, in code that forms log-probs by an API
# (`kllint.analysis.interpret.entry`, `references_by_dataflow`). A piece of code that switches
# gradient tracking off, in a module that forms log-probs, may therefore hold one.
GRAD_OFF_WORDS = frozenset({"no_grad", "inference_mode"})
LOGPROB_API_WORDS = frozenset({"log_softmax", "log_prob", "logsumexp", "cross_entropy", "nll_loss"})


def forwards_without_grad(identifiers: set[str] | frozenset[str], module_identifiers: set[str] | frozenset[str]) -> bool:
    """Whether a piece of code (`identifiers`) switches gradient tracking off and its module
    (`module_identifiers`) forms log-probs by an API: a reference by dataflow is possible there."""
    return not GRAD_OFF_WORDS.isdisjoint(identifiers) and not LOGPROB_API_WORDS.isdisjoint(module_identifiers)


def names_matter(identifiers: set[str], vocab: object | None = None) -> bool:
    """Whether one of `identifiers` names a KL or the reference policy (`names_kl_or_reference`)
    or is one of the configured reference names of `vocab` (`[tool.kllint.vocab] reference-names`).
    The one test of the prefilter and of the choice of entry points."""
    reference_names = getattr(vocab, "reference_names", ()) or ()
    return any(_names_a_candidate(name) or name in reference_names for name in identifiers)


def might_matter(text: str, vocab: object | None = None) -> bool:
    """`names_matter` (or `forwards_without_grad`) for every identifier of the text (in code,
    strings or comments), string escapes decoded (`"\\x72ef_logps"` is "ref_logps" to Python)."""
    found = set(_IDENTIFIER.findall(text))
    if names_matter(found, vocab) or forwards_without_grad(found, found):
        return True
    if "\\" in text and _ESCAPE.search(text):
        return names_matter(set(_IDENTIFIER.findall(_ESCAPE.sub(_unescape, text))), vocab)
    return False


def code_might_matter(outline: ast.Module, vocab: object | None = None) -> bool:
    """`names_matter` for the names of a piece of the module's code the analysis may run
    (`kllint.analysis.outline.entry_names`: a function, a method or a top-level statement, with
    the imports it uses and the module constants it reads; names, attributes, parameters,
    keywords and the words of string constants, not comments or docstrings).

    These are all the names the entry points of `kllint.analysis.interpret.entry` are chosen
    by and all the names of the module statements it runs, so a module none of whose pieces
    names a KL or the reference has neither: the analysis would run nothing and report nothing."""
    units = entry_names(outline)
    if any(names_matter(names, vocab) for names in units):
        return True
    module = identifiers(outline, import_parts=True)
    return any(forwards_without_grad(names, module) for names in units)


def _unescape(match: re.Match[str]) -> str:
    """The character a string escape stands for (the escape itself if it stands for none)."""
    escape = match.group(0)
    try:
        if escape[1] == "N":
            return unicodedata.lookup(escape[3:-1])
        if escape[1] in "xuU":
            return chr(int(escape[2:], 16))
        return chr(int(escape[1:], 8))
    except (KeyError, ValueError):
        return escape


def parse_or_error(text: str) -> tuple[ast.Module | None, SyntaxError | None]:
    """The `ast` tree of a file, or the syntax error Python reports for it.

    A file of a newer Python's grammar (PEP 695, PEP 701) gets an outline from `kllint.compat`
    instead, or a `kllint.compat.NewerSyntaxError` ("needs a newer Python to check").
    """
    body = text[1:] if text.startswith("\ufeff") else text  # a UTF-8 BOM is valid
    try:
        return ast.parse(body), None
    except SyntaxError as exc:
        from kllint.compat import newer_syntax_outline

        outline, error = newer_syntax_outline(body, exc)
        return (outline, None) if outline is not None else (None, error)
    except (ValueError, RecursionError, MemoryError) as exc:
        error = SyntaxError(str(exc))
        error.lineno, error.offset = 1, 1
        return None, error

