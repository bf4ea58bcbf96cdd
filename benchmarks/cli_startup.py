"""How long `harness` takes to answer when it has little to do: `--help`, and refusing a bad
config, a malformed minimal.json or a missing history. Each command is run in a fresh
interpreter, as a user (or a test) runs it, alternating between this checkout and, with
--before, another one, so both see the same machine; the median of --runs is printed with
the heavy libraries the command had imported by its end. Compare checkouts whose sources are
both compiled (`make bytecode`; with PYTHONDONTWRITEBYTECODE set, as here, a fresh worktree
has none and compiles every module at each start): the header says which are.

    .venv/bin/python benchmarks/cli_startup.py --runs 7 --before /path/to/older/checkout
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: scaffolding
from support.machine import what_ran  # noqa: E402

HEAVY = ("pandas", "pyspark", "pyarrow", "numpy", "paramiko", "confluent_kafka", "jinja2",
         "matplotlib", "duckdb")
COMMANDS = {
    "--help": ["--help"],
    "run, a config that does not exist": ["run", "--config", "nosuch"],
    "simulate --replay, a malformed file": ["simulate", "--replay", "minimal.json"],
    "reproduce --schedule, a malformed file": ["reproduce", "--schedule", "minimal.json"],
    "check, a Jepsen history that does not exist": ["check", "missing.edn"],
    "check, a history.jsonl that does not exist": ["check", "missing.jsonl"],
    "campaign, a file that does not exist": ["campaign", "missing.toml"],
}
PROBE = ("import sys; from harness import cli; code = cli.main(sys.argv[1:]); "
         f"print('heavy:' + ','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))); "
         "sys.exit(code)")


def once(tree: Path, argv: list[str], scratch: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HARNESS_RESULTS": str(scratch / "results")}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=scratch, env=env,
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 3):
        raise SystemExit(f"{tree}: harness {' '.join(argv)} exited {done.returncode}:\n"
                         f"{done.stderr[-2000:]}")
    return wall, done.stdout.splitlines()[-1].removeprefix("heavy:")


def compiled(tree: Path) -> bool:
    return any((tree / "harness" / "__pycache__").glob("cli.*.pyc"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--before", type=Path, help="another checkout to compare with")
    args = ap.parse_args()
    print(what_ran(), flush=True)
    trees = {"this": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        scratch = Path(tmp)
        (scratch / "minimal.json").write_text('{"format": 1, "config": {}, "schedule": "x"}')
        print("bytecode: " + ", ".join(f"{name} {'yes' if compiled(tree) else 'NO'}"
                                       for name, tree in trees.items()))
        print(f"{'command':42s}" + "".join(f"{name:>10s}" for name in trees)
              + ("     ratio" if args.before else "") + "  heavy libraries imported (this)")
        for label, argv in COMMANDS.items():
            walls: dict[str, list[float]] = {name: [] for name in trees}
            heavy = ""
            for _ in range(args.runs):
                for name, tree in trees.items():
                    wall, imported = once(tree, argv, scratch)
                    walls[name].append(wall)
                    heavy = imported if name == "this" else heavy
            medians = {name: statistics.median(w) for name, w in walls.items()}
            ratio = f"{medians['before'] / medians['this']:9.2f}x" if args.before else ""
            print(f"{label:42s}" + "".join(f"{m:9.2f}s" for m in medians.values()) + ratio
                  + f"  {heavy or '-'}")


if __name__ == "__main__":
    main()
