//! Safe memory reclamation with fence-free readers: epoch-based reclamation ([`epoch`]) and
//! hazard pointers ([`hazard`]).
//!
//! Both schemes solve the same problem (Paul Khuong, "Preemption Is GC for Memory
//! Reordering", 2019): a writer unlinks an object from a shared structure and must learn when no reader can still be looking at it. In both,
//! the reader *publishes* something (its epoch, or the pointer it is about to follow) and then
//! *re-checks* that the thing it published is still current; the writer *overwrites* (advances
//! the epoch, unlinks the pointer) and then *scans* what readers published. Under sequential
//! consistency that is enough. Under x86-TSO the reader's re-check (a load) may execute before
//! its publication (a store) leaves the store buffer — the "FSSF" interleaving of Paul Khuong's "Preemption Is GC for Memory Reordering" (2019), where
//! the writer's overwrite and scan both fall between the reader's store and its load:
//!
//! ```text
//!   reader                          writer
//!   publish (store, buffered) ─┐
//!   re-check (load): still ok  │    overwrite (store)
//!                              │    scan: the reader's publication is not visible yet → free
//!   publication drains ────────┘
//!   dereference                     ← use after free
//! ```
//!
//! The classic fix is an `mfence` (or a `lock`ed instruction) between publish and re-check on
//! *every* read. Spindle's readers use [`fence::light`](crate::fence::light) instead — a
//! compiler fence, so publication and re-check are two plain `mov`s — and the writer pays:
//! before it scans, it makes sure every CPU has executed a full barrier since its overwrite
//! became visible, either with [`fence::heavy`](crate::fence::heavy) (a process-wide IPI
//! barrier, tens of µs; on AArch64 `light()` is a compiler fence once an expedited membarrier
//! is registered, see [`fence`](crate::fence)) or by waiting for a *prepaid* barrier ticket
//! ([`PrepaidBarrier`](crate::prepaid::PrepaidBarrier): every CPU takes interrupts anyway; once
//! each has taken one after the ticket, the barrier has happened for free). After that barrier,
//! a reader whose publication the scan misses must have executed its re-check after the
//! barrier, so the re-check sees the overwrite and the reader retries: FSSF is gone.
//!
//! | | epoch ([`epoch`]) | hazard pointers ([`hazard`]) |
//! |---|---|---|
//! | read side | pin: load, store, re-load; unpin: store | protect: load, store, re-load; reset: store |
//! | granularity | everything read while pinned | one pointer per hazard slot |
//! | garbage under a stalled reader | **unbounded**: nothing retired after its epoch is freed | bounded: it can hold back only the objects in its slots |
//! | writer's cost | a fence per bag of 64; a barrier per epoch advance | a barrier per reclaim (every ~2 × slots + 64 retires) |
//!
//! Which barrier the cold side uses is a constructor option ([`Barrier`]).
//!
//! # What it costs
//!
//! A protected read is a publication, a re-check and a withdrawal (two stores, two loads)
//! where an unprotected one is a load, and an epoch guard also keeps a nesting count (so
//! guards may be dropped in any order) and checks whether it outlived its handle; neither
//! executes a fence or a locked instruction. The lab's `smr` experiment measures both against a
//! plain load + store and against crossbeam-epoch, haphazard and seize (whose readers fence),
//! and runs a read-mostly workload that also records the writer's throughput and the peak of
//! unreclaimed garbage; `docs/results.md` has the figures per machine. Epoch garbage is large
//! on an oversubscribed machine for every epoch-like scheme (a reader preempted while pinned
//! stops advances until it runs again, see [`epoch`]); hazard pointers keep it at their bound.

pub mod epoch;
pub mod hazard;

#[cfg(all(test, loom))]
mod loom_models;

#[cfg(loom)]
pub use loom::sync::atomic::AtomicPtr;
#[cfg(not(loom))]
pub use std::sync::atomic::AtomicPtr;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicUsize;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicUsize;

/// How the cold side makes every CPU execute a full barrier before it scans what readers
/// published (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Barrier {
    /// [`fence::heavy`](crate::fence::heavy): a process-wide barrier issued on the spot
    /// (coalesced with concurrent callers). Deterministic latency, tens of µs per call.
    Heavy,
    /// A [`PrepaidBarrier`](crate::prepaid::PrepaidBarrier) ticket taken right after the
    /// overwrite; the scan waits until the ticket completes (polled without blocking by the
    /// epoch collector), and falls back to [`fence::heavy`](crate::fence::heavy) once a ticket
    /// has been outstanding for [`PREPAID_PATIENCE`]. Not available under loom.
    #[cfg(not(loom))]
    Prepaid,
}

