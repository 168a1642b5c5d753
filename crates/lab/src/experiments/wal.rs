//! `wal`: durable appends with Spindle's group-commit log (`spindle-wal`) against what a Rust
//! program would otherwise use: `fdatasync` after every append (the floor a naive program
//! writes), okaywal (a WAL with group commit of its own), SQLite in WAL mode with
//! `synchronous=FULL` (rusqlite, one connection behind a mutex), and redb (a transaction per
//! append, durable on commit). Seed 002: Arakoon batched its client queue into one consensus
//! value, and users asked for "always sync".
//!
//! Every append is acknowledged only once it is on stable storage (`append_durable`, okaywal's
//! `commit`, SQLite's and redb's commit). For 64-byte and 4-KiB records and 1, 4, 16 and 64
//! writer threads, each contestant runs for a fixed time: appends per second, all writers
//! together, and the ack latency of each append (p50, p99). The disk itself is measured in the
//! same run: its fsync rate F and fsync latency (one thread writing 64 bytes at a time into a
//! file written with zeros ahead, `fdatasync` after each, as `pg_test_fsync` does: a durable
//! write with no metadata to commit), and its sequential write bandwidth B (1 MiB writes, then one
//! `fdatasync`). The bound for N writers is min(0.9 × N × F, 0.8 × B / record bytes). The naive
//! contestant appends to a file that grows, as a program that calls `fdatasync` after every
//! `write` does: each of its syncs commits the new length too.
//!
//! When /dev/shm is a tmpfs (and the scratch directory is not), spindle-wal also runs there
//! with 64-byte records (`freesync`): syncs cost nothing, so its rate is what the CPUs allow
//! writers that block until their record is durable; it explains the N-writer bounds.
//!
//! Section `wake` measures the other cost of a log whose writers sleep until another thread's
//! sync wakes them (as spindle-wal's do): N threads blocked on one event count, asleep for a
//! sync's time, then woken by one increment — when do the first and the last of them run
//! again? A writer's cycle is at least a sync plus its own wake-up, so N divided by (a sync + a
//! record's transfer + the first wake-up) is a ceiling for every such log on this machine (a
//! log whose committing writer runs the sync itself, or whose writers spin, is not bound by
//! it): the `blocking` rows, which the N-writer claims' explanations set beside the bound.
//!
//! Section `raft` (module `raft`): a three-node openraft cluster on loopback with its logs on
//! spindle-wal against the same cluster on openraft's in-memory example log with a write and
//! `fdatasync` per append.
//!
//! The files live in `$SPINDLE_LAB_DIR` or the current directory (never the temporary
//! directory, often a tmpfs); on a tmpfs or ramfs, where fsync is free, the report says so.

mod raft;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::kit::quantile;
use crate::results::Profile;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};

pub struct WalLab;

const WRITERS: [usize; 4] = [1, 4, 16, 64];
/// Record sizes: bytes, the section's id, and how the claims name them.
const SIZES: [(usize, &str, &str); 2] = [(64, "b64", "64-byte"), (4096, "k4", "4-KiB")];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Spindle,
    Fsync,
    Okaywal,
    Sqlite,
    Redb,
}

impl Who {
    fn id(self) -> &'static str {
        match self {
            Who::Spindle => "spindle",
            Who::Fsync => "fsync",
            Who::Okaywal => "okaywal",
            Who::Sqlite => "sqlite",
            Who::Redb => "redb",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Who::Spindle => "spindle-wal append_durable",
            Who::Fsync => "write + fdatasync per append (one file, a mutex)",
            Who::Okaywal => "okaywal entry commit",
            Who::Sqlite => "SQLite WAL, synchronous=FULL (rusqlite, one connection)",
            Who::Redb => "redb, a write transaction per append",
        }
    }
}

const CONTESTANTS: [Who; 5] = [
    Who::Spindle,
    Who::Fsync,
    Who::Okaywal,
    Who::Sqlite,
    Who::Redb,
];

const REDB_TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("records");

/// One contestant's store, opened once per visit in its own directory.
enum Store {
    Spindle(spindle_wal::Wal),
    Fsync(Mutex<std::fs::File>),
    Okaywal(okaywal::WriteAheadLog),
    Sqlite(Mutex<rusqlite::Connection>),
    Redb(redb::Database, AtomicU64),
}

