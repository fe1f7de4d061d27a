//! The per-connection HTTP/1.1 state machine, shared by every model.

use std::io::{self, Read};
use std::net::{Shutdown as Direction, SocketAddr, TcpStream};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use h1::{BodyFraming, ChunkedDecoder, HeadBuffers, Parsed, RequestHead};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::SendFlags;
use transport::poller::Interest;
use transport::{Progress, Shutdown};

use crate::cgi_stream::{CgiRun, Step};
use crate::reply::{self, Reply};
use crate::spares::{self, Spares};
use crate::stats::{now_ns, ConnState, Phase as TimedPhase, PhaseTimes, Stats, TraceRow};
use crate::{LogRecord, Pipeline};

/// Internal redirects one request may take (Apache's `LimitInternalRecursion 10`).
const MAX_REDIRECTS: u8 = 10;

/// Who is on the other end.
#[derive(Clone, Copy, Debug)]
pub struct ConnInfo {
    /// The client's address.
    pub peer: SocketAddr,
}

/// What a connection waits for after [`Connection::drive`].
#[derive(Debug, PartialEq, Eq)]
pub enum Want {
    /// Call `drive` again when the socket is readable, or `timed_out` at the deadline.
    Read(Instant),
    /// Call `drive` again when the socket is writable, or `timed_out` at the deadline.
    Write(Instant),
    /// Drop the socket.
    Close,
    /// (`drive_split`, or `drive_except_cgi` for a script) a request is ready: take it with
    /// [`Connection::take_request`], run the pipeline anywhere, and hand the
    /// reply back with [`Connection::deliver`].
    Process,
    /// A CGI script runs for this connection: call `drive` again when the
    /// socket or one of its pipes is ready — [`Connection::waiting`] says
    /// exactly which and how, [`Connection::new_pipes`] hands out the pipes
    /// once for pollers that register descriptors for good (edge-triggered),
    /// [`Connection::wait_blocking`] does the waiting for a blocking thread —
    /// or `timed_out` at the deadline (the script is then killed).
    Pipes(Instant),
}

/// What a connection in [`Want::Pipes`] waits for.
#[derive(Debug)]
pub struct Waiting<'a> {
    /// The client socket's readiness, if it is needed.
    pub socket: Option<Interest>,
    /// The script's pipes (and its pidfd), each with its readiness.
    pub pipes: Vec<(BorrowedFd<'a>, Interest)>,
}

/// A parsed request on its way through the pipeline, for models that run
/// the pipeline away from the connection (helper threads, stages).
#[derive(Debug)]
pub struct Request {
    /// The parsed head.
    pub head: RequestHead,
    /// The connection's keep-alive decision, for the `Connection` header.
    pub keep_alive: bool,
    /// The client (CGI's `REMOTE_ADDR`).
    pub peer: SocketAddr,
    /// The address the connection came in on (CGI's `SERVER_PORT`).
    pub local: Option<SocketAddr>,
    /// Internal redirects (CGI `Location: /path`) taken so far.
    pub(crate) redirects: u8,
    /// Only find the CGI script: a status 100 reply if it exists, its
    /// error page otherwise (before a `100 Continue` for a chunked body).
    pub(crate) probe: bool,
}

/// Which requests `drive` runs through the pipeline itself; the others
/// it hands out with [`Want::Process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inline {
    All,
    ExceptCgi,
    None,
}

/// Read buffer size, allocated when input is expected; it doubles up to what
/// a maximal head needs.
const READ_SIZE: usize = 4096;

/// One client connection: bytes in, requests handled in order, bytes out.
///
/// It never blocks by itself and never sleeps: [`drive`](Connection::drive)
/// goes as far as the socket allows and says what it waits for, so a
/// thread with a blocking socket and an epoll loop with a non-blocking one
/// run exactly the same protocol code.
#[derive(Debug)]
pub struct Connection {
    info: ConnInfo,
    buf: Box<[u8]>,
    /// Unparsed input is `buf[start..end]`.
    start: usize,
    end: usize,
    phase: Phase,
    served: u32,
    /// When the head being received must be complete: a total deadline,
    /// not an idle timer, so dribbling one byte at a time does not help.
    head_deadline: Instant,
    /// When an idle keep-alive connection is given up.
    idle_deadline: Instant,
    /// Hand access-log records to the model instead of writing them.
    defer_log: bool,
    /// Records kept back for [`Connection::take_log`].
    deferred_log: Vec<LogRecord>,
    /// A script was started whose pipes [`Connection::new_pipes`] has not handed out.
    cgi_new: bool,
    /// The driver is told of every new byte (edge-triggered epoll), so a
    /// short read means the socket is empty until it says otherwise.
    edge_triggered: bool,
    /// The last read returned less than it had room for, and no readiness
    /// was reported since: reading again would only say EAGAIN.
    drained: bool,
    /// Where the connection counts in the `connections` gauge.
    gauge: ConnState,
    stats: std::sync::Arc<Stats>,
    /// The current request's timestamps (timing on).
    tm: Timing,
    /// Numbered per process, for the trace.
    conn_id: u64,
    /// The caller's clock reading for deadlines ([`Connection::set_now`]),
    /// until the next `drive` ends.
    now: Option<Instant>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.stats.move_conn(self.gauge, ConnState::None);
        spares::give_back(&SPARE_BUFFERS, std::mem::take(&mut self.buf));
    }
}

thread_local! {
    /// Read buffers of connections that went idle, kept for the next ones
    /// that get data. An idle keep-alive connection holds no buffer (nginx
    /// frees its buffer too), yet a busy server neither allocates nor zeroes
    /// one per request: a loop reuses a few, warm in its cache. Enough for a
    /// loop's burst of ready connections; grown buffers (long heads) are freed.
    static SPARE_BUFFERS: Spares<Box<[u8]>> = const { Spares::new(64, |buf| buf.len() == READ_SIZE) };
    /// The allocations of answered request heads, for the next head parsed
    /// on the thread. A head of a few fields takes some 100 bytes, one of
    /// 30 fields ~1 KiB; larger ones are freed.
    static SPARE_HEADS: Spares<HeadBuffers> = const { Spares::new(64, |head| head.held() <= 4096) };
    /// The boxes of sent responses' [`Pending`]s, taken back once their
    /// record and queue are out (what is left in them holds no allocation).
    static SPARE_PENDINGS: Spares<Box<Pending>> = const { Spares::new(16, |_| true) };
    /// Log records whose strings are reused for the next request's, kept
    /// here rather than in the connection, so an idle keep-alive connection
    /// holds none; records grown by unusually long heads are freed.
    static SPARE_LOG_RECORDS: Spares<LogRecord> = const { Spares::new(64, |record| record_bytes(record) <= 2048) };
}

/// The bytes a log record's strings hold.
fn record_bytes(record: &LogRecord) -> usize {
    [&record.request_line, &record.referer, &record.user_agent]
        .iter()
        .flat_map(|s| s.as_ref())
        .map(String::capacity)
        .sum()
}

fn new_read_buffer() -> Box<[u8]> {
    vec![0; READ_SIZE].into_boxed_slice()
}

/// One request's timestamps ([`now_ns`]) and phase durations.
#[derive(Debug, Default)]
struct Timing {
    /// Connection start or the previous response's end: the wait begins.
    idle_since: Mark,
    /// The request's first byte was seen.
    first: Mark,
    /// The head was parsed; the pipeline may start.
    service_start: Mark,
    /// A request is out with the pipeline: `deliver` records its phases.
    taken: bool,
    /// When the model took the request out of the loop (`drive_split`, or
    /// a script under `drive_except_cgi`): its queue starts.
    handed_out: Mark,
    /// What the connection waited before it reached this `Connection` (a
    /// model's handoff queue): part of its first request's total.
    queued_before: u64,
    /// The response began to be written.
    write_start: Mark,
    /// The CGI script started.
    cgi_start: Mark,
    phases: PhaseTimes,
    data: &'static str,
    /// Sampled for the trace: the path is kept.
    trace_path: Option<Box<str>>,
}

