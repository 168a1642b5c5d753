//! Stress tests of the per-CPU counter and stacks (restartable sequences), with 4 threads per
//! CPU while another thread keeps changing their affinities (migrations abort sections) and a
//! signal storm interrupts them (signal delivery aborts sections too). What must never happen:
//!
//! - **a lost or doubled add**: the counter's sum equals the adds made, exactly, after
//!   `SPINDLE_PERCPU_ADDS` adds (default 10^9);
//! - **a lost or duplicated word** in the stacks: every token is, at the end, in exactly one
//!   place (a thread's hand or a stack).
//!
//! Registration modes: run once as is (glibc's registration, where glibc registers) and once
//! with `GLIBC_TUNABLES=glibc.pthread.rseq=0` (our own); `.ci/run` does both. A third mode,
//! no rseq at all, runs in a child process under a seccomp filter that answers ENOSYS. Every
//! test's name contains `percpu`: `cargo test -p spindle-sync --test percpu`. No timing is
//! asserted.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

use spindle_sync::percpu::{self, PerCpuCounter, PerCpuSlots, Registration};

mod common;
use common::{time_limit, Rng};

fn adds() -> u64 {
    std::env::var("SPINDLE_PERCPU_ADDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000_000)
}

/// The C library's signal calls (std links it; no crate needed).
mod c {
    extern "C" {
        pub fn signal(sig: i32, handler: extern "C" fn(i32)) -> usize;
        pub fn pthread_kill(thread: libc_pthread_t, sig: i32) -> i32;
    }
    #[allow(non_camel_case_types)]
    pub type libc_pthread_t = std::os::unix::thread::RawPthread;
    pub const SIGURG: i32 = 23;
}

static SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: i32) {
    SIGNALS.fetch_add(1, Relaxed);
}

/// What the disturbers need to reach the workers.
struct Worker {
    tid: AtomicU64,
    pthread: AtomicU64,
}

