//! Running a user's command (no shell), timing it, and killing it (and what it started) at a
//! timeout.

use std::ffi::{OsStr, OsString};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::os::fd::OwnedFd;

use rustix::process::{Pid, PidfdFlags, Signal};

use crate::exit::CliError;

/// A command line to run repeatedly.
#[derive(Clone, Debug)]
pub struct CommandLine {
    /// Words need not be UTF-8: they go to `execve` as they came.
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Let the command write to our stdout/stderr instead of discarding its output.
    pub show_output: bool,
}

/// How one run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Exited with this status code (`None`: killed by a signal).
    Exited(Option<i32>),
    /// Killed by us at the timeout.
    TimedOut,
}

impl std::fmt::Display for RunEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunEnd::Exited(Some(code)) => write!(f, "exit status {code}"),
            RunEnd::Exited(None) => f.write_str("killed by a signal"),
            RunEnd::TimedOut => f.write_str("timed out"),
        }
    }
}

/// One timed run.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub end: RunEnd,
    /// From just before `spawn` to just after the process was reaped (with `--timeout`: to
    /// when its exit was seen, just before it is reaped; a run killed at the timeout, to when
    /// the kill was done).
    pub elapsed: Duration,
}

impl Run {
    pub fn exited_zero(&self) -> bool {
        self.end == RunEnd::Exited(Some(0))
    }
}

impl CommandLine {
    pub fn new(words: &[OsString], show_output: bool) -> Result<Self, CliError> {
        let (program, args) = words
            .split_first()
            .ok_or_else(|| CliError::Usage("no command given".into()))?;
        Ok(Self {
            program: program.clone(),
            args: args.to_vec(),
            show_output,
        })
    }

    /// The command as the user would type it (bytes that are not UTF-8 shown as U+FFFD).
    pub fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|w| quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn spawn(&self) -> Result<Child, CliError> {
        let output = || {
            if self.show_output {
                Stdio::inherit()
            } else {
                Stdio::null()
            }
        };
        Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(output())
            .stderr(output())
            .spawn()
            .map_err(|e| {
                let program = quote(&self.program);
                let why = match e.kind() {
                    std::io::ErrorKind::NotFound => "command not found".to_string(),
                    std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                    _ => e.to_string(),
                };
                let hint = if e.kind() == std::io::ErrorKind::NotFound
                    && self.program.to_string_lossy().contains(char::is_whitespace)
                {
                    // `spindle slo -- 'sleep 0.01'` looks for a program named "sleep 0.01".
                    let words = self.program.to_string_lossy();
                    let words = words.split_whitespace().collect::<Vec<_>>().join(" ");
                    format!(
                        " (no shell is involved, so the quotes made one word of the whole command: \
                         write its words separately, -- {words}, or use -- sh -c {program})"
                    )
                } else {
                    String::new()
                };
                CliError::Execution(format!("cannot run {program}: {why}{hint}"))
            })
    }

    /// Runs the command once; with a timeout, kills it when the timeout passes.
    pub fn run(&self, timeout: Option<Duration>) -> Result<Run, CliError> {
        let start = Instant::now();
        let mut child = self.spawn()?;
        // (A child's pid is never 0.)
        let (Some(timeout), Some(pid)) = (timeout, Pid::from_raw(child.id() as i32)) else {
            let status = wait(&mut child, &self.program)?;
            return Ok(Run {
                end: end_of(status),
                elapsed: start.elapsed(),
            });
        };
        // A pidfd names this very process even after it exits, so the kill below cannot hit a
        // recycled pid. Kernels before 5.3 lack pidfd_open; there we fall back to kill(2).
        let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
        // Wait in a helper thread so that the measured time is not quantised by polling. It
        // only waits for the exit (`WNOWAIT`); this thread reaps, after any `kill_tree`, so
        // that the child's pid, which names the tree, stays taken until then.
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let options =
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT;
            while let Err(rustix::io::Errno::INTR) =
                rustix::process::waitid(rustix::process::WaitId::Pid(pid), options)
            {}
            let _ = tx.send(start.elapsed());
        });
        let (end, elapsed) = match rx.recv_timeout(timeout) {
            Ok(elapsed) => (None, elapsed),
            Err(_) => {
                // Kill the child and what it started (see `kill_tree`).
                kill_tree(pid, pidfd);
                let _ = rx.recv();
                (Some(RunEnd::TimedOut), start.elapsed())
            }
        };
        let _ = waiter.join();
        let status = wait(&mut child, &self.program)?;
        Ok(Run {
            end: end.unwrap_or(end_of(status)),
            elapsed,
        })
    }
}

