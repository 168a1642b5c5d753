//! `sampler`: sampling without replacement, n values out of p = 10 000, three ways (Romain
//! Slootmaekers, "Share your mistakes: adventures in optimization", Incubaid blog: an array
//! scanned for duplicates, a bitset of p flags, and a sparse set).
//!
//! The post's micro-benchmark: for each of 19 sample sizes (1 … 2500), draw 100 000 samples;
//! each sample is filled (random values, retrying duplicates), iterated and cleared. Its totals
//! were about 1674 s (scan), 124 s (bitset) and 49 s (sparse set). Here each (structure, size)
//! cell is timed with a number of samples calibrated to the run time, and reported as the time
//! the post's 100 000 samples would take.
//!
//! [`RIVALS`] declares the three structures once (id, label, column of the per-size table, the
//! post's figures, how to build the variant); the section and the per-size table iterate it.

use std::hint::black_box;

use crate::kit::{calibrate, time, XorShift};
use crate::references::SAMPLING;
use crate::results::{ExperimentResult, Table};
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};

pub struct Sampler;

const P: u32 = 10_000;
const SIZES: [u32; 19] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 40, 80, 160, 320, 640, 1000, 2000, 2500,
];
const METRICS: [&str; 19] = [
    "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n20", "n40", "n80", "n160",
    "n320", "n640", "n1000", "n2000", "n2500",
];
/// The post's three tables: seconds for 100 000 samples of each size.
const REFERENCE: [[f64; 19]; 3] = [
    [
        0.017802,
        0.017753,
        0.025648,
        0.033298,
        0.040910,
        0.050635,
        0.056496,
        0.065127,
        0.073126,
        0.081244,
        0.170436,
        0.402476,
        1.060872,
        3.131289,
        10.381503,
        36.543450,
        85.969717,
        408.716565,
        1127.268196,
    ],
    [
        3.760345, 3.716187, 3.730672, 3.795472, 3.799934, 3.961258, 3.804574, 3.775391, 3.807858,
        3.914987, 3.949764, 4.159262, 4.430131, 4.953897, 6.132642, 8.438193, 11.140795, 19.150232,
        23.508719,
    ],
    [
        0.019265, 0.021046, 0.030151, 0.034281, 0.040782, 0.048158, 0.055332, 0.061747, 0.068712,
        0.075462, 0.144088, 0.276297, 0.539943, 1.069994, 2.143328, 4.334955, 6.893774, 14.607145,
        18.819379,
    ],
];
const POST_SAMPLES: f64 = 100_000.0;

/// The post's module signature: fill a sample of n distinct values below p, iterate, clear.
trait SampleSet {
    fn new(n: usize) -> Self;
    fn contains(&self, x: u32) -> bool;
    fn add(&mut self, x: u32);
    fn clear(&mut self);
    fn sum(&self) -> u64;
}

/// S0: the values in an array, scanned for duplicates.
struct Scan(Vec<u32>);
impl SampleSet for Scan {
    fn new(n: usize) -> Self {
        Scan(Vec::with_capacity(n))
    }
    fn contains(&self, x: u32) -> bool {
        self.0.contains(&x)
    }
    fn add(&mut self, x: u32) {
        self.0.push(x)
    }
    fn clear(&mut self) {
        self.0.clear()
    }
    fn sum(&self) -> u64 {
        self.0.iter().map(|&x| u64::from(x)).sum()
    }
}

/// S1: one flag per possible value; clearing and iterating are O(p).
struct Bits(Vec<bool>);
impl SampleSet for Bits {
    fn new(_: usize) -> Self {
        Bits(vec![false; P as usize])
    }
    fn contains(&self, x: u32) -> bool {
        self.0[x as usize]
    }
    fn add(&mut self, x: u32) {
        self.0[x as usize] = true
    }
    fn clear(&mut self) {
        self.0.iter_mut().for_each(|b| *b = false)
    }
    fn sum(&self) -> u64 {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, &b)| b)
            .map(|(i, _)| i as u64)
            .sum()
    }
}

