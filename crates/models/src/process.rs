//! What the process models (`prefork`, `worker`, `perchild`) share: the
//! master (fork, reap, signals, the spare-count rules) and the runtime of a
//! child (its signals, log flusher, status reports, accept and retirement).
//! The model files only say what a child runs and how the process count
//! moves ([`Scaling`]).
//!
//! # The master
//!
//! It runs on the main thread of a process that has no other thread:
//! `serve.rs` calls models whose `Caps.forks` is set before it starts any
//! thread, and the master never starts one (each fork checks). It blocks
//! SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2 and SIGCHLD and reads
//! them from a `signalfd`,
//! waiting at most until the next one-second maintenance tick (Apache's
//! `perform_idle_server_maintenance` period):
//!
//! * SIGCHLD → reap every dead child with `waitpid(-1, WNOHANG)`, so there
//!   is never a zombie; a child that died (even by SIGKILL) is replaced at
//!   the next tick if the rules below still want it;
//! * SIGUSR1 and SIGHUP → reopen the master's logs (so children forked later
//!   inherit the new files) and forward SIGUSR1 to every child (there is no
//!   configuration reload: HUP says so in the error log);
//! * SIGTERM/SIGINT/SIGQUIT → graceful stop (below); SIGUSR2 → said and ignored;
//! * each tick → [`Scaling`]: `Spare` counts idle workers over the children
//!   and spawns in batches that double each tick while short (1, 2, 4, … up
//!   to 32 children a second, Apache's `idle_spawn_rate`), or retires one
//!   child a tick while there are too many; `Fixed` replaces dead children.
//!
//! # How the master knows who is idle: a scoreboard over a pipe
//!
//! Apache keeps its scoreboard in shared memory. Here, sharing memory
//! between processes would take a second `unsafe` block (`mmap` plus atomics
//! conjured from a raw pointer), so children *report* instead: each child
//! keeps its idle/busy counts in its own atomics (two atomic adds per
//! connection, no system call) and its housekeeping thread sends a 16-byte
//! snapshot `{serial, idle, busy, leaving}` down one pipe shared by all
//! children whenever it changed, at most every 250 ms. Writes of up to
//! `PIPE_BUF` bytes to a pipe are atomic, so messages from many processes
//! never mix; snapshots are absolute, so a lost one (the pipe is
//! non-blocking: a child never waits for the master) is repaired by the
//! next; and a child is named by a serial the master never reuses, so a late
//! message from a dead child cannot be credited to a new one with a recycled
//! pid. The master reads the pipe at each tick — the only time it decides
//! — and credits a child it just forked with its full capacity until its
//! first report (Apache counts `SERVER_STARTING` slots as idle too). (The
//! statistics board below does share memory, as a file read and written
//! with `pread`/`pwrite`; but it exists only with `--admin`, and these
//! counts must work without it.)
//!
//! # Retiring: a pipe of death
//!
//! To retire a child the master writes one byte into a second pipe, the
//! "pipe of death" of Apache 2. A child reads it (non-blocking) only after
//! its accept timed out — after a full [`BLOCKING_TICK`] without a
//! connection — so the child that leaves is one that was really idle,
//! never one that just took a connection. Bytes no child took within a tick
//! are taken back by the master (load returned).
//!
//! # Accept, and the thundering herd
//!
//! Every child (or every child thread) calls plain blocking `accept()` on
//! the one shared listening socket. Linux queues blocked accepters as
//! *exclusive* waiters (`inet_csk_wait_for_connect` →
//! `prepare_to_wait_exclusive`), so a new connection wakes exactly one of
//! them, in FIFO order: no herd, and no accept mutex is needed for a single
//! listener (Apache makes the same call: `SINGLE_LISTEN_UNSERIALIZED_ACCEPT`
//! on Linux). Waiting in `poll`/`epoll` on the listener would wake every
//! waiter (`EPOLLEXCLUSIVE` would be needed), which is why the children do
//! not. The listener's `SO_RCVTIMEO` is [`BLOCKING_TICK`] (set once, also
//! inherited by accepted sockets), so a blocked accept returns every 250 ms
//! to look at the stop flag and the pipe of death.
//!
//! # Stopping
//!
//! On SIGTERM/SIGINT the master `shutdown(SHUT_RD)`s the listening socket.
//! That acts on the socket, not on one descriptor: the port stops listening
//! for every process at once (new connections are refused) and children
//! blocked in `accept()` wake with `EINVAL`. It then sends SIGTERM to every
//! child; a child's housekeeping thread turns that into its own
//! [`Shutdown`] (created after the fork — the server's pipe-based one is
//! shared across fork and means nothing to a child), so in-flight requests
//! finish and keep-alive connections close at the next request boundary.
//! The child then flushes its access log and exits 0. After
//! `Tuning::shutdown_timeout` the master SIGKILLs whoever is left, reaps
//! every child, and returns `Ok`.
//!
//! A child also stops on SIGTERM/SIGINT sent to it directly (Ctrl-C reaches
//! the whole process group), reopens its logs on SIGUSR1, and gets SIGTERM
//! if the master dies (`PR_SET_PDEATHSIG`), so a killed master leaves no
//! orphans serving on.
//!
//! # Statistics and `--admin`
//!
//! Each child counts requests, phases and its scoreboard (one line per
//! worker: the process for `prefork`, each thread for `worker` and
//! `perchild`) in its own copy of the stats, and its housekeeping thread
//! publishes them into its slot of a shared memory file made before the
//! first fork (`board.rs`); the master adds a reaped child's counters to
//! retired totals there, so the server's totals never go backwards. With
//! `--admin` the master forks one more child, the *admin child*, which
//! serves the admin listener from those totals (it may have threads; the
//! master may not) and is forked again if it dies. Without `--admin` there
//! is no board and children publish nothing.
//!
//! # Logs
//!
//! Each child has its own access-log buffer (a copy made by fork, empty at
//! that moment) and flushes it from its housekeeping thread every 250 ms
//! and at exit. `AccessLog` writes whole lines with one `write` to an
//! `O_APPEND` descriptor shared by all processes, so lines from different
//! processes never interleave.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use pipeline::stats::Worker;
use pipeline::{serve_blocking, serve_blocking_queued, Pipeline, BLOCKING_TICK};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use transport::Shutdown;

