//! The machine fingerprint attached to every result: what a reader needs to judge whether a
//! figure transfers to their own machine.

use std::fs;
use std::time::Duration;

use serde::Serialize;

use crate::sys;

/// Facts about the machine and kernel, gathered once per lab run.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Family, model and stepping numbers (they tell CPU generations apart when the name does not).
    pub cpu_family_model: String,
    /// CPUs online.
    pub cpus_online: usize,
    /// CPUs this process may use (its affinity mask).
    pub cpus_allowed: Vec<usize>,
    /// Hardware threads per core as the kernel sees them (1: no SMT siblings visible).
    pub threads_per_core: usize,
    /// Median round trip of a cache line between the first two allowed CPUs, ns: how far apart
    /// the CPUs that two-thread experiments use are (on a VM this can change from run to run).
    pub cache_line_round_trip_ns: Option<f64>,
    /// The two CPUs of that measurement.
    pub round_trip_cpus: Option<[usize; 2]>,
    /// Running under a hypervisor (the `hypervisor` CPU flag).
    pub virtualised: bool,
    /// The hypervisor's CPUID signature ("KVMKVMKVM", "Microsoft Hv", …), when virtualised.
    pub hypervisor: Option<String>,
    /// Kernel release and build string.
    pub kernel: String,
    /// Scheduler tick rate (CONFIG_HZ) and where it came from.
    pub hz: Option<u64>,
    /// `kernel config`, `estimated from timer interrupts`, or why it is unknown.
    pub hz_source: String,
    /// Preemption model from the kernel config, if readable.
    pub preemption: Option<String>,
    /// Current clocksource and the available ones.
    pub clocksource: String,
    /// Clocksources the kernel could switch to.
    pub clocksources_available: String,
    /// TSC flags that make it usable as a clock.
    pub tsc_constant: bool,
    /// TSC keeps ticking in deep idle states.
    pub tsc_nonstop: bool,
    /// TSC rate measured against CLOCK_MONOTONIC.
    pub tsc_ghz: f64,
    /// membarrier(MEMBARRIER_CMD_QUERY) bit mask.
    pub membarrier_mask: u32,
    /// The commands that mask names.
    pub membarrier_commands: Vec<String>,
    /// The rseq system call exists.
    pub rseq: Option<bool>,
    /// Hardware performance counters can be opened.
    pub perf_counters: bool,
    /// Why not, when they cannot.
    pub perf_counters_error: Option<String>,
    /// Running as root (eBPF, SCHED_FIFO and some probes need it).
    pub root: bool,
    /// Physical memory, GiB.
    pub memory_gib: f64,
}

impl Machine {
    /// Gathers the fingerprint. Takes about half a second (TSC calibration, HZ estimate).
    pub fn detect() -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let flags = field("flags").unwrap_or_default();
        let has_flag = |f: &str| flags.split_whitespace().any(|x| x == f);
        let uname = rustix::system::uname();
        let kernel = format!(
            "{} {}",
            uname.release().to_string_lossy(),
            uname.version().to_string_lossy()
        );
        let config = kernel_config(&uname.release().to_string_lossy());
        let (hz, hz_source) = match config.as_deref().and_then(|c| config_value(c, "CONFIG_HZ")) {
            Some(v) => (v.parse().ok(), "kernel config".to_string()),
            None => match estimate_hz() {
                Some(hz) => (
                    Some(hz),
                    "estimated from local timer interrupts".to_string(),
                ),
                None => (
                    None,
                    "unknown (no kernel config, no /proc/interrupts)".to_string(),
                ),
            },
        };
        let preemption = config.as_deref().and_then(preemption_model);
        let query = rustix::thread::membarrier_query();
        let membarrier_commands = membarrier_names(query.bits());
        let perf = sys::perf_counters();
        let allowed = sys::allowed_cpus();
        let pair = (allowed.len() >= 2).then(|| [allowed[0], allowed[1]]);
        Machine {
            cpu_model: field("model name").unwrap_or_else(|| "unknown".into()),
            cpu_family_model: format!(
                "family {} model {} stepping {}",
                field("cpu family").unwrap_or_else(|| "?".into()),
                field("model").unwrap_or_else(|| "?".into()),
                field("stepping").unwrap_or_else(|| "?".into())
            ),
            cpus_online: online_cpus(),
            cpus_allowed: allowed.clone(),
            threads_per_core: threads_per_core(),
            cache_line_round_trip_ns: pair.and_then(|[a, b]| sys::cache_line_round_trip_ns(a, b)),
            round_trip_cpus: pair,
            virtualised: has_flag("hypervisor"),
            hypervisor: if has_flag("hypervisor") {
                sys::hypervisor_signature()
            } else {
                None
            },
            kernel,
            hz,
            hz_source,
            preemption,
            clocksource: read_trimmed(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .unwrap_or_else(|| "unknown".into()),
            clocksources_available: read_trimmed(
                "/sys/devices/system/clocksource/clocksource0/available_clocksource",
            )
            .unwrap_or_default(),
            tsc_constant: has_flag("constant_tsc"),
            tsc_nonstop: has_flag("nonstop_tsc"),
            tsc_ghz: sys::calibrate_tsc(Duration::from_millis(50)),
            membarrier_mask: query.bits(),
            membarrier_commands,
            rseq: sys::rseq_available(),
            perf_counters: perf.is_ok(),
            perf_counters_error: perf.err().map(describe_errno),
            root: rustix::process::geteuid().is_root(),
            memory_gib: meminfo_gib().unwrap_or(0.0),
        }
    }

