//! The errors of the rings and channels ([`spsc`](crate::spsc), [`mpmc`](crate::mpmc)), in one
//! place so both read the same (`mpmc` names them after `send`/`recv`). Every error that
//! gives up on a push hands the value back.

use std::fmt;

/// A non-blocking push failed; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TryPushError<T> {
    /// No free slot.
    Full(T),
    /// Nobody will ever pop it: the other side is gone.
    Disconnected(T),
}

/// A push with a deadline failed; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PushTimeoutError<T> {
    /// The deadline passed with no free slot.
    Timeout(T),
    /// Nobody will ever pop it: the other side is gone.
    Disconnected(T),
}

/// A blocking push failed because the other side is gone; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PushError<T>(pub T);

/// A non-blocking pop found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryPopError {
    /// Nothing to pop now.
    Empty,
    /// Nothing to pop ever again: the other side is gone and every item was popped.
    Disconnected,
}

/// A pop with a deadline found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopTimeoutError {
    /// The deadline passed with nothing to pop.
    Timeout,
    /// Nothing to pop ever again: the other side is gone and every item was popped.
    Disconnected,
}

/// A blocking pop failed: the other side is gone and every item was popped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PopError;

impl<T> TryPushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            TryPushError::Full(v) | TryPushError::Disconnected(v) => v,
        }
    }
}

impl<T> PushTimeoutError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushTimeoutError::Timeout(v) | PushTimeoutError::Disconnected(v) => v,
        }
    }
}

impl<T> PushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        self.0
    }
}

// Debug without `T: Debug`, as std's and crossbeam's channel errors do.
impl<T> fmt::Debug for TryPushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryPushError::Full(_) => f.write_str("Full(..)"),
            TryPushError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Debug for PushTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            PushTimeoutError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Debug for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PushError(..)")
    }
}

impl<T> fmt::Display for TryPushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryPushError::Full(_) => "no free slot",
            TryPushError::Disconnected(_) => "the receiving side is gone",
        })
    }
}

impl<T> fmt::Display for PushTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PushTimeoutError::Timeout(_) => "timed out waiting for a free slot",
            PushTimeoutError::Disconnected(_) => "the receiving side is gone",
        })
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the receiving side is gone")
    }
}

impl fmt::Display for TryPopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryPopError::Empty => "nothing to take",
            TryPopError::Disconnected => "nothing to take, and the sending side is gone",
        })
    }
}

impl fmt::Display for PopTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PopTimeoutError::Timeout => "timed out waiting for an item",
            PopTimeoutError::Disconnected => "nothing to take, and the sending side is gone",
        })
    }
}

impl fmt::Display for PopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("nothing to take, and the sending side is gone")
    }
}

impl<T> std::error::Error for TryPushError<T> {}
impl<T> std::error::Error for PushTimeoutError<T> {}
impl<T> std::error::Error for PushError<T> {}
impl std::error::Error for TryPopError {}
impl std::error::Error for PopTimeoutError {}
impl std::error::Error for PopError {}
