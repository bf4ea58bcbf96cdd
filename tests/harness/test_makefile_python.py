"""The Makefile's choice of the CPython the venv is made from (docs/simulation.md, "The
interpreter"), and what `make bootstrap` says of a venv made from another one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAMP = ".venv/.bootstrapped"  # -o: taken as up to date, so no test ever rebuilds the venv


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _chosen(*args: str) -> str:
    return _make("--eval=print-py: ; @echo $(PY)", *args, "print-py").stdout.strip()


def _distribution_python_is_recent() -> bool:
    done = subprocess.run(["/usr/bin/python3", "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
                          capture_output=True) if os.path.exists("/usr/bin/python3") else None
    return done is not None and done.returncode == 0


@pytest.mark.skipif(not _distribution_python_is_recent(),
                    reason="no /usr/bin/python3 of 3.11 or later: the Makefile takes the PATH's")
def test_the_venv_is_made_from_the_distributions_python_unless_told_otherwise():
    assert _chosen() == "/usr/bin/python3"
    assert _chosen("PY=python3.11") == "python3.11"


@pytest.mark.skipif(not (ROOT / STAMP).exists(), reason="no bootstrapped .venv here")
def test_bootstrap_says_when_the_venv_runs_on_another_python(tmp_path):
    other = tmp_path / "python3"  # a Python that says it lives elsewhere
    other.write_text("#!/bin/sh\necho /elsewhere/bin/python3.11\n")
    other.chmod(0o755)
    said = _make("-o", STAMP, "venv-interpreter", f"PY={other}")
    assert said.returncode == 0
    assert "runs on" in said.stderr and "not on /elsewhere/bin/python3.11" in said.stderr
    assert "remove .venv and run make again" in said.stderr
    made = subprocess.run([str(ROOT / ".venv/bin/python"), "-c",
                           "import os, sys; print(os.path.realpath(sys._base_executable))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    same = _make("-o", STAMP, "venv-interpreter", f"PY={made}")
    assert (same.returncode, same.stderr) == (0, "")
