//! The pool's shared state (`Registry`), its workers, and the scheduling: where jobs go, how a
//! worker finds one, how a join stays local until somebody asks for work.
//!
//! # Where jobs live
//!
//! - **The local stack** of each worker (owner-only memory, no atomics): the second half of
//!   joins in progress on that worker, oldest first. A join pushes its half here and pops it
//!   back when its first half returns, then calls it like a function: when nobody asks for
//!   work, a join is a few plain stores and loads. Only the three outermost joins and one in
//!   64 deeper ones register their half; the others call both halves in a row (a counter
//!   decrement), which is what promotion needs: it only ever takes the oldest entries.
//! - **The deque** of each worker (see `deque`): jobs other workers may take — spawns, and join
//!   halves *promoted* from the local stack.
//! - **The injector**: jobs from outside the pool (`install`, spawns from other threads), and
//!   pushes that found a deque full.
//! - **The mailbox** of each worker: `fork_on`/`spawn_on` jobs that only that worker runs.
//!
//! # Lazy promotion (receiver-initiated stealing)
//!
//! An idle worker that finds no job anywhere raises the `wanted` flag of another worker (one
//! per spin round, round robin) and keeps looking. A worker checks its own flag at every join
//! (a load of its own cache line) and in the blocks of the parallel loops; when it is raised,
//! it lowers it and moves its *oldest* local join half — the largest piece of work it holds —
//! to its deque, where the thief steals it, and wakes a sleeper if one has announced itself.
//! The promoted half is then an ordinary shared job: the join that owns it waits for its latch
//! after its first half, running other jobs meanwhile (its own deque first, so it takes its
//! half back itself if nobody stole it). Idle workers stop asking when they go to sleep; a
//! join tree that has run about 4096 joins (a parallel loop that has run 5 µs) wakes one
//! sleeper so that there is somebody to ask. A shorter tree (chili's 1 023-node sum) or a task
//! that never joins wakes nobody: it would be over before the wake-up paid for itself.
//!
//! Asking needs a join to answer at, and `join(a, b)` whose `a` runs long without joining
//! again has none until `a` returns. So the *root* of a tree (a join at depth 0 in the job the
//! worker runs) promotes its own second half at once, waking a sleeper, when the worker's last
//! tree ran for `LONG_TREE` (50 µs) or more — or, for a join entered from outside the pool
//! (`ThreadPool::join`, or `join` called outside every pool), when the last join entered on
//! that worker did. After short trees a root costs two TSC reads and no wake-up; the first
//! long tree of few joins after short ones can run its root halves in turn, which the next
//! tree's root makes up for.
//!
//! Why a promoted half's stack frame outlives every use: the join does not return (nor unwind
//! past its frame) before the half's latch is set, and the latch is the last thing the job's
//! runner touches (see `job::Latch::set`).
//!
//! # Finding work
//!
//! Own mailbox, own deque (LIFO), the injector, then the other deques from a random one (FIFO
//! steals). A worker that stole from a deque that still holds jobs wakes another sleeper, so
//! that a burst of spawns spreads to every sleeper one wake at a time. With nothing found, a
//! worker spins (asking for work as above), then sleeps (see `sleep`). Each worker learns how
//! long to spin: twice as long after a spin that found work or a sleep that a wake-up ended
//! soon (within the longest spin), half as long after a spin that found nothing, and not at
//! all once that falls below a quarter of the pool's measured spin or after a sleep longer
//! than the longest spin; at most 32 times it. The workers of a pool that gets a task now and
//! then go straight back to sleep after each, and those of a busy one bridge the gaps between
//! jobs without sleeping. One exception: a worker that a push or a helper call woke (its bit
//! claimed) and that then finds nothing to run was woken to ask for work (a join tree or a
//! loop that has run for a while wakes a helper, and its work is on no queue until somebody
//! asks), so it spins and asks for at least the pool's measured spin, whatever it learnt.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::io::Write;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::deque::{Deque, Steal};
use crate::job::{HeapJob, JobRef, Latch, Owner, StackJob};
use crate::primitives::{spin_loop, CachePadded};
use crate::sleep::Sleep;

