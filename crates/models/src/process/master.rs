//! The master of a process model: forks, reaps and replaces children,
//! keeps the spare count, hears their reports, stops them all.

use super::*;
use transport::turn::Finish;

/// Descriptors only the master uses; a child closes them first thing.
pub(super) struct Private {
    pub(super) signals: SignalFd,
    pub(super) reports_rx: OwnedFd,
    pub(super) pod_tx: OwnedFd,
    /// The server's stop request: meaningless in a child (its pipe is
    /// shared across fork), triggered by the master for completeness.
    pub(super) server_stop: Shutdown,
}

/// Descriptors the master keeps only to hand them to future children.
pub(super) struct Shared {
    pub(super) listener: TcpListener,
    pub(super) reports_tx: OwnedFd,
    pub(super) pod_rx: OwnedFd,
}

/// The master's view of one child.
#[derive(Debug)]
pub(super) struct Kid {
    pub(super) pid: Pid,
    pub(super) serial: u32,
    /// Its slot on the board (with `--admin`).
    pub(super) slot: Option<usize>,
    pub(super) idle: usize,
    pub(super) busy: usize,
    /// Retiring: not counted as spare capacity any more.
    pub(super) leaving: bool,
}

pub(super) struct Master {
    pub(super) private: Option<Private>,
    pub(super) shared: Option<Shared>,
    pub(super) pipeline: Arc<Pipeline>,
    pub(super) tuning: Tuning,
    pub(super) scaling: Scaling,
    /// How `scaling` follows from the knobs (after a reload).
    pub(super) scaling_of: fn(&Tuning) -> Scaling,
    /// Reads the configuration again on SIGHUP.
    pub(super) reload: Option<crate::Reload>,
    pub(super) body: Body,
    pub(super) pid: Pid,
    pub(super) children: Vec<Kid>,
    pub(super) next_serial: u32,
    pub(super) spawn_rate: usize,
    pub(super) stopping: bool,
    /// A partial report left by the last read (cannot happen with atomic
    /// pipe writes; kept so a surprise costs nothing).
    pub(super) carry: Vec<u8>,
    /// The statistics board and its ledger (with `--admin`).
    pub(super) board: Option<Arc<Board>>,
    pub(super) ledger: Option<Ledger>,
    /// Board slots owned by a live child.
    pub(super) slots_taken: Vec<bool>,
    /// The admin child (with `--admin`).
    pub(super) admin: Option<AdminKid>,
}

/// `--admin`'s listener and server, and the child serving it now.
pub(super) struct AdminKid {
    pub(super) admin: Admin,
    pub(super) pid: Option<Pid>,
}

impl Master {
    pub(super) fn private(&self) -> &Private {
        self.private.as_ref().expect("master descriptors")
    }

    pub(super) fn shared(&self) -> &Shared {
        self.shared.as_ref().expect("shared descriptors")
    }