impl Store {
    fn open(who: Who, dir: &Path) -> Result<Store, String> {
        let err = |e: &dyn std::fmt::Display| format!("{}: {e}", who.id());
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
        Ok(match who {
            Who::Spindle => Store::Spindle(
                spindle_wal::Wal::open(dir, spindle_wal::Options::default())
                    .map_err(|e| err(&e))?,
            ),
            Who::Fsync => Store::Fsync(Mutex::new(
                std::fs::File::create(dir.join("log")).map_err(|e| err(&e))?,
            )),
            Who::Okaywal => Store::Okaywal(
                okaywal::WriteAheadLog::recover(dir, okaywal::LogVoid).map_err(|e| err(&e))?,
            ),
            Who::Sqlite => {
                let c = rusqlite::Connection::open(dir.join("db")).map_err(|e| err(&e))?;
                c.execute_batch(
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; \
                     CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB);",
                )
                .map_err(|e| err(&e))?;
                Store::Sqlite(Mutex::new(c))
            }
            Who::Redb => Store::Redb(
                redb::Database::create(dir.join("db")).map_err(|e| err(&e))?,
                AtomicU64::new(0),
            ),
        })
    }

    /// Appends `record` and returns once it is durable.
    fn append(&self, record: &[u8]) -> Result<(), String> {
        let s = |e: &dyn std::fmt::Display| e.to_string();
        match self {
            Store::Spindle(w) => w.append_durable(record).map(drop).map_err(|e| s(&e)),
            Store::Fsync(f) => {
                let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
                f.write_all(record)
                    .and_then(|()| f.sync_data())
                    .map_err(|e| s(&e))
            }
            Store::Okaywal(log) => {
                let mut entry = log.begin_entry().map_err(|e| s(&e))?;
                entry.write_chunk(record).map_err(|e| s(&e))?;
                entry.commit().map(drop).map_err(|e| s(&e))
            }
            Store::Sqlite(c) => {
                let c = c.lock().unwrap_or_else(|e| e.into_inner());
                c.execute("INSERT INTO t(v) VALUES (?1)", [record])
                    .map(drop)
                    .map_err(|e| s(&e))
            }
            Store::Redb(db, key) => {
                let txn = db.begin_write().map_err(|e| s(&e))?;
                {
                    let mut t = txn.open_table(REDB_TABLE).map_err(|e| s(&e))?;
                    t.insert(key.fetch_add(1, Relaxed), record)
                        .map_err(|e| s(&e))?;
                }
                txn.commit().map_err(|e| s(&e))
            }
        }
    }
}

/// `writers` threads append `size`-byte records to `store` for `span`: appends per second and
/// the ack latency percentiles (ns).
fn run(store: &Store, writers: usize, size: usize, span: Duration) -> Sample {
    let start = Barrier::new(writers);
    let record = vec![0xA5u8; size];
    let (count, mut lat): (u64, Vec<f64>) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..writers)
            .map(|_| {
                let (start, record) = (&start, &record);
                s.spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    let mut lat = Vec::new();
                    while t0.elapsed() < span {
                        let a = Instant::now();
                        store
                            .append(record)
                            .unwrap_or_else(|e| panic!("append: {e}"));
                        lat.push(a.elapsed().as_nanos() as f64);
                    }
                    (t0, Instant::now(), lat)
                })
            })
            .collect();
        let runs: Vec<_> = hs
            .into_iter()
            .map(|h| h.join().expect("a writer panicked"))
            .collect();
        let first = runs.iter().map(|r| r.0).min().expect("writers");
        let last = runs.iter().map(|r| r.1).max().expect("writers");
        let lat: Vec<f64> = runs.into_iter().flat_map(|r| r.2).collect();
        let secs = (last - first).as_secs_f64().max(1e-9);
        ((lat.len() as f64 / secs) as u64, lat)
    });
    Sample::new()
        .with("rate", count as f64)
        .with("p50", quantile(&mut lat, 0.5))
        .with("p99", quantile(&mut lat, 0.99))
}

