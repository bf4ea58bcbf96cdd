//! Typed ops in file order -> the history contract and the order columns, as
//! `checkers/ingest.py` (`_Contract`, `_Converter`) computes them.

use rustc_hash::FxHashMap as HashMap;

use crate::parse::{Op, Typ};
use crate::tables::{Invoke, OpRow, Tables};
use crate::text::Text;
use crate::Failure;

const NEMESIS: &str = "nemesis"; // workloads.history.NEMESIS: `info` without an invoke

/// The fields a completion repeats from its invoke: partition, value, offset, txn.
type Echo = (Option<i32>, Option<Value>, Option<i64>, Option<i64>);

/// A value as `checkers/ingest.py` compares it: an integer (its decimal text there), or its
/// JSON text, which is never an integer's (those are read as integers).
#[derive(PartialEq)]
enum Value {
    Int(i64),
    Json(String),
}

/// A process's state along the file.
#[derive(Default)]
struct Process {
    last_time: Option<i64>,
    /// the pending invoke: (index, time, offset, f, the fields its completion repeats)
    pending: Option<(i64, i64, Option<i64>, Text, Echo)>,
    /// the Jepsen operation its ops belong to: (txn, its first time)
    txn_start: Option<(i64, i64)>,
    /// it got an `info` (a client): that op's txn; only the rest of that operation may follow
    retired: Option<Option<i64>>,
}

fn echo(op: &Op) -> Echo {
    let value = op
        .value
        .map(Value::Int)
        .or_else(|| op.value_json.clone().map(Value::Json));
    (op.partition, value, op.offset, op.txn)
}

/// Whether the completion changes no field its invoke had (it may add or leave out one).
fn repeats(invoked: &Echo, done: &Echo) -> bool {
    fn same<T: PartialEq>(was: &Option<T>, now: &Option<T>) -> bool {
        was.is_none() || now.is_none() || was == now
    }
    same(&invoked.0, &done.0)
        && same(&invoked.1, &done.1)
        && same(&invoked.2, &done.2)
        && same(&invoked.3, &done.3)
}

/// Per (process, partition): the last record read, ack and ok-or-info send.
#[derive(Default)]
struct Stream {
    last_read: Option<(i64, i64)>,
    last_ack: Option<(i64, i64)>,
    last_send: Option<(i64, Option<i64>, Option<i64>)>,
}

pub struct Converter {
    last_index: Option<i64>,
    /// the run clock: the latest time so far
    clock: i64,
    ids: HashMap<Text, u32>,
    processes: Vec<Process>,
    streams: HashMap<(u32, i32), Stream>,
}

fn unsure<T>(line: u64, why: String) -> Result<T, Failure> {
    Err(Failure::Unsure(format!("line {line}: {why}")))
}

impl Converter {
    pub fn new() -> Self {
        Converter {
            last_index: None,
            clock: 0,
            ids: HashMap::default(),
            processes: Vec::new(),
            streams: HashMap::default(),
        }
    }

    fn id(&mut self, process: &Text) -> u32 {
        if let Some(&id) = self.ids.get(process) {
            return id;
        }
        let id = self.processes.len() as u32;
        self.ids.insert(process.clone(), id);
        self.processes.push(Process::default());
        id
    }

    /// The contract (`_Contract.check`): this op's invoke (index, time, offset) for a
    /// completion, or UNSURE when the op breaks it.
    fn contract(&mut self, op: &Op, id: u32) -> Result<Invoke, Failure> {
        if op.index != self.last_index.map_or(0, |last| last + 1) {
            return unsure(op.line, "index does not count on".into());
        }
        // only a Jepsen operation's parts (txn) carry times earlier than a line before them
        if op.txn.is_none() && op.time < self.clock {
            return unsure(op.line, "the run clock goes back".into());
        }
        let p = &mut self.processes[id as usize];
        if p.retired.is_some_and(|txn| txn.is_none() || txn != op.txn) {
            return unsure(
                op.line,
                format!("process {} used after an info", op.process),
            );
        }
        let mut last = p.last_time;
        if let Some(txn) = op.txn {
            match p.txn_start {
                Some((t, start)) if t == txn => last = Some(start),
                _ => p.txn_start = Some((txn, op.time)),
            }
        }
        if last.is_some_and(|l| op.time < l) {
            return unsure(
                op.line,
                format!("time goes back for process {}", op.process),
            );
        }
        let mut inv = (None, None, None);
        if op.typ == Typ::Invoke {
            if p.pending.is_some() {
                return unsure(op.line, "an invoke while another is pending".into());
            }
            p.pending = Some((op.index, op.time, op.offset, op.f.clone(), echo(op)));
        } else {
            match p.pending.take() {
                None if op.typ == Typ::Info && op.process == NEMESIS => {}
                None => return unsure(op.line, "a completion without an invoke".into()),
                Some((index, time, offset, f, fields)) => {
                    if f != op.f {
                        return unsure(op.line, "a completion of another f".into());
                    }
                    if !repeats(&fields, &echo(op)) {
                        return unsure(op.line, "a completion changes its invoke's fields".into());
                    }
                    inv = (Some(index), Some(time), offset);
                }
            }
            if op.typ == Typ::Info && op.process != NEMESIS {
                p.retired = Some(op.txn);
            }
        }
        self.last_index = Some(op.index);
        self.clock = self.clock.max(op.time);
        p.last_time = Some(op.time);
        Ok(inv)
    }

    pub fn add(&mut self, op: &Op, tables: &mut Tables) -> Result<(), Failure> {
        let id = self.id(&op.process);
        let inv = self.contract(op, id)?;
        let mut row = OpRow {
            inv,
            ..OpRow::default()
        };
        let is_send = op.f == "send";
        if let Some(partition) = op.partition {
            let stream = self.streams.entry((id, partition)).or_default();
            if op.typ == Typ::Ok && is_send {
                if let Some(offset) = op.offset {
                    row.prev_ack = stream.last_ack.replace((op.index, offset));
                }
            }
            if is_send && matches!(op.typ, Typ::Ok | Typ::Info) {
                row.prev_send = stream.last_send.replace((op.index, op.offset, op.txn));
            }
            if let Some(records) = op.records.as_deref().filter(|r| !r.is_empty()) {
                let prev = stream.last_read;
                stream.last_read = Some((op.index, records[records.len() - 1].0));
                tables.reads(op, records, prev, inv.1, inv.2)?;
            }
        }
        tables.op(op, &row)
    }
}
