//! This thread's `struct rseq`: adopting the C library's registration, or making our own.
//!
//! The kernel lets each thread register one `struct rseq` area (Linux 4.18+). Since glibc 2.35
//! the C library registers one for every thread it starts, and a second registration fails
//! with `EBUSY`, so a library must find and share glibc's. The decision is made once per
//! process ([`registration`]):
//!
//! 1. **glibc**: glibc exports `__rseq_offset` (the area's offset from the thread pointer),
//!    `__rseq_size` (0 when glibc did not register, e.g. `GLIBC_TUNABLES=glibc.pthread.rseq=0`)
//!    and `__rseq_flags`. They are looked up at run time — `dlsym(RTLD_DEFAULT, …)` in a
//!    dynamically linked program, weak references in a statically linked one — so the binary
//!    links and runs on musl and on a glibc older than 2.35, where they do not exist. Each
//!    thread's area is then `thread pointer + __rseq_offset`; a thread whose area says
//!    "registration failed" (glibc could not register it) takes the fallback.
//! 2. **own**: otherwise each thread registers a 32-byte aligned area of its own on first use,
//!    with the length the kernel advertises (`AT_RSEQ_FEATURE_SIZE`, at least the original 32
//!    bytes), and unregisters it in a thread-local destructor, before its memory is freed.
//!    `EBUSY` (someone else registered this thread without telling us), `ENOSYS` (kernel older
//!    than 4.18), `EPERM`/`EINVAL`/`ENOSYS` from a seccomp filter: this thread takes the
//!    fallback.
//! 3. **unavailable**: not on x86-64 or AArch64 Linux, or the probe registration answered
//!    `ENOSYS` (as it does under `qemu-aarch64`, which does not implement `rseq`).
//!
//! A seccomp filter that *kills* a thread calling `rseq` cannot be survived, but neither can
//! glibc 2.35+ survive it: it registers every thread it starts.
//!
//! We only ever write `rseq_cs` (the pointer to the current critical section's descriptor).
//! `cpu_id_start`, `cpu_id`, `node_id` and `mm_cid` belong to the kernel (a kernel built with
//! `CONFIG_DEBUG_RSEQ` kills a thread that changes them, and Linux 6.19 relies on
//! `cpu_id_start` being its own); the signature is glibc's, so the same abort handlers are
//! valid under either registration.
//!
//! After `fork` the child's thread keeps the parent thread's registration at the same address
//! (the kernel copies it with the address space), so the per-thread state we cache stays true.

use std::cell::Cell;
use std::sync::OnceLock;

/// Which registration this process's per-CPU operations run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// glibc registered every thread's area (glibc 2.35+); we share it.
    Glibc,
    /// Each thread registers an area of its own on first use and unregisters it at exit.
    Own,
    /// No restartable sequences: per-CPU operations use their fallback (sharded atomics).
    Unavailable,
}

impl Registration {
    /// A short name: `glibc`, `own` or `unavailable`.
    pub fn name(self) -> &'static str {
        match self {
            Registration::Glibc => "glibc",
            Registration::Own => "own",
            Registration::Unavailable => "unavailable",
        }
    }
}

/// What the process decided, once.
#[derive(Clone, Copy, Debug)]
pub struct Process {
    /// The registration.
    pub registration: Registration,
    /// The kernel's `AT_RSEQ_FEATURE_SIZE` (0 before Linux 6.3, which did not advertise it).
    pub feature_size: usize,
    /// Per-CPU data is indexed by `mm_cid` (dense per-process ids, Linux 6.3+) rather than by
    /// the CPU number.
    pub mm_cid: bool,
    /// Why restartable sequences are unavailable, when they are.
    pub reason: Option<&'static str>,
}

