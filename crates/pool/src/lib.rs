//! A work-stealing fork/join thread pool whose joins cost a few nanoseconds when nobody steals,
//! whose idle workers sleep on futexes, and whose jobs can be sent to a chosen CPU.
//!
//! ```
//! fn fib(n: u64) -> u64 {
//!     if n < 2 {
//!         return n;
//!     }
//!     let (a, b) = spindle_pool::join(|| fib(n - 1), || fib(n - 2));
//!     a + b
//! }
//! assert_eq!(fib(20), 6765);
//!
//! let v: Vec<u64> = (1..=1000).collect();
//! let sum = spindle_pool::map_reduce(&v[..], || 0, |x| *x, |a, b| a + b);
//! assert_eq!(sum, 500_500);
//! ```
//!
//! # Design
//!
//! - **Joins stay local until somebody asks.** `join(a, b)` pushes `b` on the worker's own
//!   stack (plain memory, no atomics), runs `a`, pops `b` and calls it; deep in a join tree,
//!   most joins do not even push (see `registry`). An idle worker that
//!   finds nothing to steal raises a busy worker's `wanted` flag; that worker, at its next join
//!   (or between two blocks of a parallel loop), moves its *oldest* pending `b` — the largest
//!   piece of work it holds — to its work-stealing deque. This is receiver-initiated stealing
//!   (Acar, Charguéraud and Rainey's private deques); chili's heartbeats promote the same way,
//!   but on a timer. The one join that cannot wait to be asked is a tree's root whose `a` runs
//!   long without joining again (`join(long, long)`): a root hands `b` out at once, waking a
//!   sleeper, when the worker's last tree (or last join entered from outside) ran long. See
//!   `registry` for the protocol and why a promoted job's stack frame outlives every use.
//! - **Shared jobs** (spawns, promoted halves) go to per-worker Chase–Lev deques whose push is
//!   plain stores; from outside the pool, to a global injector.
//! - **Idle workers** spin briefly (asking for work; how long, each learns from whether its
//!   spins find work), then sleep on a futex each. A push wakes one sleeper, and only if one
//!   has announced itself: while nobody sleeps a push executes no `lock`ed instruction and no
//!   fence. The sleeper pays for that with a process-wide barrier
//!   ([`spindle_sync::fence::heavy`]) before its last look for work — except the last worker
//!   of the pool to go to sleep, which needs none (see `sleep`).
//! - **Parallel loops** ([`for_each`], [`map_reduce`]) over ranges and slices split lazily in
//!   the same way: a loop is one sequential piece until another worker asks.
//! - **Affinity**: a pool built with [`Builder::cpus`] or [`Builder::pinned`] pins its workers,
//!   and [`ThreadPool::fork_on`] / [`ThreadPool::spawn_on`] run a job on the worker of a
//!   chosen CPU (seed 003's `forkOn`).
//!
//! Panics in `join` halves, scopes, `install` and `fork_on` propagate to the caller, as in
//! rayon; a panic in a `'static` spawn goes to the builder's panic handler (by default a line
//! on stderr). The pool survives both.
//!
//! **Shutdown.** Dropping a [`ThreadPool`] lets its workers run every job already queued, each
//! exactly once, and then exit; [`ThreadPool::shutdown`] does the same and waits for them.

#![warn(missing_docs)]

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod deque;
mod iter;
mod job;
mod primitives;
mod registry;
mod sleep;

use std::any::Any;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub use iter::{Split, BLOCK_MAX, BLOCK_MIN};
pub use registry::Scope;

use registry::{current, in_worker_cold, on_worker, Registry, RegistryConfig};

/// Why a pool could not be built.
#[derive(Debug)]
pub struct BuildError(String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BuildError {}

/// No worker of this pool is pinned to the CPU asked for ([`ThreadPool::fork_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoWorkerOn(pub usize);

impl std::fmt::Display for NoWorkerOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no worker of this pool is pinned to CPU {} (build it with `cpus` or `pinned`)",
            self.0
        )
    }
}
impl std::error::Error for NoWorkerOn {}

type NameFn = Box<dyn FnMut(usize) -> String>;

/// Configures a [`ThreadPool`].
#[must_use]
pub struct Builder {
    threads: Option<usize>,
    name: Option<NameFn>,
    stack_size: Option<usize>,
    cpus: Option<Vec<usize>>,
    pinned: bool,
    spin: Option<Duration>,
    panic_handler: Option<registry::PanicHandler>,
    start_handler: Option<registry::IndexHandler>,
    exit_handler: Option<registry::IndexHandler>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// A pool of one worker per CPU this process may run on, unpinned.
    pub fn new() -> Builder {
        Builder {
            threads: None,
            name: None,
            stack_size: None,
            cpus: None,
            pinned: false,
            spin: None,
            panic_handler: None,
            start_handler: None,
            exit_handler: None,
        }
    }

