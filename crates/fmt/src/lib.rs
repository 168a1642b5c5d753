//! Decimal integer printing without a lookup table: `an_itoa`/`an_ltoa` (Paul Khuong and John
//! Wittrock, AppNexus, 2014), behind the [`itoa`](https://docs.rs/itoa) crate's API.
//!
//! ```
//! let mut buf = spindle_fmt::Buffer::new();
//! assert_eq!(buf.format(1_404_172_800u32), "1404172800");
//! assert_eq!(buf.format(-42i8), "-42");
//! ```
//!
//! Switching from `itoa` is a change of import: [`Buffer::new`], [`Buffer::format`] and the
//! sealed [`Integer`] trait have the same shape. [`append`] prints straight into a `Vec<u8>`'s
//! spare capacity, and the [`raw`] module has the original C contract: write into a fixed-size
//! array, return the length, leave scratch bytes after the digits.
//!
//! # When it is worth it
//!
//! When a program prints many integers into an output buffer (JSON, CSV, logs, metrics) and
//! the integers are of varied lengths: use [`append`]. The `itoa` crate (libcore's algorithm)
//! writes two digits at a time from a 200-byte table, backwards, branching once per two or
//! four digits; its string must then be copied where it belongs. [`append`] writes every digit
//! in place with whole-word stores and branches once per length class, and that is where the
//! gain is. [`Buffer::format`] pays the same copy as `itoa::Buffer`. The lab's guarantees are
//! about that drop-in (at least 1.2 × `itoa::Buffer` per input distribution), and they do not
//! hold on every distribution yet. The lab experiment `itoa` (`spindle lab itoa`) measures all
//! of this against `itoa`, `itoap` and `std`'s `write!` on the post's six input distributions
//! and two more, on your machine; published runs are in `docs/results.md`, section *itoa*.
//!
//! # The algorithm
//!
//! Digits are made two at a time (radix 100) and turned into characters inside a general
//! purpose register, several groups at once (SIMD within a register), with no table:
//!
//! 1. **Split on size**: `x < 100`, `x < 10⁴`, `x < 10⁸`, and beyond. Small numbers, the
//!    common case, run only the first few instructions; larger ones jump over them.
//!    ([`Buffer::format`] splits further, where the caller's `memcpy` does: see `placed`.)
//! 2. **Split into groups** of at most four digits: `x = hi·10⁴ + lo`, then each of `hi`, `lo`
//!    into two-digit *pairs* `v = q·100 + r`, all in 16-bit lanes of one `u64`:
//!    `[hi/100, hi%100, lo/100, lo%100]`.
//! 3. **Unpacked BCD**: each pair lane `v < 100` becomes the two bytes `[v/10, v%10]`, every lane
//!    at once, with one multiply by a fixed-point 1/10.
//! 4. **ASCII**: add `0x30` to every byte (`0x3030…30`). No byte carries: digits are at most 9.
//! 5. **Leading zeros**: the bytes are in printing order from the least significant byte
//!    (x86-64 is little-endian), so the leading zero digits are the *trailing* zero bytes of
//!    the BCD word: `trailing_zeros / 8` counts them, and a right shift removes them. The word
//!    is stored whole; the bytes it shifted in past the digits are NUL, inside the scratch
//!    space the contract reserves (10 bytes for 32 bits, 20 for 64). [`Buffer::format`], which
//!    may return its digits from anywhere in its buffer, stores the word unshifted and returns
//!    the string after the zeros: one store for up to sixteen digits, which the caller's copy
//!    then reads back at once (the module `placed` says why that matters).
//! 6. **Beyond 10⁸** the low eight digits are printed in full after the high part, itself
//!    printed by steps 1–5: a pair for `u32` (`u32::MAX < 43·10⁸`). A `u64` that fits 32 bits
//!    takes the `u32` path (`Buffer::format`: every `u64` of up to ten digits); a larger one
//!    is split into its top digits above 10¹⁶ (up to four) and four groups of four below,
//!    each group computed from `x` itself (`x / 10⁴ᵏ mod 10⁴`: four independent
//!    multiplications instead of a chain of divisions by 10⁸ and 10⁴). On
//!    x86-64 the four groups go through steps 2–4 together, on eight 16-bit lanes of an SSE2
//!    register (the x86-64 baseline) instead of four lanes of a general register: half the
//!    multiplications for sixteen digits. Below 10¹⁶ the leading zeros are then shifted out
//!    of the 16-byte word (or skipped, by `Buffer::format`).
//! 7. **Signs** are a `-` always stored at the first byte, the digits after it at offset 0
//!    or 1 (`x < 0` as an integer): no branch.
//!
//! There is no loop and no table: the branches are the size tests of step 1, one per length
//! class rather than one per digit.
//!
//! # Why each step is exact
//!
//! All divisions by 10 and 100 are fixed-point multiplications, each exact on a range that
//! contains every value it is applied to; the tests check each range exhaustively, and
//! `tests/exhaustive.rs` compares every `u32` with `std`.
//!
//! - `v / 10 == (v · 103) >> 10` for `0 ≤ v < 179` (first failure: 179); applied to `v < 100`.
//!   103/1024 exceeds 1/10 by 0.000586, so the error `v · 0.000586 ≤ 0.058` stays below the
//!   smallest gap `1/10` between `v/10`'s fractional part (at most 0.9) and the next integer.
//! - `v / 100 == (v · 5243) >> 19` for `0 ≤ v < 43 699`; applied to `v < 10⁴`.
//! - `v / 100 == (v · 41) >> 12` for `0 ≤ v < 1099` (first failure: 1099) and
//!   `v / 10 == (v · 205) >> 11` for `0 ≤ v < 1029` (first failure: 1029); both applied to
//!   `100 ≤ v < 1000` (three digits, `Buffer::format`).
//!
//! Lane discipline, for the multiplies done on several lanes of one word at once:
//!
//! - *Division by 100 on two 32-bit lanes* (`y = hi | lo << 32`, `hi, lo < 10⁴`): each lane's
//!   product is below `9999 · 5243 < 2²⁶`, so it does not reach the next lane; after `>> 19`
//!   the upper lane's product lands in bits 13 and up of the lower lane, above the 7-bit
//!   quotient (`≤ 99`) that the mask `0x7F` keeps.
//! - *Pairs*: `(y << 16) − q · (100·2¹⁶ − 1)` gives, per 32-bit lane, `q + (v − 100q)·2¹⁶`, a
//!   non-negative value below 2²³: no borrow crosses lanes, and each 16-bit lane holds `< 100`.
//! - *Division by 10 on four 16-bit lanes*: each lane's product is below `99 · 103 < 2¹⁴`;
//!   after `>> 10` the bits that come down from the next lane start at bit 6, above the 4-bit
//!   quotient the mask `0x000F` keeps.
//! - *BCD*: `(pairs << 8) − 2559 · t` gives, per 16-bit lane, `256v − 2559t = 256(v − 10t) + t`,
//!   the tens digit in the low byte and the units in the high byte: non-negative, below 2¹²,
//!   and `2559 · 9 < 2¹⁶`, so again no borrow crosses lanes.
//!
//! The leading-zero count of step 5 needs a non-zero word, which every path has: the pair path
//! (`x < 100`) uses a comparison instead (`x < 10`), and the others run for `x ≥ 100`.
//!
//! # Unsafe code
//!
//! The printers write `MaybeUninit<u8>` bytes, so that [`Buffer::new`] and [`append`] need not
//! zero the scratch space first, and they only ever store initialised bytes. Three `unsafe`
//! blocks rest on that, each with its argument beside it: viewing a caller's `[u8; N]` as
//! `[MaybeUninit<u8>; N]` ([`raw`]); reading the bytes just written as a `&str`
//! ([`Buffer::format`]: all are ASCII digits or `-`, in a range its printers return within
//! the buffer, taken without a bounds check); and `Vec::set_len` over the `n` bytes written
//! into reserved spare capacity ([`append`]). A fourth tells the compiler that the range the
//! `u64` printer returns is never empty (`unreachable_unchecked` otherwise, module `placed`):
//! each of its paths starts the range a constant bound below its end. Every store is a
//! bounds-checked slice copy, a 16-byte SSE2 store into a `&mut [MaybeUninit<u8>; 16]`, or
//! (`Buffer::format`'s seventeen to twenty digits, where `cpuid` reports AVX) one 32-byte AVX
//! store into a `&mut [MaybeUninit<u8>; 32]`, in inline assembly, as is the `xgetbv` that
//! asks the kernel about AVX (module `avx`); the compiler removes the checks it can prove. The
//! other SSE2 intrinsics only compute on registers.
#![no_std]

