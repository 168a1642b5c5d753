//! The caches' restartable sequences on AArch64: the operations of the module above (see its
//! "Operations"), written for AArch64's registers and the kernel's rseq ABI there.
//!
//! What differs from x86-64, and why it is the same protocol:
//! - The descriptor's address is formed with `adrp`/`add` (position-independent, any distance)
//!   and stored into `rseq_cs` before the section starts, as on x86-64.
//! - The abort handler is preceded by the signature as an instruction word (`.inst`): glibc's
//!   AArch64 `RSEQ_SIG`, a `brk` encoding, so those bytes never run as useful code.
//! - A load/store architecture has no add-to-memory and no compare-with-memory: each section
//!   loads the record's words into registers and ends with one `str`, the commit. That is the
//!   same read-modify-write as x86's: preempted, migrated or signalled before the `str`, the
//!   section restarts from the top and nothing it did is visible (a push's link store goes
//!   into the caller's own block, as on x86-64).
//! - The status paths (no slot, bounce) stay in the function's own section, after the commit,
//!   so the fast path ends with one taken branch over them: a conditional branch reaches only
//!   ±1 MiB, not enough for a section of their own in a large binary (the x86-64 sections keep
//!   theirs in `.text.unlikely`, which a 32-bit `jcc` always reaches).
//! - The glibc forms read the thread pointer (`tpidr_el0`, to which `__rseq_offset` is
//!   relative on AArch64) before the section, instead of addressing through a segment.
//!
//! Memory ordering needs nothing more than on x86-64: a record is written only by the thread
//! on its CPU (or holding its concurrency id), and the kernel's context switch, which hands
//! the CPU or the id to another thread, is a full barrier on arm64 too (`__switch_to` issues
//! `dsb ish`; the scheduler's `smp_mb__after_spinlock` is `smp_mb` there).

use super::{MAX_INDEX, SLAB_BYTES};
use spindle_sync::percpu::rseq;

/// The shared prologue (arm `rseq_cs`; check the registration, `cpu_id ≥ 0`, and the index;
/// find the record), the body (ending with its commit, or branching to 9 for a bounce), the
/// status epilogue (0 done, 1 bounce, 2 no slot), the descriptor and the abort handler.
macro_rules! rseq_op {
    ($area:expr, $index:expr, $base:expr; $($body:literal),+; $($operands:tt)*) => {{
        let status: usize;
        core::arch::asm!(
            "2:",
            "adrp {rec}, 3f",
            "add {rec}, {rec}, :lo12:3f",
            "str {rec}, [{area}, #{cs}]",
            "4:",
            "ldr {st:w}, [{area}, #{cpu}]",
            "tbnz {st:w}, #31, 7f",
            "ldr {st:w}, [{area}, {index}]",
            "cmp {st}, #{n}",
            "b.hs 7f",
            "add {rec}, {base}, {st}, lsl #{shift}",
            $($body),+,
            "5:",
            "mov {st}, #0",
            "b 8f",
            "7:",
            "mov {st}, #2",
            "b 8f",
            "9:",
            "mov {st}, #1",
            "8:",
            ".pushsection __rseq_cs, \"aw\"",
            ".balign 32",
            "3:",
            ".long 0, 0",
            ".quad 4b, 5b - 4b, 6f",
            ".popsection",
            ".pushsection __rseq_failure, \"ax\"",
            ".inst {sig}",
            "6:",
            "b 2b",
            ".popsection",
            area = in(reg) $area,
            index = in(reg) $index,
            base = in(reg) $base,
            rec = out(reg) _,
            st = out(reg) status,
            n = const MAX_INDEX,
            shift = const SLAB_BYTES.trailing_zeros(),
            cpu = const rseq::CPU_ID,
            cs = const rseq::RSEQ_CS,
            sig = const rseq::SIGNATURE,
            $($operands)*
            options(nostack),
        );
        status
    }};
}

/// The thread pointer (`tpidr_el0`).
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads a register; no memory effects.
    unsafe {
        core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags));
    }
    tp
}

