"""kllint's language server (`kllint server`, needs the `server` extra: pygls).

`kllint.server.documents` checks and fixes an editor's buffer without any LSP;
`kllint.server.convert` turns kllint's diagnostics into LSP ones; `kllint.server.lsp` is the
pygls server itself. Importing this package does not import pygls.
"""
from __future__ import annotations


def serve() -> int:
    """Run the language server over stdio (imports pygls); returns the exit status (0 after a
    `shutdown` request, else 1).

    Raises:
        ImportError: pygls is not installed (kllint's `server` extra: `pip install 'pygls>=2,<3'`).
    """
    from kllint.server.lsp import serve as run

    return run()
