"""Hosts where nodes run, and their control over SSH.

Providers: `NetnsProvider` (default: network namespaces on this machine, each with its own
sshd) and `SshProvider` (real machines or VMs from an inventory file). Both hand out `Host`s
whose `remote` is a paramiko-backed `Remote`.
"""

import importlib
from typing import Any

# Where each public name lives. They load on first use (PEP 562), so that a process that only
# needs a leaf module such as control.files (the simulator, which may run under PyPy without
# paramiko) does not import SSH, sshd and namespace machinery it never uses.
_HOME = {
    "cleanup_stale": "control.cleanup",
    "Host": "control.host",
    "InventoryError": "control.inventory",
    "load_inventory": "control.inventory",
    "NetnsProvider": "control.netns_provider",
    "CommandFailed": "control.remote",
    "CommandTimeout": "control.remote",
    "Endpoint": "control.remote",
    "HostKeyMismatch": "control.remote",
    "Remote": "control.remote",
    "RemoteError": "control.remote",
    "Result": "control.remote",
    "Unreachable": "control.remote",
    "SshProvider": "control.ssh_provider",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'control' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOME)
