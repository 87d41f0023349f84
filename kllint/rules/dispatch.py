"""One file through the analysis: parse, interpret every entry point, hand the facts to the rules."""
from __future__ import annotations

import ast
from pathlib import Path

from kllint.analysis.facts import CallFact, ClampFact, LossFact, RewardFact
from kllint.analysis.index import ProjectIndex
from kllint.analysis.interpreter import Interpreter
from kllint.diagnostics import Diagnostic
from kllint.rules.api import check_call, check_clamp
from kllint.rules.base import RuleContext
from kllint.rules.loss import check_loss
from kllint.rules.flow import prepare
from kllint.rules.reward import check_reward


def check_source(text: str, display: str, path: Path, settings: object | None = None,
                 index: ProjectIndex | None = None, outline: ast.Module | None = None,
                 notes: list[str] | None = None) -> list[Diagnostic]:
    """All diagnostics of one module's source (unfiltered by selection and suppressions).

    `outline` is the module's `ast` tree when the caller parsed it already. When `notes` is a
    list, a line is appended to it for each function the analysis abandoned (step budget, depth
    limit on a path that carries log-probs or KL terms).

    Raises:
        SyntaxError: the source does not parse (reported as KL900 by `kllint.pipeline.file`).
    """
    index = index or ProjectIndex()
    entry = index.module_for_file(text, path, display, outline)
    interpreter = Interpreter(entry, index, getattr(settings, "vocab", None))
    interpreter.run()
    if notes is not None:
        notes.extend(record.describe() for record in interpreter.abandoned())
    modules = {entry.display: entry}
    for module in index.loaded():
        modules.setdefault(module.display, module)
    ctx = RuleContext(entry, interpreter.algebra, modules, interpreter.name_roles,
                      {fact.sink.function for fact in interpreter.facts if isinstance(fact, LossFact)},
                      carrying_calls=interpreter.carrying_calls,
                      line_length=getattr(settings, "line_length", None) or 88)
    prepare(ctx, interpreter.facts)
    for fact in interpreter.facts:
        if isinstance(fact, ClampFact):
            check_clamp(fact, ctx)
        elif isinstance(fact, LossFact):
            check_loss(fact, ctx)
        elif isinstance(fact, RewardFact):
            check_reward(fact, ctx)
        elif isinstance(fact, CallFact):
            check_call(fact, ctx)
    return ctx.diagnostics()
