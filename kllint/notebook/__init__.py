"""Jupyter notebooks (`.ipynb`): the code cells as one Python module, and positions per cell.

The code cells are joined in order into one module (the *virtual source*), each preceded by a
marker comment line, so that names defined in one cell are known in the next, as when the
notebook runs top to bottom. IPython syntax that is not Python is masked line by line with a
`pass` at the same indentation (so that blocks stay blocks): line magics (`%pip install`,
`%matplotlib inline`), shell escapes (`!ls`), assignments from them (`files = !ls`), help
(`obj?`), and the first line of a cell magic whose body is Python (`%%time`, `%%timeit`,
`%%capture`, ...); the other cell magics (`%%bash`, `%%writefile`, ...) mask the whole cell.

Findings are reported per cell, as Ruff does: `cell` is the cell's 1-based position among all
the notebook's cells (Markdown cells count, as Jupyter shows them) and `line` the line within
the cell. Notebooks whose kernel language is not Python are skipped.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from kllint.diagnostics import Diagnostic, Span

NOTEBOOK_SUFFIX = ".ipynb"
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3"})
_LINE_MAGIC = re.compile(r"^(?P<indent>[ \t]*)(?:[%!]|\?\??[A-Za-z_]"
                         r"|[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[%!])")
_HELP = re.compile(r"^(?P<indent>[ \t]*)[A-Za-z_][\w.]*\?\??\s*$")


MAX_JSON_NESTING = 100  # nbformat's own layout nests about 6 levels; widget state a few more
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


class NotebookError(Exception):
    """The file is not a notebook kllint can read (not JSON, not nbformat 4)."""


def json_depth(raw: str, limit: int) -> int:
    """How deeply the arrays and objects of the JSON text `raw` nest, counted without recursion
    up to the first level past `limit` (brackets inside strings do not count)."""
    depth = deepest = 0
    if "[" not in raw and "{" not in raw:
        return 0
    for match in _JSON_TOKEN.finditer(raw):
        char = match.group()[0]
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in "]}":
            depth -= 1
    return deepest


def is_notebook(path: Path | str) -> bool:
    """Whether `path` names a Jupyter notebook (by its suffix)."""
    return str(path).lower().endswith(NOTEBOOK_SUFFIX)


def _cell_lines(source: object) -> list[str]:
    text = "".join(source) if isinstance(source, list) else source
    if not isinstance(text, str):
        raise NotebookError("a cell's `source` is neither a string nor a list of strings")
    return text.splitlines(keepends=True)


def mask_magics(lines: list[str]) -> tuple[list[str], dict[int, str]]:
    """The cell's lines with IPython-only syntax masked, and {0-based line: original} of each
    masked line. Every line keeps its line break; the line count never changes."""
    masked: dict[int, str] = {}
    out = list(lines)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(maxsplit=1)[0] if lines[first].strip() != "%%" else ""
        whole = name not in PYTHON_CELL_MAGICS
        for i in range(first, len(lines) if whole else first + 1):
            masked[i] = lines[i]
            out[i] = "pass\n"
        if whole:
            return out, masked
    continued = False
    for i, line in enumerate(lines):
        if i in masked:
            continue
        match = _LINE_MAGIC.match(line) or _HELP.match(line)
        if continued or (match and not line.lstrip().startswith(("%=", "!="))):
            indent = match.group("indent") if match else re.match(r"[ \t]*", line).group(0)  # type: ignore[union-attr]
            masked[i] = line
            out[i] = f"{indent}pass\n"
            continued = line.rstrip("\r\n").endswith("\\")
    return out, masked


@dataclass(frozen=True)
class CodeCell:
    """One code cell: its position in the notebook (`index`, 0-based among all cells), its
    source lines (each with its line break, the last maybe without), the lines masked, and
    where its first line is in the virtual source (1-based)."""

    index: int
    lines: tuple[str, ...]
    masked: tuple[tuple[int, str], ...]
    first_line: int
    as_list: bool
    virtual: tuple[str, ...] = ()  # the lines as in the virtual source (masked, each with a break)

    @property
    def number(self) -> int:
        """The cell's 1-based position among all cells, as reported."""
        return self.index + 1


