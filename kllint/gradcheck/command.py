"""The `kllint gradcheck` click command (registered by `kllint/cli.py`)."""
from __future__ import annotations

import ast
import os
import sys
from typing import Any, Sequence

import click

EXIT_CORRECT, EXIT_WRONG, EXIT_ERROR = 0, 1, 2
EXPR_SECONDS = 60.0  # CPU seconds the check of an --expr on one problem may take (a normal one: well under 1 s)

HELP = """Check a KL term's expected gradient exactly, on enumerable tabular softmax policies.

\b
Two ways to name the term:
  kllint gradcheck --expr "torch.exp(ref - logp) - (ref - logp) - 1"
  kllint gradcheck verl.trainer.ppo.core_algos:kl_penalty --path SRC --kwargs kl_penalty=low_var_kl

Expressions see `logp` (live policy log-probs), `ref`, `old` (rollout policy), `mask`, and
`logp_all` / `ref_all` (full-vocabulary log-probs [batch, tokens, vocab]); rename them with
--policy, --ref, --old, --mask, --policy-dist, --ref-dist. Other free names are bound to
ones (a note on stderr lists them). An expression (and --setup) is arithmetic only:
names, numbers, operators, the math functions of torch / jax (`torch.exp`, `F.kl_div`,
`jnp.exp`, `jax.lax.stop_gradient`), tensor methods such as `.exp()`, `.detach()`,
`.sum(-1)`, `.clamp(...)`, and `abs` / `min` / `max`; anything else is refused. Per token (default) the names are [batch, tokens] tensors whose rows are every
possible response, and the value is summed over tokens; with --sequence they are the
per-response sums [batch]. The expected gradient is compared with the true gradients of
KL(pi||ref) (reverse) and KL(ref||pi) (forward); see Tang & Munos 2025, arXiv:2506.09477.

By default the term is checked on the 4-action bandit and on the vocabulary-3,
horizon-3 sequence problem; --vocab / --horizon pick one problem (--horizon 1: bandit).

WARNING: MODULE:FUNCTION imports and runs that module's code (and the function) in this
process: only check code you trust. The module's parent packages are not initialised and
missing third-party packages are replaced by stubs (--no-stub-missing to disable).

Exit codes: 0 every verdict is `correct`, 1 otherwise, 2 usage error or the term failed.
"""