impl Process {
    /// `glibc (mm_cid)`, `own (cpu_id)`, `unavailable (…)`: the live mode in a few words.
    pub fn describe(&self) -> String {
        match self.reason {
            Some(why) => format!("{} ({why})", self.registration.name()),
            None => format!(
                "{} ({}, feature size {})",
                self.registration.name(),
                if self.mm_cid { "mm_cid" } else { "cpu_id" },
                self.feature_size
            ),
        }
    }
}

/// The signature that must precede every abort handler: glibc's `RSEQ_SIG` for this
/// architecture (on x86-64 the data after a `ud1` opcode; on AArch64 a `brk #0x45e0`
/// instruction word, emitted with `.inst`). The kernel compares the four bytes before the
/// abort address with the signature the thread registered, so it must be glibc's to share
/// glibc's registration.
#[cfg(not(target_arch = "aarch64"))]
pub const SIGNATURE: u32 = 0x5305_3053;
/// See the x86-64 definition.
#[cfg(target_arch = "aarch64")]
pub const SIGNATURE: u32 = 0xd428_bc00;
/// Offsets in `struct rseq` (Linux UAPI): `cpu_id` u32 at 4, `rseq_cs` u64 at 8, `mm_cid` u32
/// at 24 (Linux 6.3+). Public for crates that write critical sections of their own
/// (`spindle-alloc`); they must follow this module's rules (write only `rseq_cs`, put
/// [`SIGNATURE`] before every abort handler).
pub const CPU_ID: usize = 4;
/// See [`CPU_ID`].
pub const RSEQ_CS: usize = 8;
/// See [`CPU_ID`].
pub const MM_CID: usize = 24;
const ORIGINAL_SIZE: usize = 32;

/// Per-thread state in one word: `UNTRIED`, `NONE` or the address of this thread's area.
const UNTRIED: usize = 0;
const NONE: usize = 1;

thread_local! {
    static AREA: Cell<usize> = const { Cell::new(UNTRIED) };
}

/// The process's decision (made on first call).
pub fn registration() -> Process {
    static PROCESS: OnceLock<Process> = OnceLock::new();
    *PROCESS.get_or_init(decide)
}

/// Whether this thread can run restartable sequences now (registering it if needed).
pub fn this_thread_registered() -> bool {
    area().is_some()
}

/// What [`peek_area`] knows about this thread without deciding anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// This thread's registered area.
    Ready(*mut u8),
    /// This thread takes the fallback.
    Fallback,
    /// Not looked at yet: [`area`] would decide (and may allocate, register, take a lock).
    Untried,
}

/// This thread's state without side effects: for a memory allocator, which must not recurse
/// into its own first use.
#[inline(always)]
pub fn peek_area() -> Peek {
    match AREA.try_with(Cell::get).unwrap_or(NONE) {
        UNTRIED => Peek::Untried,
        NONE => Peek::Fallback,
        a => Peek::Ready(a as *mut u8),
    }
}

/// `__rseq_offset` when the process runs on glibc's registration: each thread's area is then
/// at the thread pointer (`fs:0`) plus this offset, found without thread-local storage. A
/// thread whose `cpu_id` is negative there was not registered by glibc.
pub fn glibc_offset() -> Option<isize> {
    static OFFSET: OnceLock<Option<isize>> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        if registration().registration != Registration::Glibc {
            return None;
        }
        #[cfg(all(
            any(target_arch = "x86_64", target_arch = "aarch64"),
            target_os = "linux"
        ))]
        return imp::glibc_symbols().map(|(offset, _)| offset);
        #[cfg(not(all(
            any(target_arch = "x86_64", target_arch = "aarch64"),
            target_os = "linux"
        )))]
        None
    })
}

/// This thread's `struct rseq`, registering it on first use; None if this thread must take
/// the fallback. It may allocate the first time (a thread-local destructor is registered).
#[inline(always)]
pub fn area() -> Option<*mut u8> {
    let a = AREA.with(Cell::get);
    if a > NONE {
        Some(a as *mut u8)
    } else if a == NONE {
        None
    } else {
        first_use()
    }
}

