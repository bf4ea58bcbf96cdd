//! The ops and reads Parquet tables -> rows grouped by Kafka partition.
//!
//! Only the columns the checks use are read, each cast to the type the ingest writes, so
//! tables written by either ingest path (histingest or checkers/ingest.py) load alike. Text
//! is interned: the checks compare small ids, and the output turns them back into text.
//!
//! Only the row groups that may hold a wanted partition are read: the ingest clusters the
//! tables by partition (native/histingest/src/tables.rs), so each row group's statistics
//! name its one partition, and a share of the partitions reads only its own row groups.
//! Row groups without statistics, or of several partitions (tables written before the
//! clustering), are read and filtered row by row.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use arrow_array::cast::AsArray;
use arrow_array::types::{ArrowPrimitiveType, Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::statistics::Statistics;
use rustc_hash::FxHashMap;

/// Interned text: each distinct string once, named by its position.
#[derive(Default)]
pub struct Strings {
    ids: FxHashMap<String, u32>,
    names: Vec<String>,
}

impl Strings {
    pub fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// A value that may be null, in the space of the value: `T::NULL` stands for null. Rows
/// are held by the million, and `Option<i64>` takes twice the room of an `i64`.
#[derive(Clone, Copy)]
pub struct Opt<T>(T);

pub trait Sentinel: Copy + PartialEq {
    const NULL: Self;
}

impl Sentinel for i64 {
    const NULL: i64 = i64::MIN;
}

impl Sentinel for i32 {
    const NULL: i32 = i32::MIN;
}

impl Sentinel for u32 {
    const NULL: u32 = u32::MAX; // interned ids never get that far
}

impl<T: Sentinel> Opt<T> {
    /// `v`, or an error when `v` is the sentinel itself (no workload writes it).
    fn new(v: Option<T>, column: &str) -> Res<Self> {
        match v {
            None => Ok(Opt(T::NULL)),
            Some(x) if x == T::NULL => Err(format!(
                "column {column}: a value past this checker's range"
            )),
            Some(x) => Ok(Opt(x)),
        }
    }

    pub fn get(self) -> Option<T> {
        (self.0 != T::NULL).then_some(self.0)
    }
}

/// One completed (not invoke) operation with a partition: a row of `ops` the checks use.
pub struct Op {
    pub index: i64,
    pub time: Opt<i64>,
    pub process: Opt<u32>,
    pub ty: u32,
    pub f: u32,
    pub value: Opt<i64>,
    pub offset: Opt<i64>,
    pub node: Opt<u32>,
    pub epoch: Opt<i64>,
    pub error: Opt<u32>,
    pub hwm: Opt<i64>,
    pub acks: Opt<u32>,
    pub invoke_time: Opt<i64>,
    pub invoke_offset: Opt<i64>,
    pub txn: Opt<i64>,
    pub prev_send_op: Opt<i64>,
    pub prev_send_txn: Opt<i64>,
}

/// One record returned by a read (a row of `reads`). The columns every record of a read
/// repeats from its operation (process, invoke_time, from_offset) are not kept: the checks
/// take them from the operation's row (checks.rs), which the ingest copies them from. Rows
/// are held by the ten million: each field here is bytes per record.
pub struct Read {
    pub index: i64,
    pub offset: i64,
    pub value: Opt<i64>,
    pub prev_offset: Opt<i64>,
    pub prev_op: Opt<i64>,
    pub pos: Opt<i32>,
    pub final_poll: bool,
}

#[derive(Default)]
pub struct Partition {
    pub ops: Vec<Op>,
    pub reads: Vec<Read>,
}

/// The row vectors of the waves checked already, emptied, for the next waves to fill.
///
/// A 100M-operation partition's vectors take some 5 GB. Freed, the allocator returns them to
/// the kernel, and the next wave's vectors are fresh memory the kernel must fault in and zero
/// again (docs/checkers.md). The waves go biggest first, so a later wave's vector mostly fits
/// in one of these.
#[derive(Default)]
pub struct Spare {
    ops: Vec<Vec<Op>>,
    reads: Vec<Vec<Read>>,
}

impl Spare {
    /// Keep the vectors of `h`'s partitions, emptied.
    pub fn keep(&mut self, h: History) {
        for (_, part) in h.partitions {
            self.ops.push(part.ops);
            self.reads.push(part.reads);
        }
        for v in &mut self.ops {
            v.clear();
        }
        for v in &mut self.reads {
            v.clear();
        }
    }
}

/// An empty vector with room for `n` rows: the smallest of `spare` that has it, else a new one.
fn room<T>(spare: &mut Vec<Vec<T>>, n: usize) -> Vec<T> {
    let fits = (0..spare.len())
        .filter(|&i| spare[i].capacity() >= n)
        .min_by_key(|&i| spare[i].capacity());
    match fits {
        Some(i) => spare.swap_remove(i),
        None => Vec::with_capacity(n),
    }
}

/// Each partition's vector with room for its rows (`sized`), from `spare` where it can.
fn with_room<T>(sized: BTreeMap<i32, usize>, spare: &mut Vec<Vec<T>>) -> BTreeMap<i32, Vec<T>> {
    sized
        .into_iter()
        .map(|(p, n)| (p, room(spare, n)))
        .collect()
}

/// The ids of the words the checks compare with.
pub struct Words {
    pub ok: u32,
    pub info: u32,
    pub fail: u32,
    pub send: u32,
    pub poll: u32,
    pub final_poll: u32,
    pub all: u32,
    pub default_acks: u32,
}

pub struct History {
    pub strings: Strings,
    pub words: Words,
    pub partitions: BTreeMap<i32, Partition>,
    /// Operations per (f, type) over every row asked for, the unpartitioned ones included.
    pub ops_by_f_type: BTreeMap<(u32, u32), u64>,
    pub n_reads: u64,
    /// Row groups read, of both tables.
    pub row_groups: usize,
}

/// Which partitions to load: those `p` with `p mod of == share`, and of those only `only`
/// when given (one wave of a share, checked before the next is loaded). `unpartitioned`:
/// also count the rows without a partition (nemesis operations) in the statistics, which
/// one load of share 0 does, so that all the loads together count every row once.
pub struct Wanted {
    pub share: i32,
    pub of: i32,
    pub only: Option<BTreeSet<i32>>,
    pub unpartitioned: bool,
}

impl Wanted {
    pub fn partition(&self, p: i32) -> bool {
        p.rem_euclid(self.of) == self.share && self.only.as_ref().is_none_or(|o| o.contains(&p))
    }

    fn unpartitioned(&self) -> bool {
        self.unpartitioned
    }

    /// Whether a row group of these partitions may hold a wanted row.
    fn any(&self, span: &Span) -> bool {
        let Span::Known { lo, hi, nulls } = *span else {
            return true;
        };
        if nulls && self.unpartitioned() {
            return true;
        }
        let Some((lo, hi)) = lo.zip(hi) else {
            return false; // only rows without a partition
        };
        match &self.only {
            Some(only) => only.range(lo..=hi).any(|&p| self.partition(p)),
            None if (hi as i64 - lo as i64) >= self.of as i64 => true,
            None => (lo..=hi).any(|p| self.partition(p)),
        }
    }
}

/// What a row group's statistics say of its partition column.
pub enum Span {
    Unknown,
    Known {
        lo: Option<i32>,
        hi: Option<i32>,
        nulls: bool,
    },
}

impl Span {
    fn of(rg: &RowGroupMetaData, column: usize) -> Span {
        match rg.column(column).statistics() {
            Some(Statistics::Int32(s)) => match s.null_count_opt() {
                Some(n) => Span::Known {
                    lo: s.min_opt().copied(),
                    hi: s.max_opt().copied(),
                    nulls: n > 0,
                },
                None => Span::Unknown,
            },
            _ => Span::Unknown,
        }
    }

    /// The one partition of a clustered row group (None: rows without one); Err: several,
    /// or not known.
    fn single(&self) -> Result<Option<i32>, ()> {
        match *self {
            Span::Known {
                lo: None,
                hi: None,
                nulls: true,
            } => Ok(None),
            Span::Known {
                lo: Some(lo),
                hi: Some(hi),
                nulls: false,
            } if lo == hi => Ok(Some(lo)),
            _ => Err(()),
        }
    }
}

/// A table's row groups: each one's partition statistics and rows.
pub struct Groups {
    pub spans: Vec<(Span, usize)>,
}

impl Groups {
    pub fn read(path: &Path) -> Res<Groups> {
        let meta = metadata(path)?;
        let schema = meta.file_metadata().schema_descr();
        let column = (0..schema.num_columns())
            .find(|&i| schema.column(i).name() == "partition")
            .ok_or_else(|| format!("{}: no column partition", path.display()))?;
        let spans = meta
            .row_groups()
            .iter()
            .map(|rg| (Span::of(rg, column), rg.num_rows() as usize))
            .collect();
        Ok(Groups { spans })
    }

    /// Rows per partition when every row group holds one partition (or only rows without
    /// one); None for a table that is not clustered so.
    pub fn rows_by_partition(&self) -> Option<BTreeMap<i32, usize>> {
        let mut rows = BTreeMap::new();
        for (span, n) in &self.spans {
            if let Some(p) = span.single().ok()? {
                *rows.entry(p).or_insert(0) += n;
            }
        }
        Some(rows)
    }

    fn wanted(&self, wanted: &Wanted) -> Vec<usize> {
        (0..self.spans.len())
            .filter(|&i| wanted.any(&self.spans[i].0))
            .collect()
    }
}

fn metadata(path: &Path) -> Res<Arc<ParquetMetaData>> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| format!("{}: not a Parquet table ({e})", path.display()))?;
    Ok(builder.metadata().clone())
}