    /// One line for terminal headers.
    pub fn one_line(&self) -> String {
        let round_trip = match self.cache_line_round_trip_ns {
            Some(ns) => format!(" · cache-line round trip {ns:.0} ns"),
            None => String::new(),
        };
        format!(
            "{} · {} CPUs{} · Linux {} · HZ {} · {} clocksource · TSC {:.3} GHz{round_trip}",
            self.cpu_model,
            self.cpus_online,
            if self.virtualised { " (VM)" } else { "" },
            self.kernel.split_whitespace().next().unwrap_or("?"),
            self.hz.map(|h| h.to_string()).unwrap_or_else(|| "?".into()),
            self.clocksource,
            self.tsc_ghz
        )
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn online_cpus() -> usize {
    // "0-1,4-7" → 6
    read_trimmed("/sys/devices/system/cpu/online")
        .map(|s| {
            s.split(',')
                .filter_map(|r| match r.split_once('-') {
                    Some((a, b)) => Some(b.parse::<usize>().ok()? - a.parse::<usize>().ok()? + 1),
                    None => r.parse::<usize>().ok().map(|_| 1),
                })
                .sum()
        })
        .filter(|&n| n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
}

fn threads_per_core() -> usize {
    // "0", "0,8" or "0-1": the hardware threads sharing cpu0's core.
    read_trimmed("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
        .map(|s| {
            s.split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => {
                        b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0)
                    }
                    None => 1,
                })
                .sum()
        })
        .unwrap_or(1)
}

fn meminfo_gib() -> Option<f64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let kb: f64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / (1024.0 * 1024.0))
}

/// The kernel's build configuration: /boot/config-RELEASE, or /proc/config.gz through `zcat`
/// (we carry no decompressor of our own). None when neither is readable.
fn kernel_config(release: &str) -> Option<String> {
    if let Ok(text) = fs::read_to_string(format!("/boot/config-{release}")) {
        return Some(text);
    }
    let out = std::process::Command::new("zcat")
        .arg("/proc/config.gz")
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn config_value<'a>(config: &'a str, key: &str) -> Option<&'a str> {
    config
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

fn preemption_model(config: &str) -> Option<String> {
    let set = |k: &str| config_value(config, k) == Some("y");
    let base = if set("CONFIG_PREEMPT_RT") {
        "rt"
    } else if set("CONFIG_PREEMPT") {
        "full"
    } else if set("CONFIG_PREEMPT_VOLUNTARY") {
        "voluntary"
    } else if set("CONFIG_PREEMPT_NONE") {
        "none"
    } else {
        return None;
    };
    Some(if set("CONFIG_PREEMPT_DYNAMIC") {
        format!("{base} (dynamic: may be changed at boot)")
    } else {
        base.to_string()
    })
}

