//! End-to-end tests of the `spindle` binary's statistics commands (`slo`, `compare`, `stats`):
//! verdicts, exit codes, error messages, JSON (the lab's are in `lab_cli.rs`). No test asserts a
//! performance figure; the one comparison that depends on time uses a 50 ms difference that any
//! working comparison tool must detect.

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod common;
use common::{code, json, spindle, stderr, stdout};

#[test]
fn slo_true_holds_and_false_is_violated_after_a_handful_of_runs() {
    let out = spindle(&["slo", "--quiet", "--json", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "holds");
    assert_eq!(v["runs"], v["successes"]);

    let out = spindle(&["slo", "--quiet", "--json", "--", "false"]);
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(v["verdict"], "violated");
    assert!(v["runs"].as_u64().unwrap() <= 5, "{v}");
    assert_eq!(v["failures"]["nonzero_exit"], v["runs"]);
}

#[test]
fn slo_gives_up_at_max_runs_with_exit_2() {
    let out = spindle(&["slo", "--quiet", "--max-runs", "20", "--", "true"]);
    assert_eq!(code(&out), 2);
    assert!(stdout(&out).contains("undecided"), "{}", stdout(&out));
}

#[test]
fn slo_counts_timeouts_as_failures() {
    let out = spindle(&[
        "slo",
        "--quiet",
        "--json",
        "--timeout",
        "20ms",
        "--",
        "sleep",
        "5",
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["failures"]["timed_out"], v["runs"]);
}

#[test]
fn usage_errors_exit_3_with_a_clear_message() {
    for (args, needle) in [
        (
            &["slo", "--rate", "1.5", "--", "true"][..],
            "outside (0, 1)",
        ),
        (&["slo", "--rate", "0", "--", "true"][..], "outside (0, 1)"),
        (
            &["slo", "--eps", "0.5", "--", "true"][..],
            "outside (0, 0.5)",
        ),
        (
            &["slo", "--under", "fast", "--", "true"][..],
            "cannot parse duration",
        ),
        (
            &["slo", "--min-runs", "10", "--max-runs", "5", "--", "true"][..],
            "exceeds",
        ),
        (&["slo", "true"][..], ""),
        (&["compare", "--", "true", "false"][..], ":::"),
        (
            &["compare", "--band", "0.7", "--", "true", ":::", "true"][..],
            "band",
        ),
        (
            &["stats", "csm", "10", "0.5", "11", "0.01"][..],
            "cannot exceed",
        ),
        (&["stats", "beta-icdf", "0", "3", "0.01"][..], "[1, 2^44]"),
        (&["lab", "no-such-experiment"][..], "unknown experiment"),
        // A negative number is a value out of range, not an unknown flag.
        (
            &["recorder", "dump", "/dev/null", "--last", "-1"][..],
            "cannot be negative",
        ),
        (
            &["recorder", "dump", "/dev/null", "--since", "-5"][..],
            "at or after 1970",
        ),
        (
            &["alloc", "replay", "x", "--threads", "-2"][..],
            "invalid value '-2'",
        ),
        (&["lab", "--seed", "-2"][..], "invalid value '-2'"),
        (&["no-such-subcommand"][..], ""),
    ] {
        let out = spindle(args);
        assert_eq!(code(&out), 3, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn help_and_version_exit_0() {
    for args in [&["--help"][..], &["slo", "--help"][..], &["--version"][..]] {
        let out = spindle(args);
        assert_eq!(code(&out), 0, "{args:?}");
        assert!(!stdout(&out).is_empty());
    }
    assert!(stdout(&spindle(&["slo", "--help"])).contains("Exit codes"));
}

#[test]
fn missing_commands_exit_4() {
    let out = spindle(&["slo", "--quiet", "--", "spindle-surely-not-a-command"]);
    assert_eq!(code(&out), 4);
    assert!(
        stderr(&out).contains("command not found"),
        "{}",
        stderr(&out)
    );
    let out = spindle(&["compare", "--quiet", "--", "true", ":::", "false"]);
    assert_eq!(code(&out), 4);
    assert!(stderr(&out).contains("failed"), "{}", stderr(&out));
}

#[test]
fn compare_names_an_obvious_winner_both_ways() {
    // 50 ms of difference per run is not a timing assertion: it is the obvious case that any
    // comparison tool must get right, in both orders.
    let out = spindle(&[
        "compare", "--quiet", "--json", "--warmup", "0", "--", "true", ":::", "sleep", "0.05",
    ]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(json(&out)["verdict"], "A faster");
    let out = spindle(&[
        "compare", "--quiet", "--json", "--warmup", "0", "--", "sleep", "0.05", ":::", "true",
    ]);
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(v["verdict"], "A slower");
    assert!(v["median_ratio"].as_f64().unwrap() > 1.05);
    // The interval printed beside the verdict agrees with it.
    assert!(
        v["median_ratio_interval"][0].as_f64().unwrap() > 1.05,
        "{v}"
    );
}

#[test]
fn compare_of_one_command_with_itself_finds_no_difference_beyond_the_tolerance() {
    let out = spindle(&[
        "compare",
        "--quiet",
        "--json",
        "--max-runs",
        "300",
        "--",
        "true",
        ":::",
        "true",
    ]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let v = json(&out);
    let verdict = v["verdict"].as_str().unwrap().to_string();
    assert!(
        verdict == "undecided" || verdict == "within tolerance",
        "{verdict}"
    );
    if verdict == "within tolerance" {
        let [lo, hi] = [0, 1].map(|i| v["median_ratio_interval"][i].as_f64().unwrap());
        assert!(1.0 / 1.05 <= lo && hi <= 1.05, "{v}");
    }
}

#[test]
fn stats_reproduce_the_seed_examples() {
    let out = spindle(&["stats", "csm", "4000", "0.98", "3972", "0.001", "--json"]);
    assert_eq!(code(&out), 0);
    let v = json(&out);
    assert_eq!(v["stop"], true);
    assert_eq!(v["log_level"].as_f64().unwrap(), -17.238559826956475);
    assert_eq!(v["side"], "above");

    let out = spindle(&["stats", "beta-icdf", "3972", "28", "0.001"]);
    assert_eq!(stdout(&out).trim(), "0.9882119750976562");
    let out = spindle(&["stats", "beta-icdf", "3972", "28", "0.001", "--upper"]);
    assert_eq!(stdout(&out).trim(), "0.9963832682169742");

    let out = spindle(&["stats", "quantile", "1000", "0.5", "0.001", "--json"]);
    let v = json(&out);
    assert_eq!(v["estimate_rank"], 500);
    assert!(v["lower_rank"].as_u64().unwrap() < 500 && v["upper_rank"].as_u64().unwrap() > 500);
}

fn stream(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["stats", "stream"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The filter may exit before reading everything (that is its point): ignore broken pipes.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

#[test]
fn stats_stream_decides_as_soon_as_it_can() {
    let ones = "1\n".repeat(5000);
    let out = stream(&["--rate", "0.9", "--json"], &ones);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let n = json(&out)["n"].as_u64().unwrap();
    assert!(n < 5000, "stopped early, at {n}");

    let out = stream(&["--rate", "0.9"], &"0\n".repeat(100));
    assert_eq!(code(&out), 1);

    let out = stream(&["--rate", "0.9"], "1\n0\n1\n");
    assert_eq!(code(&out), 2, "end of input without a decision");

    let latencies = "0.01\n# comment\n\n".repeat(3000);
    let out = stream(&["--rate", "0.99", "--under", "50ms"], &latencies);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let out = stream(&["--rate", "0.9"], "1\nmaybe\n");
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("line 2"), "{}", stderr(&out));
}

#[test]
fn stats_stream_min_skips_a_bad_start() {
    // Eight failures, then successes: with --min 1000 the start alone must not decide.
    let input = format!("{}{}", "0\n".repeat(8), "1\n".repeat(5000));
    let out = stream(&["--rate", "0.9", "--min", "1000", "--json"], &input);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(json(&out)["n"], 1000);
}

#[test]
fn a_closed_pipe_is_not_a_panic() {
    // The reader goes away before spindle writes: spindle must end quietly (SIGPIPE), not with
    // a Rust panic (exit 101).
    let out = Command::new("sh")
        .args([
            "-c",
            &format!(
                "{{ sleep 0.3; '{}' stats quantile 1000 0.5 0.001; }} | true",
                env!("CARGO_BIN_EXE_spindle")
            ),
        ])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        stderr(&out)
    );
}

/// Standard output that cannot be written (here `/dev/full`: no space left) is an execution
/// error, exit 4, not a panic (exit 101); the result goes to standard error instead of being
/// lost.
#[test]
fn an_unwritable_stdout_is_exit_4_and_the_result_goes_to_stderr() {
    for (args, result) in [
        (
            &["stats", "csm", "4000", "0.98", "3972", "0.001"][..],
            "stop:",
        ),
        (&["slo", "--quiet", "--", "true"][..], "SLO holds"),
        (&["lab", "--list"][..], "Experiments"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
            .args(args)
            .stdout(std::fs::File::create("/dev/full").expect("/dev/full"))
            .output()
            .unwrap();
        assert_eq!(code(&out), 4, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot write to standard output"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(result), "{args:?}: {}", stderr(&out));
    }
}

/// The processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(cmd);
            }
        }
    }
    found
}

/// A run killed at its timeout leaves nothing running: neither the command itself (`sh -c
/// 'exec CMD'`) nor what it started, children and grandchildren (a shell that waits for a
/// shell that waits for `sleep`). The innermost shell leaves a file first, so that a `sleep`
/// that never started cannot pass for one that was killed.
#[test]
fn a_timeout_kills_the_command_and_what_it_started() {
    let dir = std::env::temp_dir().join(format!("spindle-timeout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (k, script) in [
        "touch {mark}; exec sleep {nap}",
        "touch {mark}; sleep {nap}; true",
        "sh -c 'touch {mark}; sleep {nap}; true'; true",
    ]
    .into_iter()
    .enumerate()
    {
        // A duration no other process uses, to find the command by.
        let nap = format!("{}.{k}271828", 30 + std::process::id() % 1000);
        let mark = dir.join(format!("started-{k}"));
        let _ = std::fs::remove_file(&mark);
        let script = script
            .replace("{nap}", &nap)
            .replace("{mark}", mark.to_str().unwrap());
        let out = spindle(&[
            "slo",
            "--quiet",
            "--json",
            "--max-runs",
            "2",
            "--timeout",
            "500ms",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_eq!(code(&out), 2, "{script}: {}", stderr(&out));
        assert_eq!(json(&out)["failures"]["timed_out"], 2, "{script}");
        assert!(mark.exists(), "{script}: the command never started");
        // Not a timing assertion: one still running after 5 s is the failure.
        let mut left = processes_with(&format!("sleep {nap}"));
        for _ in 0..50 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            left = processes_with(&format!("sleep {nap}"));
        }
        assert!(left.is_empty(), "{script}: left running: {left:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C ends `slo` with what it measured (undecided, exit 130), as `compare`; before the
/// first run has ended it says that nothing was measured.
#[test]
fn slo_ctrl_c_prints_what_was_measured() {
    let mut reported = false;
    // A signal that comes before spindle has installed its handler kills it (the default
    // action): tried again, later.
    for wait_ms in [500, 1500, 4000] {
        let child = Command::new(env!("CARGO_BIN_EXE_spindle"))
            .args([
                "slo",
                "--quiet",
                "--json",
                "--max-time",
                "120s",
                "--",
                "sleep",
                "0.05",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        let killed = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let out = child.wait_with_output().unwrap();
        if out.status.code().is_none() {
            continue;
        }
        assert_eq!(code(&out), 130, "{}{}", stdout(&out), stderr(&out));
        if out.stdout.is_empty() {
            assert!(
                stderr(&out).contains("nothing measured"),
                "{}",
                stderr(&out)
            );
        } else {
            let v = json(&out);
            assert_eq!(v["verdict"], "undecided");
            assert_eq!(v["exit_code"], 130);
            assert!(v["runs"].as_u64().unwrap() >= 1, "{v}");
            assert!(v["reason"].as_str().unwrap().contains("Ctrl-C"), "{v}");
        }
        reported = true;
        break;
    }
    assert!(reported, "slo never got to install its Ctrl-C handler");
}
