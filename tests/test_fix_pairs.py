"""Fix pairs: `fixtures/fixes/<case>.py` -> `<case>.unsafe.fixed.py` with `kllint check --fix --unsafe-fixes`,
or -> `<case>.safe.fixed.py` with `kllint check --fix` (the safe fixes: KL503, KL601).

Both files of a pair are also exhaustive fixtures (tests/test_fixtures.py): each carries the
`# expect:` / `# ok` annotations of what kllint reports on it. Since a fix keeps comments, the
output of the fix still carries the input's annotations; the comparison is therefore byte for
byte after removing the trailing annotation comments (`# expect: ...`, `# ok ...`) of both
sides, and everything else (code, other comments, line endings) must be identical.

For every applied unsafe fix, the rewritten KL term (the fix's replacement, with the finding's
operand roles and setup, and the names the fix binds before it) is run through the runtime
gradient checker on the bandit (horizon 1) and must get the `correct` verdict. Safe fixes keep
the value and the gradient; their pairs show what they write.
"""
from __future__ import annotations

import ast
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from extra_cases import SKIP_REASON, extra_cases_dir

from test_cli_support import run_cli

from kllint.api import check_paths
from kllint.fix import is_applicable

ROOT = Path(__file__).resolve().parents[1]
PAIRS_DIR = ROOT / "fixtures" / "fixes"
EXTRA_CASES = extra_cases_dir()
FIXED_SUFFIX = ".unsafe.fixed.py"
SAFE_SUFFIX = ".safe.fixed.py"

ANNOTATION_RE = re.compile(r"[ \t]*#\s*(?:expect:|ok\b)[^\r\n]*(?=\r\n|\r|\n|\Z)")

# case -> (codes the fix removes, codes expected to remain, usage, reward_to_go)
CASES = {
    "kl102_grpo_token_k3": ({"KL102"}, {"KL201"}, "loss", False),
    "jax_kl102_grpo_token_k3": ({"KL102"}, {"KL201"}, "loss", False),
    "kl101_token_k1_loss": ({"KL101"}, {"KL201"}, "loss", False),
    "kl101_reference_minus_policy": ({"KL101"}, {"KL201"}, "loss", False),
    "kl103_sequence_abs": ({"KL103"}, set(), "loss", False),
    "kl302_k3_token_reward": ({"KL302"}, set(), "reward", True),
    "kl201_display_only": (set(), {"KL201"}, "loss", False),
    "kl102_long_line_wrapped": ({"KL102"}, {"KL201"}, "loss", False),
    "kl102_stale_comments": ({"KL102"}, {"KL201"}, "loss", False),
    "kl102_value_wrapped_in_parentheses": ({"KL102"}, {"KL201"}, "loss", False),
    "kl102_conditional_withheld": (set(), {"KL102", "KL201"}, "loss", False),
    "kl102_reassigned_after_a_branch_withheld": (set(), {"KL102", "KL201", "KL601"}, "loss", False),
    "kl302_stale_comment": ({"KL302"}, set(), "reward", True),
    "kl503_reference_forward_no_grad": ({"KL503"}, set(), "", False),
    "kl601_exp_then_clamp": ({"KL601"}, {"KL102", "KL201"}, "", False),
}
# cases whose loss subtracts the flagged term (`loss = pg - beta * value`): the rewrite is judged
# as the loss sees it, negated
SUBTRACTED = {"kl101_reference_minus_policy"}
SAFE = {case for case in CASES if (PAIRS_DIR / f"{case}{SAFE_SUFFIX}").is_file()}


def _pairs() -> list[str]:
    return sorted(p.name[:-3] for p in PAIRS_DIR.glob("*.py") if not p.name.endswith((FIXED_SUFFIX, SAFE_SUFFIX)))


def _expected(case: str) -> Path:
    return PAIRS_DIR / f"{case}{SAFE_SUFFIX if case in SAFE else FIXED_SUFFIX}"


def _strip_annotations(text: str) -> str:
    return ANNOTATION_RE.sub("", text)


