//! The commit protocol's synchronisation primitives: the standard library's, or loom's under
//! `--cfg loom`, where the model in `loom_models.rs` explores the protocol's interleavings.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::JoinHandle;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::JoinHandle;

/// Starts a thread named `name` (loom's threads have no names).
pub(crate) fn spawn(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    #[cfg(loom)]
    {
        let _ = name;
        Ok(loom::thread::spawn(f))
    }
    #[cfg(not(loom))]
    {
        std::thread::Builder::new().name(name.into()).spawn(f)
    }
}