class Notebook:
    """A parsed notebook: its JSON data, its code cells and the virtual Python source."""

    def __init__(self, raw: str, data: dict, cells: list[CodeCell], text: str, marker: str) -> None:
        self.raw = raw
        self.data = data
        self.cells = cells
        self.text = text
        self.marker = marker
        self._cell_of_line: list[CodeCell | None] = [None] * (text.count("\n") + 2)
        for cell in cells:
            for offset in range(len(cell.lines)):
                self._cell_of_line[cell.first_line + offset] = cell
        self._by_number = {cell.number: cell for cell in cells}
        self._sources: list | None = None
        # the line break of the code cells, when they all use one kind (for a cell without any)
        self._line_break = _line_break_of([line for cell in cells for line in cell.lines])

    def source_nodes(self) -> list:
        """The positions of each cell's `source` value in the JSON text (read once, on demand)."""
        if self._sources is None:
            from kllint.notebook.layout import cell_sources

            self._sources = cell_sources(self.raw)
        return self._sources

    @classmethod
    def parse(cls, raw: str) -> "Notebook | None":
        """The notebook in the JSON text `raw`; None when its language is not Python.

        Raises:
            NotebookError: not JSON, or not a notebook in the nbformat 4 layout.
        """
        depth = json_depth(raw, MAX_JSON_NESTING)
        if depth > MAX_JSON_NESTING:  # the `json` module and the layout reader recurse per level
            raise NotebookError(f"JSON nested deeper than {MAX_JSON_NESTING} levels")
        try:
            data = json.loads(raw[1:] if raw.startswith("\ufeff") else raw)  # a byte order mark is kept
        except (ValueError, RecursionError) as exc:
            raise NotebookError(f"not valid JSON ({str(exc)[:200]})") from None
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            if isinstance(data, dict) and "worksheets" in data:
                raise NotebookError("nbformat 3 notebooks are not supported (convert with `jupyter nbconvert --to notebook`)")
            raise NotebookError("not a Jupyter notebook (no `cells` list)")
        metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        language = (metadata.get("language_info") or {}).get("name") or (metadata.get("kernelspec") or {}).get("language")
        if isinstance(language, str) and language.lower() not in ("python", "python3", "ipython", "ipython3"):
            return None
        marker = "# %% kllint cell " + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        pieces: list[str] = []
        cells: list[CodeCell] = []
        line = 1
        for index, cell in enumerate(data["cells"]):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            source = cell.get("source", [])
            lines = _cell_lines(source)
            masked_lines, masked = mask_magics([ln if ln.endswith(("\n", "\r")) else ln + "\n" for ln in lines])
            pieces.append(f"{marker} {index + 1}\n")
            line += 1
            cells.append(CodeCell(index, tuple(lines), tuple(sorted(masked.items())), line,
                                  not isinstance(source, str), tuple(masked_lines)))
            pieces.extend(masked_lines)
            line += len(lines)
        return cls(raw, data, cells, "".join(pieces), marker)

    # -- positions ----------------------------------------------------------------------------

    def cell_at(self, line: int) -> CodeCell | None:
        """The code cell holding line `line` (1-based) of the virtual source."""
        return self._cell_of_line[line] if 0 < line < len(self._cell_of_line) else None

    def cell(self, number: int) -> CodeCell | None:
        """The code cell at 1-based position `number` among the notebook's cells."""
        return self._by_number.get(number)

    def to_cell(self, span: Span) -> tuple[int | None, Span]:
        """A span of the virtual source as (cell number, span within the cell); a span that
        starts outside any cell (a marker line) is put on the next cell's first line."""
        cell = self.cell_at(span.line)
        if cell is None:
            cell = self.cell_at(span.line + 1)
            if cell is None:
                return None, span
            return cell.number, Span(1, 1, 1, 2)
        start = span.line - cell.first_line + 1
        if self.cell_at(span.end_line) is cell:
            return cell.number, Span(start, span.column, span.end_line - cell.first_line + 1, span.end_column)
        width = len(cell.lines[start - 1].rstrip("\r\n"))
        return cell.number, Span(start, span.column, start, max(width + 1, span.column + 1))

    def to_virtual(self, number: int, span: Span) -> Span:
        """A span within cell `number` as a span of the virtual source (`to_cell`'s inverse)."""
        cell = self._by_number[number]
        return Span(span.line + cell.first_line - 1, span.column, span.end_line + cell.first_line - 1, span.end_column)

    def map_diagnostic(self, d: Diagnostic, display: str) -> Diagnostic:
        """A diagnostic of the virtual source with its span and its trace steps per cell."""
        cell, span = self.to_cell(d.span)
        steps = []
        for step in d.trace:
            if step.path == display and step.cell is None:
                step_cell, step_span = self.to_cell(Span(step.line, step.column, step.line, step.column + 1))
                step = replace(step, line=step_span.line, column=step_span.column, cell=step_cell)
            steps.append(step)
        fix = d.fix
        if fix is not None and fix.span is not None:
            fix = replace(fix, span=self.to_cell(fix.span)[1])
        return replace(d, span=span, cell=cell, trace=tuple(steps), fix=fix)

    def unmap_diagnostic(self, d: Diagnostic) -> Diagnostic:
        """A diagnostic per cell back in the virtual source's positions (for `--add-noqa`)."""
        if d.cell is None or d.cell not in self._by_number:
            return d
        fix = d.fix
        if fix is not None and fix.span is not None:
            fix = replace(fix, span=self.to_virtual(d.cell, fix.span))
        return replace(d, span=self.to_virtual(d.cell, d.span), cell=None, fix=fix)

    # -- writing back -------------------------------------------------------------------------

    def cell_sources(self, text: str) -> dict[int, list[str]]:
        """{cell number: new source lines} from a rewritten virtual source `text` (masked lines
        restored, the last line's break dropped again when the cell had none, and the line
        breaks of a cell written with one kind, CRLF or LF, all of that kind again: the virtual
        source's own lines end with LF)."""
        result: dict[int, list[str]] = {}
        current: list[str] | None = None
        for line in text.splitlines(keepends=True):
            if line.startswith(self.marker + " "):
                current = result.setdefault(int(line[len(self.marker) + 1:].strip()), [])
                continue
            if current is not None:
                current.append(line)
        for number, lines in result.items():
            cell = self._by_number.get(number)
            if cell is None:
                continue
            _restore_masked(cell, lines)
            eol = _line_break_of(cell.lines) or self._line_break
            if eol is not None:
                lines[:] = [_with_break(line, eol) for line in lines]
            if cell.lines and not cell.lines[-1].endswith(("\n", "\r")) and lines:
                lines[-1] = lines[-1].rstrip("\r\n")
            if not cell.lines:
                lines.clear()
        return result

    def with_text(self, text: str) -> str:
        """The notebook's JSON text with the code cells of the rewritten virtual source `text`;
        cells whose source did not change, outputs, metadata and layout are kept byte for byte."""
        from kllint.notebook.layout import format_source

        nodes = self.source_nodes()
        edits = []
        for number, lines in self.cell_sources(text).items():
            cell = self._by_number.get(number)
            if cell is None or tuple(lines) == cell.lines or nodes[cell.index] is None:
                continue
            node = nodes[cell.index]
            edits.append((node.start, node.end, format_source(lines, self.raw, node, cell.as_list)))
        raw = self.raw
        for start, end, new in sorted(edits, reverse=True):
            raw = raw[:start] + new + raw[end:]
        return raw

    def file_position(self, number: int, line: int, column: int) -> tuple[int, int] | None:
        """1-based line and column in the notebook's JSON text of (`line`, `column`) of cell
        `number`, or None when it cannot be placed."""
        from kllint.notebook.layout import offset_position, raw_offset

        cell = self._by_number.get(number)
        if cell is None or not (1 <= line <= max(len(cell.lines), 1)):
            return None
        node = self.source_nodes()[cell.index]
        if node is None:
            return None
        strings = node.items if cell.as_list else [node]
        target = sum(len(ln) for ln in cell.lines[:line - 1]) + column - 1
        seen = 0
        for string in strings:
            length = len(json.loads(self.raw[string.start:string.end]))
            if target < seen + length or string is strings[-1]:
                return offset_position(self.raw, raw_offset(self.raw, string, target - seen))
            seen += length
        return None


