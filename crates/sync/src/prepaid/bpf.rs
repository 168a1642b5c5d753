//! The eBPF source: a hand-assembled program on raw tracepoints that stamps each CPU's entry
//! of an mmapped array map, loaded with the raw `bpf(2)` system call.
//!
//! Nothing here needs clang, libbpf or BTF: the two programs are a few dozen instructions,
//! assembled by the small encoder below, and the map is a plain `BPF_MAP_TYPE_ARRAY` created
//! with `BPF_F_MMAPABLE`, so user space reads it with ordinary loads and no system call.
//!
//! # The map
//!
//! One 64-byte entry per *possible* CPU (index = CPU number), each its own cache line:
//!
//! | offset | field | written by |
//! |---:|---|---|
//! | 0 | `last_event_ns`: `bpf_ktime_get_ns()` at the CPU's latest barrier event | every program, with an atomic `xchg` |
//! | 8 | `idle`: 1 while the CPU is in the idle loop, 0 otherwise | the `cpu_idle` program (sets and clears), the event program (clears) |
//!
//! Only the CPU an entry belongs to writes it (programs key the map by
//! `bpf_get_smp_processor_id()`), so each entry has a single writer.
//!
//! # The programs (`BPF_PROG_TYPE_RAW_TRACEPOINT`)
//!
//! Event program, attached to `sched_switch`, `local_timer_entry`, `hrtimer_expire_entry`,
//! `irq_handler_entry`, `reschedule_entry`, `call_function_entry`,
//! `call_function_single_entry` (those that exist):
//!
//! ```text
//!     call bpf_get_smp_processor_id        ; r0 = cpu
//!     *(u32 *)(r10 - 4) = w0               ; key on the stack
//!     r2 = r10; r2 += -4
//!     r1 = map (ld_imm64, BPF_PSEUDO_MAP_FD)
//!     call bpf_map_lookup_elem             ; r0 = &entry or NULL
//!     if r0 == 0 goto out
//!     r7 = r0
//!     call bpf_ktime_get_ns                ; r0 = now
//!     xchg *(u64 *)(r7 + 0), r0            ; last_event_ns = now   (locked instruction)
//!     r1 = 0
//!     xchg *(u64 *)(r7 + 8), r1            ; idle = 0
//! out: r0 = 0; exit
//! ```
//!
//! Idle program, attached to `cpu_idle`, whose `args[0]` is the idle state, `PWR_EVENT_EXIT`
//! = `(u32)-1` when the CPU leaves idle (the raw tracepoint passes the `unsigned int`
//! zero-extended, so the program compares the low 32 bits with a `JMP32` jump):
//!
//! ```text
//!     r6 = *(u64 *)(r1 + 0)                ; state (r6 survives helper calls)
//!     (lookup as above) ; r7 = &entry
//!     call bpf_ktime_get_ns
//!     xchg *(u64 *)(r7 + 0), r0            ; last_event_ns = now
//!     r1 = 1
//!     if w6 != -1 goto +1                  ; entering idle: keep 1
//!     r1 = 0                               ; leaving idle
//!     xchg *(u64 *)(r7 + 8), r1            ; idle = r1
//! out: r0 = 0; exit
//! ```
//!
//! The event program clears `idle` too, so a missed `cpu_idle` exit (a program run skipped by
//! the kernel's recursion guard) cannot leave a stale flag behind a running CPU: every return
//! to a user thread passes `sched_switch`. Both stores of an exit are exchanges, stamp first,
//! so a reader that sees `idle == 0` then reads a stamp at least as new as the exit.
//!
//! The timestamp is stored with `BPF_ATOMIC | BPF_XCHG` (Linux ≥ 5.12), which the x86 JIT (and
//! the interpreter) emit as `xchg`, a locked instruction. That is what makes the stamp a
//! barrier *by itself*, whatever the event: see the parent module for the argument.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{SourceError, SourceErrorKind};
use crate::prepaid::Source;

// ---------------------------------------------------------------------------------------------
// Instruction encoding (include/uapi/linux/bpf.h, bpf_common.h).
//
// An instruction is 8 bytes: `code: u8`, `dst_reg: 4 bits` (low nibble) and `src_reg: 4 bits`
// (high nibble) in one byte, `off: i16`, `imm: i32`, little-endian. `ld_imm64` takes two slots,
// the second carrying the upper 32 bits of the constant in its `imm`.
// ---------------------------------------------------------------------------------------------