/// Estimates HZ by counting local timer interrupts on one CPU while this thread keeps it busy
/// (a busy CPU takes one tick per jiffy unless the kernel runs tickless on it).
fn estimate_hz() -> Option<u64> {
    let cpu = *sys::allowed_cpus().first()?;
    let window = Duration::from_millis(200);
    std::thread::spawn(move || {
        if !sys::pin_current_thread(cpu) {
            return None;
        }
        let before = local_timer_count(cpu)?;
        let start = std::time::Instant::now();
        while start.elapsed() < window {
            std::hint::spin_loop();
        }
        let after = local_timer_count(cpu)?;
        let rate = (after - before) as f64 / start.elapsed().as_secs_f64();
        // Snap to the usual CONFIG_HZ choices.
        [100u64, 250, 300, 1000]
            .into_iter()
            .min_by(|&a, &b| (a as f64 - rate).abs().total_cmp(&(b as f64 - rate).abs()))
    })
    .join()
    .ok()
    .flatten()
}

fn local_timer_count(cpu: usize) -> Option<u64> {
    let text = fs::read_to_string("/proc/interrupts").ok()?;
    let line = text.lines().find(|l| l.trim_start().starts_with("LOC:"))?;
    line.split_whitespace().nth(1 + cpu)?.parse().ok()
}

fn membarrier_names(mask: u32) -> Vec<String> {
    // Bit positions of the MEMBARRIER_CMD_* flags (include/uapi/linux/membarrier.h).
    const NAMES: [(u32, &str); 9] = [
        (0, "GLOBAL"),
        (1, "GLOBAL_EXPEDITED"),
        (2, "REGISTER_GLOBAL_EXPEDITED"),
        (3, "PRIVATE_EXPEDITED"),
        (4, "REGISTER_PRIVATE_EXPEDITED"),
        (5, "PRIVATE_EXPEDITED_SYNC_CORE"),
        (6, "REGISTER_PRIVATE_EXPEDITED_SYNC_CORE"),
        (7, "PRIVATE_EXPEDITED_RSEQ"),
        (8, "REGISTER_PRIVATE_EXPEDITED_RSEQ"),
    ];
    NAMES
        .iter()
        .filter(|(bit, _)| mask & (1 << bit) != 0)
        .map(|(_, name)| name.to_string())
        .collect()
}

fn describe_errno(errno: i32) -> String {
    let what = match errno {
        2 => "ENOENT: the kernel exposes no hardware PMU (common in VMs)",
        13 => "EACCES: forbidden by kernel.perf_event_paranoid",
        1 => "EPERM: not permitted",
        19 => "ENODEV: no such PMU",
        38 => "ENOSYS: perf_event_open is not implemented",
        95 => "EOPNOTSUPP: hardware events are not supported",
        _ => return format!("errno {errno}"),
    };
    what.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parsing() {
        let cfg = "CONFIG_HZ_250=y\nCONFIG_HZ=250\n# CONFIG_PREEMPT is not set\nCONFIG_PREEMPT_NONE=y\nCONFIG_PREEMPT_DYNAMIC=y\n";
        assert_eq!(config_value(cfg, "CONFIG_HZ"), Some("250"));
        assert_eq!(config_value(cfg, "CONFIG_H"), None);
        assert_eq!(
            preemption_model(cfg).as_deref(),
            Some("none (dynamic: may be changed at boot)")
        );
    }

    #[test]
    fn membarrier_bits_have_names() {
        assert_eq!(
            membarrier_names(0b1001),
            vec!["GLOBAL", "PRIVATE_EXPEDITED"]
        );
        assert!(membarrier_names(0).is_empty());
    }

    #[test]
    fn detect_fills_the_basics() {
        let m = Machine::detect();
        assert!(m.cpus_online >= 1);
        assert!(!m.cpus_allowed.is_empty());
        assert!(m.tsc_ghz > 0.1);
        assert!(!m.kernel.is_empty());
        assert!(m.one_line().contains("CPUs"));
    }
}
