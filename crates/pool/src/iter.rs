//! Parallel loops over ranges and slices, split lazily: a loop runs as one sequential piece on
//! one worker until another worker asks for work, and then gives away half of what is left.
//!
//! The piece is processed in blocks; between two blocks the worker checks its `wanted` flag
//! (one load of its own cache line). Block sizes adapt to the items' cost: a block that took
//! less than [`BLOCK_MIN`] of time is followed by one twice as large, one that took more than
//! [`BLOCK_MAX`] by one half as large. Cheap items (a `u64` to add) are folded thousands at a
//! time, in loops the compiler can vectorise; costly ones one at a time, so that a request for
//! work is answered within a few microseconds whatever the loop body costs.

use std::ops::Range;
use std::time::{Duration, Instant};

use crate::registry::{current, WorkerThread};

/// A block shorter than this doubles the next one.
pub const BLOCK_MIN: Duration = Duration::from_micros(1);
/// A block longer than this halves the next one.
pub const BLOCK_MAX: Duration = Duration::from_micros(4);
const MAX_BLOCK: usize = 1 << 16;
/// A piece that has run this long with items left wakes a sleeping worker to ask for work (a
/// shorter loop finishes before a wake-up would pay for itself).
const WAKE_AFTER: Duration = Duration::from_micros(5);

/// Inputs the parallel loops split: ranges of integers and slices.
pub trait Split: Send + Sized {
    /// What the loop body receives.
    type Item;
    /// Items left.
    fn len(&self) -> usize;
    /// Whether no item is left.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first `mid` items and the rest.
    fn split_at(self, mid: usize) -> (Self, Self);
    /// Fold the items in order, sequentially.
    fn fold<A>(self, init: A, f: impl FnMut(A, Self::Item) -> A) -> A;
}

macro_rules! split_range {
    ($($t:ty),*) => {$(
        impl Split for Range<$t> {
            type Item = $t;
            #[inline]
            fn len(&self) -> usize {
                // Empty when reversed, as std's ranges are (a signed difference would wrap).
                if self.end <= self.start {
                    0
                } else {
                    (self.end as i128 - self.start as i128) as usize
                }
            }
            #[inline]
            fn split_at(self, mid: usize) -> (Self, Self) {
                let m = self.start + mid as $t;
                (self.start..m, m..self.end)
            }
            #[inline]
            fn fold<A>(self, init: A, f: impl FnMut(A, $t) -> A) -> A {
                Iterator::fold(self, init, f)
            }
        }
    )*};
}
split_range!(usize, u64, u32, i64, i32);

impl<'a, T: Sync> Split for &'a [T] {
    type Item = &'a T;
    #[inline]
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    #[inline]
    fn split_at(self, mid: usize) -> (Self, Self) {
        <[T]>::split_at(self, mid)
    }
    #[inline]
    fn fold<A>(self, init: A, f: impl FnMut(A, &'a T) -> A) -> A {
        self.iter().fold(init, f)
    }
}

impl<'a, T: Send> Split for &'a mut [T] {
    type Item = &'a mut T;
    #[inline]
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    #[inline]
    fn split_at(self, mid: usize) -> (Self, Self) {
        <[T]>::split_at_mut(self, mid)
    }
    #[inline]
    fn fold<A>(self, init: A, f: impl FnMut(A, &'a mut T) -> A) -> A {
        self.iter_mut().fold(init, f)
    }
}

pub(crate) struct Loop<Id, M, Red> {
    pub(crate) identity: Id,
    pub(crate) map: M,
    pub(crate) reduce: Red,
}

impl<Id, M, Red> Loop<Id, M, Red> {
    /// Run the loop on the current worker (the caller made sure there is one).
    pub(crate) fn run<I, R>(&self, input: I) -> R
    where
        I: Split,
        R: Send,
        Id: Fn() -> R + Sync,
        M: Fn(I::Item) -> R + Sync,
        Red: Fn(R, R) -> R + Sync,
    {
        let w = current().expect("a parallel loop runs on a worker");
        self.piece(w, input)
    }

    fn piece<I, R>(&self, w: &WorkerThread, input: I) -> R
    where
        I: Split,
        R: Send,
        Id: Fn() -> R + Sync,
        M: Fn(I::Item) -> R + Sync,
        Red: Fn(R, R) -> R + Sync,
    {
        let mut acc = (self.identity)();
        let mut rest = input;
        let mut block = 1usize;
        // Time run so far, until it reaches WAKE_AFTER and a sleeper is woken to help.
        let mut ran = Some(Duration::ZERO);
        loop {
            let n = rest.len();
            if n == 0 {
                return acc;
            }
            if n >= 2 && w.is_wanted() {
                let (left, right) = rest.split_at(n / 2);
                // Registered whatever the worker has left to skip, so that this join answers
                // the request (promotes) instead of becoming a plain call.
                let (a, b) = w.join_registered(
                    || self.piece(current().expect("on a worker"), left),
                    || self.piece(current().expect("on a worker"), right),
                );
                return (self.reduce)((self.reduce)(acc, a), b);
            }
            let take = block.min(n);
            let (head, tail) = rest.split_at(take);
            let t0 = Instant::now();
            acc = head.fold(acc, |acc, x| (self.reduce)(acc, (self.map)(x)));
            let took = t0.elapsed();
            rest = tail;
            if let Some(r) = ran {
                ran = Some(r + took).filter(|&r| r < WAKE_AFTER);
                if ran.is_none() && !rest.is_empty() {
                    w.wake_a_helper();
                }
            }
            if took < BLOCK_MIN {
                block = (block * 2).min(MAX_BLOCK);
            } else if took > BLOCK_MAX {
                block = (block / 2).max(1);
            }
        }
    }
}
