//! The machine fingerprint attached to every result: what a reader needs to judge whether a
//! figure transfers to their own machine.

use std::fs;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sys;

/// Facts about the machine and kernel, gathered once per lab run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Family, model and stepping numbers (they tell CPU generations apart when the name does not).
    pub cpu_family_model: String,
    /// `GenuineIntel`, `AuthenticAMD`, …
    pub vendor: String,
    pub family: Option<u32>,
    pub model: Option<u32>,
    /// The core generation, when family and model are in the lab's table (Zen 1–5, Skylake …
    /// Granite Rapids).
    pub microarchitecture: Option<String>,
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
    /// The same round trip measured again when the lab finished.
    pub round_trip_end_ns: Option<f64>,
    /// Fraction of the allowed CPUs' time spent busy (by anything) in 250 ms just before the
    /// lab started.
    pub cpu_busy_at_start: Option<f64>,
    /// What in this fingerprint makes figures unlikely to transfer, in sentences.
    pub anomalies: Vec<String>,
    /// Running under an emulator that translates another architecture (QEMU user mode), and
    /// the evidence ([`sys::emulation`]): the run's figures are then the emulator's, not
    /// performance figures of any machine.
    #[serde(default)]
    pub emulated: Option<String>,
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
    /// Which registration of `struct rseq` Spindle's per-CPU data runs on: `glibc` (adopted),
    /// `own` (registered per thread), `unavailable`, with the index it uses (`mm_cid` or
    /// `cpu_id`); empty in results written before it was recorded.
    #[serde(default)]
    pub rseq_registration: String,
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
        let cpu_busy_at_start = cpu_busy(&allowed, Duration::from_millis(250));
        let emulated = sys::emulation();
        // Arm CPUs name themselves by implementer and part numbers (MIDR_EL1), not by a model
        // name; under emulation the host's x86 fields show through instead (see `emulated`).
        let arm = match (field("CPU implementer"), field("CPU part")) {
            (Some(i), Some(p)) if emulated.is_none() => Some(arm_cpu(&i, &p)),
            _ => None,
        };
        let vendor = match &arm {
            Some((vendor, _)) => vendor.clone(),
            None => field("vendor_id").unwrap_or_else(|| "unknown".into()),
        };
        let family = field("cpu family").and_then(|v| v.parse().ok());
        let model = field("model").and_then(|v| v.parse().ok());
        let stepping = field("stepping").and_then(|v| v.parse().ok());
        let mut m = Machine {
            cpu_model: match &arm {
                Some((_, model)) => model.clone(),
                None => field("model name").unwrap_or_else(|| "unknown".into()),
            },
            microarchitecture: match (family, model) {
                (Some(f), Some(m)) => microarchitecture(&vendor, f, m, stepping.unwrap_or(0)),
                _ => None,
            },
            vendor,
            family,
            model,
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
            round_trip_end_ns: None,
            cpu_busy_at_start,
            anomalies: Vec::new(),
            emulated,
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
            // AArch64's generic timer (what `sys::rdtsc` reads there) is architecturally a
            // constant-rate counter that keeps running in idle states.
            tsc_constant: has_flag("constant_tsc") || cfg!(target_arch = "aarch64"),
            tsc_nonstop: has_flag("nonstop_tsc") || cfg!(target_arch = "aarch64"),
            tsc_ghz: sys::calibrate_tsc(Duration::from_millis(50)),
            membarrier_mask: query.bits(),
            membarrier_commands,
            rseq: sys::rseq_available(),
            rseq_registration: spindle_sync::percpu::registration().describe(),
            perf_counters: perf.is_ok(),
            perf_counters_error: perf.err().map(describe_errno),
            root: rustix::process::geteuid().is_root(),
            memory_gib: meminfo_gib().unwrap_or(0.0),
        };
        m.anomalies = m.find_anomalies();
        m
    }

    /// Measures the cache-line round trip again (at the end of a lab run) and flags a change.
    pub fn remeasure_at_end(&mut self) {
        if let Some([a, b]) = self.round_trip_cpus {
            self.round_trip_end_ns = sys::cache_line_round_trip_ns(a, b);
        }
        self.anomalies = self.find_anomalies();
    }

    /// Sentences about what makes this run's figures unlikely to transfer.
    fn find_anomalies(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(why) = &self.emulated {
            out.push(format!(
                "this run is emulated ({why}): its figures measure the emulator, not a machine, and are no performance figures; the lab runs here only to show that it runs"
            ));
        }
        if let (Some(ns), Some([a, b])) = (self.cache_line_round_trip_ns, self.round_trip_cpus) {
            if ns > USUAL_ROUND_TRIP_NS.1 * 1.5 {
                out.push(format!(
                    "a cache line took {ns:.0} ns to go from CPU {a} to CPU {b} and back, far above the usual {:.0}–{:.0} ns: the two CPUs may be far apart (another socket) or share a physical core's time with other guests; every two-thread figure of this run is affected",
                    USUAL_ROUND_TRIP_NS.0, USUAL_ROUND_TRIP_NS.1
                ));
            }
            if let Some(end) = self.round_trip_end_ns {
                if end > 2.0 * ns || end < 0.5 * ns {
                    out.push(format!(
                        "the cache-line round trip between CPUs {a} and {b} changed from {ns:.0} ns at the start to {end:.0} ns at the end of the run: the machine changed under the lab (vCPUs moved?)"
                    ));
                }
            }
        }
        if !self.tsc_constant || !self.tsc_nonstop {
            out.push(format!(
                "the TSC is not {}: tick counts are not a clock here, and the lab's per-operation times may be off",
                if !self.tsc_constant { "constant" } else { "kept running in idle states" }
            ));
        }
        if let Some(busy) = self.cpu_busy_at_start {
            if busy > 0.15 {
                out.push(format!(
                    "{:.0}% of the allowed CPUs' time was busy with other work just before the lab started: other load distorts every figure",
                    busy * 100.0
                ));
            }
        }
        if !crate::LOOPS_ALIGNED {
            out.push("this lab was built without `-C llvm-args=-align-loops=64` (the workspace's .cargo/config.toml sets it; a RUSTFLAGS variable or any other rustflags setting replaces it, and a build started outside the workspace does not read it): a loop of a few cycles that crosses a 64-byte boundary takes a cycle more per iteration, so where the build placed the signal, push and pop loops can decide their claims; build with RUSTFLAGS=\"... -C llvm-args=-align-loops=64\"".to_string());
        }
        // The fast clocksource: the TSC on x86-64, the generic timer on arm64.
        let fast = if cfg!(target_arch = "aarch64") {
            "arch_sys_counter"
        } else {
            "tsc"
        };
        if self.clocksource != fast && self.clocksource != "unknown" && self.emulated.is_none() {
            out.push(format!(
                "the kernel's clocksource is {}, not {fast}: reading the clock is slow, which inflates short timings",
                self.clocksource
            ));
        }
        out
    }

    /// "AMD EPYC (Zen 3)", or the model name with its family/model numbers when the
    /// generation is not in the lab's table.
    pub fn cpu_name(&self) -> String {
        let name = self
            .cpu_model
            .replace("(R)", "")
            .replace("(TM)", "")
            .replace(" Processor", "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let name = match &self.microarchitecture {
            Some(u) => format!("{name} ({u})"),
            None => format!("{name} ({})", self.cpu_family_model),
        };
        // Under emulation the CPU named is the host's, not the one the code was built for.
        match self.emulated {
            Some(_) => format!("{} emulated on {name}", std::env::consts::ARCH),
            None => name,
        }
    }

    /// The fingerprint as (name, value) rows for reports.
    pub fn facts(&self) -> Vec<(String, String)> {
        let mut rows = vec![
            ("CPU".to_string(), format!("{} — {} · {}", self.cpu_model, self.vendor, self.cpu_family_model)),
            (
                "microarchitecture".into(),
                self.microarchitecture.clone().unwrap_or_else(|| "not in the lab's table".into()),
            ),
            (
                "CPUs online / allowed".into(),
                format!(
                    "{} / {} ({} hardware thread(s) per core)",
                    self.cpus_online,
                    self.cpus_allowed.len(),
                    self.threads_per_core
                ),
            ),
            (
                "emulated".into(),
                match &self.emulated {
                    Some(why) => format!("yes: {why}"),
                    None => String::new(),
                },
            ),
            (
                "virtualised".into(),
                match (&self.hypervisor, self.virtualised) {
                    (Some(h), true) => format!("yes ({h})"),
                    (None, true) => "yes".into(),
                    _ => "no".into(),
                },
            ),
            ("kernel".into(), self.kernel.clone()),
            (
                "HZ".into(),
                format!(
                    "{} ({})",
                    self.hz.map(|h| h.to_string()).unwrap_or_else(|| "?".into()),
                    self.hz_source
                ),
            ),
            ("preemption".into(), self.preemption.clone().unwrap_or_else(|| "unknown".into())),
            (
                "clocksource".into(),
                format!("{} (available: {})", self.clocksource, self.clocksources_available),
            ),
            (
                "TSC".into(),
                format!(
                    "{}{:.4} GHz measured against CLOCK_MONOTONIC · constant: {} · nonstop: {}",
                    if cfg!(target_arch = "aarch64") {
                        "the generic timer (CNTVCT_EL0) stands in for it: "
                    } else {
                        ""
                    },
                    self.tsc_ghz,
                    self.tsc_constant,
                    self.tsc_nonstop
                ),
            ),
            (
                "cache-line round trip".into(),
                match (self.cache_line_round_trip_ns, self.round_trip_cpus) {
                    (Some(ns), Some([a, b])) => format!(
                        "{ns:.0} ns between CPUs {a} and {b} at the start{} (median of 5 × 20 000 ping-pongs; usual: {:.0}–{:.0} ns)",
                        self.round_trip_end_ns.map(|e| format!(", {e:.0} ns at the end")).unwrap_or_default(),
                        USUAL_ROUND_TRIP_NS.0,
                        USUAL_ROUND_TRIP_NS.1
                    ),
                    _ => "not measured (fewer than two CPUs, or pinning refused)".into(),
                },
            ),
            (
                "CPUs busy at start".into(),
                self.cpu_busy_at_start
                    .map(|b| format!("{:.0}% of the allowed CPUs' time, over 250 ms", b * 100.0))
                    .unwrap_or_else(|| "unknown".into()),
            ),
            (
                "membarrier".into(),
                format!("mask {:#x}: {}", self.membarrier_mask, self.membarrier_commands.join(", ")),
            ),
            (
                "rseq".into(),
                match (self.rseq, self.rseq_registration.as_str()) {
                    (None, _) => "unknown".into(),
                    (Some(b), "") => b.to_string(),
                    (Some(b), mode) => format!("{b}; registration {mode}"),
                },
            ),
            (
                "hardware perf counters".into(),
                if self.perf_counters {
                    "available".to_string()
                } else {
                    format!("no ({})", self.perf_counters_error.clone().unwrap_or_default())
                },
            ),
            ("root".into(), self.root.to_string()),
            ("memory".into(), format!("{:.1} GiB", self.memory_gib)),
        ];
        rows.retain(|(_, v)| !v.is_empty());
        rows
    }

    /// One line for terminal headers.
    pub fn one_line(&self) -> String {
        let round_trip = match self.cache_line_round_trip_ns {
            Some(ns) => format!(" · cache-line round trip {ns:.0} ns"),
            None => String::new(),
        };
        format!(
            "{} · {} CPUs{} · Linux {} · HZ {} · {} clocksource · TSC {:.3} GHz{round_trip}",
            self.cpu_name(),
            self.cpus_online,
            if self.virtualised { " (VM)" } else { "" },
            self.kernel.split_whitespace().next().unwrap_or("?"),
            self.hz.map(|h| h.to_string()).unwrap_or_else(|| "?".into()),
            self.clocksource,
            self.tsc_ghz
        )
    }
}

