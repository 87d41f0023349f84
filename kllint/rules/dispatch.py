"""One module through the analysis, then the rules: interpret every entry point, then hand each
observation (`kllint.analysis.facts`) to the rules that judge its kind, in the order the analysis
recorded them."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable

from kllint.analysis.facts import (
    ClampFact, ClassMeanOfKlDiv, KlDivCall, KlDivLossConstruction, LossFact, OptaxKlCall, ReferenceForward,
    RewardFact, SinkKind,
)
from kllint.analysis.index import ProjectIndex
from kllint.analysis.interpreter import Interpreter
from kllint.diagnostics import Diagnostic
from kllint.rules.api import CLAMP_AFTER_EXP, KL_DIV_MEAN, KL_DIV_SPACES, REFERENCE_FORWARD
from kllint.rules.base import RuleContext
from kllint.rules.flow import prepare
from kllint.rules.loss import check_loss
from kllint.rules.reward import check_reward

# the rules that judge each kind of observation, in the order they report
JUDGES: dict[type, tuple[Callable[[Any, RuleContext], None], ...]] = {
    ClampFact: (CLAMP_AFTER_EXP.check,),
    LossFact: (check_loss,),
    RewardFact: (check_reward,),
    KlDivCall: (KL_DIV_SPACES.check_kl_div, KL_DIV_MEAN.check_kl_div),
    KlDivLossConstruction: (KL_DIV_MEAN.check_construction,),
    ClassMeanOfKlDiv: (KL_DIV_MEAN.check_class_mean,),
    OptaxKlCall: (KL_DIV_SPACES.check_optax,),
    ReferenceForward: (REFERENCE_FORWARD.check,),
}


def check_source(text: str, display: str, path: Path, settings: object | None = None,
                 index: ProjectIndex | None = None, outline: ast.Module | None = None,
                 notes: list[str] | None = None, from_disk: bool = False,
                 sites: list | None = None) -> list[Diagnostic]:
    """All diagnostics of one module's analysis (unfiltered by selection and suppressions),
    wherever they are placed: mostly in the module itself, some in the modules its entry points
    call into (an estimate written in a helper module is reported there).

    `outline` is the module's `ast` tree when the caller parsed it already. When `notes` is a
    list, a line is appended to it for each function the analysis abandoned (step budget, depth
    limit on a path that carries log-probs or KL terms). `from_disk`: `text` is what `path` holds
    on disk (then the run's other files importing it share its parse, `ProjectIndex.module_for_file`).
    When `sites` is a list, the KL estimates the analysis saw are appended to it
    (`kllint.rules.sites`, for `kllint check --show-sites`).

    Raises:
        SyntaxError: the source does not parse (reported as KL900 by `kllint.pipeline.file`).
    """
    index = index or ProjectIndex()
    entry = index.module_for_file(text, path, display, outline, from_disk=from_disk)
    interpreter = Interpreter(entry, index, getattr(settings, "vocab", None))
    interpreter.run()
    if notes is not None:
        notes.extend(record.describe() for record in interpreter.abandoned())
    modules = {entry.display: entry}
    for module in index.loaded():
        modules.setdefault(module.display, module)
    ctx = RuleContext(entry, interpreter.algebra, modules, interpreter.name_roles,
                      {fact.sink.function for fact in interpreter.facts if isinstance(fact, LossFact)},
                      carrying_calls=interpreter.carrying_calls, pairing_calls=interpreter.pairing_calls,
                      choosing_calls=interpreter.choosing_calls, passes_choice=interpreter.passes_choice,
                      line_length=getattr(settings, "line_length", None) or 88)
    prepare(ctx, interpreter.facts)
    # a term that reaches a backward pass or a returned loss is traced there, not to an entry of
    # an output record that also holds it (`LossMetrics(loss=loss)` beside `return loss`)
    for fact in sorted(interpreter.facts, key=_traced_last):
        for judge in JUDGES.get(type(fact), ()):
            judge(fact, ctx)
    diagnostics = ctx.diagnostics()
    if sites is not None:
        from kllint.rules.sites import observe_sites

        sites.extend(observe_sites(ctx, interpreter.facts, diagnostics))
    return diagnostics


def _traced_last(fact: object) -> bool:
    return isinstance(fact, LossFact) and fact.kind is SinkKind.LOSS_ENTRY
