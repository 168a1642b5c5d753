//! `spindle alloc record` and `spindle alloc replay`: outputs, exit codes, errors.

use std::path::Path;
use std::process::Command;

fn spindle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .output()
        .expect("run spindle")
}

const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/crates/lab/data/alloc/sqlite.spat"
);

#[test]
fn replay_prints_json_for_the_allocators_asked() {
    let out = spindle(&[
        "alloc",
        "replay",
        TRACE,
        "--allocator",
        "spindle",
        "--allocator",
        "glibc",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["allocator"], "spindle");
    assert!(rows[0]["calls"].as_f64().unwrap() > 100_000.0);
    assert!(rows[1]["ns"].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_input_is_a_usage_error() {
    let out = spindle(&["alloc", "replay", TRACE, "--allocator", "tcmalloc"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown allocator 'tcmalloc'"));
    let out = spindle(&["alloc", "replay", "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SPAT1"));
    let out = spindle(&["alloc", "replay", TRACE, "--threads", "0"]);
    assert_eq!(out.status.code(), Some(3));
    let out = spindle(&[
        "alloc",
        "record",
        "--library",
        "/nonexistent.so",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such library"));
    // An output that cannot be written is refused before the command runs (it was found
    // only after, and the recording lost). (Any file passes for the library here: the
    // command never runs.)
    let dir = std::env::temp_dir();
    let out = spindle(&[
        "alloc",
        "record",
        "--library",
        "Cargo.toml",
        "-o",
        dir.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the trace there"));
    // A damaged trace whose block id no allocation handed out: a bad trace (exit 3), not a
    // replay child dying while it asks for 64 GiB.
    let damaged = dir.join(format!("spindle-damaged-{}.spat", std::process::id()));
    std::fs::write(&damaged, b"SPAT1\n\x01\xfe\xff\xff\xff\x0f\x08").unwrap();
    let out = spindle(&["alloc", "replay", damaged.to_str().unwrap()]);
    let _ = std::fs::remove_file(&damaged);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("never handed out"));
}

#[test]
fn record_writes_a_trace_that_replays() {
    let exe = Path::new(env!("CARGO_BIN_EXE_spindle"));
    let so = exe.with_file_name("libspindle_alloc_preload.so");
    if !so.exists() {
        eprintln!(
            "skipped: {} is not built (cargo build -p spindle-alloc-preload)",
            so.display()
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("spindle-alloc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("sh.spat");
    let out = spindle(&[
        "alloc",
        "record",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "x=$(seq 1 2000 | sort -r | tr '\\n' ' '); echo ${#x}",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("recorded"));
    let t = spindle_alloc::trace::Trace::load(&trace).expect("a trace");
    assert!(!t.events.is_empty());
    let out = spindle(&[
        "alloc",
        "replay",
        trace.to_str().unwrap(),
        "--allocator",
        "mimalloc",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}
