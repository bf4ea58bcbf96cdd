"""The simulator under PyPy (harness/pypy.py): the same bytes as under CPython, and a search
that simulates under PyPy gives the rows one under CPython gives.

`make bootstrap` installs PyPy; these tests fail, rather than skip, when it is missing, because
`harness simulate --seeds --interpreter pypy` is claimed to work."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from harness import pypy
from harness import simulate as simulate_module
from harness.campaign_spec import load_spec
from harness.config import TestConfig, load_config, typed
from harness.sim_run import as_simulated, simulate_into, simulated, with_seed
from harness.sim_worker import serve
from harness.simulate import DETERMINISM_FILES, search
from harness.test import Test
from tests.harness.test_simulate import VALIDATION


def cell(name: str, limit: int) -> TestConfig:
    _, cells = load_spec(VALIDATION)
    config = typed(next(c.resolved for c in cells if c.config == name))
    return simulated(replace(config, time_limit=float(limit)))


@pytest.fixture(scope="module")
def child():
    python = pypy.binary()
    assert python is not None, "no PyPy: `make bootstrap` installs it (python -m harness.pypy install)"
    sim = pypy.PypySimulator(python)
    yield sim
    sim.close()


def test_the_installed_pypy_is_pypy_for_python_3_11():
    python = pypy.binary()
    assert python is not None, "no PyPy: `make bootstrap` installs it"
    assert pypy.check(python).startswith("3.11.")


@pytest.mark.parametrize("name,seed", [("acks1", 1), ("hwm-truncation", 2)])
def test_pypy_writes_the_same_bytes_as_cpython(tmp_path, child, name, seed):
    """A weakness cell under its fault mix, 10 simulated seconds: byte-identical history,
    events and schedule from the two interpreters."""
    config = with_seed(cell(name, 10), seed)
    here, there = tmp_path / "cpython", tmp_path / "pypy"
    here.mkdir()
    there.mkdir()
    simulate_into(Test.of(config, here, check=False), here, keep_going=True)
    reply = child.simulate(config, there)
    assert reply["stats"]["send-ok"] > 100
    for name in DETERMINISM_FILES:
        assert (here / name).read_bytes() == (there / name).read_bytes(), name


def test_a_search_under_pypy_gives_the_rows_of_a_search_under_cpython():
    config = cell("acks1", 8)
    rows = {}
    for interpreter in ("cpython", "pypy"):
        summary = search(config, range(1, 4), jobs=1, interpreter=interpreter)
        rows[interpreter] = [{k: v for k, v in r.items() if k != "wall_s"} for r in summary.rows]
    assert rows["pypy"] == rows["cpython"]
    assert any(r["valid"] is False for r in rows["cpython"])  # acks=1 loses records: not vacuous
    assert not any(r["valid"] == "error" for r in rows["cpython"])


@pytest.mark.parametrize("broken", ["/nonexistent/pypy", "/bin/false"])
def test_auto_falls_back_to_cpython_when_pypy_cannot_start_or_dies(monkeypatch, capsys, broken):
    """/nonexistent cannot start; /bin/false starts and exits before it answers."""
    monkeypatch.setattr(simulate_module, "_pypy", None)
    monkeypatch.setattr(simulate_module, "_pypy_broken", False)
    monkeypatch.setattr(simulate_module, "PYPY_MIN_SEEDS_PER_WORKER", 1)  # "auto" tries PyPy
    config = cell("acks1", 4)
    want = search(config, [1], jobs=1, interpreter="cpython").rows
    monkeypatch.setenv(pypy.ENV_VAR, broken)
    got = search(config, [1, 2], jobs=1, interpreter="auto").rows
    assert "PyPy failed" in capsys.readouterr().err
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in got[:1]] == \
        [{k: v for k, v in r.items() if k != "wall_s"} for r in want]
    assert got[1]["valid"] != "error"
    # "pypy" does not fall back: each seed is an error row, and the search goes on
    monkeypatch.setattr(simulate_module, "_pypy_broken", False)
    rows = search(config, [1, 2], jobs=1, interpreter="pypy").rows
    assert [r["valid"] for r in rows] == ["error", "error"]


def test_auto_chooses_pypy_for_long_searches_only(monkeypatch):
    choose = simulate_module.chosen_interpreter
    n = simulate_module.PYPY_MIN_SEEDS_PER_WORKER
    assert choose("auto", 2 * n, 2, None, None) == "auto"  # PyPy, falling back if it fails
    assert choose("auto", 2 * n - 1, 2, None, None) == "cpython"
    assert choose("auto", 100 * n, 2, 1, None) == "cpython"  # a hunt for the first failure
    assert choose("auto", 1, 1, 1, "spark://x:7077") == "auto"  # each executor decides
    assert choose("pypy", 1, 1, 1, None) == "pypy"
    assert choose("cpython", 100 * n, 1, None, None) == "cpython"
    monkeypatch.setenv(pypy.ENV_VAR, "none")
    assert choose("auto", 100 * n, 1, None, None) == "cpython"


def test_a_failing_job_is_the_seed_s_error_and_the_child_goes_on(tmp_path, child):
    # a config the child refuses when it loads the job (3 nodes, replication factor 3)
    with pytest.raises(pypy.SimulationFailed, match="nodes"):
        child.simulate(replace(cell("safe", 2), nodes=3), tmp_path / "x")
    (tmp_path / "ok").mkdir()
    assert child.simulate(with_seed(cell("safe", 2), 1), tmp_path / "ok")["virtual_s"] > 2


def test_the_worker_answers_a_broken_job_with_an_error_and_goes_on(tmp_path):
    good = as_simulated(load_config("fast", ["nodes=4", "topic.partitions=1", "time_limit=2",
                                             "nemesis.faults=[]"]))
    (tmp_path / "ok").mkdir()
    jobs = io.StringIO(json.dumps({"config": {"nodes": "many"}, "folder": str(tmp_path / "x")}) + "\n"
                       + json.dumps({"config": good, "folder": str(tmp_path / "ok")}) + "\n")
    answers = io.StringIO()
    serve(jobs, answers)
    first, second = (json.loads(line) for line in answers.getvalue().splitlines())
    assert "error" in first
    assert "error" not in second and second["virtual_s"] > 2
    assert (tmp_path / "ok" / "history.jsonl").stat().st_size > 0


def test_an_unknown_interpreter_is_a_clear_error():
    with pytest.raises(Exception, match="interpreter must be one of"):
        search(cell("safe", 2), [1], interpreter="jython")


RELEASE = """Origin: Debian
SHA256:
 aaaa 10 main/binary-amd64/Packages
 bbbb 20 main/binary-amd64/Packages.xz
"""


def test_the_release_and_packages_parsers():
    assert pypy._release_sha256(RELEASE, "main/binary-amd64/Packages.xz") == "bbbb"
    with pytest.raises(pypy.PypyError):
        pypy._release_sha256(RELEASE, "main/binary-arm64/Packages.xz")
    index = pypy.parse_packages("Package: pypy3\nVersion: 7.3.19\nDepends: a,\n b\nSHA256: cc\n\n"
                                "Package: pypy3\nVersion: 0\n\nPackage: zlib1g\nFilename: z.deb\n")
    assert index["pypy3"]["Version"] == "7.3.19"
    assert index["pypy3"]["Depends"] == "a,\nb"
    assert index["zlib1g"]["Filename"] == "z.deb"
