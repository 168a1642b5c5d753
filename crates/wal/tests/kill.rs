//! Crash test on a real file system: a child process (this test binary again) appends from
//! 2 × cores threads with `append_durable`, printing each acknowledgement, and is killed with
//! `SIGKILL` at a random moment. The log reopened afterwards must hold every acknowledged
//! record byte for byte, each thread's records in order with no gap, and nothing else. Two
//! such trials run at once, each with its own child and directory (see `AT_ONCE`).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use spindle_wal::{Options, Wal};

const CHILD: &str = "SPINDLE_WAL_KILL_CHILD";

fn writers() -> u32 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    (2 * cpus).clamp(2, 32)
}

fn options() -> Options {
    Options {
        segment_bytes: 64 << 10,
        ..Options::default()
    }
}

/// Writer `t`'s record `seq`: both numbers, then up to 299 bytes that depend on them.
fn payload(t: u32, seq: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&t.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    let n = (t.wrapping_mul(131) ^ seq.wrapping_mul(7)) % 300;
    v.extend((0..n).map(|i| (i.wrapping_mul(3) ^ seq ^ t << 5) as u8));
    v
}

#[test]
fn child() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let wal = Wal::open(&dir, options()).expect("open");
    std::thread::scope(|s| {
        for t in 0..writers() {
            let wal = &wal;
            s.spawn(move || {
                for seq in 0.. {
                    wal.append_durable(&payload(t, seq)).expect("append");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{t} {seq}").expect("stdout");
                    out.flush().expect("stdout");
                }
            });
        }
    });
}

/// One kill: the violations found.
fn trial(exe: &Path, dir: &Path, delay: Duration) -> (u64, Vec<String>) {
    let _ = std::fs::remove_dir_all(dir);
    let mut child = Command::new(exe)
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acked = vec![None::<u32>; writers() as usize];
        let mut first = Some(tx);
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let mut it = line.split(' ').map(|x| x.parse::<u32>());
            if let (Some(Ok(t)), Some(Ok(seq))) = (it.next(), it.next()) {
                if let Some(slot) = acked.get_mut(t as usize) {
                    *slot = Some(seq);
                }
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
            }
        }
        acked
    });
    let started = rx.recv_timeout(Duration::from_secs(20)).is_ok();
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    let acked = reader.join().expect("reader");
    if !started {
        // Under an emulator on a loaded machine (CI's AArch64 step runs many test binaries
        // at once under qemu) a child can take longer than that to start: the trial then
        // checks nothing. Natively it would be a hang of the log: a violation.
        if emulated() {
            eprintln!("skipped a trial: the child acknowledged no record within 20 s (emulator)");
            return (0, Vec::new());
        }
        return (0, vec!["the child never acknowledged a record".into()]);
    }
    let mut v = Vec::new();
    let wal = match Wal::open(dir, options()) {
        Ok(w) => w,
        Err(e) => return (0, vec![format!("reopening: {e}")]),
    };
    let mut next = vec![0u32; writers() as usize];
    for r in wal.iter_from(1).expect("iter") {
        let (lsn, bytes) = match r {
            Ok(x) => x,
            Err(e) => {
                v.push(format!("reading: {e}"));
                break;
            }
        };
        let t = u32::from_le_bytes(bytes[..4].try_into().unwrap_or([0xFF; 4]));
        let seq = u32::from_le_bytes(bytes.get(4..8).map_or([0; 4], |b| b.try_into().unwrap()));
        if t >= writers() || payload(t, seq) != bytes {
            v.push(format!("LSN {lsn}: a record that was never appended"));
            continue;
        }
        if seq != next[t as usize] {
            v.push(format!(
                "LSN {lsn}: writer {t}'s record {seq} where {} was next",
                next[t as usize]
            ));
        }
        next[t as usize] = seq + 1;
    }
    let mut total = 0;
    for (t, a) in acked.iter().enumerate() {
        if let Some(a) = a {
            total += u64::from(*a) + 1;
            if next[t] <= *a {
                v.push(format!(
                    "writer {t}: record {a} was acknowledged, the log ends at {}",
                    next[t]
                ));
            }
        }
    }
    (total, v)
}

/// Trials run this many at a time, each with a child and a log directory of its own: the kills
/// are independent, and most of a trial is waiting (for the child's first acknowledgement,
/// then for the random delay), so two at once take about half the time.
const AT_ONCE: u32 = 2;

fn run(trials: u32) {
    let exe = std::env::current_exe().expect("the test binary");
    let start = Instant::now();
    let results: Vec<(u64, Vec<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..AT_ONCE)
            .map(|j| {
                let exe = &exe;
                s.spawn(move || {
                    let dir = std::env::temp_dir()
                        .join(format!("spindle-wal-kill-{}-{j}", std::process::id()));
                    let mut seed = 0x2545_F491_4F6C_DD1D_u64
                        ^ u64::from(j).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let (mut acked, mut violations) = (0, Vec::new());
                    for _ in (j..trials).step_by(AT_ONCE as usize) {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let (a, v) = trial(exe, &dir, Duration::from_micros(seed % 20_000));
                        acked += a;
                        violations.extend(v);
                        if !violations.is_empty() {
                            break;
                        }
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                    (acked, violations)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a trial thread"))
            .collect()
    });
    let acked: u64 = results.iter().map(|r| r.0).sum();
    let violations: Vec<String> = results.into_iter().flat_map(|r| r.1).collect();
    eprintln!(
        "{trials} kills of {} writers ({AT_ONCE} at a time) in {:.1} s: {acked} acknowledged records checked, {} violations",
        writers(),
        start.elapsed().as_secs_f64(),
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(acked > 0);
}

#[test]
fn every_acknowledged_record_survives_sigkill() {
    run(std::env::var("SPINDLE_WAL_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000));
}

#[test]
#[ignore = "long: 5 000 kills"]
fn every_acknowledged_record_survives_sigkill_long() {
    run(5_000);
}

/// Whether this AArch64 test runs translated on another architecture: a guest that reads an
/// x86 `/proc/cpuinfo`, as under `qemu-aarch64` on an x86-64 host (CI's AArch64 step).
fn emulated() -> bool {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    cfg!(target_arch = "aarch64")
        && cpuinfo
            .lines()
            .any(|l| l.starts_with("vendor_id") || l.starts_with("flags"))
}