/// `(vendor, model)` of an Arm CPU from `/proc/cpuinfo`'s implementer and part numbers (the
/// fields of MIDR_EL1): the server cores Spindle's users run on by name, others by number.
fn arm_cpu(implementer: &str, part: &str) -> (String, String) {
    let num = |s: &str| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
    let vendor = match num(implementer) {
        Some(0x41) => "Arm",
        Some(0xc0) => "Ampere",
        Some(0x61) => "Apple",
        Some(0x48) => "HiSilicon",
        Some(0x51) => "Qualcomm",
        Some(0x4e) => "NVIDIA",
        _ => "",
    };
    let core = match (num(implementer), num(part)) {
        (Some(0x41), Some(0xd0c)) => Some("Neoverse N1"),
        (Some(0x41), Some(0xd40)) => Some("Neoverse V1"),
        (Some(0x41), Some(0xd49)) => Some("Neoverse N2"),
        (Some(0x41), Some(0xd4f)) => Some("Neoverse V2"),
        (Some(0x41), Some(0xd84)) => Some("Neoverse V3"),
        (Some(0x41), Some(0xd8e)) => Some("Neoverse N3"),
        (Some(0x41), Some(0xd08)) => Some("Cortex-A72"),
        (Some(0x41), Some(0xd0b)) => Some("Cortex-A76"),
        (Some(0xc0), Some(0xac3)) => Some("Ampere-1"),
        (Some(0xc0), Some(0xac4)) => Some("Ampere-1a"),
        (Some(0x48), Some(0xd01)) => Some("Kunpeng 920"),
        _ => None,
    };
    let vendor = if vendor.is_empty() {
        format!("implementer {}", implementer.trim())
    } else {
        vendor.to_string()
    };
    let model = match core {
        Some(c) => format!("{vendor} {c}"),
        None => format!("{vendor} part {}", part.trim()),
    };
    (vendor, model)
}

