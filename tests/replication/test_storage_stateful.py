"""Hypothesis stateful test: SegmentLog on real files behaves like MemoryLog.

Random appends (leader and follower), truncations, epoch assignments, flushes, reopens after
clean and unclean closes, and torn tails; after every step both logs must agree on every
observable: records, LEO, epoch cache, OffsetsForLeaderEpoch answers, unflushed count.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.memory_log import MemoryLog

from replication.log import Record
from replication.segment_format import encoded_size, scan_segment
from replication.segment_log import SegmentLog

# fsync cannot change what this test observes (no power loss here), only its run time;
# test_storage_segment.py checks the real fsync calls. FSYNC_IN_STATEFUL=1 uses the real one.
FSYNC = os.fsync if os.environ.get("FSYNC_IN_STATEFUL") == "1" else (lambda fd: None)
values_st = st.lists(st.binary(max_size=24), min_size=1, max_size=4)


class SegmentLogMatchesMemoryLog(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="storage-stateful-"))
        self.memory = MemoryLog()
        self.now = 0

    @initialize(
        segment_bytes=st.sampled_from([40, 100, 300, 1 << 20]),
        flush_messages=st.sampled_from([None, 1, 3]),
        flush_ms=st.sampled_from([None, 10]),
    )
    def open_logs(self, segment_bytes: int, flush_messages: int | None, flush_ms: int | None):
        self.config = (flush_messages, flush_ms, segment_bytes)
        self.disk = SegmentLog(self.dir, *self.config, fsync=FSYNC)
        self.memory = MemoryLog(flush_messages=flush_messages, flush_ms=flush_ms)

    def both(self, method: str, *args):
        expected = getattr(self.memory, method)(*args)
        assert getattr(self.disk, method)(*args) == expected
        return expected

    @property
    def rolls(self) -> bool:
        """Segment rolls flush too, which MemoryLog (no segments) cannot mirror."""
        return self.config[2] < 1 << 20

    @rule(bump=st.integers(0, 2), values=values_st, ts=st.integers(-5, 10**12))
    def leader_append(self, bump: int, values: list[bytes], ts: int) -> None:
        self.both("append", max(self.memory.latest_epoch(), 0) + bump, values, ts)

    @rule(bumps=st.lists(st.integers(0, 1), min_size=1, max_size=4), value=st.binary(max_size=8))
    def follower_append(self, bumps: list[int], value: bytes) -> None:
        epoch, leo, records = max(self.memory.latest_epoch(), 0), self.memory.end_offset, []
        for i, bump in enumerate(bumps):
            epoch += bump
            records.append(Record(leo + i, epoch, i, value))
        self.both("append_records", records)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        self.both("truncate_to", data.draw(st.integers(0, self.memory.end_offset + 1)))

    @rule()
    def flush(self) -> None:
        self.both("flush")

    @rule(step=st.integers(0, 15))
    def tick(self, step: int) -> None:
        self.now += step
        flushed = self.memory.maybe_flush(self.now), self.disk.maybe_flush(self.now)
        assert self.rolls or flushed[0] == flushed[1]

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        self.disk.close(clean)
        self.disk = SegmentLog(self.dir, *self.config, fsync=FSYNC)
        assert self.disk.recovery_info.truncated_bytes == 0
        self.reopened_memory()

    @precondition(lambda self: self.memory.end_offset > 0)
    @rule(data=st.data())
    def tear_last_record(self, data: st.DataObject) -> None:
        self.disk.close(clean=False)
        last = max(self.dir.glob("*.log"))
        records, valid, _ = scan_segment(last)
        if not records:  # the active segment is empty (truncated to its base): tear nothing
            self.disk = SegmentLog(self.dir, *self.config, fsync=FSYNC)
            self.reopened_memory()
            return
        start = valid - encoded_size(records[-1])
        cut = data.draw(st.integers(start, valid - 1))
        with open(last, "r+b") as f:
            f.truncate(cut)
        self.disk = SegmentLog(self.dir, *self.config, fsync=FSYNC)
        assert self.disk.recovery_info.truncated_bytes == cut - start
        self.memory.truncate_to(self.memory.end_offset - 1)
        self.reopened_memory()

    def reopened_memory(self) -> None:
        self.memory.restart()
        assert self.disk.recovery_info.end_offset == self.memory.end_offset

    @invariant()
    def same_observables(self) -> None:
        if not hasattr(self, "disk"):
            return
        m, d = self.memory, self.disk
        assert d.end_offset == m.end_offset
        assert d.read(0, m.end_offset + 1) == m.read(0, m.end_offset + 1)
        assert d.epoch_entries() == m.epoch_entries()
        assert d.latest_epoch() == m.latest_epoch()
        if not self.rolls:
            assert d.unflushed_count() == m.unflushed_count()
        for epoch in range(-1, m.latest_epoch() + 2):
            assert d.end_offset_for_epoch(epoch) == m.end_offset_for_epoch(epoch)

    def teardown(self) -> None:
        if hasattr(self, "disk"):
            self.disk.close(clean=False)
        shutil.rmtree(self.dir, ignore_errors=True)


SegmentLogMatchesMemoryLog.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_segment_log_matches_memory_log = SegmentLogMatchesMemoryLog.TestCase