const OPS: [&str; 18] = [
    "index",
    "time",
    "process",
    "type",
    "f",
    "partition",
    "value",
    "offset",
    "node",
    "epoch",
    "error",
    "hwm",
    "acks",
    "invoke_time",
    "invoke_offset",
    "txn",
    "prev_send_op",
    "prev_send_txn",
];
const READS: [&str; 8] = [
    "index",
    "partition",
    "offset",
    "value",
    "f",
    "pos",
    "prev_offset",
    "prev_op",
];

type Res<T> = Result<T, String>;

/// Why the tables were not loaded.
pub enum Failure {
    /// A table that cannot be read as the ingest writes it.
    Error(String),
    /// The rows of the partitions asked for would take more memory than allowed.
    TooBig { limit: u64 },
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Error(e)
    }
}

/// Memory held per row kept, 2.3 times its size: both vectors are sized once on clustered
/// tables, and the checks build maps of about the same size again. Measured on the
/// benchmark's generator, one partition alone (`--share 0/3 --threads 1`) of 10M operations
/// in all (1.67M completed operations, 6.06M records read): 0.99 GB at peak, 2.1 times the
/// rows (before the records dropped their operation's columns: 1.41 GB, 2.3 times).
/// With more than one thread to a partition its two groups of checks build their maps at
/// once: 1.1 times the peak of one thread (the same partition: 1.07 GB against 0.97).
const OP_BYTES: [u64; 2] = [
    23 * std::mem::size_of::<Op>() as u64 / 10,
    25 * std::mem::size_of::<Op>() as u64 / 10,
];
const READ_BYTES: [u64; 2] = [
    23 * std::mem::size_of::<Read>() as u64 / 10,
    25 * std::mem::size_of::<Read>() as u64 / 10,
];