/// Pop: `list[0]`, else `list[1]`, else the run, all ending at the one commit `str` of `w`
/// (the word's new value) to `wa` (its address); `p` is the block. The run moves to its next
/// block by the block size from `info` (0 there: not filled in yet, a bounce) and one fewer
/// left (`2^48` subtracted).
///
/// # Safety (all of them)
/// As for the x86-64 forms in the module above: `area` is this thread's registered `struct
/// rseq` (or glibc's); `base` is the class's record offset into the per-CPU slabs; blocks in
/// the lists are class blocks (mapped). For the `_fs` forms, `area` is the area's offset from
/// the thread pointer (glibc's `__rseq_offset`).
#[inline(always)]
pub(super) unsafe fn pop_rseq(area: *mut u8, index: usize, base: usize) -> (usize, usize) {
    let p: usize;
    // SAFETY: the protocol of the module above; the registers are declared, memory is
    // clobbered (no `nomem`/`readonly`).
    let s = unsafe {
        rseq_op!(area, index, base;
            "ldr {w}, [{rec}]",
            "mov {wa}, {rec}",
            "cbnz {w}, 22f",
            // list[0] is empty: list[1].
            "add {wa}, {rec}, #8",
            "ldr {w}, [{wa}]",
            "cbnz {w}, 22f",
            // Both lists are empty: the run.
            "add {wa}, {rec}, #16",
            "ldr {w}, [{wa}]",
            "lsr {p}, {w}, #48",
            "cbz {p}, 9f",
            "ldr {t:w}, [{rec}, #24]",
            "cbz {t:w}, 9f",
            "and {p}, {w}, #0xffffffffffff",
            "add {w}, {w}, {t}",
            "mov {t}, #0x1000000000000",
            "sub {w}, {w}, {t}",
            "b 21f",
            "22:",
            "and {p}, {w}, #0xffffffffffff",
            "ldr {w}, [{p}]",
            "21:",
            "str {w}, [{wa}]";
            w = out(reg) _, wa = out(reg) _, p = out(reg) p, t = out(reg) _,)
    };
    (s, p)
}

#[inline(always)]
pub(super) unsafe fn pop_rseq_fs(off: isize, index: usize, base: usize) -> (usize, usize) {
    let area = thread_pointer().wrapping_add_signed(off) as *mut u8;
    // SAFETY: the caller's contract: glibc's area of this thread is at that offset.
    unsafe { pop_rseq(area, index, base) }
}

/// Push: the link store (the list as it was) into the caller's block, then the commit: the
/// list word's count bits plus `v + 2^48`. Full when the word is at or above `info`.
#[inline(always)]
pub(super) unsafe fn push_rseq(area: *mut u8, index: usize, base: usize, v: usize) -> usize {
    // SAFETY: as in pop_rseq; `v` is the caller's block.
    unsafe {
        rseq_op!(area, index, base;
            "ldr {w}, [{rec}]",
            "ldr {t}, [{rec}, #24]",
            "cmp {w}, {t}",
            "b.hs 9f",
            "str {w}, [{v}]",
            "and {t}, {w}, #0xffff000000000000",
            "add {t}, {t}, {one_v}",
            "str {t}, [{rec}]";
            v = in(reg) v, one_v = in(reg) v + (1 << 48), w = out(reg) _, t = out(reg) _,)
    }
}

#[inline(always)]
pub(super) unsafe fn push_rseq_fs(off: isize, index: usize, base: usize, v: usize) -> usize {
    let area = thread_pointer().wrapping_add_signed(off) as *mut u8;
    // SAFETY: as in pop_rseq_fs.
    unsafe { push_rseq(area, index, base, v) }
}

/// Swap: word `off` of the record becomes `new` if it holds `old`.
#[inline(always)]
pub(super) unsafe fn swap_rseq(
    area: *mut u8,
    index: usize,
    base: usize,
    off: usize,
    old: usize,
    new: usize,
) -> usize {
    // SAFETY: as in pop_rseq; `off` is a word of the record.
    unsafe {
        rseq_op!(area, index, base;
            "ldr {t}, [{rec}, {off}]",
            "cmp {t}, {old}",
            "b.ne 9f",
            "str {new}, [{rec}, {off}]";
            off = in(reg) off, old = in(reg) old, new = in(reg) new, t = out(reg) _,)
    }
}
