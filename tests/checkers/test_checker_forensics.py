"""Loss forensics end to end through Spark: events, nemesis windows and segment files."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from histories import History
from support.segments import encode_record

from checkers.check import check_path
from checkers.exitcodes import exit_code
from replication.log import Record
from replication.segment_format import segment_name

S = 1_000_000_000


def write_segment(path, records: list[tuple[int, int, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(encode_record(Record(o, e, 0, str(v).encode())) for o, e, v in records)
    path.write_bytes(data)


def power_loss_run(tmp_path):
    """Broker 1 (n2) acks 10..14 at epoch 1, loses power, broker 2 wins an unclean election
    at epoch 2 with only offsets 0-1, and broker 1 truncates 2-4 when it comes back."""
    h = History()
    for off, v in enumerate([10, 11, 12, 13, 14]):
        h.send(1, 0, v, off, node=1, epoch=1)
    h.nemesis("start-power-loss", {"nodes": ["n2"]})
    h.nemesis("stop-power-loss", {"nodes": ["n2"]})
    h.send(2, 0, 20, 2, node=2, epoch=2)
    h.send(2, 0, 21, 3, node=2, epoch=2)
    h.final(9, 0, [(0, 10), (1, 11), (2, 20), (3, 21)])
    run = h.write(tmp_path / "run", {"topic": {"name": "chaos"}})
    power_at = h.ops[10]["time"]
    events = [
        {"kind": "partition-change", "node": "controller", "time": 0, "topic": "chaos",
         "partition": 0, "leader": 1, "leader_epoch": 1, "partition_epoch": 1,
         "isr": [1, 2], "elr": [], "last_known_elr": [], "reason": "create"},
        {"kind": "unclean-election", "node": "controller", "time": power_at + 1000,
         "topic": "chaos", "partition": 0, "leader": 2, "leader_epoch": 2,
         "potential_data_loss": True},
        {"kind": "partition-change", "node": "controller", "time": power_at + 1000,
         "topic": "chaos", "partition": 0, "leader": 2, "leader_epoch": 2,
         "partition_epoch": 2, "isr": [2], "elr": [], "last_known_elr": [],
         "reason": "unclean"},
        {"kind": "truncate", "node": 1, "time": power_at + 2000, "topic": "chaos",
         "partition": 0, "from_offset": 5, "to_offset": 2, "removed": 3,
         "reason": "leader-epoch"},
        {"kind": "truncate", "node": 1, "time": power_at + 3000, "topic": "other",
         "partition": 0, "from_offset": 9, "to_offset": 0, "removed": 9,
         "reason": "leader-epoch"},
    ]  # fmt: skip
    with open(run / "events.jsonl", "w") as fh:
        for i, ev in enumerate(events):
            fh.write(json.dumps({"ts": 1.7e9 + i, "host": "n1", **ev}) + "\n")
    seg = segment_name(0)
    write_segment(run / "nodes/n2/data/chaos-0" / seg, [(0, 1, 10), (1, 1, 11), (2, 2, 20)])
    write_segment(run / "nodes/n3/data/chaos-0" / seg, [(0, 1, 10), (1, 1, 11), (2, 2, 20)])
    # a stale replica that never caught up past 12, and another topic holding 13
    write_segment(run / "nodes/n4/data/chaos-0" / seg, [(0, 1, 10), (1, 1, 11), (2, 1, 12)])
    write_segment(run / "nodes/n4/data/other-0" / seg, [(0, 1, 13)])
    return run


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_loss_forensics_explain_each_lost_record(tmp_path):
    run = power_loss_run(tmp_path)
    res = check_path(run)
    assert res["valid"] is False and exit_code(res) == 1
    assert res["anomalies"]["lost-write"]["count"] == 2
    assert res["anomalies"]["unseen"]["count"] == 1
    assert res["lost"]["by_kind"] == {"lost-write": 2, "unseen": 1}
    assert res["lost"]["by_storage"] == {"truncated/lost": 2, "on-disk": 1}

    loss = pd.read_parquet(run / "loss.parquet").set_index("value")
    assert list(loss["kind"]) == ["lost-write", "lost-write", "unseen"]
    assert loss.loc[12, "storage"] == "on-disk" and list(loss.loc[12, "on_disk_at"]) == ["n4@2"]
    assert loss.loc[13, "storage"] == "truncated/lost"  # the "other" topic does not count
    text = loss.loc[13, "explanation"]
    for part in (
        "acked by broker 1 at leader epoch 1",
        "(ISR [1, 2])",
        "power loss of n2 (started",
        "unclean election of broker 2 at epoch 2",
        "truncated by broker 1 at leader epoch 2 (offsets 2-4 removed, leader-epoch)",
        "in no node's data files",
    ):
        assert part in text, text
    assert json.loads(loss.loc[14, "truncations"])[0]["to_offset"] == 2
    assert "still on disk at n4@2" in loss.loc[12, "explanation"]
    assert res["lost"]["examples"][0]["explanation"] == loss.loc[12, "explanation"]