/// The memory `ops` completed operations and `reads` records hold by the estimate (above),
/// on `spare_threads` or not.
pub fn need(ops: u64, reads: u64, spare_threads: bool) -> u64 {
    let i = usize::from(spare_threads);
    ops * OP_BYTES[i] + reads * READ_BYTES[i]
}

/// The rows of `row_groups` of `path`'s `columns`, a row group at a time: a batch never spans
/// two row groups, whose text dictionaries differ. One that did came as plain text, cast back
/// to a dictionary a row at a time (parquet's reader falls back so when a batch meets a second
/// dictionary): with the ingest's 122,880-row groups and 64K-row batches, every other batch,
/// about 7 % of a check's time at 10M operations.
fn batches(
    path: &Path,
    columns: &[&str],
    row_groups: Vec<usize>,
) -> Res<impl Iterator<Item = Res<RecordBatch>>> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let not_parquet = |e| format!("{}: not a Parquet table ({e})", path.display());
    // the footer is read once; the schema with text as dictionaries is derived from it
    let inferred = ArrowReaderMetadata::load(&file, Default::default()).map_err(not_parquet)?;
    let options = ArrowReaderOptions::new().with_schema(text_as_dictionary(inferred.schema()));
    let meta =
        ArrowReaderMetadata::try_new(inferred.metadata().clone(), options).map_err(not_parquet)?;
    let schema = meta.parquet_schema();
    let mut leaves = Vec::new();
    for name in columns {
        let i = (0..schema.num_columns())
            .find(|&i| schema.column(i).name() == *name)
            .ok_or_else(|| format!("{}: no column {name}", path.display()))?;
        leaves.push(i);
    }
    let mask = ProjectionMask::leaves(schema, leaves);
    let shown = path.display().to_string();
    // each row group's reader opened as the one before is done: one descriptor at a time
    let open = move |group: usize| -> Res<_> {
        let file = file.try_clone().map_err(|e| format!("{shown}: {e}"))?;
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
            .with_projection(mask.clone())
            .with_row_groups(vec![group])
            .with_batch_size(64 * 1024)
            .build()
            .map_err(|e| format!("{shown}: {e}"))?;
        let shown = shown.clone();
        Ok(reader.map(move |b| b.map_err(|e| format!("{shown}: {e}"))))
    };
    Ok(row_groups.into_iter().flat_map(move |group| {
        let (batches, failed) = match open(group) {
            Ok(batches) => (Some(batches), None),
            Err(e) => (None, Some(Err(e))),
        };
        batches.into_iter().flatten().chain(failed)
    }))
}

