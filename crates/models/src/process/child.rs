//! A process model's child: its runtime (signals, log flusher, status
//! reports, statistics published for the admin child), accept and retire.

use super::*;
use crate::gate::{Door, Gate};
use pipeline::{refuse_at_capacity, Client};
use transport::accept::{self, Failed};

/// Bytes per report message (well under `PIPE_BUF`, so writes are atomic).
pub(super) const REPORT_LEN: usize = 16;

/// One child's state, as its housekeeping thread sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Report {
    pub(super) serial: u32,
    pub(super) idle: u32,
    pub(super) busy: u32,
    pub(super) leaving: bool,
}

impl Report {
    pub(super) fn encode(&self) -> [u8; REPORT_LEN] {
        let mut b = [0u8; REPORT_LEN];
        b[0..4].copy_from_slice(&self.serial.to_le_bytes());
        b[4..8].copy_from_slice(&self.idle.to_le_bytes());
        b[8..12].copy_from_slice(&self.busy.to_le_bytes());
        b[12] = self.leaving.into();
        b
    }

    pub(super) fn decode(b: &[u8]) -> Report {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Report { serial: word(0), idle: word(4), busy: word(8), leaving: b[12] != 0 }
    }
}

/// A child's counts, kept by its threads and reported by housekeeping.
#[derive(Debug)]
pub(super) struct Status {
    pub(super) serial: u32,
    pub(super) idle: AtomicU32,
    pub(super) busy: AtomicU32,
    pub(super) leaving: AtomicBool,
    pub(super) reports: OwnedFd,
}

impl Status {
    pub(super) fn snapshot(&self) -> Report {
        Report {
            serial: self.serial,
            idle: self.idle.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            leaving: self.leaving.load(Ordering::Relaxed),
        }
    }

    /// Sends the current snapshot; false if the pipe was full (the next
    /// snapshot repairs it) or the master is gone.
    pub(super) fn send(&self) -> Option<Report> {
        let report = self.snapshot();
        matches!(rustix::io::write(&self.reports, &report.encode()), Ok(REPORT_LEN)).then_some(report)
    }
}

/// What a model's child body gets.
pub(crate) struct Child {
    /// The shared listening socket: blocking, `SO_RCVTIMEO` = [`BLOCKING_TICK`].
    pub(super) listener: TcpListener,
    /// The request core (this process's copy: its own cache and log buffer).
    pub pipeline: Arc<Pipeline>,
    /// Knobs.
    pub tuning: Tuning,
    /// This child's stop request, created after the fork: fires on SIGTERM
    /// or SIGINT, or when the child retires.
    pub stop: Shutdown,
    pub(super) status: Arc<Status>,
    pub(super) pod: OwnedFd,
    pub(super) publisher: Arc<Publisher>,
}

/// A child's statistics on the board (a no-op without `--admin`). The
/// writer is gone after the last publication.
#[derive(Debug)]
pub(super) struct Publisher(pub(super) Option<(Arc<Board>, std::sync::Mutex<Option<SlotWriter>>)>);

impl Publisher {
    pub(super) fn publish(&self, pipeline: &Pipeline) {
        self.publish_then(pipeline, false);
    }

    /// The publication before `exit`: the housekeeping thread, still
    /// running, must not start another one that `exit` would tear.
    pub(super) fn publish_last(&self, pipeline: &Pipeline) {
        self.publish_then(pipeline, true);
    }

    pub(super) fn publish_then(&self, pipeline: &Pipeline, last: bool) {
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
    pub(super) fn start(
        shared: Shared,
        serial: u32,
        slot: Option<usize>,
        master: &Master,
    ) -> io::Result<Child> {
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
        match accept::accept(&self.listener, accept::Mode::Blocking) {
            Ok((stream, _)) => Accepted::Conn(stream),
            // SO_RCVTIMEO passed; a signal; a peer that gave up.
            Err((Failed::Empty | Failed::Retry, _)) => Accepted::Idle,
            Err((Failed::Pause, e)) => {
                // Out of descriptors or memory: back off, don't spin.
                self.pipeline.error_log.accept_paused(&e);
                thread::sleep(accept::PAUSE);
                Accepted::Idle
            }
            // The master shut the listener down.
            Err((Failed::Gone, _)) => Accepted::Closed,
        }
    }

    /// Serves one connection to its end, counted busy meanwhile (for the
    /// master and on the scoreboard line `me`) — unless its address is over
    /// `--max-conns-per-ip`, counted over every child: then a 429. A panic
    /// in the request path is contained to the connection: the process
    /// goes on serving.
    pub fn serve(&self, stream: TcpStream, me: &Worker) {
        let Ok(peer) = stream.peer_addr() else { return };
        let Ok(_slot) = self.pipeline.admit(peer.ip()) else {
            return refuse_at_capacity(stream, &self.pipeline, 429);
        };
        self.status.idle.fetch_sub(1, Ordering::Relaxed);
        self.status.busy.fetch_add(1, Ordering::Relaxed);
        me.busy();
        let served = catch_unwind(AssertUnwindSafe(|| serve_blocking(stream, &self.pipeline, &self.stop)));
        if served.is_err() {
            self.pipeline.error_log.error(format_args!("a connection handler panicked; connection dropped"));
        }
        me.idle();
        self.status.busy.fetch_sub(1, Ordering::Relaxed);
        self.status.idle.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs this child's gate (`gate.rs`) on the shared listener until
    /// the child stops or retires: connections reach `dispatch` with a
    /// whole request head. A retirement is taken only after a quiet wait.
    /// `room` says whether to accept now (see `gate::Door`).
    pub(crate) fn gate(
        &self,
        gate: &mut Gate,
        room: &dyn Fn() -> bool,
        dispatch: impl FnMut(Client) -> bool,
    ) {
        let quiet = || !self.retire_requested();
        let door = Door { shared: true, room };
        if let Err(e) = gate.run(&self.listener, door, &self.stop, &self.pipeline, dispatch, quiet) {
            self.pipeline.error_log.error(format_args!("gate: {e}"));
        }
    }

    /// Serves a client whose request head is complete, counted busy
    /// meanwhile, as [`serve`](Self::serve); gives it back when it waits
    /// for the client again, `None` once it is closed (or its handler panicked).
    pub fn serve_ready(&self, client: Client, me: &Worker) -> Option<Client> {
        self.status.idle.fetch_sub(1, Ordering::Relaxed);
        self.status.busy.fetch_add(1, Ordering::Relaxed);
        me.busy();
        let served =
            catch_unwind(AssertUnwindSafe(|| pipeline::serve_ready(client, &self.pipeline, &self.stop)));
        let back = served.unwrap_or_else(|_| {
            self.pipeline.error_log.error(format_args!("a connection handler panicked; connection dropped"));
            None
        });
        me.idle();
        self.status.busy.fetch_sub(1, Ordering::Relaxed);
        self.status.idle.fetch_add(1, Ordering::Relaxed);
        back
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
pub(super) fn housekeeping(
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
            // acts (logs reopened; on HUP, certificates read again).
            if lifecycle::obey_in_worker(info.ssi_signo as i32, pipeline) == Flow::Stop {
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