pub(crate) type PanicHandler = Box<dyn Fn(Box<dyn Any + Send>) + Send + Sync>;
pub(crate) type IndexHandler = Box<dyn Fn(usize) + Send + Sync>;

/// What other threads see of a worker.
pub(crate) struct WorkerShared {
    pub(crate) deque: Deque,
    wanted: CachePadded<AtomicBool>,
    mailbox: CachePadded<(Mutex<VecDeque<JobRef>>, AtomicUsize)>,
    pub(crate) cpu: Option<usize>,
    pub(crate) counters: CachePadded<Counters>,
}

pub(crate) struct Registry {
    pub(crate) workers: Box<[WorkerShared]>,
    injector: CachePadded<(Mutex<VecDeque<JobRef>>, AtomicUsize)>,
    pub(crate) sleep: Sleep,
    terminating: AtomicBool,
    /// How long an idle worker looks for work before it sleeps, at least and at most.
    spin: Duration,
    max_spin: Duration,
    long_tree_ticks: u64,
    panic_handler: Option<PanicHandler>,
    start_handler: Option<IndexHandler>,
    exit_handler: Option<IndexHandler>,
    /// Workers still running, and a word the last one to exit sets (for `shutdown`).
    live: AtomicUsize,
    exited: Latch,
}

/// Events counted on the slow paths only (see [`crate::Stats`]), each by one worker on its own
/// cache line: a load and a store, no `lock`ed instruction.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) promotions: AtomicU64,
    pub(crate) steals: AtomicU64,
    pub(crate) sleeps: AtomicU64,
}

impl Counters {
    /// Count one event; only the worker that owns the counters calls it.
    fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Relaxed) + 1, Relaxed);
    }
}

pub(crate) struct RegistryConfig {
    pub(crate) cpus: Vec<Option<usize>>,
    pub(crate) spin: Duration,
    /// [`LONG_TREE`] in TSC ticks.
    pub(crate) long_tree_ticks: u64,
    pub(crate) panic_handler: Option<PanicHandler>,
    pub(crate) start_handler: Option<IndexHandler>,
    pub(crate) exit_handler: Option<IndexHandler>,
}

impl Registry {
    pub(crate) fn new(config: RegistryConfig) -> Registry {
        let n = config.cpus.len();
        Registry {
            workers: config
                .cpus
                .iter()
                .map(|&cpu| WorkerShared {
                    deque: Deque::new(),
                    wanted: CachePadded(AtomicBool::new(false)),
                    mailbox: CachePadded((Mutex::new(VecDeque::new()), AtomicUsize::new(0))),
                    cpu,
                    counters: CachePadded(Counters::default()),
                })
                .collect(),
            injector: CachePadded((Mutex::new(VecDeque::new()), AtomicUsize::new(0))),
            sleep: Sleep::new(n),
            terminating: AtomicBool::new(false),
            spin: config.spin,
            max_spin: config.spin * MAX_SPIN_FACTOR,
            long_tree_ticks: config.long_tree_ticks,
            panic_handler: config.panic_handler,
            start_handler: config.start_handler,
            exit_handler: config.exit_handler,
            live: AtomicUsize::new(n),
            exited: Latch::for_thread(),
        }
    }

    pub(crate) fn num_threads(&self) -> usize {
        self.workers.len()
    }

    pub(crate) fn spin_duration(&self) -> Duration {
        self.spin
    }

    /// A job from outside the pool (or from a full deque): any worker may run it.
    pub(crate) fn inject(&self, job: JobRef) {
        let (queue, len) = &*self.injector;
        {
            let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
            q.push_back(job);
            len.fetch_add(1, SeqCst);
        }
        self.sleep.notify_one();
    }

    /// A job only worker `index` runs.
    pub(crate) fn post(&self, index: usize, job: JobRef) {
        let (queue, len) = &*self.workers[index].mailbox;
        {
            let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
            q.push_back(job);
            len.fetch_add(1, SeqCst);
        }
        self.sleep.notify_worker(index);
    }

    fn take_injected(&self) -> Option<JobRef> {
        let (queue, len) = &*self.injector;
        if len.load(Relaxed) == 0 {
            return None;
        }
        let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
        let job = q.pop_front()?;
        let left = len.fetch_sub(1, SeqCst) - 1;
        drop(q);
        if left > 0 {
            self.sleep.notify_one();
        }
        Some(job)
    }

