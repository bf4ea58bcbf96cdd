"""What each anomaly means, shared by the Spark checker and the single-process reference.

Vocabulary: an *acked* send is a `send` with an `ok` completion; it names (partition p,
offset o, value v). A *read* is one record [offset, value] returned by an ok `poll` or
`final-poll`. A send completed `info` is indeterminate: it counts as committed only if read
and is never reported lost. Sends at acks=0/1 are checked for loss like any acked send but
not for stale reads (only acks=all promises a committed record).

lost-write           acked (p, o, v) missing from the final state of p while that state
                     reaches an offset >= o. The final state is p's last ok `final-poll`;
                     a record consumers read earlier and that was later truncated away is
                     lost (it was below the HWM, hence committed). Where no final read of p
                     completed, "missing" means v was never read in p, and "reaches" means
                     some read of p reached an offset >= o.
unseen               acked, missing as above, and the final state (or, without one, every
                     read) ends before o. Only counted for partitions whose final read
                     completed; otherwise the record is "unconfirmed" and the verdict is
                     unknown.
inconsistent-offsets one (p, o) seen (read or acked) with more than one value.
duplicate            one value v seen at more than one offset of the same partition
                     (the same value in two partitions is not a duplicate).
nonmonotonic-poll    a process's reads of p, in history order (and record order within a
                     poll), must have strictly increasing offsets: a record whose offset is
                     <= the previous record's offset from that process and partition. The
                     first record of a poll that asked for an explicit start offset (a seek)
                     is instead compared with that start offset: it must not be below it.
poll-skip            the same sequence jumps forward: a record at offset o while the next
                     expected offset e (previous + 1, or the poll's start offset) is < o and
                     some record of p is known (read or acked) at an offset in [e, o).
nonmonotonic-send    a process's successive acked sends to p are not given increasing
                     offsets (offset <= the previous one).
aborted-read         a value whose send definitely failed (fail, and never ok/info) was read.
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
"""

from __future__ import annotations

ANOMALIES = (
    "lost-write",
    "unseen",
    "inconsistent-offsets",
    "duplicate",
    "nonmonotonic-poll",
    "poll-skip",
    "nonmonotonic-send",
    "aborted-read",
    "stale-read",
)

READ_FS = ("poll", "final-poll")
EXAMPLES = 8