/// One eBPF instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (dst & 0xf) | ((src & 0xf) << 4),
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads.
    pub(crate) fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

// Instruction classes.
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_STX: u8 = 0x03;
const BPF_JMP: u8 = 0x05;
const BPF_JMP32: u8 = 0x06;
const BPF_ALU64: u8 = 0x07;
// Sizes.
const BPF_W: u8 = 0x00;
const BPF_DW: u8 = 0x18;
// Modes.
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_ATOMIC: u8 = 0xc0;
// ALU / jump operations and operand source.
const BPF_ADD: u8 = 0x00;
const BPF_MOV: u8 = 0xb0;
const BPF_JEQ: u8 = 0x10;
const BPF_JNE: u8 = 0x50;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;
const BPF_K: u8 = 0x00;
const BPF_X: u8 = 0x08;
/// Atomic operation in `imm`: exchange (`BPF_XCHG = 0xe0 | BPF_FETCH`).
const BPF_XCHG: i32 = 0xe0 | 0x01;
/// `src_reg` of `ld_imm64` meaning "imm is a map file descriptor".
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// Helper function numbers (`enum bpf_func_id`).
pub(crate) mod helper {
    /// `void *bpf_map_lookup_elem(map, key)`.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `u64 bpf_ktime_get_ns(void)`: `CLOCK_MONOTONIC` (the NMI-safe fast accessor).
    pub const KTIME_GET_NS: i32 = 5;
    /// `u32 bpf_get_smp_processor_id(void)`.
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
}

/// Registers.
pub(crate) const R0: u8 = 0;
pub(crate) const R1: u8 = 1;
pub(crate) const R2: u8 = 2;
pub(crate) const R6: u8 = 6;
pub(crate) const R7: u8 = 7;
pub(crate) const R10: u8 = 10;

/// `dst = imm` (64-bit, sign-extended).
pub(crate) const fn mov64_imm(dst: u8, imm: i32) -> Insn {
    Insn::new(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)
}
/// `dst = src` (64-bit).
pub(crate) const fn mov64_reg(dst: u8, src: u8) -> Insn {
    Insn::new(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0)
}
/// `dst += imm` (64-bit).
pub(crate) const fn add64_imm(dst: u8, imm: i32) -> Insn {
    Insn::new(BPF_ALU64 | BPF_ADD | BPF_K, dst, 0, 0, imm)
}
/// `dst = *(u64 *)(src + off)`.
pub(crate) const fn ldx_dw(dst: u8, src: u8, off: i16) -> Insn {
    Insn::new(BPF_LDX | BPF_MEM | BPF_DW, dst, src, off, 0)
}
/// `*(u32 *)(dst + off) = src`.
pub(crate) const fn stx_w(dst: u8, off: i16, src: u8) -> Insn {
    Insn::new(BPF_STX | BPF_MEM | BPF_W, dst, src, off, 0)
}
/// `src = xchg(*(u64 *)(dst + off), src)`: a locked exchange on x86.
pub(crate) const fn xchg_dw(dst: u8, off: i16, src: u8) -> Insn {
    Insn::new(BPF_STX | BPF_ATOMIC | BPF_DW, dst, src, off, BPF_XCHG)
}
/// `dst = map` (two slots): `ld_imm64` with `src_reg = BPF_PSEUDO_MAP_FD`.
pub(crate) const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
    [
        Insn::new(BPF_LD | BPF_DW | BPF_IMM, dst, BPF_PSEUDO_MAP_FD, 0, fd),
        Insn::new(0, 0, 0, 0, 0),
    ]
}
/// `if dst == imm goto +off` (64-bit compare).
pub(crate) const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Insn {
    Insn::new(BPF_JMP | BPF_JEQ | BPF_K, dst, 0, off, imm)
}
/// `if (u32)dst != (u32)imm goto +off` (32-bit compare; `imm` is used as a 32-bit value).
pub(crate) const fn jne32_imm(dst: u8, imm: i32, off: i16) -> Insn {
    Insn::new(BPF_JMP32 | BPF_JNE | BPF_K, dst, 0, off, imm)
}
/// `call helper`.
pub(crate) const fn call(helper: i32) -> Insn {
    Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, helper)
}
/// `exit` (returns `r0`).
pub(crate) const fn exit() -> Insn {
    Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
}