extern crate alloc;

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use core::mem::MaybeUninit;

/// A byte the printers write (and never read): the scratch space may be uninitialised.
type Out = MaybeUninit<u8>;

/// `0x30` (`'0'`) in every byte.
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// `x < 100` as ASCII in the low bytes of the result (no leading zero; a NUL after one digit),
/// and its length.
#[inline(always)]
fn pair(x: u32) -> (u16, usize) {
    let lz = u32::from(x < 10);
    ((u32::from(two(x)) >> (8 * lz)) as u16, 2 - lz as usize)
}

/// `x < 100` as two ASCII digits, a leading zero included: `[tens, units]` in the low bytes.
#[inline(always)]
fn two(x: u32) -> u16 {
    debug_assert!(x < 100);
    let tens = (x * 103) >> 10;
    ((x << 8) - 2559 * tens + 0x3030) as u16
}

/// `100 ≤ x < 1000` as three ASCII digits in the low bytes (a NUL after them). With
/// `a = x / 100` and `b = x / 10`, the digits are `a`, `b − 10a` and `x − 10b`, so the word
/// `a + (b − 10a)·2⁸ + (x − 10b)·2¹⁶` (each term a digit in its byte) equals the sum
/// `x·2¹⁶ + b·(2⁸ − 10·2¹⁶) + a·(1 − 10·2⁸)`, exact in wrapping 32-bit arithmetic because the
/// result lies in `[0, 2²⁴)`. `a` and `b` are two independent multiply-shifts, then two more
/// multiplies and a few adds: about ten instructions. Extracting the digits one at a time
/// from a fixed-point fraction (this function before) took about fifteen, with a chain of
/// similar length; the gain is in instructions, and lab `itoa` measured it (the commit that
/// made this says how much).
#[inline(always)]
fn three(x: u32) -> u32 {
    debug_assert!((100..1000).contains(&x));
    let a = (x * 41) >> 12; // x / 100 for x < 1099
    let b = (x * 205) >> 11; // x / 10 for x < 1029
    (x << 16)
        .wrapping_add(b.wrapping_mul((1u32 << 8).wrapping_sub(10 << 16)))
        .wrapping_add(a.wrapping_mul(1u32.wrapping_sub(10 << 8)))
        .wrapping_add(0x30_3030)
}

/// `x < 10⁴` as four BCD bytes, most significant digit in the low byte, leading zeros kept.
#[inline(always)]
fn bcd4(x: u32) -> u32 {
    debug_assert!(x < 10_000);
    let q = (x * 5243) >> 19; // x / 100
    let pairs = (x << 16) - 6_553_599 * q; // [x / 100, x % 100] in 16-bit lanes
    let tens = ((pairs * 103) >> 10) & 0x000F_000F;
    (pairs << 8) - 2559 * tens
}

/// `x < 10⁸` as eight BCD bytes, most significant digit in the low byte, leading zeros kept.
#[inline(always)]
fn bcd8(x: u32) -> u64 {
    debug_assert!(x < 100_000_000);
    let hi = x / 10_000;
    let lo = x - 10_000 * hi;
    let y = u64::from(hi) | u64::from(lo) << 32; // two 32-bit lanes
    let q = ((y * 5243) >> 19) & 0x0000_007F_0000_007F; // each lane / 100
    let pairs = (y << 16) - 6_553_599 * q; // four 16-bit lanes, each < 100
    let tens = ((pairs * 103) >> 10) & 0x000F_000F_000F_000F;
    (pairs << 8) - 2559 * tens
}

/// ASCII of a non-zero BCD word with its leading zero digits shifted out, and its length.
#[inline(always)]
fn strip8(bcd: u64) -> (u64, usize) {
    debug_assert!(bcd != 0);
    // 8 × (number of zero bytes below the first non-zero one): the shift that drops them.
    let shift = bcd.trailing_zeros() & !7;
    ((bcd + ZEROS) >> shift, 8 - (shift / 8) as usize)
}

