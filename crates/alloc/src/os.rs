//! The OS side: address space reserved with `mmap`, pages given back with `madvise`, and
//! blocks above the largest class mapped and unmapped one by one (seed 001: "anything larger
//! gets allocated directly by the OS").
//!
//! A large block is `[header page][the caller's bytes]`: the returned pointer is page
//! aligned (or aligned more, for requests that ask), and the 16 bytes before it hold the
//! mapping's start and length, so `free` needs no table. The header page costs one page of
//! memory per large block (at most 1/16 of a 64 KiB block; on AArch64 the "page" is 64 KiB of
//! address space, see [`PAGE`], of which one kernel page is touched).

use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use rustix::mm::{self, Advice, MapFlags, MremapFlags, ProtFlags};

/// The page size we assume for alignment and headers: x86-64's 4 KiB.
#[cfg(not(target_arch = "aarch64"))]
pub const PAGE: usize = 4096;
/// On AArch64, 64 KiB: arm64 kernels run with 4, 16 or 64 KiB pages (RHEL's and others' use
/// 64 KiB), and every range this module unmaps, trims or gives back must be page aligned on
/// the kernel at hand, which alignment to the largest guarantees. A large block's header then
/// spans 64 KiB of address space, of which only its last 16 bytes are ever touched.
#[cfg(target_arch = "aarch64")]
pub const PAGE: usize = 65536;

/// Bytes currently mapped for large blocks.
pub static LARGE_MAPPED: AtomicUsize = AtomicUsize::new(0);
/// System calls made so far (mmap, munmap, madvise, mremap): the lab tells an operation that
/// was slow because it called the OS from one that was slow for another reason.
pub static OS_CALLS: AtomicUsize = AtomicUsize::new(0);

fn count_call() {
    OS_CALLS.fetch_add(1, Relaxed);
}

/// `len` bytes of fresh zeroed address space, readable and writable, not charged against
/// the commit limit until touched (`MAP_NORESERVE`); null on failure.
pub fn reserve(len: usize) -> *mut u8 {
    count_call();
    // SAFETY: a new anonymous private mapping at an address the kernel chooses.
    unsafe {
        mm::mmap_anonymous(
            ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::NORESERVE,
        )
    }
    .map_or(ptr::null_mut(), |p| p.cast())
}

/// Unmaps `[p, p + len)`.
///
/// # Safety
/// The range must be a mapping (or part of one) that nothing uses any more.
pub unsafe fn release(p: *mut u8, len: usize) {
    count_call();
    // SAFETY: the caller's contract. A failure (ENOMEM: splitting a mapping over the limit)
    // leaves the pages mapped: a leak, not an error the caller could act on.
    let _ = unsafe { mm::munmap(p.cast::<c_void>(), len) };
}

/// Gives the pages of `[p, p + len)` back to the OS: they read as zero when touched again.
///
/// # Safety
/// The range must be mapped, page aligned, and hold nothing anyone still needs.
pub unsafe fn discard(p: *mut u8, len: usize) {
    count_call();
    // SAFETY: the caller's contract.
    let _ = unsafe { mm::madvise(p.cast::<c_void>(), len, Advice::LinuxDontNeed) };
}

/// Asks for transparent huge pages on `[p, p + len)` (`MADV_HUGEPAGE`): fewer page faults
/// and TLB misses for the region's spans, where the system allows them.
///
/// # Safety
/// The range must be mapped.
pub unsafe fn advise_huge(p: *mut u8, len: usize) {
    count_call();
    // SAFETY: the caller's contract; advice only.
    let _ = unsafe { mm::madvise(p.cast::<c_void>(), len, Advice::LinuxHugepage) };
}

/// The header before a large block: the mapping's start, and its length with bit 0 set when
/// the block is aligned beyond a page (an `mremap` would keep only page alignment).
#[repr(C)]
struct Header {
    base: usize,
    len: usize,
}

const OVER_ALIGNED: usize = 1;

/// # Safety
/// `p` is a live large block (its header precedes it).
unsafe fn header(p: *mut u8) -> (usize, usize, bool) {
    // SAFETY: the caller's contract.
    let h = unsafe { ((p as usize - 16) as *const Header).read() };
    (h.base, h.len & !OVER_ALIGNED, h.len & OVER_ALIGNED != 0)
}

const fn round_up(x: usize, to: usize) -> usize {
    (x + to - 1) & !(to - 1)
}

/// A block of `size` bytes aligned to `align` from the OS (or a kept one, see [`keep`]);
/// null on failure.
pub fn large_alloc(size: usize, align: usize) -> *mut u8 {
    large_alloc_reused(size, align).0
}

/// [`large_alloc`], and whether the block was kept from an earlier free (its bytes are then
/// not zero; a fresh block's are, so `calloc` clears only kept ones).
pub fn large_alloc_reused(size: usize, align: usize) -> (*mut u8, bool) {
    if align <= PAGE {
        if let Some(p) = size
            .checked_add(2 * PAGE - 1)
            .and_then(|n| keep::take(n & !(PAGE - 1)))
        {
            return (p as *mut u8, true);
        }
    }
    (fresh(size, align), false)
}

