//! `pool`: Spindle's work-stealing fork/join pool (`spindle-pool`) beside rayon, chili,
//! fork_union and tokio's multi-thread runtime, on what a pool is judged by: what a join costs when it is
//! not worth stealing, how fast tasks can be spawned, what a pool burns while it has almost
//! nothing to do, and how fast it wakes when work arrives (chili's README, 2024: a 1 023-node
//! tree sum takes 1.8 µs sequentially, 3.4 µs with chili, 51.1 µs with rayon; rayon #642,
//! 2019: one empty spawn per millisecond kept 200 % of a CPU busy).
//!
//! - **fib**: fib(25) with a join in every call that recurses (121 392 joins), ns per join,
//!   against the same recursion with both halves called in turn.
//! - **scaling**: the same fib on Spindle's and rayon's pools of 1, 2, 4, … and all workers.
//! - **tree**: chili's benchmark, the sum of a balanced binary tree of 1 023 nodes with a join
//!   per node, ns per sum (the tree is built once).
//! - **spawn**: tasks that each increment a counter, spawned from inside the pool (a scope;
//!   tokio: a task that spawns them and waits for the last), ns per task.
//! - **sum**: the sum of a `Vec<u64>` (10^8 elements in the full profile): Spindle's
//!   `map_reduce` over the slice against rayon's `par_iter().sum()`, fork_union's
//!   `for_slices` (one slice per thread, a partial sum each) and a plain loop.
//! - **idle**: CPU time of all the pool's threads while a thread outside it spawns one tiny
//!   task per millisecond, in % of one CPU. The threads are those that appeared in
//!   `/proc/self/task` when the pool was built; their CPU time is the first field of
//!   `/proc/self/task/<tid>/schedstat` (exact for a sleeping thread, up to a tick stale for a
//!   running one), read when the window opens and when it closes. The window opens after one
//!   task and 20 ms of rest, so it starts with the pool asleep.
//! - **wake**: ns from just before a spawn call (TSC) to the task running, the spawn coming
//!   300 µs after the previous one, with the spawning thread asleep meanwhile; the floor is a
//!   thread woken from a bare futex wait the same way.
//!
//! Every pool has one thread per CPU the lab may use (chili counts the calling thread as one)
//! and is built once per visit, before any trial: building is never timed. Fork/join work
//! enters its pool once per run (`install`; chili: one scope on the calling thread) and is
//! timed inside it, so that a run measures joins, not the trip into the pool.
//!
//! fork_union (C++ behind a Rust API) is OpenMP-style: one function broadcast to every thread,
//! no nested join and no spawn, so it takes part only in the sum, idle and wake sections. Its
//! workers spin between broadcasts; the lab measures that (its idle and wake figures), and puts
//! them into fork_union's power-saving mode after every use (see [`ForkUnion`]), so that they do
//! not take a CPU from the other contestants' trials.
//!
//! Contestants are named by [`Who`]; each section has a table of who takes part and with
//! which label, and one function that runs any of them.

use std::hint::black_box;
use std::num::NonZero;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use spindle_sync::futex;

use crate::kit::{median, time, CachePadded, Span};
use crate::references::{CHILI_TREE, RAYON_IDLE};
use crate::results::{ExperimentResult, Profile};
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};
use crate::sys::rdtsc;

pub struct Pool;

/// fib's argument, and the joins and the answer of one call.
const FIB: u32 = 25;
const FIB_JOINS: u64 = fib_value(FIB + 1) - 1;
const FIB_VALUE: u64 = fib_value(FIB);

/// Levels of the tree: 2^10 − 1 = 1 023 nodes, as in chili's benchmark.
const TREE_LEVELS: u32 = 10;

/// Rest before an idle window, and the gap before each wake.
const SETTLE: Duration = Duration::from_millis(20);
const WAKE_GAP: Duration = Duration::from_micros(300);

/// A wait for a task longer than this is a pool that lost it: the run panics and says so.
const LOST: Duration = Duration::from_secs(10);

/// fib(n), by iteration. fib(n) with a join in every call with n ≥ 2 joins fib(n + 1) − 1
/// times: J(n) = J(n − 1) + J(n − 2) + 1 with J(0) = J(1) = 0.
const fn fib_value(n: u32) -> u64 {
    let (mut a, mut b, mut i) = (0u64, 1u64, 0);
    while i < n {
        (a, b) = (b, a + b);
        i += 1;
    }
    a
}

/// A contestant: one of the pools, or none (the sequential baseline).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Spindle,
    Rayon,
    Chili,
    Tokio,
    ForkUnion,
    Sequential,
}

impl Who {
    /// Variant ids are `<section>-<id>`.
    fn id(self) -> &'static str {
        match self {
            Who::Spindle => "spindle",
            Who::Rayon => "rayon",
            Who::Chili => "chili",
            Who::Tokio => "tokio",
            Who::ForkUnion => "fork-union",
            Who::Sequential => "seq",
        }
    }

    fn threads(self, pool: usize) -> usize {
        if self == Who::Sequential {
            1
        } else {
            pool
        }
    }
}

/// The pools under test, built once per visit.
struct Pools {
    spindle: spindle_pool::ThreadPool,
    rayon: rayon::ThreadPool,
    chili: chili::ThreadPool,
    tokio: tokio::runtime::Runtime,
    fork_union: ForkUnion,
    /// The threads Spindle's, rayon's, tokio's and fork_union's pools started (in that order),
    /// or why they could not be told apart from the process's other threads.
    tids: Result<[Vec<u32>; 4], String>,
}

