"""Hosts where nodes run, and their control over SSH.

Providers: `NetnsProvider` (default: network namespaces on this machine, each with its own
sshd) and `SshProvider` (real machines or VMs from an inventory file). Both hand out `Host`s
whose `remote` is a paramiko-backed `Remote`.
"""

from control.cleanup import cleanup_stale
from control.host import Host
from control.inventory import InventoryError, load_inventory
from control.netns_provider import NetnsProvider
from control.remote import (
    CommandFailed,
    CommandTimeout,
    Endpoint,
    HostKeyMismatch,
    Remote,
    RemoteError,
    Result,
    Unreachable,
)
from control.ssh_provider import SshProvider

__all__ = [
    "CommandFailed",
    "CommandTimeout",
    "Endpoint",
    "Host",
    "HostKeyMismatch",
    "InventoryError",
    "NetnsProvider",
    "Remote",
    "RemoteError",
    "Result",
    "SshProvider",
    "Unreachable",
    "cleanup_stale",
    "load_inventory",
]
