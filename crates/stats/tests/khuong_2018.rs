//! Every worked example of the CSM post — Paul Khuong, "Testing SLO-type properties with the
//! Confidence Sequence Method" (pvk.ca, 2018) — reproduced, bit for bit wherever the post prints
//! digits. The post's text lost its minus signs in extraction; each sign below was re-derived
//! (noted where it matters).

use spindle_stats::round::{next_down, next_up};
use spindle_stats::{
    beta_bound, csm, drive, location_test, log_choose_upper, log_proportion, power,
    proportion_shape, Decision, Driver, DriverConfig, ExactConfig, LocationTest, PowerOptions,
    Side, Step,
};

/// `(test n)`: the CSM at threshold 0.98, ε = 0.001, after n of the post's fill rates, of which
/// s reached 97.5%. The levels at n = 1000 and 2000 are negative (ln C(1000, 5) ≈ 29.74 against
/// 995 ln 0.98 + 5 ln 0.02 ≈ −39.66), though still above ln 0.001 ≈ −6.9; only n = 4000 stops.
#[test]
fn csm_log_levels() {
    let log_eps = 0.001f64.ln();
    for (n, s, stop, level) in [
        (10, 10, false, 2.1958681996231784),
        (100, 100, false, 2.5948497850893184),
        (1000, 995, false, -3.0115331544604658),
        (2000, 1984, false, -4.190687115879456),
        (4000, 3972, true, -17.238559826956475),
    ] {
        let check = csm(n, 0.98, s, log_eps);
        assert_eq!((check.stop, check.log_level), (stop, level), "({n}, {s})");
    }
}

/// The slack of Robbins' upper bound on ln C(n, k): the post prints
/// `robbins-log-choose − ln C` as 0.00050526703375914436 (10, 5), 0.00000005551513197557
/// (1000, 500) and 0.00025125559085509706 (1000, 5).
///
/// Ours agree with those to 11, 4 and 9 significant digits and are slightly *smaller* (tighter,
/// still upper bounds): the doubles behind the post's figures are 6, 11 and 270 ULPs above ours,
/// one rounding step of the large `(n + ½) ln n` terms. The reference implementation as
/// published (pkhuong/csm, `csm.py`'s `robbins_log_choose`) returns exactly our doubles, and so
/// does the `log_choose_upper` behind every CSM level above (which match the post to the last
/// bit), so the post's slack figures came from an earlier draft of the function.
///
/// The exact values are ln 252, ln C(1000, 500) and ln C(1000, 5) to 50 digits (`bc -l`),
/// split into a double and its remainder so that the subtraction is exact.
#[test]
#[allow(clippy::excessive_precision)] // the post's digits, as printed
fn robbins_log_choose_slack() {
    for (n, k, exact_hi, exact_lo, post) in [
        (
            10,
            5,
            5.529429087511423,
            -6.180914634405553e-17,
            0.00050526703375914436,
        ),
        (
            1000,
            500,
            689.4672615678512,
            -3.012669800238974e-14,
            0.00000005551513197557,
        ),
        (
            1000,
            5,
            29.741269618706546,
            -1.2809614476118636e-15,
            0.00025125559085509706,
        ),
    ] {
        let ours = log_choose_upper(n, k);
        // Sterbenz: ours and exact_hi are within a factor of 2, so the difference is exact.
        let slack = (ours - exact_hi) - exact_lo;
        assert!(slack > 0.0, "({n}, {k}): not an upper bound");
        assert!(slack <= post, "({n}, {k}): {slack} > {post}");
        let ulps = (post - slack) / (next_up(ours) - ours);
        assert!(ulps <= 300.0, "({n}, {k}): {ulps} ULPs from the post");
    }
}

/// The underflow demonstration: `0.4^901 · 0.6^101` is 0.0 in doubles; its logarithm is
/// −877.17…; the largest log proportion on the grid i/20 is −327.49… (at 0.9, both negative in
/// the post once the signs are restored), and normalising in the log domain gives the printed
/// shape.
#[test]
fn underflow_and_the_log_domain() {
    assert_eq!(0.4f64.powi(901) * 0.6f64.powi(101), 0.0);
    assert_eq!(log_proportion(901, 101, 0.4), -877.1713374189787);
    // The post's first version, with ln(1 − x) instead of ln_1p(−x): the same double here.
    assert_eq!(
        901.0 * 0.4f64.ln() + 101.0 * (1.0f64 - 0.4).ln(),
        -877.1713374189787
    );
    assert_eq!(log_proportion(901, 101, 0.4).exp(), 0.0);
    let grid: Vec<f64> = (1..=19).map(|i| i as f64 / 20.0).collect();
    let top = grid
        .iter()
        .map(|&x| log_proportion(901, 101, x))
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(top, -327.4909190001001);
    let shape = proportion_shape(901, 101, &grid);
    let at = |x: f64| shape[(x * 20.0).round() as usize - 1];
    assert_eq!(at(0.05), 0.0);
    assert_eq!(at(0.1), 0.0);
    assert_eq!(at(0.35), 3.443943164733533e-288);
    assert_eq!(at(0.8), 2.0682681158181894e-16);
    assert_eq!(at(0.85), 2.6252352579425913e-5);
    assert_eq!(at(0.9), 1.0);
    assert_eq!(at(0.95), 5.65506756824607e-10);
}