impl Pools {
    fn new(threads: usize) -> Result<Pools, String> {
        let (spindle, a) = started(|| {
            spindle_pool::ThreadPool::builder()
                .threads(threads)
                .build()
                .map_err(|e| format!("spindle-pool: {e}"))
        })?;
        let (rayon, b) = started(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .map_err(|e| format!("rayon: {e}"))
        })?;
        let (tokio, c) = started(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .build()
                .map_err(|e| format!("tokio: {e}"))
        })?;
        let (fork_union, d) = started(|| ForkUnion::new(threads))?;
        fork_union.rest();
        let chili = chili::ThreadPool::with_config(chili::Config {
            thread_count: NonZero::new(threads),
            ..Default::default()
        });
        let tids = a.and_then(|a| Ok([a, b?, c?, d?]));
        Ok(Pools {
            spindle,
            rayon,
            chili,
            tokio,
            fork_union,
            tids,
        })
    }

    /// The threads of `who`'s pool (the idle section runs only when they are known).
    fn tids(&self, who: Who) -> &[u32] {
        let i = match who {
            Who::Spindle => 0,
            Who::Rayon => 1,
            Who::Tokio => 2,
            Who::ForkUnion => 3,
            _ => unreachable!("{who:?} is not in the idle section"),
        };
        self.tids.as_ref().map_or(&[], |t| &t[i])
    }
}