/// S2: a sparse set (Briggs and Torczon): dense values, and each value's index into them.
struct Sparse {
    dense: Vec<u32>,
    sparse: Vec<u32>,
    n: usize,
}
impl SampleSet for Sparse {
    fn new(_: usize) -> Self {
        Sparse {
            dense: vec![0; P as usize],
            sparse: vec![0; P as usize],
            n: 0,
        }
    }
    fn contains(&self, x: u32) -> bool {
        let i = self.sparse[x as usize] as usize;
        i < self.n && self.dense[i] == x
    }
    fn add(&mut self, x: u32) {
        self.dense[self.n] = x;
        self.sparse[x as usize] = self.n as u32;
        self.n += 1;
    }
    fn clear(&mut self) {
        self.n = 0
    }
    fn sum(&self) -> u64 {
        self.dense[..self.n].iter().map(|&x| u64::from(x)).sum()
    }
}

/// `k` samples of size `n`: fill, iterate, clear.
#[inline(never)]
fn bench<S: SampleSet>(set: &mut S, n: u32, k: u64, rng: &mut XorShift) {
    for _ in 0..k {
        for _ in 0..n {
            let x = loop {
                let x = rng.below(u64::from(P)) as u32;
                if !set.contains(x) {
                    break x;
                }
            };
            set.add(x);
        }
        black_box(set.sum());
        set.clear();
    }
}

/// A variant: every size, each with its own calibrated number of samples (sized on first use).
fn variant<S: SampleSet + 'static>(
    id: &'static str,
    label: &'static str,
    cell: std::time::Duration,
) -> Variant<'static> {
    let mut rng = XorShift::new(0x5eed);
    let mut ks: Vec<u64> = Vec::new();
    Variant::fixed("sample", id, label, move || {
        if ks.is_empty() {
            ks = SIZES
                .iter()
                .map(|&n| {
                    calibrate(cell, 1, 1 << 30, |k| {
                        time(|| bench(&mut S::new(n as usize), n, k, &mut rng)).as_duration()
                    })
                })
                .collect();
        }
        let mut s = Sample::new();
        let (mut total, mut small, mut large) = (0.0, 0.0, 0.0);
        for (i, (&n, &k)) in SIZES.iter().zip(&ks).enumerate() {
            let mut set = S::new(n as usize);
            let per_sample = time(|| bench(&mut set, n, k, &mut rng)).ns / k as f64;
            let post = per_sample * POST_SAMPLES; // ns for the post's 100 000 samples
            total += post;
            small += if n <= 10 { post } else { 0.0 };
            large += if n >= 1000 { post } else { 0.0 };
            s = s.with(METRICS[i], per_sample);
        }
        s.with("total", total)
            .with("small", small)
            .with("large", large)
    })
}

/// A structure: one entry of [`RIVALS`].
struct Rival {
    id: &'static str,
    label: &'static str,
    /// Its name in the per-size table.
    column: &'static str,
    /// The post's seconds for 100 000 samples of each size.
    post: &'static [f64; 19],
    /// Builds its variant, given the time per (structure, size) cell.
    variant: fn(&'static str, &'static str, std::time::Duration) -> Variant<'static>,
}

/// The post's three structures, in its order (the first is the baseline).
const RIVALS: [Rival; 3] = [
    Rival {
        id: "scan",
        label: "S0: array, scanned for duplicates",
        column: "scan",
        post: &REFERENCE[0],
        variant: variant::<Scan>,
    },
    Rival {
        id: "bitset",
        label: "S1: bitset of p flags",
        column: "bitset",
        post: &REFERENCE[1],
        variant: variant::<Bits>,
    },
    Rival {
        id: "sparse",
        label: "S2: sparse set",
        column: "sparse set",
        post: &REFERENCE[2],
        variant: variant::<Sparse>,
    },
];

