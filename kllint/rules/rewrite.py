"""Text-level rewrites of whole statements, for fixes that read like a person wrote them: the
statement a span lies in (alone on its lines), names that are free in its function, the file's
indentation unit, lines wrapped to the configured line length, and the comments next to the
statement that describe what is rewritten.

Works on the module's own text and its `ast` outline (positions there are UTF-8 byte offsets,
converted to characters here); nothing in it judges code.
"""
from __future__ import annotations

import ast
import re
import tokenize
from dataclasses import dataclass

import libcst as cst

from kllint.analysis.module import ModuleInfo
from kllint.diagnostics import Span

SIMPLE_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)
_CONDITIONAL = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class Statement:
    """A simple statement alone on its lines `start`..`end` (1-based), indented by `indent`;
    `comment` is the comment at the end of its last line (with its `#`), `above` the first line
    of the comment lines right above it (`start` when there are none). `conditional`: the span
    it was found for lies where it may not be evaluated (a branch of `a if c else b`, an
    operand of `and`/`or` after the first, a lambda or comprehension)."""

    node: ast.stmt
    start: int
    end: int
    indent: str
    comment: str
    above: int
    conditional: bool
    function: ast.AST | None


def _char_column(line: str, byte_offset: int) -> int:
    """1-based character column of a UTF-8 byte offset into `line`."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace")) + 1


def _start(module: ModuleInfo, node: ast.AST) -> tuple[int, int]:
    return node.lineno, _char_column(module.lines[node.lineno - 1], node.col_offset)


def _end(module: ModuleInfo, node: ast.AST) -> tuple[int, int]:
    return node.end_lineno, _char_column(module.lines[node.end_lineno - 1], node.end_col_offset)


def _contains(module: ModuleInfo, node: ast.AST, span: Span) -> bool:
    if not hasattr(node, "lineno") or getattr(node, "end_lineno", None) is None:
        return False
    return _start(module, node) <= (span.line, span.column) and (span.end_line, span.end_column) <= _end(module, node)


def _conditional(module: ModuleInfo, node: ast.AST, span: Span) -> bool:
    """Whether `span` lies inside `node` where it may not be evaluated."""
    while True:
        inside = None
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for index, child in enumerate(children):
                if isinstance(child, ast.AST) and _contains(module, child, span):
                    if isinstance(node, ast.IfExp) and field in ("body", "orelse"):
                        return True
                    if isinstance(node, ast.BoolOp) and index > 0:
                        return True
                    inside = child
        if inside is None:
            return False
        if isinstance(inside, _CONDITIONAL):
            return True
        node = inside


def statement_at(module: ModuleInfo, span: Span) -> Statement | None:
    """The innermost simple statement holding `span`, if it is alone on its lines (nothing
    before it, only a comment after it) and in a block of statements."""
    best: tuple[ast.stmt, ast.AST | None] | None = None
    stack: list[tuple[ast.AST, ast.AST | None]] = [(module.outline, None)]
    while stack:
        node, function = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.stmt) or not _contains(module, child, span):
                continue
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, SIMPLE_STATEMENTS):
                best = (child, function)
            stack.append((child, inner))
    if best is None:
        return None
    node, function = best
    first, last = module.lines[node.lineno - 1], module.lines[node.end_lineno - 1]
    start_column = _char_column(first, node.col_offset)
    before = first[:start_column - 1]
    after = last[_char_column(last, node.end_col_offset) - 1:].rstrip("\r\n")
    if before.strip() or (after.strip() and not after.strip().startswith("#")):
        return None
    above = node.lineno
    while above > 1 and module.lines[above - 2].strip().startswith("#") \
            and _indent_of(module.lines[above - 2]) == before:
        above -= 1
    return Statement(node, node.lineno, node.end_lineno, before, after.strip(), above,
                     _conditional(module, node, span), function)


def _indent_of(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def indent_unit(module: ModuleInfo, statement: Statement) -> str:
    """The indentation one block level adds in this file: from the statement's block header,
    else the first indented block of the file, else four spaces."""
    for number in range(statement.start - 1, 0, -1):
        line = module.lines[number - 1]
        if line.strip() and not line.strip().startswith("#"):
            indent = _indent_of(line)
            if len(indent) < len(statement.indent) and statement.indent.startswith(indent):
                return statement.indent[len(indent):]
    for index, line in enumerate(module.lines[:-1]):
        if line.rstrip().endswith(":"):
            following = next((n for n in module.lines[index + 1:] if n.strip()), "")
            extra = _indent_of(following)[len(_indent_of(line)):]
            if extra:
                return extra
    return "    "


def names_in_scope(module: ModuleInfo, statement: Statement) -> set[str]:
    """Every name the statement's function uses or binds (the module's, at top level)."""
    root = statement.function if statement.function is not None else module.outline
    names = set(module.imports)
    for node in ast.walk(root):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def fresh_name(preferred: str, taken: set[str]) -> str:
    """`preferred`, or `preferred_2`, ... : a name not in `taken` (which it is added to)."""
    name, number = preferred, 2
    while name in taken:
        name, number = f"{preferred}_{number}", number + 1
    taken.add(name)
    return name


def _operands(expr: str) -> list[str] | None:
    """`a - b + c` as ["a", "- b", "+ c"] (a chain of top-level `+`/`-`), None otherwise."""
    try:
        node = cst.parse_expression(expr)
    except Exception:  # noqa: BLE001
        return None
    if node.lpar:
        return None
    parts: list[str] = []
    empty = cst.Module(body=[])
    while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)) \
            and not node.lpar:
        sign = "+" if isinstance(node.operator, cst.Add) else "-"
        parts.insert(0, f"{sign} {empty.code_for_node(node.right).strip()}")
        node = node.left
    if not parts:
        return None
    return [empty.code_for_node(node).strip()] + parts


def fit(indent: str, head: str, expr: str, tail: str, limit: int, unit: str) -> list[str]:
    """`indent + head + expr + tail` as lines no longer than `limit` when it can be done the
    way formatters do it: in parentheses, one operand of a `+`/`-` chain per line."""
    line = f"{indent}{head}{expr}{tail}"
    if len(line) <= limit:
        return [line]
    operands = _operands(expr)
    if operands is None:
        return [line]
    return [f"{indent}{head}("] + [f"{indent}{unit}{operand}" for operand in operands] + [f"{indent}){tail}"]


ESTIMATOR_MENTION = re.compile(r"\bk[123]\b|low[\s_-]?var|schulman|\bmse\b|\babs\b|kl[\s_-]?approx|"
                               r"\bestimat", re.IGNORECASE)
_DIRECTIVE = re.compile(r"\bnoqa\b|\bkllint\s*:|\btype:\s*ignore|\bpragma\b|\bfmt:", re.IGNORECASE)


def _parts(comment: str) -> list[str]:
    """`# a  # noqa: X` as ["# a", "# noqa: X"]: the comments written one after the other."""
    return [part for part in re.split(r"\s+(?=#)", comment.strip()) if part]


def stale(comment: str) -> bool:
    """Whether a comment speaks of the estimator (a part of it that is not a tool directive)."""
    return any(ESTIMATOR_MENTION.search(part) and not _DIRECTIVE.search(part) for part in _parts(comment))


def refreshed(comment: str, new: str) -> str:
    """`comment` with its parts that speak of the estimator replaced by `new` (once; dropped
    when `new` is empty); directives and other parts are kept in place."""
    out, placed = [], False
    for part in _parts(comment):
        if ESTIMATOR_MENTION.search(part) and not _DIRECTIVE.search(part):
            if new and not placed:
                out.append(new)
            placed = True
        else:
            out.append(part)
    return "  ".join(out)


def inner_comments(module: ModuleInfo, statement: Statement) -> list[str]:
    """The comments on the lines of a statement over several lines before its last (`kl = (`,
    `exp(d) - d - 1  # k3`, `)`): a statement written afresh keeps them at its end."""
    comments = []
    lines = iter(module.lines[statement.start - 1:statement.end])
    try:
        for token in tokenize.generate_tokens(lambda: next(lines, "")):
            if token.type == tokenize.COMMENT and token.start[0] < statement.end - statement.start + 1:
                comments.append(token.string)
    except (tokenize.TokenError, SyntaxError):
        return []
    return comments


def with_comment(line: str, comment: str) -> str:
    """`line` ending with `comment` (two spaces before it, as formatters write it)."""
    return f"{line}  {comment}" if comment else line


def _value_head(module: ModuleInfo, node: ast.stmt) -> tuple[ast.expr, str] | None:
    """The value of `target = value` / `target: T = value` / `return value` / `x += value` and
    the text before it as a formatter writes it (`kl = `)."""
    if isinstance(node, ast.Assign):
        return node.value, "".join(f"{module.segment(t)} = " for t in node.targets)
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return node.value, f"{module.segment(node.target)}: {module.segment(node.annotation)} = "
    if isinstance(node, ast.Return) and node.value is not None:
        return node.value, "return "
    return None


def _replaced(module: ModuleInfo, statement: Statement, span: Span, text: str) -> list[str]:
    """The statement's lines with `span` replaced by `text` (comments kept)."""
    lines = [line.rstrip("\r\n") for line in module.lines[statement.start - 1:statement.end]]
    first, last = span.line - statement.start, span.end_line - statement.start
    joined = lines[first][:span.column - 1] + text + lines[last][span.end_column - 1:]
    return lines[:first] + joined.split("\n") + lines[last + 1:]