#[cold]
#[inline(never)]
fn first_use() -> Option<*mut u8> {
    let p = registration();
    let a = match p.registration {
        Registration::Glibc => glibc_area(),
        Registration::Own => own_area(),
        Registration::Unavailable => None,
    };
    // try_with: during thread exit the cell may already be gone; then simply no rseq.
    let _ = AREA.try_with(|c| c.set(a.map_or(NONE, |p| p as usize)));
    a
}

#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
))]
mod imp {
    use core::ffi::c_ulong;
    #[cfg(not(target_feature = "crt-static"))]
    use core::ffi::{c_char, c_void};

    #[cfg(target_arch = "x86_64")]
    const SYS_RSEQ: usize = 334;
    #[cfg(target_arch = "aarch64")]
    const SYS_RSEQ: usize = 293;
    const RSEQ_FLAG_UNREGISTER: usize = 1;
    const AT_RSEQ_FEATURE_SIZE: c_ulong = 27;
    const AT_RSEQ_ALIGN: c_ulong = 28;
    const ENOSYS: isize = 38;
    const EBUSY: isize = 16;

    extern "C" {
        // glibc 2.16+ and musl; returns 0 for an absent entry.
        fn getauxval(ty: c_ulong) -> c_ulong;
    }

    /// `rseq(area, len, flags, sig)`; the result or `-errno`.
    ///
    /// # Safety
    /// A registration must point at `len` bytes that stay valid until unregistered.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn sys_rseq(area: usize, len: usize, flags: usize, sig: u32) -> isize {
        let ret: isize;
        // SAFETY: the x86-64 Linux system call convention: number in rax, arguments in rdi,
        // rsi, rdx, r10; the kernel clobbers rcx and r11. The caller guarantees the area.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") SYS_RSEQ as isize => ret,
                in("rdi") area,
                in("rsi") len,
                in("rdx") flags,
                in("r10") sig as usize,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    /// See the x86-64 form.
    ///
    /// # Safety
    /// As for the x86-64 form.
    #[cfg(target_arch = "aarch64")]
    pub(super) unsafe fn sys_rseq(area: usize, len: usize, flags: usize, sig: u32) -> isize {
        let ret: isize;
        // SAFETY: the AArch64 Linux system call convention: number in x8, arguments in x0-x3,
        // the result in x0; nothing else is clobbered. The caller guarantees the area.
        unsafe {
            core::arch::asm!(
                "svc #0",
                inlateout("x0") area as isize => ret,
                in("x1") len,
                in("x2") flags,
                in("x3") sig as usize,
                in("x8") SYS_RSEQ,
                options(nostack),
            );
        }
        ret
    }

    pub(super) fn auxv() -> (usize, usize) {
        // SAFETY: getauxval only reads the process's auxiliary vector.
        unsafe {
            (
                getauxval(AT_RSEQ_FEATURE_SIZE) as usize,
                getauxval(AT_RSEQ_ALIGN) as usize,
            )
        }
    }

    /// `(__rseq_offset, __rseq_size)` if glibc exports them.
    #[cfg(not(target_feature = "crt-static"))]
    pub(super) fn glibc_symbols() -> Option<(isize, u32)> {
        extern "C" {
            fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        }
        // RTLD_DEFAULT is the null handle on glibc and musl.
        // SAFETY: dlsym with NUL-terminated names; it returns null for an absent symbol.
        let (offset, size) = unsafe {
            (
                dlsym(core::ptr::null_mut(), c"__rseq_offset".as_ptr()) as *const isize,
                dlsym(core::ptr::null_mut(), c"__rseq_size".as_ptr()) as *const u32,
            )
        };
        if offset.is_null() || size.is_null() {
            return None;
        }
        // SAFETY: glibc defines them as `const ptrdiff_t` and `const unsigned int`, set before
        // main and never changed.
        unsafe { Some((offset.read(), size.read())) }
    }