/// The same for a four-digit word.
#[inline(always)]
fn strip4(bcd: u32) -> (u32, usize) {
    debug_assert!(bcd != 0);
    let shift = bcd.trailing_zeros() & !7;
    ((bcd + ZEROS as u32) >> shift, 4 - (shift / 8) as usize)
}

#[inline(always)]
fn put2(out: &mut [Out], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_le_bytes().map(Out::new));
}

#[inline(always)]
fn put4(out: &mut [Out], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes().map(Out::new));
}

#[inline(always)]
fn put8(out: &mut [Out], at: usize, v: u64) {
    out[at..at + 8].copy_from_slice(&v.to_le_bytes().map(Out::new));
}

/// The sixteen ASCII digits of `a·10⁸ + b` (`a`, `b` < 10⁸), leading zeros included, in
/// printing order from the least significant byte: the steps of [`bcd8`] on eight lanes at
/// once in an SSE2 register (x86-64's baseline) instead of four in a general register — half
/// the multiplications for sixteen digits, and those on vectors.
///
/// Each step is exact on its lanes as in `bcd8` (see the crate documentation): the groups of
/// four digits (`< 10⁴`) divided by 100 as the high half of `v · 5243` shifted right by 3
/// (that is, `(v · 5243) >> 19`), the pairs (`< 100`) by 10 as `(v · 103) >> 10`, every
/// product below 2¹⁶ except `v · 5243`, whose high half the multiply keeps.
#[inline(always)]
fn digits16(a: u32, b: u32) -> u128 {
    debug_assert!(a < 100_000_000 && b < 100_000_000);
    let (a1, b1) = (a / 10_000, b / 10_000);
    groups16([a1, a - 10_000 * a1, b1, b - 10_000 * b1])
}

/// The four groups of four digits (`x / 10¹²`, then `x / 10⁸`, `x / 10⁴` and `x`, each mod
/// 10⁴) of a `u64` below `10¹⁶ · 10⁴`, each computed from `x` itself: four independent
/// multiplications rather than a chain of divisions (by 10⁸, then each half by 10⁴). The chain
/// matters for the longest numbers: their string is two stores, so the caller's copy waits
/// until both reach the cache, and with it everything the digits depended on (see `placed`).
/// `x / 10¹⁶`, the top, is the caller's; the highest group here is taken mod 10⁴.
#[inline(always)]
fn groups_of(x: u64) -> [u32; 4] {
    let (q4, q8, q12) = (x / 10_000, x / 100_000_000, x / 1_000_000_000_000);
    // Each difference is below 10⁴, so 32-bit wrapping arithmetic gives it exactly.
    let low = |q: u64, r: u64| (r as u32).wrapping_sub((q as u32).wrapping_mul(10_000));
    [
        low(x / 10_000_000_000_000_000, q12),
        low(q12, q8),
        low(q8, q4),
        low(q4, x),
    ]
}

/// The sixteen ASCII digits of four groups of four (each < 10⁴), in printing order from the
/// least significant byte: see [`digits16`].
#[inline(always)]
fn groups16(g: [u32; 4]) -> u128 {
    debug_assert!(g.iter().all(|&v| v < 10_000));
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::*;
        // Groups of four digits in 16-bit lanes 0..4.
        let groups =
            u64::from(g[0]) | u64::from(g[1]) << 16 | u64::from(g[2]) << 32 | u64::from(g[3]) << 48;
        // SAFETY: SSE2 is part of the x86-64 baseline; these intrinsics only compute.
        unsafe {
            let g = _mm_cvtsi64_si128(groups as i64);
            let q = _mm_srli_epi16(_mm_mulhi_epu16(g, _mm_set1_epi16(5243)), 3);
            let r = _mm_sub_epi16(g, _mm_mullo_epi16(q, _mm_set1_epi16(100)));
            // Eight pairs in printing order: group 0 / 100, group 0 % 100, group 1 / 100, …
            let pairs = _mm_unpacklo_epi16(q, r);
            let tens = _mm_srli_epi16(_mm_mullo_epi16(pairs, _mm_set1_epi16(103)), 10);
            let units = _mm_sub_epi16(pairs, _mm_mullo_epi16(tens, _mm_set1_epi16(10)));
            // Tens in the low byte of each lane, units in the high byte; then ASCII.
            let bcd = _mm_or_si128(tens, _mm_slli_epi16(units, 8));
            let ascii = _mm_add_epi8(bcd, _mm_set1_epi8(b'0' as i8));
            let lo = _mm_cvtsi128_si64(ascii) as u64;
            let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(ascii, ascii)) as u64;
            u128::from(lo) | u128::from(hi) << 64
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let half = |a: u32, b: u32| u64::from(bcd4(a)) | u64::from(bcd4(b)) << 32;
        u128::from(half(g[0], g[1]) + ZEROS) | u128::from(half(g[2], g[3]) + ZEROS) << 64
    }
}

/// The 16 bytes of `out` from `at` (the callers' offsets leave room).
#[inline(always)]
fn at16(out: &mut [Out], at: usize) -> &mut [Out; 16] {
    out[at..].first_chunk_mut().expect("16 bytes of room")
}

/// Stores 16 bytes: with one SSE2 store when `v` comes out of a vector register, as
/// [`digits16`]'s does (see [`placed`] for why one store matters); a value that was built or
/// shifted in general registers the compiler may store as two 8-byte halves.
#[inline(always)]
fn store16(out: &mut [Out; 16], v: u128) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_set_epi64x, _mm_storeu_si128};
        // SAFETY: `out` is 16 writable bytes; `storeu` takes any alignment; SSE2 is part of
        // the x86-64 baseline.
        unsafe {
            _mm_storeu_si128(
                out.as_mut_ptr().cast(),
                _mm_set_epi64x((v >> 64) as i64, v as i64),
            )
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    out.copy_from_slice(&v.to_le_bytes().map(Out::new));
}

