"""lazyfs binds mfusepy to libfuse 3 even when libfuse 2 is installed too, and refuses libfuse 2."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

PROBE = "from nemesis.lazyfs.libfuse import mfusepy; print(mfusepy.fuse_version_major)"


def _probe(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FUSE_LIBRARY_")}
    return subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
        timeout=60, check=False,
    )


@pytest.mark.skipif(not ctypes.util.find_library("fuse3"), reason="libfuse 3 is not installed")
def test_libfuse3_is_chosen_by_default() -> None:
    proc = _probe()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"


@pytest.mark.skipif(not ctypes.util.find_library("fuse"), reason="libfuse 2 is not installed")
def test_libfuse2_is_refused_with_a_clear_error() -> None:
    proc = _probe(FUSE_LIBRARY_NAME="fuse")
    assert proc.returncode != 0
    assert "lazyfs needs libfuse 3" in proc.stderr and "libfuse 2." in proc.stderr