def _break(line: str) -> str:
    return "\r\n" if line.endswith("\r\n") else line[-1:] if line.endswith(("\r", "\n")) else ""


def _line_break_of(lines) -> str | None:
    """The line break `lines` all end with ("\r\n", "\n" or "\r"; the last line may have none),
    or None when they mix kinds or have none."""
    kinds = {_break(line) for line in lines} - {""}
    return kinds.pop() if len(kinds) == 1 else None


def _with_break(line: str, eol: str) -> str:
    """`line` ending with `eol` instead of its CR, LF or CRLF (a line without one is kept)."""
    found = _break(line)
    return line[:len(line) - len(found)] + eol if found else line


def _restore_masked(cell: CodeCell, lines: list[str]) -> None:
    """Put the masked IPython lines of `cell` back into its rewritten virtual `lines`: a line
    before the rewritten region keeps its index, a line after it keeps its distance to the end."""
    old = cell.virtual
    prefix = 0
    while prefix < min(len(old), len(lines)) and old[prefix] == lines[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(lines)) - prefix and old[-1 - suffix] == lines[-1 - suffix]:
        suffix += 1
    for index, original in cell.masked:
        if index < prefix:
            lines[index] = original
        elif index >= len(old) - suffix:
            lines[index - len(old) + len(lines)] = original


def read_notebook(path: Path) -> Notebook | None:
    """The notebook at `path`, or None when it cannot be read or is not a Python notebook."""
    try:
        return Notebook.parse(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, NotebookError):
        return None


__all__ = ["Notebook", "NotebookError", "CodeCell", "is_notebook", "read_notebook", "mask_magics"]
