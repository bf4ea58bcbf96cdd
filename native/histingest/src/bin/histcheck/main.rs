//! The ops and reads Parquet tables -> every anomaly of checkers/definitions.py, natively.
//!
//! The fast kernel of checkers/native_checks.py. Every anomaly is about one Kafka partition,
//! so the partitions are checked independently on `--threads` threads and merged: counts
//! add up, and each anomaly's examples are the first EXAMPLES by the reference's sort key
//! (no two partitions share one). The Spark checker runs this program in its tasks, each on
//! a share of the partitions, and merges their outputs the same way.
//!
//! Usage: histcheck OPS.parquet READS.parquet --acks ACKS --examples N
//!        [--share R/K] [--threads N] [--at-once P] [--memory-limit BYTES]
//! `--share R/K` checks only the partitions p with p mod K == R (default 0/1: all of them).
//! On tables clustered by partition (load.rs) it reads only those partitions' row groups,
//! and loads and checks them in waves of `--at-once` partitions (default: one, unless there
//! are at least twice as many partitions as threads: then `--threads`), so it holds one
//! wave's rows at a time (and `--memory-limit` bounds a wave). `--threads` is
//! the cores it may use: a wave of fewer partitions than threads gives each partition the
//! threads left over (its two tables load at once, and its checks run in two groups), so
//! `--at-once 1` checks one partition at a time on every core. The next wave loads while a
//! wave is checked where both waves fit (`Ahead`): within `--memory-limit`, else within a
//! share of the memory available; otherwise the memory held is one wave's.
//! With HISTCHECK_TIMES set in the environment it prints its load and check times on stderr,
//! and how many waves loaded ahead.
//! With `--estimate` it reads no row: stdout is {"waves": [bytes, ...]}, the memory each wave
//! would need by the estimate `--memory-limit` stops by, from the tables' footers (each
//! partition's completed operations taken as half its operations' rows, an upper bound),
//! or {"waves": null} when the tables are not clustered (nothing tells before loading).
//! Exit 0: stdout is one JSON object:
//!   {"anomalies": {name: [count, [example, ...]]}, "unread": [row, ...],
//!    "complete_partitions": [p, ...], "stats": {...}, "row_groups_read": N}
//! (N: the row groups of both tables it read).
//! Exit 2: usage, or a table that cannot be read (stderr says why).
//! Exit 5: with `--memory-limit BYTES`, the rows of the partitions asked for would hold more
//! than that (an estimate, checked as they load): nothing was checked.

#[path = "../../alloc.rs"]
mod alloc;
mod cells;
mod checks;
mod load;
#[path = "../../orphan.rs"]
mod orphan;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;

use serde_json::{json, Map, Value};

use checks::{check, Checked, Ctx, NAMES};
use load::{load, Failure, Groups, Spare, Tables, Wanted};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    ops: PathBuf,
    reads: PathBuf,
    acks: String,
    examples: usize,
    wanted: Wanted,
    threads: usize,
    /// Partitions loaded and checked at once (a wave); None: `default_at_once`.
    at_once: Option<usize>,
    memory_limit: Option<u64>,
    estimate: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let usage = "usage: histcheck OPS READS --acks ACKS --examples N [--share R/K] \
                 [--threads N] [--at-once P] [--memory-limit BYTES] [--estimate]";
    let ops = PathBuf::from(it.next().ok_or(usage)?);
    let reads = PathBuf::from(it.next().ok_or(usage)?);
    let mut acks = None;
    let mut examples = None;
    let mut wanted = Wanted {
        share: 0,
        of: 1,
        only: None,
        unpartitioned: true,
    };
    let mut threads = thread::available_parallelism().map_or(1, |n| n.get());
    let mut memory_limit = None;
    let mut at_once = None;
    let mut estimate = false;
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--acks" => acks = Some(it.next().ok_or(usage)?),
            "--estimate" => estimate = true,
            "--examples" | "--threads" | "--at-once" | "--share" | "--memory-limit" => {
                let v = it.next().ok_or(usage)?;
                let bad = || format!("{flag}: not a number: {v:.40}");
                match flag.as_str() {
                    "--examples" => examples = Some(v.parse().map_err(|_| bad())?),
                    "--threads" => threads = v.parse::<usize>().map_err(|_| bad())?.max(1),
                    "--at-once" => at_once = Some(v.parse::<usize>().map_err(|_| bad())?.max(1)),
                    "--memory-limit" => memory_limit = Some(v.parse().map_err(|_| bad())?),
                    _ => {
                        let (r, k) = v.split_once('/').ok_or_else(bad)?;
                        let (r, k) = (r.parse().map_err(|_| bad())?, k.parse().map_err(|_| bad())?);
                        if k < 1 || r < 0 || r >= k {
                            return Err(format!("--share {v:.40}: want R/K with 0 <= R < K"));
                        }
                        wanted = Wanted {
                            share: r,
                            of: k,
                            only: None,
                            unpartitioned: r == 0,
                        };
                    }
                }
            }
            _ => return Err(usage.to_owned()),
        }
    }
    Ok(Args {
        ops,
        reads,
        acks: acks.ok_or(usage)?,
        examples: examples.ok_or(usage)?,
        wanted,
        threads,
        at_once,
        memory_limit,
        estimate,
    })
}

