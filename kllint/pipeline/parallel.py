"""Analyse many files with a pool of worker processes, and survive workers that die.

`kllint.pipeline.run` hands the files that need analysis to `analyse` when `--jobs` is above 1
and more than `THRESHOLD` of them pass the prefilter (`worth_it`). The pool uses the `spawn`
start method (no fork: the parent may hold threads and large parsed trees). Each worker's
`ProjectIndex` keeps the modules it has parsed for the files of one import root at a time
(`IndexPerRoot`), so an import root small enough goes to one worker whole, and only a root
larger than a worker's share is cut by folder into chunks that spread over the workers (`chunks`).
Chunks are submitted one import root after another, the costliest root first and its largest
chunks first, so that a worker never returns to a root it left (and parses its helpers
again). Results are delivered per file to a callback; `kllint.pipeline.run` orders
them, so the output does not depend on the pool.

A worker that crashes (segmentation fault, killed by the out-of-memory killer, `os._exit`)
breaks the whole pool. Every worker marks in a shared array the file it is working on, so after
a break the files that were in progress are known: each of them is re-run alone in a one-worker
pool (the file that crashes again gets an internal-error line, the others their results), and
the files that were not finished go to a fresh pool. If the pool breaks before any file started
(workers cannot start at all), the files are analysed in this process instead.

A worker whose parent dies (killed with SIGKILL, so that it could not end the pool) ends too: a
thread of each worker checks every `PARENT_POLL` seconds whether its parent process is still
the one that started it (`os.getppid()` changes when an orphan is adopted), also in the middle
of a long file.

Worker processes (and multiprocessing's resource tracker) are started with `python -c`, which
puts the current folder first on `sys.path` until a worker has received this process's
`sys.path`; started from the project's folder, a worker would import the project's
`pickle.py` or `threading.py` in place of the standard library's (issue 35). So they are
started from an empty private folder (`_elsewhere`: the pool is created and tasks are submitted
there, by the one thread that runs `analyse`) and each worker returns to this process's folder
in `_init_worker`, before any task.

Test-only: the environment variable `KLLINT_TEST_CRASH_ON=<file name>[,<file name>...]` makes
a worker exit abruptly (`os._exit`) when it reaches a file of such a name; it has no effect
outside worker processes (`-j 1` and small runs ignore it).
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from kllint.analysis.index import IndexPerRoot, package_root
from kllint.config import Settings
from kllint.exit import fast_exit
from kllint.memory import use_analysis_thresholds
from kllint.pipeline import prefilter
from kllint.pipeline.discovery import Discovered
from kllint.pipeline.failure import describe
from kllint.pipeline.file import analyse_file
from kllint.pipeline.outcome import Outcome
from kllint.pipeline.source import MAX_FILE_BYTES, read_regular

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

# multiprocessing and concurrent.futures are imported where a pool starts, not at the top: a run
# imports this module to decide whether a pool serves (`THRESHOLD`, `usable`, `worth_it`), and a
# run that stays in its process (a pre-commit hook's few files) does not need them

THRESHOLD = 8
CHUNKS_PER_JOB = 16
CRASH_ENV = "KLLINT_TEST_CRASH_ON"
_STARTED, _FINISHED = 1, 2
PARENT_POLL = 0.5  # seconds between a worker's checks that its parent is alive


@dataclass(frozen=True)
class Task:
    """One file to analyse; `position` is its place in the run (results are delivered with it)."""

    position: int
    item: Discovered
    settings: Settings


Done = Callable[[int, "Outcome"], None]

def worth_it(items: list[Discovered]) -> bool:
    """Whether more than THRESHOLD of `items` pass the prefilter (only those need real work;
    starting workers costs about a second each). Reads the files until it knows."""
    candidates = 0
    for item in items:
        try:
            text = read_regular(item.path, MAX_FILE_BYTES).decode("utf-8", errors="replace")
        except (OSError, RuntimeError):
            continue
        if prefilter.might_matter(text):
            candidates += 1
            if candidates > THRESHOLD:
                return True
    return False


def usable() -> bool:
    """Whether workers would run the same analysis as this process.

    Workers import kllint afresh; when the analysis entry points of this process have been
    replaced (by a test double or an embedding application), they would not, so the run stays
    in this process. An analysis this process has not imported cannot have been replaced, and
    the parent of a pool never imports it (libcst and the analysis: a second of start-up and about a
    hundred megabytes that only the workers need).
    """
    dispatch = sys.modules.get("kllint.rules.dispatch")
    return ((dispatch is None or getattr(dispatch.check_source, "__module__", None) == "kllint.rules.dispatch")
            and getattr(prefilter.might_matter, "__module__", None) == "kllint.pipeline.prefilter")


# -- in the worker processes -----------------------------------------------------------------

_INDEXES = IndexPerRoot()
_STATUS: Any = None


def _init_worker(status: Any, home: str) -> None:
    global _STATUS
    os.chdir(home)  # started from an empty folder (see the module docstring)
    _STATUS = status
    _INDEXES.drop()
    use_analysis_thresholds()
    atexit.register(fast_exit)  # results are sent before exit; freeing the worker's index is waste
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl+C and ends the pool
    threading.Thread(target=_watch_parent, args=(os.getppid(),), name="kllint-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    """End this worker as soon as its parent process is gone (nobody would read its results)."""
    while True:
        time.sleep(PARENT_POLL)
        if os.getppid() != parent:
            os._exit(1)


def _internal_error(item: Discovered, message: str) -> Outcome:
    return Outcome([], [], [f"{item.display}: internal error: {message}"])


def _run_chunk(chunk: list[tuple[int, Discovered, Settings]], track: bool,
               sites: bool = False) -> list[tuple[int, "Outcome"]]:
    """Analyse the files of one chunk with this worker's index; never raises for one file."""
    crash_on = {name for name in os.environ.get(CRASH_ENV, "").split(",") if name}
    results: list[tuple[int, Outcome]] = []
    for slot, item, settings in chunk:
        if _STATUS is not None:
            _STATUS[slot] = _STARTED
        if item.path.name in crash_on:  # test-only, see the module docstring
            os._exit(70)
        try:
            outcome = analyse_file(item, settings, _INDEXES.for_file(item.path), track, sites=sites)
        except BaseException as exc:  # noqa: BLE001 - one file must never stop the others
            outcome = _internal_error(item, describe(exc))
        if outcome.stopped:  # interrupted anywhere: nothing it shared is trusted again
            _INDEXES.drop()
        results.append((slot, outcome))
        if _STATUS is not None:
            _STATUS[slot] = _FINISHED
    return results


