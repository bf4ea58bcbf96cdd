"""What each anomaly means, shared by the Spark checker and the single-process reference.

Vocabulary: a *send* names (partition p, value v). A send *completed* ok or info; an
*acked* send is a send with an ok completion that names its offset o. A *committed* send is
an ok send, or an info send whose value some read returned in p (an info send never read is
indeterminate: never reported lost, and its offset is unknown). The *offset of a committed
send* is the offset its completion names, or else -- learned from reads -- the lowest offset
at which a read returned v in p; unknown when neither exists (acks=0 and never read). A *read*
is one record [offset, value] returned by an ok `poll` or `final-poll`. Sends at acks=0/1 are
checked for loss like any committed send but not for stale reads (only acks=all promises a
committed record). An *operation* (op) is one invoke/completion pair of the history; a
Jepsen op translated by checkers.jepsen_kafka becomes several of ours sharing a `txn`, and
counts as one operation. Anomalies inside one operation are the `int-` ones, as in Jepsen's
Kafka checker (jepsen.tests.kafka); the others are across operations.

lost-write           committed (p, o, v) missing from the final state of p while that state
                     reaches an offset >= o. The final state is p's last ok `final-poll`;
                     a record consumers read earlier and that was later truncated away is
                     lost (it was below the HWM, hence committed). Where no final read of p
                     completed, "missing" means v was never read in p, and "reaches" means
                     some read of p reached an offset >= o.
unseen               committed, missing as above, and the final state (or, without one, every
                     read) ends before o, or o is unknown. Only counted for partitions whose
                     final read completed; otherwise the record is "unconfirmed" and the
                     verdict is unknown.
inconsistent-offsets one (p, o) seen (read or acked) with more than one value.
duplicate            one value v seen at more than one offset of the same partition
                     (the same value in two partitions is not a duplicate).
nonmonotonic-poll    a process's reads of p, in history order (and record order within a
                     poll), must have strictly increasing offsets. This one: the first
                     record of a poll is at or below the process's previous record of p
                     (from an earlier poll). The first record of a poll that asked for an
                     explicit start offset (a seek) is instead compared with that start
                     offset: it must not be below it.
int-nonmonotonic-poll the same inside one poll: a record at or below the record before it.
poll-skip            the same sequence jumps forward: the first record of a poll is at offset
                     o while the next expected offset e (the previous record + 1, or the
                     poll's start offset) is < o and some record of p is known (read or
                     acked) at an offset in [e, o).
int-poll-skip        the same inside one poll: two successive records jump over a known one.
                     For both skips, a record the loss check reports (lost-write, unseen,
                     unconfirmed) does not count as known: a lost record is reported once,
                     not also as a skip of every read that missed it.
nonmonotonic-send    a process's successive completed (ok or info) sends to p (history order),
                     in two operations, both committed with known offsets: the later offset
                     <= the earlier. A send whose offset is unknown breaks the sequence.
int-nonmonotonic-send the same for two successive sends of one operation.
int-send-skip        two successive sends of one operation to p land at o1 < o2 with some
                     record of p known (as for poll-skip) at an offset in (o1, o2).
realtime-send-order  a committed send B to p invoked after an ok send A to p was
                     acknowledged lands at a lower offset than A (both with known offsets,
                     neither reported lost): Jepsen's G0-realtime on a single key. Counted
                     once per B; its example is the acknowledged A with the highest offset.
                     A process's ok send followed by its next send landing lower is both
                     this and nonmonotonic-send, as Jepsen reports both.
aborted-read         (Jepsen's G1a) a value read in p whose send to p definitely failed (fail,
                     and no send of it to p completed ok or info).
stale-read           a read R of p whose invocation began after an acks=all send (p, o, v)
                     was acknowledged, that started at or before o (its poll offset, if
                     given), and that misses the record although the record exists (some
                     read returned v at offset o, so this is distinct from loss), because
                       hwm-behind:  R reported a high watermark <= o (its view of the log
                                    predates the acknowledgement), or
                       other-value: R returned a different value at offset o, or
                       skipped:     R's records jump over o (a gap inside the poll or
                                    between its start offset and first record); for each
                                    gap the first such acked offset is checked.
                     Counted once per read op; its example is the lowest offset it
                     missed (and there, the earliest ack). A record that was read and later
                     truncated away shows up here (later reads miss it) and as
                     inconsistent-offsets.

Jepsen's Kafka anomalies that need transactions are not defined here but in checkers/txn
(analysis.py), which runs on histories that hold transactions: G0, G0-process and G1c (cycles
over several keys: writes or reads of one transaction ordered against another's),
G1c-process/-realtime, precommitted-read (a transaction reads its own uncommitted send) and
what the reads of failed and crashed transactions prove. Jepsen's `unseen` (sent, never read by the end) is our unseen where a
final read completed, else unconfirmed.
"""

