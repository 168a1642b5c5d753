//! `itoa`: printing integers in decimal — `spindle_fmt` (the post's `an_itoa`/`an_ltoa`: no
//! table, digits turned into ASCII inside a register) against the `itoa` crate (libcore's
//! radix-100 lookup table), `itoap` (the SSE2/branch-table printer of Milo Yip's
//! itoa-benchmark) and `std`'s `write!`, for `u32` and `u64`.
//!
//! The post measured six input distributions because branch predictors make rankings depend on
//! the data; the lab adds the two conventions of itoa-benchmark (lengths in sequence, lengths
//! uniform). Each distribution is an array of inputs long enough that the predictors cannot
//! learn it (256 Ki: they learnt the 8 Ki the lab used before, see `INPUTS`); a run prints it
//! in a circle, appending each string to an output vector as a JSON or CSV writer would (the
//! post's program printed JSON), and records nanoseconds per number for every distribution,
//! averaged over eight copies of each timed loop placed at different addresses (see `PLACES`:
//! placement alone can move a printer by a fifth). One more row, the copy alone
//! (`extend_from_slice` of as many bytes as the number has digits), is a floor under the
//! drop-in rows: both drop-ins pay it, so the 1.2 × claim compares what remains; where the
//! floor alone is above 1 / 1.2 of itoa's time and our drop-in is not faster than the floor,
//! the claim's verdict says the bound is out of reach on that machine (see `dropin_reach`).
//!
//! A last section, `forward`, times store-to-load forwarding as the drop-ins meet it (a
//! 16-byte store, then an 8-byte load of its upper half, or across its halves as `memcpy`'s
//! first load of a 10-digit string does): where the crossing load waits much longer, the
//! drop-in claims on long numbers say so (see `forwarding_note`).
//!
//! [`RIVALS`] declares the printers once: id, label, and the variant of each section (`u32`,
//! `u64`), built from its [`Printer`] impl (the adapter to the crate's API). Both sections
//! iterate it, so a new printer is one `impl Printer` and one entry.

use std::hint::black_box;
use std::io::Write as _;

use crate::kit::{time, XorShift};
use crate::references::PRINTING_INTEGERS;
use crate::results::ExperimentResult;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};

pub struct Itoa;

/// Inputs per distribution: 256 Ki, read in a circle (see [`pass`]). Branch predictors learn
/// far longer sequences than one would think when a benchmark repeats them: with the 8 Ki
/// inputs the lab printed over and over until commit 967ef5a, one of them had learnt the
/// numbers' lengths, which no program printing fresh data sees (that commit's message has
/// the probe's figures). The inputs stream through the caches (2 MiB a distribution); each
/// pass reads its share of them before it starts the clock (see [`warm`]).
const INPUTS: usize = 1 << 18;

/// Numbers appended to the output between two `clear`s, as a writer flushes its buffer: the
/// output (at most 20 bytes a number) stays in the L2 cache.
const CHUNK: usize = 1 << 13;

/// (metric id, label); the first six are the post's.
const DISTS: [(&str, &str); 8] = [
    (
        "sizes",
        "size class: uniform in [0, 10^k), k uniform in 2…8",
    ),
    ("counts", "2^(64·U) (u32: 2^(32·U))"),
    ("ids", "uniform in [0, 256 Ki)"),
    ("small", "uniform in [0, 20)"),
    ("hundreds", "uniform in [100, 200)"),
    ("timestamps", "Unix time, 2014-07-01 ± 10^6 s"),
    ("sequential", "lengths 1, 2, …, max digits in turn"),
    ("lengths", "length uniform in 1…max digits"),
];
const POST_DISTS: usize = 6;

