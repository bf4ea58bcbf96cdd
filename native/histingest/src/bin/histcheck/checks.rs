//! Every anomaly of checkers/definitions.py for one Kafka partition.
//!
//! Each check follows checkers/reference.py (the pandas implementation the tests hold every
//! backend to) step by step, with hash maps and sorted vectors where pandas merges and
//! as-of joins. Every anomaly is about one partition, so a history is checked partition by
//! partition, in parallel, and the results merged (main.rs; checkers/native_checks.py does
//! the same across Spark tasks).

use std::thread;

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{json, Value};

use crate::cells::{Cell, CellMap};
use crate::load::{Op, Partition, Read, Strings, Words};

/// The anomalies, in checkers.definitions.ANOMALIES order without the two the loss
/// classification makes from `unread` (lost-write, unseen).
pub const NAMES: [&str; 12] = [
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
];

/// An example with the key the reference sorts that anomaly's examples by (main.rs sorts).
pub type Found = Vec<(Vec<i64>, Value)>;

pub struct Checked {
    pub found: [Found; 12],
    pub unread: Vec<Value>,
    pub complete: bool,
    pub acked: u64,
    pub info_read: u64,
}

/// A completed (ok or info) send with its resolved offset (definitions.py: committed).
struct Done<'a> {
    op: &'a Op,
    committed: bool,
    resolved: Option<i64>,
}

/// An acked acks=all record some read returned (stale reads are about these).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Visible {
    offset: i64,
    value: i64,
    ack_op: i64,
    ack_time: i64,
}

impl Visible {
    fn json(&self) -> Value {
        json!({"offset": self.offset, "value": self.value, "ack_op": self.ack_op,
               "ack_time": self.ack_time})
    }
}

struct Poll {
    process: Option<u32>,
    invoke_time: i64,
    from_offset: Option<i64>,
    hwm: Option<i64>,
}

pub struct Ctx<'a> {
    pub p: i32,
    pub s: &'a Strings,
    pub w: &'a Words,
}

impl Ctx<'_> {
    fn text(&self, id: Option<u32>) -> Value {
        id.map_or(Value::Null, |i| Value::String(self.s.name(i).to_owned()))
    }
}

/// The highest of the sorted `known` offsets in [lo, hi], if any.
fn max_known_in(known: &[i64], lo: i64, hi: i64) -> Option<i64> {
    let n = known.partition_point(|&k| k <= hi);
    (n > 0 && known[n - 1] >= lo).then(|| known[n - 1])
}

/// Every anomaly of one partition, its losses and its statistics.
/// Every anomaly of one partition. With `threads` above 1, the checks that need only what
/// the first steps built (the cells, the completed sends, the losses) run in two groups at
/// once: each group's steps depend on each other, the groups on nothing of the other's.
pub fn check(cx: &Ctx, part: &Partition, threads: usize) -> Checked {
    let w = cx.w;
    let sends: Vec<&Op> = part.ops.iter().filter(|o| o.f == w.send).collect();
    let acked: Vec<&Op> = sends
        .iter()
        .copied()
        .filter(|o| o.ty == w.ok && o.offset.get().is_some())
        .collect();
    let cells = cells(cx, part, &acked);
    let done = done(cx, &sends, &cells);
    let losses = losses(cx, &cells, &done);
    let known = known(&cells, &losses.cells);

    let mut found: [Found; 12] = Default::default();
    let [inconsistent, duplicate, nm_poll, int_nm_poll, skip, int_skip, nm_send, int_nm_send, int_send_skip, realtime, aborted, stale] =
        &mut found;
    let mut reads_group = || {
        shared_cells(cx, &cells.map, inconsistent, duplicate);
        let inconsistent_offsets: FxHashSet<i64> = inconsistent.iter().map(|(k, _)| k[1]).collect();
        let polls = by_key(
            part.ops
                .iter()
                .filter(|o| (o.f == w.poll || o.f == w.final_poll) && o.ty == w.ok)
                .collect(),
            |o| o.index,
        );
        let gaps = read_steps(
            cx,
            part,
            &polls,
            &known,
            [nm_poll, int_nm_poll, skip, int_skip],
        );
        stale_reads(
            cx,
            part,
            &polls,
            &acked,
            &cells.map,
            &inconsistent_offsets,
            &gaps,
            stale,
        );
    };
    let mut sends_group = || {
        send_steps(cx, &done, &known, [nm_send, int_nm_send, int_send_skip]);
        realtime_send_order(cx, &done, &losses.ops, realtime);
        aborted_reads(cx, &sends, &done, &cells.map, aborted);
        (info_read(cx, &sends, &cells), complete(w, part))
    };
    let (info_read, complete) = if threads > 1 {
        thread::scope(|s| {
            s.spawn(reads_group);
            sends_group()
        })
    } else {
        reads_group();
        sends_group()
    };
    Checked {
        found,
        unread: losses.rows,
        complete,
        acked: sends.iter().filter(|o| o.ty == w.ok).count() as u64,
        info_read,
    }
}

