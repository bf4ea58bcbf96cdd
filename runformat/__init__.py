"""The run folder's line formats, read one way: history.jsonl and events.jsonl.

The bottom layer of the project (it imports nothing of it), so the checkers, the reports,
the nemesis and the harness read a run's files through the same iterators and the same
malformed-line policy (runformat.jsonl), read what a fault did from its history operation
(runformat.effects), and read a stored run's config typed (runformat.run_config)."""

from runformat.jsonl import (
    Event,
    Op,
    Tally,
    events,
    history,
    last_time,
    node_events,
    read_events,
    records,
)

__all__ = ["Event", "Op", "Tally", "events", "history", "last_time", "node_events",
           "read_events", "records"]
