"""Degraded links: what the target host receives is delayed, dropped or reset (on real
hosts by netfilter, nemesis.link); the rest of the cluster is unharmed."""

from __future__ import annotations

from typing import Any

from nemesis.kinds.base import FaultKind, Resolved, World, each
from nemesis.kinds.registry import register

# [nemesis] settings of link faults, and what they mean when a config leaves them out
# (configs stored before link faults existed do).
LINK_DEFAULTS = {"link_delay_ms": 200.0, "link_jitter_ms": 50.0, "link_loss_percent": 20.0,
                 "reset_probability": 0.05}  # fmt: skip


# Whose links degrade: one node's, or several (Toxiproxy's toxics target the same way).
LINK_AUTO = {"leader": 4, "random-broker": 2, "followers": 2, "controller": 1, "majority": 1}
LINK_MODES = {"leader": "leader", "controller": "controller", "random": "random-broker",
              "majority": "majority"}


class LinkFault(FaultKind):
    family = "link"
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
    settings_keys = ("link_delay_ms", "link_jitter_ms")


@register
class LossyLink(LinkFault):
    """`link_loss_percent` of received segments are dropped."""

    name = "lossy-link"
    settings_keys = ("link_loss_percent",)


@register
class ResetLink(LinkFault):
    """`reset_probability` of received segments are answered with a TCP reset."""

    name = "reset-link"
    settings_keys = ("reset_probability",)
