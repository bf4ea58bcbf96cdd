"""Nodes on netns hosts import the checkout the run was started from, not whatever the
interpreter has installed (an editable install of another checkout)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from control.cluster import Cluster
from control.host import Host
from control.provider import CHECKOUT, LocalNetnsProvider


def _host(name: str) -> Host:
    return Host(name, "10.0.0.1", Path("/d/data"), Path("/r"), Path("/l"), None)  # type: ignore[arg-type]


def test_the_hosts_python_imports_the_checkout_the_harness_runs_from(tmp_path: Path) -> None:
    cluster = Cluster([_host("n1")], {}, python=LocalNetnsProvider.python, code=LocalNetnsProvider.code)
    # An ssh session starts in the user's home: run from elsewhere, as a node would.
    out = subprocess.run([*cluster._python(), "-c", "import replication; print(replication.__file__)"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()) == CHECKOUT / "replication" / "__init__.py"
    assert (CHECKOUT / "control" / "provider.py").is_file()


def test_node_argv_puts_the_checkout_first_only_when_told() -> None:
    hosts = [_host("n1"), _host("n2")]
    assert Cluster(hosts, {}, python="py").node_argv(hosts[1])[:3] == ["py", "-m", "replication"]
    argv = Cluster(hosts, {}, python="py", code="/src/kch").node_argv(hosts[1])
    assert argv[:5] == ["env", "PYTHONPATH=/src/kch", "py", "-m", "replication"]