/// The range of cache-line round trips (ns) seen on the machines the lab was run on: Zen 5
/// and Zen 3 guests 116–230 ns, a 16-core Emerald Rapids guest 385 ns. Far above it is flagged.
const USUAL_ROUND_TRIP_NS: (f64, f64) = (100.0, 400.0);

/// The core generation from CPUID family/model (decimal, as /proc/cpuinfo prints them).
pub fn microarchitecture(vendor: &str, family: u32, model: u32, stepping: u32) -> Option<String> {
    let name = match (vendor, family) {
        ("AuthenticAMD", 0x17) => match model {
            0x00..=0x07 | 0x10..=0x17 | 0x20..=0x2f => "Zen 1",
            0x08 | 0x18 => "Zen+",
            0x30..=0xaf => "Zen 2",
            _ => return None,
        },
        ("AuthenticAMD", 0x19) => match model {
            0x00..=0x0f | 0x20..=0x2f | 0x50..=0x5f => "Zen 3",
            0x40..=0x4f => "Zen 3+",
            0x10..=0x1f | 0x60..=0x7f => "Zen 4",
            0xa0..=0xaf => "Zen 4c",
            _ => return None,
        },
        ("AuthenticAMD", 0x1a) => "Zen 5",
        ("GenuineIntel", 6) => match model {
            26 | 30 | 46 => "Nehalem",
            37 | 44 | 47 => "Westmere",
            42 | 45 => "Sandy Bridge",
            58 | 62 => "Ivy Bridge",
            60 | 63 | 69 | 70 => "Haswell",
            61 | 71 | 79 | 86 => "Broadwell",
            78 | 94 | 142 | 158 | 165 | 166 => "Skylake family (Skylake … Comet Lake)",
            85 => match stepping {
                0..=4 => "Skylake-SP",
                5..=7 => "Cascade Lake",
                _ => "Cooper Lake",
            },
            106 | 108 => "Ice Lake-SP",
            125 | 126 => "Ice Lake",
            140 | 141 => "Tiger Lake",
            151 | 154 => "Alder Lake",
            183 | 186 | 191 => "Raptor Lake",
            170 | 172 => "Meteor Lake",
            143 => "Sapphire Rapids",
            207 => "Emerald Rapids (Sapphire Rapids family)",
            173 | 174 => "Granite Rapids",
            175 => "Sierra Forest",
            _ => return None,
        },
        _ => return None,
    };
    Some(name.to_string())
}

