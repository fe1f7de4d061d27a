//! `uring` — the `event` loop on completions instead of readiness: one
//! io_uring per `--workers` thread, every connection the same
//! `pipeline::Connection` state machine, whose `step`s the loop performs
//! itself (`uring/socket.rs`): its reads are given the bytes of completed
//! receives, its sends become queued sends.
//!
//! * **Accept**: one multishot accept per loop on the shared listener; each
//!   completion is a new socket. At its share of `--max-connections` a loop
//!   cancels its accept (newcomers go to a loop with room, or wait in the
//!   backlog) and arms it again when a connection closes.
//! * **Registered files**: each socket is installed in the ring's fixed
//!   file table at its slab slot (`FILES_UPDATE`, linked to its receive), so
//!   the ring's operations on it skip the descriptor table.
//! * **Receive**: one multishot receive per connection into the loop's
//!   provided buffer ring (`uring/bufring.rs`): a request that arrives is a
//!   completion with no submission of ours. The connection's reads copy
//!   the bytes from the buffer straight into its own, and the buffer goes
//!   back at once; what it does not read now waits in the socket's inbox.
//!   A connection with too much unread input has its receive cancelled
//!   until it reads (the back-pressure a socket buffer gives).
//! * **Send**: after a drive, what the connection queued goes out as one
//!   `sendmsg` (`MSG_WAITALL`: the kernel finishes a short send itself),
//!   cached bodies by reference; at most one send per connection is in
//!   flight, so the bytes stay in order. A shutdown waits for it. Sends of
//!   at least `MODUS_URING_ZC_MIN` bytes (unset: never) use `SENDMSG_ZC`,
//!   the buffers held until the kernel's notification.
//! * **Files** (`uring/files.rs`): a file chunk is not read but queued as a
//!   file piece, which ends its batch and leaves file → pipe → socket as
//!   two linked `IORING_OP_SPLICE`s per pipeful (the kernel runs them on
//!   io-wq workers), or by the loop's own `sendfile`, or is read and copied
//!   after all (`MODUS_URING_FILES=splice|sendfile|copy`; splice unless
//!   set). On the first two the server keeps files only up to 16 KiB as
//!   bytes, as for `event`.
//! * **Batching**: every submission of a turn and the wait for the next
//!   completions are one `io_uring_enter`; the ring defers its task work to
//!   that call (`DEFER_TASKRUN`), so completions arrive in batches.
//! * **Timers, stop, cap, CGI**: as `event` — a deadline heap read once per
//!   wakeup; the stop pipe and the CGI spawners' waker are polled by the
//!   ring; a running script's pipes get one-shot polls, armed from
//!   `Connection::waiting` after every drive.
//! * **Stopping** (SIGTERM, or a reload's old generation): after the batch
//!   the stop arrived in, every connection is driven as stopping, but one
//!   whose bytes still wait in the kernel (a receive has not taken them:
//!   `FIONREAD`) is not taken for silent, and connections the multishot
//!   accept delivers while it is being cancelled are served, not dropped —
//!   a completion-driven loop must not close a request it has not seen.
//! * **Closing**: a connection leaves its slot only when the kernel has
//!   finished with everything it lent it: its receive cancelled and
//!   completed, its send — every operation of it — completed (or cancelled
//!   at the send timeout).
//!
//! TLS runs over the same socket: `transport::tls::TlsStream` is generic
//! over its `Carrier`, and the ring socket is one; a TLS connection is
//! driven over the session as a `Wire`, its records read from the inbox.

mod bufring;
mod files;
mod send;
mod socket;

use std::io;
use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use pipeline::{ConnInfo, Connection, Mode, Pipeline};
use transport::accept::{self, Failed};
use transport::deadlines::{Deadlines, HasTimer, Timer};
use transport::slab::Slab;
use transport::turn::{self, AcceptPause, Finish};
use transport::Shutdown;

use crate::helpers::{HelperPool, Helpers};
use crate::loop_core::{self, Core, LoopConn, Parts, Settled, Waits};
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};
use bufring::BufRing;
pub(crate) use files::sends_files;
use files::{FilePath, Pipes};
use send::Batch;
use socket::{Link, RingSocket};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "uring",
    paper_name: "SPED",
    summary: "the event loop on io_uring completions: multishot accept and receive, batched sends",
    caps: Caps {
        forks: false,
        event_driven: true,
        staged: false,
        srpt_loop: false,
        // Its `MODUS_URING_FILES` experiment knob (sendfile unless set).
        sendfile: Sendfile::Probed(sends_files),
        pipeline_on_loop: true,
        holds_connection: false,
    },
    knobs: &[Knob::Workers, Knob::MaxConnections],
    run,
};