from __future__ import annotations

from typing import Any

ANOMALIES = (
    "lost-write",
    "unseen",
    "inconsistent-offsets",
    "duplicate",
    "nonmonotonic-poll",
    "int-nonmonotonic-poll",
    "poll-skip",
    "int-poll-skip",
    "nonmonotonic-send",
    "int-nonmonotonic-send",
    "int-send-skip",
    "realtime-send-order",
    "aborted-read",
    "stale-read",
)

# Our names of Jepsen's Kafka anomalies (jepsen.tests.kafka), where they differ.
JEPSEN_NAMES = {"aborted-read": "G1a", "realtime-send-order": "G0-realtime"}
# Jepsen's Kafka anomalies that only transactions can show (see the docstring).
NEEDS_TRANSACTIONS = ("G0", "G0-process", "G1c", "G1c-process", "G1c-realtime",
                      "precommitted-read")

READ_FS = ("poll", "final-poll")
EXAMPLES = 8
# The columns each checked anomaly's examples are sorted by: every backend reports the first
# EXAMPLES in this order. Each starts with the partition or an operation index, which no two
# partitions share, so the examples of separate partitions never tie and lists checked apart
# merge by a stable sort (checkers/native_checks.merge).
EXAMPLE_ORDER: dict[str, tuple[str, ...]] = {
    "inconsistent-offsets": ("partition", "offset"),
    "duplicate": ("partition", "value"),
    "nonmonotonic-poll": ("op", "offset"),
    "int-nonmonotonic-poll": ("op", "offset"),
    "poll-skip": ("op", "offset"),
    "int-poll-skip": ("op", "offset"),
    "nonmonotonic-send": ("op",),
    "int-nonmonotonic-send": ("op",),
    "int-send-skip": ("op",),
    "realtime-send-order": ("op",),
    "aborted-read": ("partition", "offset", "value"),
    "stale-read": ("op",),
}


def findings(checks: Any) -> dict[str, Any]:
    """Each anomaly of EXAMPLE_ORDER (in its order) as `checks` finds it. `checks` is one
    backend's checks object, whose methods bear these names (checkers.reference.ReferenceChecks
    on pandas, checkers.spark_checks.SparkChecks on Spark); what they return is its own."""
    steps = checks.read_steps()
    sends = checks.send_steps()
    inconsistent = checks.inconsistent_offsets()
    return {
        "inconsistent-offsets": inconsistent,
        "duplicate": checks.duplicate(),
        "nonmonotonic-poll": checks.nonmonotonic_poll(steps, False),
        "int-nonmonotonic-poll": checks.nonmonotonic_poll(steps, True),
        "poll-skip": checks.poll_skip(steps, False),
        "int-poll-skip": checks.poll_skip(steps, True),
        "nonmonotonic-send": checks.nonmonotonic_send(sends, False),
        "int-nonmonotonic-send": checks.nonmonotonic_send(sends, True),
        "int-send-skip": checks.int_send_skip(sends),
        "realtime-send-order": checks.realtime_send_order(),
        "aborted-read": checks.aborted_read(),
        "stale-read": checks.stale_read(steps, inconsistent),
    }