/// A [`now_ns`] timestamp, or none, in 8 bytes where `Option<u64>` takes
/// 16: [`Timing`] lives in every connection, idle ones too, and idle
/// memory is what an event server is judged by (nginx: 0.5 KiB each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mark(Option<std::num::NonZeroU64>);

impl Mark {
    const NONE: Mark = Mark(None);

    /// The clock counts from boot, so 0 never comes; were it to, it would
    /// read as 1 ns rather than as no timestamp.
    fn at(ns: u64) -> Mark {
        Mark(std::num::NonZeroU64::new(ns.max(1)))
    }

    fn get(self) -> Option<u64> {
        self.0.map(std::num::NonZeroU64::get)
    }

    fn take(&mut self) -> Option<u64> {
        std::mem::take(self).get()
    }
}

impl From<Option<u64>> for Mark {
    fn from(ns: Option<u64>) -> Mark {
        ns.map_or(Mark::NONE, Mark::at)
    }
}

#[derive(Debug)]
enum Phase {
    /// Waiting for (the rest of) a request head.
    Head,
    /// (Split mode) a request waits to be taken by the model.
    Ready(Box<Job>),
    /// (Split mode) the model is running the pipeline for it; the job's
    /// request is out.
    Processing(Box<Job>),
    /// Sending a response.
    Write(Box<Pending>),
    /// Reading and dropping a request body nobody needs, to find the next request.
    Discard { remaining: u64, deadline: Instant },
    /// Closing after an error: our side is shut, input is drained for a
    /// while so the client reads the response instead of a reset (RFC 9112 §9.6).
    Linger { deadline: Instant },
    /// Receiving a chunked body for a CGI script, which must know its
    /// length before it starts (RFC 3875 §4.1.2, bad-input K5).
    CgiBody(Box<Collect>),
    /// A CGI script runs: its I/O is streamed.
    Cgi(Box<(CgiRun, Plan)>),
}

/// A request and its plan. Its one allocation lasts from the parsed head
/// to the delivered reply: the request leaves it while the pipeline runs.
#[derive(Debug)]
struct Job {
    request: Option<Request>,
    plan: Plan,
}

impl Inline {
    /// Whether `drive` runs the pipeline for a request so planned itself.
    fn runs(self, plan: &Plan) -> bool {
        match self {
            Inline::All => true,
            Inline::ExceptCgi => plan.cgi.is_none(),
            Inline::None => false,
        }
    }
}

impl Phase {
    fn ready(request: Request, plan: Plan) -> Phase {
        Phase::Ready(Box::new(Job { request: Some(request), plan }))
    }
}

/// A chunked request body being collected for a script.
#[derive(Debug)]
struct Collect {
    request: Request,
    plan: Plan,
    decoder: ChunkedDecoder,
    body: Vec<u8>,
    /// `100 Continue` still to send, if the client waits for it.
    interim: &'static [u8],
    deadline: Instant,
}

/// What the connection decided about a request before the pipeline ran.
#[derive(Debug)]
struct Plan {
    log: Option<LogRecord>,
    /// Body bytes to drop after the response, if the connection stays open.
    discard: u64,
    /// Input may still be arriving that we will not read.
    unread: bool,
    /// A HEAD request: whatever answers it carries no body.
    head_only: bool,
    /// The request is for a CGI script.
    cgi: Option<CgiPlan>,
}

/// How a CGI request's body reaches the script.
#[derive(Debug)]
struct CgiPlan {
    keep_alive: bool,
    expect_continue: bool,
    /// `Content-Length` bytes not yet received (streamed to the script).
    remaining: u64,
    /// A de-chunked body, received in full.
    collected: Vec<u8>,
    /// The request whose script is being looked for (`Request::probe`),
    /// for when it is found.
    probed: Option<Box<Request>>,
}

#[derive(Debug)]
struct Pending {
    reply: Reply,
    log: Option<LogRecord>,
    /// Body bytes to drop after the response before the next head.
    discard: u64,
    /// Input may still be arriving that we will not read: linger on close.
    linger: bool,
    /// Bytes sent when the deadline was last moved; progress moves it.
    sent_mark: u64,
    deadline: Instant,
}

impl Connection {
    /// A connection accepted at `now`.
    pub fn new(info: ConnInfo, now: Instant, pipeline: &Pipeline) -> Connection {
        Connection {
            info,
            buf: Box::default(),
            start: 0,
            end: 0,
            phase: Phase::Head,
            served: 0,
            head_deadline: now + pipeline.settings.header_timeout,
            idle_deadline: now + pipeline.settings.header_timeout,
            defer_log: false,
            deferred_log: Vec::new(),
            cgi_new: false,
            edge_triggered: false,
            drained: false,
            gauge: ConnState::None,
            stats: pipeline.stats.clone(),
            tm: Timing {
                idle_since: pipeline.stats.timing.then(|| pipeline.stats.ns_at(now)).into(),
                ..Timing::default()
            },
            conn_id: pipeline.stats.next_conn_id(),
            now: None,
        }
    }

    /// The caller read the clock at `now` and has not waited since — an
    /// event loop, once per wakeup, as nginx caches its time: deadlines set
    /// until the next `drive` (with the `deliver` or `timed_out` before it)
    /// ends count from `now` instead of a reading of their own, and so may
    /// be as stale as `now` is. Phase timestamps (timing on) are always
    /// read exactly. A blocking thread must not call this: its `drive` waits.
    pub fn set_now(&mut self, now: Instant) {
        self.now = Some(now);
    }

    /// The time a deadline counts from: `stamp`, a timestamp ([`now_ns`])
    /// just taken, if there is one; else the caller's reading; else the clock.
    fn deadline_base(&self, stamp: Option<u64>) -> Instant {
        match stamp {
            Some(ns) => self.stats.instant_at(ns),
            None => self.now.unwrap_or_else(Instant::now),
        }
    }

    /// A phase boundary's timestamp (timing on): `fresh` if it was just
    /// taken, else a clock read.
    fn stamp(&self, fresh: Option<u64>) -> Option<u64> {
        self.stats.timing.then(|| fresh.unwrap_or_else(now_ns))
    }

    /// Runs `f` with a reading already at hand (`stamp`, or the caller's)
    /// lent to its `Date` fields, so they need no clock read of their own.
    fn lend_now<R>(&self, stamp: Option<u64>, f: impl FnOnce() -> R) -> R {
        match stamp.map(|ns| self.stats.instant_at(ns)).or(self.now) {
            Some(now) => h1::with_now(now, f),
            None => f(),
        }
    }

    /// Moves the connection in the `connections` gauge after a `drive`.
    fn set_gauge(&mut self, want: &Want) {
        let state = match want {
            Want::Close => ConnState::None,
            Want::Read(_)
                if matches!(self.phase, Phase::Head) && self.start == self.end && self.served > 0 =>
            {
                ConnState::KeepAlive
            }
            Want::Read(_) => ConnState::Reading,
            Want::Write(_) | Want::Pipes(_) | Want::Process => ConnState::Writing,
        };
        self.set_state(state);
    }

    /// Moves the connection in the gauge as it changes state inside a
    /// `drive` (a blocking thread may stay in one for a long time).
    fn set_state(&mut self, state: ConnState) {
        if state != self.gauge {
            self.stats.move_conn(self.gauge, state);
            self.gauge = state;
        }
    }