/// The post's distribution `d` (or an itoa-benchmark one) for integers of `bits` bits.
fn inputs(d: usize, bits: u32, rng: &mut XorShift) -> Vec<u64> {
    let max = if bits == 32 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    let digits = max.ilog10() + 1;
    // A random integer with exactly `len` digits.
    let with_len = |rng: &mut XorShift, len: u32| {
        let lo = if len == 1 { 0 } else { 10u64.pow(len - 1) };
        let hi = 10u64.checked_pow(len).map_or(max, |p| (p - 1).min(max));
        lo + rng.below(hi - lo + 1)
    };
    (0..INPUTS)
        .map(|i| match d {
            0 => {
                let k = 2 + rng.below(7) as u32;
                rng.below(10u64.pow(k))
            }
            1 => {
                let u = rng.below(1 << 53) as f64 / (1u64 << 53) as f64;
                (2f64.powf(f64::from(bits) * u) as u64).min(max)
            }
            2 => rng.below(256 << 10),
            3 => rng.below(20),
            4 => 100 + rng.below(100),
            5 => 1_404_172_800 - 1_000_000 + rng.below(2_000_001),
            6 => with_len(rng, 1 + i as u32 % digits),
            _ => {
                let len = 1 + rng.below(u64::from(digits)) as u32;
                with_len(rng, len)
            }
        })
        .collect()
}

/// An integer printer under test: appends the decimal string of `x` to `out`, the way a JSON
/// or CSV writer uses it.
trait Printer: Default {
    fn u32(&mut self, out: &mut Vec<u8>, x: u32);
    fn u64(&mut self, out: &mut Vec<u8>, x: u64);
}

#[derive(Default)]
struct Ours(spindle_fmt::Buffer);
impl Printer for Ours {
    #[inline(always)]
    fn u32(&mut self, out: &mut Vec<u8>, x: u32) {
        out.extend_from_slice(self.0.format(x).as_bytes())
    }
    #[inline(always)]
    fn u64(&mut self, out: &mut Vec<u8>, x: u64) {
        out.extend_from_slice(self.0.format(x).as_bytes())
    }
}

/// The raw form: digits written straight into the vector's spare capacity.
#[derive(Default)]
struct OursAppend;
impl Printer for OursAppend {
    #[inline(always)]
    fn u32(&mut self, out: &mut Vec<u8>, x: u32) {
        spindle_fmt::append(out, x)
    }
    #[inline(always)]
    fn u64(&mut self, out: &mut Vec<u8>, x: u64) {
        spindle_fmt::append(out, x)
    }
}

/// What serde_json does with the itoa crate.
#[derive(Default)]
struct ItoaCrate(itoa::Buffer);
impl Printer for ItoaCrate {
    #[inline(always)]
    fn u32(&mut self, out: &mut Vec<u8>, x: u32) {
        out.extend_from_slice(self.0.format(x).as_bytes())
    }
    #[inline(always)]
    fn u64(&mut self, out: &mut Vec<u8>, x: u64) {
        out.extend_from_slice(self.0.format(x).as_bytes())
    }
}

/// itoap's own way to append: straight into the vector's spare capacity.
#[derive(Default)]
struct Itoap;
impl Printer for Itoap {
    #[inline(always)]
    fn u32(&mut self, out: &mut Vec<u8>, x: u32) {
        itoap::write_to_vec(out, x)
    }
    #[inline(always)]
    fn u64(&mut self, out: &mut Vec<u8>, x: u64) {
        itoap::write_to_vec(out, x)
    }
}

/// The copy every drop-in pays, alone: `extend_from_slice` of as many bytes as `x` has
/// digits (counted with `ilog10`) from a constant string. Any `Buffer::format` +
/// `extend_from_slice` finds the length and makes this copy, and prints the digits besides:
/// this row is a floor under the drop-in rows.
#[derive(Default)]
struct CopyFloor;
impl CopyFloor {
    #[inline(always)]
    fn copy(out: &mut Vec<u8>, x: u64) {
        const DIGITS: &[u8; 20] = b"12345678901234567890";
        let n = x.checked_ilog10().map_or(1, |d| d as usize + 1);
        out.extend_from_slice(&DIGITS[..n])
    }
}
impl Printer for CopyFloor {
    #[inline(always)]
    fn u32(&mut self, out: &mut Vec<u8>, x: u32) {
        CopyFloor::copy(out, u64::from(x))
    }
    #[inline(always)]
    fn u64(&mut self, out: &mut Vec<u8>, x: u64) {
        CopyFloor::copy(out, x)
    }
}