/// The loads that check the share asked for, one after the other: on clustered tables
/// (load.rs), waves of `at_once` partitions, the biggest first, so that the memory held is
/// a wave's, not the share's; else the whole share at once.
fn waves(args: &Args, ops: &Groups, reads: &Groups) -> Vec<Wanted> {
    let w = &args.wanted;
    let whole = || Wanted {
        share: w.share,
        of: w.of,
        only: None,
        unpartitioned: w.share == 0,
    };
    let (Some(op_rows), Some(read_rows)) = (ops.rows_by_partition(), reads.rows_by_partition())
    else {
        return vec![whole()];
    };
    let mut sizes: BTreeMap<i32, usize> = BTreeMap::new();
    for (&p, &n) in op_rows
        .iter()
        .chain(&read_rows)
        .filter(|(&p, _)| w.partition(p))
    {
        *sizes.entry(p).or_insert(0) += n;
    }
    let mut order: Vec<(i32, usize)> = sizes.into_iter().collect();
    order.sort_by_key(|&(p, n)| (std::cmp::Reverse(n), p));
    let at_once = args
        .at_once
        .unwrap_or_else(|| default_at_once(order.len(), args.threads));
    let mut out: Vec<Wanted> = order
        .chunks(at_once)
        .map(|c| Wanted {
            share: w.share,
            of: w.of,
            only: Some(c.iter().map(|&(p, _)| p).collect()),
            unpartitioned: false,
        })
        .collect();
    match out.first_mut() {
        Some(first) => first.unpartitioned = w.share == 0,
        None => out.push(Wanted {
            only: Some(Default::default()),
            ..whole()
        }),
    }
    out
}

/// Partitions at a time when `--at-once` is not given: one, on every thread, unless there are
/// at least twice as many partitions as threads, when a partition on each thread keeps them
/// all busy. A partition alone keeps both cores busy for most of its load and checks (its
/// tables load at once, its checks run in two groups), and waves of `threads` partitions
/// hold that many partitions' memory and, with a few partitions, end in a short wave: the
/// benchmark's 3 partitions on 2 threads took longer in waves of 2, at 10M and at 100M
/// operations, and held 16 GB at peak at 100M against 10 (docs/checkers.md).
fn default_at_once(partitions: usize, threads: usize) -> usize {
    if partitions >= 2 * threads {
        threads
    } else {
        1
    }
}

/// (partitions checked at once, threads each) for a wave: the wave's partitions share the
/// threads, the threads left over go to each partition's own load and checks.
fn threads_of(args: &Args, wanted: &Wanted) -> (usize, usize) {
    let workers = match &wanted.only {
        Some(only) if !only.is_empty() => only.len(), // waves hold at most `at_once`
        // tables not clustered: the partitions are known once loaded
        _ => args.at_once.unwrap_or(args.threads),
    }
    .min(args.threads);
    (workers, args.threads / workers)
}

/// Each wave's memory by the estimate, from the footers alone (`--estimate`); None when the
/// tables are not clustered. A partition's completed operations are taken as half its
/// operations' rows: each completion follows its invocation, so no more can be kept.
fn estimate(args: &Args, ops: &Groups, reads: &Groups, waves: &[Wanted]) -> Option<Vec<u64>> {
    let (op_rows, read_rows) = (ops.rows_by_partition()?, reads.rows_by_partition()?);
    let rows = |of: &BTreeMap<i32, usize>, p: &i32| of.get(p).copied().unwrap_or(0) as u64;
    let wave = |wanted: &Wanted| -> u64 {
        let spare_threads = threads_of(args, wanted).1 > 1;
        let only = wanted.only.iter().flatten();
        only.map(|p| load::need(rows(&op_rows, p) / 2, rows(&read_rows, p), spare_threads))
            .sum()
    };
    Some(waves.iter().map(wave).collect())
}

