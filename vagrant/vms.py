#!/usr/bin/env python3
"""Bring the VM hosts up and down: the locally built box, libvirt, vagrant, the inventory.

    python3 vagrant/vms.py up [--vms N] [--accel auto|kvm|tcg] [--memory MiB]   # `make vms`
    python3 vagrant/vms.py down                                  # `make vms-down`
    python3 vagrant/vms.py status
    python3 vagrant/vms.py probe                                 # KVM or TCG, and why

`up`: checks the tools, starts libvirtd (and virtlogd) when no service manager runs them,
makes the default storage pool, builds the box when it is missing or its recipe changed
(box/build.sh), probes KVM (boots the box's disk under -enable-kvm and waits for its kernel on
the serial console; TCG when it stays silent), `vagrant up`s n1..nN and writes the inventory
(inventory.py). It prints the time each step took. `down`: `vagrant destroy`, the inventory
removed, and a check that no domain, volume or network of ours is left; the daemons it
started are stopped. The box stays (rebuilding it takes minutes); `down --box` removes it too.

Settings go to .vms/settings.json, which the Vagrantfile reads, so a later `vagrant` command
in this folder sees the same VMs. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = HERE / ".vms"
BOX_DIR = HERE / ".box"
BOX_NAME = "kch/debian12"
URI = "qemu:///system"
PREFIX = "kch-"  # the Vagrantfile's libvirt.default_prefix: domains kch-n1, kch-n2, ...
# Debian packages of the tools, for the error that names what is missing.
TOOLS = {
    "vagrant": "vagrant", "virsh": "libvirt-clients", "libvirtd": "libvirt-daemon-system",
    "virtlogd": "libvirt-daemon-system", "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils", "debootstrap": "debootstrap", "sfdisk": "fdisk",
    "dnsmasq": "dnsmasq-base", "ssh-keyscan": "openssh-client", "rsync": "rsync",
    "chronyd": "chrony",
}
KVM_PROBE_S = 30.0  # a working KVM prints the kernel banner within a few seconds
TCG_PROBE_S = 120.0


class VmsError(RuntimeError):
    pass


def say(message: str) -> None:
    print(f"vms: {message}", flush=True)


def run(argv: list[str], *, check: bool = True, timeout: float = 3600,
        env: dict[str, str] | None = None, quiet: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=HERE, text=True, timeout=timeout, env=env,
                            capture_output=quiet)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()[-2000:] if quiet else ""
        raise VmsError(f"`{' '.join(argv)}` failed (exit {result.returncode}){': ' + detail if detail else ''}")
    return result


def missing_tools() -> list[str]:
    """The Debian packages whose commands are not found (PATH plus the sbin folders)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool, path=path) is None})


def has_libvirt_plugin() -> bool:
    out = run(["vagrant", "plugin", "list"], check=False).stdout or ""
    return "vagrant-libvirt" in out


def check_tools() -> None:
    missing = missing_tools()
    if missing:
        raise VmsError("missing: " + ", ".join(missing) + " (`make vms` installs them with apt-get; "
                       "by hand: apt-get install " + " ".join(missing) + ")")
    if not has_libvirt_plugin():
        raise VmsError("vagrant has no vagrant-libvirt plugin (apt-get install vagrant-libvirt)")


# -- libvirtd ------------------------------------------------------------------------------

def libvirt_answers() -> bool:
    return run(["virsh", "-c", URI, "uri"], check=False, timeout=30).returncode == 0


def service_manager() -> bool:
    """True when systemd is PID 1: then libvirtd is its service, not ours to start by hand."""
    return Path("/run/systemd/system").is_dir()