/// Byte offsets inside a map entry.
pub(crate) const LAST_EVENT_OFF: i16 = 0;
/// Byte offset of the idle flag.
pub(crate) const IDLE_OFF: i16 = 8;
/// Bytes per map entry (one cache line).
pub(crate) const ENTRY_SIZE: usize = 64;
/// x86-64 base page size (the map's value area is mmapped in whole pages).
const PAGE_SIZE: usize = 4096;

/// `r0 = &map[cpu]`, or jump to the end: the common prologue (8 slots). Returns the index of
/// the null-check jump, which the caller points at `out:` with [`patch_to_out`].
fn lookup_own_entry(map_fd: i32, p: &mut Vec<Insn>) -> usize {
    p.push(call(helper::GET_SMP_PROCESSOR_ID));
    p.push(stx_w(R10, -4, R0));
    p.push(mov64_reg(R2, R10));
    p.push(add64_imm(R2, -4));
    p.extend_from_slice(&ld_map_fd(R1, map_fd));
    p.push(call(helper::MAP_LOOKUP_ELEM));
    p.push(jeq_imm(R0, 0, 0)); // patched by `patch_to_out`
    p.len() - 1
}

/// Point the jump at `at` to the program's current end (the `out:` label).
fn patch_to_out(p: &mut [Insn], at: usize) {
    let off = (p.len() - at - 1) as i16;
    p[at].off = off;
}

/// The event program (see the module documentation).
pub(crate) fn event_program(map_fd: i32) -> Vec<Insn> {
    let mut p = Vec::with_capacity(16);
    let j = lookup_own_entry(map_fd, &mut p);
    p.push(mov64_reg(R7, R0));
    p.push(call(helper::KTIME_GET_NS));
    p.push(xchg_dw(R7, LAST_EVENT_OFF, R0)); // last_event_ns = now
    p.push(mov64_imm(R1, 0));
    p.push(xchg_dw(R7, IDLE_OFF, R1)); // idle = 0
    patch_to_out(&mut p, j);
    p.push(mov64_imm(R0, 0));
    p.push(exit());
    p
}

/// The `cpu_idle` program (see the module documentation).
pub(crate) fn idle_program(map_fd: i32) -> Vec<Insn> {
    let mut p = Vec::with_capacity(20);
    p.push(ldx_dw(R6, R1, 0)); // r6 = args[0] = state (r6 survives helper calls)
    let j = lookup_own_entry(map_fd, &mut p);
    p.push(mov64_reg(R7, R0));
    p.push(call(helper::KTIME_GET_NS));
    p.push(xchg_dw(R7, LAST_EVENT_OFF, R0)); // last_event_ns = now
    p.push(mov64_imm(R1, 1)); // entering idle ...
    p.push(jne32_imm(R6, -1, 1)); // ... unless (u32)state == PWR_EVENT_EXIT
    p.push(mov64_imm(R1, 0));
    p.push(xchg_dw(R7, IDLE_OFF, R1)); // idle = r1
    patch_to_out(&mut p, j);
    p.push(mov64_imm(R0, 0));
    p.push(exit());
    p
}

// ---------------------------------------------------------------------------------------------
// The system call.
// ---------------------------------------------------------------------------------------------

const BPF_MAP_CREATE: u32 = 0;
const BPF_PROG_LOAD: u32 = 5;
const BPF_RAW_TRACEPOINT_OPEN: u32 = 17;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

const EPERM: i32 = 1;
const EACCES: i32 = 13;
const EINVAL: i32 = 22;
const ENOSYS: i32 = 38;

/// `bpf(cmd, attr, size)`; returns the result or `-errno`.
///
/// # Safety
/// `attr` must point to `size` readable and writable bytes laid out as `union bpf_attr` for
/// `cmd`, and every pointer inside must be valid for the kernel to follow.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn sys_bpf(cmd: u32, attr: *mut u8, size: u32) -> i64 {
    const SYS_BPF: i64 = 321;
    let ret: i64;
    // SAFETY: the x86-64 Linux system call convention: number in rax, arguments in rdi,
    // rsi, rdx; the kernel clobbers rcx and r11; the caller guarantees `attr`.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") SYS_BPF => ret,
            in("rdi") cmd as u64,
            in("rsi") attr,
            in("rdx") size as u64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
unsafe fn sys_bpf(_cmd: u32, _attr: *mut u8, _size: u32) -> i64 {
    -(ENOSYS as i64)
}

