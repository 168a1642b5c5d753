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
    assert!(
        (v["a"]["median_s"].as_f64().unwrap() - 1e-6).abs() < 3e-8,
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
        &["--rate", "0.9", "--under", "0.05"],
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
