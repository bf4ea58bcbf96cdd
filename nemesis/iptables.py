"""Our own iptables chains inside hosts, each jumped to first from one built-in chain.

Partitions (KCH-PART) and link faults (KCH-LINK) each own one chain jumped to from INPUT; a
cut from the clients (nemesis.client_partition) owns two, KCH-CLIENT from INPUT and
KCH-CLIENT-OUT from OUTPUT. Applying replaces the chain's rules in one atomic
iptables-restore commit, so there is no instant with half a fault applied; healing removes
the jump and the chain and nothing else on the host. Chain and hook names are quoted into
the shell lines (shlex.quote), though every caller passes constants.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from control.host import Host

_NEEDS = "command -v {tool} >/dev/null || {{ echo 'iptables is not installed' >&2; exit 127; }}; "
HOOKS = ("INPUT", "OUTPUT")  # the built-in filter chains a chain of ours is jumped to from


def restore_input(chain: str, rules: Iterable[str]) -> str:
    """iptables-restore input that creates or empties `chain` and fills it with `rules`
    (each a rule spec without the leading `-A chain`)."""
    lines = ["*filter", f":{chain} - [0:0]", *(f"-A {chain} {r}" for r in rules), "COMMIT"]
    return "".join(line + "\n" for line in lines)


def _hook(hook: str) -> str:
    if hook not in HOOKS:
        raise ValueError(f"iptables hook must be one of {HOOKS}, got {hook!r}")
    return shlex.quote(hook)


def apply(host: Host, chain: str, rules: Iterable[str], hook: str = "INPUT") -> None:
    """Make `rules` the whole of `chain` on host and jump to it first from `hook`."""
    c, h = shlex.quote(chain), _hook(hook)
    script = (
        _NEEDS.format(tool="iptables-restore") + "iptables-restore -w --noflush && "
        f"{{ iptables -w -C {h} -j {c} 2>/dev/null || iptables -w -I {h} 1 -j {c}; }}"
    )
    host.remote.run(["sh", "-c", script], input=restore_input(chain, rules), sudo=True, timeout=30)


def heal(host: Host, chain: str, hook: str = "INPUT") -> None:
    """Remove the jump to `chain` from `hook` and the chain itself; safe when they do not
    exist."""
    c, h = shlex.quote(chain), _hook(hook)
    script = (
        _NEEDS.format(tool="iptables")
        + f"while iptables -w -D {h} -j {c} 2>/dev/null; do :; done; "
        f"if iptables -w -S {c} >/dev/null 2>&1; then "
        f"iptables -w -F {c} && iptables -w -X {c}; fi"
    )
    host.remote.run(["sh", "-c", script], sudo=True, timeout=30)


def rules(host: Host, chain: str) -> list[str]:
    """The chain's current rules on host (iptables -S form); [] when healed."""
    result = host.remote.run(["iptables", "-w", "-S", chain], sudo=True, check=False, timeout=30)
    return [line for line in result.stdout.splitlines() if line.startswith("-A ")]