    /// Whether worker `index` has anything to run, as far as a racy look can tell.
    fn has_work(&self, index: usize) -> bool {
        self.injector.1.load(Relaxed) > 0
            || self.workers[index].mailbox.1.load(Relaxed) > 0
            || self.workers.iter().any(|w| w.deque.len() > 0)
    }

    /// The worker pinned to `cpu`, if any.
    pub(crate) fn worker_on(&self, cpu: usize) -> Option<usize> {
        self.workers.iter().position(|w| w.cpu == Some(cpu))
    }

    /// Stop the workers once every queued job has run (they keep running jobs until then).
    pub(crate) fn terminate(&self) {
        self.terminating.store(true, SeqCst);
        self.sleep.notify_all();
    }

    /// Block until every worker has exited (after `terminate`).
    pub(crate) fn wait_exited(&self) {
        self.exited.wait_blocking();
    }

    /// A spawned job panicked: the builder's handler, or a message on stderr.
    pub(crate) fn handle_panic(&self, payload: Box<dyn Any + Send>) {
        // Neither a panicking handler, nor a payload whose drop panics, nor a closed stderr
        // may take the worker down with it.
        let _ = catch_unwind(AssertUnwindSafe(|| match &self.panic_handler {
            Some(h) => h(payload),
            None => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| payload.downcast_ref::<String>().map(|s| s.as_str()))
                    .unwrap_or("(a non-string payload)");
                let _ = writeln!(
                    std::io::stderr(),
                    "spindle-pool: a spawned task panicked: {msg}"
                );
            }
        }));
    }
}

/// One entry of a worker's local stack: a join half, and where its join learns that it was
/// promoted.
#[derive(Clone, Copy)]
struct LocalJob {
    data: *const (),
    exec: unsafe fn(*const ()),
    promoted: *const Cell<bool>,
}

/// A worker, on its own thread's stack.
pub(crate) struct WorkerThread {
    pub(crate) index: usize,
    pub(crate) registry: Arc<Registry>,
    shared: *const WorkerShared,
    /// Live entries are `jobs[front..]`; promotions advance `front`.
    local: UnsafeCell<(Vec<LocalJob>, usize)>,
    /// Joins left to run as plain calls before the next registered one.
    skip: Cell<u32>,
    /// Registered joins since the local stack was last empty (`None` once this join tree has
    /// woken a helper).
    registered: Cell<Option<u32>>,
    /// How long this worker spins before it sleeps: doubled (to at least `Registry::spin`)
    /// when a spin finds work or a sleep ends soon, halved when a spin finds nothing (and
    /// zero below a quarter of `Registry::spin`); at most `Registry::max_spin`.
    spin: Cell<Duration>,
    /// A waker claimed this worker in its last sleep, and it has not found work since.
    called: Cell<bool>,
    /// Registered joins this worker is inside, in the job it runs now (0 when a job starts;
    /// a join that unwinds leaves it as it was, which only makes later roots look inner
    /// until the next job starts).
    depth: Cell<u32>,
    /// Whether this worker's last join tree ran for [`LONG_TREE`] or more.
    long_trees: Cell<bool>,
    /// Whether the last join entered from outside the pool on this worker ran that long.
    long_entered: Cell<bool>,
    rng: Cell<u64>,
}

/// A worker whose spins keep finding work spins up to this many times the minimum.
const MAX_SPIN_FACTOR: u32 = 32;

/// Joins whose local stack holds fewer entries than this register their second half; deeper
/// ones register one in [`REGISTER_EVERY`] and otherwise call both halves in a row (chili
/// skips its heartbeat check the same way). Promotion takes the oldest entries, which are
/// always registered, so the deep joins only need an occasional entry to keep answering.
const SHALLOW: usize = 3;
const REGISTER_EVERY: u32 = 64;
/// A join tree that has run this many joins wakes a sleeping worker to ask it for work: a
/// short tree (chili's 1 023-node sum) finishes before a wake-up would pay for itself.
const WAKE_AFTER: u32 = 4096;
/// A join tree that ran this long makes the next tree's root join hand its second half out at
/// once, waking a sleeper: a tree like `join(long, long)` has no later join at which a helper
/// could ask for work. Shorter trees (chili's 1 023-node sum: a few µs) would only pay the
/// wake-up, which costs about as much as they do.
pub(crate) const LONG_TREE: Duration = Duration::from_micros(50);

