"""Porcupine's kv corpus checked by our checker and by Porcupine itself, side by side.

    .venv/bin/python benchmarks/porcupine_kv.py [--porcupine DIR] [--repeat 7] [--no-go]

DIR is a checkout of github.com/anishathalye/porcupine, or a bare git directory of one (as
the `fetch` mirror /work/.mirror/anishathalye+porcupine/repo, the default; $PORCUPINE_DIR
overrides it); a git directory is exported to a temporary checkout first. Nothing is
downloaded: Porcupine has no dependencies, and Go builds it from that checkout.

For each of test_data/kv/c01|c10|c50-ok|bad.txt it prints our verdict (the published one is
in the file name: ok = linearizable, bad = not), our search time and Porcupine's. Both time
the same work: the history already parsed, then partitioning by key and the search
(`checkers.linear.check` in this process; Porcupine's own `BenchmarkKv*` benchmarks, which
time `CheckEvents`, on all cores). Ours is the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from checkers.linear import KV, check, pair, read_events

MIRROR = Path("/work/.mirror/anishathalye+porcupine/repo")
FILES = ["c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad"]
# Porcupine's benchmark names for the files (porcupine_test.go)
GO_BENCH = {"c01-ok": "Kv1ClientOk", "c01-bad": "Kv1ClientBad", "c10-ok": "Kv10ClientsOk",
            "c10-bad": "Kv10ClientsBad", "c50-ok": "Kv50ClientsOk", "c50-bad": "Kv50ClientsBad"}


def checkout(source: Path, scratch: Path) -> Path:
    """A directory holding Porcupine's sources and test_data/kv."""
    if (source / "test_data" / "kv").is_dir():
        return source
    if not (source / "HEAD").is_file():
        raise SystemExit(f"{source} is neither a Porcupine checkout nor a git directory")
    archive = subprocess.run(["git", f"--git-dir={source}", "archive", "HEAD"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(scratch, filter="data")
    return scratch


def ours(path: Path, repeat: int) -> tuple[object, float, int]:
    """(verdict, median seconds, configurations explored) of checking one file."""
    ops = pair(read_events(path))  # parsing is not timed, as in Porcupine's benchmark
    times, verdict = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        verdict = check(ops, KV())
        times.append(time.perf_counter() - started)
    assert verdict is not None
    return verdict["valid"], statistics.median(times), verdict["explored"]


def porcupine(tree: Path) -> dict[str, float]:
    """Porcupine's own kv benchmarks: seconds per CheckEvents call, by benchmark name."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": os.environ.get("GOPROXY", "off")}
    proc = subprocess.run(
        ["go", "test", "-run", "^$", "-bench", "^BenchmarkKv[0-9]", "-benchtime", "2s"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"go test failed:\n{proc.stdout}\n{proc.stderr}")
    found = {}
    for m in re.finditer(r"^Benchmark(\w+?)-\d+\s+\d+\s+([\d.]+) ns/op", proc.stdout, re.M):
        found[m.group(1)] = float(m.group(2)) / 1e9
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--porcupine", type=Path,
                   default=Path(os.environ.get("PORCUPINE_DIR", MIRROR)))
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--no-go", action="store_true", help="only run our checker")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="porcupine-") as scratch:
        tree = checkout(args.porcupine, Path(scratch))
        go = {} if args.no_go else porcupine(tree)
        header = (f"{'file':<8} {'published':>9} {'ours':>6} {'explored':>9} {'ours ms':>9} "
                  f"{'porcupine ms':>12} {'ratio':>6}")
        print(header)
        print("-" * len(header))
        ratios, agree = [], 0
        for name in FILES:
            expected = name.endswith("-ok")
            valid, seconds, explored = ours(tree / "test_data" / "kv" / f"{name}.txt",
                                            args.repeat)
            agree += valid is expected
            theirs = go.get(GO_BENCH[name])
            ratio = seconds / theirs if theirs else None
            if ratio is not None:
                ratios.append(ratio)
            print(f"{name:<8} {str(expected):>9} {str(valid):>6} {explored:>9} "
                  f"{seconds * 1e3:>9.3f} "
                  f"{'-' if theirs is None else f'{theirs * 1e3:.3f}':>12} "
                  f"{'-' if ratio is None else f'{ratio:.2f}x':>6}", flush=True)
        print(f"\nverdicts as published: {agree}/{len(FILES)}")
        if ratios:
            print(f"median time ratio (ours / Porcupine): {statistics.median(ratios):.2f}x")
    return 0 if agree == len(FILES) else 1


if __name__ == "__main__":
    sys.exit(main())