/// The info (unknown-outcome) sends whose value was read: they were written after all.
/// The info sends are few and the cells many: the cells are looked up in a map of the info
/// sends' values, not the other way round (a set of every value read, built to be probed
/// a few times, was seconds at 100M operations).
fn info_read(cx: &Ctx, sends: &[&Op], cells: &Cells) -> u64 {
    let mut info: FxHashMap<i64, (u64, bool)> = FxHashMap::default();
    for o in sends.iter().filter(|o| o.ty == cx.w.info) {
        if let Some(v) = o.value.get() {
            info.entry(v).or_insert((0, false)).0 += 1;
        }
    }
    if info.is_empty() {
        return 0;
    }
    for ((_, v), _) in cells.map.iter().filter(|(_, c)| c.read) {
        if let Some((_, read)) = info.get_mut(&v) {
            *read = true;
        }
    }
    info.values()
        .filter(|(_, read)| *read)
        .map(|(n, _)| n)
        .sum()
}

/// One cell per distinct (offset, value) read or acked, and which of them the final state
/// holds.
struct Cells {
    map: CellMap,
    /// Whether the partition has an ok final read: then the final state is its last one's
    /// cells, else every cell read.
    has_final: bool,
}

impl Cells {
    fn in_final_state(&self, c: &Cell) -> bool {
        if self.has_final {
            c.in_final
        } else {
            c.read
        }
    }

    /// The final state's cells, (offset, value).
    fn final_state(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.map
            .iter()
            .filter(|(_, c)| self.in_final_state(c))
            .map(|(k, _)| k)
    }
}

fn cells(cx: &Ctx, part: &Partition, acked: &[&Op]) -> Cells {
    let w = cx.w;
    let last_final = part
        .ops
        .iter()
        .filter(|o| o.f == w.final_poll && o.ty == w.ok)
        .map(|o| o.index)
        .max();
    let read_cells = || {
        part.reads
            .iter()
            .filter_map(|r| Some((r, r.offset, r.value.get()?)))
    };
    let acked_cells = || {
        acked
            .iter()
            .filter_map(|o| Some((o, o.offset.get()?, o.value.get()?)))
    };
    let offsets = read_cells().map(|c| c.1).chain(acked_cells().map(|c| c.1));
    let span = offsets.fold(None, |s: Option<(i64, i64)>, off| {
        Some(s.map_or((off, off), |(lo, hi)| (lo.min(off), hi.max(off))))
    });
    // sized once for the cells (or the acked records, most of them, where the offsets are
    // too sparse for a vector): growing would hold the old table beside the new one and
    // fault in fresh pages each time
    let mut map = CellMap::new(span, acked.len());
    for (r, off, v) in read_cells() {
        let is_final = Some(r.index) == last_final;
        let new = Cell {
            read: true,
            in_final: is_final,
            first_op: r.index,
        };
        map.upsert(off, v, new, |c| {
            c.read = true;
            c.in_final |= is_final;
            c.first_op = c.first_op.min(r.index);
        });
    }
    for (o, off, v) in acked_cells() {
        let new = Cell {
            read: false,
            in_final: false,
            first_op: o.index,
        };
        map.upsert(off, v, new, |c| c.first_op = c.first_op.min(o.index));
    }
    Cells {
        map,
        has_final: last_final.is_some(),
    }
}