/// `schema` with its text columns read as dictionaries: both ingest paths write text with a
/// dictionary, so a batch's texts come as its few distinct values and a key per row, and the
/// load interns each distinct value once a batch instead of hashing every row's text
/// (Cols::texts). A column chunk whose pages fell back to plain text reads so too.
fn text_as_dictionary(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 => f.as_ref().clone().with_data_type(DataType::Dictionary(
                Box::new(DataType::Int32),
                Box::new(DataType::Utf8),
            )),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A batch's columns by name, each cast to what the ingest writes.
struct Cols<'a> {
    batch: &'a RecordBatch,
    path: &'a Path,
}

impl Cols<'_> {
    fn get(&self, name: &str, to: &DataType) -> Res<ArrayRef> {
        let col = self
            .batch
            .column_by_name(name)
            .ok_or_else(|| format!("{}: no column {name}", self.path.display()))?;
        if col.data_type() == to {
            return Ok(col.clone());
        }
        arrow_cast::cast(col, to)
            .map_err(|e| format!("{}: column {name}: {e}", self.path.display()))
    }

    fn i64s(&self, name: &str) -> Res<Prim<Int64Type>> {
        let a = self.get(name, &DataType::Int64)?;
        Prim::of(a.as_primitive::<Int64Type>(), name)
    }

    fn i32s(&self, name: &str) -> Res<Prim<Int32Type>> {
        let a = self.get(name, &DataType::Int32)?;
        Prim::of(a.as_primitive::<Int32Type>(), name)
    }

    /// Whether each row's text is `word` (a null is not).
    fn is(&self, name: &str, word: &str) -> Res<Vec<bool>> {
        let mut words = Strings::default();
        let id = words.id(word);
        let ids = self.texts(name, &mut words)?;
        Ok(ids.iter().map(|t| t.get() == Some(id)).collect())
    }

    /// Each row's text as its interned id, through the batch's dictionary: each distinct
    /// text is interned once (text_as_dictionary).
    fn texts(&self, name: &str, strings: &mut Strings) -> Res<Vec<Opt<u32>>> {
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let col = self.get(name, &dict)?;
        let d = col.as_dictionary::<Int32Type>();
        let values = d.values().as_string::<i32>();
        let ids: Vec<Option<u32>> = values.iter().map(|s| s.map(|s| strings.id(s))).collect();
        opts(
            d.keys().iter().map(|k| k.and_then(|k| ids[k as usize])),
            name,
        )
    }
}