/// Fraction of the CPUs' time spent busy over `window` (user, nice and system time, and steal
/// time, from the same counters as the runner's load checks).
fn cpu_busy(cpus: &[usize], window: Duration) -> Option<f64> {
    use crate::load::{LoadSource, ProcLoad};
    let mut source = ProcLoad::new(cpus, true);
    let a = source.read()?;
    std::thread::sleep(window);
    let b = source.read()?;
    let ticks = (b.busy - a.busy + b.steal - a.steal) as f64;
    let capacity = b.at.duration_since(a.at).as_secs_f64()
        * source.ticks_per_second()
        * cpus.len().max(1) as f64;
    (capacity > 0.0).then(|| (ticks / capacity).min(1.0))
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
    fn microarchitectures_of_the_machines_we_ran_on() {
        assert_eq!(
            microarchitecture("AuthenticAMD", 23, 1, 2).as_deref(),
            Some("Zen 1")
        );
        assert_eq!(
            microarchitecture("AuthenticAMD", 25, 1, 1).as_deref(),
            Some("Zen 3")
        );
        assert_eq!(
            microarchitecture("AuthenticAMD", 26, 2, 0).as_deref(),
            Some("Zen 5")
        );
        assert!(microarchitecture("GenuineIntel", 6, 207, 2)
            .unwrap()
            .contains("Emerald Rapids"));
        assert_eq!(
            microarchitecture("GenuineIntel", 6, 85, 7).as_deref(),
            Some("Cascade Lake")
        );
        assert_eq!(microarchitecture("GenuineIntel", 6, 1000, 0), None);
        assert_eq!(microarchitecture("Other", 6, 85, 0), None);
    }

    #[test]
    fn detect_fills_the_basics() {
        let before = sys::allowed_cpus();
        let m = Machine::detect();
        assert_eq!(
            sys::allowed_cpus(),
            before,
            "the fingerprint pinned the calling thread"
        );
        assert!(m.cpus_online >= 1);
        assert!(!m.cpus_allowed.is_empty());
        assert!(m.tsc_ghz > 0.1);
        assert!(!m.kernel.is_empty());
        assert!(m.one_line().contains("CPUs"));
        assert!(m.facts().iter().any(|(k, _)| k == "TSC"));
        if let Some(b) = m.cpu_busy_at_start {
            assert!((0.0..=1.0).contains(&b), "{b}");
        }
    }
}
