//! The `/proc` source: per-CPU interrupt counts from `/proc/interrupts` and idle time from
//! `/proc/stat`, polled by the background thread, and the CPU lists of
//! `/sys/devices/system/cpu/{possible,online}`.
//!
//! Parsing works on the raw bytes in reused buffers: one `pread` loop per file per poll, no
//! allocation per line (the buffers and per-CPU vectors only grow).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{Source, SourceError, SourceErrorKind};

/// Rows of `/proc/interrupts` that are counted, besides the numbered device interrupts. Each
/// counts interrupts (or exceptions) *taken by the CPU of its column*, incremented in the
/// handler, which returns with `iret`. Left out on purpose: `ERR` and `MIS` (one global
/// column), `RTR` (APIC ICR read retries, counted by the CPU *sending* an IPI, possibly in a
/// system call), `MCP` (machine-check polls, run from a timer that may fire in softirq
/// context inside a system call), and any row this list does not know (a future kernel's
/// counter that is not an interrupt would otherwise fake a barrier).
const COUNTED_ROWS: &[&[u8]] = &[
    b"NMI", b"LOC", b"SPU", b"PMI", b"IWI", b"RES", b"CAL", b"TLB", b"TRM", b"THR", b"DFR", b"MCE",
    b"HYP", b"HRE", b"HVS", b"PIN", b"NPI", b"PIW",
];

/// Why a `/proc` text did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ParseError(pub(crate) &'static str);

/// Parse an unsigned decimal number (all of `s`).
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((b - b'0') as u64)?;
    }
    Some(v)
}

/// Whitespace-separated tokens of a line.
fn tokens(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|b| *b == b' ' || *b == b'\t')
        .filter(|t| !t.is_empty())
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r'] = s {
        s = rest;
    }
    s
}

/// Make `v` at least `n` long.
fn fit<T: Clone>(v: &mut Vec<T>, n: usize, fill: T) {
    if v.len() < n {
        v.resize(n, fill);
    }
}

/// Parse the header line of `/proc/interrupts` (`CPU0 CPU1 …`: the CPUs online when the file
/// was generated) into `cols` (column → CPU number).
pub(crate) fn parse_interrupts_header(
    header: &[u8],
    cols: &mut Vec<usize>,
) -> Result<(), ParseError> {
    cols.clear();
    for t in tokens(header) {
        let id = t
            .strip_prefix(b"CPU")
            .and_then(number)
            .ok_or(ParseError("unexpected /proc/interrupts header"))?;
        cols.push(id as usize);
    }
    if cols.is_empty() {
        return Err(ParseError("no CPU in the /proc/interrupts header"));
    }
    Ok(())
}

/// The CPUs of `0..n` that count as offline for the eBPF source's mask rule: missing from
/// the online list *and* from the `/proc/interrupts` header (`listed`), both read after the
/// same clock read. The online list alone is not trusted: LXCFS can virtualise it (a
/// container may see `0-1` on a 16-CPU host while its threads run on CPUs 2–15); it does not
/// virtualise `/proc/interrupts`, whose header the kernel prints from its online mask.
/// Without a header (`None`: unreadable or unparsable) no CPU counts as offline.
pub(crate) fn offline_cpus(n: usize, online: &[usize], listed: Option<&[usize]>) -> Vec<usize> {
    let Some(listed) = listed else {
        return Vec::new();
    };
    (0..n)
        .filter(|c| !online.contains(c) && !listed.contains(c))
        .collect()
}

/// Reads only the header line of `/proc/interrupts` (the file stays open; the buffers are
/// reused), for the eBPF source's offline rule.
pub(crate) struct InterruptsHeader {
    file: Option<File>,
    buf: Vec<u8>,
    cols: Vec<usize>,
}

impl InterruptsHeader {
    /// Nothing is opened yet: the first [`read`](Self::read) opens the file (and each read
    /// retries while it cannot).
    pub(crate) fn new() -> InterruptsHeader {
        InterruptsHeader {
            file: None,
            buf: Vec::new(),
            cols: Vec::new(),
        }
    }