    /// A request ended (sent, or the connection died under it) at `end`
    /// (timing on; its last phase ended then): counts it, records its
    /// phases and maybe a trace row, and starts the next wait.
    fn finish_request(&mut self, status: u16, bytes: u64, end: Option<u64>) {
        let stats = &*self.stats;
        let Some(end) = end else {
            stats.count_response(status, bytes);
            return;
        };
        let tm = &mut self.tm;
        if let Some(first) = tm.first.get() {
            let total = end.saturating_sub(first).saturating_add(std::mem::take(&mut tm.queued_before));
            tm.phases.set(TimedPhase::Total, total);
        }
        stats.record_request(status, bytes, &tm.phases);
        if let Some(path) = tm.trace_path.take() {
            let arrival = tm.first.get().unwrap_or(end);
            stats.trace_row(&TraceRow {
                conn: self.conn_id,
                arrival,
                service_start: tm.service_start.get().unwrap_or(arrival),
                service_end: end,
                phases: &tm.phases,
                data: tm.data,
                status,
                bytes,
                path: &path,
            });
        }
        // Field by field, so the durations array is not zeroed (`trace_path`
        // was taken above).
        tm.idle_since = Mark::at(end);
        tm.first = Mark::NONE;
        tm.service_start = Mark::NONE;
        tm.taken = false;
        tm.handed_out = Mark::NONE;
        tm.write_start = Mark::NONE;
        tm.cgi_start = Mark::NONE;
        tm.phases.clear();
        tm.data = "";
    }

    /// Keeps this connection's access-log records for the caller instead of
    /// writing them to `pipeline.access_log` when a response ends, so a
    /// model can log on threads of its own (`staged`'s log stage). Collect
    /// them with [`take_log`](Self::take_log) after every `drive`,
    /// `drive_split` and `timed_out`; records still held when the connection
    /// is dropped are lost. Records are only made while the access log is enabled.
    pub fn defer_log(&mut self) {
        self.defer_log = true;
    }