def rewrite_statement(module: ModuleInfo, statement: Statement, span: Span, new: str, bindings: list[tuple[str, str]],
                      comment: str | None, limit: int, parenthesize: bool = True,
                      wrap: bool = True) -> tuple[Span, str, bool, str]:
    """Rewrite the statement's lines: `bindings` (name, value) first, each on lines of its
    own, then the statement with `span` replaced by `new` (in parentheses with `parenthesize`,
    unless `span` is the statement's whole value, which is then written afresh, wrapped to
    `limit`). A comment next to the statement that speaks of the estimator is replaced by
    `comment` (dropped when `comment` is empty). Returns the region (whole lines, from the
    comment lines above when they are replaced), its new text, whether every written line fits
    in `limit`, and the text now at `span`'s place. Without `wrap`, lines are not split."""
    limit_for_fit = limit if wrap else 10 ** 9
    unit = indent_unit(module, statement)
    indent = statement.indent
    out: list[str] = []
    above = [line.rstrip("\r\n") for line in module.lines[statement.above - 1:statement.start - 1]]
    region_start = statement.start
    if comment is not None and any(stale(line.strip()) for line in above):
        region_start = statement.above
        if comment:
            out.append(f"{indent}{comment}")
        comment_done = True
    else:
        comment_done = False
    for name, value in bindings:
        out.extend(fit(indent, f"{name} = ", value, "", limit_for_fit, unit))
    value_head = _value_head(module, statement.node)
    trailing = statement.comment
    if comment is not None and stale(trailing):
        trailing = refreshed(trailing, "" if comment_done else comment)
    if value_head is not None and _same_place(module, value_head[0], span):
        body = fit(indent, value_head[1], new, "", limit_for_fit, unit)
        body[-1] = with_comment(body[-1], "  ".join(inner_comments(module, statement) + ([trailing] if trailing else [])))
    else:
        new = f"({new})" if parenthesize else new
        body = _replaced(module, statement, span, new)
        if trailing != statement.comment:
            last = body[-1]
            cut = last.rfind(statement.comment) if statement.comment else -1
            body[-1] = with_comment(last[:cut].rstrip() if cut >= 0 else last, trailing)
    out.extend(body)
    end_line = module.lines[statement.end - 1].rstrip("\r\n")
    region = Span(region_start, 1, statement.end, len(end_line) + 1)
    return region, "\n".join(out), all(len(line) <= limit for line in out), new