use crate::board::{Board, Ledger, SlotWriter};
use crate::signals::{self, Obeyed, Voice};
use crate::{Admin, ModelEnv, Tuning};

/// How often the master looks at the scoreboard and spawns or retires.
const TICK: Duration = Duration::from_secs(1);

/// Most children spawned in one tick (Apache's `MAX_SPAWN_RATE`).
const MAX_SPAWN_RATE: usize = 32;

/// How often a child's housekeeping thread flushes its log and reports.
const HOUSEKEEPING: Duration = Duration::from_millis(250);

/// Stack per child thread: the request path is shallow (as in `pool`).
pub(crate) const STACK_SIZE: usize = 256 << 10;

/// How the number of children moves.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scaling {
    /// Keep between `min_idle` and `max_idle` idle workers over all
    /// children, adding or retiring whole children, each of which brings
    /// `unit` workers; never more than `max_children` children.
    /// `start` children are forked at once (Apache's StartServers), at
    /// least enough for `min_idle`.
    Spare { unit: usize, min_idle: usize, max_idle: usize, max_children: usize, start: usize },
    /// Exactly this many children; a dead one is replaced.
    Fixed { children: usize },
}

/// What a child runs: serve until `child.stop` fires or it retires, then
/// return (the runtime flushes the log and exits).
pub(crate) type Body = fn(&Child);