/// A zeroed `union bpf_attr` buffer (the kernel wants unused bytes zero) with typed setters.
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, off: usize, v: &[u8]) -> &mut Attr {
        self.0[off..off + v.len()].copy_from_slice(v);
        self
    }
    /// Run `cmd`; a non-negative result is a new file descriptor.
    fn call_fd(&mut self, cmd: u32) -> Result<OwnedFd, i32> {
        // SAFETY: the buffer is 128 bytes, zeroed except for the fields set by the callers,
        // whose pointers (license, instructions, log, tracepoint name) outlive this call.
        let r = unsafe { sys_bpf(cmd, self.0.as_mut_ptr(), self.0.len() as u32) };
        if r < 0 {
            return Err((-r) as i32);
        }
        // SAFETY: a successful BPF_MAP_CREATE / PROG_LOAD / RAW_TRACEPOINT_OPEN returns a
        // new file descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
    }
}

fn errno_kind(errno: i32) -> SourceErrorKind {
    match errno {
        EPERM | EACCES => SourceErrorKind::NotPermitted,
        ENOSYS => SourceErrorKind::NotSupported,
        _ => SourceErrorKind::Other,
    }
}

fn err(kind: SourceErrorKind, errno: Option<i32>, why: String) -> SourceError {
    SourceError {
        source: Source::Ebpf,
        kind,
        errno,
        why,
    }
}

fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// Create the per-CPU array map.
fn create_map(entries: u32) -> Result<OwnedFd, SourceError> {
    let mut a = Attr::new();
    a.u32(0, BPF_MAP_TYPE_ARRAY)
        .u32(4, 4) // key_size
        .u32(8, ENTRY_SIZE as u32) // value_size
        .u32(12, entries) // max_entries
        .u32(16, BPF_F_MMAPABLE) // map_flags
        .bytes(28, b"spindle_prepaid"); // map_name (15 bytes + NUL)
    a.call_fd(BPF_MAP_CREATE).map_err(|e| {
        let kind = match e {
            EINVAL => SourceErrorKind::NotSupported,
            _ => errno_kind(e),
        };
        err(
            kind,
            Some(e),
            format!(
                "BPF_MAP_CREATE (mmapable array, {entries} entries) failed: {}{}",
                errno_text(e),
                if e == EPERM {
                    " (needs root or CAP_BPF + CAP_PERFMON)"
                } else {
                    ""
                }
            ),
        )
    })
}

const LICENSE: &[u8] = b"GPL\0";

/// Load one raw-tracepoint program. On failure, load it again with the verifier log on, and
/// put the log in the error.
fn load_program(name: &[u8], insns: &[Insn]) -> Result<OwnedFd, SourceError> {
    let code: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
    let attempt = |log: Option<&mut Vec<u8>>| -> Result<OwnedFd, i32> {
        let mut a = Attr::new();
        a.u32(0, BPF_PROG_TYPE_RAW_TRACEPOINT)
            .u32(4, insns.len() as u32)
            .u64(8, code.as_ptr() as u64)
            .u64(16, LICENSE.as_ptr() as u64)
            .bytes(48, &name[..name.len().min(15)]);
        if let Some(log) = log {
            a.u32(24, 1) // log_level
                .u32(28, log.len() as u32)
                .u64(32, log.as_mut_ptr() as u64);
            a.call_fd(BPF_PROG_LOAD)
        } else {
            a.call_fd(BPF_PROG_LOAD)
        }
    };
    attempt(None).map_err(|e| {
        let mut log = vec![0u8; 1 << 16];
        let _ = attempt(Some(&mut log));
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
        let kind = match e {
            EINVAL | EACCES if !text.is_empty() => SourceErrorKind::Rejected,
            _ => errno_kind(e),
        };
        err(
            kind,
            Some(e),
            format!(
                "BPF_PROG_LOAD of {} failed: {}; verifier log: {}",
                String::from_utf8_lossy(name),
                errno_text(e),
                if text.is_empty() { "(empty)" } else { &text }
            ),
        )
    })
}

/// Attach `prog` to the raw tracepoint `name`; the returned fd keeps it attached.
fn attach(prog: &OwnedFd, name: &str) -> Result<OwnedFd, i32> {
    let mut cname = Vec::with_capacity(name.len() + 1);
    cname.extend_from_slice(name.as_bytes());
    cname.push(0);
    let mut a = Attr::new();
    a.u64(0, cname.as_ptr() as u64)
        .u32(8, prog.as_raw_fd() as u32);
    a.call_fd(BPF_RAW_TRACEPOINT_OPEN)
}

