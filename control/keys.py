"""Ephemeral SSH keys: a client key per cluster and a host key per host, plus known_hosts."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@dataclass(frozen=True)
class KeyPair:
    private_file: Path
    public_line: str  # "ssh-ed25519 AAAA..."


def _write_private(path: Path, data: bytes) -> None:
    # Created 0600 from the start: never readable by others, not even for an instant.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def generate_ed25519(private_file: Path, comment: str) -> KeyPair:
    """Write a fresh ed25519 key in OpenSSH format (private 0600, public beside it)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    _write_private(private_file, private)
    public_line = f"{public} {comment}"
    private_file.with_name(private_file.name + ".pub").write_text(public_line + "\n")
    return KeyPair(private_file, public)


def known_hosts_line(address: str, port: int, public_line: str) -> str:
    host = address if port == 22 else f"[{address}]:{port}"
    return f"{host} {public_line}"


def write_known_hosts(path: Path, entries: Iterable[tuple[str, int, str]]) -> None:
    """entries: (address, port, "ssh-ed25519 AAAA...") for every host."""
    lines = [known_hosts_line(a, p, k) for a, p, k in entries]
    path.write_text("".join(line + "\n" for line in lines))


def write_authorized_keys(path: Path, public_lines: Iterable[str],
                          permit_open: str | None = None) -> None:
    """The keys, each `restrict`ed: no forwarding of any kind, no pty; commands and sftp still
    work. `permit_open` (HOST:PORT) allows local forwards to that one destination."""
    options = "restrict"
    if permit_open is not None:
        options += f',port-forwarding,permitopen="{permit_open}"'
    _write_private(path, "".join(f"{options} {line}\n" for line in public_lines).encode())