/// Runs a process model: forks the children, keeps their number right,
/// stops them all on SIGTERM/SIGINT, and returns once every child is reaped.
/// `workers_per_child` bounds a child's scoreboard lines.
pub(crate) fn run(env: ModelEnv, scaling: Scaling, workers_per_child: usize, body: Body) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, admin } = env;
    let board = match &admin {
        Some(_) => {
            let slots = match scaling {
                Scaling::Spare { max_children, .. } => max_children,
                Scaling::Fixed { children } => children,
            };
            let (board, ledger) = Board::create(slots.max(1), workers_per_child.max(1))?;
            Some((Arc::new(board), ledger))
        }
        None => None,
    };
    let (board, ledger) = board.unzip();
    // Blocking accept with the tick as timeout (see "Accept" above). This
    // is the socket's state, shared by every child: set it once, here.
    listener.set_nonblocking(false)?;
    transport::listener::set_accepted_defaults(&listener, BLOCKING_TICK)?;
    let mut mask = handled_signals();
    mask.add(Signal::SIGCHLD);
    // The mask stays blocked after we return: serve.rs exits right away, and
    // unblocking could let a late SIGTERM kill the process with status ≠ 0.
    mask.thread_block()?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
    let (reports_rx, reports_tx) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    let (pod_rx, pod_tx) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    let mut master = Master {
        private: Some(Private { signals, reports_rx, pod_tx, server_stop: shutdown }),
        shared: Some(Shared { listener, reports_tx, pod_rx }),
        pipeline,
        tuning,
        scaling,
        body,
        pid: nix::unistd::getpid(),
        children: Vec::new(),
        next_serial: 0,
        spawn_rate: 1,
        stopping: false,
        carry: Vec::new(),
        slots_taken: vec![false; board.as_ref().map_or(0, |b| b.slots())],
        board,
        ledger,
        admin: admin.map(|admin| AdminKid { admin, pid: None }),
    };
    let result = master.serve();
    if let Err(e) = &result {
        master.pipeline.error_log.error(format_args!("master: {e}; stopping"));
    }
    // However serving ended, no child outlives the master.
    master.stop_children();
    result
}

/// Descriptors only the master uses; a child closes them first thing.
struct Private {
    signals: SignalFd,
    reports_rx: OwnedFd,
    pod_tx: OwnedFd,
    /// The server's stop request: meaningless in a child (its pipe is
    /// shared across fork), triggered by the master for completeness.
    server_stop: Shutdown,
}

/// Descriptors the master keeps only to hand them to future children.
struct Shared {
    listener: TcpListener,
    reports_tx: OwnedFd,
    pod_rx: OwnedFd,
}

/// The master's view of one child.
#[derive(Debug)]
struct Kid {
    pid: Pid,
    serial: u32,
    /// Its slot on the board (with `--admin`).
    slot: Option<usize>,
    idle: usize,
    busy: usize,
    /// Retiring: not counted as spare capacity any more.
    leaving: bool,
}

struct Master {
    private: Option<Private>,
    shared: Option<Shared>,
    pipeline: Arc<Pipeline>,
    tuning: Tuning,
    scaling: Scaling,
    body: Body,
    pid: Pid,
    children: Vec<Kid>,
    next_serial: u32,
    spawn_rate: usize,
    stopping: bool,
    /// A partial report left by the last read (cannot happen with atomic
    /// pipe writes; kept so a surprise costs nothing).
    carry: Vec<u8>,
    /// The statistics board and its ledger (with `--admin`).
    board: Option<Arc<Board>>,
    ledger: Option<Ledger>,
    /// Board slots owned by a live child.
    slots_taken: Vec<bool>,
    /// The admin child (with `--admin`).
    admin: Option<AdminKid>,
}

/// `--admin`'s listener and server, and the child serving it now.
struct AdminKid {
    admin: Admin,
    pid: Option<Pid>,
}

impl Master {
    fn private(&self) -> &Private {
        self.private.as_ref().expect("master descriptors")
    }

    fn shared(&self) -> &Shared {
        self.shared.as_ref().expect("shared descriptors")
    }

    /// Until a stop is requested (`Ok`) or the master cannot go on (`Err`).
    fn serve(&mut self) -> io::Result<()> {
        let first = match self.scaling {
            Scaling::Spare { unit, min_idle, max_children, start, .. } => {
                min_idle.div_ceil(unit.max(1)).max(start).clamp(1, max_children)
            }
            Scaling::Fixed { children } => children,
        };
        for _ in 0..first {
            self.spawn()?;
        }
        self.spawn_admin()?;
        let mut next_tick = Instant::now() + TICK;
        loop {
            if self.wait_signals(next_tick.saturating_duration_since(Instant::now()))? {
                return Ok(());
            }
            self.reap();
            if Instant::now() >= next_tick {
                self.read_reports();
                self.maintain();
                next_tick = Instant::now() + TICK;
            }
        }
    }

