//! history.jsonl -> the checkers' `ops` and `reads` Parquet tables, in one streaming pass.
//!
//! The fast path of `checkers.ingest.ingest` (Python). It converts a history exactly as the
//! exact path (`checkers/ingest.py`, `_Converter`) does, or refuses it: any line that path
//! would reject, or that this one cannot type exactly as Python would (a float, an escape
//! this reader cannot vouch for, a duplicate key, an integer past 64 bits, ...), makes it
//! exit with UNSURE and the line's number, and the exact path then reads the history and
//! names every bad line. So the tables never depend on which path wrote them, and error
//! messages are only ever the exact path's.
//!
//! Pipeline, every stage bounded (memory is a few blocks plus the longest line, however
//! large the history):
//!   reader   file -> blocks of whole lines (each with its first line number)
//!   parsers  blocks -> typed lines, in parallel (fields.rs scans the lines the harness
//!            writes; serde_json reads any other)
//!   main     typed lines in file order -> the history contract and the order columns
//!            (each completion's invoke, each read's and send's predecessor) -> row batches
//!   writers  batches -> Parquet (snappy), one thread per table
//!
//! Usage: histingest HISTORY OPS.parquet READS.parquet --max-partition N --max-line BYTES
//!        [--threads N] [--row-group ROWS] [--buffered ROWS]
//! The tables are clustered by Kafka partition (tables.rs): `--row-group` and `--buffered`
//! set its rule (checkers/ingest.py passes its ROW_GROUP and BUFFERED).
//! Exit 0: stdout is {"ops": N, "reads": M, "torn_line": L or null} (a last line without a
//! newline that is not JSON: the caller decides whether it is a crashed run's torn tail).
//! Exit 3: unsure, stderr says why (and which line). Exit 4: no space left on the device.
//! Exit 2: usage or any other I/O error, or an output it refuses to replace (refuse_outputs):
//! then it touched nothing.

mod alloc;
mod columns;
mod convert;
mod fields;
mod orphan;
mod parse;
mod tables;
mod text;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;

use convert::Converter;
use parse::{parse_block, Parsed};
use tables::{Layout, Tables};

// Millions of small strings and vectors go between threads: the system allocator was a sixth
// of the time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Bytes read at a time; a block ends at its last newline (longer lines grow it).
const BLOCK: usize = 4 << 20;
/// Blocks in flight between the stages: with BLOCK, what bounds the memory.
const IN_FLIGHT: usize = 4;

