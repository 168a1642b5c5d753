//! The atomics and hints every protocol in this crate is written against.
//!
//! In a normal build these are `core`'s atomics, `core::hint::spin_loop` (x86 `pause`) and
//! `sched_yield`. Under `--cfg loom` they are loom's, so the same protocol code runs inside loom's
//! model checker; spinning and yielding become `loom::thread::yield_now`, which tells loom the
//! thread cannot make progress until another one runs.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// One iteration of a spin-wait loop: `pause` on x86.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Spins (`pause` in a loop) for about `ticks` TSC ticks (nanoseconds where there is no TSC):
/// a hold that lasts as long on every core, where a count of `pause`s does not (one lasts a
/// few cycles on some cores and over a hundred on others). Under loom, one yield.
pub(crate) fn spin_for(ticks: u64) {
    #[cfg(loom)]
    {
        let _ = ticks;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        let until = crate::time::ticks::now().saturating_add(ticks);
        while crate::time::ticks::now() < until {
            core::hint::spin_loop();
        }
    }
}

/// Give the CPU to another runnable thread (`sched_yield`).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    rustix::thread::sched_yield();
}

/// Keeps a value on its own cache lines (128 bytes: x86's adjacent-line prefetcher pairs lines).
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Checks `f` under loom with a preemption bound of 2: the models of selects and async
/// operations, whose blocking paths make deeper bounds take minutes.
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}