    /// Waits up to `timeout` for signals and handles them; true once
    /// SIGTERM or SIGINT arrived. SIGCHLD only wakes us: the caller reaps.
    fn wait_signals(&self, timeout: Duration) -> io::Result<bool> {
        let signals = &self.private().signals;
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec { tv_sec: 1, tv_nsec: 0 });
        match poll(&mut [PollFd::new(signals, PollFlags::IN)], Some(&timeout)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let mut stop = false;
        while let Some(info) = signals.read_signal()? {
            match signals::obey(info.ssi_signo as i32, &self.pipeline, Voice::Server) {
                Obeyed::Stop => stop = true,
                Obeyed::LogsReopened => {
                    for kid in &self.children {
                        let _ = kill(kid.pid, Signal::SIGUSR1);
                    }
                }
                Obeyed::Nothing => {}
            }
        }
        Ok(stop)
    }

    /// Forks one child. In the child this never returns.
    fn spawn(&mut self) -> io::Result<()> {
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1);
        let slot = self.slots_taken.iter().position(|taken| !taken);
        if self.board.is_some() && slot.is_none() {
            self.pipeline.error_log.warn(format_args!(
                "master: no free statistics slot; this child's requests will not show on the admin pages"
            ));
        }
        match fork()? {
            Forked::Parent(pid) => {
                let idle = match self.scaling {
                    Scaling::Spare { unit, .. } => unit,
                    Scaling::Fixed { .. } => 0,
                };
                if let Some(i) = slot {
                    self.slots_taken[i] = true;
                }
                self.children.push(Kid { pid, serial, slot, idle, busy: 0, leaving: false });
                Ok(())
            }
            Forked::Child => self.become_child(serial, slot),
        }
    }

    /// Forks the admin child, if there is `--admin` and none runs.
    fn spawn_admin(&mut self) -> io::Result<()> {
        if self.stopping || !matches!(&self.admin, Some(AdminKid { pid: None, .. })) {
            return Ok(());
        }
        match fork()? {
            Forked::Parent(pid) => {
                if let Some(admin) = &mut self.admin {
                    admin.pid = Some(pid);
                }
                Ok(())
            }
            Forked::Child => self.become_admin(),
        }
    }

    /// The admin child: serves `--admin` from the board until killed.
    fn become_admin(&mut self) -> ! {
        drop(self.private.take());
        drop(self.shared.take());
        self.children = Vec::new();
        let (Some(AdminKid { admin, .. }), Some(board)) = (self.admin.take(), self.board.clone()) else {
            std::process::exit(71)
        };
        let started = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
            .map_err(io::Error::from)
            .and_then(|()| {
                if nix::unistd::getppid() != self.pid {
                    return Err(io::Error::other("the master died during the fork"));
                }
                // Nothing to finish here: TERM and INT end it at once.
                sigset(&[Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD]).thread_unblock()?;
                Ok(())
            });
        if let Err(e) = started {
            self.pipeline.error_log.error(format_args!("admin child: cannot start: {e}"));
            std::process::exit(71);
        }
        let stats = self.pipeline.stats.clone();
        let serve = admin.serve.clone();
        (serve)(admin.listener, &|| board.total(stats.uptime()));
        std::process::exit(0)
    }

    /// Reaps every child that has exited, without blocking.
    fn reap(&mut self) {
        loop {
            match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => {
                    self.forget(pid, &format!("exited with status {code}"), code == 0)
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) => {
                    self.forget(pid, &format!("was killed by {sig}"), false)
                }
                Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => return,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    self.pipeline.error_log.error(format_args!("master: waitpid: {e}"));
                    return;
                }
            }
        }
    }

    fn forget(&mut self, pid: Pid, how: &str, clean: bool) {
        if let Some(admin) = self.admin.as_mut().filter(|a| a.pid == Some(pid)) {
            admin.pid = None;
            if !self.stopping {
                self.pipeline.error_log.warn(format_args!("admin child {pid} {how}; starting another"));
            }
            return;
        }
        let Some(i) = self.children.iter().position(|k| k.pid == pid) else { return };
        let kid = self.children.swap_remove(i);
        if let (Some(slot), Some(board), Some(ledger)) = (kid.slot, &self.board, &mut self.ledger) {
            if let Err(e) = board.fold(ledger, slot, kid.serial) {
                self.pipeline.error_log.error(format_args!("master: statistics board: {e}"));
            }
            self.slots_taken[slot] = false;
        }
        let expected = self.stopping || (clean && kid.leaving);
        if !expected {
            self.pipeline.error_log.warn(format_args!(
                "child {pid} {how} unexpectedly; it is replaced if the spare rules want it"
            ));
        }
    }

    /// Applies the snapshots children sent since the last tick.
    fn read_reports(&mut self) {
        let mut buf = [0u8; REPORT_LEN * 256];
        loop {
            match rustix::io::read(&self.private().reports_rx, &mut buf) {
                Ok(0) => break,
                Ok(n) => self.carry.extend_from_slice(&buf[..n]),
                Err(Errno::INTR) => {}
                Err(_) => break, // EAGAIN: drained
            }
        }
        let whole = self.carry.len() / REPORT_LEN * REPORT_LEN;
        for msg in self.carry[..whole].chunks_exact(REPORT_LEN) {
            let report = Report::decode(msg);
            if let Some(kid) = self.children.iter_mut().find(|k| k.serial == report.serial) {
                kid.idle = report.idle as usize;
                kid.busy = report.busy as usize;
                // Sticky: snapshots from two threads may arrive out of order.
                kid.leaving |= report.leaving;
            }
        }
        self.carry.drain(..whole);
    }

    /// The once-a-tick decision: spawn, retire or replace.
    fn maintain(&mut self) {
        // A retirement no child took within a tick is stale: load came back.
        let mut stale = [0u8; 64];
        while matches!(rustix::io::read(&self.shared().pod_rx, &mut stale), Ok(1..)) {}
        if let Err(e) = self.spawn_admin() {
            self.pipeline.error_log.error(format_args!("master: cannot fork the admin child: {e}"));
        }
        match self.scaling {
            Scaling::Fixed { children } => {
                for _ in self.children.len()..children {
                    if let Err(e) = self.spawn() {
                        self.pipeline.error_log.error(format_args!("master: cannot fork: {e}"));
                        break;
                    }
                }
            }
            Scaling::Spare { min_idle, max_idle, max_children, .. } => {
                let staying = self.children.iter().filter(|k| !k.leaving);
                let idle: usize = staying.clone().map(|k| k.idle).sum();
                let live = self.children.len();
                if idle < min_idle && live < max_children {
                    for _ in 0..self.spawn_rate.min(max_children - live) {
                        if let Err(e) = self.spawn() {
                            self.pipeline.error_log.error(format_args!("master: cannot fork: {e}"));
                            break;
                        }
                    }
                    self.spawn_rate = (self.spawn_rate * 2).min(MAX_SPAWN_RATE);
                } else {
                    self.spawn_rate = 1;
                    if idle > max_idle && staying.count() > 1 {
                        let _ = rustix::io::write(&self.private().pod_tx, b"!");
                    }
                }
            }
        }
    }

    /// Graceful stop of every child, bounded by `shutdown_timeout`.
    fn stop_children(&mut self) {
        self.stopping = true;
        // Stop listening now, for every process sharing the socket (see
        // "Stopping" above): new connections are refused at once even
        // while children finish their in-flight responses.
        let _ = rustix::net::shutdown(&self.shared().listener, rustix::net::Shutdown::Read);
        self.private().server_stop.trigger();
        if !self.children.is_empty() {
            self.pipeline.error_log.info(format_args!(
                "stopping: {} children finishing in-flight requests",
                self.children.len()
            ));
        }
        for kid in &self.children {
            let _ = kill(kid.pid, Signal::SIGTERM);
        }
        let admin_pid = self.admin.as_ref().and_then(|a| a.pid);
        if let Some(pid) = admin_pid {
            let _ = kill(pid, Signal::SIGTERM);
        }
        let deadline = Instant::now() + self.tuning.shutdown_timeout;
        while !self.children.is_empty() || self.admin.as_ref().is_some_and(|a| a.pid.is_some()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.wait_signals(left).is_err() {
                break;
            }
            self.reap();
        }
        if !self.children.is_empty() {
            self.pipeline.error_log.warn(format_args!(
                "shutdown timeout: killing {} children with requests in flight",
                self.children.len()
            ));
            for kid in &self.children {
                let _ = kill(kid.pid, Signal::SIGKILL);
            }
            while let Some(kid) = self.children.pop() {
                while matches!(waitpid(kid.pid, None), Err(nix::errno::Errno::EINTR)) {}
            }
        }
        if let Some(pid) = self.admin.as_mut().and_then(|a| a.pid.take()) {
            let _ = kill(pid, Signal::SIGKILL);
            while matches!(waitpid(pid, None), Err(nix::errno::Errno::EINTR)) {}
        }
    }

    /// The child's side of [`spawn`](Self::spawn): close what only the
    /// master needs, set up, run the model's body, exit.
    fn become_child(&mut self, serial: u32, slot: Option<usize>) -> ! {
        drop(self.private.take());
        drop(self.admin.take());
        self.children = Vec::new();
        let shared = self.shared.take().expect("shared descriptors");
        let code = match Child::start(shared, serial, slot, self) {
            Ok(child) => {
                // Panics in the body end the child, not the master's code
                // this process was forked from.
                let outcome = catch_unwind(AssertUnwindSafe(|| (self.body)(&child)));
                child.status.leaving.store(true, Ordering::Relaxed);
                child.status.send();
                child.pipeline.flush_logs();
                child.publisher.publish_last(&child.pipeline);
                if outcome.is_ok() {
                    0
                } else {
                    70
                }
            }
            Err(e) => {
                self.pipeline.error_log.error(format_args!("child: cannot start: {e}"));
                71
            }
        };
        std::process::exit(code)
    }
}