/// Completed sends, their offsets learned from reads where the send names none.
///
/// Only the sends no acknowledgement places (info sends, and ok ones without an offset)
/// need a read's offset, and they are few: their values are looked up as the cells go by,
/// in a map of those values alone (a map of every value read, probed by every send, was
/// a third of the steps before the checks at 100M operations: random probes far past the
/// caches).
fn done<'a>(cx: &Ctx, sends: &[&'a Op], cells: &Cells) -> Vec<Done<'a>> {
    let w = cx.w;
    let completed = || sends.iter().filter(|o| o.ty == w.ok || o.ty == w.info);
    let unplaced = |o: &Op| o.ty == w.info || o.offset.get().is_none();
    let mut read_min: FxHashMap<i64, i64> = completed()
        .filter(|o| unplaced(o))
        .filter_map(|o| Some((o.value.get()?, i64::MAX)))
        .collect();
    if !read_min.is_empty() {
        for ((off, v), _) in cells.map.iter().filter(|(_, c)| c.read) {
            if let Some(m) = read_min.get_mut(&v) {
                *m = (*m).min(off);
            }
        }
    }
    completed()
        .map(|&o| {
            let read_offset = match o.value.get() {
                Some(v) if unplaced(o) => read_min.get(&v).copied().filter(|&m| m != i64::MAX),
                _ => None,
            };
            // an info send has an offset only once committed (read): else it may never have been
            let committed = o.ty == w.ok || read_offset.is_some();
            Done {
                op: o,
                committed,
                resolved: if committed {
                    o.offset.get().or(read_offset)
                } else {
                    None
                },
            }
        })
        .collect()
}

/// The committed sends missing from the final state: their rows (checkers/verdict.py's
/// UNREAD_COLUMNS), their (offset, value) cells and their operations.
struct Losses {
    rows: Vec<Value>,
    cells: FxHashSet<(i64, i64)>,
    ops: FxHashSet<i64>,
}

/// A committed send is lost when the final state holds its value at no offset. Nearly
/// always the final state holds it at the send's own offset, a slot of the cells' vector
/// (sends come in about offset order, so in about slot order); only the others' values
/// are looked for at other offsets, in one pass over the final state (a set of every value
/// in it, probed by every send, took seconds at 100M operations).
fn losses(cx: &Ctx, cells: &Cells, done: &[Done]) -> Losses {
    let (w, p) = (cx.w, cx.p);
    let at_own_offset = |d: &Done| match (d.resolved, d.op.value.get()) {
        (Some(off), Some(v)) => cells
            .map
            .get(off, v)
            .is_some_and(|c| cells.in_final_state(c)),
        _ => false,
    };
    let elsewhere: Vec<&Done> = done
        .iter()
        .filter(|d| d.committed && !at_own_offset(d))
        .collect();
    let mut out = Losses {
        rows: Vec::new(),
        cells: FxHashSet::default(),
        ops: FxHashSet::default(),
    };
    if elsewhere.is_empty() {
        return out;
    }
    let mut found: FxHashMap<i64, bool> = elsewhere
        .iter()
        .filter_map(|d| Some((d.op.value.get()?, false)))
        .collect();
    let mut max_present: Option<i64> = None;
    for (off, v) in cells.final_state() {
        max_present = max_present.max(Some(off));
        if let Some(f) = found.get_mut(&v) {
            *f = true;
        }
    }
    for d in elsewhere {
        let o = d.op;
        if o.value.get().is_some_and(|v| found[&v]) {
            continue;
        }
        out.rows.push(json!({
            "partition": p, "value": o.value.get(), "offset": d.resolved,
            "process": cx.text(o.process.get()), "ack_index": o.index, "ack_time": o.time.get(),
            "invoke_time": o.invoke_time.get(), "node": cx.text(o.node.get()),
            "epoch": o.epoch.get(), "acks": cx.text(Some(o.acks.get().unwrap_or(w.default_acks))),
            "max_read_offset": max_present,
        }));
        out.ops.insert(o.index);
        if let (Some(off), Some(v)) = (d.resolved, o.value.get()) {
            out.cells.insert((off, v));
        }
    }
    out
}

