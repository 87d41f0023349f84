"""The parts of a module that libcst parses on demand: its classes (`LazyClass`, methods parsed one
at a time), top-level functions and constants (`LazyDefinitions`, `LazyConstants`), each
function or method as a `LazyFunction` (parsed only when its body is needed), the `Site` each
comes from, and the identifiers and calls of an `ast` outline. The `ModuleInfo` of
`kllint.analysis.module` owns them (they read its text and parse through it)."""
from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from kllint.analysis.outline import FUNCTION_DEFS, called_names, dotted, identifiers
from kllint.pipeline.source import statement_lines

_DEFINITIONS = (*FUNCTION_DEFS, ast.ClassDef)


@dataclass(frozen=True)
class Site:
    """Where a definition or statement is in the file: 1-based lines, inclusive; its indentation."""

    start: int
    end: int
    indented: bool

    @classmethod
    def of(cls, node: ast.stmt, lines: list[str]) -> "Site":
        """The lines of `node` (decorators included) in a file of `lines`."""
        start, end = statement_lines(node, lines)
        first = lines[start - 1] if start <= len(lines) else ""
        # a form feed at the start of a line resets Python's indentation count
        return cls(start, end, first.lstrip("\f")[:1] in (" ", "\t"))


class LazyFunction:
    """A function or method of the module, known from its `ast` outline: libcst parses it on the
    first read of `node`, when the analysis runs its body. Looking it up, and asking its name,
    its parameters or its decorators, parses nothing: a method that is only looked up (an
    `__init__` whose parameters a constructor call binds, a `@property` test, a callback never
    called) costs no libcst parse. One per definition (its owner keeps it), so the parsed node,
    whose `id` keys the interpreter's memo, is the same for every reference."""

    __slots__ = ("_module", "site", "outline", "_node", "_parsed")

    def __init__(self, module: "ModuleInfo", site: Site, outline: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._module = module  # the owner's proxy: no cycle through the module
        self.site = site
        self.outline = outline
        self._node: cst.FunctionDef | None = None
        self._parsed = False

    @property
    def name(self) -> str:
        """The definition's name, from its outline."""
        return self.outline.name

    @property
    def node(self) -> cst.FunctionDef | None:
        """The libcst definition, parsed on first access (None when libcst rejects it)."""
        if not self._parsed:
            self._node = self._module.definition(self.site)
            self._parsed = True
        return self._node

    def parameter_names(self, keyword_only: bool = True) -> list[str]:
        """`parameter_names` of the definition, from its outline."""
        args = self.outline.args
        names = [a.arg for a in (*args.posonlyargs, *args.args)]
        return names + [a.arg for a in args.kwonlyargs] if keyword_only else names

    def decorator_names(self) -> list[str | None]:
        """The dotted name of each decorator (`staticmethod`, `functools.cached_property`), None
        for one that is not a plain dotted name (a call: `@torch.no_grad()`), from the outline."""
        return [dotted(decorator) for decorator in self.outline.decorator_list]

    def calls_super_init(self) -> bool:
        """Whether a statement of its body (not nested) is a call `super().__init__(...)`, from
        the outline: the constructor can pass its parameters up only then."""
        return any(isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                   and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == "__init__"
                   and isinstance(statement.value.func.value, ast.Call)
                   and dotted(statement.value.func.value.func) == "super" for statement in self.outline.body)

    def stores_parameter(self, attr: str) -> bool:
        """Whether a statement of its body, also inside its `if`, `with`, `try` and loop blocks
        (as `kllint.analysis.interpret.names` reads the stores), stores one of its parameters as
        `self.<attr> = <parameter>`, from the outline."""
        names = set(self.parameter_names())
        return any(isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name)
                   and statement.value.id in names and any(dotted(target) == f"self.{attr}" for target in statement.targets)
                   for statement in _own_statements(self.outline.body))


