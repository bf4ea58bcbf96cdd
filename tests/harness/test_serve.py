"""`harness serve`: a real HTTP server on 127.0.0.1 over a results folder, queried over TCP."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_report import write_run_folder

from harness.serve import make_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path]]:
    tmp_path = tmp_path_factory.mktemp("serve")
    results = tmp_path / "results"
    run = write_run_folder(results / "t" / "20260101T000000-s0")
    (results / "index.html").write_text("<html>index</html>")
    (tmp_path / "secret.txt").write_text("not for the web")
    (run / "escape").symlink_to(tmp_path / "secret.txt")
    srv = make_server(results, 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[0], srv.server_address[1], results
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _request(host: str, port: int, method: str, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_binds_to_loopback_only(server: tuple[str, int, Path]) -> None:
    assert server[0] == "127.0.0.1"


def test_serves_index_and_run_files(server: tuple[str, int, Path]) -> None:
    host, port, results = server
    assert _request(host, port, "GET", "/") == (200, b"<html>index</html>")
    status, body = _request(host, port, "GET", "/t/20260101T000000-s0/history.jsonl")
    assert status == 200
    assert body == (results / "t" / "20260101T000000-s0" / "history.jsonl").read_bytes()
    assert _request(host, port, "HEAD", "/t/20260101T000000-s0/test.json")[0] == 200


@pytest.mark.parametrize("path", ["/../secret.txt", "/t/../../secret.txt",
                                  "/%2e%2e/secret.txt", "/t/20260101T000000-s0/escape"])
def test_nothing_outside_the_results_folder(server: tuple[str, int, Path], path: str) -> None:
    status, body = _request(server[0], server[1], "GET", path)
    assert status == 404 and b"not for the web" not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_read_only(server: tuple[str, int, Path], method: str) -> None:
    host, port, results = server
    assert _request(host, port, method, "/index.html")[0] == 501
    assert (results / "index.html").read_text() == "<html>index</html>"