/// Offsets known to exist, sorted, without the records the loss check reports
/// (definitions.py: poll-skip).
fn known(cells: &Cells, lost: &FxHashSet<(i64, i64)>) -> Vec<i64> {
    let mut known: Vec<i64> = cells
        .map
        .keys()
        .filter(|k| !lost.contains(k))
        .map(|(off, _)| off)
        .collect();
    known.sort_unstable();
    known.dedup();
    known
}

/// The keys that occur more than once in `keys`. Offsets, and a partition's values, are
/// mostly dense, so a bitmap over their range finds them in one pass with a bit per key;
/// sparse keys are sorted instead.
fn repeated(keys: impl Iterator<Item = i64> + Clone) -> FxHashSet<i64> {
    let mut out = FxHashSet::default();
    let (n, lo, hi) = keys
        .clone()
        .fold((0u64, i64::MAX, i64::MIN), |(n, lo, hi), k| {
            (n + 1, lo.min(k), hi.max(k))
        });
    if n < 2 {
        return out;
    }
    let span = hi.abs_diff(lo); // below 2^64: fits a u64
    if span < 64 * n {
        let mut seen = vec![0u64; (span / 64 + 1) as usize];
        for k in keys {
            let bit = k.abs_diff(lo);
            let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
            if seen[word] & mask != 0 {
                out.insert(k);
            }
            seen[word] |= mask;
        }
    } else {
        let mut sorted: Vec<i64> = keys.collect();
        sorted.sort_unstable();
        out.extend(sorted.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]));
    }
    out
}

/// inconsistent-offsets and duplicate: cells sharing an offset, or a value. Only the cells
/// of a repeated offset or value are gathered (a healthy history has none).
fn shared_cells(cx: &Ctx, cells: &CellMap, inconsistent: &mut Found, duplicate: &mut Found) {
    let p = cx.p;
    let twice_offsets = repeated(cells.keys().map(|k| k.0));
    let twice_values = repeated(cells.keys().map(|k| k.1));
    let mut by_offset: FxHashMap<i64, Vec<(i64, i64)>> = FxHashMap::default();
    let mut by_value: FxHashMap<i64, Vec<(i64, i64)>> = FxHashMap::default();
    for ((off, v), c) in cells.iter() {
        if twice_offsets.contains(&off) {
            by_offset.entry(off).or_default().push((v, c.first_op));
        }
        if twice_values.contains(&v) {
            by_value.entry(v).or_default().push((off, c.first_op));
        }
    }
    for (off, mut vs) in by_offset {
        vs.sort_unstable();
        let values: Vec<Value> = vs
            .iter()
            .map(|&(v, op)| json!({"value": v, "first_op": op}))
            .collect();
        inconsistent.push((
            vec![p as i64, off],
            json!({"partition": p, "offset": off, "values": values}),
        ));
    }
    for (v, mut offs) in by_value {
        offs.sort_unstable();
        let offsets: Vec<Value> = offs
            .iter()
            .map(|&(off, op)| json!({"offset": off, "first_op": op}))
            .collect();
        duplicate.push((
            vec![p as i64, v],
            json!({"partition": p, "value": v, "offsets": offsets}),
        ));
    }
}

