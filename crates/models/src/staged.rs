//! `staged` — the papers' TBW (task-based worker; SEDA in later words): the
//! request cycle is cut into stages, each with its own threads
//! (`--stage-threads read=2,data=2,cgi=4,write=2,log=1`) and a bounded queue
//! in front of it. Paper 000 shows its weakness: when stages are unbalanced,
//! work piles up in a queue (figure 8); the per-stage counters below
//! make that pile-up visible.
//!
//! ```text
//!  acceptor ─▶ [read] ─────▶ [data] ─────▶ [write] ─────▶ [log]
//!               ▲  read + parse   Pipeline::    send the       access-log
//!               │  the head       handle        reply          line
//!               │                                  │
//!               └──◀──── parking (epoll) ◀─────────┘  would block, idle keep-alive
//! ```
//!
//! * **Who runs where.** The model's thread accepts (`accept::run`) and puts
//!   new connections straight into the read queue (a request usually
//!   arrives with the handshake). A *read* thread drives the connection in
//!   split mode until a head is parsed (`Want::Process`) and sends the
//!   request to *data*, which runs `Pipeline::handle` (resolve, cache or
//!   disk) and `deliver`s the reply; a *write* thread drives the connection
//!   to send it.
//! * **CGI.** *read* sends a request for a script to the *cgi* stage
//!   instead of *data* (paper 000's TBW has the same split). A cgi thread
//!   starts the script and then owns the connection for the script's whole
//!   run, moving bytes between the socket and the script's pipes and
//!   blocking in `poll` when none can move (`Connection::wait_blocking`),
//!   so `--stage-threads cgi=N` caps the scripts running at once; more wait
//!   in the cgi queue. When the script is done the connection goes on as
//!   usual (parked, or back to *read* for a pipelined request).
//! * **Log.** Connections hand their finished responses' access-log
//!   records over (`Connection::defer_log`) instead of formatting and
//!   appending them; whoever drove the connection (mostly *write*; *read*
//!   for error replies, *parking* for timeouts) queues them for the *log*
//!   threads, which format and append them (and write the file once 32 KiB
//!   piled up; otherwise the server's flusher does, every 500 ms). A line
//!   is recorded a queue hop after its response went out, so a rotation
//!   (`SIGUSR1`) just after a response may put its line in the new file;
//!   at a graceful stop every queued line is still written.
//! * **Nobody waits for a client.** Sockets are non-blocking. Whenever a
//!   connection would block — an idle keep-alive connection, a slow client
//!   mid-head, a client slow to read a big response — the stage hands it to
//!   the *parking* thread, which watches it with epoll (one-shot, so a
//!   connection is reported once and owned by one thread at a time) and
//!   enqueues it for *read* or *write* when it is ready, or calls
//!   `timed_out` at its deadline (a 408 goes to *write*; else it closes).
//!   So a stage thread is only ever busy with a connection that can move.
//! * **Keep-alive.** After a response the state machine goes straight on
//!   to the next head: usually the read finds nothing and the connection
//!   is parked until readable, then goes to *read*; a pipelined request
//!   already buffered goes to *read* at once (through the parking thread).
//! * **Queues and deadlock.** Stage queues hold `--queue` items each; a full
//!   queue blocks its producers, which pushes back up to the acceptor, and
//!   clients then wait in the kernel's backlog. The edges into the parking
//!   thread are unbounded (the parked set is bounded by the open
//!   connections anyway) because they close the loop write → read: a ring
//!   of bounded queues could deadlock when every one is full.
//! * **Where queue waits land.** Each stage's queue measures its items'
//!   waits (length, items, mean/max and a histogram: p50/p99 per stage in
//!   `/status.json` `queues`, `modus_queue_wait_seconds{stage}`). In a
//!   request's phases: the *read*-queue wait (and parking) comes before the
//!   head's first byte is seen, so it is in `wait`; the *data* (or *cgi*)
//!   queue wait is the `queue` phase (`take_request` → `deliver` minus the
//!   pipeline's own time); the *write*-queue wait is in `write`, which
//!   starts when the reply is handed to the connection in the data stage;
//!   the *log*-queue wait is after the response and in no phase.
//! * **Connection cap.** Only the acceptor adds connections, and every
//!   stage and the parking set together hold at most `--max-connections`
//!   of them (the parked set is what grows: an idle keep-alive connection
//!   costs no thread here). After handing one over at the cap the acceptor
//!   waits until a connection closes before it accepts again, so newcomers
//!   wait in the kernel's backlog, as with nginx's `worker_connections`.
//!   Idle keep-alive connections keep their slot until they time out.
//! * **Stop.** The acceptor drops the listener (new connections are
//!   refused); every stage drives connections with `stopping`, so they
//!   close at the next request boundary; the parking thread re-drives idle
//!   connections once so they close (a keep-alive one after a second's
//!   grace for the request it may have on its way, `pipeline`'s `stop.rs`), lets in-flight ones finish, and
//!   returns when no connection is left; then every stage drains and exits.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use pipeline::stats::{Phase, Worker};
use pipeline::{
    refuse_at_capacity, ConnInfo, Connection, IpSlot, LogRecord, Mode, Pipeline, Request, Route, Want,
    BLOCKING_TICK,
};
use transport::deadlines::{Deadlines, HasTimer, Timer};
use transport::poller::{Events, Interest, Poller, Trigger, Waker};
use transport::Stream;