/// A pool that runs a `'static` task spawned by a thread outside it: how the idle and wake
/// sections drive Spindle's, rayon's and tokio's.
trait Submit {
    fn submit(&self, task: impl FnOnce() + Send + 'static);
}

impl Submit for spindle_pool::ThreadPool {
    fn submit(&self, task: impl FnOnce() + Send + 'static) {
        spindle_pool::ThreadPool::spawn(self, task);
    }
}

impl Submit for rayon::ThreadPool {
    fn submit(&self, task: impl FnOnce() + Send + 'static) {
        rayon::ThreadPool::spawn(self, task);
    }
}

impl Submit for tokio::runtime::Runtime {
    fn submit(&self, task: impl FnOnce() + Send + 'static) {
        drop(tokio::runtime::Runtime::spawn(self, async move { task() }));
    }
}

/// fork_union's pool (OpenMP-style: the caller broadcasts one function to every thread and
/// waits for all of them; no nested fork/join, no spawn). Its workers spin (x86 `pause`)
/// between broadcasts until [`ForkUnion::rest`] puts them into its power-saving mode, where
/// each sleeps [`FORK_UNION_NAP`] at a time and looks again; the next broadcast makes them
/// spin again. The lab rests it after every use, so that its spinning workers never take a
/// CPU from another contestant's trial.
struct ForkUnion(std::sync::Mutex<fork_union::ThreadPool>);

/// How long a resting fork_union worker sleeps before it looks for work again.
const FORK_UNION_NAP: Duration = Duration::from_micros(500);

impl ForkUnion {
    /// `threads` in all, the calling thread one of them (fork_union's default).
    fn new(threads: usize) -> Result<ForkUnion, String> {
        let pool = fork_union::ThreadPool::try_named_spawn("fu-worker", threads)
            .map_err(|e| format!("fork_union: {e}"))?;
        Ok(ForkUnion(std::sync::Mutex::new(pool)))
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, fork_union::ThreadPool> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts the workers into fork_union's power-saving mode.
    fn rest(&self) {
        self.pool().sleep(FORK_UNION_NAP.as_micros() as usize);
    }

    /// One empty broadcast: brings resting workers back to spinning before a timed run (as
    /// `install` brings a sleeping worker of the other pools into a run).
    fn rouse(&self) {
        drop(self.pool().for_threads(|_, _| {}));
    }
}

impl Submit for ForkUnion {
    /// Runs `task` on the pool's last thread (a worker, unless the pool is the caller alone)
    /// and returns when every thread is done: a broadcast is fork_union's only way in.
    fn submit(&self, task: impl FnOnce() + Send + 'static) {
        let mut pool = self.pool();
        let last = pool.threads() - 1;
        let task = std::sync::Mutex::new(Some(task));
        drop(pool.for_threads(|t, _| {
            if t == last {
                if let Some(task) = task.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    task();
                }
            }
        }));
    }
}

/// Builds a pool, runs one task on it, and returns it with the threads that appeared meanwhile
/// (or why they could not be found, or their CPU time not read).
fn started<P: Submit>(
    build: impl FnOnce() -> Result<P, String>,
) -> Result<(P, Result<Vec<u32>, String>), String> {
    let before = threads_now();
    let pool = build()?;
    let ran = Arc::new(AtomicU64::new(0));
    pool.submit(count(&ran));
    wait_for(&ran, 1, "a first task");
    let tids = before.and_then(|before| {
        let new: Vec<u32> = threads_now()?
            .into_iter()
            .filter(|t| !before.contains(t))
            .collect();
        let first = new
            .first()
            .ok_or("no thread appeared when the pool was built")?;
        cpu_ns(*first)?;
        Ok(new)
    });
    Ok((pool, tids))
}

/// The threads of this process.
fn threads_now() -> Result<Vec<u32>, String> {
    let dir = std::fs::read_dir("/proc/self/task")
        .map_err(|e| format!("cannot list /proc/self/task: {e}"))?;
    Ok(dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// Nanoseconds thread `tid` of this process has spent on a CPU.
fn cpu_ns(tid: u32) -> Result<u64, String> {
    let path = format!("/proc/self/task/{tid}/schedstat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| format!("{path} holds no run time: {text:?}"))
}

/// A task that adds one to `ran`.
fn count(ran: &Arc<AtomicU64>) -> impl FnOnce() + Send + 'static {
    let ran = ran.clone();
    move || {
        ran.fetch_add(1, Release);
    }
}

/// Sleeps in short steps until `ran` reaches `k`.
fn wait_for(ran: &AtomicU64, k: u64, what: &str) {
    let start = Instant::now();
    while ran.load(Acquire) < k {
        assert!(start.elapsed() < LOST, "{what} did not run within {LOST:?}");
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// Calls `f` `n` times and times the calls; panics if one gave another answer than `expect`.
fn repeat(n: u64, expect: u64, mut f: impl FnMut() -> u64) -> Span {
    let mut wrong = 0u64;
    let span = time(|| {
        for _ in 0..n {
            wrong += u64::from(black_box(f()) != expect);
        }
    });
    assert_eq!(wrong, 0, "{wrong} of {n} calls gave a wrong answer");
    span
}

/// `n` with its digits in groups of three ("121 392").
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A per-op sample (metrics `time` and `ticks`) from a span that covered `ops` operations.
fn per(span: Span, ops: u64) -> Sample {
    let ops = ops.max(1) as f64;
    Sample::new()
        .with("time", span.ns / ops)
        .with("ticks", span.ticks / ops)
        .took(span.as_duration())
}

// --- fork/join kernels -----------------------------------------------------------------------

/// A join as the kernels call it inside a pool: Spindle's, rayon's, or none.
trait Join {
    fn join<RA: Send, RB: Send>(
        a: impl FnOnce() -> RA + Send,
        b: impl FnOnce() -> RB + Send,
    ) -> (RA, RB);
}

struct SpindleJoin;
impl Join for SpindleJoin {
    #[inline]
    fn join<RA: Send, RB: Send>(
        a: impl FnOnce() -> RA + Send,
        b: impl FnOnce() -> RB + Send,
    ) -> (RA, RB) {
        spindle_pool::join(a, b)
    }
}

struct RayonJoin;
impl Join for RayonJoin {
    #[inline]
    fn join<RA: Send, RB: Send>(
        a: impl FnOnce() -> RA + Send,
        b: impl FnOnce() -> RB + Send,
    ) -> (RA, RB) {
        rayon::join(a, b)
    }
}

/// Both halves in turn on the calling thread: the sequential baseline.
struct NoJoin;
impl Join for NoJoin {
    #[inline]
    fn join<RA: Send, RB: Send>(
        a: impl FnOnce() -> RA + Send,
        b: impl FnOnce() -> RB + Send,
    ) -> (RA, RB) {
        (a(), b())
    }
}

/// Fork/join work as the contestants run it: with a [`Join`], or with chili's scope.
trait Kernel: Sync {
    /// The answer, checked on every call.
    fn expect(&self) -> u64;
    fn run<J: Join>(&self) -> u64;
    fn run_chili(&self, s: &mut chili::Scope<'_>) -> u64;
}

/// fib(n), joining the two recursive calls.
struct Fib(u32);

fn fib<J: Join>(n: u32) -> u64 {
    if n < 2 {
        return u64::from(n);
    }
    let (a, b) = J::join(|| fib::<J>(n - 1), || fib::<J>(n - 2));
    a + b
}

fn fib_chili(n: u32, s: &mut chili::Scope<'_>) -> u64 {
    if n < 2 {
        return u64::from(n);
    }
    let (a, b) = s.join(|s| fib_chili(n - 1, s), |s| fib_chili(n - 2, s));
    a + b
}

impl Kernel for Fib {
    fn expect(&self) -> u64 {
        fib_value(self.0)
    }
    fn run<J: Join>(&self) -> u64 {
        fib::<J>(black_box(self.0))
    }
    fn run_chili(&self, s: &mut chili::Scope<'_>) -> u64 {
        fib_chili(black_box(self.0), s)
    }
}

/// A node of a binary tree whose every value is 1.
struct Node {
    val: u64,
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

impl Node {
    /// A balanced tree of `levels` levels (2^levels − 1 nodes).
    fn balanced(levels: u32) -> Node {
        let child = || (levels > 1).then(|| Box::new(Node::balanced(levels - 1)));
        Node {
            val: 1,
            left: child(),
            right: child(),
        }
    }
}

fn tree_sum<J: Join>(node: &Node) -> u64 {
    let (l, r) = J::join(
        || node.left.as_deref().map_or(0, tree_sum::<J>),
        || node.right.as_deref().map_or(0, tree_sum::<J>),
    );
    node.val + l + r
}

fn tree_sum_chili(node: &Node, s: &mut chili::Scope<'_>) -> u64 {
    let (l, r) = s.join(
        |s| node.left.as_deref().map_or(0, |n| tree_sum_chili(n, s)),
        |s| node.right.as_deref().map_or(0, |n| tree_sum_chili(n, s)),
    );
    node.val + l + r
}

/// The sum of a tree of `levels` levels.
struct Tree {
    root: Node,
    levels: u32,
}

impl Kernel for Tree {
    fn expect(&self) -> u64 {
        (1 << self.levels) - 1
    }
    fn run<J: Join>(&self) -> u64 {
        tree_sum::<J>(black_box(&self.root))
    }
    fn run_chili(&self, s: &mut chili::Scope<'_>) -> u64 {
        tree_sum_chili(black_box(&self.root), s)
    }
}

/// `n` calls of `k` by `who`, entering the pool once: the span of the calls alone.
fn joins<K: Kernel>(p: &Pools, who: Who, k: &K, n: u64) -> Span {
    let expect = k.expect();
    match who {
        Who::Spindle => p
            .spindle
            .install(|| repeat(n, expect, || k.run::<SpindleJoin>())),
        Who::Rayon => p
            .rayon
            .install(|| repeat(n, expect, || k.run::<RayonJoin>())),
        Who::Chili => {
            let mut s = p.chili.scope();
            repeat(n, expect, || k.run_chili(&mut s))
        }
        Who::Sequential => repeat(n, expect, || k.run::<NoJoin>()),
        Who::Tokio | Who::ForkUnion => unreachable!("{who:?} has no nested join"),
    }
}

/// Who takes part in the fib and tree sections.
const JOINERS: [(Who, &str); 4] = [
    (Who::Spindle, "Spindle ThreadPool::install + join"),
    (Who::Rayon, "rayon ThreadPool::install + rayon::join"),
    (Who::Chili, "chili Scope::join (heartbeat every 100 µs)"),
    (Who::Sequential, "sequential: both halves in turn, no join"),
];

/// fib(FIB), ns per join.
fn fib_section<'a>(plan: &mut Plan<'a>, p: &'a Pools, fib: &'a Fib, threads: usize) {
    plan.section(
        Section::per_op("fib", format!("fib({FIB}), a join in every call"), "join")
            .baseline("fib-seq"),
    );
    for (who, label) in JOINERS {
        let run = move |n| per(joins(p, who, fib, n), n * FIB_JOINS);
        plan.variant(
            Variant::calibrated("fib", format!("fib-{}", who.id()), label, run)
                .threads(who.threads(threads)),
        );
    }
}

/// The tree sum, ns per sum; chili's figures as reference ratios to the sequential sum.
/// Pools of 1, 2, 4, … workers below the full count, for the scaling section (the full-size
/// pools are in [`Pools`]); built once per visit, like those.
type Smaller = Vec<(usize, spindle_pool::ThreadPool, rayon::ThreadPool)>;

fn smaller_pools(threads: usize) -> Result<Smaller, String> {
    std::iter::successors(Some(1usize), |k| Some(k * 2))
        .take_while(|&k| k < threads)
        .map(|k| {
            let spindle =
                spindle_pool::ThreadPool::new(k).map_err(|e| format!("spindle-pool: {e}"))?;
            let rayon = rayon::ThreadPoolBuilder::new()
                .num_threads(k)
                .build()
                .map_err(|e| format!("rayon: {e}"))?;
            Ok((k, spindle, rayon))
        })
        .collect()
}

/// fib(n) on pools of 1, 2, 4, … and all workers: how the join scales with the workers.
fn scaling_section<'a>(
    plan: &mut Plan<'a>,
    p: &'a Pools,
    smaller: &'a Smaller,
    fib: &'a Fib,
    threads: usize,
) {
    plan.section(
        Section::per_op(
            "scaling",
            format!("fib({FIB}) on 1 to {threads} workers"),
            "join",
        )
        .baseline("scale-spindle-1"),
    );
    let sizes = smaller
        .iter()
        .map(|(k, s, r)| (*k, s, r))
        .chain(std::iter::once((threads, &p.spindle, &p.rayon)));
    for (k, spindle, rayon) in sizes {
        let expect = fib.expect();
        plan.variant(
            Variant::calibrated(
                "scaling",
                format!("scale-spindle-{k}"),
                format!("Spindle, {k} worker(s)"),
                move |n| {
                    let span = spindle.install(|| repeat(n, expect, || fib.run::<SpindleJoin>()));
                    per(span, n * FIB_JOINS)
                },
            )
            .threads(k),
        );
        plan.variant(
            Variant::calibrated(
                "scaling",
                format!("scale-rayon-{k}"),
                format!("rayon, {k} worker(s)"),
                move |n| {
                    let span = rayon.install(|| repeat(n, expect, || fib.run::<RayonJoin>()));
                    per(span, n * FIB_JOINS)
                },
            )
            .threads(k),
        );
    }
}

fn tree_section<'a>(plan: &mut Plan<'a>, p: &'a Pools, tree: &'a Tree, threads: usize) {
    plan.section(
        Section::per_op(
            "tree",
            "Sum of a 1 023-node binary tree, a join per node",
            "tree sum",
        )
        .baseline("tree-seq"),
    );
    for (who, label) in JOINERS {
        let reference = match who {
            Who::Rayon => Some(51.1 / 1.8),
            Who::Chili => Some(3.4 / 1.8),
            Who::Sequential => Some(1.0),
            _ => None,
        };
        let run = move |n| joins(p, who, tree, n);
        plan.variant(
            Variant::per_op("tree", format!("tree-{}", who.id()), label, run)
                .threads(who.threads(threads))
                .reference(reference),
        );
    }
}

// --- spawn throughput ------------------------------------------------------------------------

/// The tokio variant's counter and its "all ran" signal: its tasks are `'static`, and a run
/// has the runtime to itself.
static TOKIO_RAN: AtomicU64 = AtomicU64::new(0);
static TOKIO_ALL_RAN: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// `n` tasks that each add one to a counter, spawned from inside `who`'s pool; the span from
/// the first spawn to the last task done.
fn spawns(p: &Pools, who: Who, n: u64) -> Span {
    let ran = CachePadded(AtomicU64::new(0));
    let c: &AtomicU64 = &ran;
    let span = match who {
        Who::Spindle => p.spindle.install(|| {
            time(|| {
                spindle_pool::scope(|s| {
                    for _ in 0..n {
                        s.spawn(move |_| {
                            c.fetch_add(1, Relaxed);
                        });
                    }
                })
            })
        }),
        Who::Rayon => p.rayon.install(|| {
            time(|| {
                rayon::scope(|s| {
                    for _ in 0..n {
                        s.spawn(move |_| {
                            c.fetch_add(1, Relaxed);
                        });
                    }
                })
            })
        }),
        Who::Tokio => return spawns_tokio(&p.tokio, n),
        _ => unreachable!("{who:?} does not spawn"),
    };
    assert_eq!(ran.load(Relaxed), n, "{who:?}: tasks lost");
    span
}

/// [`spawns`] on tokio: a task on a worker spawns the `n` tasks, and the last one to run
/// wakes it.
fn spawns_tokio(rt: &tokio::runtime::Runtime, n: u64) -> Span {
    TOKIO_RAN.store(0, Relaxed);
    let spawner = rt.spawn(async move {
        let (t0, c0) = (Instant::now(), rdtsc());
        for _ in 0..n {
            drop(tokio::spawn(async move {
                if TOKIO_RAN.fetch_add(1, AcqRel) + 1 == n {
                    TOKIO_ALL_RAN.notify_one();
                }
            }));
        }
        TOKIO_ALL_RAN.notified().await;
        Span {
            ns: t0.elapsed().as_nanos() as f64,
            ticks: rdtsc().wrapping_sub(c0) as f64,
        }
    });
    let span = rt.block_on(spawner).expect("the spawning task");
    assert_eq!(TOKIO_RAN.load(Relaxed), n, "tokio: tasks lost");
    span
}

fn spawn_section<'a>(plan: &mut Plan<'a>, p: &'a Pools, threads: usize, full: bool) {
    plan.section(
        Section::per_op(
            "spawn",
            "Spawn tiny tasks from inside the pool (each adds one to a counter)",
            "task",
        )
        .baseline("spawn-rayon"),
    );
    for (who, label) in [
        (Who::Spindle, "Spindle scope + Scope::spawn"),
        (Who::Rayon, "rayon scope + Scope::spawn"),
        (
            Who::Tokio,
            "tokio multi-thread runtime: tokio::spawn from a task",
        ),
    ] {
        let mut v = Variant::per_op("spawn", format!("spawn-{}", who.id()), label, move |n| {
            spawns(p, who, n)
        })
        .threads(threads)
        .max_work(1_000_000);
        if full {
            v = v.work(1_000_000);
        }
        plan.variant(v);
    }
}

// --- parallel sum ----------------------------------------------------------------------------

/// `n` sums of `v` by `who` (inside the pool), checked against `expect`.
fn sums(p: &Pools, who: Who, v: &[u64], expect: u64, n: u64) -> Span {
    match who {
        Who::Spindle => p.spindle.install(|| {
            repeat(n, expect, || {
                spindle_pool::map_reduce(black_box(v), || 0, |x: &u64| *x, |a, b| a + b)
            })
        }),
        Who::Rayon => p
            .rayon
            .install(|| repeat(n, expect, || black_box(v).par_iter().sum())),
        Who::ForkUnion => {
            p.fork_union.rouse();
            let span = {
                let mut pool = p.fork_union.pool();
                let partial: Vec<CachePadded<AtomicU64>> = (0..pool.threads())
                    .map(|_| CachePadded(AtomicU64::new(0)))
                    .collect();
                repeat(n, expect, || {
                    let v = black_box(v);
                    drop(pool.for_slices(v.len(), |prong, count| {
                        let part = &v[prong.task_index..prong.task_index + count];
                        partial[prong.thread_index].fetch_add(part.iter().sum(), Relaxed);
                    }));
                    // The broadcast's end (every thread's release decrement, acquired by
                    // the caller's wait) orders the workers' adds before these loads.
                    partial.iter().map(|c| c.swap(0, Relaxed)).sum()
                })
            };
            p.fork_union.rest();
            span
        }
        Who::Sequential => repeat(n, expect, || black_box(v).iter().sum()),
        _ => unreachable!("{who:?} has no parallel sum here"),
    }
}

fn sum_section<'a>(plan: &mut Plan<'a>, p: &'a Pools, v: &'a [u64], threads: usize) {
    plan.section(
        Section::per_op(
            "sum",
            format!("Sum of a Vec<u64> of {} elements", grouped(v.len() as u64)),
            "element",
        )
        .baseline("sum-seq"),
    );
    let len = v.len() as u64;
    let expect = len * len.saturating_sub(1) / 2;
    for (who, label) in [
        (Who::Spindle, "Spindle map_reduce over the slice"),
        (Who::Rayon, "rayon par_iter().sum()"),
        (
            Who::ForkUnion,
            "fork_union for_slices, a partial sum per thread",
        ),
        (Who::Sequential, "sequential iter().sum()"),
    ] {
        let run = move |n| per(sums(p, who, v, expect, n), n * len);
        plan.variant(
            Variant::calibrated("sum", format!("sum-{}", who.id()), label, run)
                .threads(who.threads(threads)),
        );
    }
}

// --- idle and wake ---------------------------------------------------------------------------

/// CPU time of the threads `tids` of `pool`, in % of one CPU, while this thread spawns one
/// task per millisecond into it for `ms` ms, after one task and [`SETTLE`] of rest.
fn idle<P: Submit>(pool: &P, tids: &[u32], ms: u64) -> Sample {
    // A thread that has exited since the pool was built was not one of its workers (a pool's
    // workers live as long as it does): another thread of the process started and ended at
    // the same time (a test running beside this one), and is left out.
    let cpu = || -> u64 { tids.iter().filter_map(|&t| cpu_ns(t).ok()).sum() };
    let ran = Arc::new(AtomicU64::new(0));
    pool.submit(count(&ran));
    wait_for(&ran, 1, "the task before the idle window");
    std::thread::sleep(SETTLE);
    let (c0, t0) = (cpu(), Instant::now());
    let sleep_until = |due: Instant| {
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    };
    for i in 0..ms {
        sleep_until(t0 + Duration::from_millis(i));
        pool.submit(count(&ran));
    }
    sleep_until(t0 + Duration::from_millis(ms));
    let (c1, t1) = (cpu(), Instant::now());
    wait_for(&ran, ms + 1, "a task of the idle window");
    let wall = (t1 - t0).as_nanos().max(1) as f64;
    Sample::new().with("cpu", 100.0 * c1.saturating_sub(c0) as f64 / wall)
}

fn idle_of(p: &Pools, who: Who, ms: u64) -> Sample {
    let tids = p.tids(who);
    match who {
        Who::Spindle => idle(&p.spindle, tids, ms),
        Who::Rayon => idle(&p.rayon, tids, ms),
        Who::Tokio => idle(&p.tokio, tids, ms),
        Who::ForkUnion => {
            let cpu = idle(&p.fork_union, tids, ms);
            p.fork_union.rest();
            cpu
        }
        _ => unreachable!("{who:?} is not in the idle section"),
    }
}

/// Takes a wake's latency (TSC ticks, never 0) from `slot` once it is there.
fn taken(slot: &AtomicU64) -> u64 {
    let start = Instant::now();
    loop {
        let t = slot.swap(0, Acquire);
        if t != 0 {
            return t;
        }
        assert!(
            start.elapsed() < LOST,
            "a woken task did not run within {LOST:?}"
        );
        std::thread::yield_now();
    }
}

/// `n` wakes of an idle pool: each a task spawned [`WAKE_GAP`] after the previous one, this
/// thread asleep in between; ns from just before the spawn call to the task running.
fn wakes<P: Submit>(pool: &P, n: u64, ticks_per_ns: f64) -> Vec<f64> {
    let slot = Arc::new(AtomicU64::new(0));
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..=n {
        std::thread::sleep(WAKE_GAP);
        if i > 0 {
            out.push(taken(&slot) as f64 / ticks_per_ns);
        }
        if i < n {
            let slot = slot.clone();
            let t0 = rdtsc();
            pool.submit(move || slot.store(rdtsc().wrapping_sub(t0).max(1), Release));
        }
    }
    out
}

/// The floor of [`wakes`]: a thread asleep in a bare futex wait, woken the same way.
fn wakes_futex(n: u64, ticks_per_ns: f64) -> Vec<f64> {
    let word = CachePadded(AtomicU32::new(0));
    let stamp = CachePadded(AtomicU64::new(0));
    let slot = CachePadded(AtomicU64::new(0));
    let ready = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            ready.store(true, Release);
            for i in 1..=n as u32 {
                loop {
                    let w = word.load(Acquire);
                    if w == i {
                        break;
                    }
                    futex::wait(&word, w, None);
                }
                slot.store(rdtsc().wrapping_sub(stamp.load(Relaxed)).max(1), Release);
            }
        });
        while !ready.load(Acquire) {
            std::thread::yield_now();
        }
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..=n {
            std::thread::sleep(WAKE_GAP);
            if i > 0 {
                out.push(taken(&slot) as f64 / ticks_per_ns);
            }
            if i < n {
                stamp.store(rdtsc(), Relaxed);
                word.store(i as u32 + 1, Release);
                futex::wake(&word, 1);
            }
        }
        out
    })
}