/// Kills `root` (our child, not yet reaped) and every process descended from it.
///
/// The command runs in spindle's process group, so that the terminal's signals (Ctrl-C,
/// hangup, Ctrl-Z) and its input reach it as they reach spindle: a signal to a group of its
/// own would need that group to be the terminal's foreground. So the tree is found from
/// `/proc`, parent by parent, and frozen before it is killed: `root` is stopped first, then
/// every process whose parent is in the tree, round after round until a round finds no new
/// one and all found have stopped. A stopped process neither forks nor reaps, so the tree
/// stops growing and no pid in it can be freed and reused meanwhile (short of a parent that
/// ignores `SIGCHLD`, whose children reap themselves: the pidfds cover that); then all are
/// killed, leaves first (a parent killed first would hand its children to `init`, out of
/// sight). Each process is signalled through a pidfd opened before its parent is checked
/// again, so that a pid reused between the scan and the signal is never hit; kernels without
/// pidfds (before 5.3) get `kill` on the pid just checked. Not found: processes that left
/// the tree before the timeout (daemons, re-parented to `init`), and the children of a
/// command that exits at the very moment of its timeout (re-parented as it exits).
fn kill_tree(root: Pid, root_fd: Option<OwnedFd>) {
    let signal = |pid: Pid, fd: &Option<OwnedFd>, sig: Signal| match fd {
        Some(fd) => drop(rustix::process::pidfd_send_signal(fd, sig)),
        None => drop(rustix::process::kill_process(pid, sig)),
    };
    signal(root, &root_fd, Signal::STOP);
    let mut tree = vec![(root, root_fd)];
    // Bounded: a command that forks faster than the rounds find its children still loses
    // the processes found, and the rest go on as before this function.
    let mut rounds = 0;
    loop {
        let mut grew = false;
        for (pid, parent) in processes() {
            let known = |p: Pid| tree.iter().any(|&(q, _)| q == p);
            if !known(parent) || known(pid) {
                continue;
            }
            let fd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
            // Still the child of a process of the tree: the pidfd, opened before this check,
            // names that process.
            if parent_of(pid) == Some(parent) {
                signal(pid, &fd, Signal::STOP);
                tree.push((pid, fd));
                grew = true;
            }
        }
        rounds += 1;
        if rounds >= 64 {
            break;
        }
        // A signal takes effect when its process next leaves the kernel: a `fork` under way
        // when `SIGSTOP` came still completes, and its child is found by the next round. So
        // a round that finds nothing new ends the search only once every process found so
        // far has stopped (or exited), which takes microseconds; 100 ms at most.
        if !grew && wait_until_stopped(&tree) {
            break;
        }
    }
    // Leaves first: a process killed before its parent has nobody to reap it but that
    // stopped parent, so no pid of the tree is freed before the whole tree is signalled,
    // and no process group of the tree is orphaned (which would `SIGCONT` it) while members
    // remain to kill.
    for (pid, fd) in tree.iter().rev() {
        signal(*pid, fd, Signal::KILL);
    }
}

/// Waits until every process of `tree` is stopped or dead (`/proc/PID/stat` state `T`, `t`,
/// `Z`, `X`, or gone), polling for at most 100 ms; false if some did not stop in that time.
fn wait_until_stopped(tree: &[(Pid, Option<OwnedFd>)]) -> bool {
    for _ in 0..1000 {
        let running = tree.iter().any(|&(pid, _)| {
            state_of(pid).is_some_and(|state| !matches!(state, 'T' | 't' | 'Z' | 'X'))
        });
        if !running {
            return true;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    false
}

/// The state letter of `pid` from `/proc/PID/stat` (the field after the command name).
fn state_of(pid: Pid) -> Option<char> {
    stat_after_name(pid)?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Every process in `/proc` with its parent.
fn processes() -> Vec<(Pid, Pid)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid = Pid::from_raw(e.file_name().to_str()?.parse().ok()?)?;
            Some((pid, parent_of(pid)?))
        })
        .collect()
}

