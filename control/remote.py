"""Control of one host over SSH (paramiko), shared by every host provider.

Commands are sent as argv lists joined with shlex.quote, so no argument is ever re-parsed by
the remote shell. Host keys are verified against the provider's known_hosts with RejectPolicy:
an unknown or changed key fails closed.
"""

from __future__ import annotations

import re
import select
import shlex
import socket
import stat
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import paramiko

Argv = list[str] | str
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# A daemon name becomes a pidfile name; keep it to a safe, flat file name.
_SAFE_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class RemoteError(Exception):
    """Base class of everything that goes wrong talking to a host."""


class Unreachable(RemoteError):
    """The host could not be connected to (or the connection broke)."""

    def __init__(self, host: str, address: str, port: int, cause: BaseException | str) -> None:
        self.host, self.address, self.port, self.cause = host, address, port, cause
        super().__init__(f"host {host} ({address}:{port}) unreachable: {cause}")


class HostKeyMismatch(Unreachable):
    """The host presented a key that the known_hosts file does not vouch for."""


class CommandFailed(RemoteError):
    def __init__(self, host: str, command: str, result: Result) -> None:
        self.host, self.command, self.result = host, command, result
        tail = (result.stderr or result.stdout).strip()[-2000:]
        super().__init__(f"on {host}: `{command}` exited {result.rc}: {tail}")


class CommandTimeout(RemoteError):
    def __init__(self, host: str, command: str, timeout: float) -> None:
        self.host, self.command, self.timeout = host, command, timeout
        super().__init__(f"on {host}: `{command}` did not finish within {timeout:g}s")