def _findings(path: Path) -> list:
    return list(check_paths([str(path)]).diagnostics)


def _copy(case: str, tmp_path: Path) -> Path:
    target = tmp_path / f"{case}.py"
    shutil.copyfile(PAIRS_DIR / f"{case}.py", target)
    return target


def test_every_pair_is_complete_and_listed():
    cases = _pairs()
    assert cases, f"no fix pairs in {PAIRS_DIR}"
    for case in cases:
        assert _expected(case).is_file(), f"{case}: missing {case}{FIXED_SUFFIX} or {case}{SAFE_SUFFIX}"
        assert not ((PAIRS_DIR / f"{case}{FIXED_SUFFIX}").is_file() and case in SAFE), f"{case}: two fixed files"
    assert set(cases) == set(CASES), "every pair needs an entry in CASES (and vice versa)"


def _gradcheck_fixed_term(diagnostic, usage: str, reward_to_go: bool, subtracted: bool = False):
    """The verdict of the fix's replacement, evaluated with the finding's roles and setup
    (negated when the loss subtracts it)."""
    from kllint.gradcheck import check_expression
    from kllint.gradcheck.confirm import _modules
    from kllint.gradcheck.exact import ROLES

    estimate = diagnostic.estimate
    assert estimate is not None, f"{diagnostic.code}: no estimate to check"
    pytest.importorskip("jax" if estimate.framework == "jax" else "torch")
    options = dict(names={name: (role if role in ROLES else "ones") for name, role in estimate.roles},
                   setup=tuple(estimate.setup) + _bindings(diagnostic.fix), modules=_modules(tuple(estimate.aliases)),
                   usage=usage, reward_to_go=reward_to_go, horizon=1,
                   framework=estimate.framework)
    expression = f"-({diagnostic.fix.replacement})" if subtracted else diagnostic.fix.replacement
    granularity = estimate.granularity if estimate.granularity in ("per-token", "sequence") else "per-token"
    try:
        return check_expression(expression, granularity=granularity, **options)
    except Exception:
        if granularity != "sequence":
            raise
        # the expression reduces the token axis itself: bind [batch, tokens] tensors
        return check_expression(expression, granularity="per-token", **options)


def _bindings(fix) -> tuple[str, ...]:
    """The names a fix binds before the rewritten statement (`k2 = 0.5 * log_ratio ** 2`): the
    statements of its region but the last, which holds the replacement."""
    if fix.span is None:
        return ()
    statements = ast.parse(textwrap.dedent(fix.content)).body
    return tuple(ast.unparse(statement) for statement in statements[:-1])


@pytest.mark.parametrize("case", _pairs())
def test_fix_pair(case, tmp_path, monkeypatch):
    fixed_codes, remaining_codes, usage, reward_to_go = CASES[case]
    monkeypatch.chdir(tmp_path)
    target = _copy(case, tmp_path)
    original = target.read_bytes()
    before = _findings(target)
    safe = case in SAFE
    applicable = [d for d in before if is_applicable(d, unsafe=not safe)]
    assert {d.code for d in applicable} == fixed_codes
    if safe:
        assert all(d.fix.applicability == "safe" for d in applicable)

    result = run_cli(["check", "--fix", "--no-cache", target.name] + ([] if safe else ["--unsafe-fixes"]))
    assert result.exit_code == (1 if remaining_codes else 0), result.stderr
    out = target.read_bytes()
    expected = _expected(case).read_bytes()
    assert _strip_annotations(out.decode("utf-8")) == _strip_annotations(expected.decode("utf-8"))
    if not fixed_codes:
        assert out == original  # display-only: the file is not touched
    ast.parse(out.decode("utf-8"))

    after = _findings(target)
    assert {d.code for d in after} == remaining_codes
    for diagnostic in applicable:
        assert not any(d.code == diagnostic.code and d.span.line == diagnostic.span.line for d in after)
        if safe:
            continue
        verdict = _gradcheck_fixed_term(diagnostic, usage, reward_to_go, subtracted=case in SUBTRACTED)
        assert verdict.verdict == "correct", f"{case}: {diagnostic.fix.replacement}: {verdict.summary}"