/// The ceiling of durable appends per second for `writers` threads that each block until
/// their record is durable, waiting as spindle-wal's writers do (on an event count: a short
/// adaptive spin, then the futex), on a disk with fsync rate `fsync` and bandwidth `bandwidth`
/// (bytes/s), where a writer runs again at the earliest `wake_ns` after the sync that
/// acknowledged it (the first of them back, [`wake_back`]). A writer has one record in flight;
/// it waits for a sync that began after it was appended (at least as long as a 64-byte sync,
/// plus its own record's transfer), then for its wake-up, before it appends the next. Every
/// writer's cycle is at least that long, however the log batches, as long as each writer
/// sleeps until another thread's sync wakes it.
fn blocking_rate(writers: usize, size: usize, fsync: f64, bandwidth: f64, wake_ns: f64) -> f64 {
    let transfer = (size + spindle_wal::format::FRAME) as f64 / bandwidth;
    writers as f64 / (1.0 / fsync + transfer + wake_ns * 1e-9)
}

/// How long `writers` threads blocked on one event count (as spindle-wal's writers wait for a
/// commit) take to run again after one wake-all: each round, every thread blocks, the round
/// sleeps `asleep` (a sync's time: long enough for idle CPUs to settle), stamps the time and
/// increments the count. Returns the median over rounds of when the first and the last of them
/// ran again (ns), for `span` and at least 6 rounds. After a sync, a log whose writers block
/// until their record is durable waits at least the first for any writer's next record, and a
/// log that puts every writer in every batch waits the last for its next batch.
fn wake_back(writers: usize, asleep: Duration, span: Duration) -> Sample {
    let count = spindle_sync::EventCount::new();
    let base = Instant::now();
    let stamp = AtomicU64::new(0);
    // Threads that read the count's version for the next round (and will wait on it), and
    // each round's latencies.
    let ready = AtomicU64::new(0);
    let woken = Mutex::new(Vec::with_capacity(writers));
    // Incremented by the last thread back each round, so that the round's driver sleeps
    // instead of taking CPU time from the threads it measures.
    let back = spindle_sync::EventCount::new();
    let rounds = AtomicU64::new(0);
    let (mut first, mut last) = (Vec::new(), Vec::new());
    std::thread::scope(|s| {
        for _ in 0..writers {
            s.spawn(|| loop {
                let v = count.value();
                ready.fetch_add(1, Relaxed);
                let _ = count.wait(v, None);
                let at = base.elapsed().as_nanos() as u64;
                let lat = at.saturating_sub(stamp.load(Acquire)) as f64;
                let mut w = woken.lock().unwrap_or_else(|e| e.into_inner());
                w.push(lat);
                let all = w.len() == writers;
                drop(w);
                if all {
                    back.increment();
                }
                if rounds.load(Relaxed) == u64::MAX {
                    return;
                }
            });
        }
        let t0 = Instant::now();
        let mut round = 0u64;
        loop {
            round += 1;
            let done = t0.elapsed() >= span && round > 5;
            // Every thread is about to wait (or waiting) on the version it read.
            while ready.load(Relaxed) < round * writers as u64 {
                std::thread::yield_now();
            }
            std::thread::sleep(asleep);
            if done {
                rounds.store(u64::MAX, Relaxed);
            }
            stamp.store(base.elapsed().as_nanos() as u64, Release);
            count.increment();
            loop {
                // Read before the test: the last thread back pushes, then increments, so a
                // version read before a test that finds the round incomplete does not include
                // that increment, and the wait returns once the round completes (or at once,
                // on a late increment from the round before, and the test runs again).
                let seen = back.value();
                let mut w = woken.lock().unwrap_or_else(|e| e.into_inner());
                if w.len() == writers {
                    let (lo, hi) = w
                        .iter()
                        .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    first.push(lo);
                    last.push(hi);
                    w.clear();
                    break;
                }
                drop(w);
                let _ = back.wait(seen, None);
            }
            if done {
                break;
            }
        }
    });
    Sample::new()
        .with("first", quantile(&mut first, 0.5))
        .with("last", quantile(&mut last, 0.5))
}

