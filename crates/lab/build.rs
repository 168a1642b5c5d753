//! Records the commit the lab is built from, so that every results.json says which code
//! produced it ("unknown" outside a git checkout; "-dirty" when tracked files differ from it),
//! and whether it aligns loops to 64 bytes.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["diff", "--quiet", "HEAD", "--"])
        .status()
        .map(|s| s.code() == Some(1))
        .unwrap_or(false);
    let suffix = if dirty && commit != "unknown" {
        "-dirty"
    } else {
        ""
    };
    println!("cargo:rustc-env=SPINDLE_COMMIT={commit}{suffix}");
    // Whether this build aligns loops to 64 bytes (`.cargo/config.toml`'s setting, which a
    // RUSTFLAGS variable replaces): the lab names a build without it among a run's anomalies.
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let aligned = flags
        .split('\x1f')
        .any(|f| f.trim_start_matches("-C").trim_start_matches("llvm-args=") == "-align-loops=64");
    println!(
        "cargo:rustc-env=SPINDLE_LOOPS_ALIGNED={}",
        u8::from(aligned)
    );
    for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // Re-run when the checked-out commit or any source changes: HEAD (a checkout), the branch
    // it points to (a commit) and packed refs. Not `.git/index`, which `git status` and editors
    // touch without changing anything, and which would rebuild the lab each time.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let branch = git(&["symbolic-ref", "-q", "HEAD"]);
        let watched = ["HEAD".to_string(), "packed-refs".to_string()]
            .into_iter()
            .chain(branch);
        // A file named here that does not exist would make every build stale.
        for file in watched.map(|f| format!("{dir}/{f}")) {
            if std::path::Path::new(&file).exists() {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }
    for path in [
        "../../src",
        "../../crates",
        "../../Cargo.toml",
        "../../.cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
