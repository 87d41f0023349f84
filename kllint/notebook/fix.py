"""`--fix`, `--diff` and `--add-noqa` on notebooks: the virtual source is fixed as a module (with the
same verification as a Python file, kllint.fix) and the changed cells are written back into the
notebook's JSON text; outputs, metadata, other cells and the file's layout are left byte for byte.
"""
from __future__ import annotations

import difflib

from kllint.config import Settings
from kllint.diagnostics import Diagnostic
from kllint.pipeline.discovery import Discovered
from kllint.fix import FixOutcome, fix_text
from kllint.notebook import Notebook, NotebookError


def _virtual(item: Discovered, notebook: Notebook) -> Discovered:
    return Discovered(item.path, item.display, content=notebook.text.encode("utf-8"))


def fix_notebook(raw: str, item: Discovered, settings: Settings, unsafe: bool = False) -> FixOutcome:
    """Fix the notebook whose JSON text is `raw`; the outcome's texts are JSON texts and its
    diagnostics are per cell (a notebook kllint does not check is returned unchanged).

    Raises:
        NotebookError: `raw` is not a notebook kllint can read.
    """
    notebook = Notebook.parse(raw)
    if notebook is None:
        return FixOutcome(original=raw, text=raw)
    outcome = fix_text(notebook.text, _virtual(item, notebook), settings, unsafe=unsafe)
    new_raw = notebook.with_text(outcome.text) if outcome.changed else raw
    after = Notebook.parse(new_raw) or notebook
    if after.text.count("\n") != outcome.text.count("\n"):  # cannot happen: the cells are as written
        raise NotebookError("the fixed cells could not be written back")
    display = item.display
    return FixOutcome(
        original=raw, text=new_raw,
        fixed=[notebook.map_diagnostic(d, display) for d in outcome.fixed],
        remaining=[after.map_diagnostic(d, display) for d in outcome.remaining],
        rejected=[notebook.map_diagnostic(d, display) for d in outcome.rejected],
    )


def notebook_diff(display: str, before: str, after: str) -> str:
    """A unified diff per changed code cell (`--- a/train.ipynb:cell 3`), as Ruff shows notebooks."""
    old, new = Notebook.parse(before), Notebook.parse(after)
    if old is None or new is None:
        return ""
    pieces = []
    for cell in old.cells:
        changed = new.cell(cell.number)
        if changed is None or changed.lines == cell.lines:
            continue
        a = "".join(cell.lines).splitlines(keepends=True)
        b = "".join(changed.lines).splitlines(keepends=True)
        for line in difflib.unified_diff(a, b, fromfile=f"a/{display}:cell {cell.number}",
                                         tofile=f"b/{display}:cell {cell.number}"):
            pieces.append(line if line.endswith(("\n", "\r")) else line + "\n")
    return "".join(pieces)


def add_noqa_notebook(raw: str, diagnostics: list[Diagnostic]) -> tuple[str, int]:
    """`--add-noqa` on a notebook: `# noqa: CODE` on the cell lines of `diagnostics` (per cell);
    returns the new JSON text and the number of lines changed.

    Raises:
        NotebookError: `raw` is not a notebook kllint can read.
    """
    from kllint.pipeline.suppressions import add_noqa

    notebook = Notebook.parse(raw)
    if notebook is None:
        return raw, 0
    text, count = add_noqa(notebook.text, [notebook.unmap_diagnostic(d) for d in diagnostics])
    return (notebook.with_text(text), count) if count else (raw, 0)
