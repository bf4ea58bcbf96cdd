"""Digests of simulated runs, to hold two trees' simulators byte for byte against each other.

    cd TREE && .venv/bin/python benchmarks/sim_digests.py --seeds 1-10 [--without-effects] > D.txt

For every cell of a campaign (default campaigns/validation.toml) and every seed, simulates the
cell as `harness simulate --campaign FILE --cell CONFIG/MIX` does and prints one line,
`CONFIG/MIX/SEED SHA256` of history.jsonl then events.jsonl. Run it in each tree and `diff`
the outputs. `--without-effects` takes the fault kinds' `"effects"` out of the history's
nemesis operations first, so a tree from before they were recorded compares equal on
everything else. No assertions.
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

from harness.campaign_spec import load_spec  # noqa: E402
from harness.sim_run import as_simulated, simulate_into, with_seed  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", type=Path, default=ROOT / "campaigns" / "validation.toml")
    parser.add_argument("--seeds", default="1-3", help="A-B")
    parser.add_argument("--without-effects", action="store_true")
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    _, cells = load_spec(args.campaign)
    for cell in cells:
        config = as_simulated(cell.resolved)
        for seed in range(int(lo), int(hi or lo) + 1):
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                simulate_into(Test.of(with_seed(config, seed), folder, check=False), folder,
                              keep_going=True)
                print(f"{cell.config}/{cell.nemesis}/{seed} {digest(folder, args.without_effects)}",
                      flush=True)


if __name__ == "__main__":
    main()
