//! A script's process: started with `fork` + `exec` in its own process
//! group and directory, its signals at their defaults, its pipes
//! non-blocking; watched through a pidfd, reaped (its group killed with
//! it), and handed to a reaper thread when killed before it exited.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};

use super::*;

/// Shared by every script this process runs: the concurrency count and
/// the reaper of scripts killed before they exited.
#[derive(Debug, Default)]
pub(crate) struct Runtime {
    running: AtomicUsize,
    reaper: Mutex<Option<Reaper>>,
}

/// A thread that waits for killed scripts to die and reaps them, so no
/// zombie outlives its script by more than a moment, whatever the server
/// does next (an idle server may start no other script for hours). It
/// blocks, so no event loop has to; started at the first kill, and again
/// in a forked child (which inherits the handle, not the thread).
#[derive(Debug)]
struct Reaper {
    /// The process the thread runs in.
    owner: u32,
    graves: mpsc::Sender<Child>,
}

/// The reaper's longest pause between checks of a child that is slow to
/// die (one stuck in the kernel, say); the first checks come sooner.
const REAP_PAUSE_MAX: Duration = Duration::from_millis(500);

impl Runtime {
    /// Scripts running now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Hands a killed, unreaped child to this process's reaper.
    fn bury(&self, child: Child) {
        let mut reaper = self.reaper.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        if reaper.as_ref().is_none_or(|r| r.owner != me) {
            let (graves, dying) = mpsc::channel();
            let started = std::thread::Builder::new()
                .name("cgi-reaper".into())
                .stack_size(64 << 10)
                .spawn(move || reap(dying));
            *reaper = started.ok().map(|_| Reaper { owner: me, graves });
        }
        let unsent = match reaper.as_ref() {
            Some(r) => r.graves.send(child).err().map(|e| e.0),
            None => Some(child),
        };
        if let Some(mut child) = unsent {
            // No thread to be had: wait here. The child was sent SIGKILL,
            // so this is short, and a zombie would be worse.
            *reaper = None;
            let _ = child.wait();
        }
    }
}

/// The reaper thread: collects children and waits for each to exit,
/// checking soon after a kill (a killed process dies within microseconds)
/// and then less often; returns when its runtime is gone and every child
/// has been reaped.
fn reap(graves: mpsc::Receiver<Child>) {
    let mut dying: Vec<Child> = Vec::new();
    let mut pause = Duration::from_millis(1);
    loop {
        let arrived = if dying.is_empty() {
            match graves.recv() {
                Ok(child) => Some(child),
                Err(mpsc::RecvError) => return,
            }
        } else {
            match graves.recv_timeout(pause) {
                Ok(child) => Some(child),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                // Nobody can send any more, but these still need reaping.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(pause);
                    None
                }
            }
        };
        if let Some(child) = arrived {
            dying.push(child);
            pause = Duration::from_millis(1);
        }
        dying.retain_mut(|child| matches!(child.try_wait(), Ok(None)));
        pause = (pause * 2).min(REAP_PAUSE_MAX);
    }
}

/// A running script and its pipes (non-blocking, close-on-exec in us).
#[derive(Debug)]
pub struct CgiProcess {
    child: Option<Child>,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
    /// Readable once the script has exited (Linux 5.3+); `None` if the
    /// kernel has no pidfd, then exit is learnt by `try_wait` alone.
    pub(crate) pidfd: Option<OwnedFd>,
    /// URL path of the script, for the error log.
    pub(crate) name: String,
    runtime: Arc<Runtime>,
}

/// Why a script could not be started.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// `--max-cgi` scripts are running: 503.
    Busy,
    /// `exec` failed: 404, 403 or 500 by its kind.
    Exec(io::Error),
}

