//! The two tables (`checkers/ingest.py`'s OPS_SCHEMA and READS_SCHEMA, column for column),
//! built in batches of one row group and written to Parquet by a thread per table.
//!
//! Clustered by Kafka partition: each row group holds the rows of one partition (or only
//! rows without one), so its statistics name that partition and a reader of some partitions
//! (a Spark task's `histcheck --share`) skips the other row groups unread. Each table
//! buffers rows per partition, in history order, and writes a partition's buffer as a row
//! group when it holds `row_group` rows, or every buffer (rows without a partition first,
//! then by partition) when they hold `buffered` rows together, and at the end.
//! `checkers/ingest.py`'s `_Clustered` follows the same rule, so both paths write the same
//! rows in the same order.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::columns::{Ints, Texts};
use crate::parse::Op;
use crate::Failure;

/// Rows per row group, at most, and a partition buffer's rows that make it a row group
/// (`--row-group`; checkers/ingest.py's ROW_GROUP, which it passes).
pub const ROW_GROUP: usize = 122_880;
/// Rows buffered per table over all partitions before every buffer is written
/// (`--buffered`; checkers/ingest.py's BUFFERED): what bounds the memory however many
/// partitions.
pub const BUFFERED: usize = 4 * ROW_GROUP;
/// Rows a partition's first buffer reserves room for (they grow to ROW_GROUP); each later
/// one reserves as many rows as the one before it held when it was written.
const FIRST_ROOM: usize = 8192;
/// Batches queued for each writer.
const QUEUED: usize = 2;

/// A column: its name, its type, and whether it may be null. A column that never is (the
/// contract requires it of every op, or of every read record) is REQUIRED in Parquet: no
/// definition levels to encode (with every column OPTIONAL, the levels were a tenth of the
/// ingest's samples at 10M operations). checkers/ingest.py's schemas say the same.
type Column = (&'static str, DataType, bool);

const OPS_COLUMNS: [Column; 24] = [
    ("index", DataType::Int64, false),
    ("time", DataType::Int64, false),
    ("process", DataType::Utf8, false),
    ("type", DataType::Utf8, false),
    ("f", DataType::Utf8, false),
    ("partition", DataType::Int32, true),
    ("value", DataType::Int64, true),
    ("value_json", DataType::Utf8, true),
    ("offset", DataType::Int64, true),
    ("node", DataType::Utf8, true),
    ("epoch", DataType::Int64, true),
    ("error", DataType::Utf8, true),
    ("hwm", DataType::Int64, true),
    ("acks", DataType::Utf8, true),
    ("n_records", DataType::Int32, true),
    ("invoke_index", DataType::Int64, true),
    ("invoke_time", DataType::Int64, true),
    ("invoke_offset", DataType::Int64, true),
    ("prev_ack_op", DataType::Int64, true),
    ("prev_ack_offset", DataType::Int64, true),
    ("txn", DataType::Int64, true),
    ("prev_send_op", DataType::Int64, true),
    ("prev_send_offset", DataType::Int64, true),
    ("prev_send_txn", DataType::Int64, true),
];

const READS_COLUMNS: [Column; 12] = [
    ("index", DataType::Int64, false),
    ("process", DataType::Utf8, false),
    ("partition", DataType::Int32, false),
    ("offset", DataType::Int64, false),
    ("value", DataType::Int64, false),
    ("time", DataType::Int64, false),
    ("f", DataType::Utf8, false),
    ("pos", DataType::Int32, false),
    ("invoke_time", DataType::Int64, false), // an ok poll's, whose invoke the contract wants
    ("from_offset", DataType::Int64, true),
    ("prev_op", DataType::Int64, true),
    ("prev_offset", DataType::Int64, true),
];

fn schema(columns: &[Column]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, t, nullable)| Field::new(*n, t.clone(), *nullable))
            .collect::<Vec<_>>(),
    ))
}

/// A completion's invoke: its (index, time, offset); all None for an invoke.
pub type Invoke = (Option<i64>, Option<i64>, Option<i64>);