use crate::{accept, Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "staged",
    paper_name: "TBW",
    summary: "a thread pool and a queue per stage: read, data, cgi, write, log (--stage-threads)",
    caps: Caps {
        forks: false,
        event_driven: true,
        staged: true,
        srpt_loop: false,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: false,
    },
    knobs: &[Knob::StageThreads, Knob::Queue, Knob::MaxConnections],
    run,
};

/// As in `pool`: the request path is shallow.
const STACK_SIZE: usize = 256 << 10;
/// A sanity bound on one stage's threads.
const MAX_STAGE_THREADS: usize = 4096;
/// While stopping, how often the parking thread checks whether the last connection is gone.
const STOP_POLL: Duration = Duration::from_millis(20);
/// The parking thread's own waker in the epoll set (connections use their fd).
const WAKER_TOKEN: u64 = u64::MAX;

/// Threads per stage, from `--stage-threads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StageThreads {
    read: usize,
    data: usize,
    /// Runs scripts, one connection per thread while its script runs.
    cgi: usize,
    write: usize,
    log: usize,
}

impl StageThreads {
    /// `Tuning::default().stage_threads`; stages a spec leaves out keep these.
    const DEFAULT: StageThreads = StageThreads { read: 2, data: 2, cgi: 4, write: 2, log: 1 };

    /// Parses `read=2,data=2,cgi=4,write=2,log=1` (any subset, any order).
    fn parse(spec: &str) -> io::Result<StageThreads> {
        let invalid = |why: String| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("--stage-threads {spec:?}: {why}"))
        };
        let mut threads = StageThreads::DEFAULT;
        for item in spec.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (name, count) =
                item.split_once('=').ok_or_else(|| invalid(format!("{item:?} is not STAGE=THREADS")))?;
            let slot = match name.trim() {
                "read" => &mut threads.read,
                "data" => &mut threads.data,
                "cgi" => &mut threads.cgi,
                "write" => &mut threads.write,
                "log" => &mut threads.log,
                other => {
                    return Err(invalid(format!(
                        "unknown stage {other:?}; the stages are read, data, cgi, write, log"
                    )))
                }
            };
            *slot = match count.trim().parse() {
                Ok(n @ 1..=MAX_STAGE_THREADS) => n,
                _ => {
                    return Err(invalid(format!("{item:?}: a stage needs 1 to {MAX_STAGE_THREADS} threads")))
                }
            };
        }
        Ok(threads)
    }
}

/// One stage's queue as paper 000's figure 8 sees it: what went through and
/// how long it waited (enqueue to dequeue, including time a producer was
/// held back by a full queue). Registered with the pipeline's stats, so the
/// status page reads it live.
type StageStats = pipeline::stats::QueueStat;

/// The producing end of a stage's queue; items carry their enqueue time.
struct Tx<T> {
    tx: Sender<(Instant, T)>,
    stats: Arc<StageStats>,
}