/// A cheap clock for timing join trees: the TSC on x86-64, the generic timer's virtual count
/// (`CNTVCT_EL0`, readable by user space on Linux) on AArch64, nanoseconds of `Instant`
/// elsewhere. Its rate is measured (`long_tree_ticks`), never assumed.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(crate) fn rdtsc() -> u64 {
    let t: u64;
    // SAFETY: reads a system register that Linux makes readable at EL0 (CNTKCTL_EL1.EL0VCTEN);
    // no memory effects.
    unsafe {
        core::arch::asm!("mrs {t}, cntvct_el0", t = out(reg) t, options(nomem, nostack, preserves_flags));
    }
    t
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn rdtsc() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

thread_local! {
    static CURRENT: Cell<*const WorkerThread> = const { Cell::new(std::ptr::null()) };
}

/// The worker running on this thread, if any.
#[inline]
pub(crate) fn current() -> Option<&'static WorkerThread> {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: set by `worker_main` to a WorkerThread that lives on that thread's stack until
    // it resets the pointer, and only this thread reads it; 'static is a white lie bounded by
    // the callers, which never keep the reference beyond the job they run.
    unsafe { p.as_ref() }
}

/// The body of worker thread `index`.
pub(crate) fn worker_main(registry: Arc<Registry>, index: usize) {
    if let Some(cpu) = registry.workers[index].cpu {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
    let worker = WorkerThread {
        index,
        shared: &registry.workers[index],
        registry: registry.clone(),
        local: UnsafeCell::new((Vec::with_capacity(64), 0)),
        skip: Cell::new(0),
        registered: Cell::new(None),
        spin: Cell::new(registry.spin),
        called: Cell::new(false),
        depth: Cell::new(0),
        long_trees: Cell::new(true),
        long_entered: Cell::new(true),
        rng: Cell::new(
            0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
        ),
    };
    CURRENT.with(|c| c.set(&worker));
    if let Some(h) = &registry.start_handler {
        let _ = catch_unwind(AssertUnwindSafe(|| h(index)));
    }
    worker.main_loop();
    if let Some(h) = &registry.exit_handler {
        let _ = catch_unwind(AssertUnwindSafe(|| h(index)));
    }
    CURRENT.with(|c| c.set(std::ptr::null()));
    drop(worker);
    if registry.live.fetch_sub(1, AcqRel) == 1 {
        // SAFETY: the latch lives in the registry, which this thread holds alive.
        unsafe { Latch::set(&registry.exited) };
    }
}

impl WorkerThread {
    #[inline]
    fn shared(&self) -> &WorkerShared {
        // SAFETY: points into `self.registry`, which `self` holds alive.
        unsafe { &*self.shared }
    }

    fn main_loop(&self) {
        loop {
            if let Some(job) = self.find_work() {
                self.called.set(false);
                self.depth.set(0);
                execute(job);
                continue;
            }
            if !self.idle(None) {
                return;
            }
        }
    }

    /// Whether another worker asked this one for work.
    #[inline]
    pub(crate) fn is_wanted(&self) -> bool {
        self.shared().wanted.load(Relaxed)
    }

    /// Push a job other workers may take (a spawn): the deque, or the injector if it is full.
    pub(crate) fn push(&self, job: JobRef) {
        match self.shared().deque.push(job) {
            Ok(()) => {
                self.registry.sleep.notify_one();
            }
            Err(job) => self.registry.inject(job),
        }
    }

    /// Run `a` here and `b` here or on a thief; see the module documentation.
    #[inline]
    pub(crate) fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        let skip = self.skip.get();
        if skip != 0 {
            // Deep in a join tree whose outer halves are registered: a plain call.
            self.skip.set(skip - 1);
            return (a(), b());
        }
        self.join_registered(a, b)
    }

    /// A join whose second half is registered on the local stack, so that it can be promoted.
    #[inline]
    pub(crate) fn join_registered<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        let job_b = StackJob::new(
            b,
            Latch::new(Owner::Worker {
                registry: &*self.registry,
                index: self.index,
            }),
        );
        let promoted = Cell::new(false);
        let depth = self.depth.replace(self.depth.get() + 1);
        // SAFETY: `job_b` stays in this frame until it runs inline or its latch is set: the
        // guard below waits for the latch if `a` unwinds.
        let was_empty = unsafe { self.push_local(job_b.as_job_ref(), &promoted) };
        let root = (depth == 0).then(rdtsc);
        if root.is_some() && self.long_trees.get() {
            // The outermost join of a tree, and this worker's last tree ran long: the second
            // half goes to the deque at once (and a sleeper is woken), where a helper can take
            // it even while `a` runs long without joining again (nobody could ask for it
            // before `a` joins). After short trees this would only add a wake-up to each.
            // Older live entries (outer joins of a job that waits below this one) go first:
            // promotion takes the oldest.
            while !promoted.get() && self.promote() {}
        }
        if was_empty {
            self.registered.set(Some(0));
        } else if let Some(r) = self.registered.get() {
            // Registered joins stand for REGISTER_EVERY joins each once the tree is deep.
            self.registered
                .set(Some(r + 1).filter(|&r| r < WAKE_AFTER / REGISTER_EVERY));
            if self.registered.get().is_none() {
                self.wake_a_helper();
            }
        }
        if self.local_len() >= SHALLOW {
            self.skip.set(REGISTER_EVERY - 1);
        }
        if self.is_wanted() {
            self.promote();
        }
        let guard = JoinGuard {
            worker: self,
            promoted: &promoted,
            latch: &job_b.latch,
        };
        let ra = a();
        std::mem::forget(guard);
        if !promoted.get() {
            self.pop_local();
            let rb = job_b.run_inline();
            self.end_join(depth, root);
            return (ra, rb);
        }
        self.wait_until(&job_b.latch);
        self.end_join(depth, root);
        (ra, job_b.into_result())
    }

    /// A join entered from outside the pool: its root hands its second half out if the last
    /// entered join on this worker ran long (the caller paid a wake-up to get in, and `a` may
    /// run long without joining again; after short ones it would add a second wake-up).
    pub(crate) fn join_entered<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        self.long_trees.set(self.long_entered.get());
        self.skip.set(0);
        let t0 = rdtsc();
        let r = self.join_registered(a, b);
        self.long_entered
            .set(rdtsc().wrapping_sub(t0) >= self.registry.long_tree_ticks);
        r
    }

    /// Leave a registered join entered at `depth`; a tree's root (timed from `root`, in TSC
    /// ticks) also tells whether the next tree's root should hand its second half out at once.
    #[inline]
    fn end_join(&self, depth: u32, root: Option<u64>) {
        self.depth.set(depth);
        if let Some(t0) = root {
            self.long_trees
                .set(rdtsc().wrapping_sub(t0) >= self.registry.long_tree_ticks);
        }
    }

    /// Entries on the local stack.
    #[inline]
    fn local_len(&self) -> usize {
        // SAFETY: owner-only memory, and no reference to it is held across calls.
        let (jobs, front) = unsafe { &*self.local.get() };
        jobs.len() - front
    }

    /// A job that has joined for a while (or a loop that has run for a while): wake a sleeper,
    /// if any, so that somebody can ask this worker for work.
    #[cold]
    pub(crate) fn wake_a_helper(&self) {
        if self.registry.sleep.has_sleepers() {
            self.registry.sleep.notify_one();
        }
    }

    /// Push a join half; returns whether the local stack was empty.
    ///
    /// # Safety
    /// `job` and `promoted` must stay valid until popped or promoted and run.
    #[inline]
    unsafe fn push_local(&self, job: JobRef, promoted: &Cell<bool>) -> bool {
        // SAFETY: owner-only memory, and no reference to it is held across calls.
        let (jobs, front) = unsafe { &mut *self.local.get() };
        let was_empty = jobs.len() == *front;
        let (data, exec) = job.into_words();
        jobs.push(LocalJob {
            data: data as *const (),
            // SAFETY: `exec` is the job's function, as `into_words` wrote it.
            exec: unsafe { std::mem::transmute::<usize, unsafe fn(*const ())>(exec) },
            promoted,
        });
        was_empty
    }

    /// Pop this join's own half (not promoted, so it is the newest entry).
    #[inline]
    fn pop_local(&self) {
        // SAFETY: owner-only memory, and no reference to it is held across calls.
        let (jobs, front) = unsafe { &mut *self.local.get() };
        debug_assert!(jobs.len() > *front);
        jobs.pop();
        if jobs.len() == *front {
            jobs.clear();
            *front = 0;
            // The tree is over: the next one registers its outermost joins (and counts them
            // towards waking a helper) whatever the last one left to skip.
            self.skip.set(0);
        }
    }

    /// Another worker asked: move the oldest local join half to the deque. Returns whether
    /// one moved (not when the stack is empty or the deque full).
    #[cold]
    #[inline(never)]
    pub(crate) fn promote(&self) -> bool {
        let shared = self.shared();
        shared.wanted.store(false, Relaxed);
        // SAFETY: owner-only memory, and no reference to it is held across calls.
        let (jobs, front) = unsafe { &mut *self.local.get() };
        if jobs.len() == *front {
            return false;
        }
        let entry = jobs[*front];
        // SAFETY: the entry came from a StackJob still in its join's frame (push_local).
        let job = unsafe { JobRef::new(entry.data, entry.exec) };
        if shared.deque.push(job).is_err() {
            return false; // full: the half stays local
        }
        *front += 1;
        // SAFETY: the join that owns the entry is still running (it is below this call).
        unsafe { (*entry.promoted).set(true) };
        Counters::bump(&shared.counters.promotions);
        self.registry.sleep.notify_one();
        true
    }

    /// Run other jobs until `latch` is set, sleeping when there are none.
    pub(crate) fn wait_until(&self, latch: &Latch) {
        while !latch.probe() {
            if let Some(job) = self.find_work() {
                // A job run here starts its own join tree: it registers its outermost joins
                // whatever the joins below this wait left to skip.
                let skip = self.skip.replace(0);
                let depth = self.depth.replace(0);
                self.called.set(false);
                execute(job);
                self.skip.set(skip);
                self.depth.set(depth);
                continue;
            }
            self.idle(Some(latch));
        }
    }

    fn find_work(&self) -> Option<JobRef> {
        let shared = self.shared();
        let (mailbox, posted) = &*shared.mailbox;
        if posted.load(Relaxed) > 0 {
            let mut q = mailbox.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(job) = q.pop_front() {
                posted.fetch_sub(1, Relaxed);
                return Some(job);
            }
        }
        if shared.deque.len() > 0 {
            if let Some(job) = shared.deque.pop() {
                return Some(job);
            }
        }
        if let Some(job) = self.registry.take_injected() {
            return Some(job);
        }
        self.steal()
    }

    fn next_random(&self) -> u64 {
        // xorshift64*
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn steal(&self) -> Option<JobRef> {
        let workers = &self.registry.workers;
        let n = workers.len();
        if n < 2 {
            return None;
        }
        let start = (self.next_random() % n as u64) as usize;
        for k in 0..n {
            let v = (start + k) % n;
            // A look at the indices first: a steal attempt on an empty deque still pays its
            // fence, and a worker that finds nothing scans every deque after each job.
            if v == self.index || workers[v].deque.len() == 0 {
                continue;
            }
            loop {
                match workers[v].deque.steal() {
                    Steal::Success(job) => {
                        Counters::bump(&self.shared().counters.steals);
                        if workers[v].deque.len() > 0 {
                            self.registry.sleep.notify_one();
                        }
                        return Some(job);
                    }
                    Steal::Empty => break,
                    Steal::Retry => spin_loop(),
                }
            }
        }
        None
    }

    /// Nothing to run: spin for a while asking for work, then sleep. Returns `false` when the
    /// pool is shutting down and there is nothing left to run (only outside a wait).
    fn idle(&self, latch: Option<&Latch>) -> bool {
        let registry = &*self.registry;
        let done = || latch.is_some_and(|l| l.probe());
        let start = Instant::now();
        let n = registry.workers.len();
        let mut round = 0usize;
        // Woken to help and nothing found: ask for work at least this long.
        let spin = if self.called.replace(false) {
            self.spin.get().max(registry.spin)
        } else {
            self.spin.get()
        };
        loop {
            if done() || registry.has_work(self.index) {
                if round > 0 {
                    // The spin paid off: spin longer next time.
                    self.spin
                        .set((self.spin.get() * 2).clamp(registry.spin, registry.max_spin));
                }
                return true;
            }
            if latch.is_none() && registry.terminating.load(Acquire) {
                return false;
            }
            if start.elapsed() >= spin {
                // A worker that learnt not to spin does not touch other workers' lines or
                // pause at all: the less CPU it burns between wake-ups, the sooner the kernel
                // runs it when it is woken.
                break;
            }
            if n > 1 {
                let victim = (self.index + 1 + round % (n - 1)) % n;
                let wanted = &registry.workers[victim].wanted;
                if !wanted.load(Relaxed) {
                    wanted.store(true, Relaxed);
                }
            }
            for _ in 0..32 {
                spin_loop();
            }
            round += 1;
        }
        // It did not: spin less next time, down to not at all (the workers of a pool that gets
        // a task now and then go straight to sleep after each).
        let half = self.spin.get() / 2;
        self.spin.set(if half < registry.spin / 4 {
            Duration::ZERO
        } else {
            half
        });
        Counters::bump(&self.shared().counters.sleeps);
        let stopping = || latch.is_none() && registry.terminating.load(Acquire);
        let slept = Instant::now();
        let claimed = registry.sleep.sleep(self.index, latch.is_none(), || {
            done() || stopping() || registry.has_work(self.index)
        });
        // A latch's wake-up (its job done) is not a call for help.
        self.called.set(claimed && !done());
        if claimed && done() && registry.has_work(self.index) {
            // A push's wake-up chose this worker, which returns to the wait its latch ended
            // rather than to the work: pass the wake-up on.
            registry.sleep.notify_one();
        }
        if slept.elapsed() < registry.max_spin {
            // Woken soon: a spin that long would have found the work without a wake-up.
            self.spin
                .set((self.spin.get() * 2).clamp(registry.spin, registry.max_spin));
        } else {
            // Woken after longer than any spin: spinning next time would only burn the CPU
            // (and a worker that burns CPU between wake-ups is one the kernel lets wait
            // behind the thread that woke it).
            self.spin.set(Duration::ZERO);
        }
        true
    }
}