# -- in the parent ---------------------------------------------------------------------------

def _cost(task: Task) -> int:
    try:
        return max(task.item.path.stat().st_size, 1)
    except OSError:
        return 1


def chunks(tasks: list[Task], jobs: int) -> list[list[Task]]:
    """The tasks cut into chunks, deterministically. An import root that holds at most 1/jobs of
    all bytes is one chunk: the worker that takes it parses and indexes its modules alone (two
    workers on one root would both parse its helpers). A larger root is cut by folder into
    chunks of at most about 1/(CHUNKS_PER_JOB*jobs) of all bytes (at least one file), so that
    the workers share it. Chunks are ordered by import root, the costliest root first, and within
    a root the largest chunks first: the longest work starts first, and a worker that leaves a
    root never comes back to it."""
    cost = {task.position: _cost(task) for task in tasks}
    total = sum(cost.values())
    target = max(total / (max(jobs, 1) * CHUNKS_PER_JOB), 1)
    by_root: dict[Path, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: (str(t.item.path.parent), t.item.path.name, t.position)):
        by_root.setdefault(package_root(task.item.path)[0], []).append(task)
    placed: list[tuple[int, str, int, list[Task]]] = []
    for root, members in by_root.items():
        weight_of_root = sum(cost[t.position] for t in members)
        if weight_of_root * max(jobs, 1) <= total:
            placed.append((-weight_of_root, str(root), -weight_of_root, members))
            continue
        groups: dict[Path, list[Task]] = {}
        for task in members:
            groups.setdefault(task.item.path.parent, []).append(task)
        for folder in sorted(groups, key=str):
            current: list[Task] = []
            weight = 0
            for task in groups[folder]:
                if current and weight + cost[task.position] > target:
                    placed.append((-weight_of_root, str(root), -weight, current))
                    current, weight = [], 0
                current.append(task)
                weight += cost[task.position]
            if current:
                placed.append((-weight_of_root, str(root), -weight, current))
    placed.sort(key=lambda entry: entry[:3])
    return [chunk for _, _, _, chunk in placed]


@contextmanager
def _elsewhere(neutral: str) -> Iterator[None]:
    """Run the block, which starts worker processes, with `neutral` as the current folder (see
    the module docstring)."""
    home = os.getcwd()
    os.chdir(neutral)
    try:
        yield
    finally:
        os.chdir(home)