/// Reads that break their process's sequence: nonmonotonic-poll, int-nonmonotonic-poll,
/// poll-skip and int-poll-skip, in that order in `out`. Returns the forward gaps (each read
/// with the offset it should have had) that the stale-read check looks into.
fn read_steps<'a>(
    cx: &Ctx,
    part: &'a Partition,
    polls: &[&Op],
    known: &[i64],
    out: [&mut Found; 4],
) -> Vec<(&'a Read, i64)> {
    let p = cx.p;
    let [nm_poll, int_nm_poll, skip, int_skip] = out;
    let mut gaps = Vec::new();
    let mut op: Option<&Op> = None; // the reads of one operation are consecutive
    let mut near = 0;
    for r in &part.reads {
        if op.is_none_or(|o| o.index != r.index) {
            op = find_near(polls, &mut near, r.index, |o| o.index).copied();
        }
        // what every record of the read repeats from its operation (load.rs: Read)
        let (process, from_offset) =
            op.map_or((None, None), |o| (o.process.get(), o.invoke_offset.get()));
        let seek = r.pos.get() == Some(0) && from_offset.is_some();
        let expected = if seek {
            from_offset
        } else {
            // no overflow: offsets are below i64::MAX (the history contract, checkers/ingest.py)
            r.prev_offset.get().map(|o| o + 1)
        };
        let Some(e) = expected else { continue };
        if r.offset == e {
            continue;
        }
        let internal = r.pos.get().is_some_and(|pos| pos > 0);
        let key = vec![r.index, r.offset];
        if r.offset < e {
            let row = json!({"process": cx.text(process), "partition": p, "op": r.index,
                             "prev_op": r.prev_op.get(), "expected": e, "offset": r.offset,
                             "value": r.value.get()});
            (if internal {
                &mut *int_nm_poll
            } else {
                &mut *nm_poll
            })
            .push((key, row));
            continue;
        }
        if internal || from_offset.is_some() {
            gaps.push((r, e));
        }
        if let Some(k) = max_known_in(known, e, r.offset - 1) {
            let row = json!({"process": cx.text(process), "partition": p, "op": r.index,
                             "prev_op": r.prev_op.get(), "expected": e, "offset": r.offset,
                             "skipped_offset": k});
            (if internal { &mut *int_skip } else { &mut *skip }).push((key, row));
        }
    }
    gaps
}

/// Each completed send against the one before it (same process and partition), both with
/// known offsets: nonmonotonic-send, int-nonmonotonic-send and int-send-skip in `out`.
fn send_steps(cx: &Ctx, done: &[Done], known: &[i64], out: [&mut Found; 3]) {
    let p = cx.p;
    let [nm_send, int_nm_send, int_send_skip] = out;
    // a send's previous one is a few sends back: the other producers' since
    let by_index = by_key(done.iter().collect(), |d| d.op.index);
    let mut near = 0;
    for d in done {
        let o = d.op;
        let Some(prev_op) = o.prev_send_op.get() else {
            continue;
        };
        let prev = find_near(&by_index, &mut near, prev_op, |d| d.op.index);
        let (Some(off), Some(prev)) = (d.resolved, prev.and_then(|p| p.resolved)) else {
            continue;
        };
        let internal = o.txn.get().is_some() && o.txn.get() == o.prev_send_txn.get();
        let row = |skipped: Option<i64>| {
            let mut r = json!({"process": cx.text(o.process.get()), "partition": p, "op": o.index,
                               "offset": off, "prev_op": prev_op, "prev_offset": prev});
            if let Some(k) = skipped {
                r["skipped_offset"] = json!(k);
            }
            r
        };
        if off <= prev {
            (if internal {
                &mut *int_nm_send
            } else {
                &mut *nm_send
            })
            .push((vec![o.index], row(None)));
        } else if internal && off > prev + 1 {
            if let Some(k) = max_known_in(known, prev + 1, off - 1) {
                int_send_skip.push((vec![o.index], row(Some(k))));
            }
        }
    }
}