fn wakes_of(p: &Pools, who: Who, n: u64, ticks_per_ns: f64) -> Vec<f64> {
    match who {
        Who::Spindle => wakes(&p.spindle, n, ticks_per_ns),
        Who::Rayon => wakes(&p.rayon, n, ticks_per_ns),
        Who::Tokio => wakes(&p.tokio, n, ticks_per_ns),
        Who::ForkUnion => {
            // Out of its power-saving mode first (the lab rests it between runs): the section
            // measures its workers as they are while in use, spinning.
            p.fork_union.rouse();
            let l = wakes(&p.fork_union, n, ticks_per_ns);
            p.fork_union.rest();
            l
        }
        _ => unreachable!("{who:?} is not in the wake section"),
    }
}

/// Who takes part in the idle and wake sections.
const SPAWNERS: [(Who, &str); 4] = [
    (Who::Spindle, "Spindle ThreadPool::spawn"),
    (Who::Rayon, "rayon ThreadPool::spawn"),
    (Who::Tokio, "tokio multi-thread runtime, Runtime::spawn"),
    (
        Who::ForkUnion,
        "fork_union for_threads (its workers spin between broadcasts)",
    ),
];

fn idle_section<'a>(plan: &mut Plan<'a>, p: &'a Pools, ms: u64, threads: usize) {
    plan.section(
        Section::new(
            "idle",
            "An idle pool given one tiny task per millisecond from outside",
        )
        .baseline("idle-bound")
        .metric(Metric::ratio(
            "cpu",
            "pool threads' CPU time (% of one CPU)",
        )),
    );
    plan.variant(Variant::fixed(
        "idle",
        "idle-bound",
        "1 % of one CPU (the guarantee's bound)",
        || Sample::new().with("cpu", 1.0),
    ));
    for (who, label) in SPAWNERS {
        // rayon #642: 200 % of a CPU at one spawn per ms (rayon's global pool, 8 threads).
        let reference = (who == Who::Rayon).then_some(200.0);
        plan.variant(
            Variant::fixed("idle", format!("idle-{}", who.id()), label, move || {
                idle_of(p, who, ms)
            })
            .threads(threads)
            .reference(reference),
        );
    }
}