/// The parent of `pid`, from `/proc/PID/stat` (its fourth field).
fn parent_of(pid: Pid) -> Option<Pid> {
    let ppid = stat_after_name(pid)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Pid::from_raw(ppid)
}

/// `/proc/PID/stat` after the command name, which is in parentheses and may itself hold
/// spaces and parentheses.
fn stat_after_name(pid: Pid) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).ok()?;
    Some(stat[stat.rfind(')')? + 1..].to_string())
}

/// One word as a POSIX shell would need it: quoted when it holds blanks or quotes.
fn quote(word: &OsStr) -> String {
    let w = word.to_string_lossy();
    if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
        format!("'{}'", w.replace('\'', r"'\''"))
    } else {
        w.into_owned()
    }
}

fn end_of(status: ExitStatus) -> RunEnd {
    RunEnd::Exited(status.code())
}

fn wait(child: &mut Child, program: &OsStr) -> Result<ExitStatus, CliError> {
    child.wait().map_err(|e| reap_error(program, e))
}

fn reap_error(program: &OsStr, e: std::io::Error) -> CliError {
    CliError::Execution(format!(
        "lost track of {} while waiting for it: {e}",
        quote(program)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(words: &[&str]) -> CommandLine {
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        CommandLine::new(&words, false).unwrap()
    }

    #[test]
    fn runs_and_reports_exit_codes() {
        assert!(cmd(&["true"]).run(None).unwrap().exited_zero());
        assert_eq!(
            cmd(&["false"]).run(None).unwrap().end,
            RunEnd::Exited(Some(1))
        );
        assert_eq!(
            cmd(&["sh", "-c", "exit 7"])
                .run(Some(Duration::from_secs(10)))
                .unwrap()
                .end,
            RunEnd::Exited(Some(7))
        );
    }

    #[test]
    fn timeouts_kill_the_command() {
        let run = cmd(&["sleep", "5"])
            .run(Some(Duration::from_millis(50)))
            .unwrap();
        assert_eq!(run.end, RunEnd::TimedOut);
        // Functional, not a performance figure: had the kill failed, we would have waited for
        // the whole `sleep 5`.
        assert!(run.elapsed < Duration::from_secs(5));
    }

    #[test]
    fn missing_commands_are_clear_errors() {
        let err = cmd(&["spindle-no-such-command"]).run(None).unwrap_err();
        assert!(matches!(err, CliError::Execution(_)));
        assert!(err.to_string().contains("command not found"), "{err}");
    }

    #[test]
    fn a_quoted_command_gets_a_hint_about_the_missing_shell() {
        let err = cmd(&["sleep 0.01"]).run(None).unwrap_err().to_string();
        assert!(err.contains("command not found"), "{err}");
        assert!(
            err.contains("no shell") && err.contains("-- sleep 0.01"),
            "{err}"
        );
        let err = cmd(&["spindle-no-such-command"])
            .run(None)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("no shell"), "{err}");
    }

    #[test]
    fn words_need_not_be_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let file = OsString::from_vec(b"/nonexistent-\xff".to_vec());
        let c = CommandLine::new(
            &[
                OsString::from("test"),
                OsString::from("!"),
                OsString::from("-e"),
                file,
            ],
            false,
        )
        .unwrap();
        // `test ! -e <non-UTF-8 path>` succeeds: the bytes reached the program intact.
        assert!(c.run(None).unwrap().exited_zero());
        assert!(c.display().contains('\u{fffd}'));
    }

    #[test]
    fn display_quotes_words_with_spaces() {
        assert_eq!(cmd(&["echo", "a b", "c"]).display(), "echo 'a b' c");
    }
}