/// realtime-send-order: committed sends that landed below the highest offset acked before
/// they were invoked (the lost ones aside: the loss check reports them).
fn realtime_send_order(cx: &Ctx, done: &[Done], lost_ops: &FxHashSet<i64>, out: &mut Found) {
    let (w, p) = (cx.w, cx.p);
    let committed: Vec<&Done> = done
        .iter()
        .filter(|d| d.committed && d.resolved.is_some() && !lost_ops.contains(&d.op.index))
        .collect();
    let mut acks: Vec<(i64, i64, i64)> = committed
        .iter()
        .filter(|d| d.op.ty == w.ok)
        .filter_map(|d| Some((d.op.time.get()?, d.op.index, d.resolved?)))
        .collect();
    acks.sort_unstable();
    let holders = running_max_holders(&acks, |a| a.2);
    let mut near = 0;
    for d in &committed {
        let (Some(t), Some(off)) = (d.op.invoke_time.get(), d.resolved) else {
            continue;
        };
        let n = partition_point_near(&holders, near, |a| a.0 < t);
        near = n;
        let Some(&(at, op, latest)) = n.checked_sub(1).map(|i| &holders[i]) else {
            continue;
        };
        if off < latest {
            let o = d.op;
            out.push((vec![o.index], json!({
                "process": cx.text(o.process.get()), "partition": p, "op": o.index, "offset": off,
                "invoke_time": t, "earlier_op": op, "earlier_offset": latest,
                "earlier_ack_time": at,
            })));
        }
    }
}

/// aborted-read: a read value whose send definitely failed (and never completed).
fn aborted_reads(cx: &Ctx, sends: &[&Op], done: &[Done], cells: &CellMap, out: &mut Found) {
    let (w, p) = (cx.w, cx.p);
    // the failed sends' values, less those some send completed with: the completed sends
    // are many, so they are looked up in the failed ones' map, not the other way round
    let mut failed: FxHashMap<i64, Vec<&Op>> = FxHashMap::default();
    for o in sends.iter().filter(|o| o.ty == w.fail) {
        if let Some(v) = o.value.get() {
            failed.entry(v).or_default().push(o);
        }
    }
    if !failed.is_empty() {
        for v in done.iter().filter_map(|d| d.op.value.get()) {
            failed.remove(&v);
        }
    }
    if failed.is_empty() {
        return;
    }
    for ((off, v), c) in cells.iter().filter(|(_, c)| c.read) {
        for o in failed.get(&v).into_iter().flatten() {
            out.push((
                vec![p as i64, off, v, o.index],
                json!({
                    "partition": p, "offset": off, "value": v, "read_op": c.first_op,
                    "fail_op": o.index, "error": cx.text(o.error.get()),
                }),
            ));
        }
    }
    // ties on the reference's key (partition, offset, value) keep the failed sends' order
    out.sort_by(|a, b| a.0.cmp(&b.0));
    for (k, _) in out.iter_mut() {
        k.truncate(3);
    }
}

/// The partition's final read is complete when it read up to the HWM it reported.
fn complete(w: &Words, part: &Partition) -> bool {
    let mut final_max: FxHashMap<i64, i64> = FxHashMap::default();
    for r in part.reads.iter().filter(|r| r.final_poll) {
        final_max
            .entry(r.index)
            .and_modify(|m| *m = (*m).max(r.offset))
            .or_insert(r.offset);
    }
    part.ops
        .iter()
        .filter(|o| o.f == w.final_poll && o.ty == w.ok)
        .any(|o| {
            let max_off = final_max.get(&o.index).copied();
            match o.hwm.get() {
                None => true,
                Some(h) => {
                    h <= 0
                        || max_off.is_some_and(|m| m + 1 >= h)
                        || (max_off.is_none() && o.invoke_offset.get().is_some_and(|i| i >= h))
                }
            }
        })
}

