"""One sshd per netns host: its configuration, and starting them all in parallel."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from control import toxiproxy

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
READY_TIMEOUT = 20.0


@dataclass(frozen=True)
class SshdSpec:
    netns: str
    address: str
    config_dir: Path  # holds sshd_config, the host key, the pidfile and the log
    authorized_keys: Path

    @property
    def config(self) -> Path:
        return self.config_dir / "sshd_config"

    @property
    def host_key(self) -> Path:
        return self.config_dir / "ssh_host_ed25519_key"

    @property
    def pidfile(self) -> Path:
        return self.config_dir / "sshd.pid"

    @property
    def log(self) -> Path:
        return self.config_dir / "sshd.log"


def render_config(spec: SshdSpec) -> str:
    # StrictModes is off because the cluster directory sits under /tmp, which sshd's
    # ownership walk rejects (world-writable); the files themselves are 0600 in a root-owned
    # 0700 tree, which is what StrictModes would have enforced.
    return "\n".join([
        f"ListenAddress {spec.address}:22",
        f"HostKey {spec.host_key}",
        f"PidFile {spec.pidfile}",
        f"AuthorizedKeysFile {spec.authorized_keys}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        "AllowUsers root",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitEmptyPasswords no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PermitUserEnvironment no",
        # The one forward allowed: to Toxiproxy's API on the host's loopback, which the
        # harness reaches only this way (control/toxiproxy.py); nothing else, no remote ones.
        "AllowTcpForwarding local",
        f"PermitOpen {toxiproxy.API_HOST}:{toxiproxy.API_PORT}",  # and the key's permitopen
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "PrintMotd no",
        # bash sources ~/.bashrc for commands run by sshd only in a top-level shell; an
        # inherited SHLVL makes it a nested one. That keeps a login's interactive set-up
        # (here a pyenv init costing ~0.5 s) out of every command the harness sends.
        "SetEnv SHLVL=1",
        # The harness multiplexes many concurrent commands over one connection per host.
        "MaxSessions 128",
        "MaxStartups 64:30:128",
        "LogLevel INFO",
        "Subsystem sftp internal-sftp",
        "",
    ])


def write_config(spec: SshdSpec) -> None:
    spec.config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    spec.config.write_text(render_config(spec))


def start_all(specs: list[SshdSpec]) -> None:
    """Start every sshd at once and wait until each accepts connections.

    sshd daemonizes before it binds, but writes its PidFile only once the listening socket
    is bound: the pidfile's appearance is the readiness signal.
    """
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    procs = []
    for spec in specs:
        argv = ["ip", "netns", "exec", spec.netns, SSHD, "-f", str(spec.config), "-E", str(spec.log)]
        procs.append((spec, subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
        )))
    failures = []
    for spec, proc in procs:
        out, _ = proc.communicate(timeout=30)
        if proc.returncode != 0:
            log = spec.log.read_text(errors="replace")[-2000:] if spec.log.exists() else ""
            failures.append(f"{spec.netns}: sshd exited {proc.returncode}: {out.decode().strip()} {log}")
    if failures:
        raise RuntimeError("could not start sshd: " + "; ".join(failures))
    deadline = time.monotonic() + READY_TIMEOUT
    for spec in specs:
        while not spec.pidfile.exists():
            if time.monotonic() > deadline:
                log = spec.log.read_text(errors="replace")[-2000:] if spec.log.exists() else ""
                raise RuntimeError(f"{spec.netns}: sshd not listening after {READY_TIMEOUT}s {log}")
            time.sleep(0.005)