/// Tracepoints of the event program. At least `sched_switch` and one timer tracepoint must
/// attach.
const EVENT_TRACEPOINTS: &[&str] = &[
    "sched_switch",
    "local_timer_entry",
    "hrtimer_expire_entry",
    "irq_handler_entry",
    "reschedule_entry",
    "call_function_entry",
    "call_function_single_entry",
];
const TIMER_TRACEPOINTS: &[&str] = &["local_timer_entry", "hrtimer_expire_entry"];
const IDLE_TRACEPOINT: &str = "cpu_idle";

/// Everything the kernel side needs kept open, and the read-only view of the map.
pub(crate) struct Loaded {
    /// Start of the mapping: `entries` × [`ENTRY_SIZE`] bytes.
    base: *const u8,
    map_len: usize,
    entries: usize,
    /// Tracepoints that attached.
    pub(crate) attached: Vec<&'static str>,
    _links: Vec<OwnedFd>,
    _progs: Vec<OwnedFd>,
    _map: OwnedFd,
}

// SAFETY: the mapping is read-only shared memory that lives as long as `Loaded`; reads go
// through atomic loads.
unsafe impl Send for Loaded {}
// SAFETY: as above.
unsafe impl Sync for Loaded {}

impl Loaded {
    /// Number of entries (possible CPUs).
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    fn word(&self, cpu: usize, off: i16) -> &std::sync::atomic::AtomicU64 {
        assert!(cpu < self.entries);
        // SAFETY: in bounds of the live mapping, 8-byte aligned (entries are 64-byte aligned
        // from a page-aligned base); the kernel writes it with 8-byte stores, we only load.
        unsafe {
            &*(self.base.add(cpu * ENTRY_SIZE + off as usize)
                as *const std::sync::atomic::AtomicU64)
        }
    }

    /// `last_event_ns` of `cpu` (an `Acquire` load: a plain `mov` on x86, ordered before our
    /// later loads).
    #[inline]
    pub(crate) fn last_event(&self, cpu: usize) -> u64 {
        self.word(cpu, LAST_EVENT_OFF)
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether `cpu` is in the idle loop.
    #[inline]
    pub(crate) fn idle(&self, cpu: usize) -> bool {
        self.word(cpu, IDLE_OFF)
            .load(std::sync::atomic::Ordering::Acquire)
            != 0
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; nothing borrows it past `self`.
        let _ = unsafe { rustix::mm::munmap(self.base as *mut _, self.map_len) };
    }
}

const TIMENS_OFFSETS_PATH: &str = "/proc/self/timens_offsets";

/// The `CLOCK_MONOTONIC` offset `(seconds, nanoseconds)` in `/proc/self/timens_offsets`
/// (lines `<clock> <secs> <nanos>`; the clock by name, `monotonic`, or by id, `1`, as
/// kernels before the names printed it), or `None` if the text does not parse or has no
/// monotonic line.
pub(crate) fn parse_timens_monotonic(text: &str) -> Option<(i64, i64)> {
    let mut found = None;
    for line in text.lines() {
        let mut t = line.split_ascii_whitespace();
        let Some(clock) = t.next() else {
            continue; // a blank line
        };
        let secs: i64 = t.next()?.parse().ok()?;
        let nanos: i64 = t.next()?.parse().ok()?;
        if t.next().is_some() || !(0..1_000_000_000).contains(&nanos) {
            return None;
        }
        if clock == "monotonic" || clock == "1" {
            found = Some((secs, nanos));
        }
    }
    found
}

/// Refuse the source inside a time namespace that shifts `CLOCK_MONOTONIC`: the vDSO clock
/// that tickets read adds the namespace's offset, `bpf_ktime_get_ns` does not, so stamps
/// and tickets would be on different clocks (with a negative offset, stamps look later than
/// every ticket and tickets complete without barriers). No file means a kernel without time
/// namespaces: offset 0.
fn check_time_namespace() -> Result<(), SourceError> {
    let text = match std::fs::read_to_string(TIMENS_OFFSETS_PATH) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(err(
                SourceErrorKind::Unreadable,
                e.raw_os_error(),
                format!("{TIMENS_OFFSETS_PATH}: {e} (cannot rule out a time namespace)"),
            ))
        }
    };
    match parse_timens_monotonic(&text) {
        Some((0, 0)) => Ok(()),
        Some((secs, nanos)) => Err(err(
            SourceErrorKind::NotSupported,
            None,
            format!(
                "inside a time namespace with a CLOCK_MONOTONIC offset of {secs} s {nanos} ns \
                 ({TIMENS_OFFSETS_PATH}): eBPF stamps (bpf_ktime_get_ns) do not include it, \
                 tickets (vDSO clock_gettime) do, so they cannot be compared"
            ),
        )),
        None => Err(err(
            SourceErrorKind::Unreadable,
            None,
            format!("{TIMENS_OFFSETS_PATH}: unparsable: {:?}", text.trim()),
        )),
    }
}