/// `sorted.partition_point(pred)`, searched outward from `near`. The sends come in the
/// order they completed, so their invocation times are nearly sorted and each is found a
/// few steps from the one before; a binary search over the whole range missed the cache at
/// nearly every step at 100M operations.
fn partition_point_near<T>(sorted: &[T], near: usize, pred: impl Fn(&T) -> bool) -> usize {
    let n = sorted.len();
    let near = near.min(n);
    let (mut lo, mut hi) = (0, near);
    let mut step = 1;
    if near < n && pred(&sorted[near]) {
        // past `near`: gallop forward to the first probe that fails
        (lo, hi) = (near + 1, n);
        while near + step < n {
            if !pred(&sorted[near + step]) {
                hi = near + step;
                break;
            }
            lo = near + step + 1;
            step *= 2;
        }
    } else {
        // at or before `near`: gallop back to the first probe that holds
        while step <= hi {
            let probe = hi - step;
            if pred(&sorted[probe]) {
                lo = probe + 1;
                break;
            }
            hi = probe;
            step *= 2;
        }
    }
    lo + sorted[lo..hi].partition_point(pred)
}

/// The entry of `sorted` (by `key_of`, no key twice) whose key is `key`, searched from
/// `near`, which is left where the search ended: lookups in about key order take a few
/// steps each (a hash map of every entry, probed at random, missed the cache at 100M).
fn find_near<'a, T>(
    sorted: &'a [T],
    near: &mut usize,
    key: i64,
    key_of: impl Fn(&T) -> i64,
) -> Option<&'a T> {
    *near = partition_point_near(sorted, *near, |t| key_of(t) < key);
    sorted.get(*near).filter(|t| key_of(t) == key)
}

/// `items` by `key_of`: as they come when they come sorted (the loader keeps a partition's
/// rows in history order), else sorted.
fn by_key<T>(mut items: Vec<T>, key_of: impl Fn(&T) -> i64) -> Vec<T> {
    if !items.is_sorted_by_key(&key_of) {
        items.sort_by_key(key_of);
    }
    items
}

/// The rows of `sorted` (by time) that hold the running maximum of `of` when they come: the
/// last of them before an instant holds the highest value seen before it.
fn running_max_holders<T: Copy>(sorted: &[T], of: impl Fn(&T) -> i64) -> Vec<T> {
    let mut best: Option<i64> = None;
    let mut out = Vec::new();
    for a in sorted {
        if best.is_none_or(|b| of(a) >= b) {
            best = Some(of(a));
            out.push(*a);
        }
    }
    out
}