def ensure_libvirtd() -> None:
    if libvirt_answers():
        return
    if service_manager():
        run(["systemctl", "start", "virtlogd.service", "libvirtd.service"])
    else:
        # No service manager (a container): the daemons by hand, in the background. Their
        # pids are kept so `down` stops exactly these and nothing else.
        STATE.mkdir(exist_ok=True)
        started = {}
        for daemon in ("virtlogd", "libvirtd"):
            pidfile = Path(f"/run/{daemon}.pid")
            run([daemon, "-d"])
            for _ in range(100):
                if pidfile.exists() and pidfile.read_text().strip().isdigit():
                    break
                time.sleep(0.1)
            started[daemon] = int(pidfile.read_text().strip())
        (STATE / "daemons.json").write_text(json.dumps(started))
        say(f"started {', '.join(f'{d} (pid {p})' for d, p in started.items())}: no service manager here")
    for _ in range(100):
        if libvirt_answers():
            return
        time.sleep(0.2)
    raise VmsError(f"libvirtd does not answer at {URI}")


# The top-level chains libvirtd adds to the host's iptables when it starts (and leaves when
# it stops), by table, with the built-in chains that jump to them.
LIBVIRT_CHAINS = {
    "filter": {"LIBVIRT_INP": "INPUT", "LIBVIRT_OUT": "OUTPUT", "LIBVIRT_FWX": "FORWARD",
               "LIBVIRT_FWI": "FORWARD", "LIBVIRT_FWO": "FORWARD"},
    "nat": {"LIBVIRT_PRT": "POSTROUTING"},
    "mangle": {"LIBVIRT_PRT": "POSTROUTING"},
}


def remove_libvirt_chains() -> list[str]:
    """Remove libvirtd's chains once it is stopped, where they are empty (its networks are
    gone with the VMs); a chain that still holds rules belongs to something else: kept."""
    removed = []
    for table, chains in LIBVIRT_CHAINS.items():
        for chain, parent in chains.items():
            rules = run(["iptables", "-t", table, "-S", chain], check=False)
            if rules.returncode != 0 or len(rules.stdout.split("\n")) > 2:
                continue  # absent, or not empty (more than its own -N line)
            run(["iptables", "-t", table, "-D", parent, "-j", chain], check=False)
            if run(["iptables", "-t", table, "-X", chain], check=False).returncode == 0:
                removed.append(f"{table}/{chain}")
    return removed


