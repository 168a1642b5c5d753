//! The OS side: address space reserved with `mmap`, pages given back with `madvise`, and
//! blocks above the largest class mapped and unmapped one by one (seed 001: "anything larger
//! gets allocated directly by the OS").
//!
//! A large block is `[header page][the caller's bytes]`: the returned pointer is page
//! aligned (or aligned more, for requests that ask), and the 16 bytes before it hold the
//! mapping's start and length, so `free` needs no table. The header page costs one page of
//! memory per large block (at most 1/16 of a 64 KiB block).

use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use rustix::mm::{self, Advice, MapFlags, MremapFlags, ProtFlags};

/// The page size we assume for alignment and headers (x86-64).
pub const PAGE: usize = 4096;

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

/// A block of `size` bytes aligned to `align` straight from the OS; null on failure. Its
/// bytes are zero (fresh pages): `calloc` needs no `memset`.
pub fn large_alloc(size: usize, align: usize) -> *mut u8 {
    let align = align.max(PAGE);
    let Some(len) = size
        .checked_add(align)
        .and_then(|n| n.checked_add(PAGE - 1))
        .map(|n| n & !(PAGE - 1))
    else {
        return ptr::null_mut();
    };
    let base = reserve(len);
    if base.is_null() {
        return base;
    }
    // The first `align` boundary at least 16 bytes in (a page in, since align >= PAGE).
    let user = round_up(base as usize + 16, align);
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
    user as *mut u8
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
    let (base, len, _) = unsafe { header(p) };
    LARGE_MAPPED.fetch_sub(len, Relaxed);
    // SAFETY: the whole mapping of this block, which nobody uses any more.
    unsafe { release(base as *mut u8, len) };
}

/// Grows or shrinks a large block with `mremap` (the kernel moves page tables, not bytes);
/// null when the kernel refuses (the block is then unchanged). Only for blocks whose
/// alignment is at most a page, since a move keeps only page alignment.
///
/// # Safety
/// As for [`large_usable`].
pub unsafe fn large_realloc(p: *mut u8, size: usize) -> *mut u8 {
    // SAFETY: the caller's contract.
    let (old_base, old_len, over_aligned) = unsafe { header(p) };
    let Some(len) = size.checked_add(2 * PAGE - 1).map(|n| n & !(PAGE - 1)) else {
        return ptr::null_mut();
    };
    if over_aligned {
        return ptr::null_mut();
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
    } else {
        LARGE_MAPPED.fetch_sub(old_len - len, Relaxed);
    }
    (base + PAGE) as *mut u8
}