class LazyClass:
    """A class of the module: its methods are parsed with libcst one at a time, on demand.

    Offers what the analysis reads of a `cst.ClassDef`: `name.value`, `bases` (`cst.Arg`s),
    `method(name)` (parsed), `function(name)` (a `LazyFunction`, not parsed yet), `method_names`,
    and `assigns_attribute(attr)` (which methods assign `self.attr`).
    """

    def __init__(self, module: "ModuleInfo", node: ast.ClassDef) -> None:
        self.module = weakref.proxy(module)  # no cycle: the module is freed by reference counting
        self.name = cst.Name(node.name)
        self._node = node
        self._methods: dict[str, ast.stmt] = {}
        for statement in node.body:
            if isinstance(statement, FUNCTION_DEFS):
                if statement.name in self._methods and _is_property_accessor(statement):
                    continue  # `@x.setter` / `@x.deleter`: reading `obj.x` still runs the getter
                self._methods[statement.name] = statement  # the last one wins, as in Python
        self._bases: list[cst.Arg] | None = None
        self._functions: dict[str, LazyFunction] = {}
        self._hooks: frozenset[str] | None = None
        self._stores: dict[str, list[str]] | None = None  # attr -> the methods storing `self.attr`

    @property
    def method_names(self) -> list[str]:
        return list(self._methods)

    def method_identifiers(self, name: str) -> frozenset[str]:
        return identifiers(self._methods[name])

    def method_calls(self, name: str) -> frozenset[str]:
        """`called_names` of a method (from its outline, nothing parsed)."""
        return called_names(self._methods[name])

    def function(self, name: str) -> LazyFunction | None:
        """The method `name` defined in the class body, not parsed yet; None when there is none."""
        found = self._functions.get(name)
        if found is None:
            statement = self._methods.get(name)
            if statement is None:
                return None
            found = self._functions[name] = LazyFunction(self.module, Site.of(statement, self.module.lines), statement)
        return found

    def hooks(self) -> frozenset[str]:
        """The methods this class leaves to its subclasses: those it declares without a body
        that computes anything (`@abstractmethod`, only `raise NotImplementedError`, `pass` or
        `...` after a docstring), and those its methods call on `self` without defining them
        (read from `ast`, nothing parsed)."""
        if self._hooks is None:
            declared = {name for name, statement in self._methods.items() if _is_abstract(statement)}
            called = {name for statement in self._methods.values() for name in _self_calls(statement)}
            self._hooks = frozenset(declared | (called - set(self._methods)))
        return self._hooks

    def self_calls(self, name: str) -> frozenset[str]:
        """The names the method `name` calls as `self.<name>(...)` (from `ast`, nothing parsed)."""
        statement = self._methods.get(name)
        return frozenset(_self_calls(statement)) if statement is not None else frozenset()

    def method(self, name: str) -> cst.FunctionDef | None:
        """The method `name`, parsed (None when absent or when libcst rejects it)."""
        found = self.function(name)
        return found.node if found is not None else None

    @property
    def bases(self) -> list[cst.Arg]:
        if self._bases is None:
            self._bases = []
            for base in self._node.bases:
                segment = self.module.segment(base)
                try:
                    self._bases.append(cst.Arg(value=cst.parse_expression(f"({segment})")))
                except (cst.ParserSyntaxError, TypeError):
                    continue
        return self._bases

    def field_defaults(self) -> dict[str, object]:
        """The literal defaults of the class's annotated fields (`kl_method: str = "low_var_kl"`
        in a configuration dataclass), read from `ast`, nothing parsed."""
        found: dict[str, object] = {}
        for statement in self._node.body:
            if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, (str, bool, int, float, type(None)))):
                found[statement.target.id] = statement.value.value
        return found

    def assigns_attribute(self, attr: str) -> list[str]:
        """Methods that assign `self.<attr> = <call, name or conditional>`, also inside their
        `if`, `with`, `try` and loop blocks, in definition order (read from `ast`, nothing
        parsed; every method is walked once per class, for all attributes)."""
        if self._stores is None:
            stores: dict[str, list[str]] = {}
            for name, statement in self._methods.items():
                for node in _own_statements(statement.body):
                    if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Call, ast.Name, ast.Attribute, ast.IfExp)):
                        for target in node.targets:
                            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                                    and target.value.id == "self"):
                                methods = stores.setdefault(target.attr, [])
                                if not methods or methods[-1] != name:
                                    methods.append(name)
            self._stores = stores
        return list(self._stores.get(attr, ()))


