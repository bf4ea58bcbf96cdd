"""CPU time of SegmentLog appends and reads on real files, for two source trees side by side
(e.g. before and after the filesystem port, replication/fs.py), alternating runs.

    git archive <before> replication | tar -x -C /tmp/before
    .venv/bin/python benchmarks/segment_log_port.py /tmp/before . [--dir /tmp] [--rounds 10]

Each run: 40,000 appends of 1 record, 1,000 appends of 100 records (100-byte values), then
reads of all 100,000 in 500s; one segment (no roll, so no fsync: the CPU path only). CPU time
(`time.process_time`) rather than wall time, so that other work on the machine matters less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, tempfile, time
from pathlib import Path
import replication.segment_log as sl
assert sl.__file__.startswith(sys.argv[1]), sl.__file__
def run(batch, calls):
    with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:
        log = sl.SegmentLog(Path(d), segment_bytes=1 << 30)
        vals = [b"v" * 100] * batch
        t0 = time.process_time()
        for i in range(calls):
            log.append(0, vals, i)
        t_app = time.process_time() - t0
        t0, off = time.process_time(), 0
        while off < log.end_offset:
            off += len(log.read(off, 500))
        t_read = time.process_time() - t0
        log.close(clean=False)
    return t_app, t_read
a1, _ = run(1, 40000)
a100, r = run(100, 1000)
print(a1, a100, r)
"""
NAMES = ("append 1 record/call", "append 100 records/call", "read 500/call")


def _once(tree: Path, data_dir: str) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-P", "-c", CHILD, str(tree), data_dir], env=env,
                         check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--dir", default="/tmp", help="where the segment files go")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    trees = [args.before.resolve(), args.after.resolve()]
    runs: dict[Path, list[list[float]]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            runs[tree].append(_once(tree, args.dir))
    for i, name in enumerate(NAMES):
        before, after = (statistics.median(r[i] for r in runs[t]) for t in trees)
        print(f"{name}: before {before:.3f} s, after {after:.3f} s, after/before "
              f"{after / before:.3f} (medians of {args.rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
