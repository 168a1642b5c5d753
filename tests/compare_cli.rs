//! `spindle compare` as a CI gate, reading other tools' samples, Ctrl-C, and the rough edges a
//! new user found. No test asserts a timing: the commands compared differ by 2× or more, or not
//! at all, and the budgets are pair counts.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{code, json, spindle, stderr, stdout};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("spindle-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().unwrap().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` times around `center` with ±2% of deterministic jitter.
fn times(center: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| center * (1.0 + 0.02 * (((i * 37) % 21) as f64 - 10.0) / 10.0))
        .collect()
}

fn hyperfine_json(commands: &[(&str, Vec<f64>)]) -> String {
    let results: Vec<_> = commands
        .iter()
        .map(|(c, t)| serde_json::json!({"command": c, "mean": t.iter().sum::<f64>() / t.len() as f64, "times": t}))
        .collect();
    serde_json::json!({ "results": results }).to_string()
}

#[test]
fn samples_from_hyperfine_exports_give_a_verdict_without_rerunning() {
    let dir = TempDir::new("hyperfine");
    let new = dir.file("new.json", &hyperfine_json(&[("./new", times(0.2, 40))]));
    let old = dir.file("old.json", &hyperfine_json(&[("./old", times(0.1, 40))]));
    let out = spindle(&["compare", "--json", "--samples", &new, &old]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "A slower");
    assert_eq!(v["mode"], "unpaired samples");
    assert!(v["method"]
        .as_str()
        .unwrap()
        .contains("ratio of the medians"));
    assert!(v["median_ratio_interval"][0].as_f64().unwrap() > 1.05);

    // One export with both commands: FILE#N picks one.
    let both = dir.file(
        "both.json",
        &hyperfine_json(&[("./a", times(0.1, 40)), ("./b", times(0.1, 40))]),
    );
    let out = spindle(&["compare", "--samples", &both, &both]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("#2"), "{}", stderr(&out));
    let (a, b) = (format!("{both}#1"), format!("{both}#2"));
    let out = spindle(&["compare", "--json", "--samples", &a, &b]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert_eq!(json(&out)["verdict"], "within tolerance");
}

#[test]
fn samples_from_criterion_and_plain_files() {
    let dir = TempDir::new("criterion");
    // criterion's sample.json: total nanoseconds for iters[i] iterations.
    let sample = |per_iter_ns: f64| {
        let iters: Vec<f64> = (1..=100).map(|i| (i * 10) as f64).collect();
        let t: Vec<f64> = iters
            .iter()
            .zip(times(per_iter_ns, 100))
            .map(|(i, t)| i * t)
            .collect();
        serde_json::json!({"sampling_mode": "Linear", "iters": iters, "times": t}).to_string()
    };
    let new = dir.file("new.json", &sample(1000.0));
    let base = dir.file("base.json", &sample(1300.0));
    let out = spindle(&["compare", "--json", "--samples", &new, &base]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "A faster");
    assert_eq!(v["unit"], "s");
    assert!(
        (v["a"]["median"].as_f64().unwrap() - 1e-6).abs() < 3e-8,
        "{v}"
    );

    let a = dir.file("a.txt", "# ms\n10.1 10.3 9.9\n10.0,10.2\n");
    let b = dir.file("b.txt", "10 10 10 10 10\n");
    let out = spindle(&["compare", "--json", "--samples", &a, &b]);
    // Five samples cannot bound a median at ε = 10⁻³: undecided, and it says why.
    assert_eq!(code(&out), 2);
    assert!(json(&out)["reason"].as_str().unwrap().contains("too few"));

    // Plain numbers have no unit: they cannot be compared with a JSON export.
    let out = spindle(&["compare", "--samples", &a, &new]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("unit"), "{}", stderr(&out));
    let bad = dir.file("bad.txt", "1\n-2\n");
    let out = spindle(&["compare", "--samples", &bad, &b]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("above zero"), "{}", stderr(&out));
}

/// Ctrl-C prints what is known so far and exits 130; the intervals it prints are valid at any
/// stopping time.
#[test]
fn ctrl_c_prints_the_verdict_so_far() {
    let child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "compare",
            "--quiet",
            "--json",
            "--warmup",
            "0",
            "--tolerance",
            "0",
            "--",
            "sleep",
            "0.1",
            ":::",
            "sleep",
            "0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Not a timing assertion: the signal may come before or after the first pair, and both
    // outcomes are checked below.
    std::thread::sleep(Duration::from_millis(700));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}{}", stdout(&out), stderr(&out));
    if out.stdout.is_empty() {
        assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    } else {
        let v = json(&out);
        assert_eq!(v["interrupted"], true);
        assert_eq!(v["verdict"], "undecided");
        assert!(v["reason"].as_str().unwrap().contains("Ctrl-C"), "{v}");
        assert!(v["pairs"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn max_time_stops_with_exit_2() {
    // A zero tolerance can never show "no difference": only the clock stops this.
    let out = spindle(&[
        "compare",
        "--quiet",
        "--json",
        "--tolerance",
        "0",
        "--max-time",
        "300ms",
        "--",
        "true",
        ":::",
        "true",
    ]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "undecided");
    assert!(v["reason"].as_str().unwrap().contains("--max-time"), "{v}");
}

#[test]
fn new_user_rough_edges_are_smoothed() {
    for (args, needle) in [
        (&["slo", "--under", "5", "--", "true"][..], "no unit"),
        (
            &["slo", "--under", "0ms", "--", "true"][..],
            "longer than zero",
        ),
        (
            &["slo", "--timeout", "0s", "--", "true"][..],
            "longer than zero",
        ),
        (
            &["slo", "--rate", "-0.5", "--", "true"][..],
            "outside (0, 1)",
        ),
        (
            &["compare", "--tolerance", "-5%", "--", "true", ":::", "true"][..],
            "outside",
        ),
        (
            &[
                "compare",
                "--tolerance",
                "fast",
                "--",
                "true",
                ":::",
                "true",
            ][..],
            "percentage",
        ),
        (
            &["compare", "--max-time", "0s", "--", "true", ":::", "true"][..],
            "longer than zero",
        ),
        (
            &["stats", "power", "0.5", "--alpha", "-0.4"][..],
            "outside (0, 1)",
        ),
    ] {
        let out = spindle(args);
        assert_eq!(code(&out), 3, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("-- -"), "{args:?}: {}", stderr(&out));
    }

    // A quoted command: no shell is involved, and the message says so.
    let out = spindle(&["slo", "--quiet", "--", "sleep 0.01"]);
    assert_eq!(code(&out), 4);
    assert!(stderr(&out).contains("no shell"), "{}", stderr(&out));

    // Arguments need not be UTF-8.
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"/nonexistent-\xff");
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "slo",
            "--quiet",
            "--json",
            "--max-runs",
            "3",
            "--",
            "test",
            "!",
            "-e",
        ])
        .arg(odd)
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(json(&out)["successes"], 3);

    // Positional arguments explain themselves.
    let help = stdout(&spindle(&["stats", "csm", "--help"]));
    assert!(help.contains("Successes among the N trials"), "{help}");
    let help = stdout(&spindle(&["compare", "--help"]));
    assert!(
        help.contains("--tolerance") && help.contains("130"),
        "{help}"
    );
}

#[test]
fn stats_stream_refuses_huge_lines_and_negative_measurements_briefly() {
    let run = |args: &[&str], input: Vec<u8>| {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
            .args(["stats", "stream"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = child.stdin.take().unwrap().write_all(&input);
        child.wait_with_output().unwrap()
    };
    let out = run(&["--rate", "0.9"], vec![b'7'; 1 << 20]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("longer than"), "{}", stderr(&out));
    assert!(
        stderr(&out).len() < 300,
        "{} bytes of error",
        stderr(&out).len()
    );
    let out = run(
        &["--rate", "0.9", "--under", "50ms"],
        b"0.01\n-0.02\n".to_vec(),
    );
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("line 2") && stderr(&out).contains("negative"));
    let out = run(
        &["--rate", "0.9"],
        format!("1\n{}\n", "x".repeat(10_000)).into_bytes(),
    );
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).len() < 300, "{}", stderr(&out));
}