/// AVX, found at run time (the x86-64 baseline, which this crate is built for unless the
/// build enables AVX, lacks it), for one store that `placed` needs: twenty bytes at once.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx {
    use super::Out;
    use core::arch::asm;
    use core::arch::x86_64::*;
    use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

    /// 0: not asked yet, 1: no AVX, 2: AVX. Every thread that finds 0 asks and stores the same
    /// answer: no ordering needed.
    pub(super) static STATE: AtomicU8 = AtomicU8::new(0);

    /// Whether the CPU has AVX and the kernel saves the upper halves of the YMM registers.
    #[inline(always)]
    pub(super) fn available() -> bool {
        if cfg!(target_feature = "avx") {
            return true;
        }
        match STATE.load(Relaxed) {
            0 => detect(),
            state => state == 2,
        }
    }

    #[cold]
    #[inline(never)]
    fn detect() -> bool {
        // SAFETY: every x86-64 CPU has `cpuid` and its leaf 1. (A safe function in recent
        // Rust, an unsafe one in 1.80, which this crate builds with.)
        #[allow(unused_unsafe)]
        let leaf1 = unsafe { __cpuid(1) };
        let (osxsave, avx) = (leaf1.ecx & 1 << 27 != 0, leaf1.ecx & 1 << 28 != 0);
        let found = osxsave && avx && {
            let xcr0: u32;
            // SAFETY: OSXSAVE set means the kernel enabled `xgetbv`; register 0 is XCR0.
            unsafe {
                asm!("xgetbv", in("ecx") 0, out("eax") xcr0, out("edx") _,
                     options(nomem, nostack, preserves_flags));
            }
            // The kernel saves the SSE (bit 1) and upper YMM (bit 2) registers.
            xcr0 & 0b110 == 0b110
        };
        STATE.store(1 + u8::from(found), Relaxed);
        found
    }

    /// `top`, then `digits`, at `out[0..20]`, in one 32-byte store (NUL bytes after them).
    ///
    /// # Safety
    /// The CPU has AVX: [`available`] said so.
    #[inline(always)]
    pub(super) unsafe fn store20(out: &mut [Out; 32], top: u32, digits: u128) {
        let (lo, hi);
        // SAFETY: SSE2 is part of the x86-64 baseline; these intrinsics only compute.
        unsafe {
            let d = _mm_set_epi64x((digits >> 64) as i64, digits as i64);
            lo = _mm_or_si128(_mm_slli_si128::<4>(d), _mm_cvtsi32_si128(top as i32));
            hi = _mm_srli_si128::<12>(d);
        }
        let to = out.as_mut_ptr();
        // SAFETY: the caller found AVX; `to` is 32 writable bytes and `vmovdqu` takes any
        // alignment. `vzeroupper` then clears the upper halves of the YMM registers: where
        // this crate is built without AVX, legacy SSE code after a dirty upper half runs slower
        // (on Zen 4 too: the commit that added this store measured it), and where it is built
        // with AVX, the compiler then need not know that this block dirtied one. Every vector
        // register (all of YMM 0–15, as the compiler sees them) is declared clobbered, so
        // nothing the compiler keeps in one lives across this block, wherever it is inlined.
        unsafe {
            asm!(
                "vinsertf128 ymm0, ymm0, xmm1, 1",
                "vmovdqu ymmword ptr [{to}], ymm0",
                "vzeroupper",
                to = in(reg) to,
                inout("xmm0") lo => _, inout("xmm1") hi => _,
                lateout("xmm2") _, lateout("xmm3") _, lateout("xmm4") _, lateout("xmm5") _,
                lateout("xmm6") _, lateout("xmm7") _, lateout("xmm8") _, lateout("xmm9") _,
                lateout("xmm10") _, lateout("xmm11") _, lateout("xmm12") _,
                lateout("xmm13") _, lateout("xmm14") _, lateout("xmm15") _,
                options(nostack, preserves_flags),
            );
        }
    }
}

/// The printers behind [`Buffer::format`], which may hand out its digits from anywhere in its
/// buffer (`itoa::Buffer` prints backwards and returns the tail). They store a number's digits
/// with its leading zero digits, up to sixteen bytes in one store, and return the range that
/// skips the zeros; the [`raw`] printers shift the zeros out instead, to start at byte 0.
///
/// One store matters because the caller copies the string out at once (`extend_from_slice`:
/// `memcpy` of an 8–15-byte string loads its first 8 and its last 8 bytes; of 4–7 bytes, its
/// first and last 4; of 16–31, its first and last 16). A load takes its bytes straight from a
/// store still in flight only when that one store covers them all; a load that spans two
/// stores waits until both have reached the cache, and with it every copy after it (lab
/// `itoa`, ten digits and more). Seventeen to twenty digits (the top one to four, then
/// sixteen) are more than one 16-byte store holds, and `memcpy`'s two 16-byte loads overlap:
/// whatever the layout of two stores, one load spans both. Where the CPU has AVX (found at run
/// time: the crate is built for the x86-64 baseline), they are one 32-byte store; elsewhere
/// two, and the copy waits.
///
/// Their size tests also split where `memcpy` does: glibc's branches on the length separate
/// 1, 2–3, 4–7, 8–15 and 16–31 bytes, so these printers test `x < 10³`, `< 10⁷` and `< 10¹⁵`
/// besides the splits their arithmetic needs. On numbers of random lengths, a predictor that
/// has just seen which way the printer's own test went can then tell which way `memcpy`'s
/// will go: one misprediction a number instead of two (the printer's test, on `x` itself,
/// also resolves before `memcpy`'s, on a length computed from it). The exception is one digit
/// against two: both are one store of the same two bytes, and only the start differs
/// (`x < 10` as a number, no branch), which left `memcpy`'s test alone with the
/// misprediction and measured faster (the commit that made it says how much). A `-` makes
/// the string one byte longer than its digits: for negative numbers the classes are one off.
/// Lab `itoa` measures the effect against the `itoa` crate (`docs/results.md`, *itoa*).
mod placed {
    use super::*;
    use core::ops::Range;

    /// How many of `bounds` `x` reaches: where its string starts, computed from `x` by
    /// comparisons (a cycle or two) rather than from the digits (after all their
    /// arithmetic), so that the caller's copy has its address and length early.
    #[inline(always)]
    fn above<const N: usize>(x: u64, bounds: [u64; N]) -> usize {
        bounds.iter().map(|&b| usize::from(x >= b)).sum()
    }

    /// `x` within `out`'s first 16 bytes.
    #[inline(always)]
    pub(crate) fn u32(out: &mut [Out; 16], x: u32) -> Range<usize> {
        // u32::MAX < 10¹⁰: the compiler drops the test for 10¹⁰ and the call.
        sizes(out, u64::from(x), |_| unreachable!())
    }

