//! Load the lab did not create: CPU time that other processes (and the hypervisor, as steal
//! time) took from the CPUs while a stretch of trials ran.
//!
//! A ratio measured while another process competes for the CPUs describes that competition,
//! not the primitives: one run of a variant may share its CPU and the next may not. So the
//! runner reads the load around every *window* of trials (about half a second) and keeps a
//! window's trials only if it was quiet; otherwise it discards them and measures again. A
//! section whose windows were all loaded is reported as measured under load, and its claims
//! stay undecided.
//!
//! The reading is `/proc/stat` (time every allowed CPU spent in user, nice and system mode, and
//! steal time) against `/proc/self/stat` (the time this process's threads spent, exited ones
//! and reaped children included). Both count in `USER_HZ` ticks. Interrupt and softirq time is
//! left out on purpose: the lab's own IPIs and timers land there, attributed to nobody.

use std::fs;
use std::time::Instant;

/// One reading of the CPU-time counters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub at: Instant,
    /// Ticks every allowed CPU spent in user, nice or system mode, summed.
    pub busy: u64,
    /// Ticks of steal time on those CPUs (a hypervisor ran someone else).
    pub steal: u64,
    /// Ticks this process spent (user + system, children reaped included).
    pub own: u64,
    /// Runnable threads on the machine at the moment of reading (`procs_running`).
    pub runnable: u32,
}

/// Where readings come from: `/proc` on a real machine, a script in tests.
pub trait LoadSource: Send {
    fn read(&mut self) -> Option<Reading>;
    /// Ticks per second of the counters.
    fn ticks_per_second(&self) -> f64;
    /// Whether trials measured under load are discarded (`spindle lab --keep-loaded` says
    /// no: the load is then recorded, and the trials kept).
    fn discards(&self) -> bool {
        true
    }
}

/// What other work took over a stretch of time, in CPUs (1.0 = one CPU kept busy throughout).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// CPU time others spent on the allowed CPUs, over the wall time.
    pub others_cpus: f64,
    /// Steal time over the wall time.
    pub steal_cpus: f64,
    /// The larger of the two runnable counts at the ends of the stretch.
    pub runnable: u32,
    pub seconds: f64,
}

impl Load {
    /// The load between two readings.
    pub fn between(a: &Reading, b: &Reading, ticks_per_second: f64) -> Load {
        let seconds = b.at.duration_since(a.at).as_secs_f64();
        let busy = b.busy.saturating_sub(a.busy) as f64;
        let own = b.own.saturating_sub(a.own) as f64;
        let steal = b.steal.saturating_sub(a.steal) as f64;
        let per_second = |ticks: f64| {
            if seconds > 0.0 {
                ticks / ticks_per_second / seconds
            } else {
                0.0
            }
        };
        Load {
            // The two counters are sampled differently (the process's time is exact, the CPUs'
            // is counted per tick), so a few ticks either way are rounding, not load.
            others_cpus: per_second((busy - own - SLACK_TICKS).max(0.0)),
            steal_cpus: per_second((steal - SLACK_TICKS).max(0.0)),
            runnable: a.runnable.max(b.runnable),
            seconds,
        }
    }

    /// Whether this much foreign load disqualifies the trials measured under it: more than
    /// [`LIMIT_CPUS`] CPUs, or 2% of the machine's CPUs where that is more (a large machine
    /// always has some daemons running somewhere, far from the lab's CPUs).
    pub fn disturbs(&self, cpus: usize) -> bool {
        self.others_cpus + self.steal_cpus > LIMIT_CPUS + 0.005 * cpus as f64
    }

    /// "0.9 CPUs of other work, 0.1 CPUs stolen".
    pub fn describe(&self) -> String {
        let mut parts = vec![format!(
            "{:.2} CPUs of other processes' work",
            self.others_cpus
        )];
        if self.steal_cpus > 0.0 {
            parts.push(format!(
                "{:.2} CPUs stolen by the hypervisor",
                self.steal_cpus
            ));
        }
        parts.join(", ")
    }
}

/// Foreign load (in CPUs) above which a window's trials are discarded: a tenth of a CPU, far
/// above the few ticks of rounding, far below a competing thread (one whole CPU).
pub const LIMIT_CPUS: f64 = 0.1;

/// Ticks of disagreement between the two counters forgiven per window.
const SLACK_TICKS: f64 = 2.0;

/// Readings from `/proc` for the given CPUs.
pub struct ProcLoad {
    cpus: Vec<usize>,
    ticks_per_second: f64,
    discards: bool,
}

impl ProcLoad {
    /// `discards`: whether trials measured under load are thrown away.
    pub fn new(cpus: &[usize], discards: bool) -> ProcLoad {
        ProcLoad {
            cpus: cpus.to_vec(),
            ticks_per_second: rustix::param::clock_ticks_per_second() as f64,
            discards,
        }
    }
}