/// Runs `threads` workers (`work(i)`) while one thread moves them between CPUs and another
/// sends them signals; the workers stay alive until both disturbers stop (a signal must never
/// go to a thread that has exited). Returns (affinity changes, signals sent).
fn disturbed(threads: usize, work: impl Fn(usize) + Sync) -> (u64, u64) {
    // SAFETY: installs a handler that only increments an atomic (async-signal-safe).
    unsafe { c::signal(c::SIGURG, on_signal) };
    let cpus: Vec<usize> = (0..64 * 16)
        .filter(|&c| {
            rustix::thread::sched_getaffinity(None)
                .map(|s| s.is_set(c))
                .unwrap_or(false)
        })
        .collect();
    let workers: Vec<Worker> = (0..threads)
        .map(|_| Worker {
            tid: AtomicU64::new(0),
            pthread: AtomicU64::new(0),
        })
        .collect();
    let started = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let released = AtomicBool::new(false);
    let (moves, kills) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for (i, w) in workers.iter().enumerate() {
            let (work, started, done, released) = (&work, &started, &done, &released);
            s.spawn(move || {
                w.tid.store(
                    rustix::thread::gettid().as_raw_nonzero().get() as u64,
                    Relaxed,
                );
                // SAFETY: pthread_self has no preconditions.
                w.pthread.store(unsafe { pthread_self() } as u64, Release);
                started.fetch_add(1, Release);
                work(i);
                done.fetch_add(1, Release);
                while !released.load(Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        while started.load(Acquire) < threads {
            std::thread::yield_now();
        }
        let all = rustix::thread::sched_getaffinity(None).ok();
        let (workers, stop, moves, kills, cpus) = (&workers, &stop, &moves, &kills, &cpus);
        let churn = s.spawn(move || {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            while !stop.load(Acquire) {
                let w = &workers[rng.below(workers.len() as u64) as usize];
                let tid = rustix::thread::Pid::from_raw(w.tid.load(Relaxed) as i32);
                let mut set = rustix::thread::CpuSet::new();
                if rng.below(3) == 0 || cpus.len() < 2 {
                    if let Some(all) = &all {
                        set = *all;
                    }
                } else {
                    set.set(cpus[rng.below(cpus.len() as u64) as usize]);
                }
                if rustix::thread::sched_setaffinity(tid, &set).is_ok() {
                    moves.fetch_add(1, Relaxed);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            // Leave every worker free to run anywhere.
            if let Some(all) = &all {
                for w in workers {
                    let tid = rustix::thread::Pid::from_raw(w.tid.load(Relaxed) as i32);
                    let _ = rustix::thread::sched_setaffinity(tid, all);
                }
            }
        });
        let storm = s.spawn(move || {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            while !stop.load(Acquire) {
                for _ in 0..8 {
                    let w = &workers[rng.below(workers.len() as u64) as usize];
                    // SAFETY: the worker's thread is alive until `released`, which is set
                    // only after this thread has been joined.
                    unsafe {
                        c::pthread_kill(w.pthread.load(Acquire) as c::libc_pthread_t, c::SIGURG)
                    };
                    kills.fetch_add(1, Relaxed);
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        while done.load(Acquire) < threads {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Release);
        churn.join().unwrap();
        storm.join().unwrap();
        released.store(true, Release);
    });
    (moves.into_inner(), kills.into_inner())
}

extern "C" {
    fn pthread_self() -> c::libc_pthread_t;
}

fn exact_total(counter: &PerCpuCounter, total: u64, label: &str) {
    let threads = common::per_cpu(4, 4);
    let per_thread = total / threads as u64;
    let total = per_thread * threads as u64;
    let rseq_threads = AtomicUsize::new(0);
    let aborts_before = percpu::aborts();
    let t0 = Instant::now();
    let (moves, kills) = disturbed(threads, |i| {
        if counter.uses_rseq() {
            rseq_threads.fetch_add(1, Relaxed);
        }
        // Mostly 1s, with a larger value now and then, so a doubled or lost add of either
        // kind changes the total.
        let mut left = per_thread;
        let mut k = i as u64;
        while left > 0 {
            k = k.wrapping_add(1);
            if k % 1024 == 0 && left >= 7 {
                counter.add(7);
                left -= 7;
            } else {
                counter.add(1);
                left -= 1;
            }
        }
    });
    let sum = counter.sum();
    eprintln!(
        "{label}: {total} adds from {threads} threads ({} with rseq, registration {}) in {:.1} s; \
         {moves} affinity changes, {kills} signals sent ({} handled so far), {} aborts in the process meanwhile",
        rseq_threads.load(Relaxed),
        percpu::registration().describe(),
        t0.elapsed().as_secs_f64(),
        SIGNALS.load(Relaxed),
        percpu::aborts() - aborts_before
    );
    assert_eq!(sum, total, "{label}: adds were lost or doubled");
}

#[test]
fn percpu_counter_exact_total_under_migration_and_signals() {
    let counter = PerCpuCounter::new();
    exact_total(&counter, adds(), "percpu counter");
}

/// The index kernels before 6.3 give: the CPU number.
#[test]
fn percpu_counter_by_cpu_id_exact_total() {
    let counter = PerCpuCounter::by_cpu_id();
    exact_total(&counter, adds() / 4, "percpu counter by cpu_id");
}

#[test]
fn percpu_counter_fallback_exact_total() {
    let counter = PerCpuCounter::sharded();
    exact_total(&counter, adds() / 10, "percpu fallback counter");
}

/// Tokens 0..T move between the workers' hands and the stacks; at the end every token is in
/// exactly one place.
fn slots_conserve(slots: PerCpuSlots, label: &str) {
    let mut slots = slots;
    let threads = common::per_cpu(4, 4);
    const HAND: usize = 64;
    let deadline = Instant::now() + time_limit().min(Duration::from_secs(20));
    let ops_limit: u64 = 50_000_000 / threads as u64;
    let hands: Vec<std::sync::Mutex<Vec<usize>>> = (0..threads)
        .map(|i| std::sync::Mutex::new((i * HAND..(i + 1) * HAND).collect()))
        .collect();
    let ops = AtomicU64::new(0);
    {
        let slots = &slots;
        disturbed(threads, |i| {
            let mut hand = hands[i].lock().unwrap();
            let mut rng = Rng(0x1234_5678 + i as u64);
            let mut n = 0u64;
            while n < ops_limit && (n % 4096 != 0 || Instant::now() < deadline) {
                n += 1;
                if rng.below(2) == 0 {
                    if let Some(v) = hand.pop() {
                        if let Err(v) = slots.try_push(v) {
                            hand.push(v);
                        }
                    }
                } else if let Some(v) = slots.try_pop() {
                    hand.push(v);
                }
            }
            ops.fetch_add(n, Relaxed);
        });
    }
    let mut all: Vec<usize> = slots.drain();
    for h in &hands {
        all.extend(h.lock().unwrap().iter().copied());
    }
    all.sort_unstable();
    let expected: Vec<usize> = (0..threads * HAND).collect();
    let missing = expected
        .iter()
        .filter(|v| all.binary_search(v).is_err())
        .count();
    let duplicated = all.windows(2).filter(|w| w[0] == w[1]).count();
    eprintln!(
        "{label}: {} operations from {threads} threads; {missing} tokens lost, {duplicated} duplicated; {} aborts in the process so far",
        ops.load(Relaxed),
        percpu::aborts()
    );
    assert_eq!(
        (missing, duplicated),
        (0, 0),
        "{label}: tokens lost or duplicated"
    );
    assert_eq!(all.len(), threads * HAND);
}

#[test]
fn percpu_slots_conserve_tokens_under_migration_and_signals() {
    slots_conserve(PerCpuSlots::new(16), "percpu slots");
}

#[test]
fn percpu_slots_by_cpu_id_conserve_tokens() {
    slots_conserve(PerCpuSlots::by_cpu_id(16), "percpu slots by cpu_id");
}

#[test]
fn percpu_slots_fallback_conserve_tokens() {
    slots_conserve(PerCpuSlots::locked(16), "percpu locked slots");
}

/// Which registration this process should be using, from what the C library says.
#[test]
fn percpu_registration_matches_the_environment() {
    let p = percpu::registration();
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    eprintln!(
        "registration: {} (GLIBC_TUNABLES={tunables:?})",
        p.describe()
    );
    if tunables.contains("glibc.pthread.rseq=0") {
        assert_ne!(
            p.registration,
            Registration::Glibc,
            "glibc was told not to register"
        );
    } else if p.registration == Registration::Unavailable && common::emulated().is_some() {
        eprintln!(
            "skipped: {} has no rseq (ENOSYS), so glibc registered nothing to adopt",
            common::emulated().unwrap_or_default()
        );
    } else if glibc_registers() {
        assert_eq!(
            p.registration,
            Registration::Glibc,
            "glibc's registration was not adopted"
        );
    }
    // Where the kernel offers rseq, a thread we start must end up registered either way.
    if p.registration != Registration::Unavailable {
        let registered = std::thread::spawn(percpu::rseq::this_thread_registered)
            .join()
            .unwrap();
        assert!(
            registered,
            "a new thread could not use rseq ({})",
            p.describe()
        );
    }
}

/// glibc 2.35+ registers every thread, unless told not to.
fn glibc_registers() -> bool {
    #[cfg(target_env = "gnu")]
    {
        extern "C" {
            fn gnu_get_libc_version() -> *const std::ffi::c_char;
        }
        // SAFETY: returns a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
        let v = v.to_string_lossy();
        let mut parts = v.split('.').filter_map(|p| p.parse::<u32>().ok());
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (major, minor) >= (2, 35)
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

/// Threads come and go: each registers (own mode) and unregisters at exit; no leak of the
/// kernel's one registration per thread, no crash, exact counts.
#[test]
fn percpu_threads_come_and_go() {
    let counter = PerCpuCounter::new();
    for round in 0..200u64 {
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| (0..100).for_each(|_| counter.add(round)));
            }
        });
    }
    assert_eq!(counter.sum(), 200 * (0..200u64).sum::<u64>());
}

extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn _exit(code: i32) -> !;
}

/// After fork the child's thread keeps its registration (own mode) or glibc's (glibc mode);
/// counting in the child, on the forking thread and on new threads, is exact.
#[test]
fn percpu_counter_after_fork() {
    if let Some(why) = common::emulated() {
        eprintln!("skipped: forks a multithreaded process, which hangs at times under {why}");
        return;
    }
    let counter = PerCpuCounter::new();
    counter.add(1); // registers this thread before the fork
    let parent_rseq = counter.uses_rseq();
    // SAFETY: the child only counts, spawns threads and exits with _exit.
    let pid = unsafe { fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let c = PerCpuCounter::new();
            (0..100_000).for_each(|_| c.add(1));
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| (0..100_000).for_each(|_| c.add(1)));
                }
            });
            counter.add(1);
            c.sum() == 500_000 && counter.sum() == 2 && c.uses_rseq() == parent_rseq
        }));
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { _exit(if matches!(ok, Ok(true)) { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child we forked.
    let r = unsafe { waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert_eq!(
        status, 0,
        "the child counted wrong or crashed (status {status:#x})"
    );
    assert_eq!(counter.sum(), 1);
}

/// Without rseq (a seccomp filter makes the call answer ENOSYS in a child process, from its
/// start): the counter and the stacks take their fallback and stay exact.
#[test]
fn percpu_without_rseq_under_seccomp() {
    const CHILD: &str = "SPINDLE_PERCPU_SECCOMP_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let p = percpu::registration();
        let c = PerCpuCounter::new();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    assert!(!c.uses_rseq(), "rseq in use despite the filter");
                    (0..100_000).for_each(|_| c.add(1));
                });
            }
        });
        assert_eq!(c.sum(), 400_000);
        let mut slots = PerCpuSlots::new(4);
        assert!(slots.try_push(7).is_ok());
        assert_eq!(slots.try_pop(), Some(7));
        assert!(slots.drain().is_empty());
        eprintln!("child under seccomp: registration {}", p.describe());
        return;
    }
    use std::os::unix::process::CommandExt as _;
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "percpu_without_rseq_under_seccomp",
        "--nocapture",
    ])
    .env(CHILD, "1");
    // SAFETY: the closure only calls prctl, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if deny_rseq() {
                Ok(())
            } else {
                Err(std::io::Error::other("seccomp filter refused"))
            }
        });
    }
    match cmd.output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stderr);
            eprintln!("{text}");
            assert!(
                out.status.success(),
                "the child without rseq failed: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Err(e) => eprintln!("could not install the seccomp filter ({e}); skipped"),
    }
}

