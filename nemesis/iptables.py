"""Our own iptables chains inside hosts, each jumped to first from INPUT.

Partitions (KCH-PART) and link faults (KCH-LINK) each own one chain. Applying replaces the
chain's rules in one atomic iptables-restore commit, so there is no instant with half a fault
applied; healing removes the jump and the chain and nothing else on the host.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from control.host import Host

_NEEDS = "command -v {tool} >/dev/null || {{ echo 'iptables is not installed' >&2; exit 127; }}; "


def restore_input(chain: str, rules: Iterable[str]) -> str:
    """iptables-restore input that creates or empties `chain` and fills it with `rules`
    (each a rule spec without the leading `-A chain`)."""
    lines = ["*filter", f":{chain} - [0:0]", *(f"-A {chain} {r}" for r in rules), "COMMIT"]
    return "".join(line + "\n" for line in lines)


def apply(host: Host, chain: str, rules: Iterable[str]) -> None:
    """Make `rules` the whole of `chain` on host and jump to it first from INPUT."""
    script = (
        _NEEDS.format(tool="iptables-restore") + "iptables-restore -w --noflush && "
        f"{{ iptables -w -C INPUT -j {chain} 2>/dev/null || iptables -w -I INPUT 1 -j {chain}; }}"
    )
    host.remote.run(["sh", "-c", script], input=restore_input(chain, rules), sudo=True, timeout=30)


def heal(host: Host, chain: str) -> None:
    """Remove the jump to `chain` and the chain itself; safe when they do not exist."""
    script = (
        _NEEDS.format(tool="iptables")
        + f"while iptables -w -D INPUT -j {chain} 2>/dev/null; do :; done; "
        f"if iptables -w -S {chain} >/dev/null 2>&1; then "
        f"iptables -w -F {chain} && iptables -w -X {chain}; fi"
    )
    host.remote.run(["sh", "-c", script], sudo=True, timeout=30)


def rules(host: Host, chain: str) -> list[str]:
    """The chain's current rules on host (iptables -S form); [] when healed."""
    result = host.remote.run(["iptables", "-w", "-S", chain], sudo=True, check=False, timeout=30)
    return [line for line in result.stdout.splitlines() if line.startswith("-A ")]