/// What [`fork`] returned, in which process.
enum Forked {
    Parent(Pid),
    Child,
}

/// `fork()`, refused unless this process has exactly one thread.
#[allow(unsafe_code)]
fn fork() -> io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map_err(|e| io::Error::other(format!("cannot count this process's threads in /proc: {e}")))?
        .count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "refusing to fork a process with {threads} threads (process models must run before any thread starts)"
        )));
    }
    // SAFETY: nix's contract for `fork` is that in a *multi-threaded*
    // process the child may only call async-signal-safe functions (another
    // thread could have held a lock — malloc's, stdout's, a `Mutex` in the
    // pipeline — that nobody in the child would ever release). This process
    // has exactly one thread, checked just above, and nothing between the
    // check and the fork can start another: serve.rs runs forking models on
    // the main thread before it starts any thread, and the master never
    // starts one. So no lock is held by anyone else at the fork, and the
    // child is an ordinary single-threaded copy that may run any code. It
    // runs only its own: `become_child` ends in `process::exit` and never
    // returns into the master's frames.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
    }
}

/// [`signals::HANDLED`], as a mask.
fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in signals::HANDLED {
        set.add(Signal::try_from(s.as_raw()).expect("a signal both crates name"));
    }
    set
}

fn sigset(signals: &[Signal]) -> SigSet {
    let mut set = SigSet::empty();
    for &s in signals {
        set.add(s);
    }
    set
}