/// Run a job found in a queue. Every job catches its closure's panic, so only a panic from
/// around it can unwind here (a payload whose drop panics, say); unwinding further would free
/// the stack frames of joins and scopes that other workers still use, so the process aborts
/// instead, as rayon does.
fn execute(job: JobRef) {
    struct AbortOnUnwind;
    impl Drop for AbortOnUnwind {
        fn drop(&mut self) {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"spindle-pool: a panic escaped a job's own handling; aborting\n",
            );
            std::process::abort();
        }
    }
    let guard = AbortOnUnwind;
    job.execute();
    std::mem::forget(guard);
}

/// Unwinding out of a join's first half: the second must not be left behind.
struct JoinGuard<'a> {
    worker: &'a WorkerThread,
    promoted: &'a Cell<bool>,
    latch: &'a Latch,
}

impl Drop for JoinGuard<'_> {
    fn drop(&mut self) {
        if self.promoted.get() {
            // Another worker may hold the half: wait until it ran (its result is dropped).
            self.worker.wait_until(self.latch);
        } else {
            self.worker.pop_local();
        }
    }
}

/// Run `f` on a worker of `registry` and return its result, from a thread that is not one of
/// its workers: inject it and wait (a worker of another pool runs that pool's jobs meanwhile).
pub(crate) fn in_worker_cold<F, R>(registry: &Arc<Registry>, f: F) -> R
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    match current() {
        Some(w) => {
            let job = StackJob::new(
                f,
                Latch::new(Owner::CrossWorker {
                    registry: w.registry.clone(),
                    index: w.index,
                }),
            );
            // SAFETY: `job` stays here until its latch is set (we wait for it below).
            registry.inject(unsafe { job.as_job_ref() });
            w.wait_until(&job.latch);
            job.into_result()
        }
        None => {
            let job = StackJob::new(f, Latch::for_thread());
            // SAFETY: as above.
            registry.inject(unsafe { job.as_job_ref() });
            job.latch.wait_blocking();
            job.into_result()
        }
    }
}

