"""VM faults: a host that is a libvirt VM (vagrant/, docs/vms.md) loses power for real.

`vm-power-off` pulls the plug on the target's VM (`virsh destroy`: QEMU is killed, the guest
gets no notice, its RAM -- the guest kernel's page cache with every write not yet written
back -- is gone) and boots it again (`virsh start`), as a real power failure and restart
would. What the guest had flushed survives: the Vagrantfile gives the disks cache=none, so a
guest flush reaches the image file (docs/vms.md, "Power-off"). No lossy filesystem is
involved: the loss is whatever the real guest kernel had not written back.

The power cycle is the kind's HostAction (`PowerCycle`), which the World runs through its
generic `act_on_host` on a host port (nemesis.hosts_world.RealHost, `VmHostPort` here) that
also carries what the cluster must know or set up again: no reach into the Cluster. apply()
freezes the node (SIGSTOP: nothing changes between the measurement and the cut),
records the guest kernel's Dirty and Writeback counters and copies the node's data directory
as the node sees it (page cache included) to this machine, destroys and starts the VM, waits
for its sshd, and copies the directory again; what each file lost (its content past the
longest prefix both copies share) is in the fault's `lost` details. The node stays down until the
fault is healed (heal() starts it), so the fault's duration is the node's downtime after the
boot. A workload that ends during a boot waits for it before everything is healed. The
history's `start-vm-power-off` operation is written when apply() returns (after the boot);
schedule.json holds the time the power went off.

The host must say which VM it is: `libvirt_domain` in the inventory (vagrant/inventory.py
writes each VM's libvirt UUID). virsh runs on the machine that runs the harness, against
$KCH_LIBVIRT_URI (default qemu:///system).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from nemesis.kinds.base import FaultKind, HostPort, Resolved, SimHostPort, World, each
from nemesis.kinds.power import HOST_AUTO, HOST_MODES
from nemesis.kinds.registry import register
from runformat import effects as fx

CONTENT_LIMIT = 64 << 20  # bytes of data files compared by content; sizes only beyond
BOOT_TIMEOUT_S = 900.0  # software emulation (TCG) boots in about a minute; KVM in seconds
_VIRSH_TIMEOUT_S = 120.0


def libvirt_uri() -> str:
    return os.environ.get("KCH_LIBVIRT_URI", "qemu:///system")


def virsh(*args: str) -> str:
    """Run virsh on this machine (an argv list, no shell); its stdout, or a clear error."""
    argv = ["virsh", "-c", libvirt_uri(), *args]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=_VIRSH_TIMEOUT_S)
    except FileNotFoundError:
        raise RuntimeError("vm-power-off needs virsh on the machine that runs the harness "
                           "(apt-get install libvirt-clients; docs/vms.md)") from None
    if result.returncode != 0:
        raise RuntimeError(f"`{shlex.join(argv)}` failed: {result.stderr.strip()}")
    return result.stdout


def snapshot_command(data_dir: str) -> str:
    """Shell line printing the guest's Dirty/Writeback counters and every data file's size."""
    d = shlex.quote(data_dir)
    return (f"grep -E '^(Dirty|Writeback):' /proc/meminfo; "
            f"if [ -d {d} ]; then cd {d} && find . -type f -printf 'F %s %P\\n'; fi")


def parse_snapshot(output: str) -> tuple[dict[str, int], dict[str, int]]:
    """({"Dirty": kB, "Writeback": kB}, {relative path: size})."""
    counters: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for line in output.splitlines():
        if line.startswith("F "):
            _, size, path = line.split(" ", 2)
            sizes[path] = int(size)
        elif ":" in line:
            key, _, value = line.partition(":")
            counters[key.strip()] = int(value.split()[0])
    return counters, sizes


def lost_bytes(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, int]:
    """Per file, the bytes of its content before the power-off that are not there after the
    boot: its length past the longest prefix both share (the files are appended to, so what
    differs after the first difference is lost; a file that vanished lost all of it). A
    file's size alone does not tell: ext4 may keep a size whose data never reached the disk,
    and the file then reads as zeros there."""
    lost = {}
    for path, data in sorted(before.items()):
        kept = after.get(path, b"")
        n = min(len(data), len(kept))
        same = n if data[:n] == kept[:n] else next(i for i in range(n) if data[i] != kept[i])
        if same < len(data):
            lost[path] = len(data) - same
    return lost


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file below root, by path relative to it."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class VmHostPort(HostPort, Protocol):
    """A real host as a power cycle needs it (nemesis.hosts_world.RealHost): its VM, its
    node's folders and signals, and the cluster's part in it (which nodes are down, what was
    set up on the host besides the node), so the kind never reaches into the Cluster."""

    domain: str  # the libvirt domain, "" when the host is not a VM
    data_dir: str
    run_dir: str
    derived_files: tuple[str, ...]  # suffixes of files the node rebuilds (Kafka's indexes)

    def run(self, argv: Sequence[str], *, sudo: bool = False, timeout: float = 60.0) -> str: ...
    def fetch_dir(self, remote_dir: str, local_dir: Path, skip: tuple[str, ...] = ()) -> None: ...
    def disconnect(self) -> None: ...
    def signal_node(self, sig: str) -> None: ...
    def node_down(self) -> None: ...
    def restore_after_boot(self) -> None: ...


def _snapshot(host: VmHostPort, skip: tuple[str, ...]) -> tuple[dict[str, int], dict[str, int]]:
    out = host.run(["sh", "-c", snapshot_command(host.data_dir)], timeout=60)
    counters, sizes = parse_snapshot(out)
    return counters, {p: n for p, n in sizes.items() if not p.endswith(skip)}


def _wait_for_ssh(host: VmHostPort, deadline: float) -> None:
    from control.remote import HostKeyMismatch, RemoteError

    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            host.run(["true"], timeout=30)
            return
        except HostKeyMismatch:
            raise  # another key after a boot: not the VM we know; never retried into
        except (RemoteError, OSError) as e:  # Unreachable is a RemoteError
            last = e
            host.disconnect()
            time.sleep(2.0)
    raise RuntimeError(f"{host.name}: no SSH {BOOT_TIMEOUT_S:.0f} s after `virsh start`: {last}")


def power_cycle(host: VmHostPort) -> dict[str, Any]:
    """Power the host's VM off and on; what its data directory lost (blocking)."""
    if not host.domain:
        raise RuntimeError(f"{host.name} is not a VM: vm-power-off needs `libvirt_domain` for "
                           "it in the inventory (vagrant/inventory.py writes it; docs/vms.md)")
    host.signal_node("STOP")  # frozen: no write between the measurement and the cut
    tmp = Path(tempfile.mkdtemp(prefix=f"kch-vm-power-off-{host.name}-"))
    try:
        # Kafka's offset and time indexes are left out: with their preallocated 10 MB bodies
        # the copy before the cut was 29 MB, read over SSH under TCG while the guest kernel
        # went on writing dirty pages back: the cut came later than the fault meant.
        skip = host.derived_files
        counters, sizes = _snapshot(host, skip)
        # The data files' content as the node sees it (the guest's page cache included),
        # copied here to compare with what is on the disk after the boot. Small in tests;
        # past CONTENT_LIMIT only sizes are compared.
        compare = sum(sizes.values()) <= CONTENT_LIMIT
        if compare:
            host.fetch_dir(host.data_dir, tmp / "before", skip)
        t0 = time.monotonic()
        virsh("destroy", host.domain)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        host.signal_node("CONT")  # no power-off after all: leave the node running
        raise
    host.node_down()
    host.disconnect()  # the connection died with the guest; reconnect after the boot
    t_off = time.monotonic()
    virsh("start", host.domain)
    _wait_for_ssh(host, time.monotonic() + BOOT_TIMEOUT_S)
    t_up = time.monotonic()
    # Pidfiles from before the power-off name processes that no longer exist (and pids a
    # fresh boot may have given to others): nothing of ours runs on a freshly booted host.
    host.run(["sh", "-c", f"rm -f {shlex.quote(host.run_dir)}/*.pid"])
    host.restore_after_boot()  # the lazyfs mount went with the power; Toxiproxy too
    try:
        _, sizes_after = _snapshot(host, skip)
        if compare:
            host.fetch_dir(host.data_dir, tmp / "after", skip)
            lost = lost_bytes(read_tree(tmp / "before"), read_tree(tmp / "after"))
        else:
            lost = {p: n - sizes_after.get(p, 0) for p, n in sizes.items() if n > sizes_after.get(p, 0)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "power_off": "virsh destroy + virsh start",
        "dirty_kib": counters.get("Dirty"), "writeback_kib": counters.get("Writeback"),
        "data_bytes_before": sum(sizes.values()), "data_bytes_after": sum(sizes_after.values()),
        "lost_bytes": sum(lost.values()), "files": lost,
        "compared": "content" if compare else "sizes",
        "destroy_s": round(t_off - t0, 3), "boot_s": round(t_up - t_off, 3),
    }