/// What the waves found, merged: each partition's results, and the statistics.
#[derive(Default)]
struct Found {
    parts: BTreeMap<i32, Checked>,
    ops_by_f_type: BTreeMap<String, u64>,
    n_reads: u64,
    row_groups: usize,
}

/// Check each partition of `h` on its own thread, the biggest first, `workers` at a time,
/// each on `inner` threads of its own.
fn check_all(h: &load::History, workers: usize, inner: usize, found: &mut Found) {
    let parts: Vec<(&i32, &load::Partition)> = h.partitions.iter().collect();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(parts[i].1.ops.len() + parts[i].1.reads.len()));
    let results: Mutex<Vec<Option<Checked>>> = Mutex::new((0..parts.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..workers.min(parts.len()) {
            s.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let (&p, part) = parts[i];
                    let cx = Ctx {
                        p,
                        s: &h.strings,
                        w: &h.words,
                    };
                    let out = check(&cx, part, inner);
                    results.lock().unwrap()[i] = Some(out);
                }
            });
        }
    });
    let results = results.into_inner().unwrap();
    for ((&p, _), c) in parts.iter().zip(results) {
        found.parts.insert(p, c.expect("every partition checked"));
    }
    for (&(f, t), &n) in &h.ops_by_f_type {
        let key = format!("{}:{}", h.strings.name(f), h.strings.name(t));
        *found.ops_by_f_type.entry(key).or_insert(0) += n;
    }
    found.n_reads += h.n_reads;
    found.row_groups += h.row_groups;
}

/// Which waves load while the wave before them is checked: one core idles through part of a
/// partition's checks (its first steps run on one thread), and loading the next partition
/// then fills it. Only where both waves' rows fit, by the footers' estimate: within
/// `--memory-limit` (the wave loaded ahead is held to what the other leaves of it), else
/// within MEMORY_FRACTION of the memory available; never on tables not clustered (one wave).
struct Ahead {
    estimates: Option<Vec<u64>>,
    budget: Option<u64>,
    limit: Option<u64>,
}

/// Of the memory available, what two waves' rows may take when no limit is given.
const MEMORY_FRACTION: f64 = 0.6;

impl Ahead {
    fn new(args: &Args, estimates: Option<Vec<u64>>) -> Ahead {
        let available = || available_memory().map(|b| (b as f64 * MEMORY_FRACTION) as u64);
        Ahead {
            estimates,
            budget: args.memory_limit.or_else(available),
            limit: args.memory_limit,
        }
    }

    /// Whether wave `i + 1` of `n` loads while wave `i` is checked: Some(its memory limit).
    fn of(&self, i: usize, n: usize) -> Option<Option<u64>> {
        let (e, budget) = (self.estimates.as_ref()?, self.budget?);
        if i + 1 >= n || e[i] + e[i + 1] > budget {
            return None;
        }
        Some(self.limit.map(|l| l.saturating_sub(e[i])))
    }
}

