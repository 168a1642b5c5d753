//! Crash recall, in child processes (this test binary run again with `SPINDLE_RECORDER_CHILD`
//! set, running only the `child` test): a `SIGKILL` at a random moment of heavy recording from
//! 2–4 × cores threads, a panic, and each fatal signal. The checks read sequence numbers, not
//! only counts: per thread, the records are consecutive, in order, and say what the thread
//! wrote; nothing is invented. Damaged files give errors, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use spindle_recorder::read::{ReadError, Recording};
use spindle_recorder::{record, FormatError, Level, Options, Section};

const CHILD: &str = "SPINDLE_RECORDER_CHILD";
static T: Section = Section::new("test", Level::Info);

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads recording in the kill test: 3 × cores, between 4 and 64.
fn writers() -> usize {
    (3 * cpus()).clamp(4, 64)
}

const RING: usize = 256;

/// The child's side: does nothing in a normal test run.
#[test]
fn child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (mode, dir) = spec.split_once(':').expect("mode:dir");
    let dir = Path::new(dir);
    let options = Options {
        threads: writers() + 8,
        records_per_thread: RING,
        sites: 64,
    };
    spindle_recorder::install(dir.join("rec"), options).expect("install");
    if mode == "kill" {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let threads: Vec<_> = (0..writers())
            .map(|t| {
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    loop {
                        record!(T, Info, "thread {} record {}", t, i);
                        if i == 0 {
                            STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        while STARTED.load(std::sync::atomic::Ordering::SeqCst) < writers() {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::write(dir.join("ready"), b"").unwrap();
        for t in threads {
            let _ = t.join();
        }
        return;
    }
    spindle_recorder::crash::install_handler(dir.join("crash")).expect("crash handler");
    if mode == "two" {
        // Full rings to dump, and two threads that fault 5 ms apart: the second must wait
        // for the first one's dump instead of ending the process in the middle of it.
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..1000u32 {
                        record!(T, Info, "busy {} {}", t, i);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for delay in [0u64, 5] {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay));
                // SAFETY: none: this is the crash under test.
                unsafe { std::ptr::null_mut::<u64>().write_volatile(7) }
            });
        }
        std::thread::sleep(Duration::from_secs(30));
        unreachable!("two: the child survived");
    }
    for i in 0..50u32 {
        record!(T, Info, "before the crash {}", i);
    }
    if mode == "caught" {
        // A caught panic dumps, and a later crash dumps again, with what came after.
        let _ = std::panic::catch_unwind(|| panic!("caught"));
        record!(T, Info, "after the caught panic {}", 1u8);
        // SAFETY: none: this is the crash under test.
        unsafe { std::ptr::null_mut::<u64>().write_volatile(7) }
    }
    match mode {
        "exit" => std::process::exit(0),
        "panic" => panic!("boom"),
        // SAFETY: none: this is the crash under test.
        "segv" => unsafe { std::ptr::null_mut::<u64>().write_volatile(7) },
        // SAFETY: raising a signal is always allowed.
        "bus" => unsafe {
            libc::raise(libc::SIGBUS);
        },
        // SAFETY: ud2 raises SIGILL, which is the point.
        #[cfg(target_arch = "x86_64")]
        "ill" => unsafe { std::arch::asm!("ud2") },
        // SAFETY: udf (permanently undefined) raises SIGILL, which is the point.
        #[cfg(target_arch = "aarch64")]
        "ill" => unsafe { std::arch::asm!("udf #0") },
        // SAFETY: as for SIGBUS.
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        "ill" => unsafe {
            libc::raise(libc::SIGILL);
        },
        // SAFETY: as for SIGBUS (an integer division by zero panics in Rust).
        "fpe" => unsafe {
            libc::raise(libc::SIGFPE);
        },
        "abrt" => std::process::abort(),
        other => panic!("unknown child mode {other}"),
    }
    unreachable!("{mode}: the child survived its crash");
}

fn spawn(mode: &str, dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{mode}:{}", dir.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child")
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "spindle-recorder-{name}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn sigkill_leaves_every_completed_record_whole_and_in_order() {
    let mut seed = std::process::id() as u64 | 1;
    for trial in 0..4 {
        let dir = tempdir(&format!("kill{trial}"));
        let mut child = spawn("kill", &dir);
        let start = Instant::now();
        while !dir.join("ready").exists() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the child never got ready"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(2 + seed % 30));
        child.kill().expect("SIGKILL");
        let status = child.wait().unwrap();
        assert_eq!(signal(status), Some(libc::SIGKILL));

        let rec = Recording::open(dir.join("rec")).expect("the recording reads after SIGKILL");
        let (records, _) = rec.records(usize::MAX);
        let mut by_tid = std::collections::BTreeMap::<u32, Vec<_>>::new();
        for r in &records {
            by_tid.entry(r.tid).or_default().push(r);
        }
        assert_eq!(
            by_tid.len(),
            writers(),
            "trial {trial}: one ring per writer"
        );
        let mut seen_threads = std::collections::BTreeSet::new();
        for (tid, mut rs) in by_tid {
            rs.sort_by_key(|r| r.seq);
            let parse = |m: &str| -> (u64, u64) {
                let w: Vec<&str> = m.split(' ').collect();
                assert_eq!(
                    (w.len(), w[0], w[2]),
                    (4, "thread", "record"),
                    "invented: {m:?}"
                );
                (w[1].parse().unwrap(), w[3].parse().unwrap())
            };
            let (t, first) = parse(&rs[0].message);
            assert!(seen_threads.insert(t), "thread {t} has two rings");
            for (k, r) in rs.iter().enumerate() {
                let (t2, i) = parse(&r.message);
                assert_eq!(t2, t, "tid {tid}: a record of another thread");
                assert_eq!(i, first + k as u64, "tid {tid}: a gap or a repeat at {k}");
                assert_eq!(
                    r.seq, i,
                    "tid {tid}: the sequence number is the record's index"
                );
                assert_eq!(r.section, "test");
            }
            // Every completed record the ring still holds: all of them, or all but the slot
            // being written when the process died.
            let last = first + rs.len() as u64;
            assert!(
                rs.len() == RING - 1 || first == 0,
                "tid {tid}: {} records from {first} to {last}",
                rs.len()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn signal(status: ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&status)
}

#[test]
fn a_panic_and_every_fatal_signal_write_the_crash_file() {
    for (mode, sig) in [
        ("panic", None),
        ("segv", Some(libc::SIGSEGV)),
        ("bus", Some(libc::SIGBUS)),
        ("ill", Some(libc::SIGILL)),
        ("fpe", Some(libc::SIGFPE)),
        ("abrt", Some(libc::SIGABRT)),
    ] {
        let dir = tempdir(mode);
        let status = spawn(mode, &dir).wait().unwrap();
        match sig {
            Some(s) => assert_eq!(signal(status), Some(s), "{mode}: {status}"),
            None => assert_eq!(status.code(), Some(101), "{mode}: {status}"),
        }
        let crash = std::fs::read_to_string(dir.join("crash")).expect("a crash file");
        let head = crash.lines().next().unwrap_or("");
        let named = match sig {
            Some(_) => head.contains("fatal signal") && head.contains(&mode.to_uppercase()),
            None => head.contains("panic") && head.contains("boom"),
        };
        assert!(named, "{mode}: the crash file's first line: {head:?}");
        let records: Vec<&str> = crash
            .lines()
            .filter_map(|l| l.split_once(": before the crash ").map(|x| x.1))
            .collect();
        let expect: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        assert_eq!(records, expect, "{mode}: every record, in order:\n{crash}");
        assert!(
            crash.contains("end of crash dump, 50 records"),
            "{mode}:\n{crash}"
        );
        // The recording file says the same.
        let (recs, skipped) = Recording::open(dir.join("rec")).unwrap().records(1000);
        assert_eq!((recs.len(), skipped.slots), (50, 0), "{mode}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn damaged_recordings_give_errors_not_panics() {
    let dir = tempdir("damaged");
    let status = spawn("exit", &dir).wait().unwrap();
    assert!(status.success(), "{status}");
    let good = std::fs::read(dir.join("rec")).unwrap();
    let open = |bytes: &[u8]| {
        let p = dir.join("x");
        std::fs::write(&p, bytes).unwrap();
        Recording::open(&p)
    };
    let format = |r: Result<Recording, ReadError>| match r {
        Err(ReadError::Format(f)) => f,
        Err(e) => panic!("an I/O error: {e}"),
        Ok(_) => panic!("a damaged file opened"),
    };
    assert_eq!(format(open(b"")), FormatError::TooShort(0));
    assert_eq!(format(open(&good[..100])), FormatError::TooShort(100));
    let mut bad = good.clone();
    bad[0] ^= 1;
    assert_eq!(format(open(&bad)), FormatError::BadMagic);
    let mut newer = good.clone();
    newer[8] = 99;
    assert_eq!(format(open(&newer)), FormatError::NewerVersion(99));
    let half = good.len() / 2;
    assert!(matches!(
        format(open(&good[..half])),
        FormatError::Truncated { .. }
    ));
    let mut geometry = good.clone();
    geometry[20] = 3; // three slots per ring: not a power of two
    assert!(matches!(
        format(open(&geometry)),
        FormatError::BadGeometry(_)
    ));
    // Garbage in the sites and rings: reads, skips what does not check out, never panics.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..20 {
        let mut noisy = good.clone();
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = 4096 + (seed as usize % (noisy.len() - 4096));
            noisy[at] = (seed >> 32) as u8;
        }
        if let Ok(r) = open(&noisy) {
            let (recs, _) = r.records(usize::MAX);
            assert!(recs.len() <= 50 + 2000);
        }
    }
    assert!(matches!(
        Recording::open(dir.join("does-not-exist")),
        Err(ReadError::Io(_))
    ));
    // A device is refused, not read until memory runs out.
    assert!(matches!(
        Recording::open("/dev/zero"),
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidInput
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_threads_crashing_at_once_leave_a_whole_dump() {
    let dir = tempdir("two");
    let status = spawn("two", &dir).wait().unwrap();
    assert_eq!(signal(status), Some(libc::SIGSEGV), "{status}");
    let crash = std::fs::read_to_string(dir.join("crash")).unwrap();
    assert!(
        crash.contains(&format!("end of crash dump, {} records", 8 * (RING - 1))),
        "the dump was cut:\n{}",
        crash.lines().rev().take(3).collect::<Vec<_>>().join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_caught_panic_does_not_use_up_the_crash_dump() {
    let dir = tempdir("caught");
    let status = spawn("caught", &dir).wait().unwrap();
    assert_eq!(signal(status), Some(libc::SIGSEGV), "{status}");
    let crash = std::fs::read_to_string(dir.join("crash")).unwrap();
    assert_eq!(crash.matches("end of crash dump").count(), 2, "{crash}");
    let last_dump = crash.rsplit_once("fatal signal").unwrap().1;
    assert!(last_dump.contains("after the caught panic 1"), "{crash}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_head_near_the_end_of_u64_is_damage_not_a_panic() {
    let dir = tempdir("overflow");
    assert!(spawn("exit", &dir).wait().unwrap().success());
    let mut bytes = std::fs::read(dir.join("rec")).unwrap();
    // Ring 0's head: after the 4 KiB header and 64 sites of 256 bytes, 64 bytes into the ring.
    let head = 4096 + 64 * 256 + 64;
    bytes[head..head + 8].copy_from_slice(&(u64::MAX - 2).to_le_bytes());
    let p = dir.join("x");
    std::fs::write(&p, &bytes).unwrap();
    let (recs, skipped) = Recording::open(&p).unwrap().records(usize::MAX);
    assert!(
        recs.is_empty() && skipped.slots > 0,
        "{} records",
        recs.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
