"""Hand-made histories for the transaction checkers' tests: history.jsonl lines, numbered and
timed in the order they are written."""

from __future__ import annotations


class HistoryLines:
    def __init__(self) -> None:
        self.lines: list[dict] = []
        self.txn = 0

    def op(self, process, type_, f, **fields) -> None:
        self.lines.append({"index": len(self.lines), "time": len(self.lines) * 10,
                           "process": process, "type": type_, "f": f, **fields})