/// `write!(out, "{x}")`: core::fmt's integer Display through io::Write.
#[derive(Default)]
struct Std;
impl Printer for Std {
    #[inline(always)]
    fn u32(&mut self, out: &mut Vec<u8>, x: u32) {
        write!(out, "{x}").expect("a Vec takes every byte")
    }
    #[inline(always)]
    fn u64(&mut self, out: &mut Vec<u8>, x: u64) {
        write!(out, "{x}").expect("a Vec takes every byte")
    }
}

/// Copies of every printer's timed loop ([`pass`]), each a function of its own at its own
/// address. Where a loop's code lands can change its speed by a fifth or more, by different
/// amounts for each printer (how its branches and `memcpy`'s share the predictors, how its
/// instructions fall into fetch blocks), so that one build's placement can make either
/// printer look 1.2 × as fast as the other (a probe of eight copies of these loops, before
/// commit 967ef5a). Each sample therefore times every copy for an equal share of the numbers
/// and reports the mean: the speed of the code averaged over placements, where a user's own
/// build draws one placement at random.
const PLACES: usize = 8;

/// Prints `n` numbers of `xs`, from `*at` on and round in a circle, into `out` (emptied every
/// [`CHUNK`] numbers, never reallocated); leaves `*at` where it stopped, so that the next pass
/// goes on with numbers the branch predictors have not seen for a while (see [`INPUTS`]).
/// Returns nanoseconds per number. `PLACE` tells the copies apart (see [`PLACES`]): it only
/// keeps the compiler from merging them into one function.
///
/// Before the clock starts, the pass reads the `n` inputs it will print (see [`warm`]).
#[inline(never)]
fn pass<P: Printer, const WIDE: bool, const PLACE: usize>(
    p: &mut P,
    out: &mut Vec<u8>,
    xs: &[u64],
    at: &mut usize,
    n: u64,
) -> f64 {
    warm(xs, *at, n);
    let mut i = *at;
    let span = time(|| {
        let mut left = n as usize;
        while left > 0 {
            if i >= xs.len() {
                i = 0;
            }
            let k = left.min(CHUNK).min(xs.len() - i);
            out.clear();
            for &x in &xs[i..i + k] {
                if WIDE {
                    p.u64(out, x)
                } else {
                    p.u32(out, x as u32)
                }
            }
            black_box(&mut *out);
            left -= k;
            i += k;
        }
    });
    *at = i;
    black_box(PLACE);
    span.ns / n as f64
}

/// Reads the `n` inputs from `at` on (round in a circle), untimed, so that the timed pass
/// finds them in the cache and times the printer, not the memory. Between two reads of the
/// same inputs the lab reads the other distributions' (every printer prints all eight in
/// turn), so a pass's inputs (about 150 KB in a quick run on a 2-vCPU guest) have left the
/// L2 cache. On the 2-vCPU Intel Xeon guest (2 MiB of L2 a core) the hardware prefetchers
/// did not keep up with that stream, and every printer waited for memory alike, which pulled
/// the ratios towards 1; a probe that swept the caches between passes showed it, and this
/// read undid it (the commit that added it has the figures). It helps only while a pass's
/// share fits the L2 cache. Reading the inputs teaches the branch predictors nothing: only
/// the printer branches on them.
#[inline(never)]
fn warm(xs: &[u64], at: usize, n: u64) {
    let mut sum = 0u64;
    let mut left = n as usize;
    let mut i = at;
    while left > 0 {
        if i >= xs.len() {
            i = 0;
        }
        let k = left.min(xs.len() - i);
        sum = xs[i..i + k].iter().fold(sum, |s, &x| s.wrapping_add(x));
        left -= k;
        i += k;
    }
    black_box(sum);
}