    /// `x` within `out`'s first 20 bytes (all 32 may be written): up to ten digits with the
    /// same tests in the same order as [`u32`] (small numbers run the same instructions), more
    /// after them ([`u64_large`]).
    ///
    /// All of it inline, and the range known to be non-empty: with `u64_large` a call and the
    /// caller's `memcpy` guarded by an emptiness test, the caller's loop kept fewer of its own
    /// values in registers and every number paid for it, the one- and two-digit ones most
    /// (lab `itoa` on Zen 4, the commit that made it says how much). The same hint on [`u32`]
    /// made that section slower, so it is not there.
    #[inline(always)]
    pub(crate) fn u64(out: &mut [Out; 32], x: u64) -> Range<usize> {
        let r = sizes(out, x, |out| u64_large(out, x));
        if r.start >= r.end {
            // SAFETY: every path of `sizes` and `u64_large` returns `a..b` where `b - a` is the
            // number of digits of `x` (at least one): `a` skips leading zeros only. Checkable
            // without the digit arithmetic too: each start has a constant bound below its end
            // (`x < 10` ≤ 1 < 2; ≤ 3 < 8; ≤ 7 < 16; a u64's trailing-zero count / 8 ≤ 8 < 16;
            // a u32's ≤ 4 < 20).
            unsafe { core::hint::unreachable_unchecked() }
        }
        r
    }

    /// `x` by its size: up to ten digits within `out`'s first 16 bytes (`N ≥ 16`), larger by
    /// `beyond`.
    #[inline(always)]
    fn sizes<const N: usize>(
        out: &mut [Out; N],
        x: u64,
        beyond: impl FnOnce(&mut [Out; N]) -> Range<usize>,
    ) -> Range<usize> {
        // Below 10⁸ the digits fit 32-bit arithmetic.
        let y = x as u32;
        if x < 100 {
            // One digit is the units byte of "0d": no branch of its own (see above).
            put2(out, 0, two(y));
            return usize::from(x < 10)..2;
        }
        if x >= 10_000_000_000 {
            return beyond(out);
        }
        if x < 1_000 {
            put4(out, 0, three(y));
            return 0..3;
        }
        if x < 10_000 {
            put4(out, 0, bcd4(y) + ZEROS as u32);
            return 0..4;
        }
        // x ≥ 10⁴: every BCD word below has a non-zero byte (see `strip8`).
        if x < 10_000_000 {
            put8(out, 0, bcd8(y) + ZEROS);
            return 3 - above(x, [100_000, 1_000_000])..8;
        }
        if x < 100_000_000 {
            put8(out, 0, bcd8(y) + ZEROS);
            return 0..8;
        }
        // Nine or ten digits: the high pair zero-padded to eight, then the low eight.
        let hi = x / 100_000_000;
        store16(
            at16(out, 0),
            digits16(hi as u32, (x - hi * 100_000_000) as u32),
        );
        7 - above(x, [1_000_000_000])..16
    }

    /// `x ≥ 10¹⁰`, eleven digits or more (inlined: see [`u64`]).
    #[inline(always)]
    fn u64_large(out: &mut [Out; 32], x: u64) -> Range<usize> {
        debug_assert!(x >= 10_000_000_000);
        let groups = groups_of(x);
        if x < 1_000_000_000_000_000 {
            // 11 to 15 digits: a non-zero digit among the first eight bytes.
            let v = groups16(groups);
            store16(at16(out, 0), v);
            return ((v as u64 ^ ZEROS).trailing_zeros() / 8) as usize..16;
        }
        if x < 10_000_000_000_000_000 {
            store16(at16(out, 0), groups16(groups));
            return 0..16;
        }
        // The top one to four digits (u64::MAX < 1845·10¹⁶), then sixteen.
        let top = bcd4((x / 10_000_000_000_000_000) as u32);
        twenty(out, top + ZEROS as u32, groups16(groups));
        (top.trailing_zeros() / 8) as usize..20
    }

    /// The 4 bytes `top`, then the 16 bytes `digits`, at `out[0..20]`: in one 32-byte store
    /// where the CPU has AVX, so that `memcpy`'s two overlapping 16-byte loads of a 17- to
    /// 20-byte string each take their bytes from that one store (see the module header); two
    /// stores otherwise, and then the first of those loads waits for both to reach the cache.
    #[inline(always)]
    fn twenty(out: &mut [Out; 32], top: u32, digits: u128) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if avx::available() {
            // SAFETY: AVX is there.
            unsafe { avx::store20(out, top, digits) };
            return;
        }
        put4(out, 0, top);
        store16(at16(out, 4), digits);
    }

    /// The magnitude's digits placed by `digits` in `out[1..]`, and a `-` just before them
    /// when `neg` (written either way: otherwise it lies outside the range returned).
    #[inline(always)]
    pub(crate) fn signed<const N: usize>(
        out: &mut [Out; BUFFER_LEN],
        neg: bool,
        digits: impl FnOnce(&mut [Out; N]) -> Range<usize>,
    ) -> Range<usize> {
        let r = digits(out[1..].first_chunk_mut().expect("N < BUFFER_LEN"));
        out[r.start].write(b'-');
        r.start + 1 - usize::from(neg)..r.end + 1
    }
}

/// The contract of the original C functions: write into a fixed-size array, return the
/// number of characters. The bytes after them, up to the end of the array, may be
/// overwritten (with NUL bytes): the whole array is scratch space, even for small numbers.
///
/// ```
/// let mut out = [0u8; 20];
/// let n = spindle_fmt::raw::write_u64(&mut out, 18_446_744_073_709_551_615);
/// assert_eq!(&out[..n], b"18446744073709551615");
/// ```
pub mod raw {
    use super::*;

    /// Scratch bytes [`write_u32`] needs: the length of `u32::MAX`.
    pub const U32_LEN: usize = 10;
    /// Scratch bytes [`write_u64`] needs: the length of `u64::MAX`.
    pub const U64_LEN: usize = 20;
    /// Scratch bytes [`write_u128`] needs: the length of `u128::MAX`.
    pub const U128_LEN: usize = 39;

    /// `an_itoa`: prints `x` at the start of `out`, returns its length.
    ///
    /// Inlined: small numbers run only the first few instructions, in the caller's loop.
    #[inline(always)]
    pub(crate) fn u32_into(out: &mut [Out; U32_LEN], x: u32) -> usize {
        u32_digits::<U32_LEN>(out, x)
    }

