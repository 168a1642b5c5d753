//! The allocator's entry points (re-exported at the crate root), its slow paths and its
//! statistics.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;

use crate::{central, os};
use core::sync::atomic::Ordering::Relaxed;

use crate::cache::{self, Outcome};
use crate::classes::{cache_capacity, class_aligned, class_of, size_of, CLASSES, MAX_SMALL};

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
        if !cache::push_fast(c, p as usize) {
            spill(c, p as usize);
        }
    } else if !p.is_null() {
        // SAFETY: not in the region and not null: a large block (the caller's contract).
        unsafe { os::large_free(p) }
    }
}

/// `n * size` zeroed bytes; null on overflow or exhaustion. Blocks above 64 KiB fresh from
/// the OS are zero already and are not cleared again (kept ones are).
pub fn calloc(n: usize, size: usize) -> *mut u8 {
    let Some(total) = n.checked_mul(size) else {
        return ptr::null_mut();
    };
    if total > MAX_SMALL {
        let (p, reused) = os::large_alloc_reused(total, MIN_ALIGN);
        if reused {
            // SAFETY: a block of at least `total` bytes, ours.
            unsafe { ptr::write_bytes(p, 0, total) };
        }
        return p;
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
    match cache::pop_fast(c) {
        Some(p) => p as *mut u8,
        None => refill(c),
    }
}

/// The fast path found nothing: pop again in whichever mode the caches are (the mode may be
/// undecided, or this thread on a thread cache); if both lists and the run are empty, take a
/// batch from the shared stack (installed as `list[0]`), else a new run from the class's
/// span. Each step is O(1).
#[cold]
#[inline(never)]
fn refill(c: usize) -> *mut u8 {
    use crate::cache::{addr, count, info, pack, BUMP, INFO, LIST0};
    let o = cache::pop(c);
    if let Outcome::Done(p) = o {
        return p as *mut u8;
    }
    if o == Outcome::NoCache {
        return alone(c);
    }
    cache::watch_exit();
    let size = size_of(c);
    for _ in 0..4 {
        let Some([l0, l1, bump, i]) = cache::read(c) else {
            break;
        };
        if i == 0 {
            // A record this class has not used yet (see `cache::info`).
            cache::swap(c, INFO, 0, info(c));
        }
        // (Blocks in a list or the run: this thread moved, or another one on this CPU freed,
        // since its pop; pop again.)
        if addr(l0) == 0 && addr(l1) == 0 && count(bump) == 0 {
            if let Some((first, n)) = central::pop_batch(c) {
                // The rest of the batch, already in a list word's form.
                let rest = central::link_word(first);
                debug_assert_eq!(count(rest), n - 1);
                if n > 1 && cache::swap(c, LIST0, 0, rest) != Outcome::Done(0) {
                    central::push_batch(c, addr(rest), n - 1);
                }
                return first as *mut u8;
            }
            let Some((first, n)) = central::carve(c, cache_capacity(c)) else {
                return os::large_alloc(size, 1 << size.trailing_zeros());
            };
            if n > 1 && cache::swap(c, BUMP, bump, pack(first + size, n - 1)) != Outcome::Done(0) {
                // Rare (this thread moved between the read and the swap): the run goes to the
                // shared stack, linked.
                central::link_run(first + size, n - 1, size);
                central::push_batch(c, first + size, n - 1);
            }
            return first as *mut u8;
        }
        if let Outcome::Done(p) = cache::pop(c) {
            return p as *mut u8;
        }
    }
    alone(c)
}

/// An allocation without a cache (the mode being decided, a thread exiting): a batch's first
/// block (the rest goes back), or one block carved alone.
fn alone(c: usize) -> *mut u8 {
    if let Some((first, n)) = central::pop_batch(c) {
        if n > 1 {
            central::push_batch(c, central::next_in_batch(first), n - 1);
        }
        return first as *mut u8;
    }
    match central::carve(c, 1) {
        Some((p, _)) => p as *mut u8,
        None => {
            let size = size_of(c);
            os::large_alloc(size, 1 << size.trailing_zeros())
        }
    }
}

/// Blocks of classes this large may give their pages back (see the crate documentation).
const DISCARD_FROM: usize = 16384;
/// ... once the class's shared stack holds this many bytes.
const DISCARD_ABOVE: usize = 1 << 20;

/// `list[0]` was full: move it to `list[1]` if that is empty, else first hand `list[1]` to the
/// shared stack whole. Each step is O(1).
#[cold]
#[inline(never)]
fn spill(c: usize, p: usize) {
    use crate::cache::{addr, count, info, INFO, LIST0, LIST1};
    let o = cache::push(c, p);
    if o == Outcome::Done(0) {
        return;
    }
    if o != Outcome::NoCache {
        cache::watch_exit();
        for _ in 0..4 {
            let Some([l0, l1, _, i]) = cache::read(c) else {
                break;
            };
            if i == 0 {
                // A record this class has not used yet (see `cache::info`).
                cache::swap(c, INFO, 0, info(c));
            }
            if count(l0) >= cache_capacity(c) {
                if addr(l1) != 0 {
                    // Taken, so ours: to the shared stack.
                    if cache::swap(c, LIST1, l1, 0) == Outcome::Done(0) {
                        give_back(c, addr(l1), count(l1));
                    }
                } else if cache::swap(c, LIST0, l0, 0) == Outcome::Done(0)
                    && cache::swap(c, LIST1, 0, l0) != Outcome::Done(0)
                {
                    // Taken, then list[1] filled meanwhile (or we moved): to the shared stack.
                    give_back(c, addr(l0), count(l0));
                }
            }
            if cache::push(c, p) == Outcome::Done(0) {
                return;
            }
        }
    }
    central::set_link_word(p, 0);
    give_back(c, p, 1);
}

/// Pushes a batch to the shared stack, first giving back the pages of large blocks when the
/// stack already holds enough of the class (the documented policy).
fn give_back(c: usize, first: usize, n: usize) {
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

/// Hands the two lists of every class in the record this thread runs on to the shared
/// stacks (at the exit of a thread on per-CPU caches, see `cache::watch_exit`). The run of
/// never-used blocks stays: it is address space, not memory, and the record's next user
/// takes it.
pub(crate) fn flush_lists() {
    use crate::cache::{addr, count, LIST0, LIST1};
    for c in 0..CLASSES {
        for off in [LIST0, LIST1] {
            // A swap fails only if the word changed between the read and the swap (this
            // thread moved, or another one on this CPU used the record meanwhile).
            for _ in 0..4 {
                let Some(w) = cache::read(c) else {
                    return;
                };
                let l = w[off / 8];
                if addr(l) == 0 {
                    break;
                }
                if cache::swap(c, off, l, 0) == Outcome::Done(0) {
                    give_back(c, addr(l), count(l));
                    break;
                }
            }
        }
    }
}

/// Empties a thread's slab into the shared stacks (at thread exit).
pub(crate) fn flush_slab(slab: usize) {
    use crate::cache::{addr, count, BUMP, LIST0, LIST1, RECORD};
    for c in 0..CLASSES {
        let r = slab + c * RECORD;
        // SAFETY: a slab owned by the calling thread, read and cleared before it goes.
        let w = |off: usize| unsafe { core::mem::replace(&mut *((r + off) as *mut usize), 0) };
        for l in [w(LIST0), w(LIST1)] {
            if addr(l) != 0 {
                central::push_batch(c, addr(l), count(l));
            }
        }
        let b = w(BUMP);
        let (first, n, size) = (addr(b), count(b), size_of(c));
        if n > 0 {
            central::link_run(first, n, size);
            central::push_batch(c, first, n);
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
    /// Address space handed to classes (64 KiB chunks); only the touched part is memory.
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
        span_bytes: central::chunks_used().0 * central::CHUNK,
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
        if layout.size() > MAX_SMALL {
            let (p, reused) = os::large_alloc_reused(layout.size(), layout.align());
            if reused {
                // SAFETY: a block of at least size bytes, ours.
                unsafe { ptr::write_bytes(p, 0, layout.size()) };
            }
            return p;
        }
        let p = malloc_aligned(layout.size(), layout.align());
        if !p.is_null() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{addr, count};

    /// Walks a list or batch from the packed word `w`, checking that every block's link word
    /// says how many blocks follow it (the invariant `pop` relies on to install it as is).
    fn check_chain(w: usize) {
        let (mut a, mut left) = (addr(w), count(w));
        while a != 0 {
            let l = central::link_word(a);
            assert_eq!(
                count(l),
                left - 1,
                "a link word miscounts the rest of its list"
            );
            left -= 1;
            a = addr(l);
        }
        assert_eq!(
            left, 0,
            "a list word counts more blocks than its chain holds"
        );
    }

    #[test]
    fn link_words_count_the_rest_of_every_list_and_batch() {
        let c = class_of(3000);
        let mut held = Vec::new();
        let mut x = 12345u64;
        for _ in 0..200 {
            // Up to three lists' worth at once: spills to the shared stack and refills from it.
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = 1 + (x >> 33) as usize % (3 * cache_capacity(c));
            held.extend((0..k).map(|_| malloc(3000)));
            assert!(held.iter().all(|p| !p.is_null()));
            for p in held.drain(..) {
                // SAFETY: blocks from malloc above, freed once.
                unsafe { free(p) };
            }
            if let Some([l0, l1, _, _]) = cache::read(c) {
                check_chain(l0);
                check_chain(l1);
            }
        }
        let mut batches = Vec::new();
        while let Some((first, n)) = central::pop_batch(c) {
            check_chain(first | (n << 48));
            batches.push((first, n));
        }
        assert!(
            !batches.is_empty(),
            "the test never reached the shared stack"
        );
        for (first, n) in batches {
            central::push_batch(c, first, n);
        }
    }
}
