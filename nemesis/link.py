"""Link degradation inside hosts: latency, packet loss and TCP resets, all by netfilter.

Each fault adds one rule to the KCH-LINK chain, jumped to first from INPUT, for the TCP
segments the target host receives:

- `slow-link` queues them (NFQUEUE) to nemesis.linkdelay, a daemon on the host that lets each
  through after `link_delay_ms` plus normal `link_jitter_ms`, in order;
- `lossy-link` drops `link_loss_percent` of them;
- `reset-link` answers `reset_probability` of them with a TCP reset, killing connections
  mid-stream as a flaky middlebox does.

Netfilter rather than tc netem: the kernels we run on are often built without sch_netem,
while NFQUEUE and the statistic match are standard. The host's SSH port is exempt from every
rule, so the harness keeps control of a host whose link drops everything and can always heal
it. Healing removes only the KCH-LINK chain, its jump and the delay daemon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from control.cluster import python_argv
from control.parallel import on_hosts
from control.toxiproxy import API_PORT
from nemesis import iptables
from nemesis.kinds import KNOWN_FAULTS, all_settings, lookup
from nemesis.kinds.links import LinkFault

if TYPE_CHECKING:
    from control.host import Host

CHAIN = "KCH-LINK"
QUEUE = 7341  # our NFQUEUE number (any of 0..65535 nothing else on the host uses)
DAEMON = "linkdelay"


def settings(nemesis: Mapping[str, Any]) -> dict[str, float]:
    """The fault kinds' settings of a [nemesis] table, defaults filled in."""
    return {k: float(nemesis.get(k, s.default)) for k, s in all_settings().items()}


def rule(kind: str, s: Mapping[str, float], ssh_port: int) -> str:
    """The KCH-LINK rule spec for a fault of this kind. Exempt: the SSH port and Toxiproxy's
    API (the harness must keep control of the host), and loopback (a node behind Toxiproxy
    talks to its proxy over it: one link, degraded once, where it enters the host)."""
    match = f"! -i lo -p tcp -m multiport ! --ports {int(ssh_port)},{API_PORT}"
    return f"{match} {_link_kind(kind).netfilter(s, QUEUE)}"


def _link_kind(kind: str) -> LinkFault:
    fault = lookup(kind) if kind in KNOWN_FAULTS else None
    if not isinstance(fault, LinkFault):
        raise ValueError(f"unknown link fault {kind!r}")
    return fault


def degrade(host: Host, kind: str, s: Mapping[str, float], python: str, seed: int = 0, *,
            code: str | None = None) -> None:
    """Apply a link fault of `kind` on host (`python` runs nemesis.linkdelay there, importing
    `code` first, the run's checkout, as the nodes do: control.cluster.Cluster.code)."""
    line = rule(kind, s, host.remote.endpoint.port)
    if _link_kind(kind).delays and not host.remote.is_running(DAEMON):
        # started before the rule: until it is bound, --queue-bypass lets packets through
        host.remote.start_daemon(DAEMON, [
            *python_argv(python, code), "-m", "nemesis.linkdelay", "--queue", str(QUEUE),
            "--delay-ms", f"{s['link_delay_ms']:g}", "--jitter-ms", f"{s['link_jitter_ms']:g}",
            "--seed", str(seed)], host.log_dir / "linkdelay.log")  # fmt: skip
    iptables.apply(host, CHAIN, [line])


def restore(host: Host) -> None:
    """Undo every link fault on host; safe when none was applied."""
    iptables.heal(host, CHAIN)
    host.remote.stop_daemon(DAEMON)


def heal(hosts: Sequence[Host]) -> None:
    """Undo every link fault on every host, in parallel."""
    on_hosts(hosts, restore)


def rules(host: Host) -> list[str]:
    """The host's current KCH-LINK rules (iptables -S form); [] when healed."""
    return iptables.rules(host, CHAIN)