fn wake_section<'a>(plan: &mut Plan<'a>, p: &'a Pools, threads: usize, ticks_per_ns: f64) {
    plan.section(
        Section::new("wake", "Wake an idle pool: spawn to the task running")
            .baseline("wake-futex")
            .metric(Metric::time(
                "latency",
                "spawn call to task running, median of a run",
            )),
    );
    let latency = |mut l: Vec<f64>| {
        Sample::new()
            .with("latency", median(&mut l))
            .pool("latency", l)
    };
    plan.variant(
        Variant::calibrated(
            "wake",
            "wake-futex",
            "a thread in a bare futex wait (floor)",
            move |n| latency(wakes_futex(n, ticks_per_ns)),
        )
        .threads(2)
        .max_work(10_000),
    );
    for (who, label) in SPAWNERS {
        plan.variant(
            Variant::calibrated("wake", format!("wake-{}", who.id()), label, move |n| {
                latency(wakes_of(p, who, n, ticks_per_ns))
            })
            .threads(threads)
            .max_work(10_000),
        );
    }
}

// --- claims ----------------------------------------------------------------------------------

/// Whether 0.2 × rayon's tree sum is within reach on this machine, from this run's medians: a
/// note when it is, a word beside the claim's verdict when it is not. The bound asks for a
/// sum faster than the sequential one whenever rayon costs less than 5 × sequential; a faster
/// sum needs a second worker, and a sleeping worker needs a futex wake-up to start. Where the
/// whole sequential sum takes less time than one wake-up (the `wake` section's floor, same
/// run), no sleeping worker can take part before the sum is over: only workers that never
/// sleep between sums could, which is what the idle guarantee rules out.
fn tree_reach(r: &mut ExperimentResult) {
    let median = |id: &str, metric: &str| {
        r.variant(id)
            .and_then(|(_, v)| v.metric(metric))
            .map(|m| m.summary.median)
    };
    let (Some(seq), Some(rayon), Some(wake)) = (
        median("tree-seq", "time"),
        median("tree-rayon", "time"),
        median("wake-futex", "latency"),
    ) else {
        return;
    };
    if !(seq > 0.0 && rayon > 0.0 && wake > 0.0) {
        return;
    }
    let bound = 0.2 * rayon;
    if bound >= seq || seq >= wake {
        r.notes.push(format!("In this run 0.2 × rayon's tree sum is {} ({:.2} × the sequential sum, which takes {:.2} × a futex wake-up): the bound is within reach here.", fmt_ns(bound), bound / seq, seq / wake));
    } else if let Some(c) = r.claims.iter_mut().find(|c| c.id == "pool-tree-vs-rayon") {
        c.explanation.push_str(&format!("; out of reach on this machine: rayon's tree sum costs only {:.2} × the sequential sum here (chili's README: 28 ×), so the bound asks for a sum {:.2} × faster than sequential, while the whole sequential sum ({}) is over before one futex wake-up of a sleeping worker ({}, the `wake` floor) — only workers that spin between sums could help, which the idle guarantee forbids (`pool-tree-vs-chili` judges the join's own cost)", rayon / seq, seq / bound, fmt_ns(seq), fmt_ns(wake)));
    }
}