/// The per-size table: this machine beside the post, µs per sample.
fn per_size_table(r: &mut ExperimentResult) {
    let Some(section) = r.section("sample") else {
        return;
    };
    let median = |id: &str, m: &str| {
        section
            .variants
            .iter()
            .find(|v| v.id == id)
            .and_then(|v| v.metric(m))
            .map_or(f64::NAN, |m| m.summary.median)
    };
    let rows = SIZES
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut row = vec![n.to_string()];
            for r in &RIVALS {
                row.push(crate::report::format::num(median(r.id, METRICS[i]) / 1e3));
                row.push(crate::report::format::num(r.post[i] / POST_SAMPLES * 1e6));
            }
            row
        })
        .collect();
    r.tables.push(Table {
        title: "µs per sample, by sample size: this machine (median) and the post".into(),
        columns: std::iter::once("n".to_string())
            .chain(
                RIVALS
                    .iter()
                    .flat_map(|r| [r.column.to_string(), format!("{} (post)", r.column)]),
            )
            .collect(),
        rows,
    });
}

impl Experiment for Sampler {
    fn info(&self) -> Info {
        Info {
            name: "sampler",
            title: "Sampling without replacement: scan, bitset, sparse set",
            summary: "n distinct values out of 10 000, 19 sample sizes: array scan vs bitset vs sparse set",
            question: "Drawing n distinct values out of p = 10 000, for the post's 19 sample sizes: how do an array \
                       scanned for duplicates, a bitset and a sparse set compare, overall and for small samples?",
            references: &[SAMPLING],
            quick_seconds: 12,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let cell = ctx.run_target(3) / SIZES.len() as u32;
        let mut plan = Plan::new();
        plan.param("population p", P);
        plan.param("sample sizes", format!("{SIZES:?}"));
        plan.param(
            "time per (structure, size) cell",
            format!(
                "{:.1} ms, samples calibrated per cell",
                cell.as_secs_f64() * 1e3
            ),
        );
        let mut section = Section::new("sample", "The post's benchmark: 19 sizes × 100 000 samples (projected from each cell's time per sample)")
            .baseline("scan")
            .metric(Metric::time("total", "all 19 sizes"))
            .metric(Metric::time("small", "sizes 1–10"))
            .metric(Metric::time("large", "sizes 1000–2500"));
        for m in METRICS {
            section =
                section.metric(Metric::time(m, format!("per sample, size {}", &m[1..])).hidden());
        }
        plan.section(section);
        let totals: Vec<f64> = RIVALS.iter().map(|r| r.post.iter().sum()).collect();
        for (r, total) in RIVALS.iter().zip(&totals) {
            plan.variant((r.variant)(r.id, r.label, cell).reference(total / totals[0]));
        }
        let repro = |id, statement: &str, figure: String| {
            Claim::reproduction(id, statement, SAMPLING, figure)
        };
        plan.claim(
            repro(
                "bitset-beats-scan",
                "Over all 19 sizes, the bitset takes at most 1/5 of the array scan's time",
                format!(
                    "{:.0} s vs {:.0} s ({:.3} ×)",
                    totals[1],
                    totals[0],
                    totals[1] / totals[0]
                ),
            )
            .ratio("bitset", "scan")
            .at_most(0.2),
        );
        plan.claim(
            repro(
                "sparse-beats-bitset",
                "Over all 19 sizes, the sparse set takes at most 2/3 of the bitset's time",
                format!(
                    "{:.0} s vs {:.0} s ({:.2} ×)",
                    totals[2],
                    totals[1],
                    totals[2] / totals[1]
                ),
            )
            .ratio("sparse", "bitset")
            .at_most(0.67),
        );
        let small = |t: &[f64; 19]| t[..10].iter().sum::<f64>();
        plan.claim(
            repro(
                "scan-wins-small",
                "For samples of 1–10, the array scan takes at most 1/10 of the bitset's time",
                format!(
                    "{:.2} s vs {:.1} s ({:.3} ×)",
                    small(&REFERENCE[0]),
                    small(&REFERENCE[1]),
                    small(&REFERENCE[0]) / small(&REFERENCE[1])
                ),
            )
            .ratio("scan", "bitset")
            .metric("small")
            .at_most(0.1),
        );
        plan.note("The post's code is OCaml (recreated from C); ours is Rust with a xorshift generator. Compare ratios between structures, not absolute times.");
        plan.finish(per_size_table);
        ctx.measure(plan)
    }
}