@dataclass(frozen=True)
class Result:
    rc: int  # -1 when the command was killed by a signal (SSH reports no exit status then)
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass(frozen=True)
class Endpoint:
    """How to reach one host and where its per-host run directory (pidfiles) lives."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    run_dir: PurePosixPath
    sudo: bool = False  # prefix privileged commands with `sudo -n` (non-root users)


def to_command(argv: Argv) -> str:
    """A shell command line: strings pass through (caller's own shell), lists are quoted."""
    if isinstance(argv, str):
        return argv
    if not argv:
        raise ValueError("empty argv")
    return shlex.join(str(a) for a in argv)


def as_root(command: str) -> str:
    """command under non-interactive sudo (fails rather than prompting for a password)."""
    return "sudo -n -- sh -c " + shlex.quote(command)


def _check_name(name: str) -> str:
    if not name or name.startswith(".") or not set(name) <= _SAFE_NAME:
        raise ValueError(f"daemon name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


class Remote:
    """One reusable SSH connection to a host; reconnects when the transport has died.

    Thread-safe: paramiko multiplexes concurrent channels over one transport, and connecting
    is serialised by a lock.
    """

    def __init__(self, endpoint: Endpoint, connect_timeout: float = 10.0) -> None:
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.endpoint.name

    def __repr__(self) -> str:
        e = self.endpoint
        return f"Remote({e.name} {e.user}@{e.address}:{e.port})"

    # -- connection ---------------------------------------------------------------------

    def _unreachable(self, cause: BaseException | str) -> Unreachable:
        e = self.endpoint
        return Unreachable(e.name, e.address, e.port, cause)

    def _connect(self) -> paramiko.SSHClient:
        e = self.endpoint
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(str(e.known_hosts))
        except OSError as err:
            raise self._unreachable(f"cannot read known_hosts {e.known_hosts}: {err}") from err
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                e.address,
                port=e.port,
                username=e.user,
                key_filename=str(e.key_file),
                timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout,
                allow_agent=False,
                look_for_keys=False,
            )
        except paramiko.BadHostKeyException as err:
            client.close()
            raise HostKeyMismatch(e.name, e.address, e.port, err) from err
        except paramiko.SSHException as err:
            client.close()
            # RejectPolicy raises a plain SSHException for a host missing from known_hosts.
            if "not found in known_hosts" in str(err):
                raise HostKeyMismatch(e.name, e.address, e.port, err) from err
            raise self._unreachable(err) from err
        except OSError as err:
            client.close()
            raise self._unreachable(err) from err
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)
            # Many small messages each way (a channel's open, its data, its close): with
            # Nagle's algorithm one would wait for the peer's delayed ACK, 40 ms at a time
            # (measured on Toxiproxy API calls through a channel: 60-100 ms for a toxic
            # added and removed, 9-13 ms without).
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return client

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                if self._client is not None:
                    self._client.close()
                self._client = None
                self._client = self._connect()
                transport = self._client.get_transport()
            assert transport is not None
            return transport

    def _open_channel(self) -> paramiko.Channel:
        # A dead transport is only noticed when a channel is refused; opening a channel has
        # no side effect on the host, so retrying once on a fresh connection is safe.
        for attempt in (1, 2):
            transport = self._transport()
            try:
                return transport.open_session(timeout=self.connect_timeout)
            except (paramiko.SSHException, EOFError, OSError) as err:
                if transport.is_active():
                    # Refused by a live server (e.g. too many sessions): other threads'
                    # commands still use this connection, so it must stay open.
                    raise RemoteError(f"on {self.name}: cannot open a session: {err}") from err
                if attempt == 2:
                    raise self._unreachable(err) from err
        raise AssertionError("unreachable")

    def open_tunnel(self, address: str, port: int, timeout: float | None = None
                    ) -> paramiko.Channel:
        """A TCP connection from the host to `address`:`port` there (an SSH direct-tcpip
        channel, what `ssh -L` uses): how the harness reaches a service the host keeps on its
        own loopback, out of every other user's reach. ChannelException when the host's sshd
        refuses (code 1: forwarding not allowed there) or nothing listens (code 2)."""
        for attempt in (1, 2):
            transport = self._transport()
            try:
                return transport.open_channel("direct-tcpip", (address, port), ("127.0.0.1", 0),
                                              timeout=timeout or self.connect_timeout)
            except paramiko.ChannelException:
                raise  # the host answered: refused, not a broken connection
            except (paramiko.SSHException, EOFError, OSError) as err:
                if transport.is_active() or attempt == 2:
                    raise self._unreachable(err) from err
        raise AssertionError("unreachable")

    def connect(self) -> Remote:
        """Connect now (instead of on first use), so an unreachable host is reported early."""
        self._transport()
        return self

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- commands -----------------------------------------------------------------------

    def run(
        self,
        argv: Argv,
        timeout: float = 60.0,
        check: bool = True,
        input: bytes | str | None = None,
        sudo: bool = False,
    ) -> Result:
        """Run a command; a list is quoted argument by argument, a string is a shell line.

        `sudo=True` marks a command that needs root: on hosts configured with `sudo` it runs
        under `sudo -n`. On timeout the channel is closed and CommandTimeout raised.
        """
        command = to_command(argv)
        if sudo and self.endpoint.sudo:
            command = as_root(command)
        channel = self._open_channel()
        writer = None
        try:
            channel.exec_command(command)
            if input is None:
                channel.shutdown_write()
            else:
                # Fed from a thread: a command echoing its input would otherwise fill our
                # receive window while we are still sending, and both sides would wait.
                data = input.encode() if isinstance(input, str) else input
                writer = threading.Thread(target=_feed, args=(channel, data), daemon=True)
                writer.start()
            rc, out, err = self._collect(channel, command, timeout)
        except (paramiko.SSHException, EOFError, OSError) as err:
            raise self._unreachable(f"connection lost running `{command}`: {err}") from err
        finally:
            channel.close()
            if writer is not None:
                writer.join(timeout=5)
        result = Result(rc, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and rc != 0:
            raise CommandFailed(self.name, command, result)
        return result

    def _collect(
        self, channel: paramiko.Channel, command: str, timeout: float
    ) -> tuple[int, bytes, bytes]:
        # Drain both streams while waiting: a command with large output would otherwise
        # block on a full window and never exit.
        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        while True:
            progressed = False
            while channel.recv_ready():
                out += channel.recv(65536)
                progressed = True
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
                progressed = True
            # The exit status may overtake the last output (sshd reports the exit as soon
            # as it reaps the child), so the end is the status *and* the channel's EOF. Like
            # ssh, this waits for anything the command left holding its stdout/stderr.
            done = channel.exit_status_ready() and (channel.eof_received or channel.closed)
            if done and not channel.recv_ready() and not channel.recv_stderr_ready():
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CommandTimeout(self.name, command, timeout)
            if not progressed:
                # The channel's fileno becomes readable on output, EOF and close; the short
                # cap covers an exit status that arrives after EOF (it wakes nothing).
                select.select([channel], [], [], min(remaining, 0.05))
        rc = channel.recv_exit_status()
        # -1 means no exit status: the command died by a signal, or the connection broke.
        if rc == -1 and not channel.get_transport().is_active():
            raise EOFError("connection closed before the command exited")
        return rc, bytes(out), bytes(err)

    # -- daemons --------------------------------------------------------------------------

    def _pidfile(self, name: str) -> str:
        return str(self.endpoint.run_dir / f"{_check_name(name)}.pid")

    def start_daemon(
        self,
        name: str,
        argv: list[str],
        log_path: str | PurePosixPath,
        env: dict[str, str] | None = None,
        cwd: str | PurePosixPath | None = None,
    ) -> int:
        """Start argv detached (own session, immune to SIGHUP), output to log_path; its pid.

        The pid is also its process-group id, so signals reach any children it spawns.
        Refuses to start a second daemon of the same name while the first runs.
        """
        if self.is_running(name):
            raise RemoteError(f"on {self.name}: daemon {name!r} is already running")
        pidfile = self._pidfile(name)
        bad = [k for k in (env or {}) if not _ENV_NAME.fullmatch(k)]
        if bad:
            raise ValueError(f"invalid environment variable name(s): {bad}")
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        # `env --` ends option parsing, so neither a value nor argv[0] is read as an option.
        inner = to_command(["env", "--", *envs, *argv])
        q = shlex.quote
        script = (
            f"mkdir -p {q(str(self.endpoint.run_dir))} {q(str(PurePosixPath(log_path).parent))}"
            + (f" && cd {q(str(cwd))}" if cwd else "")
            # In a non-interactive shell the background child is not a group leader, so
            # setsid execs in place (no fork) and $! is the daemon's own pid.
            + f" && {{ setsid nohup {inner} >>{q(str(log_path))} 2>&1 </dev/null & }}"
            + f" && echo $! >{q(pidfile)} && echo $!"
        )
        result = self.run(["sh", "-c", script], timeout=30)
        return int(result.stdout.strip())

    def pid(self, name: str) -> int | None:
        """The daemon's pid if it is alive (not exited, not a zombie), else None."""
        pidfile = shlex.quote(self._pidfile(name))
        script = (
            f"p=$(cat {pidfile} 2>/dev/null) || exit 1; "
            'state=$(sed -n "s/^[0-9]* (.*) \\([A-Za-z]\\) .*/\\1/p" /proc/$p/stat 2>/dev/null); '
            '[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] && echo $p'
        )
        out = self.run(["sh", "-c", script], timeout=30, check=False).stdout.strip()
        return int(out) if out.isdigit() else None

    def is_running(self, name: str) -> bool:
        return self.pid(name) is not None

    def signal(self, name: str, sig: int | str) -> bool:
        """Send sig (number or name, e.g. "KILL", "STOP") to the daemon's process group.

        False if the daemon is not running.
        """
        pid = self.pid(name)
        if pid is None:
            return False
        signame = str(sig).removeprefix("SIG")
        result = self.run(["kill", f"-{signame}", f"-{pid}"], timeout=30, check=False)
        return result.ok

    def stop_daemon(self, name: str, timeout: float = 10.0) -> bool:
        """SIGTERM the daemon's process group and wait until it is gone; SIGKILL after timeout.

        Returns only once the daemon has ended, so a caller may start it again at once.
        True if it had to be killed.
        """
        pid = self.pid(name)
        if pid is None:
            return False
        p = shlex.quote(str(pid))
        # After SIGKILL, wait too: the kernel ends the process soon, not at once.
        script = f"""
alive() {{ grep -qv '^[0-9]* (.*) Z' /proc/{p}/stat 2>/dev/null; }}
kill -TERM -{p} 2>/dev/null
for i in $(seq {max(1, round(timeout * 10))}); do alive || exit 0; sleep 0.1; done
kill -KILL -{p} 2>/dev/null
while alive; do sleep 0.05; done
exit 1
"""
        return not self.run(["sh", "-c", script], timeout=timeout + 60, check=False).ok

    def stop_all(self, timeout: float = 10.0) -> list[str]:
        """SIGTERM every daemon started here, SIGKILL what is left after timeout.

        Returns the names of the daemons that had to be killed. Each is signalled as its
        process group, or alone while it has none: a daemon just started may not have
        reached its `setsid` yet (on a loaded machine a stop right after the start found
        no group, so the daemon missed the TERM and was killed at the end).
        """
        run_dir = shlex.quote(str(self.endpoint.run_dir))
        script = f"""
cd {run_dir} 2>/dev/null || exit 0
alive() {{ kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* (.*) Z' /proc/$1/stat 2>/dev/null; }}
sig() {{ kill -"$1" -"$2" 2>/dev/null || kill -"$1" "$2" 2>/dev/null; }}
for f in *.pid; do [ -f "$f" ] && sig TERM "$(cat "$f")"; done
i=0
while [ $i -lt {max(1, round(timeout * 10))} ]; do
  left=0
  for f in *.pid; do [ -f "$f" ] && alive "$(cat "$f")" && left=1; done
  [ $left = 0 ] && break
  sleep 0.1; i=$((i + 1))
done
for f in *.pid; do
  [ -f "$f" ] || continue
  p=$(cat "$f")
  if alive "$p"; then sig KILL "$p"; echo "${{f%.pid}}"; fi
  rm -f "$f"
done
"""
        out = self.run(["sh", "-c", script], timeout=timeout + 30).stdout
        return out.split()

    # -- files ----------------------------------------------------------------------------

    def _sftp(self) -> paramiko.SFTPClient:
        for attempt in (1, 2):
            transport = self._transport()
            try:
                return paramiko.SFTPClient.from_transport(transport)
            except (paramiko.SSHException, EOFError, OSError) as err:
                if transport.is_active():
                    raise RemoteError(f"on {self.name}: cannot start sftp: {err}") from err
                if attempt == 2:
                    raise self._unreachable(err) from err
        raise AssertionError("unreachable")

    def put(self, local: Path, remote_path: str | PurePosixPath, mode: int | None = None) -> None:
        with self._sftp() as sftp:
            sftp.put(str(local), str(remote_path))
            if mode is not None:
                sftp.chmod(str(remote_path), mode)

    def put_all(self, files: Iterable[tuple[Path, str | PurePosixPath]]) -> None:
        """Copy each (local, remote path) pair, in one SFTP session."""
        with self._sftp() as sftp:
            for local, remote_path in files:
                sftp.put(str(local), str(remote_path))

    def get(self, remote_path: str | PurePosixPath, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        with self._sftp() as sftp:
            sftp.get(str(remote_path), str(local))

    def fetch_dir(self, remote_dir: str | PurePosixPath, local_dir: Path,
                  skip_suffixes: tuple[str, ...] = ()) -> int:
        """Copy a remote directory tree (regular files and dirs; symlinks and files whose names
        end in one of `skip_suffixes` skipped): file count."""
        with self._sftp() as sftp:
            return _fetch_tree(sftp, PurePosixPath(remote_dir), local_dir, skip_suffixes)


def _feed(channel: paramiko.Channel, data: bytes) -> None:
    try:
        channel.sendall(data)
        channel.shutdown_write()
    except (OSError, EOFError, paramiko.SSHException):
        pass  # the command exited or the channel closed early; run() reports what happened


def _fetch_tree(sftp: paramiko.SFTPClient, remote: PurePosixPath, local: Path,
                skip_suffixes: tuple[str, ...] = ()) -> int:
    local.mkdir(parents=True, exist_ok=True)
    count = 0
    for entry in sftp.listdir_attr(str(remote)):
        mode = entry.st_mode or 0
        if entry.filename in (".", ".."):
            continue
        src, dst = remote / entry.filename, local / entry.filename
        if stat.S_ISDIR(mode):
            count += _fetch_tree(sftp, src, dst, skip_suffixes)
        elif stat.S_ISREG(mode) and not entry.filename.endswith(skip_suffixes):
            sftp.get(str(src), str(dst))
            count += 1
    return count