/// A column's values in their sentinel form, in a vector sized once.
fn opts<T: Sentinel>(
    values: impl ExactSizeIterator<Item = Option<T>>,
    name: &str,
) -> Res<Vec<Opt<T>>> {
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        out.push(Opt::new(v, name)?);
    }
    Ok(out)
}

/// A primitive column of a batch read in place, a row's value in its sentinel form. Copying
/// each column into a vector of its own first was a tenth of a check's load, and the ops
/// table's invocation rows (half of it), which no check keeps, were copied too.
struct Prim<P: ArrowPrimitiveType> {
    array: PrimitiveArray<P>, // shares the batch's buffers
    has_nulls: bool,
}

impl<P: ArrowPrimitiveType> Prim<P>
where
    P::Native: Sentinel,
{
    /// `a` as it is, or an error when a value in it is the sentinel (no workload writes it;
    /// the values scanned once, without a copy, and only a hit looks at the nulls).
    fn of(a: &PrimitiveArray<P>, name: &str) -> Res<Self> {
        if a.values().iter().any(|&v| v == P::Native::NULL) {
            opts(a.iter(), name)?;
        }
        Ok(Prim {
            array: a.clone(),
            has_nulls: a.null_count() > 0,
        })
    }

    #[inline]
    fn at(&self, i: usize) -> Opt<P::Native> {
        if self.has_nulls && self.array.is_null(i) {
            Opt(P::Native::NULL)
        } else {
            Opt(self.array.value(i))
        }
    }
}

fn required(v: Opt<i64>, what: &str, path: &Path) -> Res<i64> {
    v.get()
        .ok_or_else(|| format!("{}: a row without {what}", path.display()))
}

/// The two tables' row groups.
pub struct Tables<'a> {
    pub ops: &'a Path,
    pub reads: &'a Path,
    pub ops_groups: &'a Groups,
    pub reads_groups: &'a Groups,
}