impl<T> Clone for Tx<T> {
    fn clone(&self) -> Self {
        Tx { tx: self.tx.clone(), stats: self.stats.clone() }
    }
}

impl<T> Tx<T> {
    /// Enqueues, waiting while the queue is full. `Err` only once the
    /// stage's threads are gone (tearing down): the item is dropped.
    fn send(&self, item: T) -> Result<(), ()> {
        self.stats.push();
        self.tx.send((Instant::now(), item)).map_err(|_| self.stats.unpush())
    }
}

/// The consuming end of a stage's queue.
struct Rx<T> {
    rx: Receiver<(Instant, T)>,
    stats: Arc<StageStats>,
}

impl<T> Clone for Rx<T> {
    fn clone(&self) -> Self {
        Rx { rx: self.rx.clone(), stats: self.stats.clone() }
    }
}

impl<T> Rx<T> {
    /// The next item; `None` once every producer is gone and the queue is empty.
    fn recv(&self) -> Option<T> {
        let (since, item) = self.rx.recv().ok()?;
        self.stats.pop(since.elapsed());
        Some(item)
    }

    /// [`recv`](Self::recv), showing the thread idle on the scoreboard
    /// while it waits and busy once it has an item.
    fn recv_as(&self, me: &Worker) -> Option<T> {
        me.idle();
        let item = self.recv();
        if item.is_some() {
            me.busy();
        }
        item
    }
}

fn queue<T>(stats: &Arc<StageStats>, depth: usize) -> (Tx<T>, Rx<T>) {
    // crossbeam's channel, whose receivers spin and `sched_yield` before
    // they sleep, rather than `handoff`'s mutex and condvar (which `pool`
    // gained from): the condvar queues showed no gain here (BENCHMARKS.md,
    // "Why the code is as it is") — a yield lets the producing stage run,
    // and the item is there when the consumer comes back, with no futex
    // sleep/wake.
    let (tx, rx) = bounded(depth);
    (Tx { tx, stats: stats.clone() }, Rx { rx, stats: stats.clone() })
}

/// A client connection on its way between stages (boxed, so queues move a pointer).
struct Conn {
    stream: Stream,
    conn: Connection,
    /// The socket is in the parking thread's epoll set (armed or not).
    registered: bool,
    live: Arc<Live>,
    /// Its place under `--max-conns-per-ip`, freed when it closes.
    _slot: Option<IpSlot>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.live.close();
    }
}

/// The open connections, wherever they are, and the acceptor's wait for
/// a free slot when they reach `--max-connections`.
struct Live {
    open: Mutex<usize>,
    /// Signalled when a connection closes.
    closed: Condvar,
    max: usize,
}

impl Live {
    fn new(max: usize) -> Live {
        Live { open: Mutex::new(0), closed: Condvar::new(), max: max.max(1) }
    }

