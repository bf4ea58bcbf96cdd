"""Stream faults through Toxiproxy: every connection into and out of the target node crosses
its host's Toxiproxy (control.toxiproxy), and a fault adds one toxic there.

| kind | Toxiproxy toxic | attributes (units) |
|---|---|---|
| `bandwidth` | `bandwidth` | `rate` KB/s, per connection and direction |
| `latency` | `latency` | `latency`, `jitter` ms, added to each chunk of data |
| `stall` | `timeout` | `timeout` ms: no data passes, then the connection is closed (0: never closed, data held back until healed) |
| `slicer` | `slicer` | `average_size`, `size_variation` bytes, `delay` µs between slices |
| `limit-data` | `limit_data` | `bytes`: the connection is closed once that many have passed |
| `slow-close` | `slow_close` | `delay` ms before a close is passed on |
| `reset-peer` | `reset_peer` | `timeout` ms, then the connection is reset (RST) |

Every kind also takes `direction` (what the target node `inbound` receives, what it sends
`outbound`, or `both`) and `toxicity` (the share of connections it hits, 0..1). The
`[nemesis.toxics.<kind>]` tables of the config set them; `DEFAULTS` below is what a table
leaves out. Healing removes the kind's toxics from the node's proxies; nothing else changes.

Only real hosts have Toxiproxy: `simulated = False`, so `harness simulate` refuses these
kinds by name (the simulated network has no bytes, chunks or bandwidth to act on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nemesis.kinds.base import FaultKind, Resolved, World, each
from nemesis.kinds.links import LINK_AUTO, LINK_MODES
from nemesis.kinds.registry import register
from runformat import effects as fx

DIRECTIONS = ("inbound", "outbound", "both")
# kind -> (Toxiproxy's toxic type, {attribute: (default, lowest, highest)}, default direction).
# The ranges keep the values what Toxiproxy takes (int64 ms / bytes, int KB/s) and sane.
_MAX_MS = 3_600_000
TOXICS: dict[str, tuple[str, dict[str, tuple[int, int, int]], str]] = {
    "bandwidth": ("bandwidth", {"rate": (1, 1, 10_000_000)}, "inbound"),
    "latency": ("latency", {"latency": (100, 0, _MAX_MS), "jitter": (0, 0, _MAX_MS)}, "inbound"),
    "stall": ("timeout", {"timeout": (3000, 0, _MAX_MS)}, "both"),
    "slicer": ("slicer", {"average_size": (16, 1, 1 << 20), "size_variation": (8, 0, 1 << 20),
                          "delay": (200, 0, 10_000_000)}, "both"),
    "limit-data": ("limit_data", {"bytes": (4096, 1, 1 << 40)}, "inbound"),
    "slow-close": ("slow_close", {"delay": (2000, 0, _MAX_MS)}, "both"),
    "reset-peer": ("reset_peer", {"timeout": (0, 0, _MAX_MS)}, "inbound"),
}  # fmt: skip


class ToxicError(ValueError):
    """A bad `[nemesis.toxics.<kind>]` table; the message names the key."""


def defaults(kind: str) -> dict[str, Any]:
    _, attrs, direction = TOXICS[kind]
    return {"direction": direction, "toxicity": 1.0, **{a: d for a, (d, _, _) in attrs.items()}}


def check_table(kind: str, table: Any) -> dict[str, Any]:
    """A kind's settings table, checked and with defaults filled in (ToxicError if bad)."""
    if kind not in TOXICS:
        raise ToxicError(f"unknown toxic fault {kind!r}; known: {', '.join(TOXICS)}")
    if not isinstance(table, Mapping):
        raise ToxicError(f"{kind}: expected a table of settings, got {table!r}")
    _, attrs, _ = TOXICS[kind]
    out = defaults(kind)
    for key, value in table.items():
        if key == "direction":
            if value not in DIRECTIONS:
                raise ToxicError(f"{kind}.direction: expected one of {', '.join(DIRECTIONS)}, "
                                 f"got {value!r}")
        elif key == "toxicity":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise ToxicError(f"{kind}.toxicity: expected a number > 0 and <= 1, got {value!r}")
            value = float(value)
        elif key in attrs:
            _, lo, hi = attrs[key]
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ToxicError(f"{kind}.{key}: expected an integer in {lo}..{hi}, got {value!r}")
        else:
            known = ", ".join([*attrs, "direction", "toxicity"])
            raise ToxicError(f"{kind}: unknown setting {key!r}; known: {known}")
        out[key] = value
    if kind == "slicer" and out["size_variation"] >= out["average_size"]:
        raise ToxicError(f"slicer.size_variation = {out['size_variation']} must be less than "
                         f"slicer.average_size = {out['average_size']}")
    return out