def _executor(workers: int, status: Any, home: str) -> ProcessPoolExecutor:
    """A pool whose workers go to `home` (this process's folder) before their first task; to be
    created and submitted to in `_elsewhere`."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(status, home))


def _terminate(executor: ProcessPoolExecutor) -> None:
    """End the workers now (after Ctrl+C or SIGTERM: they ignore SIGINT and would finish their
    chunk) and reap them, so that no worker outlives the run."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for process in processes:
        try:
            process.terminate()
        except Exception:  # noqa: BLE001
            pass
    for process in processes:
        try:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(5)
        except Exception:  # noqa: BLE001
            pass
    try:
        executor.shutdown(wait=True, cancel_futures=True)
    except Exception:  # noqa: BLE001
        pass


def _round(tasks: list[Task], jobs: int, track: bool, done: Done,
           neutral: str, sites: bool = False) -> tuple[list[Task], list[Task]]:
    """One pool over `tasks`, started from `neutral`; returns (unfinished tasks, suspects) after
    a break, else ([], [])."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    home = os.getcwd()
    slot_of = {task.position: slot for slot, task in enumerate(tasks)}
    parts = chunks(tasks, jobs)
    finished: set[int] = set()
    executor: ProcessPoolExecutor | None = None
    try:
        futures: dict[Future, list[Task]] = {}
        with _elsewhere(neutral):
            status = multiprocessing.get_context("spawn").RawArray("b", len(tasks))
            executor = _executor(min(jobs, len(parts)), status, home)
            for part in parts:
                futures[executor.submit(_run_chunk, [(slot_of[t.position], t.item, t.settings) for t in part],
                                        track, sites)] = part
        pending = set(futures)
        while pending:
            completed, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in completed:
                try:
                    results = future.result()
                except BrokenProcessPool:
                    continue
                except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be pickled
                    for task in futures[future]:
                        finished.add(task.position)
                        done(task.position, _internal_error(task.item, f"worker failed: {describe(exc)}"))
                    continue
                for slot, outcome in results:
                    task = tasks[slot]
                    finished.add(task.position)
                    done(task.position, outcome)
    except BaseException:
        if executor is not None:
            _terminate(executor)
        raise
    executor.shutdown(wait=True, cancel_futures=True)
    unfinished = [task for task in tasks if task.position not in finished]
    suspects = [task for task in unfinished if status[slot_of[task.position]] == _STARTED]
    return unfinished, suspects


def _isolate(tasks: list[Task], track: bool, done: Done, neutral: str, sites: bool = False) -> None:
    """Run each task alone in a one-worker pool (started from `neutral`); a task that breaks it
    gets an internal error."""
    from concurrent.futures.process import BrokenProcessPool

    home = os.getcwd()
    executor: ProcessPoolExecutor | None = None
    try:
        for task in tasks:
            with _elsewhere(neutral):
                if executor is None:
                    executor = _executor(1, None, home)
                future = executor.submit(_run_chunk, [(0, task.item, task.settings)], track, sites)
            try:
                [(_, outcome)] = future.result()
            except BrokenProcessPool:
                outcome = _internal_error(task.item, "the worker process crashed while checking this file "
                                                     "(segmentation fault, out of memory or killed); not checked")
                executor.shutdown(wait=True)
                executor = None
            except Exception as exc:  # noqa: BLE001
                outcome = _internal_error(task.item, f"worker failed: {describe(exc)}")
            done(task.position, outcome)
    except BaseException:
        if executor is not None:
            _terminate(executor)
            executor = None
        raise
    finally:
        if executor is not None:
            executor.shutdown(wait=True)


def analyse(tasks: list[Task], jobs: int, track: bool, done: Done, sites: bool = False) -> None:
    """Analyse `tasks` with up to `jobs` worker processes; `done(position, outcome)` is called
    once per task, in completion order, in this process (also after worker crashes). `sites`:
    the outcomes list the KL estimates seen (`kllint check --show-sites`)."""
    # the workers start from `neutral` (see the module docstring); it is removed after they ended
    with tempfile.TemporaryDirectory(prefix="kllint-workers-", ignore_cleanup_errors=True) as neutral:
        remaining = list(tasks)
        while remaining:
            unfinished, suspects = _round(remaining, jobs, track, done, neutral, sites)
            if not unfinished:
                return
            if not suspects:  # broke before any file started: the workers cannot run at all
                indexes = IndexPerRoot()
                for task in unfinished:
                    done(task.position, analyse_file(task.item, task.settings, indexes.for_file(task.item.path),
                                                     track, sites=sites))
                return
            _isolate(suspects, track, done, neutral, sites)
            isolated = {task.position for task in suspects}
            remaining = [task for task in unfinished if task.position not in isolated]
