"""Clock faults: a host's clock jumps.

`clock-skew` steps the target host's clock by `clock_skew_ms` (negative: back) and sets it
right when healed. The kind carries what that means on each kind of host (`ClockStep`, a
HostAction), so no World has a clock verb of its own: in the simulated world the host's
monotonic clock jumps (simulation.world's clock port): the node's timers and `now` follow
it. On a libvirt VM the guest's wall clock is stepped with its NTP daemon (chrony) stopped,
so nothing slews it back; healing steps it back and starts chrony again. Namespace hosts
share this machine's one kernel clock, so stepping a node's clock would step every node's
(and the harness's): refused, and the fault is recorded as failed with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nemesis.kinds.base import FaultKind, HostPort, Resolved, Setting, SimHostPort, World, each
from nemesis.kinds.power import HOST_AUTO, HOST_MODES
from nemesis.kinds.registry import register
from runformat import effects as fx

# Step the wall clock by argv[1] seconds (run with the cluster's python, as root).
STEP_CLOCK = ("import sys, time; c = time.CLOCK_REALTIME; "
              "time.clock_settime(c, time.clock_gettime(c) + float(sys.argv[1]))")
# The guest's NTP daemon would slew a stepped clock back: stopped while the clock is skewed.
# Debian names it chrony, others chronyd; a guest without it has nothing to stop.
CHRONY = "systemctl {0} chrony 2>/dev/null || systemctl {0} chronyd 2>/dev/null || true"


@dataclass(frozen=True)
class ClockStep:
    """The host's clock stepped by `delta_ms`, and stepped back when undone."""

    delta_ms: float

    def on_host(self, host: HostPort) -> dict[str, Any]:
        _refuse_shared_clock(host)
        host.run(["sh", "-c", CHRONY.format("stop")], sudo=True)
        host.run([host.python, "-c", STEP_CLOCK, repr(self.delta_ms / 1000)], sudo=True)
        return {}

    def undo_on_host(self, host: HostPort) -> None:
        host.run([host.python, "-c", STEP_CLOCK, repr(-self.delta_ms / 1000)], sudo=True)
        host.run(["sh", "-c", CHRONY.format("start")], sudo=True)

    def in_simulation(self, host: SimHostPort) -> dict[str, Any]:
        host.clock_jump(self.delta_ms)
        return {}

    def undo_in_simulation(self, host: SimHostPort) -> None:
        host.clock_reset()


def _refuse_shared_clock(host: HostPort) -> None:
    """Namespace hosts share this machine's kernel clock (and an inventory machine that is
    not a VM is not ours to step): refused before any command."""
    if not host.vm:
        raise RuntimeError(f"{host.name} is not a VM: clock-skew steps a guest's own clock, and "
                           "namespace hosts share this machine's one kernel clock (docs/vms.md)")


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
        step = ClockStep(float(settings.get("clock_skew_ms",
                                            self.settings["clock_skew_ms"].default)))
        return await each(resolved, lambda node: world.act_on_host(node, self.name, step))

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, lambda node: world.undo_on_host(node, self.name))

    def clean_host(self, host: HostPort) -> None:
        """A killed run may have left a VM's chrony stopped (and its clock stepped): started,
        it steps the clock back."""
        if host.vm:
            host.run(["sh", "-c", CHRONY.format("start")], sudo=True)