    // A statically linked program has no dynamic symbol table for dlsym to search. Weak
    // references resolve to glibc's variables when its (static) startup code defines them,
    // and to address 0 where they do not exist (musl, glibc < 2.35).
    #[cfg(target_feature = "crt-static")]
    core::arch::global_asm!(".weak __rseq_offset", ".weak __rseq_size");

    #[cfg(target_feature = "crt-static")]
    pub(super) fn glibc_symbols() -> Option<(isize, u32)> {
        let (offset, size): (*const isize, *const u32);
        // SAFETY: loads the two addresses from the GOT, which the linker fills with the
        // symbols' addresses or 0 for an undefined weak symbol; no other effect.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::asm!(
                "mov {o}, qword ptr [rip + __rseq_offset@GOTPCREL]",
                "mov {s}, qword ptr [rip + __rseq_size@GOTPCREL]",
                o = out(reg) offset,
                s = out(reg) size,
                options(nostack, pure, readonly, preserves_flags),
            );
        }
        // SAFETY: as above, with AArch64's GOT relocations.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            core::arch::asm!(
                "adrp {o}, :got:__rseq_offset",
                "ldr {o}, [{o}, :got_lo12:__rseq_offset]",
                "adrp {s}, :got:__rseq_size",
                "ldr {s}, [{s}, :got_lo12:__rseq_size]",
                o = out(reg) offset,
                s = out(reg) size,
                options(nostack, pure, readonly, preserves_flags),
            );
        }
        if offset.is_null() || size.is_null() {
            return None;
        }
        // SAFETY: as in the dynamic case.
        unsafe { Some((offset.read(), size.read())) }
    }

    /// The thread pointer: on x86-64 glibc and musl, the word at `fs:0` is its own address.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn thread_pointer() -> usize {
        let tp: usize;
        // SAFETY: reads the TCB's self pointer, which both C libraries keep at fs:0.
        unsafe {
            core::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
        }
        tp
    }

    /// The thread pointer: on AArch64 the `tpidr_el0` register, to which glibc's
    /// `__rseq_offset` is relative (`__builtin_thread_pointer`).
    #[cfg(target_arch = "aarch64")]
    pub(super) fn thread_pointer() -> usize {
        let tp: usize;
        // SAFETY: reads a register; no memory effects.
        unsafe {
            core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags));
        }
        tp
    }

    pub(super) const ENOSYS_: isize = ENOSYS;
    pub(super) const EBUSY_: isize = EBUSY;
    pub(super) const UNREGISTER: usize = RSEQ_FLAG_UNREGISTER;
}

/// The length we register: the advertised feature size, never less than the original 32
/// bytes; and whether `mm_cid` is maintained.
#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
))]
fn own_len() -> (usize, usize) {
    let (feature, align) = imp::auxv();
    let len = feature.max(ORIGINAL_SIZE);
    if len > OwnArea::SIZE || align > OwnArea::ALIGN {
        (ORIGINAL_SIZE, feature)
    } else {
        (len, feature)
    }
}

#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
))]
fn decide() -> Process {
    let (feature_size, _) = imp::auxv();
    // mm_cid is at offset 24; a kernel that advertises at least 28 bytes maintains it, in the
    // first 32 bytes every registration has.
    let mm_cid = feature_size >= MM_CID + 4;
    let ok = |registration| Process {
        registration,
        feature_size,
        mm_cid,
        reason: None,
    };
    if let Some((_, size)) = imp::glibc_symbols() {
        if size as usize >= CPU_ID + 4 {
            return ok(Registration::Glibc);
        }
    }
    // Probe: an invalid registration (null area, length 0) answers EINVAL (or EBUSY/EPERM)
    // where the call exists and ENOSYS where it does not, or where a filter hides it.
    // SAFETY: a null area with length 0 is rejected before the kernel touches memory.
    let ret = unsafe { imp::sys_rseq(0, 0, 0, SIGNATURE) };
    if ret == -imp::ENOSYS_ {
        return Process {
            registration: Registration::Unavailable,
            feature_size,
            mm_cid: false,
            reason: Some("the rseq system call is missing or filtered (ENOSYS)"),
        };
    }
    ok(Registration::Own)
}

