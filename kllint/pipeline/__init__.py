"""The run pipeline, one module per stage:

discovery (which files) -> prefilter (which can hold a finding, from the text) -> source (read
and decode) -> file (one file to its result: parse, analyse, then the rules through
`kllint.rules.dispatch`) -> selection (selected codes, per-file ignores, suppressions) -> run
(every file, in order; `parallel` for a pool of workers, `cache` for unchanged files).
`outcome` holds the per-file result every stage after the analysis shares.
"""