/// MemAvailable of /proc/meminfo, in bytes.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn run(args: &Args) -> Result<Value, Failure> {
    let started = std::time::Instant::now();
    let (ops_groups, reads_groups) = (Groups::read(&args.ops)?, Groups::read(&args.reads)?);
    if args.estimate {
        let waves = waves(args, &ops_groups, &reads_groups);
        return Ok(json!({"waves": estimate(args, &ops_groups, &reads_groups, &waves)}));
    }
    let tables = Tables {
        ops: &args.ops,
        reads: &args.reads,
        ops_groups: &ops_groups,
        reads_groups: &reads_groups,
    };
    let rows_of = [
        ops_groups.rows_by_partition(),
        reads_groups.rows_by_partition(),
    ];
    let mut found = Found::default();
    let (mut loading, mut checking) = (0.0, 0.0);
    let waves = waves(args, &ops_groups, &reads_groups);
    let ahead = Ahead::new(args, estimate(args, &ops_groups, &reads_groups, &waves));
    let load_wave = |i: usize, limit: Option<u64>, mut spare: Spare| {
        let inner = threads_of(args, &waves[i]).1;
        let rows = [rows_of[0].as_ref(), rows_of[1].as_ref()];
        let h = load(
            &tables, &args.acks, &waves[i], limit, rows, inner, &mut spare,
        );
        (h, spare)
    };
    let mut spare = Spare::default();
    let mut next: Option<Result<load::History, Failure>> = None; // a wave loaded ahead
    let mut loaded_ahead = 0;
    thread::scope(|s| -> Result<(), Failure> {
        for i in 0..waves.len() {
            let t = std::time::Instant::now();
            let h = match next.take() {
                Some(Ok(h)) => h,
                // loaded ahead within less than the limit: loaded again within all of it
                Some(Err(Failure::TooBig { .. })) | None => {
                    let (h, kept) = load_wave(i, args.memory_limit, std::mem::take(&mut spare));
                    spare = kept;
                    h?
                }
                Some(Err(e)) => return Err(e),
            };
            loading += t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            let loading_ahead = ahead.of(i, waves.len()).map(|limit| {
                loaded_ahead += 1;
                let kept = std::mem::take(&mut spare);
                s.spawn(move || load_wave(i + 1, limit, kept))
            });
            let (workers, inner) = threads_of(args, &waves[i]);
            check_all(&h, workers, inner, &mut found);
            checking += t.elapsed().as_secs_f64();
            if let Some(handle) = loading_ahead {
                let t = std::time::Instant::now();
                let (h, kept) = handle.join().expect("a load returns its failures");
                (next, spare) = (Some(h), kept);
                loading += t.elapsed().as_secs_f64();
            }
            spare.keep(h);
        }
        Ok(())
    })?;
    if std::env::var_os("HISTCHECK_TIMES").is_some() {
        eprintln!(
            "histcheck: load {loading:.2}s, check {checking:.2}s, {:.2}s in all; \
             {loaded_ahead} of {} waves loaded ahead",
            started.elapsed().as_secs_f64(),
            waves.len()
        );
    }
    let results: Vec<(&i32, &Checked)> = found.parts.iter().collect();

    let mut anomalies = Map::new();
    for (n, name) in NAMES.iter().enumerate() {
        let mut all: Vec<&(Vec<i64>, Value)> =
            results.iter().flat_map(|(_, c)| &c.found[n]).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0)); // stable: ties keep a partition's own order
        let examples: Vec<&Value> = all.iter().take(args.examples).map(|e| &e.1).collect();
        anomalies.insert(name.to_string(), json!([all.len(), examples]));
    }
    let unread: Vec<&Value> = results.iter().flat_map(|(_, c)| &c.unread).collect();
    let complete: Vec<i32> = results
        .iter()
        .filter(|(_, c)| c.complete)
        .map(|(p, _)| **p)
        .collect();
    let mut acked = Map::new();
    for (p, c) in results.iter().filter(|(_, c)| c.acked > 0) {
        acked.insert(p.to_string(), json!(c.acked));
    }
    let stats = json!({
        "ops": found.ops_by_f_type.values().sum::<u64>(),
        "ops_by_f_type": found.ops_by_f_type,
        "reads": found.n_reads,
        "acked_by_partition": acked,
        "info_sends_read": results.iter().map(|(_, c)| c.info_read).sum::<u64>(),
    });
    Ok(
        json!({"anomalies": anomalies, "unread": unread, "complete_partitions": complete,
              "stats": stats, "row_groups_read": found.row_groups}),
    )
}

/// Exit status when the rows would not fit `--memory-limit` (nothing checked).
const TOO_BIG: u8 = 5;

fn main() -> ExitCode {
    orphan::die_with_parent();
    alloc::keep_freed_memory();
    let result = parse_args().map_err(Failure::Error).and_then(|a| run(&a));
    match result {
        Ok(out) => {
            let mut stdout = io::stdout().lock();
            if serde_json::to_writer(&mut stdout, &out).is_err() || stdout.flush().is_err() {
                return ExitCode::from(2);
            }
            ExitCode::SUCCESS
        }
        Err(Failure::Error(e)) => {
            eprintln!("histcheck: {e}");
            ExitCode::from(2)
        }
        Err(Failure::TooBig { limit }) => {
            eprintln!("histcheck: the rows of these partitions need more than {limit} bytes");
            ExitCode::from(TOO_BIG)
        }
    }
}