/// The disk's fsync rate and latency, as `pg_test_fsync` measures it: one thread writes 64
/// bytes at a time into a file written with zeros ahead and calls `fdatasync` after each, for
/// `span`.
fn fsync_rate(dir: &Path, span: Duration) -> Result<Sample, String> {
    use std::os::unix::fs::FileExt as _;
    let path = dir.join("fsync-rate");
    let f = std::fs::File::create(&path).map_err(|e| e.to_string())?;
    let room: u64 = 4 << 20;
    f.write_all_at(&vec![0u8; room as usize], 0)
        .and_then(|()| f.sync_all())
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let mut lat = Vec::new();
    while t0.elapsed() < span {
        let a = Instant::now();
        let at = (lat.len() as u64 * 64) % room;
        f.write_all_at(&[0x3C; 64], at)
            .and_then(|()| f.sync_data())
            .map_err(|e| e.to_string())?;
        lat.push(a.elapsed().as_nanos() as f64);
    }
    let rate = lat.len() as f64 / t0.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(Sample::new()
        .with("rate", rate)
        .with("p50", quantile(&mut lat, 0.5))
        .with("p99", quantile(&mut lat, 0.99)))
}

/// Sequential write bandwidth of the disk under `dir`: bytes per second of 1 MiB writes for
/// `span`, then one `fdatasync`.
fn bandwidth(dir: &Path, span: Duration) -> Result<f64, String> {
    let path = dir.join("bandwidth");
    let mut f = std::fs::File::create(&path).map_err(|e| e.to_string())?;
    let block = vec![0x5Au8; 1 << 20];
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < span || n < 4 {
        f.write_all(&block).map_err(|e| e.to_string())?;
        n += 1;
    }
    f.sync_data().map_err(|e| e.to_string())?;
    let secs = t0.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok((n << 20) as f64 / secs)
}

