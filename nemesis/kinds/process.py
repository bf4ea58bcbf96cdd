"""Process faults: the node's process is killed, paused or restarted; its host is unharmed,
so the page cache (unsynced writes) survives."""

from __future__ import annotations

from typing import Any

from nemesis.kinds.base import FaultKind, Resolved, World, each
from nemesis.kinds.registry import register
from runformat import effects as fx

PROCESS_AUTO = {"leader": 4, "random-broker": 2, "controller": 1, "majority": 1,
                "last-isr-member": 1, "elr-members": 1}
PROCESS_MODES = {"leader": "leader", "controller": "controller", "random": "random-broker",
                 "txn-coordinator": "txn-coordinator", "group-coordinator": "group-coordinator",
                 "majority": "majority"}


class ProcessFault(FaultKind):
    family = "process"
    auto_targets = PROCESS_AUTO
    mode_targets = PROCESS_MODES


@register
class Kill(ProcessFault):
    """SIGKILL; started again when healed."""

    name = "kill"
    effects = frozenset({fx.KILLS_PROCESS})
    phrase = "{who} {is} killed"
    heal_phrase = "{who} {restarts}"

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        return await each(resolved, world.kill)

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.start)


@register
class Pause(ProcessFault):
    """SIGSTOP; SIGCONT when healed."""

    name = "pause"
    effects = frozenset({fx.PAUSES_PROCESS})
    phrase = "{who} {is} paused"
    heal_phrase = "{who} {resumes}"

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        return await each(resolved, world.pause)

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.resume)


@register
class Restart(ProcessFault):
    """A controlled shutdown (SIGTERM: leadership handed away, logs flushed, the clean-shutdown
    marker written) and an immediate start. Nothing to heal."""

    name = "restart"
    effects = frozenset({fx.RESTARTS_PROCESS})
    phrase = "{who} {is} restarted"

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        async def restart(node: str) -> None:
            await world.stop_clean(node)
            await world.start(node)
        return await each(resolved, restart)
