//! The shared side: one reserved region of address space cut into spans, each span serving
//! one class; per class, a *frontier* (the next never-used block) and a lock-free stack of
//! free *batches* that the per-CPU caches trade with.
//!
//! # Words
//! - `REGION`: the base of one `MAP_NORESERVE` reservation, chunk aligned, with log2 of its
//!   length in chunks in the low bits (one word, claimed by CAS: 0 until the first
//!   allocation); the region is aligned to its length. The winner then publishes it for
//!   readers as `REGION_BASE`, then `HOT.region` (base | log2 of the length, for `free`)
//!   and last `REGION_BYTES` (release). A reader that sees them set (acquire) sees the base;
//!   one that does not treats every pointer as outside the region, which is right: no
//!   region block can have been handed out before the publication, because `carve` takes the
//!   region only from the published words (a thread that loses the CAS waits for them).
//!   `NEXT_CHUNK` is the first chunk no class has taken.
//! - `HOT.chunk_class[chunk_slot(a)]`: class + 1 of the chunk holding address `a` (0: not handed
//!   out). Written once, before the chunk's first block leaves the allocator; `free` reads it
//!   to find a block's class.
//! - per class `FRONTIER`: `(span << 32) | next block`, one word, moved by CAS; blocks past
//!   `next` in that span have never been handed out, so their pages are untouched.
//! - per class `STACK`: `(top, tag)` in 16 bytes, moved only by a 16-byte CAS (`cmpxchg16b`;
//!   on AArch64 `ldaxp`/`stlxp`). A batch is a chain of free blocks through each block's first
//!   word, which holds the next block's address (low 48 bits) and how many blocks follow (high
//!   16: the caches' list words have the same form, see [`link_word`]); its first block's
//!   second word holds the next batch in the stack (low 48 bits) and the batch's length (high
//!   16).
//!
//! # Protocols
//! (The stack's code is in [`stack`](crate::stack), shared with its loom models.)
//! ```text
//! push(b, k): loop { (t, g) = STACK; b.w1 = (t, k); CAS(STACK, (t, g) → (b, g+1)) } (lin.: CAS)
//! pop():      loop { (t, g) = STACK; t == 0: empty; (n, k) = t.w1
//!                    CAS(STACK, (t, g) → (n, g+1)) → (t, k) }                    (lin.: CAS)
//! carve(k): loop { (s, i) = FRONTIER; i < per_span(s): CAS((s, i) → (s, i + k')) → blocks
//!                  else: s' = NEXT_CHUNK += k (or fail); HOT.chunk_class[s'..] = c
//!                        CAS((s, i) → (s', 0)) }
//! ```
//! **ABA.** `pop` reads `t.w1` from a block that another thread may have popped, used and
//! pushed back meanwhile; the tag grows on every push and pop, so the CAS then fails (a
//! 64-bit tag does not wrap). The read itself is always of mapped memory: region spans are
//! never unmapped (only `madvise`d, after which they read as zero), so a stale `t` is
//! harmless. **Memory model:** 8-byte loads of the pair race with the 16-byte locked CAS:
//! mixed-size atomics, outside Rust's model but defined on x86-64 (aligned 8-byte loads do
//! not tear against a locked read-modify-write, and TSO keeps the two loads in order); a
//! torn pair only fails the CAS. The CAS is a full barrier: a batch's links, written before
//! its push, are visible to whoever pops it. On AArch64 the CAS is an exclusive pair
//! (`ldaxp`/`stlxp`, see [`stack`](crate::stack)) and the architecture gives the same
//! facts without TSO: an aligned 8-byte load is single-copy atomic against the pair's store;
//! the two loads are `Acquire` (`ldar`), so they stay in order; and the pair's store-release,
//! read by a popper's `Acquire` load of `top`, carries the links written before the push. **Lock-freedom:** every failed CAS means
//! another thread's succeeded. A carve that loses the race to install a new span abandons
//! that span: 1 MiB of address space, never touched, so no memory.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};

use crate::classes::{size_of, CLASSES};
use crate::hot::hot;
use crate::os;
use crate::stack::{link, Stack};

/// The region is cut into chunks of this size; a class's span is 1 to 8 consecutive chunks
/// (at least eight blocks), handed out in order of need, so that small programs' classes
/// share 2 MiB pages.
pub const CHUNK: usize = 1 << 16;
/// Chunks in a full region: 64 GiB of address space (not memory: pages are touched on use).
pub const MAX_CHUNKS: usize = 1 << 20;

