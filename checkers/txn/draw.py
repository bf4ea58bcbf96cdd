"""A found cycle drawn as a small SVG graph: the transactions on a circle, each step an
arrow labelled with its kind and key. Every text drawn comes from the history (processes,
keys, values) and is escaped; the result is Markup, so a report inlines it as it is."""

from __future__ import annotations

import math
from typing import Any

from markupsafe import Markup, escape

SIZE, RADIUS, NODE = 260, 90, 22
COLOURS = {"ww": "#b03a2e", "wr": "#1f618d", "process": "#7d6608", "realtime": "#566573"}


def is_cycle(example: Any) -> bool:
    return (isinstance(example, dict) and isinstance(example.get("cycle"), list)
            and isinstance(example.get("steps"), list)
            and len(example["cycle"]) == len(example["steps"]) + 1 >= 3)


def _place(i: int, n: int) -> tuple[float, float]:
    angle = 2 * math.pi * i / n - math.pi / 2
    return SIZE / 2 + RADIUS * math.cos(angle), SIZE / 2 + RADIUS * math.sin(angle)


def _label(step: dict[str, Any]) -> str:
    kind = str(step.get("type", ""))
    if "key" not in step:
        return kind
    after = step.get("value'")
    text = f"{kind} {step['key']}: {step.get('value')}"
    return text if after is None else f"{text} < {after}"


def _arrow(a: tuple[float, float], b: tuple[float, float], step: dict[str, Any]) -> str:
    dx, dy = b[0] - a[0], b[1] - a[1]
    d = math.hypot(dx, dy) or 1.0
    x1, y1 = a[0] + dx / d * NODE, a[1] + dy / d * NODE
    x2, y2 = b[0] - dx / d * NODE, b[1] - dy / d * NODE
    colour = COLOURS.get(str(step.get("type")), "#000")
    mx, my = (x1 + x2) / 2 - dy / d * 12, (y1 + y2) / 2 + dx / d * 12
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
            f'stroke-width="2" marker-end="url(#arrow)"/>'
            f'<text x="{mx:.1f}" y="{my:.1f}" font-size="10" text-anchor="middle" '
            f'fill="{colour}">{escape(_label(step))}</text>')


def cycle_svg(example: dict[str, Any]) -> Markup:
    """The cycle of one anomaly example (`cycle`: n+1 transactions, the first repeated last;
    `steps`: the n edges between them)."""
    nodes = example["cycle"][:-1]
    n = len(nodes)
    at = [_place(i, n) for i in range(n)]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{SIZE}" height="{SIZE}" '
             f'role="img" aria-label="{escape(str(example.get("type", "cycle")))}">'
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    for i, step in enumerate(example["steps"]):
        parts.append(_arrow(at[i], at[(i + 1) % n], step if isinstance(step, dict) else {}))
    for (x, y), node in zip(at, nodes, strict=True):
        node = node if isinstance(node, dict) else {}
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{NODE}" fill="#fdfefe" '
                     f'stroke="#333"/><text x="{x:.1f}" y="{y + 4:.1f}" font-size="11" '
                     f'text-anchor="middle">T{escape(str(node.get("txn", "?")))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
