//! The worked examples of the CSM post (Paul Khuong, "Testing SLO-type properties with the
//! Confidence Sequence Method", 2018), reproduced through the command line, digit for digit
//! where the post prints digits. `crates/stats/tests/khuong_2018.rs` does the same through the
//! library and says where each figure comes from.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn spindle(args: &[&str], input: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spindle runs");
    let stdin = child.stdin.take().unwrap();
    if let Some(text) = input {
        // The filter may stop reading once it decides: ignore a broken pipe.
        let mut stdin = stdin;
        let _ = stdin.write_all(text.as_bytes());
    } else {
        drop(stdin);
    }
    child.wait_with_output().unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited normally")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn csm_log_levels() {
    for (n, s, stop, level) in [
        ("10", "10", false, 2.1958681996231784),
        ("100", "100", false, 2.5948497850893184),
        ("1000", "995", false, -3.0115331544604658),
        ("2000", "1984", false, -4.190687115879456),
        ("4000", "3972", true, -17.238559826956475),
    ] {
        let out = spindle(&["stats", "csm", n, "0.98", s, "0.001", "--json"], None);
        // 0 = stop (the test rejects 0.98), 2 = continue.
        assert_eq!(code(&out), if stop { 0 } else { 2 }, "({n}, {s})");
        let v = json(&out);
        assert_eq!(v["exit_code"], code(&out), "({n}, {s})");
        assert_eq!(v["stop"], stop, "({n}, {s})");
        assert_eq!(f(&v["log_level"]), level, "({n}, {s})");
    }
}

#[test]
fn credible_interval_with_its_brackets() {
    let out = spindle(
        &["stats", "beta-icdf", "3972", "28", "0.001", "--json"],
        None,
    );
    let v = json(&out);
    assert_eq!(
        (f(&v["value"]), f(&v["slack"])),
        (0.9882119750976562, 1.515197753898523e-5)
    );
    let out = spindle(
        &[
            "stats",
            "beta-icdf",
            "3972",
            "28",
            "0.001",
            "--upper",
            "--json",
        ],
        None,
    );
    let v = json(&out);
    assert_eq!(
        (f(&v["value"]), f(&v["slack"])),
        (0.9963832682169742, 2.0372679238045424e-13)
    );
}

#[test]
fn underflow_demonstration() {
    let out = spindle(&["stats", "proportion", "901", "101", "--json"], None);
    assert_eq!(code(&out), 0);
    let v = json(&out);
    assert_eq!(f(&v["max_log"]), -327.4909190001001);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 19);
    let at = |x: f64| {
        points
            .iter()
            .find(|p| f(&p["x"]) == x)
            .unwrap_or_else(|| panic!("no point {x}"))
    };
    assert_eq!(f(&at(0.4)["naive"]), 0.0);
    assert_eq!(f(&at(0.4)["log"]), -877.1713374189787);
    assert_eq!(f(&at(0.1)["normalised"]), 0.0);
    assert_eq!(f(&at(0.35)["normalised"]), 3.443943164733533e-288);
    assert_eq!(f(&at(0.8)["normalised"]), 2.0682681158181894e-16);
    assert_eq!(f(&at(0.85)["normalised"]), 2.6252352579425913e-5);
    assert_eq!(f(&at(0.9)["normalised"]), 1.0);
    assert_eq!(f(&at(0.95)["normalised"]), 5.65506756824607e-10);
}

/// 96%/98% thresholds, true rate 97%, ε = 0.1%: 1000 observations are not enough, 10 000 are.
#[test]
fn power_example() {
    let args = |max: &'static str| {
        [
            "stats",
            "power",
            "0.97",
            "--alpha",
            "0.96",
            "--alpha-hi",
            "0.98",
            "--eps",
            "1e-3",
            "--max-runs",
            max,
        ]
    };
    let out = spindle(&args("1000"), None);
    assert_eq!(code(&out), 1, "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("not enough"), "{text}");
    // Tiny interval ends keep their digits (this used to print "[0.%, …]").
    assert!(!text.contains("0.%"), "{text}");
    let out = spindle(&args("10000"), None);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("are enough"));
}

/// The outer report of the power example, fed the same outcomes: 1 success in 100, threshold
/// 0.99, ε = 10⁻⁹, at least 100 observations: "[2.223495e-7, 0.223213], p < 0.990000".
#[test]
#[allow(clippy::excessive_precision)] // the post's digits, as printed
fn outer_report_of_the_power_example() {
    let mut lines = "0\n".repeat(40);
    lines.push_str("1\n");
    lines.push_str(&"0\n".repeat(59));
    let out = spindle(
        &[
            "stats", "stream", "--rate", "0.99", "--eps", "1e-9", "--min", "100", "--json",
        ],
        Some(&lines),
    );
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(
        (v["n"].as_u64(), v["successes"].as_u64()),
        (Some(100), Some(1))
    );
    assert_eq!(f(&v["credible_interval"][0]), 2.2234953205868331e-7);
    assert_eq!(f(&v["credible_interval"][1]), 0.22321314110840665);
    assert_eq!(f(&v["known_range"][1]), 0.99);
}

/// The exact test's stopping rule: thresholds 0.005 and 0.01, ε = 10⁻⁹, every resample a
/// failure: stop at 2967 with the credible interval's upper end 0.007557510165262294, both as a
/// stream and as `stats exact` on data that no other split matches; the progress log's columns
/// match the post's.
#[test]
fn exact_test_stopping_point() {
    let zeros = "0\n".repeat(3000);
    let out = spindle(
        &[
            "stats",
            "stream",
            "--rate",
            "0.005",
            "--rate-hi",
            "0.01",
            "--eps",
            "1e-9",
            "--json",
        ],
        Some(&zeros),
    );
    let v = json(&out);
    assert_eq!(v["n"], 2967);
    assert_eq!(f(&v["credible_interval"][1]), 0.007557510165262294);

    let dir = std::env::temp_dir().join(format!("spindle-exact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.txt"), dir.join("b.txt"));
    std::fs::write(&a, "1\n".repeat(100)).unwrap();
    std::fs::write(&b, "0 ".repeat(100)).unwrap();
    let out = spindle(
        &[
            "stats",
            "exact",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--alpha",
            "0.005",
            "--alpha-hi",
            "0.01",
            "--eps",
            "1e-9",
            "--trace",
            "--json",
        ],
        None,
    );
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["verdict"], "significant");
    assert_eq!(v["resamples"], 2967);
    assert_eq!(v["as_extreme"], 0);
    assert_eq!(f(&v["observed_difference"]), 1.0);
    assert_eq!(f(&v["p_value_credible"][1]), 0.007557510165262294);
    assert_eq!(f(&v["p_value_known_range"][1]), 0.01);
    // The post's log: "100 0.000e+0 0.000e+0 1.998e-1 -1.568e+0" and "2000 … 1.119e-2 5.428e+0"
    // (its lower column is 0 where ours keeps halving below 10⁻¹⁰).
    let log = String::from_utf8_lossy(&out.stderr);
    let row = |n: &str| {
        log.lines()
            .find(|l| l.split_whitespace().next() == Some(n))
            .unwrap_or_else(|| panic!("no row {n}: {log}"))
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("100")[3..], ["1.998e-1", "-1.568e0"]);
    assert_eq!(row("2000")[3..], ["1.119e-2", "5.428e0"]);
    let _ = std::fs::remove_dir_all(dir);
}
