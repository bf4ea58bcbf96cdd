"""Start a controller and brokers as real processes on loopback addresses.

For the process tests and benchmarks; chaos runs use the harness's hosts instead. Each node
gets its own 127.0.0.x address so the cluster looks like separate machines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    def __init__(self, root: Path, brokers: int = 3, config: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.port = _free_port()
        self.config = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200",
                       "replica.lag.time.max.ms": "2000", **(config or {})}
        self.controller_address = f"127.0.0.1:{self.port}"
        self.broker_ids = list(range(1, brokers + 1))
        self.procs: dict[str | int, subprocess.Popen] = {}

    def address(self, broker_id: int) -> str:
        return f"127.0.0.{broker_id + 1}:{self.port}"

    def _config_args(self) -> list[str]:
        return [arg for k, v in self.config.items() for arg in ("--config", f"{k}={v}")]

    def _spawn(self, name: str | int, argv: list[str]) -> None:
        node_dir = self.root / str(name)
        node_dir.mkdir(parents=True, exist_ok=True)
        with open(node_dir / "node.log", "ab") as logf:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "replication", *argv],
                                                stdout=logf, stderr=subprocess.STDOUT)

    def start_controller(self) -> None:
        self._spawn("controller", ["controller", "--listen", self.controller_address,
                                   "--data", str(self.root / "controller" / "data"), *self._config_args()])

    def start_broker(self, b: int) -> None:
        self._spawn(b, ["broker", "--id", str(b), "--listen", self.address(b), "--controller",
                        self.controller_address, "--data", str(self.root / str(b) / "data"),
                        *self._config_args()])

    def start(self) -> LocalCluster:
        self.start_controller()
        for b in self.broker_ids:
            self.start_broker(b)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run_cli("topics", "--bootstrap", self.controller_address, "--describe", check=False)
            if out.returncode == 0:
                return
            time.sleep(0.1)
        raise TimeoutError("cluster did not come up")

    def run_cli(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "replication", *args], capture_output=True,
                              text=True, check=check, timeout=timeout)

    def kill(self, name: str | int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        proc.wait(timeout=20)

    def stop(self) -> None:
        """The brokers, then the controller, as an operator stops a cluster: a broker's
        controlled shutdown asks the controller to move its leaders, and with the controller
        gone first it waited its whole SHUTDOWN_MS (10 s) for an answer."""
        brokers = [p for name, p in self.procs.items() if name != "controller"]
        controller = [p for name, p in self.procs.items() if name == "controller"]
        for group in (brokers, controller):
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in group:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
