//! Typed ops in file order -> the history contract and the order columns, as
//! `checkers/ingest.py` (`_Contract`, `_Converter`) computes them.

use rustc_hash::FxHashMap as HashMap;

use crate::parse::{Op, Typ};
use crate::tables::{Invoke, OpRow, Tables};
use crate::Failure;

const NEMESIS: &str = "nemesis"; // workloads.history.NEMESIS: `info` without an invoke

/// A process's state along the file.
#[derive(Default)]
struct Process {
    last_time: Option<i64>,
    /// the pending invoke: (index, time, offset, f)
    pending: Option<(i64, i64, Option<i64>, String)>,
    /// the Jepsen operation its ops belong to: (txn, its first time)
    txn_start: Option<(i64, i64)>,
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
    ids: HashMap<String, u32>,
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
            ids: HashMap::default(),
            processes: Vec::new(),
            streams: HashMap::default(),
        }
    }

    fn id(&mut self, process: &str) -> u32 {
        if let Some(&id) = self.ids.get(process) {
            return id;
        }
        let id = self.processes.len() as u32;
        self.ids.insert(process.to_string(), id);
        self.processes.push(Process::default());
        id
    }

    /// The contract (`_Contract.check`): this op's invoke (index, time, offset) for a
    /// completion, or UNSURE when the op breaks it.
    fn contract(&mut self, op: &Op, id: u32) -> Result<Invoke, Failure> {
        if self.last_index.is_some_and(|last| op.index <= last) {
            return unsure(op.line, "index does not increase".into());
        }
        let p = &mut self.processes[id as usize];
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
            p.pending = Some((op.index, op.time, op.offset, op.f.clone()));
        } else {
            match p.pending.take() {
                None if op.typ == Typ::Info && op.process == NEMESIS => {}
                None => return unsure(op.line, "a completion without an invoke".into()),
                Some((index, time, offset, f)) => {
                    if f != op.f {
                        return unsure(op.line, "a completion of another f".into());
                    }
                    inv = (Some(index), Some(time), offset);
                }
            }
        }
        self.last_index = Some(op.index);
        p.last_time = Some(op.time);
        Ok(inv)
    }

    pub fn add(&mut self, op: Box<Op>, tables: &mut Tables) -> Result<(), Failure> {
        let id = self.id(&op.process);
        let inv = self.contract(&op, id)?;
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
                tables.reads(&op, records, prev, inv.1, inv.2)?;
            }
        }
        tables.op(&op, &row)
    }
}
