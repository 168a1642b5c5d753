//! `spindle-alloc`: seed 001's lock-free, constant-time, zero-fragmentation allocator, with
//! per-CPU caches on restartable sequences in front of it.
//!
//! ```text
//!  malloc(n) ── class_of(n) ──► per-CPU cache: two free lists and a run of fresh blocks
//!                                  │ both lists empty (rseq)    ▲ both full: one list goes
//!                                  ▼                            │ back whole
//!                               shared stack of batches per class (lock-free, cmpxchg16b)
//!                                  │ empty
//!                                  ▼
//!                               the class's frontier in its current span (CAS)
//!                                  │ region full
//!  n > 64 KiB ───────────────────► a kept block that fits, else mmap (mremap for realloc)
//! ```
//!
//! - **Classes** ([`classes`]): each request is rounded up to one of 44 classes from 16 B to
//!   64 KiB; every class is a heap of equal blocks, so a freed block is as good as a fresh one
//!   and memory never splinters into holes that only smaller requests can use.
//! - **Caches** ([`cache`]): on glibc 2.35+ (or any Linux 4.18+ where we can register)
//!   each CPU has, per class, two free lists and a run of never-used blocks, popped and
//!   pushed by restartable sequences: no atomic instruction, no lock, no thread-local
//!   storage on glibc. Without rseq each thread has a cache of its own instead
//!   ([`cache_mode`] says which runs). An exiting thread (on glibc's registration, after a
//!   slow path) hands its CPU record's lists to the shared stacks.
//! - **Shared stacks and spans** ([`central`]): caches trade whole lists with a per-class
//!   lock-free stack, in O(1); new blocks come from the class's span (64 KiB chunks of the
//!   region), carved by address arithmetic so that never-used blocks' pages stay untouched.
//! - **The OS** ([`os`]): one `MAP_NORESERVE` reservation of 64 GiB of address space (less
//!   where the system refuses), spans never unmapped, transparent huge pages asked for
//!   (`SPINDLE_ALLOC_THP=0`: not); blocks above 64 KiB mapped one by one, made resident in
//!   one call up to 4 MiB.
//!   **Returning memory:** a freed block of 16 KiB or more that goes to a shared stack
//!   already holding 1 MiB of its class gives its whole pages (all but the first, which
//!   holds the links) back with `MADV_DONTNEED`; a freed large block is kept for the next
//!   large allocation that fits (at most 16 blocks, 32 MiB in all, 8 MiB each: `os::keep`)
//!   and unmapped otherwise.
//!
//! Every operation is lock-free except the OS calls (the kept large blocks sit behind a flag
//! that is tried, never waited for); the fast path is constant time.
//! Use it as Rust's allocator with `#[global_allocator] static A: SpindleAlloc = SpindleAlloc;`,
//! or for any program with `LD_PRELOAD` and the `spindle-alloc-preload` crate's library.

#[cfg(not(loom))]
mod api;
#[cfg(not(loom))]
pub mod cache;
#[cfg(not(loom))]
pub mod central;
pub mod classes;
#[cfg(not(loom))]
mod hot;
#[cfg(not(loom))]
pub mod os;
pub mod stack;
#[cfg(not(loom))]
pub mod trace;

#[cfg(all(test, loom))]
mod loom_models;

#[cfg(not(loom))]
pub use api::*;