@dataclass(frozen=True)
class PowerCycle:
    """vm-power-off's HostAction: the VM's power cut and restored (power_cycle). Nothing is
    left to undo on the host once it returns, the power being back on; what stays is a node
    that is not running, which the kind's heal starts, as after a kill. No simulated form:
    the kind says `simulated = False`, and `harness simulate` refuses it by name first."""

    def on_host(self, host: HostPort) -> dict[str, Any]:
        return power_cycle(cast(VmHostPort, host))

    def undo_on_host(self, host: HostPort) -> None:
        """Nothing: the power came back within on_host."""

    def in_simulation(self, host: SimHostPort) -> dict[str, Any]:
        raise NotImplementedError("vm-power-off needs libvirt VMs: a simulated world has none")

    def undo_in_simulation(self, host: SimHostPort) -> None:
        raise NotImplementedError("vm-power-off needs libvirt VMs")


@register
class VmPowerOff(FaultKind):
    """The VM's power is cut (`virsh destroy`) and it boots again; the node starts when healed."""

    name = "vm-power-off"
    family = "host"
    effects = frozenset({fx.KILLS_PROCESS, fx.LOSES_UNSYNCED})
    phrase = "{who} {loses} power (the VM is powered off)"
    auto_targets = HOST_AUTO
    mode_targets = HOST_MODES
    simulated = False  # a simulated world has no VMs to power off

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        # Through the World's generic verb: on a HostsWorld a cancel mid-boot (the workload
        # ended) waits for the boot before it goes on, so the heal that follows starts the
        # node on a VM that is up (nemesis.hosts_world.HostsWorld.act_on_host).
        return await each(resolved, lambda node: world.act_on_host(node, self.name, PowerCycle()))

    async def heal(self, world: World, resolved: Resolved) -> None:
        async def heal_one(node: str) -> None:
            await world.undo_on_host(node, self.name)
            await world.start(node)

        await each(resolved, heal_one)