static REGION: AtomicUsize = AtomicUsize::new(0);
static REGION_BASE: AtomicUsize = AtomicUsize::new(0);
static REGION_BYTES: AtomicUsize = AtomicUsize::new(0);
static NEXT_CHUNK: AtomicUsize = AtomicUsize::new(0);

const NO_SPAN: u64 = u32::MAX as u64;
static FRONTIER: [AtomicU64; CLASSES] = [const { AtomicU64::new(NO_SPAN << 32) }; CLASSES];
/// Blocks ever carved from spans, per class.
pub static CARVED: [AtomicUsize; CLASSES] = [const { AtomicUsize::new(0) }; CLASSES];
/// Blocks sitting in the shared stacks, per class.
pub static SHARED: [AtomicUsize; CLASSES] = [const { AtomicUsize::new(0) }; CLASSES];

#[repr(C, align(64))]
struct Padded(Stack);

static STACKS: [Padded; CLASSES] = [const { Padded(Stack::new()) }; CLASSES];

/// The region's base and length, reserving it on first use (every racing thread reserves;
/// the losers unmap theirs). Tries 64 GiB, then smaller, for a strict overcommit policy or
/// an address-space limit; `(0, 0)` if nothing could be reserved.
fn region() -> (usize, usize) {
    match REGION_BYTES.load(Acquire) {
        0 => reserve_region(),
        len => (REGION_BASE.load(Relaxed), len / CHUNK),
    }
}

/// Transparent huge pages on the region (`MADV_HUGEPAGE`) unless `SPINDLE_ALLOC_THP=0` is in
/// the environment: a 2 MiB page costs one fault instead of 512, and chunks of different
/// classes share it. `spindle lab alloc` reports page faults per call beside the peers'.
fn huge_pages_wanted() -> bool {
    extern "C" {
        fn getenv(name: *const core::ffi::c_char) -> *const core::ffi::c_char;
    }
    // SAFETY: getenv reads the environment without allocating; the string is read at once.
    let v = unsafe { getenv(c"SPINDLE_ALLOC_THP".as_ptr()) };
    // SAFETY: a NUL-terminated string from getenv.
    v.is_null() || unsafe { core::ffi::CStr::from_ptr(v) }.to_bytes() != b"0"
}

/// Reserves the region aligned to its own length (twice the length reserved, the excess
/// unmapped), so that `free` finds a pointer's chunk with a shift and a mask, without first
/// loading the base: a chunk's slot in `HOT.chunk_class` is [`chunk_slot`] of its address.
#[cold]
fn reserve_region() -> (usize, usize) {
    let mut chunks = MAX_CHUNKS;
    while chunks >= 256 {
        let len = chunks * CHUNK;
        let raw = os::reserve(2 * len);
        if !raw.is_null() {
            let base = (raw as usize + len - 1) & !(len - 1);
            let (head, tail) = (base - raw as usize, raw as usize + len - base);
            // SAFETY: the parts of our fresh reservation outside [base, base + len).
            unsafe {
                if head > 0 {
                    os::release(raw, head);
                }
                if tail > 0 {
                    os::release((base + len) as *mut u8, tail);
                }
            }
            let w = base | chunks.trailing_zeros() as usize;
            match REGION.compare_exchange(0, w, AcqRel, Acquire) {
                Ok(_) => {
                    if huge_pages_wanted() {
                        // SAFETY: our fresh reservation.
                        unsafe { os::advise_huge(base as *mut u8, len) };
                    }
                    REGION_BASE.store(base, Relaxed);
                    hot()
                        .region
                        .store(base | len.trailing_zeros() as usize, Release);
                    REGION_BYTES.store(len, Release);
                    return (base, chunks);
                }
                Err(_) => {
                    // SAFETY: our own reservation, never used.
                    unsafe { os::release(base as *mut u8, len) };
                    // The winner publishes in a moment (once per process).
                    loop {
                        match REGION_BYTES.load(Acquire) {
                            0 => std::thread::yield_now(),
                            n => return (REGION_BASE.load(Relaxed), n / CHUNK),
                        }
                    }
                }
            }
        }
        chunks /= 4;
    }
    (0, 0)
}

/// The slot in `HOT.chunk_class` of the chunk holding `addr`: distinct for the region's chunks,
/// since the region is at most `MAX_CHUNKS` chunks and aligned to its length.
#[inline(always)]
fn chunk_slot(addr: usize) -> usize {
    (addr / CHUNK) & (MAX_CHUNKS - 1)
}