/// A duration given in ns, in µs.
fn fmt_ns(ns: f64) -> String {
    format!("{:.2} µs", ns / 1000.0)
}

fn claims(plan: &mut Plan<'_>, idle: bool) {
    let g = Claim::guarantee;
    plan.claim(
        g(
            "pool-tree-vs-chili",
            "A Spindle tree sum (1 023 nodes, a join per node) costs at most 1.0 × chili's",
        )
        .ratio("tree-spindle", "tree-chili")
        .at_most(1.0),
    );
    plan.claim(
        g(
            "pool-tree-vs-rayon",
            "A Spindle tree sum (1 023 nodes, a join per node) costs at most 0.2 × rayon's",
        )
        .ratio("tree-spindle", "tree-rayon")
        .at_most(0.2),
    );
    plan.claim(
        Claim::guarantee(
            "pool-fib-vs-rayon",
            format!("A Spindle join in fib({FIB}) costs at most 0.5 × a rayon join"),
        )
        .ratio("fib-spindle", "fib-rayon")
        .at_most(0.5),
    );
    if idle {
        plan.claim(
            g(
                "pool-idle",
                "An idle Spindle pool given one task per ms burns at most 1 % of one CPU",
            )
            .ratio("idle-spindle", "idle-bound")
            .at_most(1.0),
        );
    }
    plan.claim(
        g(
            "pool-wake",
            "A task spawned into an idle Spindle pool runs within 1.2 × the bare futex wake floor",
        )
        .ratio("wake-spindle", "wake-futex")
        .at_most(1.2),
    );
    for (id, peer, name) in [
        (
            "pool-spawn-vs-tokio",
            "tokio",
            "tokio's multi-thread runtime",
        ),
        ("pool-spawn-vs-rayon", "rayon", "rayon"),
    ] {
        plan.claim(
            Claim::guarantee(
                id,
                format!(
                    "Spawning a tiny task from inside a Spindle pool costs at most 1.0 × {name}'s"
                ),
            )
            .ratio("spawn-spindle", format!("spawn-{peer}"))
            .at_most(1.0),
        );
    }
    plan.claim(
        Claim::reproduction(
            "pool-tree-rayon-overhead",
            "rayon's tree sum (1 023 nodes) costs at least 5 × the sequential sum",
            CHILI_TREE,
            "51.1 µs against 1.8 µs sequential (28 ×)",
        )
        .ratio("tree-rayon", "tree-seq")
        .at_least(5.0),
    );
    plan.claim(
        Claim::reproduction(
            "pool-tree-chili-overhead",
            "chili's tree sum (1 023 nodes) costs at most 3 × the sequential sum",
            CHILI_TREE,
            "3.4 µs against 1.8 µs sequential (1.9 ×)",
        )
        .ratio("tree-chili", "tree-seq")
        .at_most(3.0),
    );
}