    /// The access-log records of responses that ended since the last call,
    /// oldest first; always empty unless [`defer_log`](Self::defer_log) was called.
    pub fn take_log(&mut self) -> std::vec::Drain<'_, LogRecord> {
        self.deferred_log.drain(..)
    }

    /// Requests answered so far.
    pub fn served(&self) -> u32 {
        self.served
    }

    /// Makes as much progress as `sock` allows, running the pipeline inline
    /// on the calling thread. `stopping` asks to close at the next request
    /// boundary (graceful shutdown).
    pub fn drive(&mut self, sock: &TcpStream, p: &Pipeline, stopping: bool) -> Want {
        self.run(sock, p, stopping, Inline::All)
    }

    /// Like [`drive`](Self::drive), but stops with [`Want::Process`] when a
    /// request is ready instead of running the pipeline itself.
    pub fn drive_split(&mut self, sock: &TcpStream, p: &Pipeline, stopping: bool) -> Want {
        self.run(sock, p, stopping, Inline::None)
    }

    /// Like [`drive`](Self::drive), but stops with [`Want::Process`] when
    /// the request ready is for a CGI script, whose start (`stat`, `exec`)
    /// may block: for an event loop that runs everything else itself.
    pub fn drive_except_cgi(&mut self, sock: &TcpStream, p: &Pipeline, stopping: bool) -> Want {
        self.run(sock, p, stopping, Inline::ExceptCgi)
    }

    /// Declares that the driver waits for readiness edge-triggered and calls
    /// [`readable`](Self::readable) for every readable event. A read that
    /// comes back short then ends the reading, as in nginx: the next bytes
    /// raise a new edge, so the `recv` that would only return EAGAIN — after
    /// most keep-alive responses — is skipped.
    pub fn set_edge_triggered(&mut self) {
        self.edge_triggered = true;
    }

    /// The socket reported readable (edge-triggered drivers).
    pub fn readable(&mut self) {
        self.drained = false;
    }

    /// Takes the request announced by [`Want::Process`]: the model runs
    /// it elsewhere (a queue, a pool, a spawner thread) and hands the reply
    /// back with [`deliver`](Self::deliver).
    pub fn take_request(&mut self) -> Option<Request> {
        match std::mem::replace(&mut self.phase, Phase::Head) {
            Phase::Ready(mut job) => {
                let request = job.request.take().expect("a ready job holds its request");
                if self.stats.timing {
                    self.tm.taken = true;
                    self.tm.handed_out = Mark::at(now_ns());
                }
                self.phase = Phase::Processing(job);
                Some(request)
            }
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// The connection waited `waited` in the model's queue before it
    /// reached this `Connection`: counted in its first request's queue
    /// phase and total.
    pub fn queued_before(&mut self, waited: Duration) {
        if self.stats.timing {
            let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
            self.tm.queued_before = ns;
            self.add_queue(ns);
        }
    }

    fn add_queue(&mut self, ns: u64) {
        let before = self.tm.phases.get(TimedPhase::Queue).unwrap_or(0);
        self.tm.phases.set(TimedPhase::Queue, before.saturating_add(ns));
    }

    /// Hands back the reply for the request taken with
    /// [`take_request`](Self::take_request); drive the connection again to send it.
    pub fn deliver(&mut self, reply: Reply, p: &Pipeline) {
        let Phase::Processing(job) = std::mem::replace(&mut self.phase, Phase::Head) else {
            panic!("deliver without a request taken");
        };
        self.deliver_from(job.plan, reply, None, p);
    }

    /// Runs the pipeline for `request` on this thread, now. The request
    /// goes straight from the parser to the pipeline, never parked in a
    /// [`Job`] (the common case: one allocation and two moves less).
    fn answer_inline(&mut self, request: Request, plan: Plan, fresh: Option<u64>, p: &Pipeline) {
        let start = self.stamp(fresh);
        if self.stats.timing {
            self.tm.taken = true;
            self.tm.handed_out = Mark::NONE;
        }
        let reply = self.lend_now(start, || p.answer(&request));
        spares::give_back(&SPARE_HEADS, request.head.into_buffers());
        self.deliver_from(plan, reply, start, p);
    }

    /// `inline_start`: the pipeline ran untimed on this thread since then
    /// (timing on), so its data phase ends with the timestamp taken here.
    fn deliver_from(&mut self, plan: Plan, reply: Reply, inline_start: Option<u64>, p: &Pipeline) {
        let mut at = None;
        if std::mem::take(&mut self.tm.taken) {
            // The data phase's end starts the next one (write, or a script's run).
            let now = now_ns();
            at = Some(now);
            let took = match inline_start {
                Some(start) => now.saturating_sub(start),
                None => u64::try_from(reply.data.took.as_nanos()).unwrap_or(u64::MAX),
            };
            // A 100-continue probe found the script: the request is not
            // answered yet, and its script start is recorded when it runs.
            let probe_passed = reply.status == 100
                && reply.cgi.is_none()
                && plan.cgi.as_ref().is_some_and(|cgi| cgi.probed.is_some());
            if !probe_passed {
                let (phase, name) = if reply.cgi.is_some() {
                    (TimedPhase::CgiSpawn, "cgi")
                } else if reply.data.hit {
                    (TimedPhase::DataHit, "hit")
                } else {
                    (TimedPhase::DataMiss, "miss")
                };
                self.tm.phases.set(phase, took);
                self.tm.data = name;
            }
            if let Some(handed_out) = self.tm.handed_out.take() {
                // Time between handing the request out and getting the
                // reply back, not spent in the pipeline: queues (a probe's
                // and its script's start add up).
                self.add_queue(now.saturating_sub(handed_out).saturating_sub(took));
            }
        }
        self.respond_planned(plan, reply, at, p);
    }

    /// While [`Want::Pipes`]: what the connection waits for, exactly (for
    /// `poll` and other level-triggered waits).
    pub fn waiting(&self) -> Waiting<'_> {
        match &self.phase {
            Phase::Cgi(cgi) => {
                let (socket, pipes) = cgi.0.waiting();
                Waiting { socket, pipes }
            }
            _ => Waiting { socket: None, pipes: Vec::new() },
        }
    }

    /// The pipes of a script started since the last call, each with every
    /// readiness it can report; empty otherwise. For edge-triggered pollers
    /// that register a descriptor once: they are closed (and so leave any
    /// epoll set) when the script's run ends.
    pub fn new_pipes(&mut self) -> Vec<(BorrowedFd<'_>, Interest)> {
        if !std::mem::take(&mut self.cgi_new) {
            return Vec::new();
        }
        match &self.phase {
            Phase::Cgi(cgi) => cgi.0.pipes(),
            _ => Vec::new(),
        }
    }

    /// For blocking threads after [`Want::Pipes`]: waits until the socket
    /// or a pipe is ready as [`waiting`](Self::waiting) says, or `until`.
    pub fn wait_blocking(&self, sock: &TcpStream, until: Instant) {
        let waiting = self.waiting();
        let flags = |i: Interest| {
            let mut f = PollFlags::empty();
            if i.is_readable() {
                f |= PollFlags::IN;
            }
            if i.is_writable() {
                f |= PollFlags::OUT;
            }
            f
        };
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(waiting.pipes.len() + 1);
        if let Some(interest) = waiting.socket {
            fds.push(PollFd::new(sock, flags(interest)));
        }
        for (fd, interest) in &waiting.pipes {
            fds.push(PollFd::from_borrowed_fd(*fd, flags(*interest)));
        }
        let left = until.saturating_duration_since(Instant::now());
        let timeout = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos().into() };
        // EINTR or an error: the caller drives again and finds out.
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }

    fn run(&mut self, sock: &TcpStream, p: &Pipeline, stopping: bool, inline: Inline) -> Want {
        let want = self.run_phases(sock, p, stopping, inline);
        self.set_gauge(&want);
        self.now = None;
        want
    }

    fn run_phases(&mut self, sock: &TcpStream, p: &Pipeline, stopping: bool, inline: Inline) -> Want {
        // A timestamp (timing on) taken at the end of one step, for the next
        // step to start with instead of reading the clock again: valid for
        // one turn of the loop only, in which nothing waits.
        let mut just_read: Option<u64> = None;
        loop {
            let fresh = just_read.take();
            match &mut self.phase {
                Phase::Ready(ready) if inline.runs(&ready.plan) => {
                    let Phase::Ready(job) = std::mem::replace(&mut self.phase, Phase::Head) else {
                        unreachable!("matched Ready");
                    };
                    let Job { request, plan } = *job;
                    self.answer_inline(request.expect("a ready job holds its request"), plan, fresh, p);
                }
                Phase::Ready(_) | Phase::Processing(_) => return Want::Process,
                Phase::CgiBody(_) => {
                    if let Some(want) = self.collect_body(sock, p) {
                        return want;
                    }
                }
                Phase::Cgi(_) => {
                    if let Some(want) = self.drive_cgi(sock, p) {
                        return want;
                    }
                }
                Phase::Head => {
                    if self.start < self.end {
                        let parse_start = if let Some(now) = self.stamp(fresh) {
                            if self.tm.first.get().is_none() {
                                self.tm.first = Mark::at(now);
                                if let Some(idle_since) = self.tm.idle_since.get() {
                                    self.tm.phases.set(TimedPhase::Wait, now.saturating_sub(idle_since));
                                }
                            }
                            Some(now)
                        } else {
                            None
                        };
                        let mut spare = spares::take(&SPARE_HEADS);
                        let parsed = h1::parse_request_reusing(
                            &self.buf[self.start..self.end],
                            &p.settings.limits,
                            &mut spare,
                        );
                        if let Some(spare) = spare {
                            spares::give_back(&SPARE_HEADS, spare);
                        }
                        match parsed {
                            Ok(Parsed::Complete { head, len }) => {
                                self.start += len;
                                if let (Some(t0), Some(first)) = (parse_start, self.tm.first.get()) {
                                    let now = now_ns();
                                    self.tm.phases.set(TimedPhase::Read, t0.saturating_sub(first));
                                    self.tm.phases.set(TimedPhase::Parse, now.saturating_sub(t0));
                                    self.tm.service_start = Mark::at(now);
                                    just_read = Some(now);
                                    if p.stats.sample() {
                                        self.tm.trace_path = Some(head.path().into());
                                    }
                                }
                                let (request, plan) = self.plan(head, sock, p, stopping);
                                if plan.cgi.is_some() {
                                    match request.head.framing {
                                        // RFC 9110 §15.5.14
                                        BodyFraming::Length(n) if n > p.settings.max_body => {
                                            self.fail_planned(plan, 413, p);
                                            continue;
                                        }
                                        BodyFraming::Chunked if request.head.expect_continue => {
                                            // `100 Continue` promises to read the body: first
                                            // make sure there is a script to read it (RFC 9110
                                            // §10.1.1), where a lookup may block. Should there
                                            // be none, the error closes the connection, since
                                            // the chunked body cannot be skipped unread.
                                            let probe = Request {
                                                head: request.head.clone(),
                                                keep_alive: false,
                                                peer: request.peer,
                                                local: request.local,
                                                redirects: 0,
                                                probe: true,
                                            };
                                            let mut plan = plan;
                                            if let Some(cgi) = plan.cgi.as_mut() {
                                                cgi.probed = Some(Box::new(request));
                                            }
                                            self.phase = Phase::ready(probe, plan);
                                            continue;
                                        }
                                        BodyFraming::Chunked => {
                                            self.phase = collect_chunked(request, plan, b"", p);
                                            continue;
                                        }
                                        _ => {}
                                    }
                                }
                                if inline.runs(&plan) {
                                    self.answer_inline(request, plan, just_read.take(), p);
                                } else {
                                    self.phase = Phase::ready(request, plan);
                                }
                                continue;
                            }
                            // A client that keeps dribbling never lets a
                            // blocking read time out: the head deadline is
                            // checked on the data path too (slowloris).
                            Ok(Parsed::Partial) if self.deadline_base(parse_start) >= self.head_deadline => {
                                self.refuse(408, p);
                                continue;
                            }
                            Ok(Parsed::Partial) => {}
                            Err(e) => {
                                self.refuse(e.status(), p);
                                continue;
                            }
                        }
                    } else if stopping && self.served > 0 {
                        // Idle between requests: the graceful stop ends it here.
                        return Want::Close;
                    }
                    let was_empty = self.start == self.end;
                    match self.fill(sock) {
                        Ok(0) => return Want::Close,
                        Ok(_) if was_empty && self.served > 0 => {
                            self.set_state(ConnState::Reading);
                            // The next request began: one reading for its
                            // deadline and its first timestamp.
                            just_read = self.stamp(None);
                            self.head_deadline = self.deadline_base(just_read) + p.settings.header_timeout;
                        }
                        Ok(_) => {}
                        Err(e) if would_block(&e) => {
                            if stopping && self.start == self.end {
                                // Accepted before the stop but silent since.
                                return Want::Close;
                            }
                            let pending = self.start < self.end || self.served == 0;
                            return Want::Read(if pending { self.head_deadline } else { self.idle_deadline });
                        }
                        Err(_) => return Want::Close,
                    }
                }
                Phase::Write(pending) => match pending.reply.out.write_to(sock) {
                    Ok(Progress::Done) => {
                        if let Some(want) = self.finish_response(sock, p) {
                            return want;
                        }
                        // The response's end (timing on) is a pipelined
                        // request's first timestamp.
                        just_read = self.tm.idle_since.get();
                    }
                    Ok(Progress::Blocked) => {
                        let sent = pending.reply.out.bytes_sent();
                        if sent != pending.sent_mark {
                            pending.sent_mark = sent;
                            // `deadline_base(None)`, but `self.phase` is borrowed.
                            pending.deadline =
                                self.now.unwrap_or_else(Instant::now) + p.settings.send_timeout;
                        }
                        return Want::Write(pending.deadline);
                    }
                    Err(_) => {
                        self.abort(p);
                        return Want::Close;
                    }
                },
                Phase::Discard { remaining, deadline } => {
                    let buffered = (self.end - self.start) as u64;
                    let take = buffered.min(*remaining);
                    self.start += take as usize;
                    *remaining -= take;
                    if *remaining == 0 {
                        self.await_next_head(p, fresh);
                        just_read = fresh;
                        continue;
                    }
                    let deadline = *deadline;
                    match self.fill(sock) {
                        Ok(0) => return Want::Close,
                        Ok(_) => {}
                        Err(e) if would_block(&e) => return Want::Read(deadline),
                        Err(_) => return Want::Close,
                    }
                }
                Phase::Linger { deadline } => {
                    let deadline = *deadline;
                    self.start = 0;
                    self.end = 0;
                    match self.fill(sock) {
                        Ok(0) => return Want::Close,
                        Ok(_) => {}
                        Err(e) if would_block(&e) => return Want::Read(deadline),
                        Err(_) => return Want::Close,
                    }
                }
            }
        }
    }

    /// The deadline last returned by `drive` has passed. Returns `true` if
    /// there is something to send (a 408), so `drive` should be called
    /// again; `false` if the socket should just be closed.
    pub fn timed_out(&mut self, p: &Pipeline) -> bool {
        match std::mem::replace(&mut self.phase, Phase::Head) {
            Phase::Cgi(cgi) => {
                let (run, plan) = *cgi;
                return self.cgi_timed_out(run, plan, p);
            }
            Phase::CgiBody(collect) => {
                self.fail_planned(collect.plan, 408, p);
                return true;
            }
            other => self.phase = other,
        }
        match self.phase {
            // A request had begun: say why it is refused (RFC 9110 §15.5.9).
            // An idle connection is closed silently, as nginx does, so
            // browsers' speculative connections do not log errors.
            Phase::Head if self.start < self.end => {
                self.refuse(408, p);
                true
            }
            _ => {
                self.abort(p);
                false
            }
        }
    }

    /// Reads into the free tail of the buffer; grows it only while a head
    /// is incomplete (parsing bounds that by `max_header_bytes`).
    ///
    /// With nothing buffered it borrows a spare buffer for the read and
    /// keeps it only if bytes came: a connection that turns out to be idle —
    /// most keep-alive connections, most of the time — then holds none.
    fn fill(&mut self, sock: &TcpStream) -> io::Result<usize> {
        if self.drained {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
            if self.buf.is_empty() {
                let mut buf = spares::take(&SPARE_BUFFERS).unwrap_or_else(new_read_buffer);
                let read = read_retrying(sock, &mut buf);
                if matches!(read, Ok(1..)) {
                    self.buf = buf;
                } else {
                    spares::give_back(&SPARE_BUFFERS, buf);
                }
                let n = read?;
                self.end = n;
                self.drained = self.edge_triggered && n < self.buf.len();
                return Ok(n);
            }
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let mut bigger = vec![0; self.buf.len() * 2].into_boxed_slice();
                bigger[..self.end].copy_from_slice(&self.buf[..self.end]);
                self.buf = bigger;
            }
        }
        let room = self.buf.len() - self.end;
        let n = read_retrying(sock, &mut self.buf[self.end..])?;
        self.end += n;
        // Zero is end of stream, which ends the connection anyway.
        self.drained = self.edge_triggered && n < room;
        Ok(n)
    }

    /// Decides, before the pipeline runs, what happens to the connection
    /// after this request.
    fn plan(&self, head: RequestHead, sock: &TcpStream, p: &Pipeline, stopping: bool) -> (Request, Plan) {
        let settings = &p.settings;
        if p.is_cgi(&head) {
            return self.plan_cgi(head, sock, p, stopping);
        }
        // A body no handler wants is read and dropped to find the next
        // request (RFC 9112 §6.3). One too large, chunked, or whose sender
        // waits for 100-continue is not worth it: answer and close instead
        // (RFC 9110 §10.1.1 allows either).
        let discard = match head.framing {
            BodyFraming::None | BodyFraming::Length(0) => Some(0),
            BodyFraming::Length(n) if n <= settings.max_body && !head.expect_continue => Some(n),
            _ => None,
        };
        let keep_alive = head.keep_alive
            && discard.is_some()
            && !stopping
            && self.served + 1 < settings.max_keepalive_requests;
        let log = self.log_record(&head, p);
        let unread = self.start < self.end || head.framing != BodyFraming::None;
        let head_only = head.method == h1::Method::Head;
        let plan = Plan { log, discard: discard.unwrap_or(0), unread, head_only, cgi: None };
        let peer = self.info.peer;
        (Request { head, keep_alive, peer, local: None, redirects: 0, probe: false }, plan)
    }

    /// [`plan`](Self::plan) for a script: its body is the script's input,
    /// so it is read whole (a chunked one before the script starts), and
    /// the connection can stay open after any body we accept.
    fn plan_cgi(&self, head: RequestHead, sock: &TcpStream, p: &Pipeline, stopping: bool) -> (Request, Plan) {
        let settings = &p.settings;
        let (body_ok, remaining) = match head.framing {
            BodyFraming::None => (true, 0),
            BodyFraming::Length(n) => (n <= settings.max_body, n),
            BodyFraming::Chunked => (true, 0),
        };
        let keep_alive =
            head.keep_alive && body_ok && !stopping && self.served + 1 < settings.max_keepalive_requests;
        let log = self.log_record(&head, p);
        let unread = self.start < self.end || head.framing != BodyFraming::None;
        let cgi = CgiPlan {
            keep_alive,
            expect_continue: head.expect_continue,
            remaining,
            collected: Vec::new(),
            probed: None,
        };
        let plan =
            Plan { log, discard: 0, unread, head_only: head.method == h1::Method::Head, cgi: Some(cgi) };
        let local = sock.local_addr().ok();
        let request = Request { head, keep_alive, peer: self.info.peer, local, redirects: 0, probe: false };
        (request, plan)
    }

    /// A record from this thread's spares when there is one: its strings
    /// keep their allocations.
    fn log_record(&self, head: &RequestHead, p: &Pipeline) -> Option<LogRecord> {
        if !p.access_log.is_enabled() {
            return None;
        }
        let mut record = spares::take(&SPARE_LOG_RECORDS).unwrap_or_else(|| LogRecord {
            peer: self.info.peer.ip(),
            request_line: None,
            status: 0,
            body_bytes: 0,
            referer: None,
            user_agent: None,
        });
        record.peer = self.info.peer.ip();
        (record.status, record.body_bytes) = (0, 0);
        write_request_line(head, record.request_line.get_or_insert_default());
        overwrite(&mut record.referer, head.header_str("Referer"));
        overwrite(&mut record.user_agent, head.header_str("User-Agent"));
        Some(record)
    }

    /// Answers a planned request with an error page and closes.
    fn fail_planned(&mut self, plan: Plan, status: u16, p: &Pipeline) {
        let log = plan.log.map(|log| LogRecord { status, ..log });
        let reply = reply::error_page(&p.settings, status, h1::Version::Http11, false, plan.head_only, &[]);
        self.respond(reply, log, 0, true, None, p);
    }

    /// Collects a chunked body for a script. `Some` ends `drive`.
    fn collect_body(&mut self, sock: &TcpStream, p: &Pipeline) -> Option<Want> {
        let Phase::CgiBody(mut c) = std::mem::replace(&mut self.phase, Phase::Head) else {
            unreachable!("called in the CgiBody phase");
        };
        loop {
            if !c.interim.is_empty() {
                match rustix::net::send(sock, c.interim, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                    Ok(n) => c.interim = &c.interim[n..],
                    Err(Errno::AGAIN | Errno::INTR) => {
                        let deadline = c.deadline;
                        self.phase = Phase::CgiBody(c);
                        return Some(Want::Write(deadline));
                    }
                    Err(_) => return Some(Want::Close),
                }
                continue;
            }
            if self.start < self.end {
                match c.decoder.decode(&self.buf[self.start..self.end], &mut c.body) {
                    Ok(n) => {
                        self.start += n;
                        c.deadline = Instant::now() + p.settings.header_timeout;
                    }
                    Err(e) => {
                        self.fail_planned(c.plan, e.status(), p);
                        return None;
                    }
                }
                if c.decoder.is_done() {
                    let Collect { mut request, mut plan, body, .. } = *c;
                    // The script sees a body of known length (§4.1.2).
                    request.head.framing = BodyFraming::Length(body.len() as u64);
                    request.head.expect_continue = false;
                    plan.unread = self.start < self.end;
                    if let Some(cgi) = plan.cgi.as_mut() {
                        cgi.collected = body;
                        cgi.expect_continue = false;
                    }
                    self.phase = Phase::ready(request, plan);
                    return None;
                }
            }
            if Instant::now() >= c.deadline {
                self.fail_planned(c.plan, 408, p);
                return None;
            }
            match self.fill(sock) {
                Ok(0) => return Some(Want::Close),
                Ok(_) => {}
                Err(e) if would_block(&e) => {
                    let deadline = c.deadline;
                    self.phase = Phase::CgiBody(c);
                    return Some(Want::Read(deadline));
                }
                Err(_) => return Some(Want::Close),
            }
        }
    }

    /// --cgi-timeout: the script made no progress; its whole process group
    /// goes (bad-input K12). `true`: a 504 is queued; `false`: output had
    /// begun, so only a close can tell the client.
    fn cgi_timed_out(&mut self, mut run: CgiRun, plan: Plan, p: &Pipeline) -> bool {
        run.kill();
        p.error_log.error(format_args!("cgi {}: timed out; killed", run.sp.process.name));
        if !run.started {
            self.fail_planned(plan, 504, p);
            return true;
        }
        self.log_cgi(&run, plan, p);
        false
    }

    /// Streams a script's I/O. `Some` ends `drive`.
    fn drive_cgi(&mut self, sock: &TcpStream, p: &Pipeline) -> Option<Want> {
        let Phase::Cgi(cgi) = std::mem::replace(&mut self.phase, Phase::Head) else {
            unreachable!("called in the Cgi phase");
        };
        let (mut run, plan) = *cgi;
        match run.pump(sock, p) {
            Step::Wait(deadline) => {
                self.phase = Phase::Cgi(Box::new((run, plan)));
                Some(Want::Pipes(deadline))
            }
            Step::TimedOut => {
                if self.cgi_timed_out(run, plan, p) {
                    None
                } else {
                    Some(Want::Close)
                }
            }
            Step::Done { close } => {
                let discard = plan.discard + run.body_remaining;
                let unread = discard > 0 || self.start < self.end;
                self.log_cgi(&run, plan, p);
                drop(run);
                self.after_response(sock, close, unread, discard, p)
            }
            Step::Failed(status) => {
                drop(run);
                self.fail_planned(plan, status, p);
                None
            }
            Step::Redirect(location) if run.sp.redirects + 1 >= MAX_REDIRECTS => {
                p.error_log.error(format_args!(
                    "cgi {}: more than {MAX_REDIRECTS} internal redirects (to {location})",
                    run.sp.process.name
                ));
                drop(run);
                self.fail_planned(plan, 500, p);
                None
            }
            Step::Redirect(location) => {
                // §6.2.2: answer as for a GET of that path, without the
                // body; a HEAD stays a HEAD (Apache keeps `header_only`),
                // so its answer has no body either.
                let sp = &run.sp;
                let mut head = sp.head.redirected(&location, |h| {
                    !["content-length", "content-type", "transfer-encoding"]
                        .iter()
                        .any(|n| h.name.eq_ignore_ascii_case(n))
                });
                if head.method != h1::Method::Head {
                    head.method = h1::Method::Get;
                }
                head.framing = BodyFraming::None;
                head.expect_continue = false;
                let keep_alive = plan.cgi.as_ref().is_some_and(|c| c.keep_alive);
                let request = Request {
                    head,
                    keep_alive,
                    peer: self.info.peer,
                    local: sp.local,
                    redirects: sp.redirects + 1,
                    probe: false,
                };
                // The first script's body is dropped, and what it did not read of
                // the request's body is dropped after the new response.
                let discard = plan.discard + run.body_remaining;
                drop(run);
                let cgi = CgiPlan {
                    keep_alive,
                    expect_continue: false,
                    remaining: 0,
                    collected: Vec::new(),
                    probed: None,
                };
                let plan = Plan { cgi: Some(cgi), discard, ..plan };
                self.phase = Phase::ready(request, plan);
                None
            }
            Step::Abort => {
                self.log_cgi(&run, plan, p);
                Some(Want::Close)
            }
        }
    }

    fn log_cgi(&mut self, run: &CgiRun, plan: Plan, p: &Pipeline) {
        let mut end = p.stats.timing.then(now_ns);
        if let (Some(start), Some(now)) = (self.tm.cgi_start.take(), end) {
            self.tm.phases.set(TimedPhase::CgiRun, now.saturating_sub(start));
        }
        if let Some(mut record) = plan.log {
            record.status = run.status;
            record.body_bytes = run.body_bytes;
            self.served += 1;
            if self.defer_log {
                self.deferred_log.push(record);
            } else {
                self.lend_now(end, || p.access_log.record(&record));
                end = end.map(|start| self.timed_log(start));
            }
        } else {
            self.served += 1;
        }
        self.finish_request(run.status, run.body_bytes, end);
    }

    /// Records the log phase, which began at `start` (the previous phase's
    /// end) and ends now; returns now.
    fn timed_log(&mut self, start: u64) -> u64 {
        let now = now_ns();
        self.tm.phases.set(TimedPhase::Log, now.saturating_sub(start));
        now
    }

    /// `at`: a timestamp just taken (timing on), the start of what follows.
    fn respond_planned(&mut self, mut plan: Plan, mut reply: Reply, at: Option<u64>, p: &Pipeline) {
        if let Some(request) = plan.cgi.as_mut().and_then(|cgi| cgi.probed.take()) {
            if reply.status == 100 && reply.cgi.is_none() {
                // The script exists: ask for the body, then start it.
                self.phase = collect_chunked(*request, plan, CONTINUE, p);
                return;
            }
            // Otherwise the probe's error page, which closes.
        }
        if let Some(cgi_plan) = plan.cgi.take() {
            let CgiPlan { keep_alive, expect_continue, mut remaining, collected, .. } = cgi_plan;
            let Some(spawned) = reply.cgi.take() else {
                // The script did not start (404, 403, 503...): its body, if
                // any, is dropped to find the next request.
                plan.discard += remaining;
                return self.respond_planned(plan, reply, at, p);
            };
            let buffered = if collected.is_empty() {
                // The part of the body that arrived with the head.
                let take = remaining.min((self.end - self.start) as u64) as usize;
                let bytes = self.buf[self.start..self.start + take].to_vec();
                self.start += take;
                remaining -= take as u64;
                bytes
            } else {
                collected
            };
            let run = CgiRun::new(spawned, keep_alive, buffered, remaining, expect_continue, p);
            plan.cgi = Some(CgiPlan {
                keep_alive,
                expect_continue: false,
                remaining: 0,
                collected: Vec::new(),
                probed: None,
            });
            self.phase = Phase::Cgi(Box::new((run, plan)));
            self.cgi_new = true;
            self.tm.cgi_start = self.stamp(at).into();
            return;
        }
        let log = plan.log.map(|log| LogRecord { status: reply.status, ..log });
        let close = reply.close;
        self.respond(reply, log, if close { 0 } else { plan.discard }, close && plan.unread, at, p);
    }

    /// Answers input that is not a request: parse errors and timeouts.
    fn refuse(&mut self, status: u16, p: &Pipeline) {
        let log = p.access_log.is_enabled().then(|| LogRecord {
            peer: self.info.peer.ip(),
            request_line: first_line(&self.buf[self.start..self.end]),
            status,
            body_bytes: 0,
            referer: None,
            user_agent: None,
        });
        self.respond(reply::refuse(&p.settings, status), log, 0, true, None, p);
    }

    /// `at`: a timestamp just taken (timing on), when the write starts.
    fn respond(
        &mut self,
        reply: Reply,
        log: Option<LogRecord>,
        discard: u64,
        linger: bool,
        at: Option<u64>,
        p: &Pipeline,
    ) {
        // The write starts when its deadline is set: one clock read for both.
        self.tm.write_start = self.stamp(at).into();
        self.set_state(ConnState::Writing);
        let deadline = self.deadline_base(self.tm.write_start.get()) + p.settings.send_timeout;
        let pending = Pending { reply, log, discard, linger, sent_mark: 0, deadline };
        self.phase = Phase::Write(match spares::take(&SPARE_PENDINGS) {
            Some(mut spare) => {
                *spare = pending;
                spare
            }
            None => Box::new(pending),
        });
    }

    /// The response is out: log it and move on. `Some` ends `drive`.
    fn finish_response(&mut self, sock: &TcpStream, p: &Pipeline) -> Option<Want> {
        let Phase::Write(mut pending) = std::mem::replace(&mut self.phase, Phase::Head) else {
            unreachable!("called in the write phase");
        };
        self.served += 1;
        self.log(p, &mut pending);
        reply::spare::give_back(std::mem::take(&mut pending.reply.out));
        let (close, linger, discard) = (pending.reply.close, pending.linger, pending.discard);
        debug_assert!(pending.log.is_none() && pending.reply.cgi.is_none());
        spares::give_back(&SPARE_PENDINGS, pending);
        self.after_response(sock, close, linger, discard, p)
    }

    /// What follows a logged response (a file's or a script's): close, at
    /// once or lingering if the client may still be sending (`linger`);
    /// or read and drop `discard` body bytes; or wait for the next head.
    /// Deadlines count from the response's end. `Some` ends `drive`.
    fn after_response(
        &mut self,
        sock: &TcpStream,
        close: bool,
        linger: bool,
        discard: u64,
        p: &Pipeline,
    ) -> Option<Want> {
        let ended = self.tm.idle_since.get();
        if close {
            if !linger {
                return Some(Want::Close);
            }
            let _ = sock.shutdown(Direction::Write);
            self.phase = Phase::Linger { deadline: self.deadline_base(ended) + p.settings.linger_timeout };
        } else if discard > 0 {
            let deadline = self.deadline_base(ended) + p.settings.header_timeout;
            self.phase = Phase::Discard { remaining: discard, deadline };
        } else {
            self.await_next_head(p, ended);
        }
        None
    }

    /// `ended` is when the previous request ended, if just now and timed:
    /// its timestamp starts the deadlines too instead of another clock read.
    fn await_next_head(&mut self, p: &Pipeline, ended: Option<u64>) {
        if self.start == self.end {
            // An idle keep-alive connection keeps no buffer until its next
            // request arrives (nginx does the same): ten thousand idle
            // clients then cost a few hundred bytes each, not 4 KiB.
            spares::give_back(&SPARE_BUFFERS, std::mem::take(&mut self.buf));
            (self.start, self.end) = (0, 0);
            self.set_state(ConnState::KeepAlive);
        }
        let now = self.deadline_base(ended);
        self.phase = Phase::Head;
        self.head_deadline = now + p.settings.header_timeout;
        self.idle_deadline = now + p.settings.keepalive_timeout;
    }

    /// The connection dies mid-response: log what was sent (a 200 that was
    /// cut short still shows its real byte count).
    fn abort(&mut self, p: &Pipeline) {
        match std::mem::replace(&mut self.phase, Phase::Head) {
            Phase::Write(mut pending) => self.log(p, &mut pending),
            Phase::Cgi(cgi) => {
                let (run, plan) = *cgi;
                self.log_cgi(&run, plan, p);
            }
            _ => {}
        }
    }

    fn log(&mut self, p: &Pipeline, pending: &mut Pending) {
        let mut end = p.stats.timing.then(now_ns);
        if let (Some(start), Some(now)) = (self.tm.write_start.take(), end) {
            self.tm.phases.set(TimedPhase::Write, now.saturating_sub(start));
        }
        if let Some(mut record) = pending.log.take() {
            record.body_bytes = pending.reply.out.bytes_sent().saturating_sub(pending.reply.head_len);
            if self.defer_log {
                self.deferred_log.push(record);
            } else {
                self.lend_now(end, || p.access_log.record(&record));
                end = end.map(|start| self.timed_log(start));
                spares::give_back(&SPARE_LOG_RECORDS, record);
            }
        }
        self.finish_request(pending.reply.status, pending.reply.out.bytes_sent(), end);
    }
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The phase that receives a chunked body for a script, after `interim`.
fn collect_chunked(request: Request, plan: Plan, interim: &'static [u8], p: &Pipeline) -> Phase {
    Phase::CgiBody(Box::new(Collect {
        interim,
        decoder: ChunkedDecoder::new(p.settings.max_body),
        body: Vec::new(),
        deadline: Instant::now() + p.settings.header_timeout,
        request,
        plan,
    }))
}