pub enum Failure {
    /// The exact path must read this history (the reason, with its line).
    Unsure(String),
    /// An I/O error (writing the tables, reading the history).
    Io(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

impl From<parquet::errors::ParquetError> for Failure {
    fn from(e: parquet::errors::ParquetError) -> Self {
        match e {
            parquet::errors::ParquetError::External(inner) => match inner.downcast::<io::Error>() {
                Ok(io) => Failure::Io(*io),
                Err(other) => Failure::Io(io::Error::other(other.to_string())),
            },
            other => Failure::Io(io::Error::other(other.to_string())),
        }
    }
}

struct Args {
    history: PathBuf,
    ops: PathBuf,
    reads: PathBuf,
    max_partition: i64,
    max_line: usize,
    threads: usize,
    layout: Layout,
}

fn args() -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut max_partition = i32::MAX as i64;
    let mut max_line = 512usize << 20;
    let mut threads = thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut layout = Layout {
        row_group: tables::ROW_GROUP,
        buffered: tables::BUFFERED,
    };
    let mut it = std::env::args_os().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<String, String> {
            it.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.to_str() {
            Some("--max-partition") => {
                max_partition = value("--max-partition")?
                    .parse()
                    .map_err(|e| format!("{e}"))?
            }
            Some("--max-line") => {
                max_line = value("--max-line")?.parse().map_err(|e| format!("{e}"))?
            }
            Some("--threads") => {
                threads = value("--threads")?.parse().map_err(|e| format!("{e}"))?
            }
            Some("--row-group") => {
                layout.row_group = value("--row-group")?.parse().map_err(|e| format!("{e}"))?
            }
            Some("--buffered") => {
                layout.buffered = value("--buffered")?.parse().map_err(|e| format!("{e}"))?
            }
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [history, ops, reads]: [PathBuf; 3] = positional.try_into().map_err(|_| {
        "usage: histingest HISTORY OPS READS [--max-partition N] [--max-line B] [--threads N] \
         [--row-group ROWS] [--buffered ROWS]"
            .to_string()
    })?;
    if layout.row_group == 0 || layout.buffered <= layout.row_group {
        return Err("want 0 < --row-group < --buffered".to_string());
    }
    Ok(Args {
        layout,
        history,
        ops,
        reads,
        max_partition,
        max_line,
        threads: threads.max(1),
    })
}

/// Refuse outputs that replacing would harm, before anything is opened: each output is
/// removed and created again, so a device node, FIFO, directory or symlink there would be
/// removed (as root, even a device), and an output that is the history (or the other
/// output) would destroy what is being read.
fn refuse_outputs(a: &Args) -> Result<(), String> {
    let history = fs::metadata(&a.history).ok();
    let mut seen: Vec<(u64, u64)> = history.iter().map(|m| (m.dev(), m.ino())).collect();
    if a.ops == a.reads {
        return Err(format!(
            "{}: both outputs are this one file",
            a.ops.display()
        ));
    }
    for out in [&a.ops, &a.reads] {
        let m = match fs::symlink_metadata(out) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", out.display())),
        };
        if !m.file_type().is_file() {
            return Err(format!(
                "{}: {}: refusing to replace it",
                out.display(),
                kind(&m)
            ));
        }
        if seen.contains(&(m.dev(), m.ino())) {
            return Err(format!(
                "{}: the same file as an input or the other output: refusing \
                                to replace it",
                out.display()
            ));
        }
        seen.push((m.dev(), m.ino()));
    }
    Ok(())
}

/// What a non-regular file is, in words.
fn kind(m: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    match () {
        _ if t.is_symlink() => "a symlink",
        _ if t.is_dir() => "a directory",
        _ if t.is_fifo() => "a FIFO",
        _ if t.is_block_device() || t.is_char_device() => "a device",
        _ if t.is_socket() => "a socket",
        _ => "not a regular file",
    }
}

/// A block of whole lines: its sequence number and the number of its first line (only the
/// file's last block may end without a newline).
struct Block {
    seq: u64,
    first_line: u64,
    bytes: Vec<u8>,
}

/// Read `file` into blocks of whole lines; a line longer than `max_line` is UNSURE (the exact
/// path names it).
fn read_blocks(
    mut file: File,
    max_line: usize,
    out: SyncSender<Result<Block, Failure>>,
    spare: Receiver<Vec<u8>>,
) {
    let mut carry: Vec<u8> = Vec::new();
    let mut seq = 0u64;
    let mut line = 1u64;
    loop {
        let mut buf = std::mem::take(&mut carry);
        let start = buf.len();
        // a parsed block's buffer: its pages are mapped already (fresh ones the kernel must
        // zero, a few percent of the ingest), and its bytes initialised, so only what lies
        // past them is zeroed (zeroing every block whole was 1 % of the ingest). Not for a
        // line longer than a block, which grows in its own buffer: copying it into another
        // at every block was quadratic.
        if start < BLOCK {
            if let Ok(mut old) = spare.try_recv() {
                old.resize(start + BLOCK, 0);
                old[..start].copy_from_slice(&buf);
                buf = old;
            }
        }
        buf.resize(start + BLOCK, 0);
        let n = match read_full(&mut file, &mut buf[start..]) {
            Ok(n) => n,
            Err(e) => {
                let _ = out.send(Err(e.into()));
                return;
            }
        };
        buf.truncate(start + n);
        let eof = n == 0;
        if buf.is_empty() {
            return;
        }
        // the carry holds no newline (it is what followed the last one), so only the bytes
        // just read are searched: searching a line longer than a block whole at every block
        // was quadratic (a final read of 33M records is one line of some 700 MB at 100M
        // operations: 55 s of the reader's CPU)
        let cut = if eof {
            buf.len()
        } else {
            memchr::memrchr(b'\n', &buf[start..]).map_or(0, |i| start + i + 1)
        };
        if cut == 0 {
            // no newline yet: one line longer than a block
            if buf.len() >= max_line {
                let _ = out.send(Err(Failure::Unsure(format!(
                    "line {line}: longer than {max_line} bytes"
                ))));
                return;
            }
            carry = buf;
            continue;
        }
        carry = buf[cut..].to_vec();
        buf.truncate(cut);
        let (lines, longest) = line_stats(&buf);
        if longest >= max_line {
            let _ = out.send(Err(Failure::Unsure(format!(
                "a line near line {line}: longer than {max_line} bytes"
            ))));
            return;
        }
        let block = Block {
            seq,
            first_line: line,
            bytes: buf,
        };
        seq += 1;
        line += lines;
        if out.send(Ok(block)).is_err() || eof {
            return;
        }
    }
}

fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// (newlines, the longest line's length without its newline) of a block.
fn line_stats(buf: &[u8]) -> (u64, usize) {
    let (mut lines, mut start, mut longest) = (0u64, 0usize, 0usize);
    for i in memchr::memchr_iter(b'\n', buf) {
        lines += 1;
        longest = longest.max(i - start);
        start = i + 1;
    }
    (lines, longest.max(buf.len() - start))
}

type ParsedBlock = (u64, Result<Vec<Parsed>, Failure>);

fn run(a: &Args) -> Result<(u64, u64, Option<u64>), Failure> {
    let file = File::open(&a.history)?;
    let mut tables = Tables::create(&a.ops, &a.reads, a.layout)?;
    let parsers = a.threads;
    let (block_tx, block_rx) = sync_channel::<Result<Block, Failure>>(IN_FLIGHT);
    let (spare_tx, spare_rx) = sync_channel::<Vec<u8>>(IN_FLIGHT);
    let (parsed_tx, parsed_rx) = sync_channel::<ParsedBlock>(IN_FLIGHT + parsers);
    let block_rx = Arc::new(Mutex::new(block_rx));
    let max_line = a.max_line;
    let max_partition = a.max_partition;
    let mut conv = Converter::new();
    let outcome = thread::scope(|s| -> Result<Option<u64>, Failure> {
        thread::Builder::new()
            .name("read".into())
            .spawn_scoped(s, move || read_blocks(file, max_line, block_tx, spare_rx))?;
        for _ in 0..parsers {
            let rx = Arc::clone(&block_rx);
            let tx = parsed_tx.clone();
            let spare = spare_tx.clone();
            thread::Builder::new()
                .name("parse".into())
                .spawn_scoped(s, move || parse_worker(rx, tx, spare, max_partition))?;
        }
        // Only the parsers may hold the block receiver: when an early return drops the parsed
        // receiver, the parsers stop, the block receiver goes with the last of them, and the
        // reader's next send fails and stops it. Held here too, it would keep the reader
        // blocked on a full channel, and this scope waiting for it, for ever.
        drop(block_rx);
        drop(parsed_tx);
        drop(spare_tx);
        consume(parsed_rx, &mut conv, &mut tables)
    })?;
    let (ops, reads) = tables.finish()?;
    Ok((ops, reads, outcome))
}

fn parse_worker(
    rx: Arc<Mutex<Receiver<Result<Block, Failure>>>>,
    tx: SyncSender<ParsedBlock>,
    spare: SyncSender<Vec<u8>>,
    max_partition: i64,
) {
    loop {
        let next = rx.lock().map(|r| r.recv());
        let block = match next {
            Ok(Ok(b)) => b,
            _ => return,
        };
        let (seq, parsed) = match block {
            Ok(b) => {
                let parsed = parse_block(&b.bytes, b.first_line, max_partition);
                // back to the reader, if it has room for it (else it is freed)
                let _ = spare.try_send(b.bytes);
                (b.seq, parsed)
            }
            Err(f) => (u64::MAX, Err(f)),
        };
        if tx.send((seq, parsed)).is_err() {
            return;
        }
    }
}

/// Feed the parsed blocks to the converter in file order; the torn last line, if any.
fn consume(
    rx: Receiver<ParsedBlock>,
    conv: &mut Converter,
    tables: &mut Tables,
) -> Result<Option<u64>, Failure> {
    let mut waiting: BTreeMap<u64, Vec<Parsed>> = BTreeMap::new();
    let mut next = 0u64;
    let mut torn = None;
    for (seq, parsed) in rx {
        let lines = parsed?;
        waiting.insert(seq, lines);
        while let Some(lines) = waiting.remove(&next) {
            next += 1;
            // by reference: an op is some 300 bytes, and moving each out of its block was a
            // few percent of the ingest
            for p in &lines {
                match p {
                    Parsed::Op(op) => conv.add(op, tables)?,
                    Parsed::Torn(line) => torn = Some(*line),
                }
            }
        }
    }
    if !waiting.is_empty() {
        return Err(Failure::Io(io::Error::other(
            "a block went missing between the stages",
        )));
    }
    Ok(torn)
}

fn main() -> ExitCode {
    orphan::die_with_parent();
    alloc::keep_freed_memory();
    let a = match args().and_then(|a| refuse_outputs(&a).map(|()| a)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("histingest: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok((ops, reads, torn)) => {
            let torn = torn.map_or("null".to_string(), |l| l.to_string());
            let mut out = io::stdout().lock();
            let _ = writeln!(
                out,
                "{{\"ops\": {ops}, \"reads\": {reads}, \"torn_line\": {torn}}}"
            );
            ExitCode::SUCCESS
        }
        Err(Failure::Unsure(why)) => {
            eprintln!("{why}");
            ExitCode::from(3)
        }
        Err(Failure::Io(e)) => {
            eprintln!("histingest: {e}");
            if e.raw_os_error() == Some(28) {
                ExitCode::from(4)
            } else {
                ExitCode::from(2)
            }
        }
    }
}