impl Experiment for Pool {
    fn info(&self) -> Info {
        Info {
            name: "pool",
            title: "Fork/join pools: join overhead, spawning, a parallel sum, idle CPU, wake-up",
            summary: "Spindle's work-stealing pool vs rayon, chili, fork_union and tokio: fib and 1 023-node tree joins, spawns, a parallel sum, idle CPU, wake from idle",
            question: "What does a join cost when nobody needs to steal it (fib, chili's tree sum), how fast can tasks be \
                       spawned, how does a parallel sum scale, how much CPU does a pool burn given one task per \
                       millisecond, and how fast does a task spawned into an idle pool start?",
            references: &[CHILI_TREE, RAYON_IDLE],
            quick_seconds: 20,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let threads = ctx.cores();
        let full = ctx.profile == Profile::Full;
        let len: u64 = match ctx.profile {
            Profile::Full => 100_000_000,
            Profile::Quick => 10_000_000,
            Profile::Smoke => 1_000_000,
        };
        let idle_ms = if full { 50 } else { 20 };
        ctx.status("building the pools and the inputs");
        let pools = Pools::new(threads)?;
        let smaller = smaller_pools(threads)?;
        let fib = Fib(FIB);
        let tree = Tree {
            root: Node::balanced(TREE_LEVELS),
            levels: TREE_LEVELS,
        };
        let v: Vec<u64> = (0..len).collect();
        let p = &pools;
        let mut plan = Plan::new();
        plan.param(
            "threads per pool",
            format!("{threads}, one per CPU the lab may use (chili: the calling thread, {} worker(s) and its heartbeat thread); every pool built once per visit, never timed", threads - 1),
        );
        plan.param(
            "fib",
            format!(
                "fib({FIB}) = {}: {} joins",
                grouped(FIB_VALUE),
                grouped(FIB_JOINS)
            ),
        );
        plan.param(
            "tree",
            format!("{} nodes, every value 1", grouped((1 << TREE_LEVELS) - 1)),
        );
        plan.param(
            "tasks per spawn run",
            if full {
                "1 000 000".to_string()
            } else {
                "calibrated to the run time (the full profile uses 1 000 000)".into()
            },
        );
        plan.param(
            "sum",
            format!("{} u64s ({} MB)", grouped(len), len * 8 / 1_000_000),
        );
        plan.param(
            "idle window",
            format!(
                "one task per ms for {idle_ms} ms, after one task and {} ms of rest",
                SETTLE.as_millis()
            ),
        );
        plan.param(
            "wake",
            format!(
                "a task spawned {} µs after the previous one, the spawning thread asleep",
                WAKE_GAP.as_micros()
            ),
        );
        fib_section(&mut plan, p, &fib, threads);
        scaling_section(&mut plan, p, &smaller, &fib, threads);
        tree_section(&mut plan, p, &tree, threads);
        spawn_section(&mut plan, p, threads, full);
        sum_section(&mut plan, p, &v, threads);
        match &pools.tids {
            Ok(t) => {
                plan.param(
                    "idle: threads watched",
                    format!(
                        "Spindle {}, rayon {}, tokio {}, fork_union {}",
                        t[0].len(),
                        t[1].len(),
                        t[2].len(),
                        t[3].len()
                    ),
                );
                idle_section(&mut plan, p, idle_ms, threads);
            }
            Err(e) => {
                plan.note(format!("The idle section is left out: {e}."));
            }
        }
        wake_section(&mut plan, p, threads, ctx.machine.tsc_ghz);
        claims(&mut plan, pools.tids.is_ok());
        plan.finish(tree_reach);
        plan.note("Fork/join runs enter the pool once (install; chili: one scope) and time the calls inside it. chili's README timed rayon::join called from outside rayon's pool, once per sum, so its rayon figure includes entering the pool.");
        plan.note("chili's reference ratios come from an 8-core Ryzen 7 4800HS with each library's default pool; rayon #642's 200 % (the idle section's reference) from rayon's global pool of 8 threads on 4 cores, before rayon's 2020 rewrite of how idle workers sleep.");
        ctx.measure(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A join that counts its calls (both halves in turn).
    struct Counting;
    static JOINED: AtomicU64 = AtomicU64::new(0);
    impl Join for Counting {
        fn join<RA: Send, RB: Send>(
            a: impl FnOnce() -> RA + Send,
            b: impl FnOnce() -> RB + Send,
        ) -> (RA, RB) {
            JOINED.fetch_add(1, Relaxed);
            (a(), b())
        }
    }

    #[test]
    fn the_kernels_join_as_often_as_the_units_say() {
        JOINED.store(0, Relaxed);
        assert_eq!(Fib(FIB).run::<Counting>(), FIB_VALUE);
        assert_eq!(JOINED.swap(0, Relaxed), FIB_JOINS);
        let tree = Tree {
            root: Node::balanced(TREE_LEVELS),
            levels: TREE_LEVELS,
        };
        assert_eq!(tree.run::<Counting>(), 1023);
        assert_eq!(JOINED.load(Relaxed), 1023, "one join per node");
    }

    #[test]
    fn every_contestant_runs_and_answers_right() {
        let p = Pools::new(2).expect("the pools");
        let tree = Tree {
            root: Node::balanced(4),
            levels: 4,
        };
        for (who, _) in JOINERS {
            // `repeat` panics on a wrong answer.
            joins(&p, who, &Fib(12), 3);
            joins(&p, who, &tree, 3);
        }
        let v: Vec<u64> = (0..1000).collect();
        for who in [Who::Spindle, Who::Rayon, Who::ForkUnion, Who::Sequential] {
            sums(&p, who, &v, 499_500, 2);
        }
        for (who, _) in SPAWNERS {
            if who != Who::ForkUnion {
                spawns(&p, who, 1000);
            }
            assert_eq!(wakes_of(&p, who, 3, 1.0).len(), 3);
        }
        assert_eq!(wakes_futex(3, 1.0).len(), 3);
        if p.tids.is_ok() {
            for (who, _) in SPAWNERS {
                let cpu = idle_of(&p, who, 2).value("cpu").expect("a value");
                assert!(cpu.is_finite() && cpu >= 0.0, "{who:?}: {cpu}");
            }
        }
    }

    #[test]
    fn numbers_are_grouped_by_three() {
        assert_eq!(
            (fib_value(12), FIB_VALUE, FIB_JOINS),
            (144, 75_025, 121_392)
        );
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1023), "1 023");
        assert_eq!(grouped(121_392), "121 392");
        assert_eq!(grouped(100_000_000), "100 000 000");
    }
}
