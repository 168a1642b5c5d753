//! Records the commit the lab is built from, so that every results.json says which code
//! produced it ("unknown" outside a git checkout; "-dirty" when tracked files differ from it).

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
    // Re-run when the checked-out commit or any tracked source changes.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
    }
    for path in ["../../src", "../../crates", "../../Cargo.toml"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