/// Submission queue entries per ring; the completion queue has 8 times as
/// many (multishot receives complete without submissions).
const RING_ENTRIES: u32 = 512;
/// Provided receive buffers per loop, and their size: a request head fits
/// in one; bodies arrive in several.
const RECV_BUFFERS: u16 = 64;
const RECV_BUFFER_SIZE: usize = 4096;
const BUFFER_GROUP: u16 = 0;
/// Unread input past which a connection's receive is paused, and below
/// which it resumes.
const INBOX_HIGH: usize = 256 << 10;
/// Bytes queued or in flight past which a connection's write says "not
/// now": its send buffer (the kernel's own comes after it), and the size
/// of a splice pipe.
const SEND_WINDOW: usize = 256 << 10;

/// What a completion is for: the top four bits of its user data; the rest
/// is a connection's (or a poll's) slab token (kind 0, so those bits are
/// free) or one of the loop's own.
const OP_SHIFT: u32 = 60;
const OP_LOOP: u64 = 0;
const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_POLL: u64 = 3;
/// Results nobody waits for (registering, closing, shutting, cancelling).
const OP_QUIET: u64 = 4;
/// A file piece's splice into its pipe, and out of it to the socket (or,
/// for `sendfile`, the poll for room).
const OP_FILL: u64 = 5;
const OP_DRAIN: u64 = 6;
const ACCEPT: u64 = 1;
const STOP: u64 = 2;
const WAKER: u64 = 3;
/// The cache's inotify descriptor (`Pipeline::watch_files`).
const FILES: u64 = 4;

fn user_data(op: u64, token: u64) -> u64 {
    op << OP_SHIFT | token
}

/// The one fixed-file value that clears a slot (the kernel reads it at submission).
static CLEAR_SLOT: [RawFd; 1] = [-1];

fn run(env: ModelEnv) -> io::Result<()> {
    // Say why at once, before any loop starts: a kernel without io_uring,
    // a sysctl that disables it, a seccomp filter that refuses it.
    probe()?;
    let knobs = Knobs::from_env()?;
    let loops = env.tuning.workers.max(1);
    let mut spawners = match env.pipeline.settings.cgi {
        Some(_) => Some(HelperPool::start(&env.pipeline, loops, loops, "cgi-spawner", "cgi-spawners")?),
        None => None,
    };
    let result = serve(env, knobs, |i| spawners.as_mut().and_then(|s| s.take(i)));
    if let Some(spawners) = &mut spawners {
        spawners.join();
    }
    result
}

/// Makes (and drops) a small ring, on a thread of its own: the ring's
/// teardown may interrupt its thread's blocking system calls (EINTR), which
/// is harmless on a thread that ends there.
pub(crate) fn probe() -> io::Result<()> {
    let made = thread::scope(|s| s.spawn(|| IoUring::new(2).map(drop)).join());
    match made {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(io::Error::new(e.kind(), unavailable(&e))),
        Err(_) => Err(io::Error::other("--model uring: probing io_uring panicked")),
    }
}

/// What `--model uring` says when the kernel will not make a ring.
pub(crate) fn unavailable(e: &io::Error) -> String {
    let why = match e.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no io_uring (Linux 6.0 or later is needed)".to_string(),
        Some(libc::EPERM) => "io_uring is disabled here (the sysctl kernel.io_uring_disabled, or a \
                              seccomp filter such as a container runtime's default)"
            .to_string(),
        _ => format!("io_uring_setup failed: {e}"),
    };
    format!("--model uring: {why}; use --model event instead")
}

/// Experiments' switches, from the environment (BENCHMARKS.md,
/// "io_uring"): zero-copy sends and batching waits are off unless set,
/// since neither paid on loopback.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    /// `MODUS_URING_FILES`: how file chunks are sent (`uring/files.rs`).
    files: FilePath,
    /// `MODUS_URING_ZC_MIN`: sends of at least this many bytes use `SENDMSG_ZC`.
    zc_min: usize,
    /// `MODUS_URING_BATCH_US`: a wait that found a completion goes on up to
    /// this long for more (`min_wait_usec`, Linux 6.12), so one wakeup
    /// serves several requests; 0: it returns with the first.
    batch_wait_us: u32,
}

/// Completions a batching wait waits for before its `min_wait_usec` is up.
const BATCH: usize = 32;