#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
)))]
fn decide() -> Process {
    Process {
        registration: Registration::Unavailable,
        feature_size: 0,
        mm_cid: false,
        reason: Some("restartable sequences are implemented for x86-64 and AArch64 Linux only"),
    }
}

#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
))]
fn glibc_area() -> Option<*mut u8> {
    let (offset, _) = imp::glibc_symbols()?;
    let area = imp::thread_pointer().wrapping_add_signed(offset) as *mut u8;
    // glibc leaves cpu_id at RSEQ_CPU_ID_REGISTRATION_FAILED (-2) when it could not register
    // this thread; the kernel keeps it a real CPU number otherwise.
    // SAFETY: glibc's area for this thread lives as long as the thread.
    let cpu = unsafe { (area.add(CPU_ID) as *const u32).read_volatile() };
    ((cpu as i32) >= 0).then_some(area)
}

#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
)))]
fn glibc_area() -> Option<*mut u8> {
    None
}

/// This thread's own area, 32-byte aligned as the kernel requires (more, for future fields).
#[repr(C, align(64))]
struct OwnArea([u8; OwnArea::SIZE]);

impl OwnArea {
    const SIZE: usize = 256;
    const ALIGN: usize = 64;
}

/// Owns the registration; its destructor unregisters before the memory goes away.
struct Own {
    area: Option<Box<OwnArea>>,
    len: usize,
}

impl Drop for Own {
    fn drop(&mut self) {
        let Some(area) = self.area.take() else {
            return;
        };
        // From here on this thread takes the fallback (other destructors may still count).
        let _ = AREA.try_with(|c| c.set(NONE));
        #[cfg(all(
            any(target_arch = "x86_64", target_arch = "aarch64"),
            target_os = "linux"
        ))]
        {
            let addr = &*area as *const OwnArea as usize;
            // SAFETY: unregistering the area this thread registered, with the same length
            // and signature; afterwards the kernel no longer writes to it.
            let ret = unsafe { imp::sys_rseq(addr, self.len, imp::UNREGISTER, SIGNATURE) };
            if ret != 0 {
                // Still registered: the kernel may write to it until the thread is gone.
                std::mem::forget(area);
            }
        }
    }
}

thread_local! {
    static OWN: std::cell::RefCell<Own> = const {
        std::cell::RefCell::new(Own { area: None, len: 0 })
    };
}

#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
))]
fn own_area() -> Option<*mut u8> {
    OWN.try_with(|own| {
        // Busy: a signal handler interrupted this thread's own registration; it counts
        // through the fallback this once.
        let mut own = own.try_borrow_mut().ok()?;
        if let Some(a) = &own.area {
            return Some(&**a as *const OwnArea as *mut u8);
        }
        let (len, _) = own_len();
        let area = Box::new(OwnArea([0; OwnArea::SIZE]));
        let addr = &*area as *const OwnArea as usize;
        // SAFETY: the area is heap memory owned by this thread's `Own`, whose destructor
        // unregisters it before freeing it (or leaks it if unregistering fails).
        let ret = unsafe { imp::sys_rseq(addr, len, 0, SIGNATURE) };
        if ret != 0 {
            // EBUSY: another registration we cannot see; other errors: refused. Fallback.
            let _ = ret == -imp::EBUSY_;
            return None;
        }
        own.area = Some(area);
        own.len = len;
        Some(addr as *mut u8)
    })
    .ok()
    .flatten()
}

#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
)))]
fn own_area() -> Option<*mut u8> {
    None
}
