"""PyPy for the simulator: where it is, how `make bootstrap` installs it, and a child process
that simulates seeds with it.

Why: a simulated run is pure Python in one thread, and PyPy's JIT runs it about twice as fast
as CPython once warm (docs/simulation.md, "Speed"). A long search (`--interpreter pypy`) runs
many seeds in each worker, whose PyPy child stays warm; a single `harness simulate` run, or
a search that ends within its first seeds, does not gain (PyPy's first run is slower than
CPython's), so CPython stays the default. The simulation's bytes do not depend on the
interpreter (tests/simulation/test_pypy.py holds the two to byte-identical runs), which is
what lets a search find a seed under PyPy and replay it exactly under CPython.

Where from: PyPy 3.11 is packaged by Debian 13 (trixie), not by bookworm, and not on PyPI.
`python -m harness.pypy install` fetches trixie's pypy3 and the shared libraries it links
(glibc 2.41 among them: bookworm's 2.36 is too old for it) from deb.debian.org, verifies them
as apt does (the suite's InRelease signature against this machine's Debian archive keyring,
then each file's SHA-256 down that chain), unpacks them under .venv/pypy without touching
the system, and writes `.venv/bin/pypy-sim`, which starts PyPy through trixie's own dynamic
loader with trixie's libraries, so nothing of the system's libc is mixed in.

The PyPy child imports only the simulation's closure (replication, simulation, workloads,
nemesis, harness.sim_run and harness.config): none of pandas, pyarrow, paramiko or Spark,
which PyPy here does not have. Checking stays on CPython, in the process that asked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.config import TestConfig

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
LAUNCHER = VENV / "bin" / "pypy-sim"
PREFIX = VENV / "pypy"

MIRROR = "http://deb.debian.org/debian"  # plain HTTP, as apt uses it: the signature is the trust
SUITE = "trixie"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# pypy3 and what its binaries link (its Depends), from the same suite, so they agree.
PACKAGES = ("pypy3", "pypy3-lib", "libc6", "libgcc-s1", "libexpat1", "libffi8", "libgdbm6t64",
            "libssl3t64", "libsqlite3-0", "libncursesw6", "libtinfo6", "liblzma5", "zlib1g",
            "libbz2-1.0")
PYTHON_VERSION = (3, 11)  # the language level the project is written for

NURSERY = "64MB"  # PYPY_GC_NURSERY of the simulating child, unless the environment sets one
ENV_VAR = "HARNESS_PYPY"  # a PyPy to use instead of the launcher (or "none": never use PyPy)
INTERPRETERS = ("auto", "pypy", "cpython")  # what a search may simulate under (harness.simulate)
# "auto" simulates under PyPy only in a search that gives each worker this many seeds and does
# not stop at its first failures: PyPy's first seeds are slower than CPython's. Against the
# venv's CPython (Debian's, built with PGO) the two tie at about 27-32 seeds a worker, and
# PyPy is 1.2x ahead at 64 (docs/simulation.md, "PyPy for searches").
PYPY_MIN_SEEDS_PER_WORKER = 32


class PypyError(RuntimeError):
    """PyPy could not be installed, started or asked to simulate."""


class SimulationFailed(RuntimeError):
    """The simulation itself raised, under PyPy: the seed's own error (CPython raises it too),
    not a broken child."""


# ---- where it is --------------------------------------------------------------------------------


def binary() -> str | None:
    """The PyPy that simulations may use: $HARNESS_PYPY, else the installed launcher; None
    when there is none (or HARNESS_PYPY=none)."""
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        return None if chosen == "none" else chosen
    return str(LAUNCHER) if os.access(LAUNCHER, os.X_OK) else None


# ---- installing ---------------------------------------------------------------------------------


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except OSError as e:
        raise PypyError(f"cannot fetch {url}: {e}") from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _verified_release(signed: bytes, keyring: Path) -> str:
    """The text of a signed InRelease, once gpgv accepts its signature."""
    with tempfile.NamedTemporaryFile(suffix=".InRelease") as f:
        f.write(signed)
        f.flush()
        r = subprocess.run(["gpgv", "--keyring", str(keyring), f.name], capture_output=True,
                           text=True)
    if r.returncode != 0:
        raise PypyError(f"the signature of {SUITE}'s InRelease does not verify against "
                        f"{keyring}: {r.stderr.strip()}")
    text = signed.decode()
    return text.split("\n\n", 1)[1].split("-----BEGIN PGP SIGNATURE-----")[0]


def _release_sha256(release: str, name: str) -> str:
    """The SHA-256 that a Release file gives for `name` (its SHA256 section)."""
    in_section = False
    for line in release.splitlines():
        if not line.startswith(" "):
            in_section = line.strip() == "SHA256:"
            continue
        if in_section:
            digest, _size, path = line.split()
            if path == name:
                return digest
    raise PypyError(f"{SUITE}'s Release lists no SHA-256 for {name}")


def parse_packages(text: str) -> dict[str, dict[str, str]]:
    """A Packages index as {package: {field: value}} (the first stanza of each name)."""
    out: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        name = fields.get("Package")
        if name and name not in out:
            out[name] = fields
    return out


def _write_launcher(prefix: Path, launcher: Path) -> None:
    lib = f"{prefix}/usr/lib/x86_64-linux-gnu:{prefix}/lib/x86_64-linux-gnu"
    launcher.write_text(
        "#!/bin/sh\n"
        "# PyPy 3.11 from Debian trixie (harness/pypy.py), started by trixie's own loader with\n"
        "# trixie's libraries, beside this system's. Written by `python -m harness.pypy install`.\n"
        f"exec {prefix}/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path {lib} "
        f'{prefix}/usr/bin/pypy3.11 "$@"\n')
    launcher.chmod(0o755)


def install(prefix: Path = PREFIX, launcher: Path = LAUNCHER, keyring: Path = KEYRING,
            log: IO[str] = sys.stderr) -> str:
    """Fetch, verify and unpack PyPy under `prefix`, write `launcher`; the version it prints."""
    if os.uname().machine != "x86_64":
        raise PypyError(f"only x86_64 is packaged here, not {os.uname().machine}")
    for tool in ("gpgv", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise PypyError(f"{tool} is needed to verify and unpack Debian's packages")
    release = _verified_release(_get(f"{MIRROR}/dists/{SUITE}/InRelease"), keyring)
    index_name = "main/binary-amd64/Packages.xz"
    packed = _get(f"{MIRROR}/dists/{SUITE}/{index_name}")
    if _sha256(packed) != _release_sha256(release, index_name):
        raise PypyError(f"{index_name} does not match its SHA-256 in {SUITE}'s Release")
    index = parse_packages(lzma.decompress(packed).decode())
    staging = prefix.with_name(prefix.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in PACKAGES:
            fields = index.get(name)
            if fields is None:
                raise PypyError(f"{SUITE} has no package {name}")
            data = _get(f"{MIRROR}/{fields['Filename']}")
            if _sha256(data) != fields["SHA256"]:
                raise PypyError(f"{fields['Filename']} does not match its SHA-256 in the index")
            deb = Path(tmp) / f"{name}.deb"
            deb.write_bytes(data)
            subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True)
            print(f"pypy: {name} {fields['Version']}", file=log)
    shutil.rmtree(prefix, ignore_errors=True)
    staging.rename(prefix)
    # The launcher names `prefix`: written (atomically) only once the tree is in place.
    tmp_launcher = launcher.with_name(launcher.name + ".new")
    _write_launcher(prefix, tmp_launcher)
    version = check(str(tmp_launcher))
    tmp_launcher.rename(launcher)
    return version


def check(python: str) -> str:
    """The interpreter's version line, or a clear error if it is not a PyPy for Python 3.11."""
    code = ("import sys, platform; print(platform.python_implementation(), "
            "'%d.%d' % sys.version_info[:2], sys.version.replace(chr(10), ' '))")
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise PypyError(f"cannot start {python}: {e}") from None
    impl, _, rest = r.stdout.strip().partition(" ")
    want = ".".join(map(str, PYTHON_VERSION))
    if r.returncode != 0 or impl != "PyPy" or not rest.startswith(want):
        raise PypyError(f"{python} is not a PyPy for Python {want}: "
                        f"{(r.stdout + r.stderr).strip()[-400:]}")
    return rest.partition(" ")[2]


