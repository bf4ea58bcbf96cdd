"""Every fault kind, one `FaultKind` object each (nemesis.kinds.base says what one is).

A kind lives in one module of this package and registers itself with `@register`; every
module here is imported below, so adding a kind is adding a module (plus its test, its line
in docs/nemesis.md and its weight in the default profile; what it does to a host that no
World verb does, it carries as a HostAction): the config (its settings),
the planner, the nemesis (its effects, into the history), the runner's lossy-filesystem
decision, the simulator and the stories all read this registry; the checkers and reports
read the effects the history records (runformat.effects)."""

from __future__ import annotations

import importlib
import pkgutil

from nemesis.kinds.base import TARGET_MODES, FaultKind, Resolved, Setting, Topology, World
from nemesis.kinds.registry import all_kinds, lookup

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module}")

KNOWN_FAULTS: tuple[str, ...] = tuple(k.name for k in all_kinds())
LOSSY_FS_FAULTS: tuple[str, ...] = tuple(k.name for k in all_kinds() if k.needs_lazyfs)

__all__ = ["KNOWN_FAULTS", "LOSSY_FS_FAULTS", "TARGET_MODES", "FaultKind", "Resolved",
           "Setting", "Topology", "World", "all_kinds", "all_settings", "lookup", "needs_lazyfs",
           "needs_toxiproxy", "with_effect"]


def needs_lazyfs(faults: list[str] | tuple[str, ...]) -> bool:
    """Whether a run with these faults needs the lossy filesystem under its data dirs."""
    return any(lookup(f).needs_lazyfs for f in faults)


def needs_toxiproxy(faults: list[str] | tuple[str, ...]) -> bool:
    """Whether a run with these faults needs Toxiproxy beside every node (a toxic kind)."""
    return any(lookup(f).family == "toxic" for f in faults)


def all_settings() -> dict[str, Setting]:
    """Every kind's flat [nemesis] settings (a key two kinds share must mean the same)."""
    out: dict[str, Setting] = {}
    for kind in all_kinds():
        for key, setting in kind.settings.items():
            if out.setdefault(key, setting) != setting:
                raise ValueError(f"setting {key!r} is declared twice, differently")
    return out


def with_effect(effect: str) -> tuple[str, ...]:
    """The kinds that declare `effect` (runformat.effects)."""
    return tuple(k.name for k in all_kinds() if effect in k.effects)