/// A block of `size` bytes aligned to `align` straight from the OS; null on failure. Its
/// bytes are zero (fresh pages).
fn fresh(size: usize, align: usize) -> *mut u8 {
    let align = align.max(PAGE);
    #[cfg(not(target_arch = "aarch64"))]
    let Some(len) = size
        .checked_add(align)
        .and_then(|n| n.checked_add(PAGE - 1))
        .map(|n| n & !(PAGE - 1))
    else {
        return ptr::null_mut();
    };
    // On AArch64 the mapping is aligned to the kernel's page, which may be smaller than
    // `PAGE`: room for a whole `PAGE` of header before the first `align` boundary past it.
    #[cfg(target_arch = "aarch64")]
    let Some(len) = size
        .checked_add(PAGE - 1)
        .map(|n| n & !(PAGE - 1))
        .and_then(|n| n.checked_add(align))
        .and_then(|n| n.checked_add(PAGE))
    else {
        return ptr::null_mut();
    };
    let base = reserve(len);
    if base.is_null() {
        return base;
    }
    // The first `align` boundary at least 16 bytes in (a page in, since align >= PAGE and
    // the mapping is page aligned).
    #[cfg(not(target_arch = "aarch64"))]
    let user = round_up(base as usize + 16, align);
    // The first `align` boundary at least a `PAGE` in (the mapping need not be `PAGE`
    // aligned there).
    #[cfg(target_arch = "aarch64")]
    let user = round_up(base as usize + PAGE, align);
    let (head, tail) = (
        user - PAGE - base as usize,
        len - (user + round_up(size, PAGE) - base as usize),
    );
    // Trim what the alignment did not need: keep one page before the block for the header.
    // SAFETY: both ranges lie inside the mapping just made and hold nothing.
    unsafe {
        if head > 0 {
            release(base, head);
        }
        if tail > 0 {
            release((user + round_up(size, PAGE)) as *mut u8, tail);
        }
    }
    let (start, mapped) = (user - PAGE, PAGE + round_up(size, PAGE));
    // SAFETY: the header's 16 bytes lie in the header page, which is mapped and ours.
    unsafe {
        ((user - 16) as *mut Header).write(Header {
            base: start,
            len: mapped | usize::from(align > PAGE),
        })
    };
    LARGE_MAPPED.fetch_add(mapped, Relaxed);
    populate(user, round_up(size, PAGE));
    user as *mut u8
}

/// Large blocks up to this size are made resident when they are handed out.
pub const POPULATE_MAX: usize = 4 << 20;

/// Makes `[p, p + len)` resident and writable in one system call (`MADV_POPULATE_WRITE`,
/// Linux 5.14+) when `len` is at most [`POPULATE_MAX`]: programs write the buffers they ask
/// for, and this takes one system call instead of a page fault per 4 KiB page. Larger
/// ranges, and kernels without the advice, fault their pages in as they are touched.
fn populate(p: usize, len: usize) {
    if len == 0 || len > POPULATE_MAX {
        return;
    }
    count_call();
    // SAFETY: a range of a mapping this module just made for a block nobody else holds yet;
    // the advice only faults pages in (their contents stay zero).
    let _ = unsafe { mm::madvise(p as *mut c_void, len, Advice::LinuxPopulateWrite) };
}

/// The usable size of a large block (what the mapping holds after the pointer).
///
/// # Safety
/// `p` must come from [`large_alloc`] (or [`large_realloc`]) and not be freed yet.
pub unsafe fn large_usable(p: *mut u8) -> usize {
    // SAFETY: the caller's contract.
    let (base, len, _) = unsafe { header(p) };
    base + len - p as usize
}

/// Unmaps a large block.
///
/// # Safety
/// As for [`large_usable`]; the block is not used afterwards.
pub unsafe fn large_free(p: *mut u8) {
    // SAFETY: the caller's contract.
    let (base, len, over_aligned) = unsafe { header(p) };
    if !over_aligned && keep::put(base, len) {
        return;
    }
    LARGE_MAPPED.fetch_sub(len, Relaxed);
    // SAFETY: the whole mapping of this block, which nobody uses any more.
    unsafe { release(base as *mut u8, len) };
}

