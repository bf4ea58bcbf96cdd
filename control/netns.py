"""Network plumbing for netns hosts: namespaces on a private bridge, and their removal.

Each namespace gets loopback and one veth (eth0) on the slot's bridge, an address in the
slot's /24 and no default route: nothing sent inside can be routed off the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from control import slots

NETNS_DIR = Path("/run/netns")


class NetnsError(RuntimeError):
    pass


def _run(argv: list[str], input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise NetnsError(f"`{' '.join(argv)}` failed ({proc.returncode}): {detail}")
    return proc


def _ip_batch(commands: Iterable[str], netns: str | None = None) -> None:
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    _run(argv, input="".join(c + "\n" for c in commands))


def check_subnet_free(slot: int) -> None:
    """Refuse to shadow a network the machine already routes (it would not be private)."""
    prefix = f"{slots.SUBNET_PREFIX}.{slot}."
    routes = _run(["ip", "-4", "-o", "route", "show", "table", "all"]).stdout.splitlines()
    for line in routes:
        if (line.startswith(prefix) or f" {prefix}" in line) and slots.bridge_name(slot) not in line:
            raise NetnsError(f"subnet {slots.subnet(slot)} is already in use on this machine: {line}")


def create_network(slot: int, n: int) -> list[str]:
    """Create the bridge and n namespaces for slot; the hosts' addresses, n1 first."""
    if not 1 <= n <= slots.MAX_HOSTS:
        raise ValueError(f"nodes must be between 1 and {slots.MAX_HOSTS}, got {n}")
    check_subnet_free(slot)
    br = slots.bridge_name(slot)
    root_cmds = [f"link add {br} type bridge", f"addr add {slots.bridge_address(slot)}/24 dev {br}"]
    for i in range(1, n + 1):
        ns, veth = slots.netns_name(slot, i), slots.veth_name(slot, i)
        root_cmds += [
            f"netns add {ns}",
            f"link add {veth} type veth peer name eth0 netns {ns}",
            f"link set {veth} master {br} up",
        ]
    root_cmds.append(f"link set {br} up")
    _ip_batch(root_cmds)
    addresses = []
    for i in range(1, n + 1):
        address = slots.host_address(slot, i)
        _ip_batch(
            ["link set lo up", f"addr add {address}/24 dev eth0", "link set eth0 up"],
            netns=slots.netns_name(slot, i),
        )
        addresses.append(address)
    _allow_bridge_forwarding(slot)
    return addresses


def _allow_bridge_forwarding(slot: int) -> None:
    # With br_netfilter loaded, bridged frames traverse the root FORWARD chain; a machine
    # whose FORWARD policy is DROP (e.g. Docker hosts) would silently cut our hosts apart.
    # The rule accepts only traffic from our bridge to our bridge.
    br = slots.bridge_name(slot)
    _run(["iptables", "-w", "-I", "FORWARD", "-i", br, "-o", br,
          "-m", "comment", "--comment", slots.rule_comment(slot), "-j", "ACCEPT"])


# -- teardown ---------------------------------------------------------------------------


def existing_namespaces() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def existing_links() -> list[str]:
    return sorted(os.listdir("/sys/class/net"))


def _netns_inode(name: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / name).st_ino
    except OSError:
        return None


def _process_table() -> list[tuple[int, str | None, list[str]]]:
    """(pid, net namespace link, argv) of every live process we can see."""
    table = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            netns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            netns = None  # gone, or a zombie (which holds no namespace any more)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        table.append((pid, netns, argv))
    return table


def _is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def kill_slot_processes(slot: int, cluster_dir: str | None) -> int:
    """SIGKILL every process inside the slot's namespaces, and its sshds even if the namespace
    name is already gone (an interrupted cleanup). Returns how many were killed."""
    inodes = set()
    for ns in existing_namespaces():
        m = slots.NETNS_RE.match(ns)
        if m and int(m.group(1)) == slot and (ino := _netns_inode(ns)) is not None:
            inodes.add(f"net:[{ino}]")
    marker = f"{cluster_dir.rstrip('/')}/" if cluster_dir else None
    victims = []
    for pid, netns, argv in _process_table():
        if pid == os.getpid():
            continue
        ours = netns in inodes
        if not ours and marker and argv:
            # A running sshd rewrites its title into one string: "sshd: /usr/sbin/sshd -f ...".
            line = " ".join(argv)
            ours = "sshd" in line and f"-f {marker}" in line
        if ours:
            victims.append(pid)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while any(_is_alive(p) for p in victims) and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(victims)


def _root_rules(slot: int) -> list[list[str]]:
    out = _run(["iptables", "-w", "-S", "FORWARD"], check=False).stdout
    comment = slots.rule_comment(slot)
    rules = []
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["-A"] and comment in parts:
            rules.append(["-D", *parts[1:]])
    return rules


def destroy_network(slot: int) -> None:
    """Remove the slot's namespaces, links and root iptables rule; no error if absent."""
    for rule in _root_rules(slot):
        _run(["iptables", "-w", *rule], check=False)
    for ns in existing_namespaces():
        m = slots.NETNS_RE.match(ns)
        if m and int(m.group(1)) == slot:
            _run(["ip", "netns", "del", ns], check=False)
    for link in existing_links():
        m = slots.LINK_RE.match(link)
        if m and int(m.group(1) or m.group(2)) == slot:
            # A veth usually vanishes with its namespace; deleting it too is harmless.
            _run(["ip", "link", "del", link], check=False)


def slots_with_rules() -> set[int]:
    """Slots with a root FORWARD rule of ours (the rule outlives a half-done cleanup)."""
    out = _run(["iptables", "-w", "-S", "FORWARD"], check=False).stdout
    found = set()
    for line in out.splitlines():
        for part in line.split():
            if part.startswith("kch-slot-") and part[len("kch-slot-"):].isdigit():
                found.add(int(part[len("kch-slot-"):]))
    return found


def slots_present() -> set[int]:
    """Slots that have a namespace or link on the machine."""
    found = set()
    for ns in existing_namespaces():
        if m := slots.NETNS_RE.match(ns):
            found.add(int(m.group(1)))
    for link in existing_links():
        if m := slots.LINK_RE.match(link):
            found.add(int(m.group(1) or m.group(2)))
    return found
