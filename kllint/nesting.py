"""How deeply a module's code nests, measured on its `ast` tree without recursion, before
anything recursive (libcst's visitors and code generation, the interpreter, the term algebra)
touches it.

Those parts recurse a few Python frames per level of nesting (measured: 2 to 4 per `ast`
level, for `-` signs, `+` chains, call and subscript chains, `.exp()` chains, comparisons,
`elif` chains), within Python's default limit of 1,000 frames, and the cost of some grows with
the square of the depth. A module nested deeper than `MAX_NESTING` levels is reported as not
checked (KL900 "nesting deeper than 150 levels"); real code stays far below (at most 94 levels
over torch's 2,300 files, an `elif` chain of 79 branches; at most 56 over the 5,586 files of the
22 trainer releases of the real corpus).

The depth counts every `ast` node on the path from the module down, plus the levels libcst
adds where `ast` is flat: an `and` / `or` chain of n operands is n - 1 levels, n implicitly
concatenated string literals n - 1 levels. An expression of S characters cannot nest more than
2 S + 2 levels, so the expressions of ordinary statements are not walked at all.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from itertools import accumulate

MAX_NESTING = 150
_LINE = re.compile(r".*?(?:\r\n|\r|\n)|.+\Z", re.S)  # Python's own line breaks


class _Spans:
    """The source of `ast` nodes, and upper bounds on its number of characters (the line
    lengths are measured the first time a node spans several lines)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._lines: list[str] | None = None
        self._starts: list[int] = []

    def lines(self) -> list[str]:
        if self._lines is None:
            if "\r" in self.text:
                self._lines = _LINE.findall(self.text)
                self._starts = [0, *accumulate(map(len, self._lines))]
            else:  # the same lines, found faster
                self._lines = self.text.split("\n")
                self._starts = [0, *accumulate(len(line) + 1 for line in self._lines)]
        return self._lines

    def size(self, node: ast.AST) -> int:
        first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is None or last is None:
            return len(self.text)
        if first == last:
            return max((node.end_col_offset or 0) - node.col_offset, 0)  # UTF-8 bytes: at least the characters
        count = len(self.lines())
        return self._starts[min(last, count)] - self._starts[min(first - 1, count)]

    def source(self, node: ast.AST) -> str:
        """The source of `node` (its columns are UTF-8 byte offsets)."""
        lines = self.lines()[node.lineno - 1:node.end_lineno]
        if not lines:
            return ""
        encoded = [line.encode("utf-8", "surrogatepass") for line in lines]
        if len(encoded) == 1:
            encoded[0] = encoded[0][node.col_offset:node.end_col_offset]
        else:
            encoded[0], encoded[-1] = encoded[0][node.col_offset:], encoded[-1][:node.end_col_offset]
        return b"".join(encoded).decode("utf-8", "replace")


def _string_pieces(source: str) -> int:
    """How many string literals the source of one string constant or f-string is made of."""
    pieces = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            pieces += token.type == tokenize.STRING
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass
    return max(pieces, 1)


def deepest(outline: ast.AST, text: str, limit: int = MAX_NESTING) -> tuple[int, int] | None:
    """`(depth, line)` where the code of `text` (its `ast` tree `outline`) first nests deeper
    than `limit` levels (see the module docstring), or None when it nowhere does. Iterative."""
    spans = _Spans(text[1:] if text.startswith("\ufeff") else text)
    # `exact`: inside an f-string, whose inner positions Python 3.11 does not always give
    stack: list[tuple[ast.AST, int, bool]] = [(outline, 1, False)]
    push, pop, node_type = stack.append, stack.pop, ast.AST
    while stack:
        node, depth, exact = pop()
        first = getattr(node, "end_lineno", None)
        if first is not None and not exact and not getattr(node, "decorator_list", None):  # decorators lie above
            size = node.end_col_offset - node.col_offset if node.lineno == first else spans.size(node)
            if depth + 2 * size + 2 <= limit:
                continue  # too short to nest deeper than the limit
        if isinstance(node, ast.expr):
            if isinstance(node, ast.BoolOp):
                depth += len(node.values) - 2
            elif isinstance(node, (ast.JoinedStr, ast.Constant)) and depth + spans.size(node) // 2 > limit \
                    and isinstance(getattr(node, "value", ""), (str, bytes)):
                source = spans.source(node)  # each literal has two quotes at least
                if depth + (source.count('"') + source.count("'")) // 2 > limit:
                    depth += _string_pieces(source) - 1
            exact = exact or isinstance(node, ast.JoinedStr)
        if depth > limit:
            return depth, getattr(node, "lineno", 1)
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type):
                        push((item, depth + 1, exact))
            elif isinstance(value, node_type):
                push((value, depth + 1, exact))
    return None


def too_deeply_nested(text: str, outline: ast.AST, limit: int = MAX_NESTING) -> tuple[str, int] | None:
    """Why the analysis must not take `text`, and the line (None when it may): nested deeper
    than `limit` levels."""
    found = deepest(outline, text, limit)
    return None if found is None else (f"nesting deeper than {limit} levels", found[1])