def _same_place(module: ModuleInfo, node: ast.expr, span: Span) -> bool:
    return _start(module, node) == (span.line, span.column) and _end(module, node) == (span.end_line, span.end_column)


class _Substitute(cst.CSTTransformer):
    """Replaces every sub-expression whose code is `text` (spacing aside) by the name `name`."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__()
        self.key = text.replace(" ", "")
        self.name = name
        self._module = cst.Module(body=[])

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        if isinstance(updated, cst.BaseExpression):
            code = self._module.code_for_node(updated.with_changes(lpar=[], rpar=[]) if hasattr(updated, "lpar") else updated)
            if code.replace(" ", "") == self.key:
                return cst.Name(self.name)
        return updated


def replace_subexpression(expr: str, text: str, name: str) -> str:
    """`expr` with each sub-expression written `text` replaced by `name` (as parsed: the
    `a - b` of `c * a - b` is not one); `expr` unchanged when none is or it does not parse."""
    try:
        node = cst.parse_expression(expr)
    except Exception:  # noqa: BLE001
        return expr
    if node.lpar:
        return expr
    return cst.Module(body=[]).code_for_node(node.visit(_Substitute(text, name)))


_BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, ast.Match)


def rebinds_a_branch_value(statement: Statement) -> bool:
    """Whether the statement reassigns a name from itself (`kl = clamp(kl, ...)`) that an
    earlier statement of its function binds inside a block the statement is not in (`if c:
    kl = kl * ratio`): the value it rewrites is then another estimate on some paths, and a
    rewrite of this line would change those paths' gradient too."""
    node = statement.node
    if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or statement.function is None:
        return False
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    bound = {t.id for t in targets if isinstance(t, ast.Name)}
    read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} if node.value is not None else set()
    rebound = bound & read if not isinstance(node, ast.AugAssign) else bound
    if not rebound:
        return False
    return any(_binds_inside(block, rebound, node) for block in ast.walk(statement.function)
               if isinstance(block, _BLOCKS) and block.lineno < node.lineno
               and not (block.lineno <= node.lineno <= (block.end_lineno or block.lineno)))


def _binds_inside(block: ast.AST, names: set[str], before: ast.stmt) -> bool:
    for inner in ast.walk(block):
        if isinstance(inner, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and inner.lineno < before.lineno:
            targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
            if any(isinstance(t, ast.Name) and t.id in names for t in targets):
                return True
    return False
