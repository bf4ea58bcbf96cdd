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

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkers.linear.history import Operation, thaw
from checkers.linear.models import Model, Partition
from checkers.linear.search import Budget, search

# Keys whose searches are repeated (for their linearizations) only up to this many ops in
# all, so drawing a huge valid history does not cost a second full check.
LINEARIZE_MAX_OPS = 20_000
SEARCH_BUDGET_S = 30.0


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
    payload = json.dumps(data, default=repr).replace("</", "<\\/")
    return (_PAGE.replace("@TITLE@", html.escape(title))
            .replace("@DATA@", payload).replace("@STYLE@", _STYLE).replace("@SCRIPT@", _SCRIPT))


def write_visualization(path: str | Path, ops: Sequence[Operation], model: Model,
                        verdict: dict[str, Any], title: str | None = None) -> Path:
    """Write the page for a checked history to ``path``; return the path."""
    path = Path(path)
    data = visualization_data(ops, model, verdict)
    path.write_text(render_html(data, title or f"Linearizability: {path.stem}"),
                    encoding="utf-8")
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>@TITLE@</title>
<style>@STYLE@</style>
</head>
<body>
<h1>@TITLE@</h1>
<p id="summary"></p>
<label><input type="checkbox" id="all-keys"> show every key</label>
<div id="tracks"></div>
<div id="tip" hidden></div>
<script type="application/json" id="data">@DATA@</script>
<script>@SCRIPT@</script>
</body>
</html>
"""

_STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 6px; }
h2 { font-size: 14px; margin: 18px 0 4px; }
.track { margin-bottom: 10px; }
.track.hidden { display: none; }
.status-invalid h2 { color: #b00020; }
svg { display: block; background: #fafafa; border: 1px solid #ddd; }
.op rect { fill: #cfd8dc; stroke: #90a4ae; }
.op.lin rect { fill: #c8e6c9; stroke: #43a047; }
.op.illegal rect { fill: #ffcdd2; stroke: #b00020; stroke-width: 2; }
.op.pending rect { stroke-dasharray: 4 3; }
.op:hover rect, .op.hover rect { stroke: #000; stroke-width: 2; }
.op text { font-size: 11px; pointer-events: none; }
.op .step { font-weight: bold; fill: #1b5e20; }
.row-label { font-size: 11px; fill: #555; }
#tip { position: fixed; background: #fff; border: 1px solid #888; padding: 6px 8px;
       max-width: 520px; box-shadow: 0 2px 6px rgba(0,0,0,.2); font-size: 12px;
       white-space: pre-wrap; pointer-events: none; }
"""

_SCRIPT = r"""
'use strict';
(function () {
  const NS = 'http://www.w3.org/2000/svg';
  const data = JSON.parse(document.getElementById('data').textContent);
  const ROW = 26, BAR = 18, LEFT = 90, WIDTH = 1080, TOP = 6;
  const scale = (WIDTH - LEFT - 10) / Math.max(1, data.end);
  const tip = document.getElementById('tip');
  const show = (v) => (v === null || v === undefined) ? '-' : JSON.stringify(v);

  function el(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function tipText(op) {
    const lines = [op.text];
    if (op.illegal) {
      lines.push('ILLEGAL: no order of the pending ops lets it take effect before it returned');
      lines.push('state here: ' + show(op.illegal_state));
    }
    if (op.step !== null) {
      lines.push('linearized #' + op.step);
      lines.push('state before: ' + show(op.before));
      lines.push('state after:  ' + show(op.after));
    } else if (!op.illegal) {
      lines.push('not in the linearization shown');
    }
    lines.push('history positions ' + op.call + ' .. ' + (op.ret === null ? 'never returned' : op.ret));
    return lines.join('\n');
  }

  function drawTrack(track, container) {
    const div = document.createElement('div');
    div.className = 'track status-' + track.status.replace(' ', '-');
    div.dataset.key = JSON.stringify(track.key);
    const h = document.createElement('h2');
    h.textContent = (track.key === null ? 'history' : 'key ' + JSON.stringify(track.key)) +
      ': ' + track.status + (track.linearized ? ' (' + track.linearized + ' ops linearized)' : '');
    div.appendChild(h);
    const procs = [...new Set(track.ops.map(o => o.process))].sort();
    const row = Object.fromEntries(procs.map((p, i) => [p, i]));
    const svg = el('svg', {width: WIDTH, height: TOP * 2 + procs.length * ROW});
    procs.forEach((p, i) => {
      const t = el('text', {x: 4, y: TOP + i * ROW + BAR - 4, class: 'row-label'}, svg);
      t.textContent = 'process ' + p;
    });
    for (const op of track.ops) {
      const cls = ['op'];
      if (op.step !== null) cls.push('lin');
      if (op.illegal) cls.push('illegal');
      if (op.ret === null) cls.push('pending');
      const g = el('g', {class: cls.join(' '), 'data-op': op.id}, svg);
      const x = LEFT + op.call * scale;
      const w = Math.max(4, ((op.ret === null ? data.end : op.ret) - op.call) * scale);
      const y = TOP + row[op.process] * ROW;
      el('rect', {x: x, y: y, width: w, height: BAR, rx: 3}, g);
      const label = el('text', {x: x + 3, y: y + BAR - 5}, g);
      label.textContent = (op.step !== null ? '' : '') + op.text.replace(/^process [^:]*: /, '');
      if (op.step !== null) {
        const s = el('text', {x: x + w - 3, y: y + BAR - 5, 'text-anchor': 'end', class: 'step'}, g);
        s.textContent = '#' + op.step;
      }
      g.addEventListener('mouseover', (ev) => {
        tip.textContent = tipText(op);
        tip.hidden = false;
        tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 540) + 'px';
        tip.style.top = (ev.clientY + 12) + 'px';
        g.classList.add('hover');
      });
      g.addEventListener('mouseout', () => { tip.hidden = true; g.classList.remove('hover'); });
    }
    div.appendChild(svg);
    container.appendChild(div);
    return div;
  }

  const summary = document.getElementById('summary');
  summary.textContent = 'model ' + data.model + ': ' +
    (data.valid === true ? 'linearizable' : data.valid === false ? 'NOT linearizable' : 'unknown') +
    (data.explanation ? ' \u2014 ' + data.explanation : '');
  const container = document.getElementById('tracks');
  const divs = data.tracks.map(t => drawTrack(t, container));
  const toggle = document.getElementById('all-keys');
  const anyInvalid = data.tracks.some(t => t.status === 'invalid');
  function apply() {
    divs.forEach((d, i) => d.classList.toggle('hidden',
      anyInvalid && !toggle.checked && data.tracks[i].status !== 'invalid' && data.tracks.length > 8));
  }
  toggle.addEventListener('change', apply);
  toggle.checked = data.tracks.length <= 8;
  apply();
})();
"""