impl Knobs {
    fn from_env() -> io::Result<Knobs> {
        fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
            std::env::var(name).ok().and_then(|v| v.parse().ok())
        }
        Ok(Knobs {
            files: FilePath::from_env()?,
            zc_min: var("MODUS_URING_ZC_MIN").unwrap_or(usize::MAX),
            batch_wait_us: var("MODUS_URING_BATCH_US").unwrap_or(0),
        })
    }
}

/// The soft open-file limit (`modus serve` has lifted it to the hard one).
fn open_file_limit() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    limit.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

fn serve(
    env: ModelEnv,
    knobs: Knobs,
    mut helpers: impl FnMut(usize) -> Option<Box<dyn Helpers>>,
) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, .. } = env;
    // The ring waits for connections itself; a blocking listener lets it
    // arm its poll rather than fail an attempt with EAGAIN.
    listener.set_nonblocking(false)?;
    rustix::net::sockopt::set_tcp_nodelay(&listener, true)?;
    let workers = tuning.workers.max(1);
    // One shared listener, or (`--reuseport`) one per loop, as in `event`.
    let listeners = crate::event::listeners(listener, workers, tuning.reuseport, &pipeline);
    let mut threads = Vec::new();
    let mut result = Ok(());
    for i in 0..workers {
        let cap = crate::event::loop_share(tuning.max_connections, workers, i);
        let stop = crate::event::StopOnPanic(shutdown.clone());
        let listener = listeners[i % listeners.len()].clone();
        let (pipeline, stopper) = (pipeline.clone(), shutdown.clone());
        let helpers = helpers(i);
        // A ring belongs to the thread that submits to it (SINGLE_ISSUER):
        // each loop is made on its own thread.
        let spawned = thread::Builder::new().name(format!("uring-{i}")).spawn(move || {
            let result = Loop::new(listener, pipeline.clone(), stopper, helpers, cap, knobs)
                .and_then(|mut lp| lp.run());
            if let Err(e) = &result {
                pipeline.error_log.error(format_args!("uring loop: {e}"));
                stop.0.trigger();
            }
            result
        });
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(e) => {
                shutdown.trigger();
                result = Err(e);
                break;
            }
        }
    }
    drop(listeners);
    for thread in threads {
        let outcome = thread.join().unwrap_or_else(|_| Err(io::Error::other("a uring loop panicked")));
        result = result.and(outcome);
    }
    result
}

/// A multishot operation's state: armed, asked to stop, or ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shot {
    Armed,
    Cancelling,
    Off,
}

struct Conn {
    link: Link,
    conn: Connection,
    /// Its address's place under `--max-conns-per-ip`, given back on drop.
    _ip: Option<pipeline::IpSlot>,
    waits: Waits,
    /// None while a spawner has its request (unless it is closing).
    timer: Timer,
    recv: Shot,
    /// The send the kernel holds (in flight, or awaiting its zero-copy notification).
    batch: Option<Box<Batch>>,
    /// Its operations in flight.
    sending: u32,
    notifs: u32,
    /// Closed by the connection; waits for the kernel to give its buffers back.
    closing: bool,
    /// Nothing is left in a TLS session for the socket (always, without TLS).
    sealed: bool,
    /// One-shot polls armed on a script's pipes: (descriptor, poll token).
    polls: Vec<(RawFd, u64)>,
}

impl HasTimer for Conn {
    fn timer(&mut self) -> &mut Timer {
        &mut self.timer
    }
}

impl LoopConn for Conn {
    fn conn(&mut self) -> &mut Connection {
        &mut self.conn
    }

    fn awaits_helper(&self) -> bool {
        self.waits == Waits::Helper && !self.closing
    }

    fn wait(&mut self, waits: Waits) {
        self.waits = waits;
    }
}

impl Conn {
    /// Whether the kernel still holds anything of this connection's, or
    /// its TLS session still has records to hand it.
    fn lent(&self) -> bool {
        self.recv != Shot::Off || self.batch.is_some() || !self.sealed
    }
}

struct Loop {
    ring: IoUring,
    /// Dropped by hand: only once no receive can use it (see `Drop`).
    bufs: ManuallyDrop<BufRing>,
    listener: Option<Arc<TcpListener>>,
    accept: Shot,
    accept_pause: AcceptPause,
    max_conns: usize,
    shutdown: Shutdown,
    finish: Finish,
    /// The stop's completion arrived in the batch being handled.
    stop_asked: bool,
    pipeline: Arc<Pipeline>,
    helpers: Option<Box<dyn Helpers>>,
    mode: Mode,
    conns: Slab<Conn>,
    /// Empty pipes for splicing files (`uring/files.rs`).
    pipes: Pipes,
    /// Armed pipe polls: the connection's token and the descriptor.
    polls: Slab<(u64, RawFd)>,
    /// The fixed-file table's values, by slot: the kernel reads a
    /// `FILES_UPDATE`'s descriptor from here when it runs it.
    fixed: Box<[RawFd]>,
    timers: Deadlines,
    now: Instant,
    knobs: Knobs,
    completions: Vec<(u64, i32, u32)>,
    /// Cache hits are trusted to the inotify watch, whose descriptor the ring polls.
    watching: bool,
}