/// The 99.9% credible interval after 3972 successes in 4000 trials, with the search brackets'
/// widths that the post prints as second values.
#[test]
fn credible_interval_of_the_fill_rates() {
    let lo = beta_bound(3972, 28, 0.001, false);
    let hi = beta_bound(3972, 28, 0.001, true);
    assert_eq!(
        (lo.value, lo.slack),
        (0.9882119750976562, 1.515197753898523e-5)
    );
    assert_eq!(
        (hi.value, hi.slack),
        (0.9963832682169742, 2.0372679238045424e-13)
    );
}

/// The power example: thresholds 96% and 98%, true rate 97%, ε = 0.1%. With 1000 observations
/// the CSM rarely decides ("p < 0.99"), with 10 000 it decides correctly more than 99% of the
/// time ("p > 0.99"). The outer test is the post's: target 0.99, ε = 10⁻⁹, at least 100
/// simulations. The simulations are random (the post's own were SBCL's), so the counts differ;
/// the verdicts are the post's.
#[test]
fn power_of_the_two_threshold_driver() {
    let options = PowerOptions::default();
    assert_eq!(
        (options.target, options.eps, options.min_simulations),
        (0.99, 1e-9, 100)
    );
    let inner = DriverConfig::band(0.96, 0.98, 1e-3);
    let small = power(0.97, &inner.max_count(1000), &options).unwrap();
    assert_eq!(small.outer.decision, Decision::Below, "{:?}", small.outer);
    assert_eq!(small.outer.n, 100);
    let large = power(0.97, &inner.max_count(10_000), &options).unwrap();
    assert_eq!(large.outer.decision, Decision::Above, "{:?}", large.outer);
    assert!(large.max_inner_n <= 10_000);
}

/// The post's outer report for 1000 iterations: "100 iterations, 1 successes … confidence
/// interval [2.223495e-7, 0.223213], p < 0.990000", from `report` with ε = 10⁻⁹ and one
/// threshold: the credible interval cuts ε/4 from each end. Fed the same outcomes, the driver
/// prints the same digits.
#[test]
#[allow(clippy::excessive_precision)] // the post's digits, as printed
fn outer_report_of_the_power_example() {
    let mut driver = Driver::new(DriverConfig::new(0.99, 1e-9).min_count(100)).unwrap();
    let mut step = Step::Continue;
    for i in 0..100 {
        assert_eq!(step, Step::Continue);
        step = driver.observe(i == 40);
    }
    assert_eq!(step, Step::Done(Decision::Below));
    let out = driver.outcome();
    assert_eq!((out.n, out.successes, out.estimate), (100, 1, 0.01));
    assert_eq!(out.credible, (2.2234953205868331e-7, 0.22321314110840665));
    assert_eq!(out.config.interval_alpha(), 0.5 * next_down(1e-9 / 2.0));
}

/// The exact test: thresholds 0.005 and 0.01, ε = 10⁻⁹, no resample ever as extreme as the
/// data. The post's driver stops after 2967 resamples ("p < 0.01") with the credible interval
/// [0, 0.007557510165262294]. The upper end is bit-exact; the lower end is 5.6·10⁻¹⁴ here where
/// the post prints 0: the post's bisection stops once the bracket is below 10⁻¹⁰, ours keeps
/// halving so that tiny rates come out as themselves (both are valid lower bounds).
#[test]
fn exact_test_stopping_point_and_interval() {
    let check = |out: spindle_stats::Outcome| {
        assert_eq!(out.n, 2967);
        assert_eq!(out.successes, 0);
        assert_eq!(out.decision, Decision::Below);
        assert_eq!(
            (out.lower_side, out.upper_side),
            (Side::Unknown, Side::Below)
        );
        assert_eq!(out.known_range(), (0.0, 0.01));
        assert_eq!(out.credible.1, 0.007557510165262294);
        assert!(0.0 < out.credible.0 && out.credible.0 < 1e-10);
    };
    check(drive(DriverConfig::band(0.005, 0.01, 1e-9), || false).unwrap());

    // The same through the resampling test, on data where no split but the observed one is as
    // extreme (probability 1/C(200, 100) ≈ 10⁻⁵⁹ per resample).
    let x = vec![1.0; 100];
    let y = vec![0.0; 100];
    let config = ExactConfig {
        alpha: 0.005,
        alpha_hi: 0.01,
        eps: 1e-9,
        max_resamples: 1_000_000,
        seed: 1,
    };
    let out = location_test(&x, &y, LocationTest::default(), &config).unwrap();
    assert_eq!(out.observed, 1.0);
    assert_eq!(out.significant, Some(true));
    check(out.p_value);
}
