"""A node cut off from the clients' host, by netfilter inside the node's host.

The workload's clients run in the harness's process, on the machine that also reaches every
host's SSH (on netns hosts the slot's bridge address): one source address for both. A
`partition` drops by source address, so it cannot cut a node off from its clients without
cutting the harness off from the host too. This cut matches the node's service port as well:

- KCH-CLIENT, jumped to first from INPUT, drops TCP segments from the clients' address to
  the service port (the port clients connect to: control.cluster.PORT, Kafka's listener and
  the embedded node's alike, or its Toxiproxy in front of it);
- KCH-CLIENT-OUT, jumped to first from OUTPUT, drops segments from the service port to the
  clients' address, so no answer to a request sent before the cut gets through either.

SSH, Toxiproxy's API (reached through SSH) and every other node (replication, the KRaft
controller, inter-broker requests: other addresses) still reach the node. The clients'
address is the one the host sees our SSH connection come from (`$SSH_CONNECTION`), which is
where the clients' connections come from as long as they share the route (netns hosts, the
VMs of `make vms`). Healing removes both chains and nothing else; a crashed run's chains go
with its namespaces (control.cleanup), and on long-lived hosts the next run's heal removes
them (nemesis.hosts_world.heal_network).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import TYPE_CHECKING

from control.cluster import PORT
from control.parallel import on_hosts
from nemesis import iptables

if TYPE_CHECKING:
    from control.host import Host

CHAIN_IN, CHAIN_OUT = "KCH-CLIENT", "KCH-CLIENT-OUT"


def parse_clients_address(ssh_connection: str) -> str:
    """The client address of an `$SSH_CONNECTION` value ("client port server port"), an IPv4
    address (a ValueError in one line otherwise: the rules are written for IPv4)."""
    fields = ssh_connection.split()
    if len(fields) != 4:
        raise ValueError(f"SSH_CONNECTION should be 'client port server port', got "
                         f"{ssh_connection.strip()!r}")
    try:
        return str(ipaddress.IPv4Address(fields[0]))
    except ValueError:
        raise ValueError(f"the clients' address {fields[0]!r} is not an IPv4 address; "
                         "client-partition writes IPv4 rules only") from None


def rules(clients: str, port: int = PORT) -> tuple[list[str], list[str]]:
    """The KCH-CLIENT (INPUT) and KCH-CLIENT-OUT (OUTPUT) rule specs that cut the clients at
    `clients` off from the service `port`, both ways."""
    address = str(ipaddress.IPv4Address(clients))  # never a string the rule would re-parse
    port = int(port)
    if not 0 < port < 65536:
        raise ValueError(f"port must be 1..65535, got {port}")
    return ([f"-s {address}/32 -p tcp -m tcp --dport {port} -j DROP"],
            [f"-d {address}/32 -p tcp -m tcp --sport {port} -j DROP"])


def clients_address(host: Host) -> str:
    """The address the host sees the harness (and so the clients) connect from."""
    out = host.remote.run(["sh", "-c", 'printf %s "$SSH_CONNECTION"'], timeout=30).stdout
    return parse_clients_address(out)


def cut(host: Host, port: int = PORT) -> dict[str, object]:
    """Cut the clients off from `port` on host; what was cut, for the history."""
    clients = clients_address(host)
    inbound, outbound = rules(clients, port)
    iptables.apply(host, CHAIN_IN, inbound, hook="INPUT")
    iptables.apply(host, CHAIN_OUT, outbound, hook="OUTPUT")
    return {"clients": clients, "port": port}


def restore(host: Host) -> None:
    """Undo the cut on host; safe when there is none."""
    iptables.heal(host, CHAIN_IN, hook="INPUT")
    iptables.heal(host, CHAIN_OUT, hook="OUTPUT")


def heal(hosts: Sequence[Host]) -> None:
    """Undo every cut from the clients on every host, in parallel."""
    on_hosts(hosts, restore)
