"""`kllint server` without the `server` extra: a one-line error naming it, exit 2."""
from __future__ import annotations

import subprocess
import sys


def test_server_without_pygls_says_which_extra_to_install():
    hide = "import sys; sys.modules['pygls'] = None; sys.argv = ['kllint', 'server']; from kllint.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("kllint: error: the language server needs pygls: pip install 'pygls>=2,<3' "
                                   "(kllint's `server` extra)")
    assert proc.stdout == ""