impl LoadSource for ProcLoad {
    fn read(&mut self) -> Option<Reading> {
        let stat = fs::read_to_string("/proc/stat").ok()?;
        let own = fs::read_to_string("/proc/self/stat").ok()?;
        let at = Instant::now();
        let (busy, steal, runnable) = parse_stat(&stat, &self.cpus)?;
        Some(Reading {
            at,
            busy,
            steal,
            own: parse_own(&own)?,
            runnable,
        })
    }

    fn ticks_per_second(&self) -> f64 {
        self.ticks_per_second
    }

    fn discards(&self) -> bool {
        self.discards
    }
}

/// (busy, steal, procs_running) for `cpus` from the text of `/proc/stat`.
fn parse_stat(text: &str, cpus: &[usize]) -> Option<(u64, u64, u32)> {
    let (mut busy, mut steal, mut runnable, mut seen) = (0u64, 0u64, 0u32, false);
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let name = fields.next()?;
        if name == "procs_running" {
            runnable = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            continue;
        }
        let Some(cpu) = name
            .strip_prefix("cpu")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        if !cpus.contains(&cpu) {
            continue;
        }
        // user nice system idle iowait irq softirq steal guest guest_nice
        let v: Vec<u64> = fields.filter_map(|x| x.parse().ok()).collect();
        if v.len() < 8 {
            continue;
        }
        busy += v[0] + v[1] + v[2];
        steal += v[7];
        seen = true;
    }
    seen.then_some((busy, steal, runnable))
}

/// utime + stime + cutime + cstime from the text of `/proc/self/stat`.
fn parse_own(text: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) is f[11], stime f[12], cutime f[13],
    // cstime f[14].
    let tick = |i: usize| f.get(i)?.parse::<i64>().ok().map(|v| v.max(0) as u64);
    Some(tick(11)? + tick(12)? + tick(13)? + tick(14)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const STAT: &str = "cpu  10 0 10 1000 0 0 0 0 0 0\n\
                        cpu0 100 2 30 500 1 7 9 4 0 0\n\
                        cpu1 50 0 20 500 0 0 0 1 0 0\n\
                        cpu2 999 0 999 0 0 0 0 999 0 0\n\
                        intr 1 2 3\n\
                        procs_running 3\n";

    #[test]
    fn proc_stat_counts_only_the_allowed_cpus() {
        assert_eq!(parse_stat(STAT, &[0, 1]), Some((202, 5, 3)));
        assert_eq!(parse_stat(STAT, &[7]), None);
    }

    #[test]
    fn own_time_survives_a_name_with_spaces_and_parentheses() {
        let text = "1234 (my (odd) name) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17";
        // utime = 11, stime = 12, cutime = 13, cstime = 14 (fields 14..=17).
        assert_eq!(parse_own(text), Some(11 + 12 + 13 + 14));
        assert_eq!(parse_own("garbage"), None);
    }

    #[test]
    fn a_competing_cpu_disturbs_and_rounding_does_not() {
        let t0 = Instant::now();
        let at = |ticks: u64, own: u64, steal: u64| Reading {
            at: t0 + Duration::from_millis(ticks * 10),
            busy: ticks,
            steal,
            own,
            runnable: 1,
        };
        let start = Reading {
            at: t0,
            busy: 0,
            steal: 0,
            own: 0,
            runnable: 1,
        };
        // Half a second at 100 ticks/s: 50 ticks of wall time. We used 50 ticks on one CPU.
        let quiet = Load::between(&start, &at(52, 50, 0), 100.0);
        assert_eq!(quiet.others_cpus, 0.0);
        assert!(!quiet.disturbs(2));
        // Another process kept the second CPU busy: 100 busy ticks, 50 of them ours.
        let mut b = at(50, 50, 0);
        b.busy = 100;
        let hog = Load::between(&start, &b, 100.0);
        assert!((hog.others_cpus - 0.96).abs() < 1e-9, "{hog:?}");
        assert!(hog.disturbs(2) && hog.disturbs(64));
        // Steal counts too.
        let stolen = Load::between(&start, &at(50, 50, 20), 100.0);
        assert!(stolen.disturbs(2), "{stolen:?}");
        assert!(stolen.describe().contains("stolen"));
    }

    #[test]
    fn proc_readings_exist_and_count_our_own_work() {
        let mut source = ProcLoad::new(&crate::sys::allowed_cpus(), true);
        let a = source
            .read()
            .expect("/proc/stat and /proc/self/stat are readable");
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let b = source.read().unwrap();
        assert!(b.own >= a.own && b.busy >= a.busy);
        assert!(
            b.own > a.own,
            "200 ms of spinning took no CPU time: {a:?} {b:?}"
        );
    }
}
