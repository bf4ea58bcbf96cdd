"""Clock faults: a host's clock jumps.

`clock-skew` steps the target host's clock by `clock_skew_ms` (negative: back) and sets it
right when healed. In the simulated world the host's monotonic clock jumps (World.clock_jump,
simulation/world.py): the node's timers and `now` follow it. On a libvirt VM the guest's wall
clock is stepped with its NTP daemon (chrony) stopped, so nothing slews it back; healing
steps it back and starts chrony again (nemesis.hosts_world). Namespace hosts share this
machine's one kernel clock, so stepping a node's clock would step every node's (and the
harness's): the verb refuses them, and the fault is recorded as failed with that reason.
"""

from __future__ import annotations

from typing import Any

from nemesis.kinds.base import FaultKind, Resolved, Setting, World, each
from nemesis.kinds.power import HOST_AUTO, HOST_MODES
from nemesis.kinds.registry import register
from runformat import effects as fx


@register
class ClockSkew(FaultKind):
    """The host's clock jumps by `clock_skew_ms`; set right when healed."""

    name = "clock-skew"
    family = "host"  # it acts on the host (its clock), not on the process or the network
    auto_targets = HOST_AUTO
    mode_targets = HOST_MODES
    settings = {"clock_skew_ms": Setting(5000.0, -86_400_000, 86_400_000)}
    effects = frozenset({fx.SKEWS_CLOCK})
    phrase = "the clock of {who} jumps"
    heal_phrase = "the clock of {who} is set right"

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        delta_ms = float(settings.get("clock_skew_ms", self.settings["clock_skew_ms"].default))
        return await each(resolved, lambda node: world.clock_jump(node, delta_ms))

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.clock_reset)