    /// The CPUs in the header, read now; `None` if the file is unreadable or unparsable.
    pub(crate) fn read(&mut self) -> Option<&[usize]> {
        if self.file.is_none() {
            self.file = File::open("/proc/interrupts").ok();
        }
        let f = self.file.as_ref()?;
        read_first_line(f, &mut self.buf).ok()?;
        let line = self.buf.split(|b| *b == b'\n').next()?;
        parse_interrupts_header(line, &mut self.cols).ok()?;
        Some(&self.cols)
    }
}

/// Read a file from offset 0 into `buf` (reused) until it holds a whole first line (or the
/// file ends), in 4 KiB steps.
fn read_first_line(f: &File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    const STEP: usize = 4096;
    buf.clear();
    loop {
        let len = buf.len();
        buf.resize(len + STEP, 0);
        match f.read_at(&mut buf[len..], len as u64) {
            Ok(n) => {
                buf.truncate(len + n);
                if n == 0 || buf[len..].contains(&b'\n') {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// Parse `/proc/interrupts`: for every CPU in the header (`CPU0 CPU1 …`, the CPUs online
/// when the file was generated), the sum of its column over the counted rows. `cols` is
/// scratch (column → CPU number). On return `present[c]` says whether CPU `c` was in the
/// header, and `sums[c]` is its total (0 when absent); both are grown as needed.
pub(crate) fn parse_interrupts(
    text: &[u8],
    cols: &mut Vec<usize>,
    sums: &mut Vec<u64>,
    present: &mut Vec<bool>,
) -> Result<(), ParseError> {
    let mut lines = text.split(|b| *b == b'\n');
    let header = lines.next().ok_or(ParseError("empty /proc/interrupts"))?;
    parse_interrupts_header(header, cols)?;
    let n = cols.iter().max().map_or(0, |m| m + 1);
    fit(sums, n, 0);
    fit(present, n, false);
    sums.iter_mut().for_each(|s| *s = 0);
    present.iter_mut().for_each(|p| *p = false);
    for &c in cols.iter() {
        present[c] = true;
    }
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let label = trim(&line[..colon]);
        let counted = (!label.is_empty() && label.iter().all(u8::is_ascii_digit))
            || COUNTED_ROWS.contains(&label);
        if !counted {
            continue;
        }
        // The first `cols.len()` tokens must all be numbers; otherwise the row has fewer
        // per-CPU columns than the header (a global counter) and is skipped whole.
        let numeric = tokens(&line[colon + 1..])
            .take(cols.len())
            .filter(|t| number(t).is_some())
            .count();
        if numeric < cols.len() {
            continue;
        }
        for (k, v) in tokens(&line[colon + 1..]).take(cols.len()).enumerate() {
            let v = number(v).unwrap_or(0);
            let s = &mut sums[cols[k]];
            *s = s.wrapping_add(v);
        }
    }
    Ok(())
}

/// Parse the `cpuN` lines of `/proc/stat`: `idle[c]` = idle + iowait of CPU `c` (fields 4
/// and 5, in `USER_HZ` ticks), `present[c]` = the line exists (CPU online when generated).
pub(crate) fn parse_stat(
    text: &[u8],
    idle: &mut Vec<u64>,
    present: &mut Vec<bool>,
) -> Result<(), ParseError> {
    present.iter_mut().for_each(|p| *p = false);
    let mut any = false;
    for line in text.split(|b| *b == b'\n') {
        let Some(rest) = line.strip_prefix(b"cpu") else {
            continue;
        };
        if !rest.first().is_some_and(u8::is_ascii_digit) {
            continue; // the aggregate "cpu " line
        }
        let mut t = tokens(rest);
        let id = t
            .next()
            .and_then(number)
            .ok_or(ParseError("bad cpuN line in /proc/stat"))? as usize;
        let mut fields = [0u64; 5];
        let mut got = 0;
        for (k, f) in t.take(5).enumerate() {
            fields[k] = number(f).ok_or(ParseError("non-numeric field in /proc/stat"))?;
            got = k + 1;
        }
        if got < 4 {
            return Err(ParseError("short cpuN line in /proc/stat"));
        }
        fit(idle, id + 1, 0);
        fit(present, id + 1, false);
        idle[id] = fields[3].wrapping_add(fields[4]);
        present[id] = true;
        any = true;
    }
    if any {
        Ok(())
    } else {
        Err(ParseError("no cpuN line in /proc/stat"))
    }
}

/// Parse a CPU list such as `0-3,8,10-11` (trailing newline allowed) into CPU numbers.
pub(crate) fn parse_cpu_list(text: &[u8]) -> Option<Vec<usize>> {
    let text = trim(text.strip_suffix(b"\n").unwrap_or(text));
    let mut out = Vec::new();
    if text.is_empty() {
        return Some(out);
    }
    for part in text.split(|b| *b == b',') {
        let part = trim(part);
        match part.iter().position(|b| *b == b'-') {
            Some(d) => {
                let a = number(&part[..d])? as usize;
                let b = number(&part[d + 1..])? as usize;
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(number(part)? as usize),
        }
    }
    Some(out)
}

/// Read a whole file from offset 0 into `buf` (reused). `/proc` and `/sys` files are
/// regenerated when read from offset 0, so the file stays open between polls.
pub(crate) fn read_all(f: &File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        let len = buf.len();
        if buf.capacity() == len {
            buf.reserve(len);
        }
        let cap = buf.capacity();
        buf.resize(cap, 0);
        match f.read_at(&mut buf[len..], len as u64) {
            Ok(0) => {
                buf.truncate(len);
                return Ok(());
            }
            Ok(n) => buf.truncate(len + n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// Read a CPU list file such as `/sys/devices/system/cpu/online`.
pub(crate) fn read_cpu_list(path: &str) -> Result<Vec<usize>, String> {
    let text = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    parse_cpu_list(&text).ok_or_else(|| format!("{path}: unparsable CPU list"))
}

/// One parsed snapshot of both files.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Per CPU: total counted interrupts (valid where `in_interrupts`).
    pub(crate) irqs: Vec<u64>,
    /// Per CPU: in the `/proc/interrupts` header (online when read).
    pub(crate) in_interrupts: Vec<bool>,
    /// Per CPU: idle + iowait ticks (valid where `in_stat`).
    pub(crate) idle: Vec<u64>,
    /// Per CPU: has a `cpuN` line in `/proc/stat`.
    pub(crate) in_stat: Vec<bool>,
}

/// The open files and reused buffers of the poller.
pub(crate) struct Reader {
    interrupts: File,
    stat: File,
    /// `/sys/devices/system/cpu/online`, read before and after `/proc/interrupts`.
    online: Option<File>,
    buf: Vec<u8>,
    online_before: Vec<u8>,
    online_after: Vec<u8>,
    cols: Vec<usize>,
    pub(crate) snap: Snapshot,
}

fn proc_err(why: String) -> SourceError {
    SourceError {
        source: Source::Proc,
        kind: SourceErrorKind::Unreadable,
        errno: None,
        why,
    }
}

impl Reader {
    /// Open both files and take one snapshot to check that they parse.
    pub(crate) fn open() -> Result<Reader, SourceError> {
        let open = |p: &str| {
            File::open(p).map_err(|e| SourceError {
                source: Source::Proc,
                kind: SourceErrorKind::Unreadable,
                errno: e.raw_os_error(),
                why: format!("{p}: {e}"),
            })
        };
        let mut r = Reader {
            interrupts: open("/proc/interrupts")?,
            stat: open("/proc/stat")?,
            online: File::open("/sys/devices/system/cpu/online").ok(),
            online_before: Vec::with_capacity(64),
            online_after: Vec::with_capacity(64),
            buf: Vec::with_capacity(16 << 10),
            cols: Vec::new(),
            snap: Snapshot::default(),
        };
        r.read()?;
        Ok(r)
    }

    /// Read and parse both files into `self.snap`.
    ///
    /// `/proc/interrupts` prints its header and each row with separate walks over the online
    /// CPUs, so a CPU plugged in or out in the middle of a read would shift a row's columns
    /// under the header's. The online list is therefore read before and after, and the
    /// snapshot is refused (an error; the poller just skips it) unless both equal the
    /// header's CPUs. Without a readable online list the check is skipped.
    pub(crate) fn read(&mut self) -> Result<(), SourceError> {
        if let Some(f) = &self.online {
            read_all(f, &mut self.online_before)
                .map_err(|e| proc_err(format!("online CPU list: {e}")))?;
        }
        read_all(&self.interrupts, &mut self.buf)
            .map_err(|e| proc_err(format!("/proc/interrupts: {e}")))?;
        if let Some(f) = &self.online {
            read_all(f, &mut self.online_after)
                .map_err(|e| proc_err(format!("online CPU list: {e}")))?;
        }
        let s = &mut self.snap;
        parse_interrupts(&self.buf, &mut self.cols, &mut s.irqs, &mut s.in_interrupts)
            .map_err(|e| proc_err(format!("/proc/interrupts: {}", e.0)))?;
        if self.online.is_some() {
            let stable = self.online_before == self.online_after
                && parse_cpu_list(&self.online_before).is_some_and(|l| l == self.cols);
            if !stable {
                return Err(proc_err("CPU hot-plug during the read".into()));
            }
        }
        read_all(&self.stat, &mut self.buf).map_err(|e| proc_err(format!("/proc/stat: {e}")))?;
        parse_stat(&self.buf, &mut s.idle, &mut s.in_stat)
            .map_err(|e| proc_err(format!("/proc/stat: {}", e.0)))
    }
}

/// Turns successive snapshots into per-CPU "took a barrier after" times.
///
/// For snapshot `k`, whose reading began at `s_k` (the clock was read *before* the files):
/// a CPU whose interrupt total or idle ticks grew since snapshot `k-1` took an interrupt, or
/// was idle, after `s_{k-1}`; a CPU missing from `/proc/interrupts`' header was offline at a
/// time after `s_k`. `after[c]` is the largest such time, and the horizon is its minimum
/// over CPUs `0..n` (the possible CPUs).
#[derive(Default)]
pub(crate) struct Tracker {
    prev_irqs: Vec<Option<u64>>,
    prev_idle: Vec<Option<u64>>,
    prev_start: u64,
    after: Vec<u64>,
}

impl Tracker {
    /// A tracker for CPUs `0..n` (more are added if a snapshot shows them).
    pub(crate) fn new(n: usize) -> Tracker {
        Tracker {
            prev_irqs: vec![None; n],
            prev_idle: vec![None; n],
            prev_start: 0,
            after: vec![0; n],
        }
    }

    /// Fold in a snapshot whose reading began at `start`; returns the horizon.
    pub(crate) fn update(&mut self, start: u64, s: &Snapshot) -> u64 {
        let n = self.after.len().max(s.in_interrupts.len());
        fit(&mut self.after, n, 0);
        fit(&mut self.prev_irqs, n, None);
        fit(&mut self.prev_idle, n, None);
        for c in 0..n {
            let online = s.in_interrupts.get(c).copied().unwrap_or(false);
            if !online {
                self.after[c] = self.after[c].max(start);
                self.prev_irqs[c] = None;
                self.prev_idle[c] = None;
                continue;
            }
            let irqs = s.irqs[c];
            let idle = if s.in_stat.get(c).copied().unwrap_or(false) {
                Some(s.idle[c])
            } else {
                None
            };
            let grew = self.prev_irqs[c].is_some_and(|p| irqs > p)
                || matches!((self.prev_idle[c], idle), (Some(p), Some(i)) if i > p);
            if grew {
                self.after[c] = self.after[c].max(self.prev_start);
            }
            self.prev_irqs[c] = Some(irqs);
            self.prev_idle[c] = idle;
        }
        self.prev_start = start;
        self.horizon()
    }

    /// The minimum over CPUs of `after`.
    pub(crate) fn horizon(&self) -> u64 {
        self.after.iter().copied().min().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on the development VM (2 vCPUs, Linux 6.18), trimmed, plus odd rows.
    const INTERRUPTS: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 26:          0         15  IO-APIC   4-edge      ttyS0
 36:          0     200976 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
 41:       5008          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx
NMI:          0          0   Non-maskable interrupts
LOC:    2518384    2417023   Local timer interrupts
SPU:          0          0   Spurious interrupts
PMI:          0          0   Performance monitoring interrupts
IWI:          1          3   IRQ work interrupts
RTR:          7          9   APIC ICR read retries
RES:     968496     902072   Rescheduling interrupts
CAL:    2571985    2821888   Function call interrupts
TLB:     671165     642289   TLB shootdowns
TRM:          0          0   Thermal event interrupts
HYP:         92         21   Hypervisor callback interrupts
MCP:        100        100   Machine check polls
ERR:          5
MIS:          3
PIN:          0          0   Posted-interrupt notification event
NPI:          0          0   Nested posted-interrupt event
PIW:          0          0   Posted-interrupt wakeup event
XYZ:         11         11   A counter from the future
";

    const STAT: &str = "cpu  727752 4251 206135 731059 2881 0 643 421 0 0
cpu0 430185 2110 112082 292118 584 0 91 203 0 0
cpu1 297566 2141 94053 438941 2297 0 551 217 0 0
intr 12443248 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 15
ctxt 328309544
btime 1763700000
processes 123456
procs_running 2
procs_blocked 0
softirq 1 2 3 4 5 6 7 8 9 10 11
";

    #[test]
    fn interrupts_sum_counted_rows_only() {
        let (mut cols, mut sums, mut present) = (Vec::new(), Vec::new(), Vec::new());
        parse_interrupts(INTERRUPTS.as_bytes(), &mut cols, &mut sums, &mut present).unwrap();
        assert_eq!(cols, vec![0, 1]);
        assert_eq!(present, vec![true, true]);
        let cpu0 = 1 + 5008 + 2518384 + 1 + 968496 + 2571985 + 671165 + 92;
        let cpu1 = 15 + 200976 + 2417023 + 3 + 902072 + 2821888 + 642289 + 21;
        assert_eq!(sums, vec![cpu0, cpu1]); // no RTR, MCP, ERR, MIS, XYZ
    }

    #[test]
    fn interrupts_with_an_offline_cpu_and_short_rows() {
        let text = "       CPU0       CPU2\n  0:   10   20  IO-APIC 2-edge timer\n\
                    LOC:  5  7  Local timer interrupts\n  9:  3\nERR: 1\n";
        let (mut cols, mut sums, mut present) = (Vec::new(), Vec::new(), vec![true; 5]);
        parse_interrupts(text.as_bytes(), &mut cols, &mut sums, &mut present).unwrap();
        assert_eq!(cols, vec![0, 2]);
        assert_eq!(&present[..3], &[true, false, true]);
        assert!(!present[3] && !present[4]);
        assert_eq!(&sums[..3], &[15, 0, 27]); // "9: 3" has one column for two CPUs: skipped
    }

    #[test]
    fn interrupts_header_alone() {
        let mut cols = Vec::new();
        parse_interrupts_header(INTERRUPTS.lines().next().unwrap().as_bytes(), &mut cols).unwrap();
        assert_eq!(cols, vec![0, 1]);
        parse_interrupts_header(b"  CPU0  CPU3 CPU12 ", &mut cols).unwrap();
        assert_eq!(cols, vec![0, 3, 12]);
        assert!(parse_interrupts_header(b"   ", &mut cols).is_err());
        assert!(parse_interrupts_header(b" 24: 1 0", &mut cols).is_err());
        // The live file, if readable here, has a header that parses.
        let mut h = InterruptsHeader::new();
        if let Some(listed) = h.read() {
            let listed = listed.to_vec();
            if let Ok(online) = read_cpu_list("/sys/devices/system/cpu/online") {
                println!("online {online:?}, /proc/interrupts header {listed:?}");
            }
            assert!(!listed.is_empty());
        }
    }

    #[test]
    fn offline_needs_both_the_mask_and_the_interrupts_header() {
        // A real unplug: CPUs 2 and 3 missing from both.
        assert_eq!(offline_cpus(4, &[0, 1], Some(&[0, 1])), vec![2, 3]);
        // LXCFS: the container sees `0-1` on a 16-CPU host; the kernel lists all 16.
        let all: Vec<usize> = (0..16).collect();
        assert!(offline_cpus(16, &[0, 1], Some(&all)).is_empty());
        // Missing from the header only (a hot-plug between the reads): not offline either.
        assert!(offline_cpus(4, &all[..4], Some(&[0, 1])).is_empty());
        // Mixed: only the CPU absent from both counts.
        assert_eq!(offline_cpus(4, &[0, 1], Some(&[0, 1, 2])), vec![3]);
        // No readable header: the rule does not apply at all.
        assert!(offline_cpus(4, &[0, 1], None).is_empty());
    }

    #[test]
    fn interrupts_reject_garbage() {
        let (mut c, mut s, mut p) = (Vec::new(), Vec::new(), Vec::new());
        assert!(parse_interrupts(b"", &mut c, &mut s, &mut p).is_err());
        assert!(parse_interrupts(b"hello world\n", &mut c, &mut s, &mut p).is_err());
        assert!(parse_interrupts(b"   \nLOC: 1\n", &mut c, &mut s, &mut p).is_err());
        // Overflowing numbers make a row non-numeric, not a panic.
        let big = "  CPU0\nLOC: 99999999999999999999999\nRES: 4\n";
        parse_interrupts(big.as_bytes(), &mut c, &mut s, &mut p).unwrap();
        assert_eq!(s, vec![4]);
    }

    #[test]
    fn stat_idle_plus_iowait() {
        let (mut idle, mut present) = (Vec::new(), Vec::new());
        parse_stat(STAT.as_bytes(), &mut idle, &mut present).unwrap();
        assert_eq!(idle, vec![292118 + 584, 438941 + 2297]);
        assert_eq!(present, vec![true, true]);
        // An old kernel without iowait, a gap in the CPU numbers.
        let old = "cpu  1 2 3 4\ncpu0 1 2 3 4\ncpu3 5 6 7 8\n";
        parse_stat(old.as_bytes(), &mut idle, &mut present).unwrap();
        assert_eq!(&idle[..1], &[4]);
        assert_eq!(idle[3], 8);
        assert_eq!(present, vec![true, false, false, true]);
        assert!(parse_stat(b"cpu  1 2 3 4\n", &mut idle, &mut present).is_err());
        assert!(parse_stat(b"cpu0 1 x 3 4 5\n", &mut idle, &mut present).is_err());
        assert!(parse_stat(b"cpu0 1 2\n", &mut idle, &mut present).is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list(b"0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list(b"0,2-4,7\n"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list(b"\n"), Some(vec![]));
        assert_eq!(parse_cpu_list(b"3-1"), None);
        assert_eq!(parse_cpu_list(b"a"), None);
    }

    fn snap(irqs: &[Option<u64>], idle: &[u64]) -> Snapshot {
        Snapshot {
            irqs: irqs.iter().map(|v| v.unwrap_or(0)).collect(),
            in_interrupts: irqs.iter().map(Option::is_some).collect(),
            idle: idle.to_vec(),
            in_stat: irqs.iter().map(Option::is_some).collect(),
        }
    }

    #[test]
    fn tracker_needs_growth_after_a_snapshot() {
        let mut t = Tracker::new(3);
        // CPU 2 is offline throughout.
        assert_eq!(
            t.update(100, &snap(&[Some(5), Some(7), None], &[1, 1, 0])),
            0
        );
        // CPU 0 took an interrupt after 100, CPU 1 did nothing.
        assert_eq!(
            t.update(200, &snap(&[Some(6), Some(7), None], &[1, 1, 0])),
            0
        );
        // CPU 1 was idle for a tick after 200: everyone is past 100 now (CPU 0's evidence
        // is still "after 100", CPU 2 offline at 300).
        assert_eq!(
            t.update(300, &snap(&[Some(6), Some(7), None], &[1, 2, 0])),
            100
        );
        // Both grow: the horizon moves to the previous start.
        assert_eq!(
            t.update(400, &snap(&[Some(9), Some(9), None], &[1, 2, 0])),
            300
        );
        // CPU 2 comes online: no evidence beyond its offline time (400) yet.
        assert_eq!(
            t.update(500, &snap(&[Some(10), Some(10), Some(1)], &[1, 2, 0])),
            400
        );
        assert_eq!(
            t.update(600, &snap(&[Some(11), Some(11), Some(1)], &[1, 2, 0])),
            400
        );
        assert_eq!(
            t.update(700, &snap(&[Some(12), Some(12), Some(2)], &[1, 2, 0])),
            600
        );
        // A counter that goes down (an IRQ freed) is not growth.
        assert_eq!(
            t.update(800, &snap(&[Some(1), Some(13), Some(3)], &[1, 2, 0])),
            600
        );
    }
}