impl Loop {
    fn new(
        listener: Arc<TcpListener>,
        pipeline: Arc<Pipeline>,
        shutdown: Shutdown,
        helpers: Option<Box<dyn Helpers>>,
        max_conns: usize,
        knobs: Knobs,
    ) -> io::Result<Loop> {
        let ring = IoUring::builder()
            .setup_cqsize(RING_ENTRIES * 8)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_coop_taskrun()
            .build(RING_ENTRIES)
            .map_err(|e| io::Error::new(e.kind(), unavailable(&e)))?;
        // The kernel refuses a fixed-file table larger than the open-file
        // limit (EMFILE), so a loop's share past it would stop the server at
        // start; sized to the limit, the loop holds as many connections as it
        // could have descriptors for and, like `event`, pauses its accepting
        // at that cap instead.
        let max_conns = max_conns.min(open_file_limit()).max(1);
        ring.submitter().register_files_sparse(max_conns as u32)?;
        let bufs = ManuallyDrop::new(BufRing::register(&ring, RECV_BUFFERS, RECV_BUFFER_SIZE, BUFFER_GROUP)?);
        let mode = if helpers.is_some() { Mode::HandOutStreamed } else { Mode::Inline };
        let mut lp = Loop {
            ring,
            bufs,
            listener: Some(listener),
            accept: Shot::Off,
            accept_pause: AcceptPause::default(),
            max_conns,
            shutdown,
            finish: Finish::default(),
            stop_asked: false,
            pipeline,
            helpers,
            mode,
            conns: Slab::new(0),
            pipes: Pipes::default(),
            polls: Slab::new(0),
            fixed: vec![-1; max_conns].into_boxed_slice(),
            timers: Deadlines::default(),
            now: Instant::now(),
            knobs,
            completions: Vec::with_capacity(RING_ENTRIES as usize * 8),
            watching: false,
        };
        let stop = lp.shutdown.wake_fd().as_raw_fd();
        // SAFETY: a poll names a descriptor and no memory; the stop pipe
        // outlives the ring (the loop holds the Shutdown).
        let poll = opcode::PollAdd::new(types::Fd(stop), libc::POLLIN as u32).build();
        unsafe { lp.push(&[poll.user_data(user_data(OP_LOOP, STOP))]) };
        lp.arm_waker();
        lp.watching = lp.pipeline.watch_files().is_some();
        lp.arm_files();
        Ok(lp)
    }