    /// The number of workers (at least 1).
    pub fn threads(mut self, n: usize) -> Builder {
        self.threads = Some(n);
        self
    }

    /// Worker names (default `spindle-pool-{index}`).
    pub fn thread_name(mut self, f: impl FnMut(usize) -> String + 'static) -> Builder {
        self.name = Some(Box::new(f));
        self
    }

    /// Each worker's stack size, in bytes.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Pin worker `i` to `cpus[i % cpus.len()]`; without [`Builder::threads`], one worker per
    /// CPU listed.
    pub fn cpus(mut self, cpus: impl IntoIterator<Item = usize>) -> Builder {
        self.cpus = Some(cpus.into_iter().collect());
        self
    }

    /// Pin the workers one per CPU of this process's affinity set, in order.
    pub fn pinned(mut self) -> Builder {
        self.pinned = true;
        self
    }

    /// How long an idle worker looks for work before it sleeps (default: measured at build,
    /// see [`ThreadPool::spin`]).
    pub fn spin(mut self, d: Duration) -> Builder {
        self.spin = Some(d);
        self
    }

    /// Called with the payload of a panic in a `'static` spawn (default: a line on stderr).
    pub fn panic_handler(
        mut self,
        f: impl Fn(Box<dyn Any + Send>) + Send + Sync + 'static,
    ) -> Builder {
        self.panic_handler = Some(Box::new(f));
        self
    }

    /// Called on each worker, with its index, when it starts.
    pub fn start_handler(mut self, f: impl Fn(usize) + Send + Sync + 'static) -> Builder {
        self.start_handler = Some(Box::new(f));
        self
    }

    /// Called on each worker, with its index, when it exits (after its last look for work: a
    /// job it spawns may never run).
    pub fn exit_handler(mut self, f: impl Fn(usize) + Send + Sync + 'static) -> Builder {
        self.exit_handler = Some(Box::new(f));
        self
    }

    /// Start the workers.
    pub fn build(mut self) -> Result<ThreadPool, BuildError> {
        let allowed = allowed_cpus();
        let pin_to = match (&self.cpus, self.pinned) {
            (Some(c), _) if c.is_empty() => return Err(BuildError("`cpus` is empty".into())),
            (Some(c), _) => Some(c.clone()),
            (None, true) => Some(allowed.clone()),
            (None, false) => None,
        };
        if let Some(c) = &pin_to {
            if let Some(bad) = c.iter().find(|c| !allowed.contains(c)) {
                return Err(BuildError(format!(
                    "CPU {bad} is not in this process's affinity set {allowed:?}"
                )));
            }
        }
        let threads = self
            .threads
            .or(pin_to.as_ref().map(Vec::len))
            .unwrap_or(allowed.len().max(1));
        if threads == 0 {
            return Err(BuildError("a pool needs at least one thread".into()));
        }
        let cpus = (0..threads)
            .map(|i| pin_to.as_ref().map(|c| c[i % c.len()]))
            .collect();
        let registry = Arc::new(Registry::new(RegistryConfig {
            cpus,
            spin: self.spin.unwrap_or_else(measured_spin),
            long_tree_ticks: long_tree_ticks(),
            panic_handler: self.panic_handler.take(),
            start_handler: self.start_handler.take(),
            exit_handler: self.exit_handler.take(),
        }));
        for i in 0..threads {
            let name = match &mut self.name {
                Some(f) => f(i),
                None => format!("spindle-pool-{i}"),
            };
            let mut b = std::thread::Builder::new().name(name);
            if let Some(s) = self.stack_size {
                b = b.stack_size(s);
            }
            let r = registry.clone();
            if let Err(e) = b.spawn(move || registry::worker_main(r, i)) {
                // The workers already started exit once told to.
                registry.terminate();
                return Err(BuildError(format!("could not start worker {i}: {e}")));
            }
        }
        Ok(ThreadPool { registry })
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// How long idle workers spin before sleeping, from this machine's costs: twice the cost of
/// the barrier a worker issues before it sleeps (the part of a sleep and wake-up that is
/// ours), within [1 µs, 20 µs]. Spinning as long as the sleep would cost bounds the waste to
/// twice the optimum (the ski-rental argument).
/// [`registry::LONG_TREE`] in ticks of `registry::rdtsc`, from its rate measured once (over 200 µs) per
/// process: a tree's root reads the TSC, cheaper than the clock.
fn long_tree_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        let (t0, c0) = (Instant::now(), registry::rdtsc());
        while t0.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
        let per_ns = registry::rdtsc().wrapping_sub(c0) as f64 / t0.elapsed().as_nanos() as f64;
        // At least 1 MHz: the slowest counter `rdtsc` reads (AArch64's generic timer runs at
        // 1 MHz or more; the TSC at 0.1 GHz or more).
        (registry::LONG_TREE.as_nanos() as f64 * per_ns.max(1e-3)) as u64
    })
}