/// What the order columns add to an op's own fields.
#[derive(Default)]
pub struct OpRow {
    pub inv: Invoke,
    pub prev_ack: Option<(i64, i64)>,
    pub prev_send: Option<(i64, Option<i64>, Option<i64>)>,
}

struct Writer {
    tx: Option<SyncSender<RecordBatch>>,
    handle: Option<JoinHandle<Result<(), Failure>>>,
}

/// A new file at `path`: an old one (or a symlink planted there) is removed, never written
/// through (as checkers/ingest.py's _create).
fn create(path: &Path) -> Result<File, Failure> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    // create_new is O_CREAT | O_EXCL: it refuses any file or symlink planted there since
    Ok(OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?)
}

/// Rows the column writers take at a time (parquet's default is 1,024): fewer rounds of
/// their per-batch work (level encoding, the page-size check) per row group.
const WRITE_BATCH: usize = 8192;

/// How each column is written; each setting only changes how the values are stored, never
/// which (docs/checkers.md, "Measured on 2026-11-28, early morning"):
/// - dictionaries for the text columns only (a few processes, types, fs, nodes): for the
///   integer columns, mostly distinct, trying one costs a fifth of the whole ingest;
/// - the integer columns delta-encoded (DELTA_BINARY_PACKED): indexes, times, offsets and
///   values mostly climb by small steps, so the tables are about a fifth of their size
///   with plain values and snappy, at no more CPU;
/// - statistics only for `partition`, per row group: the only ones a reader uses
///   (`histcheck --share` and `spark_native.clustered` skip or vouch for row groups by
///   them); every other column's min and max per page were work no check read.
fn properties(schema: &SchemaRef, row_group: usize) -> WriterProperties {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_size(row_group)
        .set_write_batch_size(WRITE_BATCH)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_statistics_enabled(ColumnPath::from("partition"), EnabledStatistics::Chunk);
    for field in schema.fields().iter() {
        let column = ColumnPath::from(field.name().as_str());
        props = match field.data_type() {
            DataType::Utf8 => props.set_column_dictionary_enabled(column, true),
            _ => props.set_column_encoding(column, Encoding::DELTA_BINARY_PACKED),
        };
    }
    props.build()
}