/// Bytes per report message (well under `PIPE_BUF`, so writes are atomic).
const REPORT_LEN: usize = 16;

/// One child's state, as its housekeeping thread sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Report {
    serial: u32,
    idle: u32,
    busy: u32,
    leaving: bool,
}

impl Report {
    fn encode(&self) -> [u8; REPORT_LEN] {
        let mut b = [0u8; REPORT_LEN];
        b[0..4].copy_from_slice(&self.serial.to_le_bytes());
        b[4..8].copy_from_slice(&self.idle.to_le_bytes());
        b[8..12].copy_from_slice(&self.busy.to_le_bytes());
        b[12] = self.leaving.into();
        b
    }

    fn decode(b: &[u8]) -> Report {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Report { serial: word(0), idle: word(4), busy: word(8), leaving: b[12] != 0 }
    }
}

/// A child's counts, kept by its threads and reported by housekeeping.
#[derive(Debug)]
struct Status {
    serial: u32,
    idle: AtomicU32,
    busy: AtomicU32,
    leaving: AtomicBool,
    reports: OwnedFd,
}

impl Status {
    fn snapshot(&self) -> Report {
        Report {
            serial: self.serial,
            idle: self.idle.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            leaving: self.leaving.load(Ordering::Relaxed),
        }
    }

    /// Sends the current snapshot; false if the pipe was full (the next
    /// snapshot repairs it) or the master is gone.
    fn send(&self) -> Option<Report> {
        let report = self.snapshot();
        matches!(rustix::io::write(&self.reports, &report.encode()), Ok(REPORT_LEN)).then_some(report)
    }
}