    /// [`u32_into`] into `N ≥ 10` bytes; with `N ≥ 16`, nine or ten digits go in one 16-byte
    /// store (see [`store16`]). The size tests come in the same order either way.
    #[inline(always)]
    pub(crate) fn u32_digits<const N: usize>(out: &mut [Out; N], x: u32) -> usize {
        if x < 100 {
            let (w, n) = pair(x);
            put2(out, 0, w);
            return n;
        }
        if x < 10_000 {
            let (w, n) = strip4(bcd4(x));
            put4(out, 0, w);
            return n;
        }
        if x < 100_000_000 {
            let (w, n) = strip8(bcd8(x));
            put8(out, 0, w);
            return n;
        }
        // u32::MAX < 43·10⁸: the high part is a pair.
        let hi = x / 100_000_000;
        let (w, n) = pair(hi);
        let low = bcd8(x - hi * 100_000_000) + ZEROS;
        if let Some(wide) = out.first_chunk_mut::<16>() {
            store16(wide, u128::from(w) | u128::from(low) << (8 * n));
        } else {
            put2(out, 0, w);
            put8(out, n, low);
        }
        n + 8
    }

    /// `an_ltoa`: prints `x` at the start of `out`, returns its length.
    ///
    /// Values that fit 32 bits take [`write_u32`]'s path, inlined, with 16 bytes of room (nine
    /// or ten digits in one store); larger ones call a function.
    #[inline(always)]
    pub(crate) fn u64_into(out: &mut [Out; U64_LEN], x: u64) -> usize {
        match u32::try_from(x) {
            Ok(x) => u32_digits::<16>(out.first_chunk_mut().expect("20 ≥ 16"), x),
            Err(_) => u64_large_into(out, x),
        }
    }

    /// `x > u32::MAX`: ten digits or more. Not inlined: inlined, its code made the callers'
    /// loops slower for the values that fit 32 bits as well (lab `itoa` on Zen 4, the `u64`
    /// section's small distributions), and a call costs these longer numbers little.
    #[inline(never)]
    pub(crate) fn u64_large_into(out: &mut [Out; U64_LEN], x: u64) -> usize {
        let groups = groups_of(x);
        if x < 10_000_000_000_000_000 {
            // 10 to 16 digits: sixteen with the leading zeros, which the shift drops
            // (x ≥ 2³² > 42·10⁸: a non-zero digit among the first eight bytes).
            let v = groups16(groups);
            let zeros = ((v as u64 ^ ZEROS).trailing_zeros() / 8) as usize;
            store16(at16(out, 0), v >> (8 * zeros));
            return 16 - zeros;
        }
        // u64::MAX < 1845·10¹⁶: the high part has at most four digits.
        let (w, n) = strip4(bcd4((x / 10_000_000_000_000_000) as u32));
        put4(out, 0, w);
        store16(at16(out, n), groups16(groups));
        n + 16
    }

    /// A simpler path for 128 bits: up to three 16-digit chunks, split by 128-bit divisions.
    pub(crate) fn u128_into(out: &mut [Out; U128_LEN], x: u128) -> usize {
        let head: &mut [Out; U64_LEN] = out.first_chunk_mut().expect("39 ≥ 20");
        if let Ok(x) = u64::try_from(x) {
            return u64_into(head, x);
        }
        const E16: u128 = 10_000_000_000_000_000;
        let low = (x % E16) as u64;
        let rest = x / E16;
        // x ≥ 2⁶⁴ > 10¹⁹, so rest ≥ 1000; u128::MAX < 3.5·10³⁸, so rest / 10¹⁶ < 10⁷.
        let n = match u64::try_from(rest / E16).expect("< 10⁷") {
            0 => u64_into(head, rest as u64),
            top => {
                let n = u64_into(head, top);
                put16(out, n, (rest % E16) as u64);
                n + 16
            }
        };
        put16(out, n, low);
        n + 16
    }

    /// Exactly 16 digits of `x < 10¹⁶`, leading zeros included.
    #[inline]
    fn put16(out: &mut [Out], at: usize, x: u64) {
        let hi = (x / 100_000_000) as u32;
        let lo = (x % 100_000_000) as u32;
        put8(out, at, bcd8(hi) + ZEROS);
        put8(out, at + 8, bcd8(lo) + ZEROS);
    }

    /// A `-` at `out[0]`, always, and the digits of the magnitude printed by `digits` at
    /// offset 1 when `neg`, 0 otherwise (no branch); returns the length.
    #[inline(always)]
    pub(crate) fn signed<const N: usize, const M: usize>(
        out: &mut [Out; M],
        neg: bool,
        digits: impl FnOnce(&mut [Out; N]) -> usize,
    ) -> usize {
        debug_assert!(N < M);
        let neg = usize::from(neg);
        out[0].write(b'-');
        neg + digits((&mut out[neg..neg + N]).try_into().expect("N < M"))
    }

    /// Prints `x` at the start of `out` (a `-` first when negative), returns its length.
    #[inline]
    pub(crate) fn i32_into(out: &mut [Out; U32_LEN + 1], x: i32) -> usize {
        signed(out, x < 0, |d| u32_into(d, x.unsigned_abs()))
    }

    /// Prints `x` at the start of `out` (a `-` first when negative), returns its length.
    #[inline]
    pub(crate) fn i64_into(out: &mut [Out; U64_LEN + 1], x: i64) -> usize {
        signed(out, x < 0, |d| u64_into(d, x.unsigned_abs()))
    }

    /// Prints `x` at the start of `out` (a `-` first when negative), returns its length.
    pub(crate) fn i128_into(out: &mut [Out; U128_LEN + 1], x: i128) -> usize {
        signed(out, x < 0, |d| u128_into(d, x.unsigned_abs()))
    }

    /// `out` as write-only bytes for the printers above.
    #[inline(always)]
    fn as_out<const N: usize>(out: &mut [u8; N]) -> &mut [Out; N] {
        // SAFETY: `MaybeUninit<u8>` has the size, alignment and validity of `u8` plus more, and
        // the printers only ever store initialised bytes through what they are given (the
        // `put` functions copy from byte arrays; the sign is `write(b'-')`), so `out` holds
        // initialised bytes again when this borrow ends.
        unsafe { &mut *(out as *mut [u8; N]).cast::<[Out; N]>() }
    }

