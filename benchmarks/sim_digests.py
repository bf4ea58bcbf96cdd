"""Digests of simulated runs, to hold two trees' simulators byte for byte against each other.

    cd TREE && .venv/bin/python benchmarks/sim_digests.py --seeds 1-10 [--without-effects] > D.txt
    cd TREE && .venv/bin/python benchmarks/sim_digests.py --seeds 1-10 --verdicts > V.txt

For every cell of a campaign (default campaigns/validation.toml) and every seed, simulates the
cell as `harness simulate --campaign FILE --cell CONFIG/MIX` does and prints one line,
`CONFIG/MIX/SEED SHA256` of history.jsonl then events.jsonl. Run it in each tree and `diff`
the outputs. `--without-effects` takes the fault kinds' `"effects"` out of the history's
nemesis operations first, so a tree from before they were recorded compares equal on
everything else. `--verdicts` prints, instead of the digest, what a search decides of the
seed (checked as `harness simulate` checks it): `valid=True|False|unknown`, the anomaly
classes the checker found and the invariants violated in the run, for two trees whose
histories differ on purpose (a change of byte sizes or timing) but whose verdicts should
not. No assertions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkers.check import check_path  # noqa: E402
from harness import store  # noqa: E402
from harness.campaign_spec import load_spec  # noqa: E402
from harness.config import typed  # noqa: E402
from harness.sim_run import simulate_into, simulated, with_seed  # noqa: E402
from harness.test import Test  # noqa: E402


def without_effects(line: bytes) -> bytes:
    if b'"effects"' not in line:
        return line
    op = json.loads(line)
    if isinstance(op.get("value"), dict):
        op["value"].pop("effects", None)
    return (json.dumps(op) + "\n").encode()


def digest(folder: Path, strip: bool) -> str:
    h = hashlib.sha256()
    for name in ("history.jsonl", "events.jsonl"):
        path = folder / name
        lines = path.read_bytes().splitlines(keepends=True) if path.exists() else []
        for line in lines:
            h.update(without_effects(line) if strip and name == "history.jsonl" else line)
    return h.hexdigest()[:16]


def verdict(folder: Path) -> str:
    """The checker's verdict on a simulated run folder and the invariants it violated."""
    results = check_path(folder, backend="native")
    anomalies = sorted(k for k, v in results.get("anomalies", {}).items() if v.get("count"))
    path = folder / "invariants.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    invariants = sorted({json.loads(line)["name"] for line in lines if line.strip()})
    return (f"valid={results.get('valid')} anomalies={','.join(anomalies) or '-'} "
            f"invariants={','.join(invariants) or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", type=Path, default=ROOT / "campaigns" / "validation.toml")
    parser.add_argument("--seeds", default="1-3", help="A-B")
    parser.add_argument("--without-effects", action="store_true")
    parser.add_argument("--verdicts", action="store_true", help="verdicts instead of digests")
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    _, cells = load_spec(args.campaign)
    seen = set()
    for cell in cells:
        if (cell.config, cell.nemesis) in seen:
            continue  # the campaign lists each cell once per campaign seed; --seeds sets them
        seen.add((cell.config, cell.nemesis))
        config = simulated(typed(cell.resolved))
        for seed in range(int(lo), int(hi or lo) + 1):
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                test = Test.of(with_seed(config, seed), folder, check=False)
                simulate_into(test, folder, keep_going=True)
                if args.verdicts:
                    store.write_test_json(folder, test.config, ["harness", "simulate"], 0.0)
                    line = verdict(folder)
                else:
                    line = digest(folder, args.without_effects)
                print(f"{cell.config}/{cell.nemesis}/{seed} {line}", flush=True)


if __name__ == "__main__":
    main()
