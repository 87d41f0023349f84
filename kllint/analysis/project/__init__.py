"""The project model: every module of the project a checked file belongs to, read with `ast`
(never run), and who calls what across its modules.

`files` finds the project (the nearest `pyproject.toml`, `setup.py`, `setup.cfg` or `.git` above
a file, else its import root) and its Python files; `outlines` reads each module's imports,
definitions and the names each function uses; `callers` answers, for a checked file, which
functions of the other modules call into it, and who calls those in turn: the entry points that
run the file's code with its callers' values (`kllint.analysis.interpret.entry`).
"""