    fn count(&self) -> usize {
        // A panic while holding this lock cannot leave the count half-updated.
        *self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn opened(&self) {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    fn close(&self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        *open -= 1;
        if *open < self.max {
            self.closed.notify_one();
        }
    }

    /// Waits while the cap is reached; `false` if `stop` fired meanwhile.
    /// Wakes every `BLOCKING_TICK` to look at the stop, like the blocking
    /// models' threads.
    fn wait_for_room(&self, stop: &transport::Shutdown) -> bool {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        while *open >= self.max {
            if stop.is_triggered() {
                return false;
            }
            open = self.closed.wait_timeout(open, BLOCKING_TICK).unwrap_or_else(PoisonError::into_inner).0;
        }
        true
    }
}

/// Which stage a parked connection goes to when its socket is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

/// What the stages hand the parking thread.
enum Park {
    /// Watch until ready or `deadline`; `stopped`: last driven with `stopping`.
    Wait { c: Box<Conn>, dir: Dir, deadline: Instant, stopped: bool },
    /// A request is already buffered: to the read stage now.
    Now(Box<Conn>),
}

/// What every thread shares.
struct Shared {
    pipeline: Arc<Pipeline>,
    /// Set once the acceptor is done: connections close at the next request boundary.
    stopping: AtomicBool,
    /// Open connections, wherever they are.
    live: Arc<Live>,
    park: Sender<Park>,
    /// Wakes the parking thread when something was sent on `park`.
    waker: Waker,
    /// Connections parked, and those given up at their deadline.
    parks: AtomicU64,
    expired: AtomicU64,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Sends a connection on according to what it waits for.
    fn settle(&self, c: Box<Conn>, want: Want, stopped: bool) {
        let parcel = match want {
            Want::Close => return, // dropping it closes the socket
            Want::Read(deadline) => Park::Wait { c, dir: Dir::Read, deadline, stopped },
            Want::Write(deadline) => Park::Wait { c, dir: Dir::Write, deadline, stopped },
            // Back to read, which routes both: a request to its stage, a
            // running script to the cgi stage.
            Want::Process | Want::Source(_) => Park::Now(c),
            Want::Again | Want::Warm => unreachable!("staged's connections neither yield nor warm ahead"),
        };
        // Fails only if the parking thread died; the connection then closes.
        if self.park.send(parcel).is_ok() {
            self.waker.wake();
        }
    }
}

/// Hands the records of finished responses to the log stage.
fn forward_log(c: &mut Conn, log: &Tx<LogRecord>) {
    for record in c.conn.take_log() {
        // Fails only if the log stage is gone, and it ends after every other.
        let _ = log.send(record);
    }
}

/// Work for the cgi stage: a request whose script is to start, or a
/// connection whose script runs (`None`).
type CgiWork = (Box<Conn>, Option<Request>);

fn read_stage(
    shared: &Shared,
    inbox: Rx<Box<Conn>>,
    data: Tx<(Box<Conn>, Request)>,
    cgi: Tx<CgiWork>,
    log: Tx<LogRecord>,
) {
    let me = scoreboard(shared);
    while let Some(mut c) = inbox.recv_as(&me) {
        let stopping = shared.stopping();
        // Error replies (400, 431...) are written here, inline: they are rare
        // and short, and a blocked one is parked for the write stage.
        let want = c.conn.drive(&c.stream, &shared.pipeline, stopping);
        forward_log(&mut c, &log);
        match want {
            Want::Process => match c.conn.take_request() {
                // `Err`: tearing down; the connection closes.
                Some(request) if request.route == Route::Streamed => drop(cgi.send((c, Some(request)))),
                Some(request) => drop(data.send((c, request))),
                // Cannot happen: only this thread holds the connection and
                // `Process` means a request is ready. Close rather than panic.
                None => shared.pipeline.error_log.error(format_args!("staged: no request to take")),
            },
            Want::Source(_) => drop(cgi.send((c, None))),
            other => shared.settle(c, other, stopping),
        }
    }
}

/// Starts scripts and streams their I/O, blocking on the connection's
/// descriptors (in `poll`) while nothing can move.
fn cgi_stage(shared: &Shared, inbox: Rx<CgiWork>, log: Tx<LogRecord>) {
    let p = &*shared.pipeline;
    let me = scoreboard(shared);
    while let Some((mut c, request)) = inbox.recv_as(&me) {
        if let Some(request) = request {
            let reply = p.handle_request(&request);
            c.conn.deliver(reply, p);
        }
        let (want, stopping) = loop {
            let stopping = shared.stopping();
            let want = c.conn.drive(&c.stream, p, stopping);
            forward_log(&mut c, &log);
            let Want::Source(deadline) = want else { break (want, stopping) };
            c.conn.wait_blocking(&c.stream, deadline.min(Instant::now() + BLOCKING_TICK));
            if Instant::now() >= deadline {
                let respond = c.conn.timed_out(p);
                forward_log(&mut c, &log);
                if !respond {
                    break (Want::Close, stopping);
                }
            }
        };
        shared.settle(c, want, stopping);
    }
}

fn data_stage(shared: &Shared, inbox: Rx<(Box<Conn>, Request)>, write: Tx<Box<Conn>>) {
    let me = scoreboard(shared);
    while let Some((mut c, request)) = inbox.recv_as(&me) {
        let reply = shared.pipeline.handle_request(&request);
        // The read stage took this request from this connection just before
        // queueing both, so `deliver` finds it waiting for its reply.
        c.conn.deliver(reply, &shared.pipeline);
        let _ = write.send(c); // `Err`: tearing down; the connection closes.
    }
}

fn write_stage(shared: &Shared, inbox: Rx<Box<Conn>>, cgi: Tx<CgiWork>, log: Tx<LogRecord>) {
    let me = scoreboard(shared);
    while let Some(mut c) = inbox.recv_as(&me) {
        let stopping = shared.stopping();
        let want = c.conn.drive(&c.stream, &shared.pipeline, stopping);
        forward_log(&mut c, &log);
        match want {
            Want::Source(_) => drop(cgi.send((c, None))),
            other => shared.settle(c, other, stopping),
        }
    }
}

fn log_stage(shared: &Shared, inbox: Rx<LogRecord>) {
    let me = scoreboard(shared);
    let p = &*shared.pipeline;
    while let Some(record) = inbox.recv_as(&me) {
        let start = p.stats.timing.then(Instant::now);
        p.access_log.record(&record);
        if let Some(start) = start {
            p.stats.record(Phase::Log, start.elapsed());
        }
    }
}

/// A connection waiting for readiness.
struct Parked {
    c: Box<Conn>,
    dir: Dir,
    timer: Timer,
    stopped: bool,
}

impl HasTimer for Parked {
    fn timer(&mut self) -> &mut Timer {
        &mut self.timer
    }
}

/// The parking thread's state: the readiness set and its deadlines. A
/// socket's fd is its key and its epoll token (unique while it is open).
struct Parking {
    poller: Poller,
    parked: HashMap<RawFd, Parked>,
    /// By descriptor; a connection handed on leaves a stale entry behind.
    deadlines: Deadlines,
}

impl Parking {
    fn park(&mut self, shared: &Shared, mut c: Box<Conn>, dir: Dir, deadline: Instant, stopped: bool) {
        let fd = c.stream.tcp().as_raw_fd();
        let interest = if dir == Dir::Read { Interest::READABLE } else { Interest::WRITABLE };
        // One-shot and level-triggered: readiness that arrived before this
        // call is reported at once, and then the socket is quiet until re-armed.
        let token = fd as u64;
        let armed = if c.registered {
            self.poller.modify(&c.stream, token, interest, Trigger::Oneshot)
        } else {
            self.poller.add(&c.stream, token, interest, Trigger::Oneshot)
        };
        match armed {
            Ok(()) => {
                c.registered = true;
                shared.parks.fetch_add(1, Ordering::Relaxed);
                let mut timer = Timer::default();
                self.deadlines.set(&mut timer, token, deadline);
                self.parked.insert(fd, Parked { c, dir, timer, stopped });
            }
            Err(e) => shared.pipeline.error_log.error(format_args!("staged: cannot watch a connection: {e}")),
        }
    }

    fn unpark(&mut self, fd: RawFd) -> Option<Parked> {
        self.parked.remove(&fd)
    }
}

/// The parking thread: returns from the stages, readiness, deadlines, the stop.
fn parking(
    shared: &Shared,
    inbox: Receiver<Park>,
    poller: Poller,
    read: Tx<Box<Conn>>,
    write: Tx<Box<Conn>>,
    log: Tx<LogRecord>,
) -> io::Result<()> {
    poller.add(&shared.waker, WAKER_TOKEN, Interest::READABLE, Trigger::Level)?;
    let mut set = Parking { poller, parked: HashMap::new(), deadlines: Deadlines::default() };
    let mut events = Events::with_capacity(256);
    // Idle connections were re-driven after the stop.
    let mut flushed = false;
    loop {
        // Sends below are `Err` only while tearing down; the connection then closes.
        for parcel in inbox.try_iter() {
            match parcel {
                Park::Now(c) => drop(read.send(c)),
                // Driven just before the stop but parked after the flush
                // below: one more read lets an idle one close.
                Park::Wait { c, dir: Dir::Read, stopped: false, .. } if flushed => drop(read.send(c)),
                Park::Wait { c, dir, deadline, stopped } => set.park(shared, c, dir, deadline, stopped),
            }
        }
        let stopping = shared.stopping();
        if stopping && !flushed {
            flushed = true;
            let idle: Vec<RawFd> = set
                .parked
                .iter()
                .filter(|(_, p)| p.dir == Dir::Read && !p.stopped)
                .map(|(&fd, _)| fd)
                .collect();
            for fd in idle {
                if let Some(p) = set.unpark(fd) {
                    let _ = read.send(p.c);
                }
            }
        }
        if stopping && shared.live.count() == 0 {
            return Ok(());
        }
        let now = Instant::now();
        while let Some(fd) = set.deadlines.expired(now, &mut set.parked) {
            let Some(Parked { mut c, .. }) = set.unpark(fd as RawFd) else { continue };
            shared.expired.fetch_add(1, Ordering::Relaxed);
            let respond = c.conn.timed_out(&shared.pipeline);
            forward_log(&mut c, &log); // a response cut short by the deadline
            if respond {
                let _ = write.send(c); // a 408 to send
            }
        }
        set.deadlines.prune(&mut set.parked);
        let mut timeout = set.deadlines.next_in(now);
        if stopping {
            timeout = Some(timeout.map_or(STOP_POLL, |t| t.min(STOP_POLL)));
        }
        set.poller.wait(&mut events, timeout)?;
        for event in events.iter() {
            if event.token() == WAKER_TOKEN {
                // The inbox is drained at the top of the loop, after this.
                shared.waker.reset();
                continue;
            }
            // Tokens are the fds we registered, so the cast is lossless. A
            // socket no longer parked (given up at its deadline) is skipped.
            let Some(p) = set.unpark(event.token() as RawFd) else { continue };
            let _ = if p.dir == Dir::Read { read.send(p.c) } else { write.send(p.c) };
        }
    }
}

/// This stage thread's line on the scoreboard.
fn scoreboard(shared: &Shared) -> Worker {
    let name = thread::current().name().unwrap_or("staged").to_string();
    shared.pipeline.stats.worker(name)
}

fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name).stack_size(STACK_SIZE).spawn(body)
}