def _own_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a block and of the `if`, `with`, `try` and loop blocks in it, in source
    order; not those of nested definitions."""
    for statement in body:
        yield statement
        if isinstance(statement, _DEFINITIONS):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _own_statements(getattr(statement, field, None) or [])
        for handler in getattr(statement, "handlers", None) or []:
            yield from _own_statements(handler.body)


def own_statement_lines(block: cst.BaseSuite) -> Iterator[cst.SimpleStatementLine]:
    """The simple statement lines of a block and of the `if` / `elif` / `else`, `with`, `try`
    and loop blocks in it, in source order; not those of nested definitions."""
    if not isinstance(block, cst.IndentedBlock):
        return
    for line in block.body:
        if isinstance(line, cst.SimpleStatementLine):
            yield line
        elif not isinstance(line, (cst.FunctionDef, cst.ClassDef)):
            for part in _blocks_of(line):
                yield from own_statement_lines(part)


def _blocks_of(statement: cst.BaseCompoundStatement) -> Iterator[cst.BaseSuite]:
    """The blocks of a compound statement: its body, handlers, `else` (or `elif`) and `finally`
    (a `match` statement gives its cases)."""
    body = getattr(statement, "body", None)
    if body is not None:
        yield body
    for case in getattr(statement, "cases", ()):
        yield case.body
    for handler in getattr(statement, "handlers", ()):
        yield handler.body
    orelse = getattr(statement, "orelse", None)
    while orelse is not None:
        yield orelse.body
        orelse = getattr(orelse, "orelse", None) if isinstance(orelse, cst.If) else None
    finalbody = getattr(statement, "finalbody", None)
    if finalbody is not None:
        yield finalbody.body


def _is_abstract(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method declared for subclasses to fill: `@abstractmethod`, or a body of nothing but a
    docstring and `pass`, `...` or `raise NotImplementedError`."""
    if any((d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")) == "abstractmethod"
           for d in node.decorator_list):
        return True
    body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
    return bool(body) and all(_is_placeholder(statement) for statement in body)


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def _is_placeholder(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and statement.value.value is ...:
        return True
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"
    return False


def _self_calls(node: ast.AST) -> set[str]:
    """The names a method calls as `self.<name>(...)`."""
    return {n.func.attr for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}


def _is_property_accessor(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated `@<name>.setter` or `@<name>.deleter`: not what reading the attribute runs."""
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in node.decorator_list)


class _LazyNames:
    """Names of a module, each with the `Site` that libcst parses on first access and its `ast`
    outline (membership and identifiers need no parsing)."""

    def __init__(self, module: "ModuleInfo") -> None:
        self._module = weakref.proxy(module)  # no cycle: the module is freed by reference counting
        self._sites: dict[str, Site] = {}
        self._outlines: dict[str, ast.stmt] = {}

    def add(self, name: str, site: Site, outline: ast.stmt) -> None:
        self._sites[name] = site
        self._outlines[name] = outline

    def identifiers(self, name: str) -> frozenset[str]:
        return identifiers(self._outlines[name])

    def calls(self, name: str) -> frozenset[str]:
        """`called_names` of a definition (from its outline, nothing parsed)."""
        return called_names(self._outlines[name])

    def __contains__(self, name: object) -> bool:
        return name in self._sites


class LazyDefinitions(_LazyNames):
    """name -> `cst.FunctionDef`, parsed on first access; `function(name)`: the `LazyFunction`."""

    def __init__(self, module: "ModuleInfo") -> None:
        super().__init__(module)
        self._functions: dict[str, LazyFunction] = {}

    def function(self, name: str) -> LazyFunction | None:
        """The top-level function `name`, not parsed yet; None when the module defines none."""
        found = self._functions.get(name)
        if found is None:
            site = self._sites.get(name)
            if site is None:
                return None
            found = self._functions[name] = LazyFunction(self._module, site, self._outlines[name])
        return found

    def __getitem__(self, name: str) -> cst.FunctionDef:
        node = self.get(name)
        if node is None:
            raise KeyError(name)
        return node

    def get(self, name: str) -> cst.FunctionDef | None:
        """The parsed definition, or None when absent or when libcst rejects it."""
        found = self.function(name)
        return found.node if found is not None else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)


class LazyConstants(_LazyNames):
    """name -> the `cst` expression assigned at module level, parsed on first access. The site of
    a constant is the top-level statement holding the assignment (an `if`/`try` block for a
    guarded constant), its outline the assignment itself."""

    def get(self, name: str) -> cst.BaseExpression | None:
        """The assigned expression, or None when absent or when libcst rejects its statement."""
        site = self._sites.get(name)
        statement = self._module.statement(site) if site is not None else None
        return _assigned_value(statement, name) if statement is not None else None

    def __getitem__(self, name: str) -> cst.BaseExpression:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value


def _assigned_value(statement: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value assigned to `name` in a statement (searching `if`/`try` blocks too)."""
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets):
            return node.value
        if (isinstance(node, cst.AnnAssign) and node.value is not None and isinstance(node.target, cst.Name)
                and node.target.value == name):
            return node.value
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.IndentedBlock)):
            stack.extend(reversed(node.body))
        elif isinstance(node, (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally)):
            parts = [node.body, getattr(node, "orelse", None), getattr(node, "finalbody", None),
                     *getattr(node, "handlers", ())]
            stack.extend(reversed([part for part in parts if part is not None]))
    return None


def class_method(cls: cst.ClassDef | LazyClass, name: str) -> cst.FunctionDef | LazyFunction | None:
    """The method `name` defined in the body of a class, else None: a `LazyFunction` (not parsed
    yet) of a class of the module's outline, the `cst.FunctionDef` of a class parsed whole (one
    nested in a function)."""
    if isinstance(cls, LazyClass):
        return cls.function(name)
    for statement in cls.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
            return statement
    return None


def class_methods(cls: cst.ClassDef | LazyClass) -> list[cst.FunctionDef]:
    """Every method of a class, parsed (for the few classes the analysis walks whole)."""
    if isinstance(cls, LazyClass):
        return [m for m in (cls.method(n) for n in cls.method_names) if m is not None]
    return [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]


def parameter_names(fdef: cst.FunctionDef | cst.Lambda | LazyFunction, keyword_only: bool = True) -> list[str]:
    """The names of a definition's parameters in order: positional ones, then (with
    `keyword_only`) keyword-only ones; `*args` and `**kwargs` are not among them. A
    `LazyFunction` answers from its outline, unparsed."""
    if isinstance(fdef, LazyFunction):
        return fdef.parameter_names(keyword_only)
    params = fdef.params
    names = [p.name.value for p in (*params.posonly_params, *params.params)]
    return names + [p.name.value for p in params.kwonly_params] if keyword_only else names