/// The request line as received, for the log, in place of what `line`
/// held; built by hand because `format!` costs a measurable share of a
/// small keep-alive request.
fn write_request_line(head: &RequestHead, line: &mut String) {
    let (method, target, version) = (head.method.as_str(), head.target(), version_str(head.version));
    line.clear();
    line.reserve(method.len() + target.len() + version.len() + 2);
    line.push_str(method);
    line.push(' ');
    line.push_str(target);
    line.push(' ');
    line.push_str(version);
}

/// Sets `slot` to `value`, in the string it already has if any.
fn overwrite(slot: &mut Option<String>, value: Option<&str>) {
    match (slot.as_mut(), value) {
        (Some(old), Some(value)) => {
            old.clear();
            old.push_str(value);
        }
        (_, value) => *slot = value.map(str::to_owned),
    }
}

fn read_retrying(mut sock: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match sock.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

fn version_str(v: h1::Version) -> &'static str {
    match v {
        h1::Version::Http10 => "HTTP/1.0",
        h1::Version::Http11 => "HTTP/1.1",
    }
}

/// The request line of unparseable input, for the log (bounded, lossy).
fn first_line(input: &[u8]) -> Option<String> {
    let input = &input[..input.len().min(1024)];
    let line = input.split(|&b| b == b'\r' || b == b'\n').find(|l| !l.is_empty())?;
    Some(String::from_utf8_lossy(line).into_owned())
}