# ---- a child that simulates -----------------------------------------------------------------------


class PypySimulator:
    """A PyPy child process (harness/sim_worker.py) that simulates one seed per request, into
    the folder it is given, and stays up so that its JIT stays warm."""

    def __init__(self, python: str) -> None:
        self.python = python
        # A larger young generation than PyPy's default: a simulated run allocates about
        # 1.7 GB, nearly all of it short-lived (frames, messages, history lines). 64 MB was
        # 3-5 % faster than 16 MB over whole series of runs, and 16 MB faster than PyPy's
        # default (docs/simulation.md, "Speed"); the heap grows to about 0.5 GB.
        env = {"PYPY_GC_NURSERY": NURSERY, **os.environ, "PYTHONPATH": str(ROOT)}
        try:
            self.proc = subprocess.Popen(
                [python, "-m", "harness.sim_worker"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True, bufsize=1)
        except OSError as e:
            raise PypyError(f"cannot start {python}: {e}") from None

    def simulate(self, config: TestConfig, folder: Path, *,
                 invariants: bool = True) -> dict[str, Any]:
        """Simulate `config` (its seed included) into `folder` as harness.sim_run.simulate_into
        does with keep_going; what the child reports: virtual_s, wall_s, cpu_s, stats, net.
        The config crosses the pipe as its record(); the child loads it back typed."""
        job = {"config": config.record(), "folder": str(folder), "invariants": invariants}
        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError as e:
            raise PypyError(f"the PyPy simulator ({self.python}) is gone: {e}") from None
        if not line:
            raise PypyError(f"the PyPy simulator ({self.python}) exited with "
                            f"{self.proc.wait()} (its stderr says why)")
        reply = json.loads(line)
        if reply.get("error"):
            raise SimulationFailed(f"under PyPy: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.pypy", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["install", "where"])
    args = ap.parse_args(argv)
    try:
        if args.command == "install":
            print(f"pypy: {install()} at {LAUNCHER}", file=sys.stderr)
        else:
            found = binary()
            if found is None:
                print("no PyPy (make bootstrap installs it)", file=sys.stderr)
                return 1
            print(f"{found}: {check(found)}")
    except PypyError as e:
        print(f"pypy: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
