"""The result of one file: what the analysis found, what is reported, and what the run, the
result cache and the worker processes need to know about it. A leaf: every stage after the
analysis imports it, it imports none of them."""
from __future__ import annotations

from dataclasses import dataclass, field

from kllint.diagnostics import Diagnostic


@dataclass
class Outcome:
    """The result of one file.

    `found` is what the analysis gave before selection and suppressions (what the cache keeps),
    `diagnostics` what is reported; `filtered` says whether `found` goes through `filter_found`
    (false for KL900 notes about unreadable or unparsable files, which are always reported).
    `notes` are one-line remarks for stderr that are not errors; `stopped` says the analysis ran
    out of its time budget or its memory budget (`stop_reason`; `thread_alive`: its thread did not
    stop, so its index must be dropped).
    Distinct from those: `gave_up` lists the functions the analysis abandoned (step or call-depth
    budgets; `RunResult.abandoned`, listed by `-v`), `file_notes` are remarks on the file for `-v`
    only, `warnings` go to stderr unless `-q`, `skipped` says the prefilter let the file go.
    `digest` is the sha256 of the bytes checked (None when unreadable) and `deps` the project
    module files the analysis looked at, each with [sha256, code digest, real path] (None: it must
    not exist; `kllint.pipeline.fingerprints.dependency_digests`), `signature` the file's `stat`
    taken before it was read; all three only when the run keeps a cache (`track=True`).
    `foreign` holds what the analysis placed in other files.
    """

    found: list[Diagnostic]
    diagnostics: list[Diagnostic]
    errors: list[str] = field(default_factory=list)
    filtered: bool = False
    digest: str | None = None
    deps: dict[str, list[str | None] | None] | None = None
    signature: list[int] | None = None  # the file's `stat` before it was read (`kllint.pipeline.manifest`)
    gave_up: list[str] = field(default_factory=list)  # functions the analysis abandoned (`check -v`)
    skipped: bool = False  # skipped by the prefilter (`check -v`)
    file_notes: list[str] = field(default_factory=list)  # remarks on the file for `check -v`
    warnings: list[str] = field(default_factory=list)  # e.g. unknown codes in suppressions (stderr)
    notes: list[str] = field(default_factory=list)
    stopped: bool = False
    stop_reason: str = "time budget"  # the budget that stopped it: "time budget" or "memory budget"
    thread_alive: bool = False
    suppressible: bool = True
    # findings the file's analysis placed in other files (an estimate written in a helper module
    # it calls, judged by what this file does with it), before selection and suppressions: the
    # run reports those placed in the files it checks (`kllint.pipeline.run`)
    foreign: list[Diagnostic] = field(default_factory=list)
    # the KL estimates the analysis saw, in this file or others (`kllint.sites`; only when the
    # run lists them: `kllint check --show-sites`, which bypasses the cache)
    sites: list = field(default_factory=list)