impl Writer {
    fn start(path: &Path, schema: SchemaRef, row_group: usize) -> Result<Writer, Failure> {
        let file = create(path)?;
        let props = properties(&schema, row_group);
        let mut writer = ArrowWriter::try_new(file, schema, Some(props))?;
        let (tx, rx) = sync_channel::<RecordBatch>(QUEUED);
        let name = format!(
            "write {}",
            path.file_stem().and_then(|s| s.to_str()).unwrap_or("table")
        );
        let handle = thread::Builder::new()
            .name(name)
            .spawn(move || -> Result<(), Failure> {
                for batch in rx {
                    writer.write(&batch)?;
                    writer.flush()?; // each batch its own row group: one partition's rows
                }
                writer.close()?;
                Ok(())
            })?;
        Ok(Writer {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    fn send(&mut self, batch: RecordBatch) -> Result<(), Failure> {
        if self.tx.as_ref().is_some_and(|tx| tx.send(batch).is_ok()) {
            return Ok(());
        }
        // the writer stopped: its own error says why
        self.finish()?;
        Err(Failure::Io(std::io::Error::other(
            "a Parquet writer stopped",
        )))
    }

    fn finish(&mut self) -> Result<(), Failure> {
        self.tx.take();
        match self.handle.take() {
            Some(h) => h.join().unwrap_or_else(|_| {
                Err(Failure::Io(std::io::Error::other(
                    "a Parquet writer panicked",
                )))
            }),
            None => Ok(()),
        }
    }
}

/// The ops table's columns, in OPS_COLUMNS' order.
struct OpsBuilder {
    index: Ints<Int64Type>,
    time: Ints<Int64Type>,
    process: Texts,
    typ: Texts,
    f: Texts,
    partition: Ints<Int32Type>,
    value: Ints<Int64Type>,
    value_json: Texts,
    offset: Ints<Int64Type>,
    node: Texts,
    epoch: Ints<Int64Type>,
    error: Texts,
    hwm: Ints<Int64Type>,
    acks: Texts,
    n_records: Ints<Int32Type>,
    invoke_index: Ints<Int64Type>,
    invoke_time: Ints<Int64Type>,
    invoke_offset: Ints<Int64Type>,
    prev_ack_op: Ints<Int64Type>,
    prev_ack_offset: Ints<Int64Type>,
    txn: Ints<Int64Type>,
    prev_send_op: Ints<Int64Type>,
    prev_send_offset: Ints<Int64Type>,
    prev_send_txn: Ints<Int64Type>,
    rows: usize,
}

struct ReadsBuilder {
    index: Ints<Int64Type>,
    process: Texts,
    partition: Ints<Int32Type>,
    offset: Ints<Int64Type>,
    value: Ints<Int64Type>,
    time: Ints<Int64Type>,
    f: Texts,
    pos: Ints<Int32Type>,
    invoke_time: Ints<Int64Type>,
    from_offset: Ints<Int64Type>,
    prev_op: Ints<Int64Type>,
    prev_offset: Ints<Int64Type>,
    rows: usize,
}

/// When buffered rows become row groups (the module's doc).
#[derive(Clone, Copy)]
pub struct Layout {
    pub row_group: usize,
    pub buffered: usize,
}

/// A table's row builders, one per partition (None: rows without one), and its writer.
struct Clustered<B> {
    layout: Layout,
    schema: SchemaRef,
    writer: Writer,
    parts: BTreeMap<Option<i32>, B>,
    buffered: usize,
    written: u64,
}

trait Rows {
    /// Empty columns with room for `room` rows.
    fn new(room: usize) -> Self;
    fn rows(&self) -> usize;
    /// The rows as a batch; the columns are left empty with room for as many rows again.
    /// (Grown back by doubling from nothing, copying each time, with the kernel zeroing the
    /// fresh pages, they were some 15% of the ingest's samples at 10M operations,
    /// docs/checkers.md.)
    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch, Failure>;
}

impl<B: Rows> Clustered<B> {
    fn create(path: &Path, columns: &[Column], layout: Layout) -> Result<Self, Failure> {
        let schema = schema(columns);
        Ok(Clustered {
            layout,
            writer: Writer::start(path, schema.clone(), layout.row_group)?,
            schema,
            parts: BTreeMap::new(),
            buffered: 0,
            written: 0,
        })
    }

    fn builder(&mut self, key: Option<i32>) -> &mut B {
        self.parts.entry(key).or_insert_with(|| B::new(FIRST_ROOM))
    }

    /// Rows `key`'s builder can take before the rule writes anything (at least 1: what is
    /// due is written as soon as it is).
    fn room(&mut self, key: Option<i32>) -> usize {
        let rows = self.builder(key).rows();
        (self.layout.row_group - rows).min(self.layout.buffered - self.buffered)
    }

    /// After a row was added to `key`'s builder: write what the rule says is due.
    fn added(&mut self, key: Option<i32>) -> Result<(), Failure> {
        self.added_n(key, 1)
    }

    /// After `n` rows were added to `key`'s builder, at most its room: the same as `n` calls
    /// of `added`, since only the last can make anything due.
    fn added_n(&mut self, key: Option<i32>, n: usize) -> Result<(), Failure> {
        self.buffered += n;
        self.written += n as u64;
        let b = self.parts.get_mut(&key).expect("the builder just added to");
        if b.rows() >= self.layout.row_group {
            let batch = b.finish(&self.schema)?;
            self.buffered -= batch.num_rows();
            return self.writer.send(batch);
        }
        if self.buffered >= self.layout.buffered {
            return self.write_all();
        }
        Ok(())
    }

    /// Every builder's rows, rows without a partition first, then by partition.
    fn write_all(&mut self) -> Result<(), Failure> {
        for b in self.parts.values_mut().filter(|b| b.rows() > 0) {
            let batch = b.finish(&self.schema)?;
            self.writer.send(batch)?;
        }
        self.buffered = 0;
        Ok(())
    }

    fn finish(mut self) -> Result<u64, Failure> {
        let last = self.write_all();
        let closed = self.writer.finish();
        last?;
        closed?;
        Ok(self.written)
    }
}

pub struct Tables {
    ops: Clustered<OpsBuilder>,
    reads: Clustered<ReadsBuilder>,
}

fn strs(n: usize) -> Texts {
    Texts::with_capacity(n, n * 8)
}

impl Rows for OpsBuilder {
    fn rows(&self) -> usize {
        self.rows
    }

    fn new(n: usize) -> Self {
        OpsBuilder {
            index: Ints::with_capacity(n),
            time: Ints::with_capacity(n),
            process: strs(n),
            typ: strs(n),
            f: strs(n),
            partition: Ints::with_capacity(n),
            value: Ints::with_capacity(n),
            value_json: Texts::with_capacity(n, 0),
            offset: Ints::with_capacity(n),
            node: strs(n),
            epoch: Ints::with_capacity(n),
            error: Texts::with_capacity(n, 0),
            hwm: Ints::with_capacity(n),
            acks: Texts::with_capacity(n, 0),
            n_records: Ints::with_capacity(n),
            invoke_index: Ints::with_capacity(n),
            invoke_time: Ints::with_capacity(n),
            invoke_offset: Ints::with_capacity(n),
            prev_ack_op: Ints::with_capacity(n),
            prev_ack_offset: Ints::with_capacity(n),
            txn: Ints::with_capacity(n),
            prev_send_op: Ints::with_capacity(n),
            prev_send_offset: Ints::with_capacity(n),
            prev_send_txn: Ints::with_capacity(n),
            rows: 0,
        }
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch, Failure> {
        let full = std::mem::replace(self, Self::new(self.rows.max(FIRST_ROOM)));
        let columns: Vec<ArrayRef> = vec![
            full.index.finish(),
            full.time.finish(),
            full.process.finish(),
            full.typ.finish(),
            full.f.finish(),
            full.partition.finish(),
            full.value.finish(),
            full.value_json.finish(),
            full.offset.finish(),
            full.node.finish(),
            full.epoch.finish(),
            full.error.finish(),
            full.hwm.finish(),
            full.acks.finish(),
            full.n_records.finish(),
            full.invoke_index.finish(),
            full.invoke_time.finish(),
            full.invoke_offset.finish(),
            full.prev_ack_op.finish(),
            full.prev_ack_offset.finish(),
            full.txn.finish(),
            full.prev_send_op.finish(),
            full.prev_send_offset.finish(),
            full.prev_send_txn.finish(),
        ];
        batch(schema, columns)
    }
}

fn batch(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch, Failure> {
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Failure::Io(std::io::Error::other(e.to_string())))
}

impl Rows for ReadsBuilder {
    fn rows(&self) -> usize {
        self.rows
    }

    fn new(n: usize) -> Self {
        ReadsBuilder {
            index: Ints::with_capacity(n),
            process: Texts::with_capacity(n, n * 4),
            partition: Ints::with_capacity(n),
            offset: Ints::with_capacity(n),
            value: Ints::with_capacity(n),
            time: Ints::with_capacity(n),
            f: Texts::with_capacity(n, n * 6),
            pos: Ints::with_capacity(n),
            invoke_time: Ints::with_capacity(n),
            from_offset: Ints::with_capacity(n),
            prev_op: Ints::with_capacity(n),
            prev_offset: Ints::with_capacity(n),
            rows: 0,
        }
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch, Failure> {
        let full = std::mem::replace(self, Self::new(self.rows.max(FIRST_ROOM)));
        let columns: Vec<ArrayRef> = vec![
            full.index.finish(),
            full.process.finish(),
            full.partition.finish(),
            full.offset.finish(),
            full.value.finish(),
            full.time.finish(),
            full.f.finish(),
            full.pos.finish(),
            full.invoke_time.finish(),
            full.from_offset.finish(),
            full.prev_op.finish(),
            full.prev_offset.finish(),
        ];
        batch(schema, columns)
    }
}

impl Tables {
    pub fn create(ops: &Path, reads: &Path, layout: Layout) -> Result<Tables, Failure> {
        Ok(Tables {
            ops: Clustered::create(ops, &OPS_COLUMNS, layout)?,
            reads: Clustered::create(reads, &READS_COLUMNS, layout)?,
        })
    }

    pub fn op(&mut self, op: &Op, row: &OpRow) -> Result<(), Failure> {
        let b = self.ops.builder(op.partition);
        b.index.push_value(op.index);
        b.time.push_value(op.time);
        b.process.push_value(&op.process);
        b.typ.push_value(op.typ.name());
        b.f.push_value(&op.f);
        b.partition.push(op.partition);
        b.value.push(op.value);
        b.value_json.push(op.value_json.as_deref());
        b.offset.push(op.offset);
        b.node.push(op.node.as_deref());
        b.epoch.push(op.epoch);
        b.error.push(op.error.as_deref());
        b.hwm.push(op.hwm);
        b.acks.push(op.acks);
        b.n_records
            .push(op.records.as_ref().map(|r| r.len() as i32));
        b.invoke_index.push(row.inv.0);
        b.invoke_time.push(row.inv.1);
        b.invoke_offset.push(row.inv.2);
        b.prev_ack_op.push(row.prev_ack.map(|a| a.0));
        b.prev_ack_offset.push(row.prev_ack.map(|a| a.1));
        b.txn.push(op.txn);
        b.prev_send_op.push(row.prev_send.map(|s| s.0));
        b.prev_send_offset.push(row.prev_send.and_then(|s| s.1));
        b.prev_send_txn.push(row.prev_send.and_then(|s| s.2));
        b.rows += 1;
        self.ops.added(op.partition)
    }

    /// One row per record of an ok read, linked each to the one before it.
    pub fn reads(
        &mut self,
        op: &Op,
        records: &[(i64, i64)],
        prev: Option<(i64, i64)>,
        invoke_time: Option<i64>,
        from_offset: Option<i64>,
    ) -> Result<(), Failure> {
        let (mut prev, mut rest, mut pos) = (prev, records, 0i32);
        // in runs as long as the builder's room: one builder lookup and one rule check a
        // run, and the columns that are the poll's, not the record's, appended a run at a
        // time (record by record, `reads` was 5 % of the ingest's samples at 10M operations)
        while !rest.is_empty() {
            let (run, later) = rest.split_at(self.reads.room(op.partition).min(rest.len()));
            let b = self.reads.builder(op.partition);
            let n = run.len();
            b.index.push_n(Some(op.index), n);
            b.partition.push_n(op.partition, n);
            b.time.push_n(Some(op.time), n);
            b.invoke_time.push_n(invoke_time, n);
            b.from_offset.push_n(from_offset, n);
            b.prev_op.push(prev.map(|p| p.0));
            b.prev_op.push_n(Some(op.index), n - 1);
            b.prev_offset.push(prev.map(|p| p.1));
            for &(offset, _) in &run[..n - 1] {
                b.prev_offset.push_value(offset);
            }
            b.process.push_n(op.process.as_str(), n);
            b.f.push_n(op.f.as_str(), n);
            for (i, &(offset, value)) in run.iter().enumerate() {
                b.offset.push_value(offset);
                b.value.push_value(value);
                b.pos.push_value(pos + i as i32);
            }
            prev = run.last().map(|&(offset, _)| (op.index, offset));
            pos += n as i32;
            b.rows += n;
            self.reads.added_n(op.partition, n)?;
            rest = later;
        }
        Ok(())
    }

    /// Write the last rows, close both files: (ops, reads).
    pub fn finish(self) -> Result<(u64, u64), Failure> {
        let ops = self.ops.finish();
        let reads = self.reads.finish();
        Ok((ops?, reads?))
    }
}
