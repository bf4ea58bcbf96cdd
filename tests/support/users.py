"""A real unprivileged local user for the hardening tests: created with useradd if missing
(removed again if the tests made it), acting through `runuser`; and a stand-in for /tmp that
user can write to. Tests that use them run as root."""

from __future__ import annotations

import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ATTACKER = "kch-attacker"


@pytest.fixture(scope="module")
def attacker() -> Iterator[pwd.struct_passwd]:
    created = False
    try:
        pw = pwd.getpwnam(ATTACKER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        ATTACKER], check=True, capture_output=True)
        created = True
        pw = pwd.getpwnam(ATTACKER)
    assert pw.pw_uid != 0
    yield pw
    if created:
        subprocess.run(["userdel", ATTACKER], capture_output=True)


def as_attacker(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["runuser", "-u", ATTACKER, "--", *argv], capture_output=True,
                          text=True, timeout=60, cwd="/")
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A stand-in for /tmp: root's, world-writable, sticky, reachable by everyone."""
    d = Path(tempfile.mkdtemp(prefix="kch-hardening-tmp-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def reaches(address: str, port: int) -> bool:
    """Whether the unprivileged user connects to address:port (from the root namespace)."""
    done = as_attacker("timeout", "3", "bash", "-c", f"exec 3<>/dev/tcp/{address}/{port}",
                       check=False)
    return done.returncode == 0