/// Starts `file` with `args` and exactly `env`, in its own process group (so a
/// timeout can kill whatever it started), in its own directory (§7.2 leaves
/// the working directory to the server; every server uses the script's).
/// `body` says whether stdin is a pipe (fed by the server) or /dev/null.
pub(crate) fn spawn(
    runtime: &Arc<Runtime>,
    settings: &CgiSettings,
    file: &Path,
    args: &[OsString],
    env: Vec<(String, OsString)>,
    body: bool,
    name: String,
) -> Result<CgiProcess, SpawnError> {
    // Reserve a slot first; give it back if the spawn fails.
    if runtime.running.fetch_add(1, Ordering::AcqRel) >= settings.max_running {
        runtime.running.fetch_sub(1, Ordering::AcqRel);
        return Err(SpawnError::Busy);
    }
    let dir = file.parent().unwrap_or(Path::new("/"));
    let mut command = Command::new(file);
    command
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(dir)
        .process_group(0)
        .stdin(if body { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[allow(unsafe_code)]
    // SAFETY: `pre_exec`'s closure runs in the child between fork and exec,
    // where only async-signal-safe work is allowed: `default_signals` calls
    // sigprocmask(2) and sigaction(2), both async-signal-safe, over a
    // static list, and neither allocates nor takes a lock. The conformance
    // case `a_script_starts_with_default_signals` runs it in every model.
    unsafe {
        command.pre_exec(default_signals);
    }
    let spawned = command.spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            runtime.running.fetch_sub(1, Ordering::AcqRel);
            return Err(SpawnError::Exec(e));
        }
    };
    let nonblocking = |fd: Option<OwnedFd>| {
        fd.inspect(|fd| {
            // Cannot fail on a pipe; a blocking pipe would only cost the
            // event loops their promise, so it is not worth failing over.
            let _ = rustix::io::ioctl_fionbio(fd.as_fd(), true);
        })
    };
    let stdin = nonblocking(child.stdin.take().map(OwnedFd::from));
    let stdout = nonblocking(child.stdout.take().map(OwnedFd::from));
    let stderr = nonblocking(child.stderr.take().map(OwnedFd::from));
    let pidfd = Pid::from_raw(child.id() as i32)
        .and_then(|pid| rustix::process::pidfd_open(pid, PidfdFlags::NONBLOCK).ok());
    Ok(CgiProcess { child: Some(child), stdin, stdout, stderr, pidfd, name, runtime: runtime.clone() })
}

/// What a started program must not inherit from the server: its blocked
/// signals (a process model's master and children block the ones they
/// read from a signalfd) and its ignored ones (INT and QUIT, ignored by a
/// server started in the background by a shell): a script's own
/// `sleep 3 & kill -TERM $!` must work, and its background children must
/// die of SIGTERM. Every standard signal gets its default action and the
/// mask is emptied, as `posix_spawn`'s SETSIGDEF and SETSIGMASK would do.
fn default_signals() -> io::Result<()> {
    use nix::sys::signal::{
        sigaction, sigprocmask, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal,
    };
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for signal in Signal::iterator().filter(|s| !matches!(s, Signal::SIGKILL | Signal::SIGSTOP)) {
        #[allow(unsafe_code)]
        // SAFETY: installing SIG_DFL runs no handler of ours (nix's caveat is
        // about handlers); in the child just before exec nothing else runs.
        unsafe {
            sigaction(signal, &default)?;
        }
    }
    Ok(())
}

impl CgiProcess {
    /// Whether the script has exited, without reaping it (its group is
    /// killed when it is reaped: [`try_reap`](Self::try_reap)).
    pub(crate) fn has_exited(&self) -> bool {
        let Some(pid) = self.child.as_ref().and_then(|c| Pid::from_raw(c.id() as i32)) else { return true };
        let peek = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        matches!(rustix::process::waitid(WaitId::Pid(pid), peek), Ok(Some(_)))
    }

    /// The script's exit status if it has exited (reaping it); `None`
    /// while it runs. What is left of its process group (background
    /// children) is killed with it: first, while the leader is an unreaped
    /// zombie — its id, which names the group, cannot be reused until it
    /// is reaped, so the signal cannot reach a newer group of that id.
    pub(crate) fn try_reap(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        if let Some(pid) = Pid::from_raw(child.id() as i32) {
            let peek = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
            match rustix::process::waitid(WaitId::Pid(pid), peek) {
                Ok(Some(_)) => {
                    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                }
                Ok(None) => return None,
                // Not our child any more (cannot happen): try_wait says so below.
                Err(_) => {}
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status)
            }
            Ok(None) => None,
            Err(_) => {
                self.child = None;
                None
            }
        }
    }

    /// Kills the script's whole process group (timeouts, clients that
    /// left). Only while the leader is unreaped, for the reason in
    /// [`try_reap`](Self::try_reap).
    pub(crate) fn kill(&mut self) {
        if let Some(pid) = self.child.as_ref().and_then(|c| Pid::from_raw(c.id() as i32)) {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
    }
}

impl Drop for CgiProcess {
    fn drop(&mut self) {
        // Our ends of the pipes close with us; a script still writing gets
        // EPIPE. Whatever is left of the group is killed (the leader is
        // not reaped yet) and reaped: now if it is already dead, else by
        // the reaper (killed processes exit at once, but not synchronously).
        self.kill();
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                self.runtime.bury(child);
            }
        }
        self.runtime.running.fetch_sub(1, Ordering::AcqRel);
    }
}