/// Loads the rows of the partitions `wanted` (from the row groups that may hold them), or
/// stops with `Failure::TooBig` as soon as they would hold more than `limit` bytes (checked
/// after each batch of rows, by both tables' loaders). `rows_of`: each partition's rows of
/// ops and of reads, when known, to size its vectors once (the operations' for every row,
/// invocations too: the room never written to is never touched, so it takes address space,
/// not memory). `threads`: each partition's threads; above 1 the two tables load at once,
/// on two threads (they share nothing but the count of rows kept), and the memory held per
/// row is reckoned for the checks' two groups at once (checks.rs).
pub fn load(
    t: &Tables,
    default_acks: &str,
    wanted: &Wanted,
    limit: Option<u64>,
    rows_of: [Option<&BTreeMap<i32, usize>>; 2],
    threads: usize,
    spare: &mut Spare,
) -> Result<History, Failure> {
    let mut strings = Strings::default();
    let words = Words {
        ok: strings.id("ok"),
        info: strings.id("info"),
        fail: strings.id("fail"),
        send: strings.id("send"),
        poll: strings.id("poll"),
        final_poll: strings.id("final-poll"),
        all: strings.id("all"),
        default_acks: strings.id(default_acks),
    };
    let [ops_of, reads_of] = rows_of;
    let sized = |of: Option<&BTreeMap<i32, usize>>| -> BTreeMap<i32, usize> {
        of.into_iter()
            .flatten()
            .filter(|(&p, _)| wanted.partition(p))
            .map(|(&p, &n)| (p, n))
            .collect()
    };
    let kept = Kept {
        limit,
        spare_threads: threads > 1,
        ops: AtomicU64::new(0),
        reads: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let reserved: u64 = sized(reads_of).values().map(|&n| n as u64).sum();
    kept.fits(0, reserved)?; // known before reading a row
    let (ops_groups, reads_groups) = (t.ops_groups.wanted(wanted), t.reads_groups.wanted(wanted));
    let row_groups = ops_groups.len() + reads_groups.len();
    let (spare_ops, spare_reads) = (&mut spare.ops, &mut spare.reads);
    let load_reads = || {
        let rooms = with_room(sized(reads_of), spare_reads);
        load_reads(t.reads, reads_groups, wanted, rooms, &kept)
    };
    let load_ops = || {
        let rooms = with_room(sized(ops_of), spare_ops);
        load_ops(
            t.ops,
            ops_groups,
            wanted,
            rooms,
            &kept,
            &mut strings,
            &words,
        )
    };
    let (ops, reads) = if threads > 1 {
        thread::scope(|s| {
            let reads = s.spawn(load_reads);
            let ops = load_ops();
            (ops, reads.join().expect("the reads' loader does not panic"))
        })
    } else {
        let ops = load_ops();
        // the reads are not read once the operations failed (their error is the one said)
        let reads = match ops {
            Ok(_) => load_reads(),
            Err(_) => Ok(Default::default()),
        };
        (ops, reads)
    };
    let (mut by_partition, ops_by_f_type) = ops?;
    for (p, rows) in reads? {
        by_partition.entry(p).or_default().reads = rows;
    }
    let n_reads = kept.reads.load(Ordering::Relaxed);
    kept.fits(kept.ops.load(Ordering::Relaxed), n_reads)?;
    Ok(History {
        strings,
        words,
        partitions: by_partition,
        ops_by_f_type,
        n_reads,
        row_groups,
    })
}

/// The rows both loaders have kept so far, against the memory limit; the first loader to
/// pass it stops the other.
struct Kept {
    limit: Option<u64>,
    /// Whether a partition's checks run in two groups at once (the estimate's second column).
    spare_threads: bool,
    ops: AtomicU64,
    reads: AtomicU64,
    stop: AtomicBool,
}

impl Kept {
    /// Count `ops` and `reads` more rows, then `fits` with every row counted so far.
    fn add(&self, ops: u64, reads: u64) -> Result<(), Failure> {
        let o = self.ops.fetch_add(ops, Ordering::Relaxed) + ops;
        let r = self.reads.fetch_add(reads, Ordering::Relaxed) + reads;
        self.fits(o, r)
    }

    /// TooBig when `ops` and `reads` rows would pass the limit, or once the other loader
    /// found its rows so.
    fn fits(&self, ops: u64, reads: u64) -> Result<(), Failure> {
        match self.limit {
            Some(l)
                if self.stop.load(Ordering::Relaxed)
                    || need(ops, reads, self.spare_threads) > l =>
            {
                self.stop.store(true, Ordering::Relaxed);
                Err(Failure::TooBig { limit: l })
            }
            _ => Ok(()),
        }
    }
}

type OpsLoaded = (BTreeMap<i32, Partition>, BTreeMap<(u32, u32), u64>);

/// The completed operations of the wanted partitions (into `rooms`' vectors where given,
/// each sized once), and the count of every wanted row by (f, type).
fn load_ops(
    path: &Path,
    groups: Vec<usize>,
    wanted: &Wanted,
    rooms: BTreeMap<i32, Vec<Op>>,
    kept: &Kept,
    strings: &mut Strings,
    words: &Words,
) -> Result<OpsLoaded, Failure> {
    let mut partitions: BTreeMap<i32, Partition> = rooms
        .into_iter()
        .map(|(p, ops)| {
            let reads = Vec::new();
            (p, Partition { ops, reads })
        })
        .collect();
    let mut ops_by_f_type = BTreeMap::new();
    for batch in batches(path, &OPS, groups)? {
        let batch = batch?;
        let c = Cols {
            batch: &batch,
            path,
        };
        let part = c.i32s("partition")?;
        let ty = c.texts("type", strings)?;
        let f = c.texts("f", strings)?;
        let (index, time, value, offset) = (
            c.i64s("index")?,
            c.i64s("time")?,
            c.i64s("value")?,
            c.i64s("offset")?,
        );
        let (process, node, error, acks) = (
            c.texts("process", strings)?,
            c.texts("node", strings)?,
            c.texts("error", strings)?,
            c.texts("acks", strings)?,
        );
        let (epoch, hwm, invoke_time, invoke_offset) = (
            c.i64s("epoch")?,
            c.i64s("hwm")?,
            c.i64s("invoke_time")?,
            c.i64s("invoke_offset")?,
        );
        let (txn, prev_send_op, prev_send_txn) = (
            c.i64s("txn")?,
            c.i64s("prev_send_op")?,
            c.i64s("prev_send_txn")?,
        );
        let mut batch_kept = 0u64;
        for i in 0..batch.num_rows() {
            let keep = match part.at(i).get() {
                Some(p) => wanted.partition(p),
                None => wanted.unpartitioned(),
            };
            if !keep {
                continue;
            }
            if let (Some(f), Some(t)) = (f[i].get(), ty[i].get()) {
                *ops_by_f_type.entry((f, t)).or_insert(0) += 1;
            }
            let (Some(p), Some(f), Some(t)) = (part.at(i).get(), f[i].get(), ty[i].get()) else {
                continue; // only counted: every check is about one partition
            };
            if t != words.ok && t != words.info && t != words.fail {
                continue; // an invocation: the checks read its completion, which repeats it
            }
            batch_kept += 1;
            partitions.entry(p).or_default().ops.push(Op {
                index: required(index.at(i), "an index", path)?,
                time: time.at(i),
                process: process[i],
                ty: t,
                f,
                value: value.at(i),
                offset: offset.at(i),
                node: node[i],
                epoch: epoch.at(i),
                error: error[i],
                hwm: hwm.at(i),
                acks: acks[i],
                invoke_time: invoke_time.at(i),
                invoke_offset: invoke_offset.at(i),
                txn: txn.at(i),
                prev_send_op: prev_send_op.at(i),
                prev_send_txn: prev_send_txn.at(i),
            });
        }
        kept.add(batch_kept, 0)?;
    }
    Ok((partitions, ops_by_f_type))
}

/// The records read in the wanted partitions, by partition (into `rooms`' vectors where
/// given, each sized once), counted in `kept`.
fn load_reads(
    path: &Path,
    groups: Vec<usize>,
    wanted: &Wanted,
    rooms: BTreeMap<i32, Vec<Read>>,
    kept: &Kept,
) -> Result<BTreeMap<i32, Vec<Read>>, Failure> {
    let mut reads = rooms;
    for batch in batches(path, &READS, groups)? {
        let batch = batch?;
        let c = Cols {
            batch: &batch,
            path,
        };
        let part = c.i32s("partition")?;
        let (index, offset, value) = (c.i64s("index")?, c.i64s("offset")?, c.i64s("value")?);
        let final_poll = c.is("f", "final-poll")?;
        let pos = c.i32s("pos")?;
        let (prev_offset, prev_op) = (c.i64s("prev_offset")?, c.i64s("prev_op")?);
        let mut batch_kept = 0u64;
        for i in 0..batch.num_rows() {
            let Some(p) = part.at(i).get() else {
                return Err(format!("{}: a read without a partition", path.display()).into());
            };
            if !wanted.partition(p) {
                continue;
            }
            batch_kept += 1;
            reads.entry(p).or_default().push(Read {
                index: required(index.at(i), "an index", path)?,
                offset: required(offset.at(i), "an offset", path)?,
                value: value.at(i),
                prev_offset: prev_offset.at(i),
                prev_op: prev_op.at(i),
                pos: pos.at(i),
                final_poll: final_poll[i],
            });
        }
        kept.add(0, batch_kept)?;
    }
    Ok(reads)
}
