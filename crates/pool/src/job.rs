//! Jobs (a pointer and the function that runs it), the join's job on the stack, boxed jobs
//! for spawns, and latches: how the thread that waits for a job learns that it ran.

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{
    AtomicU32,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::Arc;

use crate::registry::Registry;

/// A job: `exec(data)` runs it, once. Whoever holds a `JobRef` holds the right to run it.
#[derive(Debug)]
pub(crate) struct JobRef {
    data: *const (),
    exec: unsafe fn(*const ()),
}

// SAFETY: a JobRef is handed to another thread only for jobs whose closures are `Send` (every
// constructor below requires it).
unsafe impl Send for JobRef {}

impl JobRef {
    /// # Safety
    /// `data` must stay valid until `exec(data)` has returned, and `exec` must be safe to call
    /// once on it from any thread.
    pub(crate) unsafe fn new(data: *const (), exec: unsafe fn(*const ())) -> JobRef {
        JobRef { data, exec }
    }

    /// Run the job (consumes the right to run it).
    #[inline]
    pub(crate) fn execute(self) {
        // SAFETY: the constructor's contract; `self` is consumed, so it runs once.
        unsafe { (self.exec)(self.data) }
    }

    pub(crate) fn into_words(self) -> (usize, usize) {
        (self.data as usize, self.exec as usize)
    }

    /// # Safety
    /// The words must come from `into_words` of a job not run since (or, in the loom models,
    /// never be executed).
    pub(crate) unsafe fn from_words((data, exec): (usize, usize)) -> JobRef {
        JobRef {
            data: data as *const (),
            // SAFETY: `exec` was a `unsafe fn(*const ())` turned into a usize by into_words
            // (the loom models never run theirs).
            exec: unsafe { std::mem::transmute::<usize, unsafe fn(*const ())>(exec) },
        }
    }
}

/// What a job left for its waiter.
pub(crate) enum JobResult<R> {
    None,
    Ok(R),
    Panic(Box<dyn Any + Send>),
}

impl<R> JobResult<R> {
    /// The value, or the job's panic resumed here.
    pub(crate) fn into_value(self) -> R {
        match self {
            JobResult::Ok(v) => v,
            JobResult::Panic(p) => std::panic::resume_unwind(p),
            JobResult::None => unreachable!("a job's latch was set before its result"),
        }
    }
}

/// A job on its waiter's stack: the closure, room for its result, and the latch the runner
/// sets once the result is there. The waiter does not return before the latch is set (or
/// before it took the job back and ran it itself), so the stack frame outlives every use.
pub(crate) struct StackJob<F, R> {
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<JobResult<R>>,
    pub(crate) latch: Latch,
}

impl<F: FnOnce() -> R + Send, R: Send> StackJob<F, R> {
    pub(crate) fn new(func: F, latch: Latch) -> Self {
        StackJob {
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(JobResult::None),
            latch,
        }
    }

    /// # Safety
    /// The job must stay where it is until its latch is set or the waiter took it back
    /// ([`StackJob::run_inline`]) having made sure nobody else holds the JobRef.
    pub(crate) unsafe fn as_job_ref(&self) -> JobRef {
        // SAFETY: forwarded to the caller.
        unsafe { JobRef::new(self as *const Self as *const (), Self::exec) }
    }

    unsafe fn exec(this: *const ()) {
        // SAFETY: `this` came from `as_job_ref`; the job is alive until its latch is set, and
        // the JobRef gives this thread the only right to touch `func` and `result`.
        unsafe {
            let this = &*(this as *const Self);
            let func = (*this.func.get()).take().expect("a job ran twice");
            *this.result.get() = match catch_unwind(AssertUnwindSafe(func)) {
                Ok(v) => JobResult::Ok(v),
                Err(p) => JobResult::Panic(p),
            };
            Latch::set(&this.latch);
        }
    }

    /// Run the closure on this thread: the waiter took its job back (nobody else can run it).
    #[inline]
    pub(crate) fn run_inline(&self) -> R {
        // SAFETY: only the waiter reaches here, and only for a job nobody else holds.
        let func = unsafe { (*self.func.get()).take() }.expect("a job ran twice");
        func()
    }

    /// The result, once the latch is set.
    pub(crate) fn into_result(self) -> R {
        self.result.into_inner().into_value()
    }
}

/// A boxed job, for spawns: runs once and frees itself.
pub(crate) struct HeapJob<F> {
    func: F,
}

impl<F: FnOnce() + Send> HeapJob<F> {
    /// The job as a JobRef that owns the box.
    pub(crate) fn into_job_ref(func: F) -> JobRef {
        let data = Box::into_raw(Box::new(HeapJob { func })) as *const ();
        // SAFETY: the box lives until `exec` takes it back; `F: Send`.
        unsafe { JobRef::new(data, Self::exec) }
    }

    unsafe fn exec(this: *const ()) {
        // SAFETY: `this` came from `into_job_ref` and runs once.
        let this = unsafe { Box::from_raw(this as *mut Self) };
        (this.func)();
    }
}

/// Who waits on a latch, so that setting it wakes exactly that thread.
pub(crate) enum Owner {
    /// A worker of the registry that runs the job (join halves): the setter is a worker of
    /// the same registry, which is alive while its workers are.
    Worker {
        registry: *const Registry,
        index: usize,
    },
    /// A worker of another pool: the setter holds that pool's registry alive itself.
    CrossWorker {
        registry: Arc<Registry>,
        index: usize,
    },
    /// A thread outside every pool: it sleeps on its own word (1 while it sleeps), which the
    /// setter holds alive with the Arc.
    Thread(Arc<AtomicU32>),
}

const UNSET: u32 = 0;
const SET: u32 = 1;

/// A one-shot flag: set once by the job's runner, probed or waited on by its owner.
///
/// Setting it: a Release store (the result written before it happens-before the owner's
/// Acquire probe), then a look at whether the owner sleeps. A worker owner sleeps through the
/// pool's sleep protocol, whose heavy fence closes the store-buffering window between this
/// store and that look (see `sleep`). A thread owner announces itself with a locked swap of
/// its parking word to 1 and then probes; the setter stores the state and then swaps the
/// word to 0: both swaps are locked, so one comes first in the word's order, and either the
/// setter's swap reads 1 (it wakes the owner) or the owner's probe follows the setter's store
/// (it sees the latch set).
pub(crate) struct Latch {
    state: AtomicU32,
    owner: Owner,
}

// SAFETY: the raw registry pointer is only dereferenced by the setter while the registry is
// alive (see Owner::Worker); everything else is Sync.
unsafe impl Sync for Latch {}
// SAFETY: as above.
unsafe impl Send for Latch {}

impl Latch {
    pub(crate) fn new(owner: Owner) -> Latch {
        Latch {
            state: AtomicU32::new(UNSET),
            owner,
        }
    }

    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.state.load(Acquire) == SET
    }

    /// Set the latch and wake its owner if it sleeps.
    ///
    /// # Safety
    /// `this` must be valid on entry; it may be freed as soon as the state is stored (the
    /// owner may return at once), so nothing of it is touched after that.
    pub(crate) unsafe fn set(this: *const Latch) {
        // SAFETY: valid on entry (the caller's contract); each arm copies what it needs out of
        // the latch before the store that may free it.
        unsafe {
            match &(*this).owner {
                Owner::Worker { registry, index } => {
                    let (registry, index) = (*registry, *index);
                    (*this).state.store(SET, Release);
                    (*registry).sleep.notify_worker(index);
                }
                Owner::CrossWorker { registry, index } => {
                    let (registry, index) = (registry.clone(), *index);
                    (*this).state.store(SET, Release);
                    registry.sleep.notify_worker(index);
                }
                Owner::Thread(parker) => {
                    let parker = parker.clone();
                    (*this).state.store(SET, Release);
                    if parker.swap(0, SeqCst) == 1 {
                        spindle_sync::futex::wake(&parker, 1);
                    }
                }
            }
        }
    }

    /// A latch for a thread outside every pool, which waits with [`Latch::wait_blocking`].
    pub(crate) fn for_thread() -> Latch {
        Latch::new(Owner::Thread(Arc::new(AtomicU32::new(0))))
    }

    /// Block this (non-worker) thread until the latch is set.
    pub(crate) fn wait_blocking(&self) {
        let Owner::Thread(parker) = &self.owner else {
            unreachable!("wait_blocking on a worker's latch")
        };
        while !self.probe() {
            parker.swap(1, SeqCst);
            if self.probe() {
                parker.store(0, Relaxed);
                return;
            }
            let _ = spindle_sync::futex::wait(parker, 1, None);
        }
    }
}