/// What a model's child body gets.
pub(crate) struct Child {
    /// The shared listening socket: blocking, `SO_RCVTIMEO` = [`BLOCKING_TICK`].
    listener: TcpListener,
    /// The request core (this process's copy: its own cache and log buffer).
    pub pipeline: Arc<Pipeline>,
    /// Knobs.
    pub tuning: Tuning,
    /// This child's stop request, created after the fork: fires on SIGTERM
    /// or SIGINT, or when the child retires.
    pub stop: Shutdown,
    status: Arc<Status>,
    pod: OwnedFd,
    publisher: Arc<Publisher>,
}

/// A child's statistics on the board (a no-op without `--admin`). The
/// writer is gone after the last publication.
#[derive(Debug)]
struct Publisher(Option<(Arc<Board>, std::sync::Mutex<Option<SlotWriter>>)>);

impl Publisher {
    fn publish(&self, pipeline: &Pipeline) {
        self.publish_then(pipeline, false);
    }

    /// The publication before `exit`: the housekeeping thread, still
    /// running, must not start another one that `exit` would tear.
    fn publish_last(&self, pipeline: &Pipeline) {
        self.publish_then(pipeline, true);
    }

    fn publish_then(&self, pipeline: &Pipeline, last: bool) {
        let Some((board, writer)) = &self.0 else { return };
        let mut writer = writer.lock().unwrap_or_else(|e| e.into_inner());
        let Some(w) = writer.as_mut() else { return };
        let snap = pipeline::stats::Stats::of_pipeline(pipeline);
        if let Err(e) = board.publish(w, &snap) {
            pipeline.error_log.error(format_args!("child: statistics board: {e}"));
        }
        if last {
            *writer = None;
        }
    }
}

/// What [`Child::accept`] got.
pub(crate) enum Accepted {
    /// A connection.
    Conn(TcpStream),
    /// Nothing for a whole [`BLOCKING_TICK`] (or a transient error): look
    /// at the stop flag and maybe retire, then accept again.
    Idle,
    /// The listener was shut down (the server is stopping): accept no more.
    Closed,
}