/// stale-read: a poll that missed an acks=all record acknowledged before it began (hwm-behind,
/// other-value, skipped: definitions.py); each poll's example is its lowest (missed offset,
/// kind, missed ack op), so the order the polls are looked at in does not matter.
#[allow(clippy::too_many_arguments)]
fn stale_reads(
    cx: &Ctx,
    part: &Partition,
    polls: &[&Op],
    acked: &[&Op],
    cells: &CellMap,
    inconsistent: &FxHashSet<i64>,
    gaps: &[(&Read, i64)],
    out: &mut Found,
) {
    let (w, p) = (cx.w, cx.p);
    // the polls by op index, those with an invocation's time (the others cannot be stale)
    let polls: Vec<(i64, Poll)> = polls
        .iter()
        .filter_map(|o| {
            let invoke_time = o.invoke_time.get()?;
            Some((
                o.index,
                Poll {
                    process: o.process.get(),
                    invoke_time,
                    from_offset: o.invoke_offset.get(),
                    hwm: o.hwm.get(),
                },
            ))
        })
        .collect();
    let poll_near =
        |near: &mut usize, op: i64| find_near(&polls, near, op, |(i, _)| *i).map(|(_, q)| q);
    let mut visible: Vec<Visible> = acked
        .iter()
        .filter(|o| o.acks.get().unwrap_or(w.default_acks) == w.all)
        .filter_map(|o| {
            let (offset, value) = (o.offset.get()?, o.value.get()?);
            cells.get(offset, value).filter(|c| c.read)?;
            Some(Visible {
                offset,
                value,
                ack_op: o.index,
                ack_time: o.time.get()?,
            })
        })
        .collect();
    // op -> (missed offset, kind, missed ack op, row): the lowest is the op's example.
    let mut best: FxHashMap<i64, (i64, u8, i64, Value)> = FxHashMap::default();
    let mut offer = |op: i64, poll: &Poll, kind: u8, m: &Visible| {
        let cand = (m.offset, kind, m.ack_op);
        if best.get(&op).is_some_and(|b| (b.0, b.1, b.2) <= cand) {
            return;
        }
        let kinds = ["hwm-behind", "other-value", "skipped"];
        let row = json!({
            "op": op, "process": cx.text(poll.process), "partition": p,
            "invoke_time": poll.invoke_time, "from_offset": poll.from_offset, "hwm": poll.hwm,
            "kind": kinds[kind as usize], "missed": m.json(),
        });
        best.insert(op, (cand.0, cand.1, cand.2, row));
    };

    // hwm-behind: a poll's HWM at or below the highest visible offset acked before it began.
    visible.sort_unstable_by_key(|v| (v.ack_time, v.ack_op));
    let holders = running_max_holders(&visible, |v| v.offset);
    let mut near = 0; // polls come in about the order they were invoked
    for (op, q) in &polls {
        let Some(hwm) = q.hwm else { continue };
        let n = partition_point_near(&holders, near, |v| v.ack_time < q.invoke_time);
        near = n;
        let Some(m) = n.checked_sub(1).map(|i| holders[i]) else {
            continue;
        };
        if hwm <= m.offset && q.from_offset.is_none_or(|f| f <= m.offset) {
            offer(*op, q, 0, &m);
        }
    }
    // other-value: a read of another value at an offset where an acked record was visible.
    if !inconsistent.is_empty() {
        let mut at: FxHashMap<i64, Vec<Visible>> = FxHashMap::default();
        for v in visible.iter().filter(|v| inconsistent.contains(&v.offset)) {
            at.entry(v.offset).or_default().push(*v);
        }
        let mut near = 0;
        for r in part
            .reads
            .iter()
            .filter(|r| inconsistent.contains(&r.offset))
        {
            let Some(q) = poll_near(&mut near, r.index) else {
                continue;
            };
            let t = q.invoke_time; // the read's invoke_time (load.rs: Read)
            for m in at.get(&r.offset).into_iter().flatten() {
                if Some(m.value) != r.value.get() && t > m.ack_time {
                    offer(r.index, q, 1, m);
                }
            }
        }
    }
    // skipped: a gap in a poll over the first visible record at or after its start.
    visible.sort_unstable();
    let mut near = 0;
    for &(r, lo) in gaps {
        let n = visible.partition_point(|v| v.offset < lo);
        let (Some(m), Some(q)) = (visible.get(n), poll_near(&mut near, r.index)) else {
            continue;
        };
        if m.offset < r.offset && m.ack_time < q.invoke_time {
            offer(r.index, q, 2, m);
        }
    }
    out.extend(best.into_iter().map(|(op, b)| (vec![op], b.3)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_point_near_finds_what_partition_point_finds() {
        let mut x = 12345u64;
        for len in [0usize, 1, 2, 3, 7, 64, 100] {
            let mut sorted: Vec<u64> = (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 59) as u64
                })
                .collect();
            sorted.sort_unstable();
            for t in 0..34u64 {
                let want = sorted.partition_point(|&a| a < t);
                for near in 0..len + 3 {
                    assert_eq!(partition_point_near(&sorted, near, |&a| a < t), want);
                }
            }
        }
    }
}
