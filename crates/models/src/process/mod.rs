//! What the process models (`prefork`, `worker`, `perchild`) share: the
//! master (fork, reap, signals, the spare-count rules) and the runtime of a
//! child (its signals, log flusher, status reports, accept and retirement).
//! The model files only say what a child runs and how the process count
//! moves ([`Scaling`]). Files: this one (the shared types, [`run`]),
//! `master.rs` (the master's loop: fork, reap, the spare count, reports,
//! the admin child, stopping) and `child.rs` (a child's runtime).
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
//! * SIGUSR1 → reopen the master's logs (so children forked later inherit
//!   the new files) and forward the signal to every child;
//! * SIGHUP → read the configuration again (`ModelEnv::reload`): the master
//!   takes the new pipeline and knobs, forks a new generation of children
//!   at full strength (as many as the old one had, at least as many as at
//!   start, within the new maximum) and sends the old ones SIGTERM — they
//!   accept no more, finish their requests and exit, and are not replaced.
//!   A configuration that does not read leaves everything as it is (the
//!   error log says why), and HUP then only reopens the logs and reads the
//!   TLS certificates again, in the master and in every child;
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
use pipeline::lifecycle::{self, Flow, InPlace, Reload};
use pipeline::stats::Worker;
use pipeline::{serve_blocking, ErrorLog, Pipeline, BLOCKING_TICK};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use transport::Shutdown;

use crate::board::{Board, Ledger, SlotWriter};
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
/// `scaling` says how the process count moves under the knobs in force (a
/// reload may change them).
pub(crate) fn run(
    env: ModelEnv,
    scaling: fn(&Tuning) -> Scaling,
    workers_per_child: usize,
    body: Body,
) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, admin, reload } = env;
    let scaling_of = scaling;
    let scaling = scaling_of(&tuning);
    let board = match &admin {
        Some(_) => {
            let slots = match scaling {
                Scaling::Spare { max_children, .. } => max_children,
                Scaling::Fixed { children } => children,
            };
            // Twice: after a reload the old children finish beside the new.
            let (board, ledger) = Board::create(slots.max(1) * 2, workers_per_child.max(1))?;
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
        scaling_of,
        reload,
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

mod child;
mod master;

use child::*;
pub(crate) use child::{Accepted, Child};
use master::*;

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