/// Run `f` on worker `index` (its mailbox) and wait for it.
pub(crate) fn on_worker<F, R>(registry: &Arc<Registry>, index: usize, f: F) -> R
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let owner = match current() {
        Some(w) if Arc::ptr_eq(&w.registry, registry) => Owner::Worker {
            registry: &**registry,
            index: w.index,
        },
        Some(w) => Owner::CrossWorker {
            registry: w.registry.clone(),
            index: w.index,
        },
        None => Owner::Thread(Arc::new(std::sync::atomic::AtomicU32::new(0))),
    };
    let thread = matches!(owner, Owner::Thread(_));
    let job = StackJob::new(f, Latch::new(owner));
    // SAFETY: `job` stays here until its latch is set (we wait for it below).
    registry.post(index, unsafe { job.as_job_ref() });
    match current() {
        Some(w) if !thread => w.wait_until(&job.latch),
        _ => job.latch.wait_blocking(),
    }
    job.into_result()
}

/// A `'static` spawn: the job catches its panic and hands it to the pool's handler.
pub(crate) fn spawn_job<F: FnOnce() + Send + 'static>(f: F) -> JobRef {
    HeapJob::into_job_ref(move || {
        if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
            match current() {
                Some(w) => w.registry.handle_panic(p),
                None => drop(p),
            }
        }
    })
}