/// The scratch directory (removed when dropped) and whether its file system keeps data in
/// memory only.
struct Scratch {
    dir: PathBuf,
    memory: Option<&'static str>,
}

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let base = std::env::var_os("SPINDLE_LAB_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        Scratch::at(&base)
    }

    /// A scratch directory on /dev/shm if that is a tmpfs: where a sync costs nothing.
    fn free_syncs() -> Option<Scratch> {
        Scratch::at(Path::new("/dev/shm"))
            .ok()
            .filter(|s| s.memory.is_some())
    }

    fn at(base: &Path) -> Result<Scratch, String> {
        let dir = base.join(format!(".spindle-lab-wal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let memory = rustix::fs::statfs(&dir).ok().and_then(|s| match s.f_type {
            0x0102_1994 => Some("tmpfs"),
            0x8584_58f6 => Some("ramfs"),
            _ => None,
        });
        Ok(Scratch { dir, memory })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Experiment for WalLab {
    fn info(&self) -> Info {
        Info {
            name: "wal",
            title: "Write-ahead log: durable appends per second and ack latency, 1 to 64 writers",
            summary: "spindle-wal append_durable vs fdatasync per append, okaywal, SQLite (WAL, synchronous=FULL) and redb; 64 B and 4 KiB records; 1, 4, 16, 64 writers; against this disk's fsync rate and bandwidth; a three-node openraft cluster on spindle-wal vs an in-memory log with fdatasync per append",
            question: "How many durable appends per second do N writers get when one fdatasync serves a whole \
                       batch, against this disk's fsync rate and bandwidth and against the logs and stores a \
                       Rust program would otherwise use; how long does each writer wait for its ack; and \
                       how many writes per second does a three-node Raft cluster commit on it?",
            references: &[],
            quick_seconds: 28,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let scratch = Scratch::new()?;
        // The smoke profile only proves that every contestant runs (96 runs before its first
        // trial is kept, in the debug build too).
        let span = Duration::from_millis(match ctx.profile {
            Profile::Full => 100,
            Profile::Quick => 12,
            Profile::Smoke => 3,
        });
        ctx.status("opening the logs and stores");
        let stores: Vec<(Who, Store)> = CONTESTANTS
            .iter()
            .map(|&w| Ok((w, Store::open(w, &scratch.dir.join(w.id()))?)))
            .collect::<Result<_, String>>()?;
        // spindle-wal where syncs are free: what its writers get from the CPUs alone.
        let shm = scratch.memory.is_none().then(Scratch::free_syncs).flatten();
        let free = match &shm {
            Some(shm) => Some(Store::open(Who::Spindle, &shm.dir)?),
            None => None,
        };
        let mut plan = Plan::new();
        plan.param("directory", scratch.dir.display().to_string());
        plan.param(
            "run",
            format!(
                "each contestant appends for {} ms per trial",
                span.as_millis()
            ),
        );
        plan.param("bound", "min(0.9 × writers × F, 0.8 × B / record bytes): F the fsync rate (fdatasync per 64-byte append, one writer), B the sequential bandwidth; both measured in this run");
        if let Some(fs) = scratch.memory {
            plan.note(format!("THE DIRECTORY IS ON A {fs}: fsync costs nothing there, and these figures say nothing about a disk. Set SPINDLE_LAB_DIR to a directory on a disk."));
        }
        let (fsync, bw) = disk_sections(&mut plan, &scratch.dir, span);
        let wake = wake_section(&mut plan, &fsync, span);
        for (size, section, _) in SIZES {
            plan.section(
                Section::new(section, format!("{size}-byte records, durable appends"))
                    .baseline(format!("{section}-1-fsync"))
                    .metric(Metric::rate("rate", "durable appends per second").higher_is_better())
                    .metric(Metric::time("p50", "ack latency, median"))
                    .metric(Metric::time("p99", "ack latency, p99")),
            );
            for writers in WRITERS {
                for (who, store) in &stores {
                    plan.variant(
                        Variant::fixed(
                            section,
                            format!("{section}-{writers}-{}", who.id()),
                            format!("{}, {writers} writers", who.label()),
                            move || run(store, writers, size, span),
                        )
                        .threads(writers),
                    );
                }
                if let (Some(store), "b64") = (&free, section) {
                    plan.variant(
                        Variant::fixed(
                            section,
                            format!("{section}-{writers}-freesync"),
                            format!(
                                "spindle-wal on tmpfs (/dev/shm, syncs free), {writers} writers"
                            ),
                            move || run(store, writers, size, span),
                        )
                        .threads(writers),
                    );
                }
                if writers > 1 {
                    let k = WRITERS
                        .iter()
                        .position(|&w| w == writers)
                        .expect("a writer count");
                    let (f, b, w) = (fsync.clone(), bw.clone(), wake[k].clone());
                    plan.variant(Variant::fixed(
                        section,
                        format!("{section}-{writers}-blocking"),
                        format!("the ceiling for {writers} writers that block: {writers} / (sync + a record's transfer + first wake-up)"),
                        move || {
                            Sample::new().with(
                                "rate",
                                blocking_rate(writers, size, f.get(), b.get(), w.get()),
                            )
                        },
                    ));
                    let (f, b) = (fsync.clone(), bw.clone());
                    plan.variant(Variant::fixed(
                        section,
                        format!("{section}-{writers}-bound"),
                        format!("the bound for {writers} writers"),
                        move || {
                            let by_fsync = 0.9 * writers as f64 * f.get();
                            let by_bandwidth =
                                0.8 * b.get() / (size + spindle_wal::format::FRAME) as f64;
                            Sample::new().with("rate", by_fsync.min(by_bandwidth))
                        },
                    ));
                }
            }
        }
        let cpus = ctx.cores();
        ctx.status("starting the raft clusters");
        let raft_span = Duration::from_millis(match ctx.profile {
            Profile::Full => 400,
            _ => 80,
        });
        raft::plan(&mut plan, &scratch.dir, raft_span, cpus)?;
        claims(&mut plan);
        plan.finish(move |r| explain_bounds(r, cpus));
        ctx.measure(plan)
    }
}

/// A cell the experiment's variants share: one variant's last measurement, read by others.
type Shared = std::rc::Rc<std::cell::Cell<f64>>;

/// Sections `fsync` and `disk`: this disk's fsync rate and sequential bandwidth in `dir`, for
/// `span` each run. Returns the cells holding their last measurements (fsync per second,
/// bytes per second), which the bounds and the `blocking` rows read.
fn disk_sections(plan: &mut Plan<'_>, dir: &Path, span: Duration) -> (Shared, Shared) {
    let bw: Shared = std::rc::Rc::new(std::cell::Cell::new(f64::NAN));
    let fsync: Shared = std::rc::Rc::new(std::cell::Cell::new(f64::NAN));
    plan.section(
        Section::new(
            "fsync",
            "This disk's fsync rate: 64-byte writes into a file of zeros",
        )
        .metric(Metric::rate("rate", "fdatasync per second").higher_is_better())
        .metric(Metric::time("p50", "fdatasync latency, median"))
        .metric(Metric::time("p99", "fdatasync latency, p99")),
    );
    let (at, f) = (dir.to_path_buf(), fsync.clone());
    plan.variant(Variant::fixed(
        "fsync",
        "disk-fsync",
        "write 64 bytes + fdatasync, one thread",
        move || {
            let s = fsync_rate(&at, span).unwrap_or_else(|e| panic!("fsync rate: {e}"));
            f.set(s.value("rate").unwrap_or(f64::NAN));
            s
        },
    ));
    plan.section(
        Section::new("disk", "This disk's sequential write bandwidth")
            .metric(Metric::rate("bytes", "bytes per second, 1 MiB writes").higher_is_better()),
    );
    let (at, b) = (dir.to_path_buf(), bw.clone());
    plan.variant(Variant::fixed(
        "disk",
        "disk-bandwidth",
        "1 MiB writes, then fdatasync",
        move || {
            let v = bandwidth(&at, span).unwrap_or_else(|e| panic!("bandwidth: {e}"));
            b.set(v);
            Sample::new().with("bytes", v)
        },
    ));
    (fsync, bw)
}

/// Section `wake` ([`wake_back`] for each writer count above one, asleep for the time of a
/// sync measured by the `fsync` cell). Returns a cell per entry of [`WRITERS`] holding its last
/// first wake-up (ns; NaN for one writer), which the `blocking` rows read.
fn wake_section(plan: &mut Plan<'_>, fsync: &Shared, span: Duration) -> [Shared; WRITERS.len()] {
    plan.section(
        Section::new(
            "wake",
            "Waking N threads blocked on one event count (as writers wait for a commit), after a sync's time asleep",
        )
        .metric(Metric::time("first", "until the first runs again, median"))
        .metric(Metric::time("last", "until the last runs again, median")),
    );
    let wake = WRITERS.map(|_| std::rc::Rc::new(std::cell::Cell::new(f64::NAN)));
    for (writers, cell) in WRITERS.into_iter().zip(&wake).filter(|(w, _)| *w > 1) {
        let (f, cell) = (fsync.clone(), cell.clone());
        plan.variant(
            Variant::fixed(
                "wake",
                format!("wake-{writers}"),
                format!("{writers} threads, one increment"),
                move || {
                    // Asleep as long as a sync takes here (the fsync rate's last run).
                    let sync_ns = Some(1e9 / f.get())
                        .filter(|ns| ns.is_finite() && *ns > 0.0)
                        .unwrap_or(200e3);
                    let asleep = Duration::from_nanos(sync_ns as u64);
                    let s = wake_back(writers, asleep, span);
                    cell.set(s.value("first").unwrap_or(f64::NAN));
                    s
                },
            )
            .threads(writers),
        );
    }
    wake
}

/// Where an N-writer bound is not met, what the run says about why: N writers can share each
/// sync only once every one of them woke up and appended again, so a batch's cycle is a sync
/// plus that; the bound (0.9 × N × F) leaves a tenth of a sync for it. With syncs free (the
/// `freesync` variants, 64-byte records), what is left is the CPUs' cost of waking each writer
/// and appending again. The `wake` section and the `blocking` rows add what waking N sleeping
/// writers takes after a sync, and the ceiling that gives (see [`blocking_rate`]).
fn explain_bounds(r: &mut crate::results::ExperimentResult, cpus: usize) {
    let median = |r: &crate::results::ExperimentResult, id: &str, m: &str| {
        r.variant(id)
            .and_then(|(_, v)| v.metric(m))
            .map(|m| m.summary.median)
    };
    let Some(f) = median(r, "disk-fsync", "rate").filter(|f| f.is_finite() && *f > 0.0) else {
        return;
    };
    let bandwidth = median(r, "disk-bandwidth", "bytes").filter(|b| b.is_finite() && *b > 0.0);
    for (size, section, _) in SIZES {
        for writers in [4usize, 16, 64] {
            let measured =
                |id: String| median(r, &id, "rate").filter(|v| v.is_finite() && *v > 0.0);
            let Some(rate) = measured(format!("{section}-{writers}-spindle")) else {
                continue;
            };
            let free = measured(format!("{section}-{writers}-freesync"));
            let bound = measured(format!("{section}-{writers}-bound"));
            let ceiling = measured(format!("{section}-{writers}-blocking"));
            let wake = |m: &str| {
                median(r, &format!("wake-{writers}"), m).filter(|v| v.is_finite() && *v > 0.0)
            };
            let (first, last) = (wake("first"), wake("last"));
            let id = format!("wal-{section}-{writers}-writers");
            let Some(c) = r.claims.iter_mut().find(|c| c.id == id) else {
                continue;
            };
            if c.verdict == crate::results::Verdict::Holds {
                continue;
            }
            // Per batch of N records: the time beyond one sync.
            let n = writers as f64;
            let cycle_us = n / rate * 1e6;
            let sync_us = 1e6 / f;
            c.explanation.push_str(&format!(
                "; the {writers} writers got a record each durable every {cycle_us:.0} µs here, \
                 a sync takes {sync_us:.0} µs: {:.0} µs a round went to waking {writers} writers \
                 and appending again on {cpus} CPUs, where the bound leaves {:.0} µs",
                (cycle_us - sync_us).max(0.0),
                sync_us / 9.0
            ));
            if let (Some(first), Some(last), Some(ceiling), Some(bound)) =
                (first, last, ceiling, bound)
            {
                c.explanation.push_str(&format!(
                    "; {writers} threads blocked on an event count for a sync's time ran again \
                     {:.0} µs (the first) to {:.0} µs (the last) after one increment here \
                     (section wake): sleeping writers get at most {ceiling:.0}/s \
                     ({section}-{writers}-blocking), {:.2} × the bound{}; spindle-wal got {:.2} × \
                     that ceiling{}",
                    first / 1e3,
                    last / 1e3,
                    ceiling / bound,
                    // A margin of a tenth: the ceiling's own figures (a sync, a wake-up) vary
                    // by several per cent from trial to trial.
                    if ceiling < 0.9 * bound {
                        ": out of reach here for writers that sleep until another thread's sync \
                         wakes them"
                    } else if ceiling < bound {
                        ": below it by less than a tenth"
                    } else {
                        ""
                    },
                    rate / ceiling,
                    if rate > 1.1 * ceiling {
                        " (above it by more than a tenth: likely some writers found their record \
                         durable without sleeping)"
                    } else {
                        ""
                    }
                ));
                // Every writer in every batch: a sync of N records, then the last one back
                // (for 64-byte records, whose transfer is small beside a sync: 4-KiB batches
                // meet the disk's bandwidth, which the short bandwidth run measures roughly).
                if let (Some(b), 64) = (bandwidth, size) {
                    let all = n
                        / (1.0 / f
                            + n * (size + spindle_wal::format::FRAME) as f64 / b
                            + last * 1e-9);
                    c.explanation.push_str(&format!(
                        "; a log that puts all {writers} writers in every batch gets at most \
                         {all:.0}/s here ({:.2} × the bound)",
                        all / bound
                    ));
                }
            }
            if let (Some(free), Some(bound)) = (free, bound) {
                if free < bound {
                    c.explanation.push_str(&format!(
                        "; with syncs free (tmpfs) they got {free:.0} appends/s, {:.0} µs a \
                         round of CPU alone, so the bound ({bound:.0}/s) is above what these \
                         CPUs can do even with free syncs",
                        n / free * 1e6
                    ));
                }
            }
        }
    }
    // The ack p99 bounds: what the CPUs alone give, with syncs free.
    let Some(fp99) = median(r, "disk-fsync", "p99").filter(|v| v.is_finite() && *v > 0.0) else {
        return;
    };
    for writers in WRITERS {
        let Some(free) = median(r, &format!("b64-{writers}-freesync"), "p99") else {
            continue;
        };
        let id = format!("wal-ack-p99-{writers}");
        let Some(c) = r.claims.iter_mut().find(|c| c.id == id) else {
            continue;
        };
        let bound = 2.5 * fp99;
        let violated = c.verdict == crate::results::Verdict::Violated;
        if !free.is_finite() || !(violated || free > bound) {
            continue;
        }
        c.explanation.push_str(&format!(
            "; with syncs free (tmpfs) the p99 ack of {writers} writers is {:.0} µs here, {} the \
             bound (2.5 × this disk's fsync p99 = {:.0} µs){}",
            free / 1e3,
            if free > bound { "above" } else { "below" },
            bound / 1e3,
            if free > bound {
                ": waking the writers takes longer than the bound on these CPUs alone"
            } else {
                ""
            }
        ));
    }
}

fn claims(plan: &mut Plan<'_>) {
    plan.claim(
        Claim::guarantee(
            "wal-one-writer",
            "One writer gets at least 0.95 × this disk's fsync rate in durable 64-byte appends",
        )
        .ratio("b64-1-spindle", "disk-fsync")
        .metric("rate")
        .at_least(0.95),
    );
    for (_, section, named) in SIZES {
        for writers in [4, 16, 64] {
            plan.claim(
                Claim::guarantee(
                    Box::leak(format!("wal-{section}-{writers}-writers").into_boxed_str()),
                    format!("{writers} writers get at least min(0.9 × {writers} × F, 0.8 × bandwidth) durable {named} appends per second"),
                )
                .ratio(format!("{section}-{writers}-spindle"), format!("{section}-{writers}-bound"))
                .metric("rate")
                .at_least(1.0),
            );
        }
        for peer in CONTESTANTS.into_iter().filter(|w| *w != Who::Spindle) {
            plan.claim(
                Claim::guarantee(
                    Box::leak(format!("wal-{section}-16-vs-{}", peer.id()).into_boxed_str()),
                    format!(
                        "16 writers get more durable {} appends per second than with {}",
                        named,
                        peer.label()
                    ),
                )
                .ratio(
                    format!("{section}-16-spindle"),
                    format!("{section}-16-{}", peer.id()),
                )
                .metric("rate")
                .at_least(1.0),
            );
        }
    }
    for writers in WRITERS {
        plan.claim(
            Claim::guarantee(
                Box::leak(format!("wal-ack-p99-{writers}").into_boxed_str()),
                format!("With {writers} writers, the p99 ack latency of a 64-byte append is at most 2.5 × this disk's fsync p99"),
            )
            .ratio(format!("b64-{writers}-spindle"), "disk-fsync")
            .metric("p99")
            .at_most(2.5),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocking_ceiling_adds_a_sync_a_transfer_and_a_wake_up() {
        let frame = spindle_wal::format::FRAME as f64;
        // 1 000 syncs/s, 1 GB/s, 100 µs wake-up: each writer's cycle is 1 ms + (64 + frame)
        // ns + 100 µs.
        let r = blocking_rate(4, 64, 1e3, 1e9, 100e3);
        let cycle = 1e-3 + (64.0 + frame) * 1e-9 + 100e-6;
        assert!((r - 4.0 / cycle).abs() < 1e-6 * r, "{r}");
        // Free wake-ups and an endless bandwidth leave N × F.
        assert!((blocking_rate(16, 0, 1e3, f64::INFINITY, 0.0) - 16e3).abs() < 1e-6);
    }

    #[test]
    fn every_contestant_appends_durably() {
        let dir = std::env::temp_dir().join(format!("spindle-lab-wal-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for who in CONTESTANTS {
            let store = Store::open(who, &dir.join(who.id())).unwrap();
            let s = run(&store, 3, 100, Duration::from_millis(5));
            let (rate, p99) = (s.value("rate").unwrap(), s.value("p99").unwrap());
            assert!(rate > 0.0 && p99 > 0.0, "{who:?}: {rate} {p99}");
        }
        let w = wake_back(3, Duration::from_micros(50), Duration::from_millis(2));
        let (first, last) = (w.value("first").unwrap(), w.value("last").unwrap());
        assert!(
            first > 0.0 && first <= last,
            "first {first} ns, last {last} ns"
        );
        let f = fsync_rate(&dir, Duration::from_millis(5)).unwrap();
        assert!(f.value("rate").unwrap() > 0.0);
        assert!(bandwidth(&dir, Duration::from_millis(5)).unwrap() > 0.0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
