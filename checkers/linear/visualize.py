"""A Porcupine-style picture of a linearizability check: one static HTML page, its script
and styles inline (it loads nothing from the network), written beside the verdict by
`harness check --model` when a history is not linearizable.

One track per key (partition) of the history, one row per process, one bar per operation
from its invocation to its completion (to the right edge when it never completed). For an
invalid key the bars of the longest partial linearization the search found are numbered in
linearization order, and the operation that could not be linearized is red; a valid key
shows a full linearization. Hovering over an operation shows it, where it was linearized,
and the model's state before and after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkers.linear.history import Operation, thaw
from checkers.linear.models import Model, Partition
from checkers.linear.search import Budget, search
from checkers.templating import environment
from control.files import write_text_atomic

# Keys whose searches are repeated (for their linearizations) only up to this many ops in
# all, so drawing a huge valid history does not cost a second full check.
LINEARIZE_MAX_OPS = 20_000
SEARCH_BUDGET_S = 30.0
TEMPLATE = "linearizability.html"


def _track(part: Partition, status: str, linearize: bool) -> dict[str, Any]:
    model = part.model
    order: list[int] = []
    illegal: int | None = None
    failed_state: Any = None
    if linearize and status in ("valid", "invalid", "not searched"):
        result = search(part.ops, model, Budget.of(SEARCH_BUDGET_S), want_linearization=True)
        if status == "not searched":  # the check stopped at another key: search it now
            status = {True: "valid", False: "invalid"}.get(result.valid, status)
        if result.valid is True:
            order = result.linearization
        elif result.valid is False and result.failure is not None:
            order = result.failure.partial
            illegal = result.failure.op.id
            failed_state = model.describe_state(result.failure.state)
    by_id = {op.id: op for op in part.ops}
    states: dict[int, tuple[Any, Any, int]] = {}
    state = model.init()
    for step, op_id in enumerate(order, 1):
        op = by_id[op_id]
        ok, after = model.step(state, model.input_of(op), op.output)
        states[op_id] = (model.describe_state(state), model.describe_state(after), step)
        state = after
    ops = []
    for op in part.ops:
        before, after, step = states.get(op.id, (None, None, None))
        ops.append({
            "id": op.id, "process": str(op.process), "call": op.call, "ret": op.ret,
            "text": model.describe_op(op), "step": step, "before": before, "after": after,
            "illegal": op.id == illegal,
            "illegal_state": failed_state if op.id == illegal else None,
        })
    return {"key": None if part.key is None else thaw(part.key), "status": status,
            "linearized": len(order), "ops": ops, "failed_state": failed_state}


def visualization_data(ops: Sequence[Operation], model: Model,
                       verdict: dict[str, Any]) -> dict[str, Any]:
    """What the page draws: the verdict, and one track per partition of the history."""
    parts = model.partition(model.prepare(list(ops)))
    invalid = verdict.get("invalid_keys")
    unknown = set(map(repr, (verdict.get("unknown") or {}).get("keys", [])))
    linearize = sum(len(p.ops) for p in parts) <= LINEARIZE_MAX_OPS
    tracks = []
    for part in parts:
        key = None if part.key is None else thaw(part.key)
        if part.key is None:
            status = {True: "valid", False: "invalid"}.get(verdict.get("valid"), "unknown")
        elif invalid is not None and key in invalid:
            status = "invalid"
        elif repr(key) in unknown:
            status = "unknown"
        elif verdict.get("valid") is True or invalid is None:
            status = "valid" if verdict.get("valid") is True else "unknown"
        else:  # the in-process search stops at the first invalid key: others may be either
            status = "not searched"
        failing = status == "invalid"
        tracks.append(_track(part, status, linearize or failing))
    tracks.sort(key=lambda t: (t["status"] != "invalid", repr(t["key"])))
    end = 1 + max((max(o["call"], o["ret"] or 0) for t in tracks for o in t["ops"]), default=0)
    failure = verdict.get("failure") or {}
    return {"model": verdict.get("model", model.name), "valid": verdict.get("valid"),
            "explanation": failure.get("explanation", ""), "end": end, "tracks": tracks}


def render_html(data: dict[str, Any], title: str) -> str:
    """The page (templates/linearizability.html): the title as text, the data as JSON for its
    script, both escaped by the template (checkers/templating.py)."""
    return environment("checkers.linear").get_template(TEMPLATE).render(title=title, data=data)


def write_visualization(path: str | Path, ops: Sequence[Operation], model: Model,
                        verdict: dict[str, Any], title: str | None = None) -> Path:
    """Write the page for a checked history to ``path``; return the path."""
    path = Path(path)
    data = visualization_data(ops, model, verdict)
    write_text_atomic(path, render_html(data, title or f"Linearizability: {path.stem}"))
    return path
