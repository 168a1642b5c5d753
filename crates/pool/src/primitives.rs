//! The atomics and the futex calls the deque and the sleep protocol are written against: `std`'s
//! and the kernel's in a normal build, loom's under `--cfg loom` (where a futex wait becomes a
//! yield, so loom explores the waiter re-checking its word, and a wake does nothing).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicIsize, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicIsize, AtomicU32, AtomicU64, AtomicUsize};

/// Sleep while `*word == expected` (spurious returns allowed: callers re-check).
#[inline]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    #[cfg(not(loom))]
    {
        let _ = spindle_sync::futex::wait(word, expected, None);
    }
    #[cfg(loom)]
    {
        let _ = (word, expected);
        loom::thread::yield_now();
    }
}

/// Wake one thread asleep on `word`.
#[inline]
pub(crate) fn futex_wake(word: &AtomicU32) {
    #[cfg(not(loom))]
    {
        spindle_sync::futex::wake(word, 1);
    }
    #[cfg(loom)]
    {
        let _ = word;
    }
}

/// One iteration of a spin-wait loop.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
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
