"""`python -m kllint`. Python puts the current folder first on `sys.path` for `-m`, so a checked
project's `json.py` or `typing.py` would be imported in place of the standard library's (issue
35): that entry goes before anything else is imported (this file imports only modules the
interpreter has loaded already, and no `from __future__`). It is kept, last, only when kllint
itself was imported from that folder (a source checkout), for the worker processes."""
import os
import sys


def _drop_the_current_folder() -> None:
    try:
        here = os.getcwd()
    except OSError:  # removed: nothing can be imported from it
        here = None
    if sys.path and sys.path[0] in ("", here):
        first = os.path.abspath(sys.path.pop(0)) if here is not None else None
        home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if first == home:
            sys.path.append(home)


_drop_the_current_folder()

from kllint.cli import main  # noqa: E402 - after the path is made safe

if __name__ == "__main__":
    main()
