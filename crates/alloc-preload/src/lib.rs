//! `libspindle_alloc_preload.so`: the C allocation functions on top of `spindle-alloc`, for
//! unmodified programs:
//!
//! ```sh
//! cargo build --release -p spindle-alloc-preload
//! LD_PRELOAD=target/release/libspindle_alloc_preload.so python3 script.py
//! ```
//!
//! glibc lets a preloaded library replace `malloc`, `free`, `calloc` and `realloc` (and, to
//! stay consistent, `aligned_alloc`, `malloc_usable_size`, `memalign`, `posix_memalign`,
//! `pvalloc` and `valloc`); its own functions that allocate (`strdup`, `reallocarray`,
//! `fopen` …) then call ours. Errors follow C: null with `errno = ENOMEM` (or `EINVAL` for a
//! bad alignment).
//!
//! Setting `SPINDLE_ALLOC_TRACE=FILE` also records every call into `FILE.PID`
//! ([`spindle_alloc::trace`]), which `spindle alloc record` drives.

//!
//! Thread-local storage: on glibc with rseq (2.35+) the fast path uses none. The own-
//! registration and per-thread modes read Rust thread-locals, which in a shared library go
//! through `__tls_get_addr`; glibc 2.39 (fixed in 2.40) could recurse into `malloc` there
//! after a `dlopen` of a library with thread-locals.

use core::ffi::c_void;

use spindle_alloc as sa;

const ENOMEM: i32 = 12;
const EINVAL: i32 = 22;

extern "C" {
    fn __errno_location() -> *mut i32;
}

fn set_errno(e: i32) {
    // SAFETY: glibc's per-thread errno.
    unsafe { *__errno_location() = e };
}

fn out(p: *mut u8) -> *mut c_void {
    if p.is_null() {
        set_errno(ENOMEM);
    }
    p.cast()
}

/// # Safety
/// C's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    let p = out(sa::malloc(size));
    sa::trace::event(sa::trace::Op::Malloc, size, 0, p as usize);
    p
}

/// # Safety
/// C's `free`.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if !p.is_null() {
        sa::trace::event(sa::trace::Op::Free, 0, p as usize, 0);
    }
    // SAFETY: C's contract: p is null or ours.
    unsafe { sa::free(p.cast()) }
}

/// # Safety
/// C's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let p = out(sa::calloc(n, size));
    sa::trace::event(sa::trace::Op::Malloc, n.saturating_mul(size), 0, p as usize);
    p
}

/// # Safety
/// C's `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    let slot = sa::trace::begin();
    // SAFETY: C's contract.
    let q = unsafe { sa::realloc(p.cast(), size) };
    if q.is_null() && size != 0 {
        set_errno(ENOMEM);
    }
    sa::trace::finish(slot, sa::trace::Op::Realloc, size, p as usize, q as usize);
    q.cast()
}

fn aligned(align: usize, size: usize) -> *mut c_void {
    // glibc's memalign (and aligned_alloc, its alias in 2.36) rounds an alignment that is not
    // a power of two up to one, and serves small ones like malloc.
    let Some(align) = align.max(1).checked_next_power_of_two() else {
        set_errno(EINVAL);
        return core::ptr::null_mut();
    };
    let p = out(sa::malloc_aligned(size, align));
    sa::trace::event(sa::trace::Op::Malloc, size, 0, p as usize);
    p
}

/// # Safety
/// C's `posix_memalign`.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out_p: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || align % core::mem::size_of::<usize>() != 0 {
        return EINVAL;
    }
    let p = sa::malloc_aligned(size, align);
    if p.is_null() {
        return ENOMEM;
    }
    sa::trace::event(sa::trace::Op::Malloc, size, 0, p as usize);
    // SAFETY: C's contract: out_p is writable.
    unsafe { *out_p = p.cast() };
    0
}

/// # Safety
/// C's `aligned_alloc`.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// # Safety
/// C's (obsolete) `memalign`.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// # Safety
/// C's (obsolete) `valloc`.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(sa::os::PAGE, size)
}

/// # Safety
/// C's (obsolete) `pvalloc`.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let Some(rounded) = size.checked_add(sa::os::PAGE - 1) else {
        set_errno(ENOMEM);
        return core::ptr::null_mut();
    };
    aligned(sa::os::PAGE, rounded & !(sa::os::PAGE - 1))
}

/// # Safety
/// glibc's `malloc_usable_size`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    // SAFETY: C's contract: p is null or a live block of ours.
    unsafe { sa::usable_size(p.cast()) }
}
