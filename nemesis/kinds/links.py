"""Degraded links: what the target host receives is delayed, dropped or reset (on real
hosts by netfilter, nemesis.link); the rest of the cluster is unharmed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nemesis.kinds.base import FaultKind, Resolved, Setting, World, each
from nemesis.kinds.registry import register
from runformat import effects as fx

# Whose links degrade: one node's, or several (Toxiproxy's toxics target the same way).
LINK_AUTO = {"leader": 4, "random-broker": 2, "followers": 2, "controller": 1, "majority": 1}
LINK_MODES = {"leader": "leader", "controller": "controller", "random": "random-broker",
              "majority": "majority", "txn-coordinator": "txn-coordinator",
              "group-coordinator": "group-coordinator"}


class LinkFault(FaultKind):
    family = "link"
    effects = frozenset({fx.DEGRADES_LINK})
    heal_phrase = "the link heals"
    delays: ClassVar[bool] = False  # its rule queues segments to nemesis.linkdelay's daemon

    def netfilter(self, s: Mapping[str, float], queue: int) -> str:
        """What its KCH-LINK rule does to a received segment (nemesis.link adds the match)."""
        raise NotImplementedError

    def simulated_link(self, s: Mapping[str, float]) -> dict[str, float]:
        """The same in the simulator: simulation.network.LinkFault's delay_s, jitter_s, loss
        (of a segment) and reset (probabilities)."""
        raise NotImplementedError
    auto_targets = LINK_AUTO
    mode_targets = LINK_MODES

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        return await each(resolved, lambda n: world.degrade_link(n, self.name, settings, pick))

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.restore_link)


@register
class SlowLink(LinkFault):
    """Each received segment is held `link_delay_ms` plus normal `link_jitter_ms`, in order."""

    name = "slow-link"
    settings = {"link_delay_ms": Setting(200.0, 0, 60_000), "link_jitter_ms": Setting(50.0, 0, 60_000)}
    phrase = "links to {who} are slowed"
    delays = True

    def netfilter(self, s: Mapping[str, float], queue: int) -> str:
        return f"-j NFQUEUE --queue-num {queue} --queue-bypass"

    def simulated_link(self, s: Mapping[str, float]) -> dict[str, float]:
        return {"delay_s": float(s["link_delay_ms"]) / 1000,
                "jitter_s": float(s["link_jitter_ms"]) / 1000}


@register
class LossyLink(LinkFault):
    """`link_loss_percent` of received segments are dropped."""

    name = "lossy-link"
    settings = {"link_loss_percent": Setting(20.0, 0, 100, lo_ok=False)}
    phrase = "links to {who} are made lossy"

    def netfilter(self, s: Mapping[str, float], queue: int) -> str:
        return f"-m statistic --mode random --probability {s['link_loss_percent'] / 100:.6f} -j DROP"

    def simulated_link(self, s: Mapping[str, float]) -> dict[str, float]:
        return {"loss": min(1.0, float(s["link_loss_percent"]) / 100)}


@register
class ResetLink(LinkFault):
    """`reset_probability` of received segments are answered with a TCP reset."""

    name = "reset-link"
    settings = {"reset_probability": Setting(0.05, 0, 1)}
    phrase = "links to {who} are reset"

    def netfilter(self, s: Mapping[str, float], queue: int) -> str:
        return (f"-m statistic --mode random --probability {s['reset_probability']:.6f} "
                "-j REJECT --reject-with tcp-reset")

    def simulated_link(self, s: Mapping[str, float]) -> dict[str, float]:
        return {"reset": min(1.0, float(s["reset_probability"]))}