def check_tables(tables: Any) -> dict[str, dict[str, Any]]:
    """Every kind's table (those left out take their defaults)."""
    if not isinstance(tables, Mapping):
        raise ToxicError(f"expected a table of toxic fault -> settings, got {tables!r}")
    unknown = [k for k in tables if k not in TOXICS]
    if unknown:
        raise ToxicError(f"unknown toxic fault {unknown[0]!r}; known: {', '.join(TOXICS)}")
    return {kind: check_table(kind, tables.get(kind, {})) for kind in TOXICS}


class ToxicFault(FaultKind):
    family = "toxic"
    auto_targets = LINK_AUTO
    mode_targets = LINK_MODES
    simulated = False  # only real hosts run Toxiproxy
    record_key = "toxic"
    effects = frozenset({fx.DEGRADES_STREAM})
    heal_phrase = "the link heals"
    toxic_type: ClassVar[str]

    def spec(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The toxic to add: type, direction, toxicity and Toxiproxy's attributes."""
        table = check_table(self.name, (settings.get("toxics") or {}).get(self.name, {}))
        attrs = {k: v for k, v in table.items() if k not in ("direction", "toxicity")}
        return {"type": self.toxic_type, "direction": table["direction"],
                "toxicity": table["toxicity"], "attributes": attrs}

    def describe(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return self.spec(settings)

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        spec = self.spec(settings)
        await each(resolved, lambda n: world.add_toxic(n, self.name, spec))
        return {}

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, lambda n: world.remove_toxic(n, self.name))


@register
class Bandwidth(ToxicFault):
    """At most `rate` KB/s per connection: a follower behind it falls out of the ISR."""

    name = "bandwidth"
    phrase = "connections of {who} are bandwidth-capped"
    toxic_type = "bandwidth"


@register
class Latency(ToxicFault):
    """Each chunk of data waits `latency` ms plus a uniform `jitter`."""

    name = "latency"
    phrase = "connections of {who} are delayed"
    toxic_type = "latency"


@register
class Stall(ToxicFault):
    """No data passes; the connection is closed after `timeout` ms (0: held until healed)."""

    name = "stall"
    phrase = "connections of {who} are stalled"
    toxic_type = "timeout"


@register
class Slicer(ToxicFault):
    """Data dribbles through in slices of about `average_size` bytes, `delay` µs apart."""

    name = "slicer"
    phrase = "connections of {who} are sliced"
    toxic_type = "slicer"


@register
class LimitData(ToxicFault):
    """A connection is closed once `bytes` have passed: requests and replies cut mid-frame."""

    name = "limit-data"
    phrase = "connections of {who} are cut after a byte limit"
    toxic_type = "limit_data"


@register
class SlowClose(ToxicFault):
    """A close reaches the other side `delay` ms late."""

    name = "slow-close"
    phrase = "connections of {who} are closed slowly"
    toxic_type = "slow_close"


@register
class ResetPeer(ToxicFault):
    """Connections are reset (TCP RST) after `timeout` ms."""

    name = "reset-peer"
    phrase = "connections of {who} are reset"
    toxic_type = "reset_peer"


# Every kind above has its table, and nothing else does.
assert {k.name for k in ToxicFault.__subclasses__()} == set(TOXICS)
