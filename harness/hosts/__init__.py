"""Hosts where nodes run, and their control over SSH.

Providers: `NetnsProvider` (default: network namespaces on this machine, each with its own
sshd) and `SshProvider` (real machines or VMs from an inventory file). Both hand out `Host`s
whose `remote` is a paramiko-backed `Remote`.
"""

from harness.hosts.cleanup import cleanup_stale
from harness.hosts.control import (
    CommandFailed,
    CommandTimeout,
    Endpoint,
    HostKeyMismatch,
    Remote,
    RemoteError,
    Result,
    Unreachable,
)
from harness.hosts.host import Host
from harness.hosts.inventory import InventoryError, load_inventory
from harness.hosts.netns_provider import NetnsProvider
from harness.hosts.ssh_provider import SshProvider

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