impl Barrier {
    /// The default for both schemes: [`Barrier::Heavy`]. [`Barrier::Prepaid`] is opt-in
    /// because of what it sets up behind the caller's back: run as root, the first prepaid
    /// ticket loads eBPF programs on the machine's scheduler and interrupt tracepoints (for the
    /// process's lifetime, on every CPU); otherwise it starts a thread that polls `/proc`
    /// while tickets are outstanding. Choose it when IPIs on busy reader threads matter more
    /// than a few ms of reclamation latency (see the crate's "Which barrier when").
    pub const fn default_policy() -> Barrier {
        Barrier::Heavy
    }

    /// Short name for reports: `heavy`, `prepaid`.
    pub fn name(self) -> &'static str {
        match self {
            Barrier::Heavy => "heavy",
            #[cfg(not(loom))]
            Barrier::Prepaid => "prepaid",
        }
    }
}

impl Default for Barrier {
    fn default() -> Barrier {
        Barrier::default_policy()
    }
}

/// How long a prepaid ticket may stay incomplete before the cold side issues
/// [`fence::heavy`](crate::fence::heavy) instead: a healthy system takes a timer interrupt on
/// every busy CPU every few ms (HZ 250: 4 ms), so this only triggers on idle `nohz` CPUs, a
/// missing source, or a stuck one — and keeps garbage bounded in time there too.
pub const PREPAID_PATIENCE: std::time::Duration = std::time::Duration::from_millis(10);

pub(crate) use crate::primitives::CachePadded;

/// A type-erased deferred action: `call(data)` runs it once. Used by both schemes so that
/// destroying a `Box<T>` needs no allocation of its own.
pub(crate) struct Deferred {
    data: *mut (),
    extra: *const (),
    call: unsafe fn(*mut (), *const ()),
}

// SAFETY: a `Deferred` is only built from `Send` closures or from pointers the caller promised
// may be destroyed on any thread (the `retire`/`defer_destroy` contracts).
unsafe impl Send for Deferred {}

impl Deferred {
    /// Destroy `ptr` as a `Box<T>`.
    pub(crate) fn destroy_box<T>(ptr: *mut T) -> Deferred {
        unsafe fn drop_box<T>(data: *mut (), _: *const ()) {
            // SAFETY: built by `destroy_box` from a pointer the caller said came from `Box<T>`.
            drop(unsafe { Box::from_raw(data.cast::<T>()) });
        }
        Deferred {
            data: ptr.cast(),
            extra: std::ptr::null(),
            call: drop_box::<T>,
        }
    }

    /// Call `deleter(ptr)`.
    pub(crate) fn with_deleter<T>(ptr: *mut T, deleter: unsafe fn(*mut T)) -> Deferred {
        unsafe fn trampoline<T>(data: *mut (), extra: *const ()) {
            // SAFETY: `extra` was made from an `unsafe fn(*mut T)` in `with_deleter`; casting a
            // function pointer to `*const ()` and back to the same type is allowed.
            let deleter: unsafe fn(*mut T) = unsafe { std::mem::transmute(extra) };
            // SAFETY: the retire contract: `deleter` may be called once on `ptr`.
            unsafe { deleter(data.cast::<T>()) };
        }
        Deferred {
            data: ptr.cast(),
            extra: deleter as *const (),
            call: trampoline::<T>,
        }
    }

    /// Run a closure.
    pub(crate) fn closure<F: FnOnce() + Send + 'static>(f: F) -> Deferred {
        unsafe fn call_boxed<F: FnOnce()>(data: *mut (), _: *const ()) {
            // SAFETY: built by `closure` from `Box::into_raw(Box<F>)`.
            let f = unsafe { Box::from_raw(data.cast::<F>()) };
            f();
        }
        Deferred {
            data: Box::into_raw(Box::new(f)).cast(),
            extra: std::ptr::null(),
            call: call_boxed::<F>,
        }
    }

    /// The address this action destroys (for hazard-pointer comparisons).
    pub(crate) fn address(&self) -> usize {
        self.data as usize
    }

    /// Run the action.
    ///
    /// # Safety
    /// No reader may still use what it destroys; each `Deferred` is run at most once (this
    /// consumes it).
    pub(crate) unsafe fn run(self) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.call)(self.data, self.extra) }
    }
}

/// Issue the barrier the cold side needs when it has no prepaid ticket to rely on.
#[inline]
pub(crate) fn heavy_barrier() {
    crate::fence::heavy();
}