fn run(env: ModelEnv) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, .. } = env;
    let threads = StageThreads::parse(&tuning.stage_threads)?;
    let depth = tuning.queue.max(1);
    let stats_of = &pipeline.stats;
    let stats = [
        stats_of.queue("read", threads.read),
        stats_of.queue("data", threads.data),
        stats_of.queue("write", threads.write),
        stats_of.queue("log", threads.log),
        stats_of.queue("cgi", threads.cgi),
    ];
    let (read_tx, read_rx) = queue(&stats[0], depth);
    let (data_tx, data_rx) = queue(&stats[1], depth);
    let (write_tx, write_rx) = queue(&stats[2], depth);
    let (log_tx, log_rx) = queue(&stats[3], depth);
    let (cgi_tx, cgi_rx) = queue::<CgiWork>(&stats[4], depth);
    let (park_tx, park_rx) = unbounded();
    let shared = Arc::new(Shared {
        pipeline,
        stopping: AtomicBool::new(false),
        live: Arc::new(Live::new(tuning.max_connections)),
        park: park_tx,
        waker: Waker::new()?,
        parks: AtomicU64::new(0),
        expired: AtomicU64::new(0),
    });
    let poller = Poller::new()?;

    // Stage threads end when their queue's producers are gone. If a spawn
    // fails, returning drops the queues, so those already started end too.
    let mut stages = Vec::new();
    for i in 0..threads.log {
        let (shared, inbox) = (shared.clone(), log_rx.clone());
        stages.push(spawn(format!("staged-log-{i}"), move || log_stage(&shared, inbox))?);
    }
    // Only if CGI is on: otherwise nothing is ever routed there.
    let cgi_threads = if shared.pipeline.settings.cgi.is_some() { threads.cgi } else { 0 };
    for i in 0..cgi_threads {
        let (shared, inbox, log) = (shared.clone(), cgi_rx.clone(), log_tx.clone());
        stages.push(spawn(format!("staged-cgi-{i}"), move || cgi_stage(&shared, inbox, log))?);
    }
    for i in 0..threads.write {
        let (shared, inbox, cgi, log) = (shared.clone(), write_rx.clone(), cgi_tx.clone(), log_tx.clone());
        stages.push(spawn(format!("staged-write-{i}"), move || write_stage(&shared, inbox, cgi, log))?);
    }
    for i in 0..threads.data {
        let (shared, inbox, write) = (shared.clone(), data_rx.clone(), write_tx.clone());
        stages.push(spawn(format!("staged-data-{i}"), move || data_stage(&shared, inbox, write))?);
    }
    for i in 0..threads.read {
        let (shared, inbox, data, log) = (shared.clone(), read_rx.clone(), data_tx.clone(), log_tx.clone());
        let cgi = cgi_tx.clone();
        stages.push(spawn(format!("staged-read-{i}"), move || read_stage(&shared, inbox, data, cgi, log))?);
    }
    // From here on only the threads hold the queues (plus the acceptor's
    // and the parking thread's senders), so each stage ends after the one before it.
    drop((data_tx, read_rx, data_rx, write_rx, log_rx, cgi_tx, cgi_rx));
    // Started last: it runs until the stop, so nothing may fail after it.
    let parker = {
        let (shared, stop, read) = (shared.clone(), shutdown.clone(), read_tx.clone());
        thread::Builder::new().name("staged-park".into()).spawn(move || {
            let result = parking(&shared, park_rx, poller, read, write_tx, log_tx);
            if let Err(e) = &result {
                shared.pipeline.error_log.error(format_args!("staged: parking thread: {e}"));
                stop.trigger(); // nobody can wait for clients any more: stop the server
            }
            result
        })?
    };

    let result = accept::run(&listener, &shutdown, &shared.pipeline, |stream| {
        // Gone already, or cannot be made non-blocking: just close it.
        let Ok(peer) = stream.peer_addr() else { return true };
        let Ok(slot) = shared.pipeline.admit(peer.ip()) else {
            refuse_at_capacity(stream, &shared.pipeline, 429);
            return true;
        };
        if stream.set_nonblocking(true).is_err() {
            return true;
        }
        let Ok(stream) = Stream::accepted(stream, shared.pipeline.tls.as_ref()) else { return true };
        let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &shared.pipeline, Mode::HandOut);
        conn.set_clock(Instant::now);
        conn.defer_log();
        shared.live.opened();
        let c = Box::new(Conn { stream, conn, registered: false, live: shared.live.clone(), _slot: slot });
        // At the cap, accept nothing more until a connection closes; a stop
        // meanwhile ends accepting (`false`), as the stop pipe would.
        read_tx.send(c).is_ok() && shared.live.wait_for_room(&shutdown)
    });
    // Refuse new connections at once; those already accepted finish.
    drop(listener);
    shared.stopping.store(true, Ordering::Release);
    shared.waker.wake();
    let parked = parker.join().unwrap_or_else(|_| Err(io::Error::other("staged: parking thread panicked")));
    drop(read_tx);
    for stage in stages {
        let _ = stage.join();
    }
    let p = &shared.pipeline;
    for s in &stats {
        p.error_log.info(format_args!(
            "stage {} (threads={}): {} items, mean wait {:.1?}, max {:.1?}, queue now {}",
            s.name,
            s.threads,
            s.dequeued.load(Ordering::Relaxed),
            s.mean_wait(),
            Duration::from_nanos(s.max_wait_ns.load(Ordering::Relaxed)),
            s.len(),
        ));
    }
    p.error_log.info(format_args!(
        "parking: {} waits, {} timed out",
        shared.parks.load(Ordering::Relaxed),
        shared.expired.load(Ordering::Relaxed),
    ));
    result.and(parked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_threads_parse() {
        let default = StageThreads::parse(&crate::Tuning::default().stage_threads).unwrap();
        assert_eq!(default, StageThreads::DEFAULT);
        let t = StageThreads::parse(" write=8 , read=1,").unwrap();
        assert_eq!((t.read, t.data, t.write, t.log), (1, 2, 8, 1));
        for bad in ["parse=2", "read=0", "read", "read=x", "log=-1", "read=100000"] {
            let e = StageThreads::parse(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().contains("--stage-threads"), "{e}");
        }
    }
}
