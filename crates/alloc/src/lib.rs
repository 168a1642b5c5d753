//! `spindle-alloc`: seed 001's lock-free, constant-time, zero-fragmentation allocator, with
//! per-CPU caches on restartable sequences in front of it.
//!
//! ```text
//!  malloc(n) ── class_of(n) ──► per-CPU cache (rseq stack of free blocks, ~5 instructions)
//!                                  │ empty                      ▲ full: half goes back
//!                                  ▼                            │
//!                               shared stack of batches per class (lock-free, cmpxchg16b)
//!                                  │ empty
//!                                  ▼
//!                               the class's frontier in its current 1 MiB span (CAS)
//!                                  │ region full
//!  n > 64 KiB ───────────────────► mmap / munmap per block (mremap for realloc)
//! ```
//!
//! - **Classes** ([`classes`]): each request is rounded up to one of 44 classes from 16 B to
//!   64 KiB; every class is a heap of equal blocks, so a freed block is as good as a fresh one
//!   and memory never splinters into holes that only smaller requests can use.
//! - **Caches** ([`cache`](crate::cache)): on glibc 2.35+ (or any Linux 4.18+ where we can
//!   register) each CPU has a stack of free blocks per class, popped and pushed by
//!   restartable sequences: no atomic instruction, no lock, no thread-local storage on
//!   glibc. Without rseq each thread has a cache of its own instead ([`cache_mode`] says
//!   which runs).
//! - **Shared stacks and spans** ([`central`](crate::central)): caches trade batches of half
//!   their capacity with a per-class lock-free stack; new blocks come from the class's span,
//!   carved by address arithmetic so that never-used blocks' pages stay untouched.
//! - **The OS** ([`os`]): one `MAP_NORESERVE` reservation of 64 GiB of address space (less
//!   where the system refuses), spans never unmapped; blocks above 64 KiB mapped one by
//!   one. **Returning memory:** a freed block of 16 KiB or more that goes to a shared stack
//!   already holding 1 MiB of its class gives its whole pages (all but the first, which holds
//!   the links) back with `MADV_DONTNEED`; a large block is unmapped when freed.
//!
//! Every operation is lock-free except the OS calls; the fast path is constant time.
//! Use it as Rust's allocator with `#[global_allocator] static A: SpindleAlloc = SpindleAlloc;`,
//! or for any program with `LD_PRELOAD` and the `spindle-alloc-preload` crate's library.

pub mod cache;
pub mod central;
pub mod classes;
pub mod os;
pub mod trace;

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;
use core::sync::atomic::Ordering::Relaxed;

use cache::Outcome;
use classes::{cache_capacity, class_aligned, class_of, size_of, CLASSES, MAX_SMALL};

/// The alignment every block has without asking (as `malloc` promises on x86-64).
pub const MIN_ALIGN: usize = 16;

/// A block of at least `size` bytes aligned to 16; null when memory is exhausted.
#[inline]
pub fn malloc(size: usize) -> *mut u8 {
    if size <= MAX_SMALL {
        alloc_class(class_of(size))
    } else {
        os::large_alloc(size, MIN_ALIGN)
    }
}

/// A block of at least `size` bytes aligned to `align` (a power of two); null when memory
/// is exhausted.
pub fn malloc_aligned(size: usize, align: usize) -> *mut u8 {
    if align <= MIN_ALIGN {
        return malloc(size);
    }
    match class_aligned(size, align) {
        Some(c) => alloc_class(c),
        None => os::large_alloc(size, align),
    }
}

/// Frees a block from this allocator (null is ignored).
///
/// # Safety
/// `p` is null or a live block of this allocator, not used afterwards.
#[inline]
pub unsafe fn free(p: *mut u8) {
    if let Some(c) = central::class_of_block(p) {
        match cache::push(c, p as usize) {
            Outcome::Done(_) => {}
            o => spill(c, p as usize, o),
        }
    } else if !p.is_null() {
        // SAFETY: not in the region and not null: a large block (the caller's contract).
        unsafe { os::large_free(p) }
    }
}

/// `n * size` zeroed bytes; null on overflow or exhaustion. Blocks above 64 KiB come from
/// fresh pages and are not cleared again.
pub fn calloc(n: usize, size: usize) -> *mut u8 {
    let Some(total) = n.checked_mul(size) else {
        return ptr::null_mut();
    };
    if total > MAX_SMALL {
        return os::large_alloc(total, MIN_ALIGN);
    }
    let p = malloc(total);
    if !p.is_null() {
        // SAFETY: a fresh block of at least `total` bytes.
        unsafe { ptr::write_bytes(p, 0, total) };
    }
    p
}