def stop_our_daemons() -> None:
    path = STATE / "daemons.json"
    if not path.exists():
        return
    for daemon, pid in reversed(json.loads(path.read_text()).items()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != daemon:
                continue  # gone, and the pid reused: not ours any more
            os.kill(pid, signal.SIGTERM)
            say(f"stopped {daemon} (pid {pid})")
        except (OSError, ValueError):
            pass
    for _ in range(50):  # libvirtd must be gone, or it might add its chains back
        if not libvirt_answers():
            break
        time.sleep(0.2)
    if shutil.which("iptables", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"])):
        removed = remove_libvirt_chains()
        if removed:
            say(f"removed libvirtd's empty iptables chains: {', '.join(removed)}")
    path.unlink()


def ensure_pool() -> None:
    """vagrant-libvirt keeps the VMs' disks in the storage pool "default"."""
    if run(["virsh", "-c", URI, "pool-info", "default"], check=False).returncode != 0:
        run(["virsh", "-c", URI, "pool-define-as", "default", "dir", "--target",
             "/var/lib/libvirt/images"])
        run(["virsh", "-c", URI, "pool-build", "default"])
    info = run(["virsh", "-c", URI, "pool-info", "default"]).stdout
    if "running" not in info:
        run(["virsh", "-c", URI, "pool-start", "default"])


# -- the box -------------------------------------------------------------------------------

def recipe_hash() -> str:
    data = b"".join((HERE / "box" / f).read_bytes() for f in ("build.sh", "guest-setup.sh"))
    return hashlib.sha256(data).hexdigest()


def vagrant_home() -> Path:
    return Path(os.environ.get("VAGRANT_HOME", Path.home() / ".vagrant.d"))


def box_image() -> Path:
    return vagrant_home() / "boxes" / BOX_NAME.replace("/", "-VAGRANTSLASH-") / "0" / "libvirt" / "box.img"


def box_is_current() -> bool:
    stamp = BOX_DIR / "box.stamp"
    return (box_image().exists() and (BOX_DIR / "id_ed25519").exists() and stamp.exists()
            and stamp.read_text().strip() == recipe_hash())


def ensure_box() -> None:
    if box_is_current():
        return
    say("building the box (box/build.sh: debootstrap, a few minutes)")
    run(["sh", str(HERE / "box" / "build.sh")], quiet=False)
    # vagrant-libvirt uploads a box into the pool once, named after the box file's time: the
    # copy of a box just replaced would stay there unused.
    for volume in box_volumes():
        run(["virsh", "-c", URI, "vol-delete", "--pool", "default", volume], check=False)


# -- KVM or TCG ----------------------------------------------------------------------------

def boots(accel: str, image: Path, timeout: float) -> tuple[bool, float]:
    """Whether a guest booted from `image` under `accel` prints its kernel banner on the
    serial console within `timeout` s, and how long it took (or waited). The disk is opened
    with -snapshot: the probe writes nothing to the box."""
    with tempfile.TemporaryDirectory(prefix="kch-probe-") as tmp:
        serial = Path(tmp) / "serial.log"
        argv = ["qemu-system-x86_64", "-accel", accel, "-m", "256", "-display", "none",
                "-no-reboot", "-serial", f"file:{serial}", "-monitor", "none", "-snapshot",
                "-drive", f"file={image},if=virtio,format=qcow2"]
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            while time.monotonic() - start < timeout and proc.poll() is None:
                if serial.exists() and b"Linux version" in serial.read_bytes()[:65536]:
                    return True, time.monotonic() - start
                time.sleep(0.2)
            return False, time.monotonic() - start
        finally:
            proc.kill()
            proc.wait()


def probe_accel() -> dict:
    """{"accel": "kvm"|"tcg", "why": ...}: KVM when a guest boots under it."""
    image = box_image()
    if not Path("/dev/kvm").exists():
        result = {"accel": "tcg", "why": "no /dev/kvm"}
    else:
        ok, took = boots("kvm", image, KVM_PROBE_S)
        if ok:
            return {"accel": "kvm", "why": f"a guest under KVM printed its kernel banner in {took:.1f} s"}
        result = {"accel": "tcg", "why": f"a guest under KVM printed nothing on its serial console "
                                         f"in {KVM_PROBE_S:.0f} s"}
    ok, took = boots("tcg", image, TCG_PROBE_S)
    if not ok:
        raise VmsError(f"the box does not boot even under TCG ({TCG_PROBE_S:.0f} s, no kernel "
                       f"banner on the serial console); {result['why']}")
    result["why"] += f"; under TCG its kernel banner came in {took:.1f} s"
    return result


# -- vagrant -------------------------------------------------------------------------------

def settings() -> dict:
    path = STATE / "settings.json"
    return json.loads(path.read_text()) if path.exists() else {}


def vagrant_env() -> dict[str, str]:
    env = dict(os.environ, VAGRANT_DEFAULT_PROVIDER="libvirt")
    env.update({k: str(v) for k, v in settings().items() if k.startswith("KCH_")})
    return env


def ours(kind: str) -> list[str]:
    """Our libvirt domains, volumes or networks (by the Vagrantfile's prefix)."""
    if kind == "domains":
        out = run(["virsh", "-c", URI, "list", "--all", "--name"], check=False).stdout or ""
    elif kind == "volumes":
        out = run(["virsh", "-c", URI, "vol-list", "default"], check=False).stdout or ""
        names = [line.split()[0] for line in out.splitlines()[2:] if line.split()]
        # The box's own volume (vagrant-libvirt's copy of box.img, the VMs' backing file)
        # stays with the box; `down --box` removes it.
        return [n for n in names if n.startswith(PREFIX) and not box_volume(n)]
    else:
        out = run(["virsh", "-c", URI, "net-list", "--all", "--name"], check=False).stdout or ""
        # vagrant-libvirt names its management network vagrant-libvirt and the private one
        # vagrant-private-dhcp (or after the subnet); none of them is the "default" network.
        return [n for n in out.split() if n.startswith("vagrant")]
    return [n for n in out.split() if n.startswith(PREFIX)]


def box_volume(name: str) -> bool:
    """A volume vagrant-libvirt made of a box image (named after the box, e.g.
    kch-VAGRANTSLASH-debian12_vagrant_box_image_0_<time>_box.img)."""
    return "_vagrant_box_image_" in name and name.startswith(BOX_NAME.replace("/", "-VAGRANTSLASH-"))


def box_volumes() -> list[str]:
    out = run(["virsh", "-c", URI, "vol-list", "default"], check=False).stdout or ""
    return [line.split()[0] for line in out.splitlines()[2:] if line.split() and box_volume(line.split()[0])]


def up(vms: int, accel: str, memory: int) -> int:
    t0 = time.monotonic()
    check_tools()
    ensure_libvirtd()
    ensure_pool()
    t_box = time.monotonic()
    ensure_box()
    say(f"box {BOX_NAME}: {time.monotonic() - t_box:.0f} s")
    if accel == "auto":
        t_probe = time.monotonic()
        probe = probe_accel()
        say(f"accelerator: {probe['accel']} ({probe['why']}; probe {time.monotonic() - t_probe:.0f} s)")
    else:
        probe = {"accel": accel, "why": "chosen with --accel"}
        say(f"accelerator: {accel} (chosen with --accel)")
    STATE.mkdir(exist_ok=True)
    (STATE / "settings.json").write_text(json.dumps(
        {"KCH_VMS": vms, "KCH_MEMORY": memory, "KCH_ACCEL": probe["accel"],
         "accel_why": probe["why"]}, indent=1))
    t_up = time.monotonic()
    run(["vagrant", "up", "--provider=libvirt"], env=vagrant_env(), quiet=False)
    say(f"vagrant up ({vms} VMs): {time.monotonic() - t_up:.0f} s")
    start_time_server()
    run([sys.executable, str(HERE / "inventory.py")], env=vagrant_env(), quiet=False)
    say(f"{vms} VMs running under {probe['accel']}; make vms took {time.monotonic() - t0:.0f} s")
    return 0


def down(remove_box: bool) -> int:
    if shutil.which("vagrant") and (HERE / ".vagrant").exists() and libvirt_answers():
        run(["vagrant", "destroy", "-f"], env=vagrant_env(), quiet=False)
    for f in ("inventory.toml", "known_hosts"):
        (HERE / f).unlink(missing_ok=True)
    left = []
    if libvirt_answers():
        left = [f"{k} {', '.join(v)}" for k in ("domains", "volumes", "networks") if (v := ours(k))]
    if remove_box and shutil.which("vagrant"):
        run(["vagrant", "box", "remove", "--force", "--all", BOX_NAME], check=False)
        if libvirt_answers():
            for volume in box_volumes():
                run(["virsh", "-c", URI, "vol-delete", "--pool", "default", volume])
        shutil.rmtree(BOX_DIR, ignore_errors=True)
    stop_time_server()
    stop_our_daemons()
    (STATE / "settings.json").unlink(missing_ok=True)
    if left:
        raise VmsError("left behind: " + "; ".join(left))
    qemus = run(["pgrep", "-a", "qemu-system"], check=False).stdout.strip()
    say("no VM, volume or network of ours left" + (f" (other qemu processes: {qemus})" if qemus else ""))
    return 0


# -- the guests' time source -------------------------------------------------------------------

def host_address() -> str:
    """The host's address on the VMs' private network (the Vagrantfile's KCH_SUBNET, .1)."""
    subnet = os.environ.get("KCH_SUBNET") or str(settings().get("KCH_SUBNET", "192.168.56"))
    return f"{subnet}.1"


def time_server_config(address: str, state: Path) -> str:
    """chronyd's config: serve this machine's clock on `address` to its /24 only; no command
    port (nothing listens but the NTP socket), state files under `state`."""
    network = address.rsplit(".", 1)[0] + ".0/24"
    return (f"bindaddress {address}\nallow {network}\nlocal stratum 8\ncmdport 0\n"
            f"pidfile {state / 'chronyd.pid'}\ndriftfile {state / 'chrony.drift'}\n")


def start_time_server() -> None:
    """A chronyd serving this machine's clock to the VMs (their chrony asks the private
    network's .1, vagrant/provision.sh), bound to that address only and answering only that
    network; `-x`: it never sets this machine's clock. Stopped by `down`."""
    stop_time_server()
    address = host_address()
    STATE.mkdir(exist_ok=True)
    conf = STATE / "chrony.conf"
    conf.write_text(time_server_config(address, STATE))
    run(["chronyd", "-x", "-f", str(conf)])
    pidfile = STATE / "chronyd.pid"
    for _ in range(50):
        if pidfile.exists() and pidfile.read_text().strip().isdigit():
            say(f"time server for the VMs: chronyd (pid {pidfile.read_text().strip()}) on {address}")
            return
        time.sleep(0.1)
    raise VmsError(f"chronyd did not start (config {conf})")


def stop_time_server() -> None:
    pidfile = STATE / "chronyd.pid"
    try:
        pid = int(pidfile.read_text().strip())
        if Path(f"/proc/{pid}/comm").read_text().strip() == "chronyd":
            os.kill(pid, signal.SIGTERM)
            say(f"stopped the VMs' time server (chronyd, pid {pid})")
    except (OSError, ValueError):
        pass
    for name in ("chronyd.pid", "chrony.conf", "chrony.drift"):
        (STATE / name).unlink(missing_ok=True)


def status() -> int:
    s = settings()
    if s:
        say(f"accelerator: {s.get('KCH_ACCEL')} ({s.get('accel_why')})")
    if not libvirt_answers():
        say("libvirtd is not running")
        return 0
    for kind in ("domains", "volumes", "networks"):
        say(f"{kind}: {', '.join(ours(kind)) or 'none'}")
    if (HERE / ".vagrant").exists():
        print(run(["vagrant", "status"], env=vagrant_env(), check=False).stdout, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="build the box if needed, start N VMs, write the inventory")
    p_up.add_argument("--vms", type=int, default=int(os.environ.get("KCH_VMS", "4")),
                      help="number of VMs, 2..64 (default 4, or $KCH_VMS)")
    p_up.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                      help="auto: probe KVM, TCG when a guest does not boot under it")
    # A Kafka broker's JVM (-Xmx512m) is 300-470 MB resident, beside the guest's own 150 MB.
    p_up.add_argument("--memory", type=int, default=int(os.environ.get("KCH_MEMORY", "1536")),
                      help="MiB per VM, 512..65536 (default 1536, enough for a Kafka broker; "
                           "or $KCH_MEMORY)")
    p_down = sub.add_parser("down", help="destroy the VMs; check that nothing is left")
    p_down.add_argument("--box", action="store_true", help="remove the built box too")
    sub.add_parser("status", help="the VMs, and the accelerator they run under")
    sub.add_parser("probe", help="whether a guest boots under KVM (else TCG)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            if not 2 <= args.vms <= 64:
                raise VmsError(f"--vms must be between 2 and 64, got {args.vms}")
            if not 512 <= args.memory <= 65536:
                raise VmsError(f"--memory must be between 512 and 65536 MiB, got {args.memory}")
            return up(args.vms, args.accel, args.memory)
        if args.command == "down":
            return down(args.box)
        if args.command == "probe":
            check_tools()
            if not box_image().exists():
                raise VmsError("no box to boot yet: run `make vms` (or box/build.sh) first")
            probe = probe_accel()
            say(f"accelerator: {probe['accel']} ({probe['why']})")
            return 0
        return status()
    except VmsError as e:
        print(f"vms: {e}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as e:
        print(f"vms: timed out: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