/// How often a blocking thread wakes to check its deadlines and the stop
/// flag: the read and write timeout [`serve_blocking`] expects its sockets to
/// have (set once on the listener with
/// `transport::listener::set_accepted_defaults`, inherited by every accepted socket).
pub const BLOCKING_TICK: Duration = Duration::from_millis(250);

/// Serves one connection on the calling thread with blocking I/O — the
/// loop every thread- and process-based model runs.
///
/// The socket's [`BLOCKING_TICK`] timeouts turn blocking reads and writes
/// into periodic checks of the connection's deadlines and of `stop`, at no
/// cost while data flows.
pub fn serve_blocking(stream: TcpStream, p: &Pipeline, stop: &Shutdown) {
    serve_blocking_from(stream, p, stop, None);
}

/// [`serve_blocking`] for a connection that waited `queued` in the model's
/// handoff queue since it was accepted: the wait counts in its first
/// request (queue phase, total).
pub fn serve_blocking_queued(stream: TcpStream, p: &Pipeline, stop: &Shutdown, queued: Duration) {
    serve_blocking_from(stream, p, stop, Some(queued));
}

fn serve_blocking_from(stream: TcpStream, p: &Pipeline, stop: &Shutdown, queued: Option<Duration>) {
    let Ok(peer) = stream.peer_addr() else { return };
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), p);
    if let Some(queued) = queued {
        conn.queued_before(queued);
    }
    loop {
        let deadline = match conn.drive(&stream, p, stop.is_triggered()) {
            Want::Close => return,
            Want::Read(deadline) | Want::Write(deadline) => deadline,
            Want::Pipes(deadline) => {
                // A script runs: wait for it or the client, a tick at most.
                conn.wait_blocking(&stream, deadline.min(Instant::now() + BLOCKING_TICK));
                deadline
            }
            Want::Process => unreachable!("drive runs the pipeline inline"),
        };
        if Instant::now() >= deadline && !conn.timed_out(p) {
            return;
        }
    }
}

