//! Thin access to the machine: the time-stamp counter, CPU pinning, and two raw syscalls that
//! rustix does not wrap (used only to *probe* whether a kernel feature exists).

use std::time::Instant;

/// Reads the time-stamp counter. On x86-64 with `constant_tsc` it ticks at a fixed rate
/// whatever the core frequency, so differences are a clock, not a cycle count. On AArch64 it
/// reads the generic timer's virtual count (`CNTVCT_EL0`, which Linux lets user space read):
/// a constant-rate clock too, architecturally, but slower (often 25 MHz to 1 GHz; 1 GHz from
/// Armv8.6), so single short operations are timed in coarse ticks there; the rate is measured
/// ([`calibrate_tsc`]), never assumed.
#[inline]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no memory effects and exists on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let t: u64;
        // SAFETY: reads a system register that Linux makes readable at EL0
        // (CNTKCTL_EL1.EL0VCTEN); no memory effects.
        unsafe {
            core::arch::asm!("mrs {t}, cntvct_el0", t = out(reg) t, options(nomem, nostack, preserves_flags));
        }
        t
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // Elsewhere, fall back to nanoseconds since an arbitrary origin.
        use std::sync::OnceLock;
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Measures the TSC rate against CLOCK_MONOTONIC over `window`, three times, and returns the
/// median in ticks per nanosecond (GHz).
pub fn calibrate_tsc(window: std::time::Duration) -> f64 {
    let mut rates: Vec<f64> = (0..3)
        .map(|_| {
            let (t0, c0) = (Instant::now(), rdtsc());
            while t0.elapsed() < window {
                std::hint::spin_loop();
            }
            let (c1, t1) = (rdtsc(), t0.elapsed());
            (c1 - c0) as f64 / t1.as_nanos() as f64
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[1]
}

/// The hypervisor's vendor signature from CPUID leaf 0x4000_0000 (e.g. "KVMKVMKVM"), or None
/// when there is none to read. Only meaningful when the `hypervisor` CPU flag is set.
pub fn hypervisor_signature() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: CPUID exists on every x86-64 CPU (newer toolchains mark __cpuid safe, older
        // ones unsafe; the allow keeps both quiet). Leaves in the 0x4000_0000 range belong to
        // hypervisors; the caller checks the hypervisor flag first.
        #[allow(unused_unsafe)]
        let r = unsafe { core::arch::x86_64::__cpuid(0x4000_0000) };
        let bytes: Vec<u8> = [r.ebx, r.ecx, r.edx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let text: String = bytes
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as char)
            .collect();
        let text = text.trim().to_string();
        (!text.is_empty() && text.chars().all(|c| c.is_ascii_graphic() || c == ' ')).then_some(text)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Median round-trip time, in nanoseconds, of one cache line bounced between threads pinned to
/// `a` and `b` (ping-pong on one atomic word, 5 batches of 20 000 round trips). It tells how
/// "far apart" two CPUs are: SMT siblings answer in tens of nanoseconds, distant cores or
/// sockets in hundreds. None if either thread cannot be pinned. Both sides run on threads of
/// their own: the caller's affinity is left alone (threads it spawns later inherit it).
pub fn cache_line_round_trip_ns(a: usize, b: usize) -> Option<f64> {
    round_trip_ns(a, b, 5, 20_000)
}

/// The same measure, short enough to repeat between windows of trials (3 batches of 300
/// round trips): whether the host has moved the two CPUs since the last look (see
/// `runner/placement.rs`). None also when a round trip took more than
/// [`PLAUSIBLE_ROUND_TRIP_NS`]: no cache line takes that long between two CPUs that run
/// nothing else, so another thread (an experiment's own, between its trials) was sharing one
/// of them, and the figure says nothing of where they are.
pub fn quick_round_trip_ns(a: usize, b: usize) -> Option<f64> {
    round_trip_ns(a, b, 3, 300).filter(|&ns| ns <= PLAUSIBLE_ROUND_TRIP_NS)
}

/// The longest cache-line round trip [`quick_round_trip_ns`] accepts as a placement's:
/// several times the hundreds of nanoseconds between sockets or distant chiplets, far below
/// what a batch takes when one of its threads must wait for the scheduler to run it.
pub const PLAUSIBLE_ROUND_TRIP_NS: f64 = 2000.0;

/// Untimed round trips before the first batch: both threads pinned, running and spinning.
const WARM_UP_ROUND_TRIPS: u64 = 64;

/// The median of `batches` batches of `round_trips` cache-line round trips between `a` and
/// `b`, timed by the thread on `a` once the one on `b` has pinned itself and a few untimed
/// round trips have run. None if either thread cannot be created or pinned.
fn round_trip_ns(a: usize, b: usize, batches: usize, round_trips: u64) -> Option<f64> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    #[repr(align(128))]
    struct Line(AtomicU64);
    let line = Line(AtomicU64::new(0));
    let gave_up = AtomicBool::new(false);
    // Odd values are the initiator's pings, even ones the responder's answers: round trip `k`
    // (counting the warm-up ones) is 2k + 1 and back 2k + 2.
    let total = WARM_UP_ROUND_TRIPS + batches as u64 * round_trips;
    // Waits for `want` on the line, giving up with the other side.
    let wait = |want: u64| {
        while line.0.load(Ordering::Acquire) != want {
            if gave_up.load(Ordering::Acquire) {
                return false;
            }
            std::hint::spin_loop();
        }
        true
    };
    let times = std::thread::scope(|scope| {
        let (line, gave_up, wait) = (&line, &gave_up, &wait);
        let responder = std::thread::Builder::new().spawn_scoped(scope, move || {
            if !pin_current_thread(b) {
                gave_up.store(true, Ordering::Release);
                return;
            }
            for k in 0..total {
                if !wait(2 * k + 1) {
                    return;
                }
                line.0.store(2 * k + 2, Ordering::Release);
            }
        });
        if responder.is_err() {
            return None;
        }
        let initiator = std::thread::Builder::new().spawn_scoped(scope, move || {
            if !pin_current_thread(a) {
                return None;
            }
            let mut k = 0;
            let mut round_trip = || {
                line.0.store(2 * k + 1, Ordering::Release);
                k += 1;
                wait(2 * k)
            };
            for _ in 0..WARM_UP_ROUND_TRIPS {
                if !round_trip() {
                    return None;
                }
            }
            let mut times = Vec::with_capacity(batches);
            for _ in 0..batches {
                let start = Instant::now();
                for _ in 0..round_trips {
                    if !round_trip() {
                        return None;
                    }
                }
                times.push(start.elapsed().as_nanos() as f64 / round_trips as f64);
            }
            Some(times)
        });
        // Whatever happened to the initiator, the responder must not wait for it for ever.
        let times = initiator.ok().and_then(|h| h.join().ok().flatten());
        gave_up.store(true, Ordering::Release);
        times
    });
    let mut times = times?;
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied()
}

/// Lets the calling thread run on every CPU in `cpus` again (threads it spawns inherit this).
pub fn unpin_current_thread(cpus: &[usize]) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1))
            .collect(),
    }
}