/// Resizes a block, keeping its contents up to the smaller size: in place while the new size
/// fits its class and uses at least half of it, with `mremap` above 64 KiB; `realloc(p, 0)`
/// frees `p` and returns null (as glibc does).
///
/// # Safety
/// As for [`free`]; on success `p` is not used afterwards.
pub unsafe fn realloc(p: *mut u8, size: usize) -> *mut u8 {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        // SAFETY: the caller's contract.
        unsafe { free(p) };
        return ptr::null_mut();
    }
    let old = if let Some(c) = central::class_of_block(p) {
        let have = size_of(c);
        if size <= have && size >= have / 2 {
            return p;
        }
        have
    } else {
        if size > MAX_SMALL {
            // SAFETY: a live large block.
            let q = unsafe { os::large_realloc(p, size) };
            if !q.is_null() {
                return q;
            }
        }
        // SAFETY: a live large block.
        unsafe { os::large_usable(p) }
    };
    let q = malloc(size);
    if !q.is_null() {
        // SAFETY: both blocks are live and distinct; min(old, size) fits in each.
        unsafe {
            ptr::copy_nonoverlapping(p, q, old.min(size));
            free(p);
        }
    }
    q
}

/// The bytes a block can hold (its class's size, or its mapping's length).
///
/// # Safety
/// `p` is a live block of this allocator.
pub unsafe fn usable_size(p: *mut u8) -> usize {
    match central::class_of_block(p) {
        Some(c) => size_of(c),
        None if p.is_null() => 0,
        // SAFETY: the caller's contract.
        None => unsafe { os::large_usable(p) },
    }
}

/// How the caches run in this process (decided on the first allocation).
pub fn cache_mode() -> &'static str {
    cache::mode_name()
}

#[inline(always)]
fn alloc_class(c: usize) -> *mut u8 {
    match cache::pop(c) {
        Outcome::Done(p) => p as *mut u8,
        o => refill(c, o),
    }
}

/// The cache was empty (or there is none): take a batch from the shared stack, or carve new
/// blocks, keep one for the caller and put the rest in the cache.
#[cold]
#[inline(never)]
fn refill(c: usize, o: Outcome) -> *mut u8 {
    let cached = o != Outcome::NoCache;
    if let Some(first) = central::pop_batch(c) {
        let (mut rest, mut took) = (central::next_in_batch(first), 1);
        while cached && rest != 0 {
            let next = central::next_in_batch(rest);
            match cache::push(c, rest) {
                Outcome::Done(_) => (rest, took) = (next, took + 1),
                _ => break,
            }
        }
        let mut left = 0;
        let mut q = rest;
        while q != 0 {
            left += 1;
            q = central::next_in_batch(q);
        }
        central::took_shared(c, took + left);
        if rest != 0 {
            central::push_batch(c, rest, left);
        }
        return first as *mut u8;
    }
    let want = if cached {
        cache_capacity(c).div_ceil(2)
    } else {
        1
    };
    let Some((first, n)) = central::carve(c, want) else {
        // The region is full: map the block alone, aligned as its class's blocks are.
        let size = size_of(c);
        return os::large_alloc(size, 1 << size.trailing_zeros());
    };
    let size = size_of(c);
    let mut i = 1;
    while i < n {
        match cache::push(c, first + i * size) {
            Outcome::Done(_) => i += 1,
            _ => break,
        }
    }
    if i < n {
        let b = first + i * size;
        for k in i..n - 1 {
            central::set_next_in_batch(first + k * size, first + (k + 1) * size);
        }
        central::set_next_in_batch(first + (n - 1) * size, 0);
        central::push_batch(c, b, n - i);
    }
    first as *mut u8
}

/// Blocks of classes this large may give their pages back (see the crate documentation).
const DISCARD_FROM: usize = 16384;
/// ... once the class's shared stack holds this many bytes.
const DISCARD_ABOVE: usize = 1 << 20;

/// The cache was full (or there is none): `p` and half the cache's blocks go to the shared
/// stack as one batch.
#[cold]
#[inline(never)]
fn spill(c: usize, p: usize, o: Outcome) {
    central::set_next_in_batch(p, 0);
    let (mut first, mut n) = (p, 1);
    if o == Outcome::Bounce {
        for _ in 0..cache_capacity(c) / 2 {
            match cache::pop(c) {
                Outcome::Done(q) => {
                    central::set_next_in_batch(q, first);
                    (first, n) = (q, n + 1);
                }
                _ => break,
            }
        }
    }
    let size = size_of(c);
    if size >= DISCARD_FROM && central::SHARED[c].load(Relaxed) * size >= DISCARD_ABOVE {
        let mut b = first;
        while b != 0 {
            let from = (b + 16 + os::PAGE - 1) & !(os::PAGE - 1);
            let to = (b + size) & !(os::PAGE - 1);
            if to > from {
                // SAFETY: whole pages inside a free block that we own until the push
                // below; its link words lie before `from`.
                unsafe { os::discard(from as *mut u8, to - from) };
            }
            b = central::next_in_batch(b);
        }
    }
    central::push_batch(c, first, n);
}

