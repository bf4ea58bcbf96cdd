"""`harness serve`: browse the results folder over HTTP, on 127.0.0.1 only, read-only.

Only GET and HEAD exist; every other method gets 501 from the base handler. A path that
resolves (symlinks included) outside the results folder is answered 404, so a link planted in
a run folder cannot expose the rest of the file system.
"""

from __future__ import annotations

import functools
import os
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.report.campaign_index import write_results_index

HOST = "127.0.0.1"


class ResultsHandler(SimpleHTTPRequestHandler):
    """Static files under `directory`; nothing outside it, nothing written."""

    def send_head(self) -> Any:  # the base returns an open file or None
        root = os.path.realpath(self.directory)
        target = os.path.realpath(self.translate_path(self.path))
        if target != root and not target.startswith(root + os.sep):
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        return super().send_head()


def make_server(results_dir: Path, port: int) -> ThreadingHTTPServer:
    """A server for `results_dir` bound to 127.0.0.1:`port` (0 picks a free port)."""
    handler = functools.partial(ResultsHandler, directory=str(Path(results_dir).resolve()))
    return ThreadingHTTPServer((HOST, port), handler)


def serve(results_dir: Path, port: int) -> None:
    """Refresh results/index.html, then serve `results_dir` until interrupted."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"{results_dir}: no results folder to serve")
    write_results_index(results_dir)
    with make_server(results_dir, port) as server:
        host, bound = server.server_address[:2]
        print(f"serving {results_dir.resolve()} at http://{host}:{bound}/ (Ctrl-C to stop)",
              flush=True)
        server.serve_forever()
