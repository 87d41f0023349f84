"""The abstract interpreter's parts, one concern a module: its frames, tree walking, and the mixins
that `kllint.analysis.interpreter.Interpreter` assembles (none of them imports that module)."""