    /// Until a stop is requested (`Ok`) or the master cannot go on (`Err`).
    pub(super) fn serve(&mut self) -> io::Result<()> {
        for _ in 0..self.first_children() {
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

    /// The children forked at start, and by a reload.
    fn first_children(&self) -> usize {
        match self.scaling {
            Scaling::Spare { unit, min_idle, max_children, start, .. } => {
                min_idle.div_ceil(unit.max(1)).max(start).clamp(1, max_children)
            }
            Scaling::Fixed { children } => children,
        }
    }

    /// Waits up to `timeout` for signals and obeys them; true once one
    /// stopped the server. SIGCHLD only wakes us: the caller reaps.
    pub(super) fn wait_signals(&mut self, timeout: Duration) -> io::Result<bool> {
        let signals = &self.private().signals;
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec { tv_sec: 1, tv_nsec: 0 });
        match poll(&mut [PollFd::new(signals, PollFlags::IN)], Some(&timeout)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let mut arrived = Vec::new();
        while let Some(info) = self.private().signals.read_signal()? {
            arrived.push(info.ssi_signo as i32);
        }
        Ok(lifecycle::run(arrived, self)? == Flow::Stop)
    }

    /// Forks one child. In the child this never returns.
    pub(super) fn spawn(&mut self) -> io::Result<()> {
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
    pub(super) fn spawn_admin(&mut self) -> io::Result<()> {
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
    pub(super) fn become_admin(&mut self) -> ! {
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
        // Nothing stops it but the master's TERM.
        match Shutdown::new() {
            Ok(never) => (serve)(admin.listener, &|| board.total(stats.uptime()), &never),
            Err(e) => self.pipeline.error_log.error(format_args!("admin child: {e}")),
        }
        std::process::exit(0)
    }

    /// Reaps every child that has exited, without blocking.
    pub(super) fn reap(&mut self) {
        // A retiring child says so just before it exits, but the SIGCHLD
        // may wake us before the tick reads the reports: read them first,
        // or its retirement would be logged as a crash.
        self.read_reports();
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

    pub(super) fn forget(&mut self, pid: Pid, how: &str, clean: bool) {
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
    pub(super) fn read_reports(&mut self) {
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
    pub(super) fn maintain(&mut self) {
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
    pub(super) fn stop_children(&mut self) {
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
        let mut finish = Finish::default();
        finish.begin(Some(Instant::now() + self.tuning.shutdown_timeout));
        loop {
            let now = Instant::now();
            let drained = self.children.is_empty() && self.admin.as_ref().is_none_or(|a| a.pid.is_none());
            if finish.over(now, drained) {
                break;
            }
            let left = finish.left(now).unwrap_or_default();
            if self.wait_signals(left).is_err() {
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
    pub(super) fn become_child(&mut self, serial: u32, slot: Option<usize>) -> ! {
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

/// A process model's generation: the children forked with one
/// configuration, which the master replaces on SIGHUP.
impl lifecycle::Generation for Master {
    fn error_log(&self) -> &ErrorLog {
        &self.pipeline.error_log
    }

    /// The master's loop returns, and [`Master::stop_children`] follows.
    fn stop(&mut self) {
        self.stopping = true;
    }

    /// The configuration read again, a new generation of children forked
    /// with it, the old one told to finish and leave.
    fn reload(&mut self) -> io::Result<Reload> {
        let new = match &self.reload {
            _ if self.stopping => return Ok(Reload::InPlace),
            None => return Ok(Reload::InPlace),
            Some(reload) => match reload() {
                Ok(new) => new,
                Err(why) => return Ok(Reload::Refused(why)),
            },
        };
        let old: Vec<Pid> = self.children.iter().map(|k| k.pid).collect();
        let serving = self.children.iter().filter(|k| !k.leaving).count();
        self.pipeline = new.pipeline;
        self.tuning = new.tuning;
        self.scaling = (self.scaling_of)(&self.tuning);
        self.spawn_rate = 1;
        for kid in &mut self.children {
            kid.leaving = true;
        }
        // The new children first, so the socket always has takers, and as
        // many as served until now: the clients the old ones held reconnect
        // at once, and growing from the start count at 1, 2, 4… a second
        // would leave them in the backlog for seconds.
        let strength = match self.scaling {
            Scaling::Spare { max_children, .. } => serving.min(max_children),
            Scaling::Fixed { .. } => 0,
        };
        for _ in 0..self.first_children().max(strength) {
            self.spawn()?;
        }
        for pid in old {
            let _ = kill(pid, Signal::SIGTERM);
        }
        Ok(Reload::Started)
    }

    fn hang_up_in_place(&mut self) -> InPlace {
        let done = lifecycle::hang_up_pipeline(&self.pipeline);
        // Each child reopens its logs and reads the certificates again.
        for kid in &self.children {
            let _ = kill(kid.pid, Signal::SIGHUP);
        }
        done
    }

    fn reopen_logs(&mut self) {
        lifecycle::reopen_logs(&self.pipeline);
        for kid in &self.children {
            let _ = kill(kid.pid, Signal::SIGUSR1);
        }
    }
}

/// What [`fork`] returned, in which process.
pub(super) enum Forked {
    Parent(Pid),
    Child,
}

/// `fork()`, refused unless this process has exactly one thread.
#[allow(unsafe_code)]
pub(super) fn fork() -> io::Result<Forked> {
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

/// [`lifecycle::HANDLED`], as a mask.
pub(super) fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in lifecycle::HANDLED {
        set.add(Signal::try_from(s.as_raw()).expect("a signal both crates name"));
    }
    set
}

pub(super) fn sigset(signals: &[Signal]) -> SigSet {
    let mut set = SigSet::empty();
    for &s in signals {
        set.add(s);
    }
    set
}