/// Turns a connection away because the server is at capacity: a `503`
/// with `Retry-After`, written without blocking and without a thread, then
/// closed. Whatever request bytes already arrived are drained first, so
/// the close does not become a reset that destroys the response.
pub fn refuse_overloaded(stream: TcpStream, p: &Pipeline) {
    let Ok(peer) = stream.peer_addr() else { return };
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut drain = [0u8; 4096];
    let mut first = Vec::new();
    while let Ok(n @ 1..) = (&stream).read(&mut drain) {
        if first.is_empty() {
            first.extend_from_slice(&drain[..n]);
        }
    }
    let mut reply =
        reply::error_page(&p.settings, 503, h1::Version::Http11, false, false, &[("Retry-After", "1")]);
    let _ = reply.out.write_to(&stream);
    let _ = stream.shutdown(Direction::Write);
    if p.access_log.is_enabled() {
        p.access_log.record(&LogRecord {
            peer: peer.ip(),
            request_line: first_line(&first),
            status: 503,
            body_bytes: reply.out.bytes_sent().saturating_sub(reply.head_len),
            referer: None,
            user_agent: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accesslog::LogTarget;
    use crate::stats::TRACE_HEADER;
    use crate::{AccessLog, EmbeddedFile, ErrorLog, Settings, Site};
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::Arc;

    /// An idle keep-alive connection of the event models is this struct and
    /// little else (`bench/models.sh idle`: PSS per idle connection, target
    /// 0.5 KiB with the loop's own bookkeeping), so growing it is a decision.
    #[test]
    fn a_connection_stays_small() {
        let size = std::mem::size_of::<Connection>();
        assert!(size <= 400, "Connection is {size} bytes");
        assert_eq!(std::mem::size_of::<Mark>(), 8);
    }

    #[test]
    fn deferred_log_records_go_to_the_caller() {
        static FILES: &[EmbeddedFile] = &[EmbeddedFile { path: "/a.txt", bytes: b"hello" }];
        let access = Arc::new(AccessLog::open(LogTarget::Stdout).unwrap());
        let p =
            Pipeline::new(Settings::default(), Site::embedded(FILES), access, Arc::new(ErrorLog::stderr()));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
        conn.defer_log();
        client
            .write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut records = Vec::new();
        for _ in 0..100 {
            assert!(matches!(conn.drive(&server, &p, false), Want::Read(_)));
            records.extend(conn.take_log());
            if records.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let got: Vec<_> = records.iter().map(|r| (r.status, r.body_bytes)).collect();
        assert_eq!(got[0], (200, 5));
        assert_eq!(got[1].0, 404);
        assert_eq!(records[0].request_line.as_deref(), Some("GET /a.txt HTTP/1.1"));
        assert!(conn.take_log().next().is_none(), "taken records are gone");
    }

    static FILE: &[EmbeddedFile] = &[EmbeddedFile { path: "/a.txt", bytes: b"hello" }];
    const GET: &[u8] = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";

    /// A client and the server's non-blocking end of its connection.
    fn connected() -> (TcpStream, TcpStream, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server, peer)
    }

    /// Drives until `served` responses are out; the deadline it then waits for.
    fn drive_until_served(
        conn: &mut Connection,
        sock: &TcpStream,
        p: &Pipeline,
        served: u32,
        now: Option<Instant>,
    ) -> Instant {
        for _ in 0..100 {
            if let Some(now) = now {
                conn.set_now(now);
            }
            match conn.drive(sock, p, false) {
                Want::Read(deadline) if conn.served() == served => return deadline,
                Want::Read(_) => std::thread::sleep(Duration::from_millis(10)),
                other => panic!("{other:?}"),
            }
        }
        panic!("no response");
    }

    #[test]
    fn deadlines_count_from_the_callers_reading_for_one_drive() {
        let access = Arc::new(AccessLog::off());
        let p =
            Pipeline::new(Settings::default(), Site::embedded(FILE), access, Arc::new(ErrorLog::stderr()))
                .with_stats(Stats::new(false));
        let (mut client, server, peer) = connected();
        let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
        // A reading the connection cannot have taken itself.
        let lent = Instant::now() + Duration::from_secs(3600);
        client.write_all(GET).unwrap();
        let idle = drive_until_served(&mut conn, &server, &p, 1, Some(lent));
        assert_eq!(idle, lent + p.settings.keepalive_timeout);
        // Not lent again: the connection reads the clock.
        client.write_all(GET).unwrap();
        let idle = drive_until_served(&mut conn, &server, &p, 2, None);
        assert!(idle <= Instant::now() + p.settings.keepalive_timeout, "{idle:?}");
    }

    #[test]
    fn phases_follow_each_other_without_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let (log, trace) = (dir.path().join("access.log"), dir.path().join("trace.csv"));
        let access = Arc::new(AccessLog::open(LogTarget::File(log)).unwrap());
        let stats = Stats::new(true).with_trace(&trace, 1.0).unwrap();
        let p =
            Pipeline::new(Settings::default(), Site::embedded(FILE), access, Arc::new(ErrorLog::stderr()))
                .with_stats(stats);
        let (mut client, server, peer) = connected();
        let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
        // The second request is pipelined: it starts when the first ends.
        client.write_all(&[GET, GET].concat()).unwrap();
        let idle = drive_until_served(&mut conn, &server, &p, 2, None);
        assert!(idle <= Instant::now() + p.settings.keepalive_timeout, "{idle:?}");
        p.stats.flush();
        let text = std::fs::read_to_string(&trace).unwrap();
        let header: Vec<&str> = TRACE_HEADER.trim_end().split(',').collect();
        let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 2, "{text}");
        for row in rows {
            let us =
                |name: &str| row[header.iter().position(|h| *h == name).unwrap()].parse::<f64>().unwrap();
            let phases = ["read_us", "parse_us", "data_us", "write_us", "log_us"].map(us);
            let total = us("service_end_us") - us("arrival_us");
            // Microseconds, each rounded on its own.
            assert!((phases.iter().sum::<f64>() - total).abs() <= 2.0, "{phases:?} against {total}: {row:?}");
            let head = us("service_start_us") - us("arrival_us");
            assert!((phases[0] + phases[1] - head).abs() <= 2.0, "{phases:?} against {head}: {row:?}");
        }
    }
}
