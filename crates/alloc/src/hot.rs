//! The words `malloc` and `free` read on their fast paths, in one static: rustc has code
//! inlined into another crate reach a static through the global offset table, one load per
//! static, and loads are what those paths are made of. So the first cache line holds every hot
//! word and the chunk table follows it: one address for all of them. On x86-64 even that one
//! load is gone: [`hot`] computes the address from the instruction pointer.

use core::sync::atomic::{AtomicIsize, AtomicU8, AtomicUsize};

use crate::central::MAX_CHUNKS;

/// See the module documentation.
#[repr(C, align(64))]
pub(crate) struct Hot {
    /// The region for `free`'s test: its base with log2 of its length in bytes in the low
    /// bits (the base is aligned to the length); 0 until published (see `central`).
    pub region: AtomicUsize,
    /// The per-CPU slabs when the caches run on glibc's rseq registration (the mode with a
    /// fast path), else 0. Set after `fast_rseq` (release).
    pub fast_slabs: AtomicUsize,
    /// For the fast path: glibc's `__rseq_offset` in the low 32 bits (signed), the offset of
    /// the slab index field in the thread's `struct rseq` in the high 32.
    pub fast_rseq: AtomicUsize,
    /// The cache mode (see `cache`).
    pub mode: AtomicU8,
    /// glibc's `__rseq_offset` (glibc mode).
    pub glibc_offset: AtomicIsize,
    /// The offset of the slab index in `struct rseq`: `mm_cid` or `cpu_id`.
    pub index_field: AtomicUsize,
    /// The per-CPU slabs (0: none).
    pub slabs: AtomicUsize,
    /// Class + 1 of each chunk, by `central::chunk_slot` (0: not handed out).
    pub chunk_class: [AtomicU8; MAX_CHUNKS],
}

/// Reached through [`hot`].
pub(crate) static HOT: Hot = Hot {
    region: AtomicUsize::new(0),
    fast_slabs: AtomicUsize::new(0),
    fast_rseq: AtomicUsize::new(0),
    mode: AtomicU8::new(0),
    glibc_offset: AtomicIsize::new(0),
    index_field: AtomicUsize::new(spindle_sync::percpu::rseq::CPU_ID),
    slabs: AtomicUsize::new(0),
    chunk_class: [const { AtomicU8::new(0) }; MAX_CHUNKS],
};

/// [`HOT`], its address computed from the instruction pointer (`lea`) instead of loaded from
/// the global offset table. rustc has the linker leave a static of another crate behind a GOT
/// entry even in a position-independent executable, and that load began both fast paths'
/// chains of dependent loads (`free`: GOT, then `chunk_class`, then the cache record). Lab
/// `alloc`, section `random-1`, times the fast paths against mimalloc (`docs/results.md`).
///
/// A PC-relative reference needs the static in the same linked object as the code: true of
/// executables (static ones too) and of `cdylib`s such as `spindle-alloc-preload`, whose
/// version script keeps the symbol local. A Rust `dylib` (`-C prefer-dynamic`) or a
/// `staticlib` linked into a C shared library without a version script would export the
/// symbol, and the link fails ("relocation R_X86_64_PC32 … recompile with -fPIC") rather than
/// reach another copy of it.
#[inline(always)]
pub(crate) fn hot() -> &'static Hot {
    #[cfg(target_arch = "x86_64")]
    {
        let p: *const Hot;
        // SAFETY: only computes HOT's address (no memory access), which lives for ever.
        unsafe {
            core::arch::asm!("lea {}, [rip + {}]", out(reg) p, sym HOT,
                options(pure, nomem, nostack, preserves_flags));
            &*p
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        &HOT
    }
}