    /// Polls the cache's inotify descriptor, so that a cache hit costs no
    /// `stat` (as in `event`; see `Pipeline::watch_files`).
    fn arm_files(&mut self) {
        if !self.watching {
            return;
        }
        let Some(fd) = self.pipeline.watch_files().map(|fd| fd.as_raw_fd()) else { return };
        // SAFETY: a poll names no memory; the inotify descriptor belongs to
        // the pipeline's cache, which lives as long as the loop's `Arc` of it.
        let poll = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).multi(true).build();
        unsafe { self.push(&[poll.user_data(user_data(OP_LOOP, FILES))]) };
    }

    /// Queues `entries` (linked ones stay in one submission).
    ///
    /// # Safety
    /// Everything the entries point to must stay valid, and unmoved, until
    /// their completions arrive.
    unsafe fn push(&mut self, entries: &[squeue::Entry]) {
        let mut sq = self.ring.submission();
        if sq.capacity() - sq.len() < entries.len() {
            drop(sq);
            // A full queue is submitted early; this costs one more enter.
            let _ = self.ring.submit();
            sq = self.ring.submission();
        }
        for entry in entries {
            // SAFETY: the caller keeps what the entry names alive; there is room (checked above).
            let pushed = unsafe { sq.push(entry) };
            debug_assert!(pushed.is_ok());
        }
    }

    fn arm_waker(&mut self) {
        let Some(helpers) = &self.helpers else { return };
        let fd = helpers.waker().as_fd().as_raw_fd();
        // SAFETY: a poll names no memory; the waker lives as long as the helpers, which the loop holds.
        let poll = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).multi(true).build();
        unsafe { self.push(&[poll.user_data(user_data(OP_LOOP, WAKER))]) };
    }

    fn run(&mut self) -> io::Result<()> {
        let name = thread::current().name().unwrap_or("uring").to_string();
        let me = self.pipeline.stats.worker(name);
        self.watch_listener();
        // At the stop, also until the accept's cancel completed: the ring
        // holds the listening socket while the accept is in flight, and a
        // ring torn down after the process exits lets it take connections
        // a moment longer.
        while !self.finish.over(self.now, self.conns.is_empty() && matches!(self.accept, Shot::Off)) {
            let now = self.now;
            let timeout = turn::wait_timeout(&self.timers, now, self.accept_pause.until());
            me.idle_at(now);
            self.submit_and_wait(timeout)?;
            self.now = Instant::now();
            me.busy_at(self.now);
            let mut completions = std::mem::take(&mut self.completions);
            completions.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            // Changed files first: a request completed in this batch may have
            // been sent after the change (the poll's completion was queued
            // before the receive's, but a hit must not be served before it).
            let files_changed = completions.iter().any(|&(data, _, _)| data == user_data(OP_LOOP, FILES));
            loop_core::files_first(&self.pipeline, files_changed);
            for &(data, result, flags) in &completions {
                self.complete(data, result, flags);
            }
            if self.stop_asked {
                self.begin_stop();
            }
            completions.clear();
            self.completions = completions;
            self.bufs.publish();
            self.end_turn();
        }
        // The last connections' closes were queued after the last submission.
        self.ring.submit()?;
        Ok(())
    }

    /// Submits what the turn queued and waits for a completion (or the timeout).
    fn submit_and_wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let batch = self.knobs.batch_wait_us;
        let result = match timeout {
            None if batch == 0 => self.ring.submit_and_wait(1),
            None => {
                let args = types::SubmitArgs::new().min_wait_usec(batch);
                self.ring.submitter().submit_with_args(BATCH, &args)
            }
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts).min_wait_usec(batch);
                self.ring.submitter().submit_with_args(if batch == 0 { 1 } else { BATCH }, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn complete(&mut self, data: u64, result: i32, flags: u32) {
        let token = data & ((1 << OP_SHIFT) - 1);
        match data >> OP_SHIFT {
            OP_RECV => self.received(token, result, flags),
            OP_SEND => self.sent(token, result, flags),
            OP_FILL | OP_DRAIN => self.file_moved(token, data >> OP_SHIFT, result),
            OP_POLL => self.pipe_ready(token, result),
            OP_LOOP => match token {
                ACCEPT => self.accepted(result, flags),
                // After the batch: a receive completed in it may hold a
                // request for a connection the stop would otherwise find
                // silent.
                STOP => self.stop_asked = true,
                WAKER => {
                    self.collect_replies();
                    if !cqueue::more(flags) {
                        self.arm_waker();
                    }
                }
                // Read before this batch's other completions (`run`).
                FILES if !cqueue::more(flags) => self.arm_files(),
                _ => {}
            },
            _ => {}
        }
    }

    fn accepted(&mut self, result: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept = Shot::Off;
        }
        if result >= 0 {
            // SAFETY: a successful accept's result is a new descriptor that nothing else owns.
            let stream = TcpStream::from(unsafe { OwnedFd::from_raw_fd(result) });
            match stream.peer_addr() {
                // Also after the stop, while the multishot is being
                // cancelled: the kernel took the connection off the shared
                // queue for this loop, so no other generation or loop can
                // answer it (dropping it would close it under a request).
                Ok(peer) if self.conns.len() < self.max_conns => self.open(stream, peer),
                // Accepted just after the cap, or the peer already left: refused.
                _ => {}
            }
            return;
        }
        // A cancelled multishot (at the cap, or at the stop) is no failure.
        if -result == libc::ECANCELED {
            return;
        }
        match accept::classify(-result) {
            Failed::Retry | Failed::Empty => {}
            // The ring's accept outlives a listener only at the stop, which
            // cancels it first: pause as for an error accept(2) does not name.
            Failed::Pause | Failed::Gone => {
                let e = io::Error::from_raw_os_error(-result);
                self.pipeline.error_log.accept_paused(&e);
                self.accept_pause.pause(Instant::now() + accept::PAUSE);
            }
        }
    }

    /// Arms the multishot accept exactly while this loop may accept.
    fn watch_listener(&mut self) {
        let wanted =
            self.listener.is_some() && !self.accept_pause.is_paused() && self.conns.len() < self.max_conns;
        match (wanted, self.accept) {
            (true, Shot::Off) => {
                let Some(fd) = self.listener.as_ref().map(|l| l.as_raw_fd()) else { return };
                let accept = opcode::AcceptMulti::new(types::Fd(fd)).flags(libc::SOCK_CLOEXEC).build();
                // SAFETY: a multishot accept names no memory (no address
                // out-parameter); the listener lives until its cancel completes.
                unsafe { self.push(&[accept.user_data(user_data(OP_LOOP, ACCEPT))]) };
                self.accept = Shot::Armed;
            }
            (false, Shot::Armed) => {
                self.cancel(user_data(OP_LOOP, ACCEPT));
                self.accept = Shot::Cancelling;
            }
            _ => {}
        }
    }

    fn cancel(&mut self, target: u64) {
        // SAFETY: a cancel names no memory, only another request's user data.
        let cancel = opcode::AsyncCancel::new(target).build();
        unsafe { self.push(&[cancel.user_data(user_data(OP_QUIET, 0))]) };
    }

    fn open(&mut self, stream: TcpStream, peer: SocketAddr) {
        // --max-conns-per-ip: the address's place, held as long as the connection.
        let Ok(slot) = self.pipeline.admit(peer.ip()) else {
            return pipeline::refuse_at_capacity(stream, &self.pipeline, 429);
        };
        let files = self.knobs.files;
        // Under TLS a file is read into records, whatever the path.
        let file_pieces = files != FilePath::Copy && self.pipeline.tls.is_none();
        // The loop's own `sendfile` must not wait for the peer.
        if file_pieces && files == FilePath::Sendfile && stream.set_nonblocking(true).is_err() {
            return;
        }
        let socket = RingSocket::new(stream, file_pieces, file_pieces && files == FilePath::Sendfile);
        let fd = socket.fd();
        let link = match &self.pipeline.tls {
            None => Link::Plain(socket),
            Some(tls) => match tls.accept_over(socket) {
                Ok(session) => Link::Tls(Box::new(session)),
                Err(_) => return,
            },
        };
        let conn = Connection::new(ConnInfo { peer }, self.now, &self.pipeline, self.mode);
        let conn = Conn {
            link,
            conn,
            waits: Waits::Read,
            timer: Timer::default(),
            recv: Shot::Armed,
            batch: None,
            sending: 0,
            notifs: 0,
            closing: false,
            sealed: true,
            polls: Vec::new(),
            _ip: slot,
        };
        let Some(token) = self.conns.insert(conn) else { return };
        let slot = token as u32;
        if slot as usize >= self.fixed.len() {
            // Cannot happen (slots are reused below the cap), but a slot
            // outside the table must not reach the kernel.
            self.conns.remove(token);
            return;
        }
        self.fixed[slot as usize] = fd;
        let install = opcode::FilesUpdate::new(&self.fixed[slot as usize], 1)
            .offset(slot as i32)
            .build()
            .flags(squeue::Flags::IO_LINK);
        let recv = opcode::RecvMulti::new(types::Fixed(slot), self.bufs.group()).build();
        // SAFETY: the update's descriptor is read from `fixed`, a boxed
        // slice the loop never reallocates; the receive writes only into
        // the registered buffer group, which outlives every receive.
        unsafe {
            self.push(&[install.user_data(user_data(OP_QUIET, 0)), recv.user_data(user_data(OP_RECV, token))])
        };
        // Sets the head deadline (and, over TLS, the handshake's).
        self.drive(token);
    }

    fn arm_recv(&mut self, token: u64) {
        let recv = opcode::RecvMulti::new(types::Fixed(token as u32), self.bufs.group()).build();
        // SAFETY: the receive writes only into the registered buffer group.
        unsafe { self.push(&[recv.user_data(user_data(OP_RECV, token))]) };
        if let Some(c) = self.conns.get_mut(token) {
            c.recv = Shot::Armed;
        }
    }

    fn received(&mut self, token: u64, result: i32, flags: u32) {
        let buffer = cqueue::buffer_select(flags);
        let Some(c) = self.conns.get_mut(token) else {
            if let Some(id) = buffer {
                self.bufs.give_back(id);
            }
            return;
        };
        if !cqueue::more(flags) {
            c.recv = Shot::Off;
        }
        let socket = c.link.socket();
        let mut arrived = None;
        match result {
            1.. => arrived = buffer.map(|id| (id, result as usize)),
            0 => socket.ended(0),
            _ if matches!(-result, libc::ENOBUFS | libc::ECANCELED) => {}
            _ => socket.ended(-result),
        }
        let new_input = result >= 0 || !matches!(-result, libc::ENOBUFS | libc::ECANCELED);
        match c.waits {
            // The bytes go from the ring buffer to the connection.
            Waits::Read | Waits::Pipes if new_input && !c.closing => self.drive_arrived(token, arrived),
            _ => {
                if let Some((id, len)) = arrived {
                    socket.arrived(self.bufs.bytes(id, len));
                }
                if c.closing {
                    self.finish_close(token);
                } else if c.waits == Waits::Helper && result < 0 && new_input {
                    // The client left while a spawner works for it.
                    self.close(token);
                } else {
                    self.pump(token);
                }
            }
        }
        if let Some((id, _)) = arrived {
            self.bufs.give_back(id);
        }
    }

    /// Starts what the connection's socket has ready for the kernel: its
    /// queued bytes as a send, a shutdown once they are gone, its receive
    /// paused or resumed with its unread input.
    fn pump(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(token) else { return };
        // A TLS session's records that found the socket's queue full: they
        // move as it drains, whether or not the connection drives again
        // (the tail of a response, the close_notify of a closing one).
        c.sealed = c.link.flush_pending();
        let socket = c.link.socket();
        if c.batch.is_none() {
            if let Some(batch) = socket.take_batch() {
                c.batch = Some(batch);
                self.batch_moved(token);
                return;
            }
        }
        let shut = c.batch.is_none() && socket.take_shutdown();
        let resume =
            c.recv == Shot::Off && !c.closing && !socket.has_ended() && socket.unread() < INBOX_HIGH / 2;
        let pause = c.recv == Shot::Armed && socket.unread() >= INBOX_HIGH;
        if pause {
            c.recv = Shot::Cancelling;
        }
        if shut {
            // A system call, not IORING_OP_SHUTDOWN: the ring always runs
            // that one on a worker thread, which looks the fixed slot up
            // only then — by when a new connection may hold the slot.
            socket.shutdown_now();
        }
        if pause {
            self.cancel(user_data(OP_RECV, token));
        } else if resume {
            self.arm_recv(token);
        }
    }

    /// Runs the connection's state machine as far as its socket allows.
    fn drive(&mut self, token: u64) {
        self.drive_arrived(token, None);
    }

    /// [`drive`](Self::drive), with the bytes a receive just brought into
    /// ring buffer `.0` (`.1` of them) for the connection to read first.
    fn drive_arrived(&mut self, token: u64, arrived: Option<(u16, usize)>) {
        let Some(c) = self.conns.get_mut(token) else { return };
        if c.closing {
            return;
        }
        // A connection whose bytes the kernel holds is not silent, though
        // no receive has handed them over yet: a stop must answer it, not
        // close it under its request.
        let stopping = self.finish.is_stopping() && !c.link.socket().unread_in_kernel();
        let p = &*self.pipeline;
        c.conn.set_now(self.now);
        let arrived = arrived.map_or(&[][..], |(id, len)| self.bufs.bytes(id, len));
        let want = c.link.drive(&mut c.conn, arrived, p, stopping);
        if self.settle(token, want, &mut None) == Settled::Open {
            self.pump(token);
        }
    }

    /// One-shot polls for what a running script's pipes wait for, armed
    /// where none is; polls on pipes it no longer waits for are cancelled
    /// (a pending poll holds its pipe open).
    fn arm_pipes(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(token) else { return };
        let wanted: Vec<(RawFd, u32)> = c
            .conn
            .waiting()
            .sources
            .iter()
            .map(|(fd, interest)| {
                let mut events = 0;
                if interest.is_readable() {
                    events |= libc::POLLIN;
                }
                if interest.is_writable() {
                    events |= libc::POLLOUT;
                }
                (fd.as_raw_fd(), events as u32)
            })
            .collect();
        let (stale, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut c.polls).into_iter().partition(|(fd, _)| !wanted.iter().any(|w| w.0 == *fd));
        c.polls = kept;
        let new: Vec<_> = wanted.into_iter().filter(|(fd, _)| !c.polls.iter().any(|p| p.0 == *fd)).collect();
        for (_, poll) in stale {
            self.cancel(user_data(OP_POLL, poll));
        }
        for (fd, events) in new {
            let Some(poll) = self.polls.insert((token, fd)) else { continue };
            if let Some(c) = self.conns.get_mut(token) {
                c.polls.push((fd, poll));
            }
            // SAFETY: a poll names no memory; a pipe closed while it is
            // armed stays open until the poll completes or is cancelled.
            let entry = opcode::PollAdd::new(types::Fd(fd), events).build();
            unsafe { self.push(&[entry.user_data(user_data(OP_POLL, poll))]) };
        }
    }

    fn pipe_ready(&mut self, poll: u64, result: i32) {
        let Some((token, fd)) = self.polls.remove(poll) else { return };
        let Some(c) = self.conns.get_mut(token) else { return };
        c.polls.retain(|p| p.1 != poll || p.0 != fd);
        if result != -libc::ECANCELED && c.waits == Waits::Pipes {
            self.drive(token);
        }
    }

    /// The connection is done: stop receiving, let what it queued go out,
    /// and free its slot once the kernel has given everything back.
    fn close(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(token).filter(|c| !c.closing) else { return };
        c.closing = true;
        // Its queued bytes get the send timeout to leave.
        let deadline = self.now + self.pipeline.settings.send_timeout;
        self.timers.set(&mut c.timer, token, deadline);
        let polls = std::mem::take(&mut c.polls);
        if c.recv == Shot::Armed {
            c.recv = Shot::Cancelling;
            self.cancel(user_data(OP_RECV, token));
        }
        for (_, poll) in polls {
            self.cancel(user_data(OP_POLL, poll));
        }
        self.pump(token);
        self.finish_close(token);
    }

    fn finish_close(&mut self, token: u64) {
        if self.conns.get(token).is_none_or(Conn::lent) {
            return;
        }
        let Some(c) = self.conns.remove(token) else { return };
        let fd = c.link.into_socket().into_fd();
        let clear = opcode::FilesUpdate::new(CLEAR_SLOT.as_ptr(), 1).offset(token as u32 as i32).build();
        let close = opcode::Close::new(types::Fd(fd)).build();
        // SAFETY: the update reads a static; a close names no memory. The
        // descriptor is ours (taken from the socket) and closed only here.
        unsafe {
            self.push(&[clear.user_data(user_data(OP_QUIET, 0)), close.user_data(user_data(OP_QUIET, 0))])
        };
    }

    /// The graceful stop: refuse new connections, close idle ones, let
    /// in-flight requests finish.
    fn begin_stop(&mut self) {
        // No deadline of its own: the runtime bounds the graceful finish.
        if !self.finish.begin(None) {
            return;
        }
        // Dropping the last reference closes the listener once the accept is cancelled.
        self.listener = None;
        self.accept_pause.lift();
        self.watch_listener();
        self.drive_all_stopping();
    }
}

