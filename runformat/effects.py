"""What a fault does, as its history operation records it: the effects vocabulary.

Each fault kind declares its effects (nemesis.kinds); the nemesis writes them into the
fault's `start-<kind>` operation as `"effects": [...]`, and the checkers and reports read
them from there (`effects_of`), so none of them keeps a list of fault names. Histories
written before effects were recorded carry none: their kinds' effects are `RECORDED_BEFORE`,
a table of the past that no new kind is ever added to (tests/nemesis/test_effects.py holds
it equal to what those kinds declare)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KILLS_PROCESS = "kills-process"  # the node's process ends without a clean shutdown
PAUSES_PROCESS = "pauses-process"  # SIGSTOP until healed
RESTARTS_PROCESS = "restarts-process"  # a controlled shutdown and a start
LOSES_UNSYNCED = "loses-unsynced"  # writes not yet fsynced are gone (power, page cache)
CORRUPTS_DISK = "corrupts-disk"  # data on the disk is damaged under a stopped node
CUTS_NETWORK = "cuts-network"  # packets between nodes are dropped (a partition)
DEGRADES_LINK = "degrades-link"  # what a host receives is delayed, dropped or reset
DEGRADES_STREAM = "degrades-stream"  # a node's TCP streams are throttled, cut or stalled
SKEWS_CLOCK = "skews-clock"  # a host's clock jumps
EFFECTS = (KILLS_PROCESS, PAUSES_PROCESS, RESTARTS_PROCESS, LOSES_UNSYNCED, CORRUPTS_DISK,
           CUTS_NETWORK, DEGRADES_LINK, DEGRADES_STREAM, SKEWS_CLOCK)

_POWER = frozenset({KILLS_PROCESS, LOSES_UNSYNCED})
_STREAM = frozenset({DEGRADES_STREAM})
# The kinds whose operations were written without effects, and what they did. Frozen.
RECORDED_BEFORE: Mapping[str, frozenset[str]] = {
    "kill": frozenset({KILLS_PROCESS}), "pause": frozenset({PAUSES_PROCESS}),
    "restart": frozenset({RESTARTS_PROCESS}), "power-loss": _POWER, "torn-power-loss": _POWER,
    "outage": _POWER, "vm-power-off": _POWER, "page-cache-loss": frozenset({LOSES_UNSYNCED}),
    "corrupt-segment": frozenset({KILLS_PROCESS, CORRUPTS_DISK}),
    "partition": frozenset({CUTS_NETWORK}), "slow-link": frozenset({DEGRADES_LINK}),
    "lossy-link": frozenset({DEGRADES_LINK}), "reset-link": frozenset({DEGRADES_LINK}),
    "bandwidth": _STREAM, "latency": _STREAM, "stall": _STREAM, "slicer": _STREAM,
    "limit-data": _STREAM, "slow-close": _STREAM, "reset-peer": _STREAM,
}  # fmt: skip


def fault_kind(op: Mapping[str, Any]) -> str | None:
    """The kind a `start-<kind>` nemesis operation starts; None for any other operation."""
    f = op.get("f")
    if op.get("process") != "nemesis" or not isinstance(f, str) or not f.startswith("start-"):
        return None
    return f[len("start-"):]


def effects_of(op: Mapping[str, Any]) -> frozenset[str]:
    """The effects of the fault a `start-<kind>` operation records (empty for another op)."""
    kind = fault_kind(op)
    if kind is None:
        return frozenset()
    value = op.get("value")
    recorded = value.get("effects") if isinstance(value, dict) else None
    if isinstance(recorded, list):
        return frozenset(e for e in recorded if isinstance(e, str))
    return RECORDED_BEFORE.get(kind, frozenset())