    /// `an_itoa`: prints `x` at the start of `out`, returns its length.
    #[inline(always)]
    pub fn write_u32(out: &mut [u8; U32_LEN], x: u32) -> usize {
        u32_into(as_out(out), x)
    }

    /// `an_ltoa`: prints `x` at the start of `out`, returns its length.
    #[inline(always)]
    pub fn write_u64(out: &mut [u8; U64_LEN], x: u64) -> usize {
        u64_into(as_out(out), x)
    }

    /// Prints `x` at the start of `out`, returns its length.
    pub fn write_u128(out: &mut [u8; U128_LEN], x: u128) -> usize {
        u128_into(as_out(out), x)
    }

    /// Prints `x` at the start of `out` (a `-` first when negative), returns its length.
    #[inline(always)]
    pub fn write_i32(out: &mut [u8; U32_LEN + 1], x: i32) -> usize {
        i32_into(as_out(out), x)
    }

    /// Prints `x` at the start of `out` (a `-` first when negative), returns its length.
    #[inline(always)]
    pub fn write_i64(out: &mut [u8; U64_LEN + 1], x: i64) -> usize {
        i64_into(as_out(out), x)
    }

    /// Prints `x` at the start of `out` (a `-` first when negative), returns its length.
    pub fn write_i128(out: &mut [u8; U128_LEN + 1], x: i128) -> usize {
        i128_into(as_out(out), x)
    }
}

/// The longest string any [`Integer`] prints: `i128::MIN`, 40 characters.
const BUFFER_LEN: usize = 40;

/// A place to print integers into; cheap to make, reusable.
///
/// ```
/// let mut buf = spindle_fmt::Buffer::new();
/// let mut line = String::new();
/// for x in [0u64, 7, 100, u64::MAX] {
///     line.push_str(buf.format(x));
///     line.push(' ');
/// }
/// assert_eq!(line, "0 7 100 18446744073709551615 ");
/// ```
#[derive(Clone, Copy)]
pub struct Buffer {
    bytes: [Out; BUFFER_LEN],
}

impl Default for Buffer {
    #[inline]
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Buffer")
    }
}

impl Buffer {
    #[inline]
    pub fn new() -> Buffer {
        Buffer {
            bytes: [MaybeUninit::uninit(); BUFFER_LEN],
        }
    }

    /// Prints `i` into this buffer and returns the decimal string.
    #[inline(always)]
    pub fn format<I: Integer>(&mut self, i: I) -> &str {
        let r = i.place(&mut self.bytes);
        debug_assert!(r.start < r.end && r.end <= BUFFER_LEN);
        // SAFETY: `place` returns a range within its buffer.
        let digits: *const [Out] = unsafe { self.bytes.get_unchecked(r) };
        // SAFETY: `place` stored every byte of the range it returns in this call, so they are
        // initialised and may be read as `u8` (same layout); each is an ASCII digit (`0x30`
        // plus a digit value 0..=9, see the crate documentation) or `-`, so they are valid
        // UTF-8. Bytes outside the range may be uninitialised or NUL and are not part of it.
        unsafe { core::str::from_utf8_unchecked(&*(digits as *const [u8])) }
    }
}

/// Appends the decimal string of `i` to `out`, printing straight into its spare capacity
/// (the [`raw`] contract: no copy through a buffer). Reserves room for the longest string.
///
/// ```
/// let mut json = b"{\"id\":".to_vec();
/// spindle_fmt::append(&mut json, 1_404_172_800u64);
/// json.push(b'}');
/// assert_eq!(json, b"{\"id\":1404172800}");
/// ```
#[inline(always)]
pub fn append<I: Integer>(out: &mut alloc::vec::Vec<u8>, i: I) {
    out.reserve(BUFFER_LEN);
    let len = out.len();
    let spare: &mut [Out; BUFFER_LEN] = out
        .spare_capacity_mut()
        .first_chunk_mut()
        .expect("reserved above");
    let n = i.write(spare);
    assert!(n <= BUFFER_LEN);
    // SAFETY: `write` initialised `spare[..n]`, which is `out`'s memory from `len` to `len + n`,
    // within the capacity reserved above (n ≤ BUFFER_LEN, checked).
    unsafe { out.set_len(len + n) }
}

/// An integer that [`Buffer::format`] prints. Sealed: implemented for every primitive integer.
pub trait Integer: private::Sealed {
    /// The longest string this type prints.
    const MAX_STR_LEN: usize;
}

mod private {
    pub trait Sealed: Copy {
        /// Prints at the start of `out`, returns the length ([`append`](super::append)).
        fn write(self, out: &mut [super::Out; super::BUFFER_LEN]) -> usize;
        /// Prints anywhere in `out`, returns where ([`Buffer::format`](super::Buffer::format)).
        fn place(self, out: &mut [super::Out; super::BUFFER_LEN]) -> core::ops::Range<usize>;
    }
}

/// `out`'s first `N` bytes as an array (every `N` used here is at most the buffer's length).
#[inline(always)]
fn head<const N: usize>(out: &mut [Out; BUFFER_LEN]) -> &mut [Out; N] {
    out.first_chunk_mut().expect("N ≤ BUFFER_LEN")
}

macro_rules! integer {
    ($($t:ty => $len:expr, |$x:ident, $out:ident| $write:expr, $place:expr;)*) => {$(
        impl Integer for $t {
            const MAX_STR_LEN: usize = $len;
        }
        impl private::Sealed for $t {
            #[inline(always)]
            fn write(self, $out: &mut [Out; BUFFER_LEN]) -> usize {
                let $x = self;
                $write
            }
            #[inline(always)]
            fn place(self, $out: &mut [Out; BUFFER_LEN]) -> core::ops::Range<usize> {
                let $x = self;
                $place
            }
        }
    )*};
}