/// [`pass`] at every place: `n` numbers shared equally between the [`PLACES`] copies;
/// returns the mean nanoseconds per number.
fn passes<P: Printer, const WIDE: bool>(
    p: &mut P,
    out: &mut Vec<u8>,
    xs: &[u64],
    at: &mut usize,
    n: u64,
) -> f64 {
    type Pass<P> = fn(&mut P, &mut Vec<u8>, &[u64], &mut usize, u64) -> f64;
    let copies: [Pass<P>; PLACES] = [
        pass::<P, WIDE, 0>,
        pass::<P, WIDE, 1>,
        pass::<P, WIDE, 2>,
        pass::<P, WIDE, 3>,
        pass::<P, WIDE, 4>,
        pass::<P, WIDE, 5>,
        pass::<P, WIDE, 6>,
        pass::<P, WIDE, 7>,
    ];
    let share = n.div_ceil(PLACES as u64);
    copies
        .iter()
        .map(|pass| pass(p, out, xs, at, share))
        .sum::<f64>()
        / PLACES as f64
}

/// A variant: `n` numbers from every distribution, one metric per distribution.
fn variant<'a, P: Printer + 'static, const WIDE: bool>(
    inputs: &'a [Vec<u64>],
    id: String,
    label: &str,
) -> Variant<'a> {
    let section = if WIDE { "u64" } else { "u32" };
    let mut p = P::default();
    let mut out = Vec::with_capacity(CHUNK * 24);
    // Where each distribution's next pass starts.
    let mut at = [0; DISTS.len()];
    Variant::calibrated(section, id, label, move |n| {
        let mut s = Sample::new();
        for (((metric, _), xs), at) in DISTS.iter().zip(inputs).zip(&mut at) {
            s = s.with(metric, passes::<P, WIDE>(&mut p, &mut out, xs, at, n));
        }
        s
    })
    .max_work(1 << 26)
}

/// Builds a printer's variant in one section, over its inputs (one array per distribution).
type Build = for<'a> fn(&'a [Vec<u64>], String, &str) -> Variant<'a>;

/// A printer: one entry of [`RIVALS`].
struct Rival {
    /// Variant ids are `<id>-<section>`.
    id: &'static str,
    label: &'static str,
    u32: Build,
    u64: Build,
}

impl Rival {
    const fn of<P: Printer + 'static>(id: &'static str, label: &'static str) -> Rival {
        Rival {
            id,
            label,
            u32: variant::<P, false>,
            u64: variant::<P, true>,
        }
    }
}

/// Every printer, in the order of the report's rows; each takes part in both sections.
const RIVALS: &[Rival] = &[
    Rival::of::<Ours>(
        "ours",
        "spindle_fmt::Buffer (an_itoa / an_ltoa: SWAR, no table)",
    ),
    Rival::of::<OursAppend>(
        "ours-append",
        "spindle_fmt::append (the raw form, straight into the vector)",
    ),
    Rival::of::<ItoaCrate>("itoa", "itoa::Buffer (libcore's radix-100 table)"),
    Rival::of::<Itoap>("itoap", "itoap::write_to_vec (SSE2 / branch table)"),
    Rival::of::<Std>("std", "std: write!(vec, \"{x}\")"),
    Rival::of::<CopyFloor>(
        "copy",
        "the copy alone: extend_from_slice of x's length (a floor under the drop-ins)",
    ),
];

/// Section `width` (u32 or u64): every printer over `inputs`, one metric per distribution.
fn section<'a>(
    plan: &mut Plan<'a>,
    width: &'static str,
    inputs: &'a [Vec<u64>],
    build_of: fn(&Rival) -> Build,
) {
    let mut section = Section::new(
        width,
        format!("{width}: nanoseconds per number, by input distribution"),
    )
    .baseline(format!("itoa-{width}"));
    for (id, label) in DISTS {
        section = section.metric(Metric::time(id, label));
    }
    plan.section(section);
    for r in RIVALS {
        plan.variant(build_of(r)(inputs, format!("{}-{width}", r.id), r.label));
    }
}

