"""A fault that waits for a partition state before it hits: a scripted plan's
`"until": {"isr_at_most": n, "elr_at_least": n, "timeout_s": t}` in a target (one test or
both; all must hold). It lets one plan, in the simulator and on real hosts, say "once the
ISR has shrunk to the leader, power off an ELR member" without knowing how long the shrink
takes there. The nemesis (nemesis.faults) waits before it resolves the target, and stops the
episode's clock meanwhile."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nemesis.kinds.base import Topology

# A target's "until": the partition state a fault waits for before it hits (await_state).
UNTIL_TESTS: dict[str, Callable[[Mapping[str, Any], int], bool]] = {
    "isr_at_most": lambda state, n: len(state["isr"]) <= n,
    "elr_at_least": lambda state, n: len(state.get("elr") or ()) >= n,
}
UNTIL_TIMEOUT_S = 16.0
UNTIL_POLL_S = 0.1


def until_error(until: Any) -> str | None:
    """What is wrong with a target's "until" (None: nothing): an object of UNTIL_TESTS
    (each a count >= 0) and an optional "timeout_s" (seconds > 0)."""
    if not isinstance(until, dict) or not set(until) - {"timeout_s"}:
        return f"until must name at least one of {', '.join(UNTIL_TESTS)}"
    unknown = set(until) - {"timeout_s", *UNTIL_TESTS}
    if unknown:
        return f"until: unknown {', '.join(sorted(unknown))}; known: {', '.join(UNTIL_TESTS)}"
    counts = [v for k, v in until.items() if k != "timeout_s"]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in counts):
        return "until: counts must be integers >= 0"
    timeout = until.get("timeout_s", UNTIL_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < 1e6:
        return "until: timeout_s must be seconds > 0"
    return None


def state_holds(state: Mapping[str, Any] | None, until: Mapping[str, Any]) -> bool:
    """Whether a partition state (None: unknown now) meets every test of an "until"."""
    if state is None:
        return False
    return all(UNTIL_TESTS[test](state, count) for test, count in until.items()
               if test != "timeout_s")


async def await_state(topology: Topology, target: Mapping[str, Any],
                      sleep: Callable[[float], Awaitable[Any]], clock: Callable[[], float]) -> None:
    """Return once the target's partition (else partition 0) meets its "until", asked of the
    live metadata every UNTIL_POLL_S, or once its timeout_s have passed (the fault then hits
    whatever its target means by then, as a role left unheld does)."""
    until = target.get("until")
    if not until:
        return
    deadline = clock() + until.get("timeout_s", UNTIL_TIMEOUT_S)
    partition = target.get("partition", 0)
    while not state_holds(await topology.partition_state(partition), until):
        if clock() >= deadline:
            return
        await sleep(UNTIL_POLL_S)