impl Child {
    /// Sets up the child's process: parent-death signal, signal mask,
    /// housekeeping thread.
    fn start(shared: Shared, serial: u32, slot: Option<usize>, master: &Master) -> io::Result<Child> {
        // A master killed with SIGKILL must not leave children serving on.
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))?;
        if nix::unistd::getppid() != master.pid {
            return Err(io::Error::other("the master died during the fork"));
        }
        // TERM, INT and USR1 stay blocked (inherited) and are read from this
        // child's own signalfd; CHLD goes back to normal, for CGI children.
        sigset(&[Signal::SIGCHLD]).thread_unblock()?;
        let mask = handled_signals();
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        let Shared { listener, reports_tx, pod_rx } = shared;
        let status = Arc::new(Status {
            serial,
            idle: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            leaving: AtomicBool::new(false),
            reports: reports_tx,
        });
        let publisher = Arc::new(Publisher(match (&master.board, slot) {
            (Some(board), Some(slot)) => {
                Some((board.clone(), std::sync::Mutex::new(Some(board.writer(slot, serial)?))))
            }
            _ => None,
        }));
        let child = Child {
            listener,
            pipeline: master.pipeline.clone(),
            tuning: master.tuning.clone(),
            stop: Shutdown::new()?,
            status: status.clone(),
            pod: pod_rx,
            publisher: publisher.clone(),
        };
        // Trace rows name connections (pid-free): keep each child's numbers apart.
        child.pipeline.stats.number_conns_from(u64::from(serial) << 40);
        let (pipeline, stop) = (child.pipeline.clone(), child.stop.clone());
        thread::Builder::new()
            .name("housekeeping".into())
            .stack_size(STACK_SIZE)
            .spawn(move || housekeeping(&signals, &pipeline, &stop, &status, &publisher))?;
        Ok(child)
    }

    /// Blocking accept on the shared listener (one waiter woken per
    /// connection; returns [`Accepted::Idle`] every [`BLOCKING_TICK`]).
    pub fn accept(&self) -> Accepted {
        match self.listener.accept() {
            Ok((stream, _)) => Accepted::Conn(stream),
            Err(e) => match Errno::from_io_error(&e) {
                // SO_RCVTIMEO passed; a signal; a peer that gave up.
                Some(Errno::AGAIN | Errno::INTR | Errno::CONNABORTED) => Accepted::Idle,
                Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM) => {
                    // Out of descriptors or memory: back off, don't spin.
                    self.pipeline
                        .error_log
                        .error_once("accept", format_args!("accept: {e}: {}", crate::ACCEPT_HINT));
                    thread::sleep(Duration::from_millis(50));
                    Accepted::Idle
                }
                // EINVAL: the master shut the listener down.
                Some(Errno::INVAL) => Accepted::Closed,
                _ => {
                    self.pipeline.error_log.error(format_args!("accept: {e}"));
                    Accepted::Closed
                }
            },
        }
    }

    /// Serves one connection to its end, counted busy meanwhile (for the
    /// master and on the scoreboard line `me`). A panic in the request path
    /// is contained to the connection: the thread (or process) goes on
    /// serving.
    pub fn serve(&self, stream: TcpStream, me: &Worker, queued: Option<Duration>) {
        self.status.idle.fetch_sub(1, Ordering::Relaxed);
        self.status.busy.fetch_add(1, Ordering::Relaxed);
        me.busy();
        let served = catch_unwind(AssertUnwindSafe(|| match queued {
            Some(waited) => serve_blocking_queued(stream, &self.pipeline, &self.stop, waited),
            None => serve_blocking(stream, &self.pipeline, &self.stop),
        }));
        if served.is_err() {
            self.pipeline.error_log.error(format_args!("a connection handler panicked; connection dropped"));
        }
        me.idle();
        self.status.busy.fetch_sub(1, Ordering::Relaxed);
        self.status.idle.fetch_add(1, Ordering::Relaxed);
    }

    /// A scoreboard line for a worker of this child, named `pid/name`.
    pub fn worker(&self, name: &str) -> Worker {
        self.pipeline.stats.worker(format!("{}/{name}", std::process::id()))
    }

    /// Counts workers (threads, or the process itself) that start (`+1`)
    /// or stop (`-1`) waiting for connections.
    pub fn idle_workers(&self, delta: i32) {
        if delta >= 0 {
            self.status.idle.fetch_add(delta.unsigned_abs(), Ordering::Relaxed);
        } else {
            self.status.idle.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// Takes a retirement order from the pipe of death, if there is one;
    /// call only when idle. On true the child has told the master it is
    /// leaving and triggered its own stop: stop accepting, finish, return.
    pub fn retire_requested(&self) -> bool {
        let mut byte = [0u8; 1];
        if !matches!(rustix::io::read(&self.pod, &mut byte), Ok(1)) {
            return false;
        }
        self.status.leaving.store(true, Ordering::Relaxed);
        self.status.send();
        self.stop.trigger();
        true
    }
}

/// A child's second thread: signals, log flushing and status reports.
/// Runs until the process exits.
fn housekeeping(
    signals: &SignalFd,
    pipeline: &Pipeline,
    stop: &Shutdown,
    status: &Status,
    publisher: &Publisher,
) {
    let tick = Timespec::try_from(HOUSEKEEPING).expect("small duration");
    let mut sent: Option<Report> = None;
    loop {
        let _ = poll(&mut [PollFd::new(signals, PollFlags::IN)], Some(&tick));
        while let Ok(Some(info)) = signals.read_signal() {
            // A hangup reaches the whole process group (a closing
            // terminal): the master speaks for the server; a child only
            // reopens its logs, as the master asks on its own HUP.
            if signals::obey(info.ssi_signo as i32, pipeline, Voice::Child) == Obeyed::Stop {
                stop.trigger();
            }
        }
        pipeline.flush_logs();
        publisher.publish(pipeline);
        if sent != Some(status.snapshot()) {
            if let Some(report) = status.send() {
                sent = Some(report);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        let r = Report { serial: 0xdead_beef, idle: 25, busy: 3, leaving: true };
        assert_eq!(Report::decode(&r.encode()), r);
    }

    #[test]
    fn fork_is_refused_with_threads_running() {
        // The test harness runs this on a thread of its own, so the process
        // has at least two: the guard in front of the `unsafe` must say no.
        let helper = thread::spawn(|| thread::sleep(Duration::from_millis(200)));
        let err = fork().err().expect("fork must be refused");
        assert!(err.to_string().contains("refusing to fork"), "{err}");
        helper.join().unwrap();
    }
}