/// Claim ids, one per (width, distribution): the runner wants `'static` names.
const DROPIN: [[&str; 8]; 2] = [
    [
        "dropin-u32-sizes",
        "dropin-u32-counts",
        "dropin-u32-ids",
        "dropin-u32-small",
        "dropin-u32-hundreds",
        "dropin-u32-timestamps",
        "dropin-u32-sequential",
        "dropin-u32-lengths",
    ],
    [
        "dropin-u64-sizes",
        "dropin-u64-counts",
        "dropin-u64-ids",
        "dropin-u64-small",
        "dropin-u64-hundreds",
        "dropin-u64-timestamps",
        "dropin-u64-sequential",
        "dropin-u64-lengths",
    ],
];
const RANKING: [&str; POST_DISTS] = [
    "ranking-sizes",
    "ranking-counts",
    "ranking-ids",
    "ranking-small",
    "ranking-hundreds",
    "ranking-timestamps",
];

/// Store-to-load forwarding as the drop-ins meet it: `n` steps of a chain through memory, each
/// a 16-byte store (a 16-aligned buffer) of a value that depends on the previous step, then an
/// 8-byte load at byte `at` of it, which the next step's store depends on. `at = 8` loads the
/// store's upper half; `at = 6` crosses its two halves, as `memcpy`'s first load of a string of
/// 10 digits placed at the end of a 16-byte store does (it loads the first and the last 8
/// bytes). Cores that forward any load a store contains (AMD's) take the same time for both;
/// cores that forward only a store's aligned halves and quarters (Intel's, by Agner Fog's
/// microarchitecture guide) make the crossing load wait until the store reaches the cache.
///
/// On x86-64 each step is written in assembly (`x` in both halves of a vector register, one
/// `movdqa` store, one `mov` load, `xor`): in
/// Rust, with volatile accesses, the compiler split the store into two 8-byte stores and the
/// load into eight 1-byte loads, so that neither chain was the one `memcpy` meets, and both
/// took the same time on every machine (up to commit 25828f3).
#[inline(never)]
fn forward_chain(n: u64, at: usize) -> u64 {
    #[repr(C, align(16))]
    struct Line([u8; 32]);
    assert!(at + 8 <= 16, "the load lies inside the store");
    let mut line = Line([0; 32]);
    let p = line.0.as_mut_ptr();
    let mut x = black_box(0x3031_3233_3435_3637u64);
    for _ in 0..n {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `p` is 16-aligned with 32 bytes behind it and `at + 8 ≤ 16` (asserted): the
        // store and the load stay inside `line`, which nothing else uses meanwhile; the
        // template touches no other memory, no stack, and declares its registers.
        unsafe {
            core::arch::asm!(
                "movq {v}, {x}",
                "punpcklqdq {v}, {v}",
                "movdqa xmmword ptr [{p}], {v}",
                "mov {x}, qword ptr [{p} + {at}]",
                "xor {x}, 1",
                p = in(reg) p,
                at = in(reg) at,
                x = inout(reg) x,
                v = out(xmm_reg) _,
                options(nostack),
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let v = u128::from(x) | u128::from(x) << 64;
            // SAFETY: as above (the load is of bytes: `at` need not be 8-aligned); volatile so
            // that the compiler keeps both accesses in memory (how it splits them is its choice
            // here: the section is exact on x86-64 only).
            unsafe {
                core::ptr::write_volatile(p.cast::<u128>(), v);
                let bytes = core::ptr::read_volatile(p.add(at).cast::<[u8; 8]>());
                x = u64::from_le_bytes(bytes) ^ 1;
            }
        }
    }
    black_box(&line);
    x
}

/// The `forward` section: the two chains of [`forward_chain`].
fn forward_section(plan: &mut Plan<'_>) {
    plan.section(Section::per_op(
        "forward",
        "Store-to-load forwarding: a 16-byte store, then an 8-byte load of part of it (a dependent chain)",
        "store + load",
    ));
    for (id, at, label) in [
        ("forward-half", 8, "load of the store's upper half (bytes 8–15)"),
        ("forward-cross", 6, "load across the store's halves (bytes 6–13), as memcpy's first load of a 10-digit string"),
    ] {
        plan.variant(Variant::per_op("forward", id, label, move |n| {
            time(|| {
                black_box(forward_chain(n, at));
            })
        }));
    }
}

/// Where the copy alone (the `copy` row) costs more than 1 / 1.2 of itoa's format + copy, and
/// our drop-in no less than the copy, no drop-in printer can be 1.2 × as fast as itoa's,
/// whatever it does: the drop-in claim's explanation then says so, with this run's medians.
/// The claim keeps its bound and verdict.
fn dropin_reach(r: &mut ExperimentResult) {
    forwarding_note(r);
    for (w, width) in ["u32", "u64"].into_iter().enumerate() {
        for (d, (dist, _)) in DISTS.iter().enumerate() {
            let median = |id: String| {
                r.variant(&id)
                    .and_then(|(_, v)| v.metric(dist))
                    .map(|m| m.summary.median)
            };
            let (Some(copy), Some(itoa), Some(ours)) = (
                median(format!("copy-{width}")),
                median(format!("itoa-{width}")),
                median(format!("ours-{width}")),
            ) else {
                continue;
            };
            let floor = copy / itoa;
            // The copy row is a floor only where the drop-in is not faster than it. With inputs
            // the predictors cannot learn, branch mispredictions dominate both, and how early
            // each resolves matters more than the work: the drop-in can come out faster than
            // the copy alone, and then the row bounds nothing.
            if floor.is_nan() || floor <= 1.0 / 1.2 || ours.is_nan() || ours < copy {
                continue;
            }
            if let Some(c) = r.claims.iter_mut().find(|c| c.id == DROPIN[w][d]) {
                c.explanation.push_str(&format!("; out of reach on this machine: the copy alone (extend_from_slice of as many bytes) costs {floor:.2} × itoa's format + copy (medians), more than 1 / 1.2"));
            }
        }
    }
}

/// Where a load that crosses a 16-byte store's halves waits clearly longer than one of its
/// halves (the `forward` section: at least 1.5 ×, medians), the drop-in claims of the
/// distributions with numbers of 9 digits or more say so: `memcpy` of a 9–15-byte string loads
/// its first and last 8 bytes, overlapping, and no placement of the digits lets a core that
/// forwards only aligned halves serve both from the printer's stores (itoa's 2-byte stores
/// forward to neither). Both drop-ins then wait for their stores to reach the cache, and the
/// printer's own speed counts for less.
///
/// On `timestamps`, where every number has ten digits, those waits come one after another.
/// Where one step of the section's crossing chain takes more than 1 / 1.2 of itoa's time per
/// number, and our drop-in no less than that step, the claim says so with both figures. The
/// claims keep their bounds and verdicts.
fn forwarding_note(r: &mut ExperimentResult) {
    let median = |id: &str| {
        r.variant(id)
            .and_then(|(_, v)| v.metric("time"))
            .map(|m| m.summary.median)
    };
    let (Some(half), Some(cross)) = (median("forward-half"), median("forward-cross")) else {
        return;
    };
    // NaN (a missing median) says nothing either.
    if cross.is_nan() || half.is_nan() || cross < 1.5 * half {
        return;
    }
    // The distributions with numbers of 9 digits or more: counts, timestamps, sequential,
    // lengths (see `DISTS`).
    for id in DROPIN.iter().flat_map(|w| [w[1], w[5], w[6], w[7]]) {
        if let Some(c) = r.claims.iter_mut().find(|c| c.id == id) {
            c.explanation.push_str(&format!("; this machine forwards a 16-byte store only to loads of its halves (section forward: {cross:.1} ns a step across them, {half:.1} within one): memcpy's first load of a 9–15-digit string crosses them, so every drop-in waits for its stores to reach the cache on those numbers"));
        }
    }
    // Timestamps all have ten digits: every number's copy waits for its stores to reach the
    // cache (ours: a load crosses the halves of one store; itoa's: its loads span several
    // 2-byte stores), one number after another (a core retires in order, and a store reaches
    // the cache only after it retires), so a number costs about one step of the crossing
    // chain. About: the chain's step also waits for its store's data, which a printer's next
    // store need not.
    let Some(ts) = DISTS.iter().position(|&(id, _)| id == "timestamps") else {
        return;
    };
    for (w, width) in ["u32", "u64"].into_iter().enumerate() {
        let printer = |id: &str| {
            r.variant(&format!("{id}-{width}"))
                .and_then(|(_, v)| v.metric(DISTS[ts].0))
                .map(|m| m.summary.median)
        };
        let (Some(itoa), Some(ours)) = (printer("itoa"), printer("ours")) else {
            continue;
        };
        // A drop-in faster than one step shows that the step bounds nothing here.
        if itoa.is_nan() || ours.is_nan() || cross / itoa <= 1.0 / 1.2 || ours < cross {
            continue;
        }
        if let Some(c) = r.claims.iter_mut().find(|c| c.id == DROPIN[w][ts]) {
            c.explanation.push_str(&format!("; every number here has ten digits, and each number's copy waits for its stores to reach the cache after the previous number's did (a core retires in order): one step of the crossing chain in section forward takes {cross:.1} ns, {:.2} × itoa's format + copy ({itoa:.1} ns) and more than 1 / 1.2 of it, and our drop-in takes {ours:.1} ns, so the printers' own work counts for little on these numbers", cross / itoa));
        }
    }
}

/// Claims: the drop-in Buffer::format ≥ 1.2 × as fast as itoa::Buffer everywhere, the post's
/// rankings (on append, the post's contract); notes.
fn claims(plan: &mut Plan<'_>) {
    for (w, width) in ["u32", "u64"].into_iter().enumerate() {
        for (d, (dist, label)) in DISTS.iter().enumerate() {
            plan.claim(
                Claim::guarantee(
                    DROPIN[w][d],
                    format!("{width}, {label}: appending through spindle_fmt::Buffer::format (the drop-in for itoa::Buffer) is at least 1.2 × as fast as through itoa::Buffer::format"),
                )
                .ratio(format!("ours-{width}"), format!("itoa-{width}"))
                .metric(dist)
                .at_most(1.0 / 1.2),
            );
        }
    }
    for (d, (dist, label)) in DISTS[..POST_DISTS].iter().enumerate() {
        plan.claim(
            Claim::reproduction(
                RANKING[d],
                format!("u64, {label}: the table-free printer beats the radix-100 table"),
                PRINTING_INTEGERS,
                "an_ltoa faster than fb_itoa (radix 100, 200-byte table) in every one of the six facets",
            )
            .ratio("ours-append-u64", "itoa-u64")
            .metric(dist)
            .at_most(1.0),
        );
    }
    for (id, width) in [("generic-u32", "u32"), ("generic-u64", "u64")] {
        plan.claim(
            Claim::reproduction(
                id,
                format!("{width}, size classes: generic formatting (std's write!) takes at least twice as long"),
                PRINTING_INTEGERS,
                "glibc's sprintf \"way out there\"; \"doing 4-5x better than libc code is already a given\"",
            )
            .ratio(format!("ours-append-{width}"), format!("std-{width}"))
            .metric("sizes")
            .at_most(0.5),
        );
    }
    plan.note("The post's peers (fb_itoa, modp, lwan, glibc's sprintf) are C; here the radix-100 table is the itoa crate (libcore's algorithm, like fb_itoa without the galloping search: it writes backwards and returns the tail), and generic formatting is std's write!. No crate of jeaiii's algorithm is in the registry; itoap, the fastest published Rust printer we know, stands in as the strongest peer.");
    plan.note("The guarantees are about the drop-in: spindle_fmt::Buffer::format + extend_from_slice against itoa::Buffer::format + extend_from_slice (how serde_json appends), the one-import switch a user makes. Both pay the same copy out of the buffer. spindle_fmt::append, the post's contract (print straight into the destination, garbage allowed after the digits inside reserved room), has its own row; the post's rankings are read on it.");
    plan.finish(dropin_reach);
    plan.note("For u32 the 'counts' distribution is 2^(32·U): the post's an_itoa handles 32 bits only. The post's size-class distribution is read as: pick 10^k uniformly among 10^2 … 10^8, then a number uniformly below it.");
}

impl Experiment for Itoa {
    fn info(&self) -> Info {
        Info {
            name: "itoa",
            title: "Printing integers: an_itoa vs the itoa crate, itoap and std",
            summary: "u32/u64 to decimal over the post's six input distributions and two more: spindle_fmt vs itoa, itoap, std's write!",
            question: "How many nanoseconds does printing one integer take with spindle_fmt (an_itoa: no table, \
                       SIMD within a register), the itoa crate, itoap and std's write!, when the inputs come from \
                       distributions that defeat or favour the branch predictor?",
            references: &[PRINTING_INTEGERS],
            quick_seconds: 20,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let mut rng = XorShift::new(0x1704);
        let narrow: Vec<Vec<u64>> = (0..DISTS.len()).map(|d| inputs(d, 32, &mut rng)).collect();
        let wide: Vec<Vec<u64>> = (0..DISTS.len()).map(|d| inputs(d, 64, &mut rng)).collect();
        let mut plan = Plan::new();
        plan.param(
            "inputs per distribution",
            format!("{INPUTS}, read in a circle, each pass going on where the last stopped and reading its share once, untimed, before it starts the clock"),
        );
        plan.param(
            "per number",
            format!("appended to a Vec<u8> (emptied every {CHUNK} numbers): Buffer::format + extend_from_slice (ours, itoa), itoap::write_to_vec, write!(vec, \"{{x}}\") (std)"),
        );
        plan.param(
            "placements",
            format!("each sample times {PLACES} copies of every printer's loop, at different addresses, for an equal share of the numbers, and reports their mean"),
        );
        section(&mut plan, "u32", &narrow, |r| r.u32);
        section(&mut plan, "u64", &wide, |r| r.u64);
        forward_section(&mut plan);
        claims(&mut plan);
        ctx.measure(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass prints the next `n` inputs, going on from where the last pass stopped and round
    /// the end of the array, and every copy of it does the same.
    #[test]
    fn passes_go_on_where_the_last_stopped_and_wrap_around() {
        #[derive(Default)]
        struct Seen(Vec<u64>);
        impl Printer for Seen {
            fn u32(&mut self, _: &mut Vec<u8>, x: u32) {
                self.0.push(u64::from(x))
            }
            fn u64(&mut self, _: &mut Vec<u8>, x: u64) {
                self.0.push(x)
            }
        }
        let xs: Vec<u64> = (0..10).collect();
        let (mut p, mut out, mut at) = (Seen::default(), Vec::new(), 7);
        pass::<Seen, true, 0>(&mut p, &mut out, &xs, &mut at, 5);
        assert_eq!(p.0, [7, 8, 9, 0, 1]);
        assert_eq!(at, 2);
        pass::<Seen, false, 3>(&mut p, &mut out, &xs, &mut at, 23);
        let want: Vec<u64> = (2..25).map(|i| i % 10).collect();
        assert_eq!(p.0[5..], want[..]);
        assert_eq!(at, 5);
        // Eight copies, a share each: 16 numbers, two a copy.
        p.0.clear();
        passes::<Seen, true>(&mut p, &mut out, &xs, &mut at, 16);
        assert_eq!(p.0, (5..21).map(|i| i % 10).collect::<Vec<_>>());
    }

    /// The chain loads the bytes its documentation says: the upper half of the 16-byte store
    /// (the value itself, both halves being `x`), or bytes 6–13 (the top two bytes of the
    /// lower copy of `x`, then the low six of the upper one).
    #[test]
    fn forward_chain_loads_the_bytes_it_says() {
        let step = |x: u64, at: usize| -> u64 {
            let bytes: Vec<u8> = [x.to_le_bytes(), x.to_le_bytes()].concat();
            u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) ^ 1
        };
        for at in [6, 8] {
            let mut x = 0x3031_3233_3435_3637u64;
            for n in 0..5u64 {
                assert_eq!(forward_chain(n, at), x, "at {at}, {n} steps");
                x = step(x, at);
            }
        }
        assert_eq!(step(0x0807_0605_0403_0201, 6), 0x0605_0403_0201_0807 ^ 1);
    }
}