/// The class of a block in the region, or None for a pointer outside it.
#[inline(always)]
pub fn class_of_block(p: *mut u8) -> Option<usize> {
    let p = p as usize;
    // The slot's load needs nothing loaded first; the region test runs beside it: p is in
    // the region when it agrees with the base above the length's bit (before publication
    // the word is 0 and the shift 0, so only null would pass, and its slot holds 0 then).
    let c = hot().chunk_class[chunk_slot(p)].load(Relaxed);
    let w = hot().region.load(Acquire);
    if (p ^ w) >> (w & 63) != 0 || c == 0 {
        return None;
    }
    Some(c as usize - 1)
}

/// Chunks in a span of class `c`: room for at least eight blocks.
const fn span_chunks(c: usize) -> usize {
    (8 * size_of(c)).div_ceil(CHUNK)
}

/// Blocks of class `c` in one span.
const fn per_span(c: usize) -> u64 {
    (span_chunks(c) * CHUNK / size_of(c)) as u64
}

/// Up to `k` never-used consecutive blocks of class `c`: their first address and count;
/// `None` when the region is full (or could not be reserved).
pub fn carve(c: usize, k: usize) -> Option<(usize, usize)> {
    let f = &FRONTIER[c];
    let mut cur = f.load(Acquire);
    loop {
        let (span, next) = (cur >> 32, cur & 0xffff_ffff);
        if span != NO_SPAN && next < per_span(c) {
            let take = (k as u64).min(per_span(c) - next);
            match f.compare_exchange_weak(cur, cur + take, AcqRel, Acquire) {
                Ok(_) => {
                    CARVED[c].fetch_add(take as usize, Relaxed);
                    let base = REGION_BASE.load(Relaxed);
                    let first = base + span as usize * CHUNK + next as usize * size_of(c);
                    return Some((first, take as usize));
                }
                Err(now) => cur = now,
            }
            continue;
        }
        let (_, chunks) = region();
        let k = span_chunks(c);
        let s = NEXT_CHUNK.fetch_add(k, Relaxed);
        if s + k > chunks {
            return None;
        }
        let base = REGION_BASE.load(Relaxed);
        for i in s..s + k {
            hot().chunk_class[chunk_slot(base + i * CHUNK)].store(c as u8 + 1, Relaxed);
        }
        match f.compare_exchange(cur, (s as u64) << 32, AcqRel, Acquire) {
            Ok(_) => cur = (s as u64) << 32,
            // Someone else installed a span: ours is abandoned (address space only).
            Err(now) => cur = now,
        }
    }
}

/// `p`'s link word: the rest of its list or batch after it, packed as (the next block's
/// address, how many blocks follow `p`), 0 at the end. Every list and batch keeps this
/// invariant, so a cache's `pop` installs the link word as the list word, without counting.
#[inline(always)]
pub fn link_word(p: usize) -> usize {
    // SAFETY: p is a region block (mapped for the process's life).
    unsafe { link(p, 0) }.load(Relaxed)
}

/// The next block in `p`'s batch (0 at its end).
#[inline(always)]
pub fn next_in_batch(p: usize) -> usize {
    link_word(p) & ((1 << 48) - 1)
}

/// Sets `p`'s link word (packed as in [`link_word`]).
#[inline(always)]
pub fn set_link_word(p: usize, w: usize) {
    // SAFETY: as in link_word.
    unsafe { link(p, 0) }.store(w, Relaxed)
}

/// Chains `n` consecutive blocks of `size` bytes from `first` into a batch (links as in
/// [`link_word`]).
pub fn link_run(first: usize, n: usize, size: usize) {
    for k in 0..n {
        let rest = n - 1 - k;
        let next = if rest == 0 { 0 } else { first + (k + 1) * size };
        set_link_word(first + k * size, next | (rest << 48));
    }
}

/// Pushes a batch (blocks chained through their link words, [`link_word`], `n` of them, at most
/// 65 535) of class `c`.
pub fn push_batch(c: usize, first: usize, n: usize) {
    SHARED[c].fetch_add(n, Relaxed);
    // SAFETY: the batch's blocks are region blocks the caller owns.
    unsafe { STACKS[c].0.push(first, n) }
}

/// Pops a batch of class `c`: its first block (the rest follow through [`next_in_batch`])
/// and its length.
pub fn pop_batch(c: usize) -> Option<(usize, usize)> {
    // SAFETY: only region blocks are ever pushed.
    let (first, n) = unsafe { STACKS[c].0.pop() }?;
    SHARED[c].fetch_sub(n, Relaxed);
    Some((first, n))
}

/// Chunks handed out to classes so far and the region's capacity in chunks.
pub fn chunks_used() -> (usize, usize) {
    let chunks = REGION_BYTES.load(Acquire) / CHUNK;
    (NEXT_CHUNK.load(Relaxed).min(chunks), chunks)
}