impl Core for Loop {
    type Conn = Conn;
    const WARMS_AHEAD: bool = false;
    const NO_HELPER_LEFT: &'static str = "no spawner left to start a script";

    fn parts(&mut self) -> Parts<'_, Conn> {
        Parts {
            conns: &mut self.conns,
            timers: &mut self.timers,
            helpers: &mut self.helpers,
            pipeline: &self.pipeline,
            accept_pause: &mut self.accept_pause,
            now: self.now,
        }
    }

    fn drive(&mut self, token: u64) {
        Loop::drive(self, token);
    }

    fn close(&mut self, token: u64) {
        Loop::close(self, token);
    }

    fn watch_listener(&mut self) {
        Loop::watch_listener(self);
    }

    /// Only a yielding connection (SRPT's loop order, not this loop's) asks
    /// to be come back to; its send's completion drives it.
    fn come_back(&mut self, _token: u64) {}

    fn watch_sources(&mut self, token: u64) {
        self.arm_pipes(token);
    }

    fn expire(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(token) else { return };
        if !c.closing {
            return self.time_out(token);
        }
        // Its last bytes found no taker in time: give them up.
        c.link.socket().send_failed(libc::ETIMEDOUT);
        c.sealed = true;
        if c.sending > 0 {
            for op in [OP_SEND, OP_FILL, OP_DRAIN] {
                self.cancel(user_data(op, token));
            }
        }
        self.finish_close(token);
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if !self.conns.is_empty() {
            // Left on an error with operations in flight: their memory (the
            // connections' sends, the receive buffers) must outlive the
            // kernel's use of it, which only the process's end bounds now.
            std::mem::forget(std::mem::take(&mut self.conns));
            return;
        }
        self.bufs.unregister(&self.ring);
        // SAFETY: no connection is left, so no receive is armed, and the
        // group is unregistered: the kernel has no use for the buffers. The
        // field is not touched again.
        unsafe { ManuallyDrop::drop(&mut self.bufs) };
    }
}

#[cfg(test)]
mod tests;