/// A scope: spawned jobs may borrow what outlives `'scope`; the scope waits for all of them.
pub struct Scope<'scope> {
    registry: Arc<Registry>,
    /// Jobs not finished, plus one for the scope's own body.
    pending: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    latch: Latch,
    _marker: PhantomData<fn(&'scope ()) -> &'scope ()>,
}

impl<'scope> Scope<'scope> {
    /// Run `f` on the pool; the scope waits for it. A panic in `f` is resumed by the scope
    /// once every job has finished (the first one, if several panic).
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        self.pending.fetch_add(1, Relaxed);
        let scope = self as *const Scope<'scope> as usize;
        let job = HeapJob::into_job_ref(move || {
            // SAFETY: the scope waits (in `scope_on_worker`) until `pending` is zero, so it is
            // alive until this job's `completed` below.
            let scope = unsafe { &*(scope as *const Scope<'scope>) };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(scope))) {
                let mut slot = scope.panic.lock().unwrap_or_else(|e| e.into_inner());
                if slot.is_none() {
                    *slot = Some(p);
                } else {
                    // Only the first panic is resumed; dropping a later payload may panic.
                    drop(slot);
                    let _ = catch_unwind(AssertUnwindSafe(|| drop(p)));
                }
            }
            scope.completed();
        });
        match current() {
            Some(w) if Arc::ptr_eq(&w.registry, &self.registry) => w.push(job),
            _ => self.registry.inject(job),
        }
    }

    fn completed(&self) {
        if self.pending.fetch_sub(1, Release) == 1 {
            std::sync::atomic::fence(Acquire);
            // SAFETY: the scope is alive until its latch is set; nothing of it is touched
            // after.
            unsafe { Latch::set(&self.latch) };
        }
    }
}

/// The body of a scope, on worker `w` of the scope's pool.
pub(crate) fn scope_on_worker<'scope, F, R>(w: &WorkerThread, f: F) -> R
where
    F: FnOnce(&Scope<'scope>) -> R,
{
    let scope = Scope {
        registry: w.registry.clone(),
        pending: AtomicUsize::new(1),
        panic: Mutex::new(None),
        latch: Latch::new(Owner::Worker {
            registry: &*w.registry,
            index: w.index,
        }),
        _marker: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    scope.completed();
    w.wait_until(&scope.latch);
    if let Some(p) = scope.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
        std::panic::resume_unwind(p);
    }
    match result {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}