@pytest.mark.parametrize("case", [c for c, spec in CASES.items() if spec[0] and c not in SAFE])
def test_diff_prints_and_leaves_the_file(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = _copy(case, tmp_path)
    original = target.read_bytes()
    result = run_cli(["check", "--diff", "--unsafe-fixes", "--no-cache", target.name])
    assert target.read_bytes() == original
    assert result.stdout.startswith(f"--- a/{target.name}\n+++ b/{target.name}\n")
    assert "\n@@ " in result.stdout
    fixed_lines = [line for line in result.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert fixed_lines and any("detach" in line or "stop_gradient" in line or " - ref" in line for line in fixed_lines)
    assert not any("kl = (0.5" in line for line in fixed_lines)  # the surrogate is bound to a name, not repeated


@pytest.mark.parametrize("case", sorted(SAFE))
def test_safe_fixes_need_no_flag_and_diff_shows_them(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = _copy(case, tmp_path)
    original = target.read_bytes()
    result = run_cli(["check", "--diff", "--no-cache", target.name])
    assert target.read_bytes() == original and result.exit_code == 1
    added = [line for line in result.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any("no_grad()" in line or "math.log(" in line for line in added), result.stdout


@pytest.mark.parametrize("case", [c for c, spec in CASES.items() if spec[0] and c not in SAFE])
def test_unsafe_fixes_need_the_flag(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = _copy(case, tmp_path)
    original = target.read_bytes()
    result = run_cli(["check", "--fix", "--no-cache", target.name])
    assert result.exit_code == 1
    assert target.read_bytes() == original
    fixed_codes = CASES[case][0]
    assert all(code in result.stdout for code in fixed_codes)  # still reported, not fixed
    assert "Fixed" not in result.stderr


# --- the extra cases (KLLINT_EXTRA_CASES) ---------------------------------------------------------------------------------


@pytest.mark.skipif(EXTRA_CASES is None, reason=SKIP_REASON)
def test_fix_extra_cases(tmp_path, monkeypatch, capsys):
    sources = sorted(EXTRA_CASES.glob("*.py"))
    assert sources
    work = tmp_path / "cases"
    work.mkdir()
    for source in sources:
        shutil.copyfile(source, work / source.name)
    monkeypatch.chdir(tmp_path)
    before = {path.name: _findings(path) for path in sorted(work.glob("*.py"))}
    fixable = {(name, d.code, d.span.line) for name, found in before.items() for d in found
               if is_applicable(d, unsafe=True)}

    run_cli(["check", "--fix", "--unsafe-fixes", "--no-cache", "cases"])

    fixed = set()
    for path in sorted(work.glob("*.py")):
        ast.parse(path.read_text(encoding="utf-8"))
        after = {(path.name, d.code, d.span.line) for d in _findings(path)}
        fixed |= {key for key in fixable if key[0] == path.name and key not in after}
    with capsys.disabled():
        print(f"\nextra cases: {len(fixed)} of {len(fixable)} fixable findings fixed "
              f"({sum(len(f) for f in before.values())} findings in {len(before)} files)")
    assert fixed == fixable, f"fixable findings still reported after --fix: {sorted(fixable - fixed)}"
    # and every rewritten KL term has the right gradient (exact, on the bandit); the safe fixes
    # (KL503's no_grad, KL601's clamp before exp) change no estimator and have none to check
    for name, found in before.items():
        for diagnostic in found:
            if is_applicable(diagnostic, unsafe=True) and diagnostic.fix.replacement \
                    and diagnostic.fix.applicability == "unsafe":
                reward = diagnostic.code.startswith("KL3")
                verdict = _gradcheck_fixed_term(diagnostic, "reward" if reward else "loss", reward)
                assert verdict.verdict == "correct", f"{name}:{diagnostic.span.line} {diagnostic.fix.replacement}: {verdict.summary}"
