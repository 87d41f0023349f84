"""The documentation travels with the repository: every markdown link and anchor in the README,
docs/ and rules/ resolves inside it, nothing refers to files outside the repository, and the
numbers of docs/theory.md are the ones the gradient checker computes."""
from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "rules").glob("*.md")])
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = "".join(ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.MULTILINE):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    return [m.group("target") for m in LINK.finditer(FENCE.sub("", path.read_text(encoding="utf-8")))]


def test_slug_follows_github():
    assert slug("Adopting kllint in an existing code base") == "adopting-kllint-in-an-existing-code-base"
    assert slug("`kllint gradcheck`: exact runtime gradient checks") == "kllint-gradcheck-exact-runtime-gradient-checks"
    assert slug("GitHub Actions and pre-commit") == "github-actions-and-pre-commit"


@pytest.mark.parametrize("path", MARKDOWN, ids=[p.relative_to(ROOT).as_posix() for p in MARKDOWN])
def test_links_and_anchors_resolve(path: Path):
    broken = []
    for target in links(path):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists() or ROOT not in (linked, *linked.parents):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, broken


def _tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed if name and name.endswith((".py", ".md", ".toml", ".yaml", ".yml", ".txt"))
            or name == ".ci/run"]


def test_nothing_refers_to_files_outside_the_repository():
    # the patterns are assembled so that this file does not match itself
    patterns = ["../" + "shared", "kl-gradient-" + "theory.md", "shared" + "/"]
    offenders = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{path.relative_to(ROOT)}: {p}" for p in patterns if p in text]
    assert not offenders, offenders


# -- docs/theory.md: the numbers are the checker's -----------------------------------------------

K3 = "(torch.exp(ref - logp) - (ref - logp) - 1)"
LIVE, DETACHED = "torch.exp(logp - old)", "torch.exp(logp - old).detach()"
RTG = "torch.flip(torch.cumsum(torch.flip((logp - ref).detach(), [-1]), -1), [-1])"
BANDIT, SEQUENCE = dict(horizon=1), dict(vocab=3, horizon=3)
ROWS = {
    # table row label: (expression, options)
    "k1": ("logp - ref", BANDIT),
    "k2": ("0.5 * (logp - ref) ** 2", BANDIT),
    "k3": (K3, BANDIT),
    "abs": ("torch.abs(logp - ref)", BANDIT),
    "k3 x live ratio, off-policy": (f"{K3} * {LIVE}", dict(BANDIT, sampling="off-policy")),
    "k3 x detached ratio, off-policy": (f"{K3} * {DETACHED}", dict(BANDIT, sampling="off-policy")),
    "k2, off-policy": ("0.5 * (logp - ref) ** 2", dict(BANDIT, sampling="off-policy")),
    "detached ratio x k2, off-policy": (f"{DETACHED} * 0.5 * (logp - ref) ** 2", dict(BANDIT, sampling="off-policy")),
    "reward:k1": ("logp - ref", dict(BANDIT, usage="reward")),
    "reward:k2": ("0.5 * (logp - ref) ** 2", dict(BANDIT, usage="reward")),
    "reward:k3": (K3, dict(BANDIT, usage="reward")),
    "per-token k2 loss, reduced over tokens": ("0.5 * (logp - ref) ** 2", SEQUENCE),
    "per-token analytic KL loss, reduced over tokens": ("(logp_all.exp() * (logp_all - ref_all)).sum(-1)", SEQUENCE),
    "per-token k3 loss, reduced over tokens": (K3, SEQUENCE),
    "per-token k1 reward without reward-to-go": ("logp - ref", dict(SEQUENCE, usage="reward")),
    "per-token k1 reward with reward-to-go": ("logp - ref", dict(SEQUENCE, usage="reward", reward_to_go=True)),
    "sequence-level k2, `0.5 * (sum_t d_t) ** 2`": ("0.5 * (logp - ref) ** 2", dict(SEQUENCE, granularity="sequence")),
    "`logp_t * detach(sum_{s >= t} d_s)` (reward-to-go surrogate)": (f"logp * {RTG}", SEQUENCE),
    "`logp_t * detach(sum_s d_s)` (whole-response return)": ("logp * (logp - ref).detach().sum(-1, keepdim=True)",
                                                             SEQUENCE),
}


def _theory_rows() -> dict[str, list[str]]:
    """Rows of the numeric tables of docs/theory.md: label -> cells (reward rows prefixed)."""
    text = (ROOT / "docs" / "theory.md").read_text(encoding="utf-8")
    rows: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:]
        if not line.startswith("| ") or "---" in line:
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) < 4 or cells[1] in ("verdict", "coefficient `c`", "per-sample value"):
            continue
        label = f"reward:{cells[0]}" if section.startswith("Estimates used as rewards") else cells[0]
        if label in ROWS:
            rows[label] = cells
    return rows


def test_every_numeric_row_of_the_theory_page_is_checked():
    assert set(_theory_rows()) == set(ROWS)


@pytest.mark.parametrize("label", sorted(ROWS))
def test_theory_numbers_are_reproduced(label):
    pytest.importorskip("torch")
    from kllint.gradcheck.check import check_expression

    expression, options = ROWS[label]
    result = check_expression(expression, extreme=False, **options)
    cells = _theory_rows()[label]
    assert cells[1].split(" (")[0] == result.verdict.split(" (")[0], (label, result.verdict)
    numbers = [float(cell) for cell in cells[2:] if re.fullmatch(r"-?\d+\.\d{3}", cell)]
    computed = ([result.cos_reverse, result.rel_err_reverse] + ([result.cos_forward] if len(numbers) > 2 else [])
                if result.grad_norm > 0 else [result.rel_err_reverse])
    assert numbers, label
    assert numbers == pytest.approx(computed[:len(numbers)] if result.grad_norm > 0 else computed, abs=6e-4), label