/// Resizes a large block: in place while it still fits and uses at least half of its
/// mapping; else, growing, into a kept block that fits (a copy); else with `mremap` (the
/// kernel moves page tables, not bytes). Null when the kernel refuses (the block is then
/// unchanged), and for blocks aligned beyond a page that must move (a move keeps only page
/// alignment).
///
/// # Safety
/// As for [`large_usable`].
pub unsafe fn large_realloc(p: *mut u8, size: usize) -> *mut u8 {
    // SAFETY: the caller's contract.
    let (old_base, old_len, over_aligned) = unsafe { header(p) };
    let Some(len) = size.checked_add(2 * PAGE - 1).map(|n| n & !(PAGE - 1)) else {
        return ptr::null_mut();
    };
    // Still fits, using at least half: in place, no system call (a kept block taken for a
    // growing buffer has room for its next steps).
    let usable = old_base + old_len - p as usize;
    if size <= usable && size >= usable / 2 {
        return p;
    }
    if over_aligned {
        return ptr::null_mut();
    }
    if len > old_len {
        // A kept block that fits: a copy instead of new pages from the kernel (a buffer that
        // doubles as it grows leaves each size it passed through in the kept blocks).
        if let Some(q) = keep::take(len) {
            // SAFETY: q is a kept block of at least `size` bytes, now ours; the old block's
            // usable bytes (fewer than `size`) are copied, then the old block is freed.
            unsafe {
                ptr::copy_nonoverlapping(p, q as *mut u8, old_base + old_len - p as usize);
                large_free(p);
            }
            return q as *mut u8;
        }
    }
    count_call();
    // SAFETY: remapping this block's whole mapping; the old addresses are not used again if
    // it moves (the caller takes the new pointer).
    let Ok(base) =
        (unsafe { mm::mremap(old_base as *mut c_void, old_len, len, MremapFlags::MAYMOVE) })
    else {
        return ptr::null_mut();
    };
    let base = base as usize;
    // SAFETY: the header page moved with the mapping.
    unsafe {
        ((base + PAGE - 16) as *mut Header).write(Header { base, len });
    }
    if len >= old_len {
        LARGE_MAPPED.fetch_add(len - old_len, Relaxed);
        // The pages the block grew by (a buffer that grows is written).
        populate(base + old_len, len - old_len);
    } else {
        LARGE_MAPPED.fetch_sub(old_len - len, Relaxed);
    }
    (base + PAGE) as *mut u8
}

/// Freed large blocks kept for the next large allocations: a program that allocates and
/// frees buffers of the same size (a growing string, a page cache, a sort buffer) would
/// otherwise pay, every time, for `mmap`, `munmap` and the kernel clearing every page.
///
/// At most [`keep::SLOTS`] blocks and [`keep::BYTES`] bytes are kept (each at most
/// [`keep::MAX_ONE`]), still mapped and resident; an allocation takes the smallest kept
/// block of at least the length it needs and at most twice it. The slots are guarded by a
/// flag taken with a swap and never waited for: a thread that finds it taken maps or unmaps
/// as if nothing were kept, so no thread ever blocks here (nor a child forked while another
/// thread held it, which just never keeps anything).
///
/// **Orderings.** The swap that takes the flag is an acquire and the store that clears it a
/// release, so each holder sees the slots as the last holder left them; the slot words are
/// read and written only while holding it. `KEPT` is also read without the flag, as a hint
/// (an empty cache skips the flag; a full one refuses early) and is checked again under it.
/// A block is owned by exactly one party: the freeing thread until its `put` clears the
/// flag, the cache until a `take` zeroes its slot, then the taker. The stress test
/// (`tests/stress.rs`, 1 % of its blocks above 64 KiB, 4 × cores threads) frees and
/// reallocates kept blocks from many threads and checks every block's stamp.
pub mod keep {
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

    /// Blocks kept at most.
    pub const SLOTS: usize = 16;
    /// Bytes kept at most, all blocks together.
    pub const BYTES: usize = 32 << 20;
    /// The largest block kept.
    pub const MAX_ONE: usize = 8 << 20;

    static BUSY: AtomicBool = AtomicBool::new(false);
    /// (mapping base, mapping length) per slot; 0 length: empty. Accessed under `BUSY`.
    static BASE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    static LEN: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    static KEPT: AtomicUsize = AtomicUsize::new(0);

    fn locked<R>(f: impl FnOnce() -> Option<R>) -> Option<R> {
        if BUSY.swap(true, Acquire) {
            return None;
        }
        let r = f();
        BUSY.store(false, Release);
        r
    }

    /// A kept block whose mapping is `need` bytes or up to twice that: its user pointer.
    pub(super) fn take(need: usize) -> Option<usize> {
        if KEPT.load(Relaxed) == 0 {
            return None;
        }
        locked(|| {
            let best = (0..SLOTS)
                .filter(|&i| (need..=need.saturating_mul(2)).contains(&LEN[i].load(Relaxed)))
                .min_by_key(|&i| LEN[i].load(Relaxed))?;
            let (base, len) = (BASE[best].load(Relaxed), LEN[best].swap(0, Relaxed));
            KEPT.fetch_sub(len, Relaxed);
            Some(base + super::PAGE)
        })
    }

    /// Keeps the block mapped at `[base, base + len)`; false if there is no room.
    pub(super) fn put(base: usize, len: usize) -> bool {
        if len > MAX_ONE || KEPT.load(Relaxed) + len > BYTES {
            return false;
        }
        locked(|| {
            if KEPT.load(Relaxed) + len > BYTES {
                return None;
            }
            let i = (0..SLOTS).find(|&i| LEN[i].load(Relaxed) == 0)?;
            BASE[i].store(base, Relaxed);
            LEN[i].store(len, Relaxed);
            KEPT.fetch_add(len, Relaxed);
            Some(())
        })
        .is_some()
    }

    /// Bytes kept now.
    pub fn bytes() -> usize {
        KEPT.load(Relaxed)
    }
}