/// Pins the calling thread to `cpu`. Returns false (and leaves the thread unpinned) when the
/// kernel refuses, e.g. inside a cpuset that excludes `cpu`.
pub fn pin_current_thread(cpu: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// Whether this process runs under an emulator that translates another architecture's
/// instructions (QEMU's user mode, `qemu-aarch64` on an x86-64 host, or the reverse), and the
/// evidence: figures measured there are the emulator's, not the machine's. Such emulators
/// pass the host's `/proc/cpuinfo` through, so an AArch64 process that finds x86 fields there
/// (`vendor_id`, `flags`), or finds neither the Arm fields nor the kernel's per-CPU `MIDR_EL1`
/// file, is not running on an Arm CPU; an x86-64 process that finds Arm fields (`CPU
/// implementer`) is not running on an x86 CPU.
pub fn emulation() -> Option<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let has = |key: &str| cpuinfo.lines().any(|l| l.starts_with(key));
    if cfg!(target_arch = "aarch64") {
        let midr =
            std::path::Path::new("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1")
                .exists();
        if has("vendor_id") || has("flags") {
            return Some(
                "an AArch64 build reads an x86 /proc/cpuinfo (vendor_id, flags): it runs under an \
                 emulator such as qemu-aarch64 on an x86-64 host"
                    .into(),
            );
        }
        if !has("CPU implementer") && !midr && !cpuinfo.is_empty() {
            return Some(
                "an AArch64 build finds no Arm CPU in /proc/cpuinfo nor MIDR_EL1 in sysfs: it \
                 most likely runs under an emulator"
                    .into(),
            );
        }
    } else if cfg!(target_arch = "x86_64") && has("CPU implementer") {
        return Some(
            "an x86-64 build reads an Arm /proc/cpuinfo (CPU implementer): it runs under an \
             emulator on an Arm host"
                .into(),
        );
    }
    None
}

/// Raw Linux syscall with up to five arguments; returns the kernel's result (negative errno on
/// failure). Only for probing features that rustix does not cover.
///
/// # Safety
/// The caller must pass arguments that are valid for syscall `nr`.
#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
unsafe fn syscall5(nr: usize, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize) -> isize {
    let ret: isize;
    // SAFETY: the AArch64 Linux syscall ABI: number in x8, arguments in x0-x4, the result in
    // x0; nothing else is clobbered. Validity of the arguments is the caller's contract.
    unsafe {
        core::arch::asm!(
            "svc #0",
            inlateout("x0") a1 as isize => ret,
            in("x1") a2,
            in("x2") a3,
            in("x3") a4,
            in("x4") a5,
            in("x8") nr,
            options(nostack)
        );
    }
    ret
}

/// Raw Linux syscall with up to five arguments; returns the kernel's result (negative errno on
/// failure). Only for probing features that rustix does not cover.
///
/// # Safety
/// The caller must pass arguments that are valid for syscall `nr`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn syscall5(nr: usize, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86-64 Linux syscall ABI: number in rax, arguments in rdi, rsi, rdx, r10, r8;
    // the kernel clobbers rcx and r11. Validity of the arguments is the caller's contract.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a1,
            in("rsi") a2,
            in("rdx") a3,
            in("r10") a4,
            in("r8") a5,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    ret
}

