"""Metamorphic transformations of a Python corpus, for tests/test_metamorphic.py.

Each transformation keeps the program's meaning and changes only what the analysis must not
depend on (design.md, "Roles of operands": "Renaming locals or moving code between modules must
not change a finding"):

- `rename.rename_locals`: every local variable of a function or comprehension gets a neutral
  name (`v1`, `v2`, ...), with libcst's scope analysis, so comments (`# expect:`, `# noqa`) and
  line numbers are kept: findings compare by (code, path, line).
- `rename.rename_parameters`: every parameter of a `def` (not `self` / `cls`) gets a neutral name
  (`a1`, ...), the same one for the same old name across the corpus, and the keywords of the
  calls the corpus makes to those functions follow. Findings may be lost where a parameter's
  name was the only evidence: the test counts them.
- `move.move_definitions`: every top-level function and class of a module goes into its own
  module of a package that replaces the module (`foo.py` -> `foo/__init__.py`, `foo/m_f.py`, ...),
  with a line map back to the original lines: findings compare by (code, original line).

`corpus` copies a folder, applies a transformation to every file and runs kllint in-process on
both copies; `python tests/metamorphic {locals,params,move} SRC [DST]` does it from the shell.
"""