/// After attaching: check that the stamps are on the tickets' clock. Sleep ~2 ms (context
/// switches, ticks: the CPUs stamp), read every stamp, *then* read the clock (`now`): a stamp
/// read before `now` was written before it, so on one clock it is at most `now` (plus the
/// documented slack). A stamp beyond that means the clocks disagree (an undetected time
/// namespace, a kernel whose `bpf_ktime_get_ns` is not the vDSO's `CLOCK_MONOTONIC`).
fn check_stamps_on_our_clock(map: &Loaded) -> Result<(), SourceError> {
    let before = super::ordered_now();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let stamps: Vec<u64> = (0..map.entries()).map(|c| map.last_event(c)).collect();
    let now = super::ordered_now();
    match stamps
        .iter()
        .enumerate()
        .find(|&(_, &s)| s > now.saturating_add(super::CLOCK_SLACK_NS))
    {
        None => Ok(()),
        Some((c, &s)) => Err(err(
            SourceErrorKind::NotSupported,
            None,
            format!(
                "clock mismatch: CPU {c} stamped {s} ns (bpf_ktime_get_ns), {} ns after the \
                 CLOCK_MONOTONIC reading taken after it ({now} ns; {before} ns before a 2 ms \
                 sleep); stamps and tickets are not on one clock",
                s - now
            ),
        )),
    }
}

