//! End-to-end tests of `spindle lab`: the smoke profile of every experiment, the report's
//! files and renderings, the planner's record, bad input, interruption, and a run beside CPU
//! hogs. No test asserts a performance figure.

use std::process::{Child, Command, Stdio};

mod common;
use common::{code, json, spindle, stderr, stdout};

/// The tests that measure run one at a time: the lab discards trials measured while other
/// processes load the CPUs, and the CPU-hog test below would otherwise load every other run.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn lab_lists_its_experiments_with_their_references() {
    let out = spindle(&["lab", "--list"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    for name in [
        "contention",
        "eventcount",
        "locks",
        "fences",
        "smr",
        "affinity",
        "spawn",
        "sampler",
        "percpu",
    ] {
        assert!(text.contains(name), "{name} missing: {text}");
    }
    assert!(
        text.contains("Martin Thompson") && !text.contains("seed"),
        "{text}"
    );
}

#[test]
fn lab_help_states_the_time_bounds_and_exit_codes() {
    let out = spindle(&["lab", "--help"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.contains("quick profile takes at most"), "{text}");
    assert!(text.contains("--strict") && text.contains("130"), "{text}");
}

/// Every experiment runs to the end in the smoke profile, and the report on disk, the JSON on
/// stdout, the Markdown rendering and a baseline comparison all agree on what ran.
#[test]
fn lab_smoke_runs_every_experiment_with_a_complete_report() {
    let _serial = measuring();
    let dir = std::env::temp_dir().join(format!("spindle-lab-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // --keep-loaded: this test is about what a run writes, and a busy test machine (cargo
    // building beside it) would otherwise leave sections without trials.
    let out = spindle(&[
        "lab",
        "--smoke",
        "--keep-loaded",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    let machine = &v["machine"];
    for key in [
        "cpu_model",
        "microarchitecture",
        "cpus_online",
        "kernel",
        "hz",
        "clocksource",
        "tsc_ghz",
        "membarrier_mask",
        "rseq",
        "rseq_registration",
        "perf_counters",
        "anomalies",
    ] {
        assert!(machine.get(key).is_some(), "machine.{key} missing");
    }
    assert_eq!(v["state"], "complete");
    assert_eq!(v["schema"], 3);
    let experiments = v["experiments"].as_array().unwrap();
    assert_eq!(experiments.len(), 16, "{:?}", v["failures"]);
    let contention = &experiments[0];
    assert_eq!(contention["name"], "contention");
    assert_eq!(
        contention["sections"][0]["variants"]
            .as_array()
            .unwrap()
            .len(),
        12
    );
    let mut kinds = std::collections::HashSet::new();
    for e in experiments {
        assert!(e["trials"].as_u64().unwrap() >= 1, "{}", e["name"]);
        for c in e["claims"].as_array().unwrap() {
            assert!(["holds", "violated", "undecided"].contains(&c["verdict"].as_str().unwrap()));
            kinds.insert(c["kind"].as_str().unwrap().to_string());
        }
        for s in e["sections"].as_array().unwrap() {
            // Each section runs in the trials it needs, and says why it stopped: every variant
            // in its first trials (the table's minimum: 2 in the smoke profile), then only
            // those its open claims compare.
            let trials = s["trials"].as_u64().unwrap();
            assert!(trials <= e["trials"].as_u64().unwrap());
            assert!(
                !s["stop_reason"].as_str().unwrap().is_empty(),
                "{}",
                s["id"]
            );
            for var in s["variants"].as_array().unwrap() {
                let ran = var["metrics"][0]["values"].as_array().unwrap().len() as u64;
                assert!(
                    ran <= trials && ran >= trials.min(2),
                    "{} ran {ran} of {trials} trials",
                    var["id"]
                );
            }
        }
        // The planner's visits add up to the experiment's trials.
        let visits = e["visits"].as_array().unwrap();
        assert_eq!(visits[0]["phase"], "first pass");
        let trials: u64 = visits.iter().map(|v| v["trials"].as_u64().unwrap()).sum();
        assert_eq!(trials, e["trials"].as_u64().unwrap(), "{}", e["name"]);
    }
    assert!(
        kinds.contains("guarantee") && kinds.contains("reproduction"),
        "{kinds:?}"
    );

    // The files on disk say the same, and the page is self-contained.
    let results = dir.join("results.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(saved["experiments"][0]["name"], "contention");
    assert_eq!(saved["state"], "complete");
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("How to read this report"));
    assert!(html.find("How to read").unwrap() < html.find("id=\"contention\"").unwrap());
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http") && !html.contains("<link")
    );
    assert!(!dir.join("index.partial.html").exists());

    // Markdown from the saved file.
    let out = spindle(&["lab", "--markdown", results.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let md = stdout(&out);
    assert!(
        md.starts_with("# Spindle lab results")
            && md.contains("## Guarantees")
            && md.contains("### sampler"),
        "{md}"
    );

    // The same claim re-worded in a second file (a new floor, say) gets a row of its own:
    // neither verdict is shown under the other's words.
    let mut reworded = saved.clone();
    let claim = &mut reworded["experiments"][0]["claims"][0]["statement"];
    let original = claim.as_str().unwrap().to_string();
    *claim = serde_json::Value::String(format!("{original} (re-worded)"));
    let second = dir.join("reworded.json");
    std::fs::write(&second, serde_json::to_string(&reworded).unwrap()).unwrap();
    let out = spindle(&[
        "lab",
        "--markdown",
        results.to_str().unwrap(),
        second.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let md = stdout(&out);
    let row = |words: &str| {
        md.lines()
            .find(|l| l.starts_with("| contention | ") && l.contains(&format!("| {words} |")))
            .unwrap_or_else(|| panic!("no row for {words:?} in\n{md}"))
            .to_string()
    };
    assert!(row(&original).ends_with("| not tested |"), "{md}");
    assert!(
        row(&format!("{original} (re-worded)")).contains("| not tested |"),
        "{md}"
    );

    // A second run, compared with the first: every median gets an unpaired ratio; the first
    // (complete) report is replaced only because the second completes.
    let out = spindle(&[
        "lab",
        "contention",
        "--smoke",
        "--keep-loaded",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
        "--baseline",
        results.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("vs baseline run"), "{}", stdout(&out));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn lab_refuses_bad_input_with_usage_errors() {
    let out = spindle(&["lab", "--smoke", "no-such-experiment"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown experiment"),
        "{}",
        stderr(&out)
    );
    let out = spindle(&["lab", "--smoke", "--baseline", "/nonexistent/results.json"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
    let out = spindle(&["lab", "--markdown", "/etc/hostname"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not JSON") || stderr(&out).contains("schema"),
        "{}",
        stderr(&out)
    );
    let out = spindle(&["lab", "--eps", "0.7"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
}

#[test]
fn lab_refuses_an_unwritable_report_directory_before_measuring() {
    let out = spindle(&["lab", "--smoke", "--out", "/proc/spindle-cannot-write-here"]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot create report directory"),
        "{}",
        stderr(&out)
    );
}

/// An interrupted run keeps what it measured and leaves a complete earlier report in place.
#[test]
fn lab_interrupted_keeps_the_previous_complete_report() {
    let _serial = measuring();
    let dir = std::env::temp_dir().join(format!("spindle-lab-int-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = spindle(&[
        "lab",
        "spawn",
        "--smoke",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let before = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["lab", "--quiet", "--out", dir.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // SIGINT, as Ctrl-C sends it.
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("results.json")).unwrap(),
        before,
        "the complete report was overwritten"
    );
    let partial: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.partial.json")).unwrap())
            .unwrap();
    assert_eq!(partial["state"], "interrupted");
    assert!(stdout(&out).contains("earlier run"), "{}", stdout(&out));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn lab_lists_no_planned_experiment_now_that_all_are_built() {
    let list = stdout(&spindle(&["lab", "--list"]));
    assert!(!list.contains("Planned, not built yet"), "{list}");
    assert!(list.contains("alloc"), "{list}");
    let out = spindle(&["lab", "malloc"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    // Refused before the banner or the fingerprint: nothing announces a run that never starts.
    assert!(!stderr(&out).contains("spindle lab:"), "{}", stderr(&out));
}

#[test]
fn lab_list_speaks_json_when_asked() {
    let out = spindle(&["lab", "--list", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    let names: Vec<&str> = v["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"rings") && names.contains(&"itoa"),
        "{names:?}"
    );
    assert!(names.contains(&"alloc"), "{names:?}");
    assert_eq!(v["planned"].as_array().map(Vec::len), Some(0));
    assert_eq!(v["quick_budget_s"], 180.0);
}

/// The banner comes after the options are checked and states the selection's own bound; the
/// end-of-run summary fits in 120 columns.
#[test]
fn lab_banner_and_summary_fit_the_run() {
    let _serial = measuring();
    let dir = std::env::temp_dir().join(format!("spindle-lab-banner-{}", std::process::id()));
    let out = spindle(&[
        "lab",
        "sampler",
        "spawn",
        "--smoke",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let banner = stderr(&out)
        .lines()
        .find(|l| l.starts_with("spindle lab:"))
        .unwrap_or_else(|| panic!("no banner in {}", stderr(&out)))
        .to_string();
    assert!(
        banner.contains("2 experiment(s)") && banner.contains("smoke"),
        "{banner}"
    );
    let summary = stdout(&out);
    assert!(summary.contains("how verdicts are reached"), "{summary}");
    for line in summary.lines() {
        assert!(
            line.chars().count() <= 120,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `--flips` compares runs: the same file twice cannot flip (exit 0); a copy with one
/// guarantee's verdict reversed does (exit 1), and says which.
#[test]
fn lab_flips_finds_a_reversed_verdict() {
    let dir = std::env::temp_dir().join(format!("spindle-lab-flips-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let a = dir.join("a.json");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/crates/lab/tests/data/minimal-report.json"
        ),
        &a,
    )
    .unwrap();
    let out = spindle(&["lab", "--flips", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    v["experiments"][0]["claims"][0]["kind"] = "guarantee".into();
    v["experiments"][0]["claims"][0]["verdict"] = "holds".into();
    std::fs::write(&a, v.to_string()).unwrap();
    v["experiments"][0]["claims"][0]["verdict"] = "violated".into();
    let b = dir.join("b.json");
    std::fs::write(&b, v.to_string()).unwrap();
    let out = spindle(&["lab", "--flips", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("flipped between holds and violated: 1"),
        "{}",
        stdout(&out)
    );
    let out = spindle(&[
        "lab",
        "--json",
        "--flips",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(
        json(&out)["flipped"][0]["claim"],
        v["experiments"][0]["claims"][0]["id"]
    );
    assert!(
        !stderr(&out).contains("different machines"),
        "{}",
        stderr(&out)
    );
    // Runs from two machines: compared, with a warning that flips there are not instability.
    v["machine"]["cpu_model"] = "Another CPU".into();
    std::fs::write(&b, v.to_string()).unwrap();
    let out = spindle(&["lab", "--flips", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(
        stderr(&out).contains("different machines"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--list NAME…` lists those experiments; a name that is none is a usage error (exit 3), as
/// it is for a run.
#[test]
fn lab_list_of_named_experiments() {
    let out = spindle(&["lab", "--list", "itoa"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("itoa"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("contention"), "{}", stdout(&out));
    let out = spindle(&["lab", "--list", "no-such-experiment"]);
    assert_eq!(code(&out), 3);
    assert!(
        stderr(&out).contains("unknown experiment 'no-such-experiment'"),
        "{}",
        stderr(&out)
    );
}

/// Busy processes that are killed when the test ends, however it ends.
struct Hogs(Vec<Child>);

impl Drop for Hogs {
    fn drop(&mut self) {
        for h in &mut self.0 {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

fn hogs() -> Hogs {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    Hogs(
        (0..cpus)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("sh runs")
            })
            .collect(),
    )
}

/// The sampler experiment, smoke profile, beside a CPU hog on every CPU; its JSON report.
fn sampler_beside_hogs(name: &str, extra: &[&str]) -> serde_json::Value {
    let _hogs = hogs();
    let dir = std::env::temp_dir().join(format!("spindle-lab-{name}-{}", std::process::id()));
    let mut args = vec![
        "lab",
        "sampler",
        "--smoke",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = spindle(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(dir);
    json(&out)
}

/// A CPU hog on every CPU beside the lab: the runner sees other processes' load, discards the
/// trials measured under it and keeps none, so nothing is decided on them; the report says so.
#[test]
fn lab_discards_trials_measured_beside_cpu_hogs() {
    let _serial = measuring();
    let v = sampler_beside_hogs("hog", &[]);
    let e = &v["experiments"][0];
    let mut discarded = 0;
    for s in e["sections"].as_array().unwrap() {
        let load = &s["load"];
        assert!(load["loaded_windows"].as_u64().unwrap() >= 1, "{s}");
        assert!(load["max_others_cpus"].as_f64().unwrap() > 0.5, "{s}");
        discarded += s["discarded_trials"].as_u64().unwrap();
    }
    assert!(discarded > 0);
    for c in e["claims"].as_array().unwrap() {
        assert_eq!(c["verdict"], "undecided", "{c}");
    }
}

/// With --keep-loaded the same run keeps its trials and still records the load.
#[test]
fn lab_keep_loaded_keeps_trials_and_records_the_load() {
    let _serial = measuring();
    let v = sampler_beside_hogs("hog-kept", &["--keep-loaded"]);
    let e = &v["experiments"][0];
    assert!(e["trials"].as_u64().unwrap() >= 1, "{e}");
    for s in e["sections"].as_array().unwrap() {
        assert!(s["load"]["loaded_windows"].as_u64().unwrap() >= 1, "{s}");
        assert_eq!(s["discarded_trials"], 0, "{s}");
    }
}