fn measured_spin() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| {
        spindle_sync::fence::heavy(); // the first call registers the process
        let mut t: Vec<Duration> = (0..5)
            .map(|_| {
                let t0 = Instant::now();
                spindle_sync::fence::heavy();
                t0.elapsed()
            })
            .collect();
        t.sort();
        (t[2] * 2).clamp(Duration::from_micros(1), Duration::from_micros(20))
    })
}

/// Scheduler events of a pool, counted since it started ([`ThreadPool::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Join halves moved from a worker's own stack to its deque because another worker asked.
    pub promotions: u64,
    /// Jobs taken from another worker's deque.
    pub steals: u64,
    /// Times a worker went to sleep (each after a spin that found nothing).
    pub sleeps: u64,
}

/// A pool of worker threads. Dropping it lets the workers finish every queued job, then exit.
pub struct ThreadPool {
    registry: Arc<Registry>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.registry.num_threads())
            .finish()
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.registry.terminate();
    }
}

impl ThreadPool {
    /// A pool of `threads` unpinned workers.
    pub fn new(threads: usize) -> Result<ThreadPool, BuildError> {
        Builder::new().threads(threads).build()
    }

    /// Configure a pool.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// The number of workers.
    pub fn current_num_threads(&self) -> usize {
        self.registry.num_threads()
    }

    /// How long idle workers of this pool look for work before they sleep.
    pub fn spin(&self) -> Duration {
        self.registry.spin_duration()
    }

    /// What the scheduler has done so far (diagnostics; counted on slow paths only).
    pub fn stats(&self) -> Stats {
        let sum = |f: fn(&registry::Counters) -> &std::sync::atomic::AtomicU64| {
            self.registry
                .workers
                .iter()
                .map(|w| f(&w.counters).load(std::sync::atomic::Ordering::Relaxed))
                .sum()
        };
        Stats {
            promotions: sum(|c| &c.promotions),
            steals: sum(|c| &c.steals),
            sleeps: sum(|c| &c.sleeps),
        }
    }

    /// The CPU each worker is pinned to (`None`: unpinned), by worker index.
    pub fn cpus(&self) -> Vec<Option<usize>> {
        self.registry.workers.iter().map(|w| w.cpu).collect()
    }

    fn on_own_worker(&self) -> bool {
        current().is_some_and(|w| Arc::ptr_eq(&w.registry, &self.registry))
    }

    /// Run `f` on a worker of this pool (here, if this thread is one) and return its result;
    /// the free functions ([`join`], [`scope`], …) inside `f` use this pool.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if self.on_own_worker() {
            f()
        } else {
            in_worker_cold(&self.registry, f)
        }
    }

    /// [`join`] on this pool.
    pub fn join<RA: Send, RB: Send>(
        &self,
        a: impl FnOnce() -> RA + Send,
        b: impl FnOnce() -> RB + Send,
    ) -> (RA, RB) {
        if self.on_own_worker() {
            join(a, b)
        } else {
            in_worker_cold(&self.registry, || join_entered(a, b))
        }
    }

    /// [`scope`] on this pool.
    pub fn scope<'scope, R: Send>(&self, f: impl FnOnce(&Scope<'scope>) -> R + Send) -> R {
        self.install(|| {
            let w = current().expect("install runs on a worker");
            registry::scope_on_worker(w, f)
        })
    }

    /// Run `f` on this pool some time, without waiting for it.
    pub fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        let job = registry::spawn_job(f);
        match current() {
            Some(w) if Arc::ptr_eq(&w.registry, &self.registry) => w.push(job),
            _ => self.registry.inject(job),
        }
    }

    /// Run `f` on the worker pinned to `cpu`, without waiting for it.
    pub fn spawn_on(
        &self,
        cpu: usize,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<(), NoWorkerOn> {
        let index = self.registry.worker_on(cpu).ok_or(NoWorkerOn(cpu))?;
        self.registry.post(index, registry::spawn_job(f));
        Ok(())
    }

    /// Run `f` on the worker pinned to `cpu` and return its result (seed 003's `forkOn`). A
    /// worker of this pool that calls it runs other jobs while it waits.
    pub fn fork_on<R: Send>(
        &self,
        cpu: usize,
        f: impl FnOnce() -> R + Send,
    ) -> Result<R, NoWorkerOn> {
        let index = self.registry.worker_on(cpu).ok_or(NoWorkerOn(cpu))?;
        match current() {
            Some(w) if Arc::ptr_eq(&w.registry, &self.registry) && w.index == index => Ok(f()),
            _ => Ok(on_worker(&self.registry, index, f)),
        }
    }

    /// [`for_each`] on this pool.
    pub fn for_each<I: Split>(&self, input: I, f: impl Fn(I::Item) + Sync + Send) {
        self.map_reduce(input, || (), f, |(), ()| ())
    }

    /// [`map_reduce`] on this pool.
    pub fn map_reduce<I: Split, R: Send>(
        &self,
        input: I,
        identity: impl Fn() -> R + Sync + Send,
        map: impl Fn(I::Item) -> R + Sync + Send,
        reduce: impl Fn(R, R) -> R + Sync + Send,
    ) -> R {
        let l = iter::Loop {
            identity,
            map,
            reduce,
        };
        self.install(|| l.run(input))
    }

    /// Tell the workers to stop once every queued job has run, and wait until they have.
    ///
    /// # Panics
    /// If called from one of this pool's own workers, which would wait for itself.
    pub fn shutdown(self) {
        assert!(
            !self.on_own_worker(),
            "ThreadPool::shutdown called from one of the pool's own workers: it would wait for itself"
        );
        let registry = self.registry.clone();
        drop(self);
        registry.wait_exited();
    }
}