const ENOSYS: isize = 38;

/// Whether the kernel implements the `rseq` system call (Linux 4.18+).
///
/// Probe: `rseq(NULL, 0, 0, 0)` is always an invalid registration, so a kernel that has the call
/// answers EINVAL (or EBUSY/EPERM when the C library registered one already), and a kernel that
/// lacks it answers ENOSYS.
pub fn rseq_available() -> Option<bool> {
    #[cfg(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    ))]
    {
        #[cfg(target_arch = "x86_64")]
        const SYS_RSEQ: usize = 334;
        #[cfg(target_arch = "aarch64")]
        const SYS_RSEQ: usize = 293;
        // SAFETY: a NULL area with length 0 is rejected before the kernel touches memory.
        let ret = unsafe { syscall5(SYS_RSEQ, 0, 0, 0, 0, 0) };
        Some(ret != -ENOSYS)
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    {
        None
    }
}

/// Whether a hardware CPU-cycles counter can be opened for this thread, or the errno that says
/// why not (`ENOENT`: no PMU exposed, as in most VMs; `EACCES`: perf_event_paranoid).
pub fn perf_counters() -> Result<(), i32> {
    #[cfg(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    ))]
    {
        #[cfg(target_arch = "x86_64")]
        const SYS_PERF_EVENT_OPEN: usize = 298;
        #[cfg(target_arch = "aarch64")]
        const SYS_PERF_EVENT_OPEN: usize = 241;
        const PERF_FLAG_FD_CLOEXEC: usize = 8;
        // struct perf_event_attr, first version (64 bytes): type u32, size u32, config u64,
        // sample_period u64, sample_type u64, read_format u64, flags u64, …
        let mut attr = [0u64; 8];
        attr[0] = 64u64 << 32; // size = 64 (high half), type = PERF_TYPE_HARDWARE = 0 (low half)
        attr[1] = 0; // config = PERF_COUNT_HW_CPU_CYCLES
        attr[5] = 1 | (1 << 5) | (1 << 6); // disabled, exclude_kernel, exclude_hv
                                           // SAFETY: `attr` is a valid, initialised perf_event_attr of the size it declares, and it
                                           // outlives the call; pid 0 = this thread, cpu -1 = any, group -1 = none.
        let fd = unsafe {
            syscall5(
                SYS_PERF_EVENT_OPEN,
                attr.as_ptr() as usize,
                0,
                usize::MAX,
                usize::MAX,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
            drop(unsafe {
                <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32)
            });
            Ok(())
        } else {
            Err((-fd) as i32)
        }
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    {
        Err(ENOSYS as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_advances_and_calibrates_to_a_plausible_rate() {
        let a = rdtsc();
        let b = rdtsc();
        assert!(b >= a);
        let ghz = calibrate_tsc(std::time::Duration::from_millis(5));
        // Any real TSC runs between 0.1 and 10 GHz; AArch64's generic timer at 1 MHz or more.
        let low = if cfg!(target_arch = "aarch64") {
            0.001
        } else {
            0.1
        };
        assert!((low..10.0).contains(&ghz), "{ghz}");
    }

    #[test]
    fn rseq_probe_answers() {
        // Every kernel since 4.18 has rseq; where it is missing the probe must say so, not crash.
        assert!(rseq_available().is_some());
    }

    /// The perf probe must agree with sysfs: without a core PMU there (as in most VMs) opening a
    /// cycles counter has to fail with "no such event"; with one, it opens unless forbidden.
    #[test]
    fn perf_probe_agrees_with_sysfs() {
        let pmu = ["cpu", "cpu_core", "cpu_atom", "armv8_pmuv3_0"]
            .iter()
            .any(|d| {
                std::path::Path::new("/sys/bus/event_source/devices")
                    .join(d)
                    .exists()
            });
        match perf_counters() {
            Ok(()) => assert!(pmu, "a cycles counter opened without a PMU in sysfs"),
            Err(errno) if !pmu => assert!(
                [2, 19, 95].contains(&errno),
                "no PMU, yet the probe failed with errno {errno}"
            ),
            // EACCES/EPERM: perf_event_paranoid or a seccomp filter.
            Err(errno) => assert!([1, 13].contains(&errno), "PMU present, errno {errno}"),
        }
    }

    #[test]
    fn cache_line_round_trip_between_two_cpus_leaves_the_caller_unpinned() {
        let cpus = allowed_cpus();
        if cpus.len() < 2 {
            eprintln!("skipped: fewer than two CPUs");
            return;
        }
        let ns = cache_line_round_trip_ns(cpus[0], cpus[1]).expect("both threads pin");
        // A round trip is two cache-line transfers: it cannot be free.
        assert!(ns > 0.0);
        // The caller's threads (every "unpinned" variant) must still be free to use every CPU.
        assert_eq!(allowed_cpus(), cpus);
    }

    #[test]
    fn pinning_to_an_allowed_cpu_works() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        let handle = std::thread::spawn(move || pin_current_thread(cpus[0]));
        assert!(handle.join().unwrap());
    }
}