#[test]
fn stats_exact_reads_files_and_says_which_way() {
    let dir = TempDir::new("exact");
    let low = dir.file(
        "low.txt",
        &times(10.0, 60)
            .iter()
            .map(|t| format!("{t}\n"))
            .collect::<String>(),
    );
    let high = dir.file(
        "high.txt",
        &times(11.0, 60)
            .iter()
            .map(|t| format!("{t}\n"))
            .collect::<String>(),
    );
    let out = spindle(&["stats", "exact", &high, &low, "--json"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(json(&out)["verdict"], "significant");
    let out = spindle(&["stats", "exact", &low, &high, "--json"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(json(&out)["verdict"], "not significant");
    let out = spindle(&[
        "stats",
        "exact",
        &high,
        &low,
        "--statistic",
        "median",
        "--shift",
        "1",
        "--alternative",
        "two-sided",
        "--json",
    ]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let out = spindle(&[
        "stats",
        "exact",
        &high,
        &low,
        "--quantile",
        "0.9",
        "--alternative",
        "less",
    ]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let out = spindle(&["stats", "exact", &high, "/nonexistent/spindle"]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
}

/// --max-time is a bound: a pair that would end after it, judging by the pairs so far, is not
/// started. Each pair here lasts at least 0.6 s, so after the first (which always runs) a
/// second could not end within 1 s.
#[test]
fn max_time_does_not_start_a_pair_that_would_overrun() {
    let out = spindle(&[
        "compare",
        "--quiet",
        "--json",
        "--warmup",
        "0",
        "--tolerance",
        "0",
        "--max-time",
        "1s",
        "--",
        "sleep",
        "0.3",
        ":::",
        "sleep",
        "0.3",
    ]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["pairs"], 1, "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("--max-time") && reason.contains("1 pair,"),
        "{reason}"
    );

    // The warm-up pair counts: after 1.2 s of it, no measured pair fits in 1 s. The report says
    // so instead of overrunning the bound by a whole pair.
    let args = [
        "compare",
        "--quiet",
        "--tolerance",
        "0",
        "--max-time",
        "1s",
        "--",
        "sleep",
        "0.6",
        ":::",
        "sleep",
        "0.6",
    ];
    let out = spindle(&args);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("Undecided: no verdict within --max-time: the warm-up left no time"),
        "{text}"
    );
    assert!(
        text.contains("\n  0 pairs in ") && !text.contains("NaN"),
        "{text}"
    );
    let v = json(&spindle(&[&["compare", "--json"], &args[1..]].concat()));
    assert_eq!(
        (v["pairs"].as_u64(), v["median_ratio"].as_f64()),
        (Some(0), None),
        "{v}"
    );

    // slo: runs of at least 0.3 s; a fourth could not start before 0.9 s and end by 1 s.
    let out = spindle(&[
        "slo",
        "--quiet",
        "--json",
        "--max-time",
        "1s",
        "--",
        "sleep",
        "0.3",
    ]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let v = json(&out);
    assert!(v["runs"].as_u64().unwrap() <= 3, "{v}");
    assert!(v["reason"].as_str().unwrap().contains("--max-time"), "{v}");
}

#[test]
fn counts_are_pluralised() {
    let text = stdout(&spindle(&[
        "compare",
        "--quiet",
        "--warmup",
        "0",
        "--max-runs",
        "1",
        "--",
        "true",
        ":::",
        "true",
    ]));
    assert!(
        text.contains("no verdict within 1 pair (--max-runs)"),
        "{text}"
    );
    assert!(text.contains("\n  1 pair in "), "{text}");
    assert!(text.contains("(1 sample)"), "{text}");
    assert!(
        !text.contains("1 pairs") && !text.contains("1 samples"),
        "{text}"
    );

    let text = stdout(&spindle(&[
        "slo",
        "--quiet",
        "--max-runs",
        "1",
        "--",
        "true",
    ]));
    assert!(text.contains("1 run (--max-runs) was not enough"), "{text}");
    assert!(text.contains("  1 run, 1 success "), "{text}");

    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["stats", "stream", "--rate", "0.9"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains("(0 successes in 0 outcomes;"),
        "{}",
        stdout(&out)
    );
}

/// Nonsense is refused with a message that says what is wanted, and exit 3.
#[test]
fn nonsense_counts_and_durations_are_usage_errors() {
    for (args, needle) in [
        (
            &["stats", "stream", "--rate", "0.9", "--under", "-1"][..],
            "must be positive",
        ),
        (
            &["stats", "stream", "--rate", "0.9", "--under", "0.05"][..],
            "no unit",
        ),
        (
            &["stats", "stream", "--rate", "0.9", "--under", "-5ms"][..],
            "must be positive",
        ),
        (&["slo", "--min-runs", "0", "--", "true"][..], "at least 1"),
        (
            &["slo", "--max-runs", "-1", "--", "true"][..],
            "cannot be negative",
        ),
        (
            &["compare", "--max-runs", "-1", "--", "true", ":::", "true"][..],
            "cannot be negative",
        ),
        (
            &["compare", "--max-runs", "0", "--", "true", ":::", "true"][..],
            "at least 1",
        ),
        (
            &["compare", "--warmup", "-1", "--", "true", ":::", "true"][..],
            "cannot be negative",
        ),
        (
            &["slo", "--under", "-5ms", "--", "true"][..],
            "must be positive",
        ),
        (
            &["slo", "--under", "-5", "--", "true"][..],
            "must be positive",
        ),
        (
            &["compare", "--max-time", "-1s", "--", "true", ":::", "true"][..],
            "must be positive",
        ),
        (
            &["slo", "--timeout", "-2s", "--", "true"][..],
            "must be positive",
        ),
        (
            &["stats", "csm", "-1", "0.5", "0", "0.1"][..],
            "cannot be negative",
        ),
        (&["stats", "quantile", "0", "0.5", "0.1"][..], "at least 1"),
        (
            &["stats", "stream", "--rate", "0.9", "--min", "0"][..],
            "at least 1",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(code(&out), 3, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        // No hint to write the value another way that is refused too ("-5s", "-- -1").
        assert!(
            !err.contains("write -") && !err.contains("-- -"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("invalid digit"), "{args:?}: {err}");
    }
}

/// Numbers in a human report with more significant digits than anyone reads
/// (`0.8333333333333334`); percentages are left alone, they state their own precision.
fn raw_floats(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| "[](),;:".contains(c)))
        .filter(|w| !w.ends_with('%') && w.parse::<f64>().is_ok())
        .filter(|w| {
            let mantissa = w.split(['e', 'E']).next().unwrap_or("");
            let digits = mantissa
                .trim_start_matches(['-', '0', '.'])
                .replace('.', "");
            digits.len() > 6
        })
        .map(String::from)
        .collect()
}

#[test]
fn human_reports_round_their_numbers() {
    let dir = TempDir::new("rounding");
    let thirds = |base: f64| -> String {
        (0..30)
            .map(|i| format!("{}\n", base + i as f64 / 3.0))
            .collect()
    };
    let (a, b) = (
        dir.file("a.txt", &thirds(10.0)),
        dir.file("b.txt", &thirds(10.1)),
    );
    for args in [
        &["compare", "--samples", &a, &b][..],
        &["stats", "exact", &a, &b, "--max-resamples", "300"][..],
        &["slo", "--quiet", "--max-runs", "3", "--", "true"][..],
        &[
            "compare",
            "--quiet",
            "--max-runs",
            "3",
            "--",
            "true",
            ":::",
            "true",
        ][..],
    ] {
        let out = spindle(args);
        assert!(code(&out) < 3, "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        assert_eq!(raw_floats(&text), Vec::<String>::new(), "{args:?}:\n{text}");
    }
    let text = stdout(&spindle(&["stats", "csm", "600", "0.5", "500", "0.3"]));
    assert!(text.contains("estimate 0.8333,"), "{text}");
    // The CSM post's figures keep every digit.
    let text = stdout(&spindle(&["stats", "csm", "4000", "0.98", "3972", "0.001"]));
    assert!(text.contains("log level -17.238559826956475 <"), "{text}");
}

/// Unpaired samples have no pairs: the report speaks of the ratio of the medians, and its JSON
/// names its fields for what they hold.
#[test]
fn samples_reports_speak_of_medians_not_pairs() {
    let dir = TempDir::new("unpaired");
    let lines =
        |center: f64| -> String { times(center, 40).iter().map(|t| format!("{t}\n")).collect() };
    let (a, b) = (
        dir.file("a.txt", &lines(2000.0)),
        dir.file("b.txt", &lines(1000.0)),
    );
    let out = spindle(&["compare", "--samples", &a, &b]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        !text.contains("typical pair") && !text.contains(" pairs"),
        "{text}"
    );
    assert!(
        text.starts_with("A slower: A's median is more than 5% higher than B's."),
        "{text}"
    );
    assert!(text.contains("ratio of the medians A/B"), "{text}");
    // Plain numbers are not times: no "ms" or "s" units invented for them.
    assert!(
        text.contains("median 2000 ") || text.contains("median 2000."),
        "{text}"
    );
    assert!(!text.contains(" ms"), "{text}");

    let v = json(&spindle(&["compare", "--json", "--samples", &a, &b]));
    for gone in ["pairs", "p_a_faster", "ties", "interrupted"] {
        assert!(v.get(gone).is_none(), "{gone}: {v}");
    }
    assert_eq!(v["unit"], serde_json::Value::Null);
    assert_eq!(v["a"]["samples"], 40);
    assert_eq!(v["b"]["source"], "plain numbers");
    assert!(v["a"].get("median_s").is_none(), "{v}");
    let median = v["a"]["median"].as_f64().unwrap();
    let [lo, hi] = [0, 1].map(|i| v["a"]["median_interval"][i].as_f64().unwrap());
    assert!(lo <= median && median <= hi, "{v}");

    // Times from exports keep "median time" and a unit.
    let new = dir.file("new.json", &hyperfine_json(&[("./new", times(0.2, 40))]));
    let old = dir.file("old.json", &hyperfine_json(&[("./old", times(0.1, 40))]));
    let out = spindle(&["compare", "--samples", &new, &old]);
    let text = stdout(&out);
    assert!(
        text.starts_with("A slower: A's median time is more than 5% longer than B's."),
        "{text}"
    );
    assert!(text.contains("median 200 ms"), "{text}");
    assert_eq!(
        json(&spindle(&["compare", "--json", "--samples", &new, &old]))["unit"],
        "s"
    );
}

/// `stats csm` is a calculator with two answers: 0 = stop (the test rejects ALPHA), 2 = continue.
#[test]
fn stats_csm_exit_codes_tell_stop_from_continue() {
    let out = spindle(&["stats", "csm", "4000", "0.98", "3972", "0.001"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).starts_with("stop: success rate above 0.98"));
    let out = spindle(&["stats", "csm", "100", "0.98", "50", "0.001"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).starts_with("stop: success rate below 0.98"));
    let out = spindle(&["stats", "csm", "1000", "0.98", "995", "0.001"]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert!(stdout(&out).starts_with("continue:"));
    let help = stdout(&spindle(&["stats", "csm", "--help"]));
    assert!(
        help.contains("0 stop") && help.contains("2 continue"),
        "{help}"
    );
}