/// Create the map, load both programs, attach them, map the array, and check that the
/// stamps are on the tickets' clock.
pub(crate) fn load(possible_cpus: usize) -> Result<Loaded, SourceError> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err(err(
            SourceErrorKind::NotSupported,
            None,
            if cfg!(target_arch = "aarch64") {
                super::NOT_ON_AARCH64.into()
            } else {
                "the eBPF source is implemented for Linux/x86-64 only".into()
            },
        ));
    }
    check_time_namespace()?;
    let entries = possible_cpus.max(1);
    let map = create_map(entries as u32)?;
    let map_len = (entries * ENTRY_SIZE).next_multiple_of(PAGE_SIZE);
    let event = load_program(b"spindle_event", &event_program(map.as_raw_fd()))?;
    let idle = load_program(b"spindle_idle", &idle_program(map.as_raw_fd()))?;

    let mut links = Vec::new();
    let mut attached = Vec::new();
    let mut failures = Vec::new();
    for &tp in EVENT_TRACEPOINTS {
        match attach(&event, tp) {
            Ok(l) => {
                links.push(l);
                attached.push(tp);
            }
            Err(e) => failures.push((tp, e)),
        }
    }
    match attach(&idle, IDLE_TRACEPOINT) {
        Ok(l) => {
            links.push(l);
            attached.push(IDLE_TRACEPOINT);
        }
        Err(e) => failures.push((IDLE_TRACEPOINT, e)),
    }
    let has = |n: &str| attached.contains(&n);
    if !has("sched_switch") || !TIMER_TRACEPOINTS.iter().any(|t| has(t)) {
        let perm = failures
            .iter()
            .find(|(_, e)| *e == EPERM || *e == EACCES || *e == ENOSYS);
        let (kind, errno) = match perm {
            Some(&(_, e)) => (errno_kind(e), Some(e)),
            None => (
                SourceErrorKind::MissingTracepoint,
                failures.first().map(|f| f.1),
            ),
        };
        let list: Vec<String> = failures
            .iter()
            .map(|(t, e)| format!("{t}: {}", errno_text(*e)))
            .collect();
        return Err(err(
            kind,
            errno,
            format!(
                "needs raw tracepoints sched_switch and one of {TIMER_TRACEPOINTS:?}; \
                 attach failures: {}",
                list.join(", ")
            ),
        ));
    }
    // SAFETY: a fresh shared read-only mapping of the map's value area; `Loaded` unmaps it.
    let base = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            map_len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            &map,
            0,
        )
    }
    .map_err(|e| {
        err(
            errno_kind(e.raw_os_error()),
            Some(e.raw_os_error()),
            format!("mmap of the BPF array failed: {e}"),
        )
    })?;
    let loaded = Loaded {
        base: base as *const u8,
        map_len,
        entries,
        attached,
        _links: links,
        _progs: vec![event, idle],
        _map: map,
    };
    check_stamps_on_our_clock(&loaded)?;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(p: &[Insn]) -> Vec<[u8; 8]> {
        p.iter().map(|i| i.to_bytes()).collect()
    }

    #[test]
    fn encodings_match_the_uapi() {
        // Reference encodings as written by the kernel's own `BPF_*` macros (filter.h).
        assert_eq!(mov64_imm(R0, 0).to_bytes(), [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            mov64_reg(R2, R10).to_bytes(),
            [0xbf, 0xa2, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            add64_imm(R2, -4).to_bytes(),
            [0x07, 0x02, 0, 0, 0xfc, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            stx_w(R10, -4, R0).to_bytes(),
            [0x63, 0x0a, 0xfc, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(ldx_dw(R6, R1, 0).to_bytes(), [0x79, 0x16, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            xchg_dw(R7, 0, R0).to_bytes(),
            [0xdb, 0x07, 0, 0, 0xe1, 0, 0, 0]
        );
        assert_eq!(
            bytes(&ld_map_fd(R1, 5)),
            vec![[0x18, 0x11, 0, 0, 5, 0, 0, 0], [0; 8]]
        );
        assert_eq!(
            call(helper::KTIME_GET_NS).to_bytes(),
            [0x85, 0, 0, 0, 5, 0, 0, 0]
        );
        assert_eq!(jeq_imm(R0, 0, 3).to_bytes(), [0x15, 0, 3, 0, 0, 0, 0, 0]);
        assert_eq!(
            jne32_imm(R6, -1, 1).to_bytes(),
            [0x56, 0x06, 1, 0, 0xff, 0xff, 0xff, 0xff]
        );
    }

    /// Every jump lands inside the program, on the `r0 = 0; exit` tail or on a real
    /// instruction (not the second slot of `ld_imm64`).
    fn check_jumps(p: &[Insn]) {
        let ld_second: Vec<usize> = p
            .iter()
            .enumerate()
            .filter(|(_, i)| i.code == (BPF_LD | BPF_DW | BPF_IMM))
            .map(|(k, _)| k + 1)
            .collect();
        for (k, i) in p.iter().enumerate() {
            let class = i.code & 0x07;
            let op = i.code & 0xf0;
            if (class == BPF_JMP || class == BPF_JMP32) && op != BPF_CALL && op != BPF_EXIT {
                let target = k as i64 + 1 + i.off as i64;
                assert!(target > k as i64 && (target as usize) < p.len(), "jump {k}");
                assert!(!ld_second.contains(&(target as usize)));
            }
        }
        assert_eq!(p[p.len() - 2], mov64_imm(R0, 0));
        assert_eq!(p[p.len() - 1], exit());
    }

    /// Loaded for real (skipped without privileges): every online CPU stamps its own entry,
    /// and the stamps are on the clock tickets use.
    #[test]
    fn every_online_cpu_stamps_its_entry() {
        let online = crate::prepaid::procfs::read_cpu_list("/sys/devices/system/cpu/online")
            .expect("online CPU list");
        let possible = online.iter().max().map_or(1, |m| m + 1);
        let map = match load(possible) {
            Ok(m) => m,
            Err(e) => {
                assert!(
                    e.kind != SourceErrorKind::Rejected && e.kind != SourceErrorKind::Other,
                    "{e}"
                );
                println!("skipped: {e}");
                return;
            }
        };
        let before = crate::Deadline::now().as_nanos();
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if online.iter().all(|&c| map.last_event(c) > before) {
                break;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "a CPU never stamped its entry"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = crate::Deadline::now().as_nanos();
        for &c in &online {
            let t = map.last_event(c);
            // Same clock: a stamp read now is not in the future (with the documented slack).
            assert!(
                t <= after + crate::prepaid::CLOCK_SLACK_NS,
                "cpu {c}: {t} > {after}"
            );
        }
        // How often each CPU is found idle over 100 ms of 1 ms naps (printed, not judged: it
        // depends on what else runs).
        let mut idle_counts = vec![0u32; possible];
        for _ in 0..100 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            for (c, n) in idle_counts.iter_mut().enumerate() {
                *n += map.idle(c) as u32;
            }
        }
        println!("stamped by every online CPU; idle in n of 100 samples: {idle_counts:?}");
    }

    #[test]
    fn timens_offsets_parse() {
        let host = "monotonic           0         0\nboottime            0         0\n";
        assert_eq!(parse_timens_monotonic(host), Some((0, 0)));
        // `unshare --time --monotonic=-5`, and a fraction of a second (normalised).
        let shifted = "monotonic          -5         0\nboottime            0         0\n";
        assert_eq!(parse_timens_monotonic(shifted), Some((-5, 0)));
        let frac = "boottime 3 0\nmonotonic -1 500000000\n";
        assert_eq!(parse_timens_monotonic(frac), Some((-1, 500_000_000)));
        // Clock ids instead of names (CLOCK_MONOTONIC = 1, CLOCK_BOOTTIME = 7).
        assert_eq!(parse_timens_monotonic("1 7 0\n7 0 0\n"), Some((7, 0)));
        assert_eq!(parse_timens_monotonic("7 9 0\n1 0 0\n"), Some((0, 0)));
        // Garbage, missing fields, no monotonic line: unparsable (the source is refused).
        assert_eq!(parse_timens_monotonic(""), None);
        assert_eq!(parse_timens_monotonic("boottime 0 0\n"), None);
        assert_eq!(parse_timens_monotonic("monotonic 5\n"), None);
        assert_eq!(parse_timens_monotonic("monotonic x 0\n"), None);
        assert_eq!(parse_timens_monotonic("monotonic 0 0 0\n"), None);
        assert_eq!(parse_timens_monotonic("monotonic 0 1000000000\n"), None);
        assert_eq!(parse_timens_monotonic("monotonic 0 -1\n"), None);
        // This process's own file, where there is one, parses.
        if let Ok(text) = std::fs::read_to_string(TIMENS_OFFSETS_PATH) {
            assert!(parse_timens_monotonic(&text).is_some(), "{text:?}");
        }
    }

    #[test]
    fn a_rejected_program_reports_the_verifier_log() {
        // `exit` with r0 never written: every verifier rejects it.
        match load_program(b"spindle_bad", &[exit()]) {
            Ok(_) => panic!("the verifier accepted a program returning an unset r0"),
            Err(e)
                if matches!(
                    e.kind,
                    SourceErrorKind::NotPermitted | SourceErrorKind::NotSupported
                ) =>
            {
                println!("skipped: {e}")
            }
            Err(e) => {
                assert_eq!(e.kind, SourceErrorKind::Rejected, "{e}");
                assert!(e.why.contains("R0"), "no verifier log in: {e}");
            }
        }
    }

    #[test]
    fn programs_are_well_formed() {
        let e = event_program(7);
        check_jumps(&e);
        // The null check skips to `out`.
        let j = e.iter().position(|i| i.code == 0x15).unwrap();
        assert_eq!(j + 1 + e[j].off as usize, e.len() - 2);
        // The timestamp is stored by xchg, right after the clock helper, then idle = 0.
        let x = e.iter().position(|i| *i == xchg_dw(R7, 0, R0)).unwrap();
        assert_eq!(e[x - 1], call(helper::KTIME_GET_NS));
        assert_eq!(e[x + 1], mov64_imm(R1, 0));
        assert_eq!(e[x + 2], xchg_dw(R7, IDLE_OFF, R1));

        let i = idle_program(7);
        check_jumps(&i);
        assert_eq!(i[0], ldx_dw(R6, R1, 0));
        let x = i.iter().position(|k| *k == xchg_dw(R7, 0, R0)).unwrap();
        assert_eq!(i[x - 1], call(helper::KTIME_GET_NS));
        // idle = 1 unless the state is PWR_EVENT_EXIT, which skips nothing and stores 0.
        assert_eq!(
            &i[x + 1..x + 5],
            &[
                mov64_imm(R1, 1),
                jne32_imm(R6, -1, 1),
                mov64_imm(R1, 0),
                xchg_dw(R7, IDLE_OFF, R1)
            ]
        );
    }
}