// `Buffer::format` and `append` have 40 bytes of room. `write` (for `append`): 32-bit values
// get 16 of them, so that nine or ten digits go in one store (see `store16`); wider ones get
// their `raw` array, whose printers use 16 bytes for values that fit 32 bits. `place` (for
// `format`): the `placed` printers up to 64 bits, a sign at byte 0 or just before the digits;
// 128 bits print at the start as for `append`.
integer! {
    u8 => 3, |x, out| raw::u32_into(head(out), u32::from(x)), placed::u32(head(out), u32::from(x));
    u16 => 5, |x, out| raw::u32_into(head(out), u32::from(x)), placed::u32(head(out), u32::from(x));
    u32 => 10, |x, out| raw::u32_digits::<16>(head(out), x), placed::u32(head(out), x);
    u64 => 20, |x, out| raw::u64_into(head(out), x), placed::u64(head(out), x);
    u128 => 39, |x, out| raw::u128_into(head(out), x), 0..raw::u128_into(head(out), x);
    usize => 20, |x, out| raw::u64_into(head(out), x as u64), placed::u64(head(out), x as u64);
    i8 => 4, |x, out| raw::i32_into(head(out), i32::from(x)),
        placed::signed(out, x < 0, |d| placed::u32(d, u32::from(x.unsigned_abs())));
    i16 => 6, |x, out| raw::i32_into(head(out), i32::from(x)),
        placed::signed(out, x < 0, |d| placed::u32(d, u32::from(x.unsigned_abs())));
    i32 => 11, |x, out| raw::signed::<16, 17>(head(out), x < 0, |d| raw::u32_digits(d, x.unsigned_abs())),
        placed::signed(out, x < 0, |d| placed::u32(d, x.unsigned_abs()));
    i64 => 20, |x, out| raw::i64_into(head(out), x),
        placed::signed(out, x < 0, |d| placed::u64(d, x.unsigned_abs()));
    i128 => 40, |x, out| raw::i128_into(head(out), x), 0..raw::i128_into(head(out), x);
    isize => 20, |x, out| raw::i64_into(head(out), x as i64),
        placed::signed(out, x < 0, |d| placed::u64(d, x.unsigned_abs() as u64));
}

// usize and isize are printed as 64-bit values: this crate targets 64-bit platforms.
const _: () = assert!(usize::BITS == 64);

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    /// The fixed-point divisions, over the ranges where they are used (and the first value
    /// where they stop being exact, documented in the crate header).
    #[test]
    fn fixed_point_divisions_are_exact_on_their_ranges() {
        // (multiplier, shift, divisor, first value where the division stops being exact)
        for (m, shift, d, first) in [
            (103u32, 10, 10, 179u32),
            (5243, 19, 100, 43_699),
            (41, 12, 100, 1099),
            (205, 11, 10, 1029),
        ] {
            for v in 0..first {
                assert_eq!((v * m) >> shift, v / d, "{v} · {m} >> {shift}");
            }
            assert_ne!((first * m) >> shift, first / d, "{first} · {m} >> {shift}");
        }
    }

    /// `Buffer::format`'s seventeen to twenty digits both ways: in one AVX store where the CPU
    /// has it, and in two stores (forced here by setting the detector's answer; a build with
    /// AVX enabled has no two-store path to force). Other tests in this binary that print
    /// such numbers would take either path, and both print the same.
    #[test]
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    fn twenty_digits_with_and_without_avx() {
        let mut buf = Buffer::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut values = std::vec![10_000_000_000_000_000, u64::MAX, i64::MAX as u64];
        values.extend((0..20_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.max(10_000_000_000_000_000)
        }));
        use core::sync::atomic::Ordering::Relaxed;
        let has_avx = avx::available();
        let before = avx::STATE.load(Relaxed);
        let mut paths = 0;
        for state in [1, 2] {
            if state == 2 && !has_avx || state == 1 && cfg!(target_feature = "avx") {
                continue;
            }
            paths += 1;
            avx::STATE.store(state, Relaxed);
            for &v in &values {
                assert_eq!(buf.format(v), v.to_string(), "state {state}");
                let n = -((v >> 1) as i64);
                assert_eq!(buf.format(n), n.to_string(), "state {state}");
            }
        }
        avx::STATE.store(before, Relaxed);
        assert!(paths >= 1);
        std::eprintln!("twenty digits: {paths} path(s) tested, AVX: {has_avx}");
    }

    /// `three`'s two quotients and its sum, on every three-digit number.
    #[test]
    fn three_digits_from_two_quotients() {
        for x in 100..1000u32 {
            let bytes = three(x).to_le_bytes();
            assert_eq!(&bytes[..3], std::format!("{x}").as_bytes(), "{x}");
            assert_eq!(bytes[3], 0, "{x}");
        }
    }

    /// The four-digit groups of 64-bit values, each from `x` alone, at the edges of the
    /// ranges that use them and across `u64`.
    #[test]
    fn groups_of_four_digits_from_the_value_itself() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let edges = [
            1 << 32,
            9_999_999_999_999_999,
            10_000_000_000_000_000,
            u64::MAX,
        ];
        for v in edges.into_iter().chain((0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })) {
            let want = [12, 8, 4, 0].map(|k| ((v / 10u64.pow(k)) % 10_000) as u32);
            assert_eq!(groups_of(v), want, "{v}");
            let digits = std::format!("{:016}", v % 10_000_000_000_000_000);
            assert_eq!(groups16(want).to_le_bytes(), digits.as_bytes(), "{v}");
        }
    }

    /// The sixteen-digit vector path, against `format!`, on strides through both halves and
    /// at their edges.
    #[test]
    fn sixteen_digits_at_once() {
        let edges = [0, 1, 9, 10, 99, 100, 9_999, 10_000, 99_999_999];
        let stride = (0..100_000_000u32).step_by(104_729);
        for a in stride.clone().chain(edges) {
            for b in stride.clone().step_by(37).chain(edges) {
                let want = std::format!("{a:08}{b:08}");
                assert_eq!(digits16(a, b).to_le_bytes(), want.as_bytes(), "{a} {b}");
            }
        }
    }

    /// Every value of the lane-parallel steps, against digit-by-digit arithmetic.
    #[test]
    fn bcd_words_hold_the_digits_in_printing_order() {
        for x in 0..10_000u32 {
            let digits = [x / 1000, x / 100 % 10, x / 10 % 10, x % 10];
            assert_eq!(bcd4(x).to_le_bytes().map(u32::from), digits, "{x}");
        }
        for x in (0..100_000_000u32).step_by(9_973).chain([99_999_999]) {
            let mut expect = [0u8; 8];
            let mut y = x;
            for d in expect.iter_mut().rev() {
                *d = (y % 10) as u8;
                y /= 10;
            }
            assert_eq!(bcd8(x).to_le_bytes(), expect, "{x}");
        }
        for x in 0..100u32 {
            let (w, n) = pair(x);
            assert_eq!(&w.to_le_bytes()[..n], x.to_string().as_bytes(), "{x}");
        }
    }
}
