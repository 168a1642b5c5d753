//! Large blocks kept after `free` (`os::keep`): reused by the next allocation that fits,
//! cleared for `calloc` and zeroed allocation, and never more than the documented bounds.
//! (A process of its own: the other tests' large blocks would share the slots.)

use std::alloc::{GlobalAlloc, Layout};

use spindle_alloc::os::keep;
use spindle_alloc::SpindleAlloc;

#[test]
fn kept_blocks_are_reused_cleared_when_asked_and_bounded() {
    const MIB: usize = 1 << 20;
    let p = spindle_alloc::malloc(MIB);
    assert!(!p.is_null());
    // SAFETY: a block of MIB bytes.
    unsafe { p.write_bytes(0xab, MIB) };
    // SAFETY: p is live and not used again.
    unsafe { spindle_alloc::free(p) };
    assert!(keep::bytes() >= MIB, "a freed 1 MiB block is kept");

    let q = spindle_alloc::malloc(MIB - 4096);
    assert_eq!(q, p, "the kept block serves the next allocation that fits");
    // SAFETY: q is live.
    unsafe { spindle_alloc::free(q) };

    let z = spindle_alloc::calloc(1, MIB);
    assert_eq!(z, p, "calloc takes the kept block too");
    // SAFETY: z holds MIB bytes.
    let bytes = unsafe { std::slice::from_raw_parts(z, MIB) };
    assert!(bytes.iter().all(|&b| b == 0), "calloc clears a kept block");
    // SAFETY: z is live.
    unsafe { z.write_bytes(0xcd, MIB) };
    // SAFETY: z is live and not used again.
    unsafe { spindle_alloc::free(z) };

    let a = SpindleAlloc;
    let l = Layout::from_size_align(MIB, 4096).unwrap();
    // SAFETY: a non-zero layout.
    let w = unsafe { a.alloc_zeroed(l) };
    assert_eq!(w, p, "page-aligned zeroed allocation takes the kept block");
    // SAFETY: w holds MIB bytes.
    let bytes = unsafe { std::slice::from_raw_parts(w, MIB) };
    assert!(
        bytes.iter().all(|&b| b == 0),
        "alloc_zeroed clears a kept block"
    );
    // SAFETY: w came from `a` with layout l.
    unsafe { a.dealloc(w, l) };

    // Far more than the bounds allow: the rest are unmapped.
    let many: Vec<*mut u8> = (0..40).map(|_| spindle_alloc::malloc(4 * MIB)).collect();
    for &m in &many {
        // SAFETY: live blocks, freed once.
        unsafe { spindle_alloc::free(m) };
    }
    assert!(keep::bytes() <= keep::BYTES);
    let huge = spindle_alloc::malloc(keep::MAX_ONE * 2);
    let before = keep::bytes();
    // SAFETY: live, freed once.
    unsafe { spindle_alloc::free(huge) };
    assert_eq!(keep::bytes(), before, "blocks above MAX_ONE are not kept");
}