/// Empties a cache slab into the shared stacks (a thread cache at thread exit).
pub(crate) fn flush_slab(slab: usize) {
    for c in 0..CLASSES {
        let s = (slab + c * cache::CLASS_BYTES) as *mut usize;
        // SAFETY: a slab owned by the calling thread; the length is at most SLOTS.
        unsafe {
            let n = *s;
            if n == 0 {
                continue;
            }
            for k in 1..=n {
                let next = if k < n { *s.add(k + 1) } else { 0 };
                central::set_next_in_batch(*s.add(k), next);
            }
            *s = 0;
            central::push_batch(c, *s.add(1), n);
        }
    }
}

/// One class's blocks, by where they are.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassStats {
    /// The class's block size.
    pub size: usize,
    /// Blocks ever carved from spans.
    pub carved: usize,
    /// Blocks in the shared stack.
    pub shared: usize,
    /// Blocks in the per-CPU caches (thread caches are not counted: they look in use).
    pub cached: usize,
}

impl ClassStats {
    /// Blocks the program holds.
    pub fn in_use(&self) -> usize {
        self.carved.saturating_sub(self.shared + self.cached)
    }
}

/// A snapshot of the allocator (racy: each counter is read once, while others move).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Per class.
    pub classes: Vec<ClassStats>,
    /// Address space handed to classes (spans × 1 MiB); only the touched part is memory.
    pub span_bytes: usize,
    /// Bytes mapped for blocks above 64 KiB.
    pub large_bytes: usize,
}

impl Stats {
    /// Bytes in blocks the program holds (class sizes, not request sizes).
    pub fn in_use_bytes(&self) -> usize {
        self.classes.iter().map(|c| c.in_use() * c.size).sum()
    }

    /// Bytes ever carved: an upper bound on the class memory the process has touched.
    pub fn carved_bytes(&self) -> usize {
        self.classes.iter().map(|c| c.carved * c.size).sum()
    }

    /// The share of carved memory that sits free in caches and stacks (0 when every carved
    /// block is in use). Free blocks stay usable by any request of their class: this is
    /// memory held for later, not splinters.
    pub fn fragmentation(&self) -> f64 {
        let carved = self.carved_bytes();
        if carved == 0 {
            0.0
        } else {
            1.0 - self.in_use_bytes() as f64 / carved as f64
        }
    }
}

/// The allocator's counters now. Allocates (the result), so never call it from inside an
/// allocation.
pub fn stats() -> Stats {
    let classes = (0..CLASSES)
        .map(|c| ClassStats {
            size: size_of(c),
            carved: central::CARVED[c].load(Relaxed),
            shared: central::SHARED[c].load(Relaxed),
            cached: cache::cached(c),
        })
        .collect();
    Stats {
        classes,
        span_bytes: central::spans_used().0 * central::SPAN,
        large_bytes: os::LARGE_MAPPED.load(Relaxed),
    }
}

/// Rust's allocator interface: `#[global_allocator] static A: SpindleAlloc = SpindleAlloc;`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpindleAlloc;

// SAFETY: every block is at least the layout's size and aligned to its alignment (classes
// chosen by `class_aligned`, large blocks aligned by their mapping); blocks are freed only
// through `free`, which finds their class or mapping from the pointer alone.
unsafe impl GlobalAlloc for SpindleAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            malloc(layout.size())
        } else {
            malloc_aligned(layout.size(), layout.align())
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, _: Layout) {
        // SAFETY: the GlobalAlloc contract: p came from this allocator.
        unsafe { free(p) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            return calloc(1, layout.size());
        }
        let p = malloc_aligned(layout.size(), layout.align());
        if !p.is_null() && layout.size() <= MAX_SMALL {
            // SAFETY: a fresh block of at least size bytes.
            unsafe { ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            // SAFETY: the GlobalAlloc contract (size is non-zero).
            return unsafe { realloc(p, size) };
        }
        // SAFETY: p is live.
        let have = unsafe { usable_size(p) };
        if size <= have && size >= have / 2 {
            return p;
        }
        let q = malloc_aligned(size, layout.align());
        if !q.is_null() {
            // SAFETY: distinct live blocks; the copy fits both.
            unsafe {
                ptr::copy_nonoverlapping(p, q, layout.size().min(size));
                free(p);
            }
        }
        q
    }
}
