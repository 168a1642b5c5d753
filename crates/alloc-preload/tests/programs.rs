//! Real programs that nobody here wrote, run with and without the preload library: their
//! output must be the same. A missing program is skipped with a message, unless
//! `SPINDLE_REQUIRE_PROGRAMS=1` (CI installs them and sets it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The library cargo built for this test. `cargo test` leaves it in `target/<profile>/deps/`,
/// next to the test binary (the crate is also an rlib so that it is built at all for the
/// integration tests); `cargo build` puts it one level up.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let candidates = [
        deps.to_path_buf(),
        deps.parent().unwrap_or(deps).to_path_buf(),
    ];
    candidates
        .iter()
        .map(|d| d.join("libspindle_alloc_preload.so"))
        .find(|so| so.exists())
        .unwrap_or_else(|| panic!("libspindle_alloc_preload.so was not built in {candidates:?}"))
}

fn present(program: &str) -> bool {
    let found = Command::new(program).arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("SPINDLE_REQUIRE_PROGRAMS").is_none(),
            "{program} is required (SPINDLE_REQUIRE_PROGRAMS) but not installed"
        );
        eprintln!("skipped: {program} is not installed");
    }
    found
}

/// Runs `cmd` with and without the library (and with per-thread caches); returns stdout.
fn same_output(program: &str, args: &[&str], dir: &Path) -> String {
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(program);
        c.args(args).current_dir(dir);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} with {env:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    };
    let so = library();
    let so = so.to_str().expect("utf-8 path");
    let plain = run(&[]);
    let spindle = run(&[("LD_PRELOAD", so)]);
    assert_eq!(
        plain, spindle,
        "{program} {args:?}: output differs under spindle-alloc"
    );
    let threads = run(&[("LD_PRELOAD", so), ("SPINDLE_ALLOC_CACHE", "thread")]);
    assert_eq!(
        plain, threads,
        "{program} {args:?}: output differs with thread caches"
    );
    assert!(!plain.is_empty());
    plain
}

#[test]
fn the_library_is_really_loaded() {
    let so = library();
    let out = Command::new("cat")
        .arg("/proc/self/maps")
        .env("LD_PRELOAD", &so)
        .output()
        .expect("cat");
    assert!(String::from_utf8_lossy(&out.stdout).contains("libspindle_alloc_preload.so"));
}

const PYTHON: &str = r#"
import json, re, collections, threading
d = {f"k{i}": [j * i for j in range(i % 40)] for i in range(60000)}
s = json.dumps(d, sort_keys=True)
back = json.loads(s)
words = re.findall(r"\d+", s[:400000])
c = collections.Counter(w[-2:] for w in words)
out = []
def work(k):
    out.append(sum(len(str(x)) for x in range(k * 20000, k * 20000 + 20000)))
ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(len(s), len(back), c.most_common(5), sorted(out))
print(sorted(set(bytes(range(256)).hex()[i:i+7] for i in range(0, 512, 3)))[:10])
"#;

#[test]
fn python_runs_the_same() {
    if present("python3") {
        let out = same_output("python3", &["-c", PYTHON], Path::new("."));
        eprintln!("python3: {}", out.lines().next().unwrap_or(""));
    }
}

#[test]
fn sqlite_builds_and_queries_the_same_database() {
    if !present("sqlite3") {
        return;
    }
    let sql = "create table t(a integer primary key, b text, c real);\
        with recursive n(x) as (select 1 union all select x + 1 from n limit 200000)\
        insert into t select x, printf('%08x-%s', x * 2654435761 % 4294967296, substr('abcdefghij', 1 + x % 10)), x / 7.0 from n;\
        create index tb on t(b);\
        select count(*), sum(length(b)), round(sum(c), 3) from t;\
        select b from t where b like '00%' order by b limit 5;\
        select substr(b, 10, 3) k, count(*) from t group by k order by count(*) desc, k limit 5;";
    let out = same_output("sqlite3", &[":memory:", sql], Path::new("."));
    eprintln!("sqlite3: {}", out.lines().next().unwrap_or(""));
}

#[test]
fn git_reads_this_repository_the_same() {
    if !present("git") {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !repo.join(".git").exists() {
        eprintln!("skipped: not a git checkout");
        return;
    }
    let out = same_output(
        "git",
        &["log", "--stat", "-n", "300", "--format=%H %s"],
        &repo,
    );
    same_output("git", &["rev-list", "--objects", "--all"], &repo);
    eprintln!("git: {} lines of log", out.lines().count());
}
