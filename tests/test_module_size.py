"""No module of the `kllint` package is over about 400 lines (design.md, "Architecture"): a module
that grows past the limit is split by concern, as the interpreter, the module index and the
symbolic algebra were."""
from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "kllint"
MAX_LINES = 420


def line_counts(root: Path = PACKAGE_ROOT) -> dict[str, int]:
    """Every module under `root` (its path relative to the package's parent) -> its number of lines."""
    return {path.relative_to(root.parent).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
            for path in sorted(root.rglob("*.py"))}


def test_the_count_is_the_number_of_lines(tmp_path: Path) -> None:
    package = tmp_path / "kllint"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "long.py").write_text("x = 1\n" * 3 + "y = 2")
    assert line_counts(package) == {"kllint/__init__.py": 0, "kllint/sub/long.py": 4}


def test_no_module_is_over_the_limit() -> None:
    counts = line_counts()
    assert "kllint/analysis/interpreter.py" in counts
    offenders = {path: count for path, count in counts.items() if count > MAX_LINES}
    assert not offenders, f"modules over {MAX_LINES} lines (split them by concern):\n" + "\n".join(
        f"  {path}: {count}" for path, count in sorted(offenders.items(), key=lambda item: -item[1]))