/// Installs a seccomp filter under which `rseq` fails with ENOSYS (as on a kernel without it).
fn deny_rseq() -> bool {
    #[repr(C)]
    struct SockFilter {
        code: u16,
        jt: u8,
        jf: u8,
        k: u32,
    }
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const SockFilter,
    }
    extern "C" {
        fn prctl(option: i32, a: u64, b: u64, c: u64, d: u64) -> i32;
    }
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    // This architecture's audit value and rseq number: only its system calls are judged.
    #[cfg(not(target_arch = "aarch64"))]
    const ARCH_AND_RSEQ: (u32, u32) = (0xc000_003e, 334); // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH_AND_RSEQ: (u32, u32) = (0xc000_00b7, 293); // AUDIT_ARCH_AARCH64
    let program = [
        // Only this architecture's system calls are judged (arch at offset 4, nr at offset 0).
        SockFilter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 4,
        },
        SockFilter {
            code: JEQ_K,
            jt: 0,
            jf: 3,
            k: ARCH_AND_RSEQ.0,
        },
        SockFilter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        SockFilter {
            code: JEQ_K,
            jt: 0,
            jf: 1,
            k: ARCH_AND_RSEQ.1,
        },
        SockFilter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: 0x0005_0000 | 38,
        }, // ERRNO(ENOSYS)
        SockFilter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: 0x7fff_0000,
        }, // ALLOW
    ];
    let prog = SockFprog {
        len: program.len() as u16,
        filter: program.as_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS (38) then PR_SET_SECCOMP (22) with SECCOMP_MODE_FILTER (2)
    // and a valid program that outlives the call.
    unsafe {
        prctl(38, 1, 0, 0, 0) == 0 && prctl(22, 2, &prog as *const SockFprog as u64, 0, 0) == 0
    }
}