/// The pool the free functions use outside any pool: one unpinned worker per CPU this process
/// may run on, started on first use.
///
/// # Panics
/// If its workers cannot be started (the system refuses new threads); build a pool of your own
/// with [`Builder::build`] to get that as an error instead.
pub fn global() -> &'static ThreadPool {
    static GLOBAL: OnceLock<ThreadPool> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        Builder::new()
            .build()
            .unwrap_or_else(|e| panic!("spindle-pool: cannot start the global pool: {e}"))
    })
}

/// Run `a` and `b`, potentially in parallel, and return both results. On a worker, `b` waits
/// on that worker's own stack and runs right after `a` unless an idle worker asked for work
/// meanwhile; elsewhere, both run on the [`global`] pool. If either panics, the panic is
/// resumed here once both have finished (`b` does not run if `a` panicked before anybody took
/// it).
#[inline]
pub fn join<RA: Send, RB: Send>(
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    match current() {
        Some(w) => w.join(a, b),
        None => global().install(|| join_entered(a, b)),
    }
}

/// A join entered from outside the pool (through `install`): its root hands its second half
/// out when the last join entered on this worker ran long, whatever trees ran in between
/// (see `WorkerThread::join_entered`).
fn join_entered<RA: Send, RB: Send>(
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    current()
        .expect("install runs on a worker")
        .join_entered(a, b)
}

/// Run `f` with a [`Scope`] whose spawned jobs may borrow from the caller; returns once every
/// one has finished. On the current pool, or the [`global`] one.
pub fn scope<'scope, R: Send>(f: impl FnOnce(&Scope<'scope>) -> R + Send) -> R {
    match current() {
        Some(w) => registry::scope_on_worker(w, f),
        None => global().scope(f),
    }
}

/// Run `f` some time on the current pool, or the [`global`] one, without waiting for it.
pub fn spawn(f: impl FnOnce() + Send + 'static) {
    match current() {
        Some(w) => w.push(registry::spawn_job(f)),
        None => global().spawn(f),
    }
}

/// The number of workers of the current pool, or of the [`global`] one.
pub fn current_num_threads() -> usize {
    match current() {
        Some(w) => w.registry.num_threads(),
        None => global().current_num_threads(),
    }
}

/// The index of the current worker in its pool, if this thread is one.
pub fn current_thread_index() -> Option<usize> {
    current().map(|w| w.index)
}

/// Call `f` on every item of `input` (a range or a slice), in parallel, on the current pool or
/// the [`global`] one; the loop splits only when an idle worker asks for work (see [`Split`]).
pub fn for_each<I: Split>(input: I, f: impl Fn(I::Item) + Sync + Send) {
    map_reduce(input, || (), f, |(), ()| ())
}

/// `reduce` over `map` of every item of `input`, in parallel: each piece starts from
/// `identity()`, folds its items in order, and pieces are reduced left to right (so `reduce`
/// needs to be associative, not commutative).
pub fn map_reduce<I: Split, R: Send>(
    input: I,
    identity: impl Fn() -> R + Sync + Send,
    map: impl Fn(I::Item) -> R + Sync + Send,
    reduce: impl Fn(R, R) -> R + Sync + Send,
) -> R {
    let l = iter::Loop {
        identity,
        map,
        reduce,
    };
    match current() {
        Some(_) => l.run(input),
        None => global().install(|| l.run(input)),
    }
}