def _fail(message: str) -> "None":
    click.echo(f"kllint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _pairs(values: Sequence[str], option: str) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise click.UsageError(f"{option} expects NAME=VALUE, got {value!r}")
        out[name.strip()] = rest.strip()
    return out


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


@click.command(name="gradcheck", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("target", required=False, metavar="[MODULE:FUNCTION]")
@click.option("--expr", "expression",
              help="The KL term: arithmetic over the log-prob names with torch / jax math functions.")
@click.option("--setup", multiple=True, help="Statement run before the expression (repeatable), e.g. 'd = logp - ref'.")
@click.option("--policy", "policy_name", default="logp", show_default=True, help="Name of the live policy log-probs.")
@click.option("--ref", "ref_name", default="ref", show_default=True, help="Name of the reference log-probs.")
@click.option("--old", "old_name", default="old", show_default=True, help="Name of the rollout (old) policy log-probs.")
@click.option("--mask", "mask_name", default="mask", show_default=True, help="Name of the response mask (ones).")
@click.option("--policy-dist", "policy_dist_name", default="logp_all", show_default=True,
              help="Name of the policy's full-vocabulary log-probs [batch, tokens, vocab].")
@click.option("--ref-dist", "ref_dist_name", default="ref_all", show_default=True,
              help="Name of the reference's full-vocabulary log-probs.")
@click.option("--as", "usage", type=click.Choice(["loss", "reward"]), default="loss", show_default=True,
              help="loss: differentiated; reward: detached score-function coefficient.")
@click.option("--per-token/--sequence", "per_token", default=True,
              help="Names are [batch, tokens] (summed over tokens) or per-response sums [batch].")
@click.option("--reward-to-go", is_flag=True, help="Per-token rewards are credited with their returns (gamma = 1).")
@click.option("--off-policy/--on-policy", "off_policy", default=None,
              help="Samples come from pi_old != pi (default: off-policy iff the term uses the old log-probs).")
@click.option("--vocab", type=click.IntRange(min=2), default=None, help="Vocabulary size of a single problem.")
@click.option("--horizon", type=click.IntRange(min=1), default=None, help="Response length of a single problem (1: bandit).")
@click.option("--seed", type=int, default=None, help="numpy seed of the random logits (default: the documented presets).")
@click.option("--framework", type=click.Choice(["auto", "torch", "jax"]), default="auto", show_default=True,
              help="auto: jax if the code uses jnp./jax., else torch.")
@click.option("--path", "paths", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Folder added to sys.path to import MODULE (repeatable).")
@click.option("--arg", "arguments", multiple=True, metavar="NAME=ROLE",
              help="Bind a function parameter to a role: policy, policy_detached, reference, old, mask, ones, "
                   "policy_dist, reference_dist (default: inferred from parameter names).")
@click.option("--kwargs", "kwargs", multiple=True, metavar="NAME=VALUE",
              help="Extra keyword argument for the function (Python literal, else a string; repeatable).")
@click.option("--stub-missing/--no-stub-missing", default=True, show_default=True,
              help="Replace missing third-party packages imported by MODULE by stubs.")
@click.option("--output-format", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table for people, json for machines (stdout carries only this).")
def gradcheck(target: str | None, expression: str | None, setup: tuple[str, ...], policy_name: str, ref_name: str,
              old_name: str, mask_name: str, policy_dist_name: str, ref_dist_name: str, usage: str, per_token: bool,
              reward_to_go: bool, off_policy: bool | None, vocab: int | None, horizon: int | None, seed: int | None,
              framework: str, paths: tuple[str, ...], arguments: tuple[str, ...], kwargs: tuple[str, ...],
              stub_missing: bool, output_format: str) -> None:
    from kllint.gradcheck.errors import GradcheckError

    if (target is None) == (expression is None):
        raise click.UsageError("give either --expr EXPRESSION or MODULE:FUNCTION (exactly one)")
    if expression is not None and (arguments or kwargs or paths):
        raise click.UsageError("--arg, --kwargs and --path apply to MODULE:FUNCTION, not to --expr")
    if target is not None and setup:
        raise click.UsageError("--setup applies to --expr only")
    options = dict(usage=usage, granularity="per-token" if per_token else "sequence",
                   sampling=None if off_policy is None else ("off-policy" if off_policy else "on-policy"),
                   reward_to_go=reward_to_go, framework=framework)
    stubbed: tuple[str, ...] = ()
    try:
        try:
            from kllint.gradcheck.check import check_expression, check_function, default_problems
        except ModuleNotFoundError as exc:
            if exc.name != "numpy":
                raise
            from kllint.gradcheck.errors import MissingFrameworkError

            raise MissingFrameworkError("torch", package="numpy") from exc
        try:
            problems = default_problems(vocab, horizon, seed)
        except ValueError as exc:
            raise GradcheckError(str(exc)) from exc
        results = []
        if expression is not None:
            from kllint.gradcheck.allowed import check_allowed, restricted_builtins

            check_allowed(expression, setup)  # arithmetic only: nothing else is ever evaluated
            options["modules"] = restricted_builtins()
            names = {policy_name: "policy", ref_name: "reference", old_name: "old", mask_name: "mask",
                     policy_dist_name: "policy_dist", ref_dist_name: "reference_dist"}
            for problem in problems:
                results.append(_run(lambda p=problem: _limited(lambda: check_expression(
                    expression, names=names, setup=setup, problem=p, **options))))
        else:
            from kllint.gradcheck.loader import load_function

            bound = _pairs(arguments, "--arg")
            extra = {k: _literal(v) for k, v in _pairs(kwargs, "--kwargs").items()}
            with load_function(target, paths, stub_missing=stub_missing) as loaded:
                stubbed = loaded.stubbed
                if stubbed:
                    click.echo(f"kllint: note: stubbed missing packages imported by {loaded.module}: "
                               f"{', '.join(stubbed)}", err=True)
                for problem in problems:
                    results.append(_run(lambda p=problem: check_function(
                        loaded.function, arguments=bound, kwargs=extra, problem=p, **options)))
    except GradcheckError as exc:  # includes MissingFrameworkError
        _fail(str(exc))
        return
    for note in sorted({n for r in results for n in r.notes}):
        click.echo(f"kllint: note: {note}", err=True)
    if output_format == "json":
        from kllint.gradcheck.report import render_json

        sys.stdout.write(render_json(results, stubbed))
    else:
        from rich.console import Console

        from kllint.gradcheck.report import render_table

        tty = sys.stdout.isatty()
        console = Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False,
                          width=None if tty else 200, soft_wrap=not tty)
        render_table(results, console)
    sys.exit(EXIT_CORRECT if all(r.correct for r in results) else EXIT_WRONG)


def _limited(thunk: Any) -> Any:
    """`thunk()` on a thread within `EXPR_SECONDS` of CPU time (Ctrl+C stops it too).

    Raises:
        GradcheckError: the time ran out.
    """
    from kllint.gradcheck.errors import GradcheckError
    from kllint.guard import AnalysisStopped, call_with_limits

    try:
        return call_with_limits(thunk, budget=EXPR_SECONDS)
    except AnalysisStopped:
        raise GradcheckError(f"evaluating the expression took more than {EXPR_SECONDS:g} s of CPU time; "
                             "stopped") from None


def _run(thunk: Any) -> Any:
    """Run one check; errors raised by the user's code become a `GradcheckError`."""
    from kllint.gradcheck.errors import GradcheckError

    try:
        return thunk()
    except GradcheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - the term itself failed
        raise GradcheckError(f"evaluating the term failed: {type(exc).__name__}: {exc}") from exc
