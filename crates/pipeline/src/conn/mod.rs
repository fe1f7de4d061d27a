//! The per-connection HTTP/1.1 state machine, shared by every model.
//!
//! * this file — the connection, its states, what a driver calls
//!   (`step`, `take_request`/`deliver`, `timed_out`) and the head state:
//!   run the pipeline or hand the request out;
//! * `head.rs` — the head parsed as it arrives, its deadline, the plan;
//! * `respond.rs` — writing a response, logging it, and what follows it
//!   (close, linger, discard a body, wait for the next head);
//! * `stream.rs` — the states of a request whose handler reads the body
//!   itself and streams its response (a `Responder`: a CGI script): the
//!   body collected whole, the check before `100 Continue`, the
//!   responder's `Starter` started and the responder driven, the request
//!   it answers instead;
//! * `timing.rs` — timestamps, phase durations, deadlines, the gauge, and
//!   the time deadlines count from, which the driver gives;
//! * `io.rs` — reading into the connection's buffer;
//! * `drive.rs` — the actions a step asks for ([`Io`]) and the driver that
//!   performs them over a `Wire` ([`Connection::drive`]);
//! * `blocking.rs` — the loop a blocking thread runs around a connection
//!   (the only code here that waits).
//!
//! The connection core does no I/O of its own: [`Connection::step`] says
//! what to read or send, and is told what came of it; `drive` does it over
//! the client's socket for every model, the unit tests (`tests/`) with
//! byte slices — `tests/push.rs` with no `Wire` at all. A streamed
//! responder (a CGI script) touches no socket either: it hands its output
//! to the connection, which sends it as it sends any response.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use h1::{BodyFraming, HeadBuffers, Parsed, RequestHead};
use transport::poller::Interest;
use transport::Progress;

use crate::reply::Reply;
use crate::response::{self, Response};
use crate::schedule::{Schedule, Srpt};
use crate::spares::{self, Spares};
use crate::stats::{ConnState, Phase, Stats};
use crate::{LogRecord, Pipeline, Route};

/// [`Connection::class`] before SRPT first set the socket's priority.
const UNSCHEDULED: u8 = u8::MAX;

mod blocking;
mod drive;
mod head;
mod io;
mod respond;
mod stop;
mod stream;
#[cfg(test)]
mod tests;
mod timing;

pub use blocking::{serve_blocking, serve_ready, Client, Gated, BLOCKING_TICK, WRITE_PATIENCE};
pub use drive::{Facts, Io};

use drive::Outcome;

use io::SPARE_BUFFERS;
use respond::Pending;
use stream::{collect, BodyPlan, Collect, Streaming};
use timing::{Mark, Now, Timing};

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
    /// (Yielding connections, [`Connection::set_yielding`]) a quantum of a
    /// response went out and the socket may take more: drive again on the
    /// loop's next turn, after the connections due before it.
    Again,
    /// ([`Mode::HandOut`], or [`Mode::HandOutStreamed`] for a streamed one) a request is ready: take it with
    /// [`Connection::take_request`], run the pipeline anywhere, and hand the
    /// reply back with [`Connection::deliver`].
    Process,
    /// ([`Connection::set_warm_ahead`]) the response's next pages are not
    /// in memory and sending them would wait for the disk: take them with
    /// [`Connection::take_cold_pages`], read them in anywhere
    /// ([`FilePages::warm`](transport::FilePages::warm)), then call
    /// [`Connection::pages_warmed`] and drive again.
    Warm,
    /// A responder streams the response: call `drive` again when the
    /// socket or one of the responder's descriptors (its source: a
    /// script's pipes) is ready — [`Connection::waiting`] says exactly which
    /// and how, [`Connection::new_sources`] hands the descriptors out once
    /// for pollers that register them for good (edge-triggered),
    /// [`Connection::wait_blocking`] does the waiting for a blocking thread —
    /// or `timed_out` at the deadline (the responder is then stopped).
    Source(Instant),
}

/// What a connection in [`Want::Source`] waits for.
#[derive(Debug)]
pub struct Waiting<'a> {
    /// The client socket's readiness, if it is needed.
    pub socket: Option<Interest>,
    /// The responder's descriptors (a script's pipes and pidfd), each with its readiness.
    pub sources: Vec<(BorrowedFd<'a>, Interest)>,
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
    /// What it asks of the server, decided when the head was parsed.
    pub route: Route,
    /// The normalised path, where it differs from the head's (see [`Request::path`]).
    normal_path: Option<Box<str>>,
}

impl Request {
    /// A request for `head`, routed once and for all.
    pub(crate) fn routed(
        p: &Pipeline,
        head: RequestHead,
        keep_alive: bool,
        peer: SocketAddr,
        local: Option<SocketAddr>,
        redirects: u8,
    ) -> Request {
        let (route, normal) = p.route(&head);
        let normal_path = match normal {
            Some(Cow::Owned(path)) => Some(path.into_boxed_str()),
            _ => None,
        };
        Request { head, keep_alive, peer, local, redirects, route, normal_path }
    }

    /// The normalised path (decoded, dot segments resolved) of a
    /// [`Route::Site`] or [`Route::Streamed`] request.
    pub fn path(&self) -> &str {
        self.normal_path.as_deref().unwrap_or(self.head.path())
    }

    /// The same request, asked before its body is read (`Expect:
    /// 100-continue`): its handler answers whether it takes the body
    /// (a [`Reply::Stream`] that starts nothing) or with its error page.
    /// Should it not take it, a body of known length can be dropped
    /// unread; a chunked one cannot.
    pub(crate) fn to_check(&self) -> Request {
        Request {
            head: self.head.clone(),
            keep_alive: self.keep_alive && matches!(self.head.framing, BodyFraming::Length(_)),
            peer: self.peer,
            local: self.local,
            redirects: 0,
            route: self.route,
            normal_path: self.normal_path.clone(),
        }
    }
}

/// Where a connection's requests run through the pipeline, fixed when the
/// connection is made: by [`Connection::drive`] itself, or by the model,
/// which takes them when `drive` says [`Want::Process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `drive` runs every request on the calling thread (blocking threads,
    /// the plain event loop).
    Inline,
    /// Every request is handed out (`staged`'s stages; `event` with helpers
    /// for everything).
    HandOut,
    /// Requests answered by a streamed responder are handed out, whose
    /// start may block (a script's `stat`, `exec`); the rest runs inline
    /// (`amped`, `uring` with spawners).
    HandOutStreamed,
}

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
    /// The head being received, as far as its bytes were looked at
    /// (`head.rs`).
    head_scan: h1::HeadScan,
    state: State,
    mode: Mode,
    /// The SRPT class its socket was last given ([`UNSCHEDULED`] before any).
    class: u8,
    /// Stop after each quantum of a response ([`Want::Again`]).
    yielding: bool,
    /// The warm-ahead window ([`Connection::set_warm_ahead`]); 0: off.
    warm_ahead: u64,
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
    /// A responder was started whose descriptors [`Connection::new_sources`] has not handed out.
    stream_new: bool,
    /// The driver is told of every new byte (edge-triggered epoll), so a
    /// short read means the socket is empty until it says otherwise.
    edge_triggered: bool,
    /// The last read returned less than it had room for, and no readiness
    /// was reported since: reading again would only say EAGAIN.
    drained: bool,
    /// The peer's half-close was reported: its end of stream waits behind
    /// the bytes a short read left, and no new edge will announce it.
    eof_pending: bool,
    /// The result of the I/O the last step asked for.
    outcome: Outcome,
    /// Where the connection counts in the `connections` gauge.
    gauge: ConnState,
    stats: std::sync::Arc<Stats>,
    /// The current request's timestamps (timing on).
    tm: Timing,
    /// Numbered per process, for the trace.
    conn_id: u64,
    /// Where deadlines take the time from: the driver ([`Connection::set_now`],
    /// [`Connection::set_clock`]).
    now: Now,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.stats.move_conn(self.gauge, ConnState::None);
        spares::give_back(&SPARE_BUFFERS, std::mem::take(&mut self.buf));
    }
}

thread_local! {
    /// The allocations of answered request heads, for the next head parsed
    /// on the thread. A head of a few fields takes some 100 bytes, one of
    /// 30 fields ~1 KiB; larger ones are freed.
    static SPARE_HEADS: Spares<HeadBuffers> = const { Spares::new(64, |head| head.held() <= 4096) };
}

#[derive(Debug)]
enum State {
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
    /// Lingering is next, once our side is shut ([`Io::ShutdownWrite`]).
    Shut { deadline: Instant },
    /// Receiving a body whole before its handler starts (a script: it
    /// must know a chunked body's length, RFC 3875 §4.1.2, bad-input K5;
    /// and no thread, process or stage may wait for a slow sender).
    Collect(Box<Collect>),
    /// A responder streams the response (a script runs).
    Stream(Box<Streaming>),
}

/// A request and its plan. Its one allocation lasts from the parsed head
/// to the delivered reply: the request leaves it while the pipeline runs.
#[derive(Debug)]
struct Job {
    request: Option<Request>,
    plan: Plan,
}

impl Mode {
    /// Whether `drive` runs the pipeline for a request so planned itself.
    fn runs_inline(self, plan: &Plan) -> bool {
        match self {
            Mode::Inline => true,
            Mode::HandOutStreamed => !plan.streamed(),
            Mode::HandOut => false,
        }
    }
}

impl Plan {
    /// Whether a streamed responder answers it (it reads the body itself).
    fn streamed(&self) -> bool {
        self.body.is_some()
    }
}

impl State {
    fn ready(request: Request, plan: Plan) -> State {
        State::Ready(Box::new(Job { request: Some(request), plan }))
    }
}

/// What the connection decided about a request before the pipeline ran.
#[derive(Debug)]
struct Plan {
    log: Option<LogRecord>,
    /// Body bytes to drop after the response, if the connection stays open.
    discard: u64,
    /// Input may still arrive that we will not read: a body, a keep-alive client's next request.
    unread: bool,
    /// A HEAD request: whatever answers it carries no body.
    head_only: bool,
    /// A streamed responder reads the body itself, and how.
    body: Option<BodyPlan>,
}

impl Connection {
    /// A connection accepted at `now`, whose requests run as `mode` says.
    pub fn new(info: ConnInfo, now: Instant, pipeline: &Pipeline, mode: Mode) -> Connection {
        Connection {
            info,
            buf: Box::default(),
            start: 0,
            end: 0,
            head_scan: h1::HeadScan::new(),
            state: State::Head,
            mode,
            class: UNSCHEDULED,
            yielding: false,
            warm_ahead: 0,
            served: 0,
            head_deadline: now + pipeline.settings.header_timeout,
            idle_deadline: now + pipeline.settings.header_timeout,
            defer_log: false,
            deferred_log: Vec::new(),
            stream_new: false,
            edge_triggered: false,
            drained: false,
            eof_pending: false,
            outcome: Outcome::Nothing,
            gauge: ConnState::None,
            stats: pipeline.stats.clone(),
            tm: Timing {
                idle_since: pipeline.stats.timing.then(|| pipeline.stats.ns_at(now)).into(),
                ..Timing::default()
            },
            conn_id: pipeline.stats.next_conn_id(),
            now: Now::Given(now),
        }
    }

    /// Keeps this connection's access-log records for the caller instead of
    /// writing them to `pipeline.access_log` when a response ends, so a
    /// model can log on threads of its own (`staged`'s log stage). Collect
    /// them with [`take_log`](Self::take_log) after every `drive` and
    /// `timed_out`; records still held when the connection
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

    /// Changes where requests run from the next [`drive`](Self::drive) on
    /// (a gated client: handed out while a gate reads its heads, inline on
    /// the thread that then serves it).
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// Whether the connection waits for the client with nothing of the
    /// server's under way — for the next head, a script's body before the
    /// script starts, the rest of a body it drops, or lingering.
    pub fn awaits_client(&self) -> bool {
        matches!(
            self.state,
            State::Head
                | State::Collect(_)
                | State::Discard { .. }
                | State::Linger { .. }
                | State::Shut { .. }
        )
    }

    /// Answers the request announced by [`Want::Process`] with `status`
    /// instead of running it — a model at its capacity: 503 with
    /// `Retry-After` — and closes; drive it to send that.
    pub fn refuse_ready(&mut self, status: u16, p: &Pipeline) {
        let State::Ready(job) = std::mem::replace(&mut self.state, State::Head) else { return };
        let log = job.plan.log.map(|log| LogRecord { status, ..log });
        let reply = response::error_page(
            &p.settings,
            status,
            h1::Version::Http11,
            false,
            job.plan.head_only,
            &[("Retry-After", "1")],
        );
        self.respond(reply, log, 0, true, None, p);
    }

    /// Whether it waits for a next request of which nothing has arrived.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Head) && self.start == self.end
    }

    /// The request now ready waited `waited` for a thread (after its head
    /// was complete): counted in its `queue` phase.
    pub fn waited_for_thread(&mut self, waited: std::time::Duration) {
        if self.stats.timing {
            self.add_queue(u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX));
        }
    }

    /// Declares that the driver waits for readiness edge-triggered and calls
    /// [`readable`](Self::readable) for every readable event. A read that
    /// comes back short then ends the reading, as in nginx: the next bytes
    /// raise a new edge, so the `recv` that would only return EAGAIN — after
    /// most keep-alive responses — is skipped.
    pub fn set_edge_triggered(&mut self) {
        self.edge_triggered = true;
    }

    /// Declares that the driver serves many connections in turns and orders
    /// them by what they have left ([`remaining`](Self::remaining)): under
    /// SRPT, `drive` then returns [`Want::Again`] after each quantum of a
    /// response, so one large response cannot hold the loop while smaller
    /// ones wait (the event loops).
    pub fn set_yielding(&mut self) {
        self.yielding = true;
    }

    /// Declares that the driver must never send a file page that is not in
    /// memory (an event loop, which a disk read would stall, with helper
    /// threads to read for it: `amped`). `drive` then sends a large file
    /// `window` bytes at a time: before each window it probes the pages
    /// (without blocking) and, when one is cold, stops with [`Want::Warm`]
    /// for the driver to have them read in. A hot file costs a probe per
    /// 128 KiB and no hand-off; the first window of a reply the driver's
    /// helper made was warmed by that helper already.
    pub fn set_warm_ahead(&mut self, window: u64) {
        self.warm_ahead = window;
    }

    /// The cold pages announced by [`Want::Warm`].
    pub fn take_cold_pages(&mut self) -> Option<transport::FilePages> {
        match &mut self.state {
            State::Write(pending) => pending.cold.take(),
            _ => None,
        }
    }

    /// The pages taken with [`take_cold_pages`](Self::take_cold_pages) are
    /// in memory now: the next window may be sent.
    pub fn pages_warmed(&mut self) {
        if let State::Write(pending) = &mut self.state {
            pending.warm_edge = pending.reply.out.bytes_sent() + self.warm_ahead;
        }
    }

    /// What `srpt` orders a loop's turn by: [`Srpt::size`] of the response
    /// being written, 0 for anything else (reading and parsing a head is
    /// quick, and tells what the request will cost).
    pub fn remaining(&self, srpt: &Srpt, now: Instant) -> u64 {
        match &self.state {
            State::Write(pending) => {
                srpt.size(pending.reply.out.remaining(), now.saturating_duration_since(pending.started))
            }
            _ => 0,
        }
    }

    /// The file the response being written sends, if any: what
    /// `srpt-group` groups a loop's turn by.
    pub fn document(&self) -> Option<crate::schedule::Document> {
        match &self.state {
            State::Write(pending) => pending.reply.document,
            _ => None,
        }
    }

    /// Reads nothing until the next [`readable`](Self::readable): for a
    /// connection accepted later in a turn than the wait that reported
    /// its listener, whose request may have been sent after a file changed
    /// whose event that wait did not yet report ([`Pipeline::watch_files`]).
    /// Registering it edge-triggered reports bytes already there at the next wait.
    ///
    /// [`Pipeline::watch_files`]: crate::Pipeline::watch_files
    pub fn await_readable(&mut self) {
        self.drained = self.edge_triggered;
    }

    /// The socket reported readable (edge-triggered drivers).
    pub fn readable(&mut self) {
        self.drained = false;
    }

    /// The socket reported the peer's half-close (`EPOLLRDHUP`): a FIN that
    /// came with the last bytes raises no edge of its own once they are
    /// read, so from now on a short read does not end the reading — the
    /// read that returns 0 must still happen (nginx's `pending_eof`).
    pub fn read_closed(&mut self) {
        self.drained = false;
        self.eof_pending = true;
    }

    /// Takes the request announced by [`Want::Process`]: the model runs
    /// it elsewhere (a queue, a pool, a spawner thread) and hands the reply
    /// back with [`deliver`](Self::deliver).
    pub fn take_request(&mut self) -> Option<Request> {
        match std::mem::replace(&mut self.state, State::Head) {
            State::Ready(mut job) => {
                let request = job.request.take().expect("a ready job holds its request");
                if self.stats.timing {
                    self.tm.taken = true;
                    self.tm.handed_out = Mark::at(self.stats.now());
                }
                self.state = State::Processing(job);
                Some(request)
            }
            other => {
                self.state = other;
                None
            }
        }
    }

    /// Hands back the reply for the request taken with
    /// [`take_request`](Self::take_request); drive the connection again to send it.
    pub fn deliver(&mut self, reply: Reply, p: &Pipeline) {
        let State::Processing(job) = std::mem::replace(&mut self.state, State::Head) else {
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
            let now = self.stats.now();
            at = Some(now);
            let measured = match &reply {
                // Where its handler counts it; a check before `100 Continue`
                // started nothing: the request is not answered yet, and its
                // start is recorded when it runs.
                Reply::Stream { start, .. } => start.0.timed(),
                Reply::Response(response) if response.data.hit => Some((Phase::DataHit, "hit")),
                Reply::Response(_) => Some((Phase::DataMiss, "miss")),
            };
            let took = match inline_start {
                Some(start) => now.saturating_sub(start),
                // A check handed out counts whole as queue, as it always did.
                None if measured.is_none() => 0,
                None => u64::try_from(reply.took().as_nanos()).unwrap_or(u64::MAX),
            };
            if let Some((phase, name)) = measured {
                self.tm.phases.set(phase, took);
                self.tm.data = name;
            }
            if let Some(handed_out) = self.tm.handed_out.take() {
                // Time between handing the request out and getting the
                // reply back, not spent in the pipeline: queues (a check's
                // and its responder's start add up).
                self.add_queue(now.saturating_sub(handed_out).saturating_sub(took));
            }
        }
        self.respond_planned(plan, reply, at, p);
    }

    /// Runs the state machine until it needs the outside world: the I/O
    /// to perform (then report its result and step again), or what to wait
    /// for. It reads no socket and no clock: deadlines count from the
    /// driver's time ([`set_now`](Self::set_now)), phase timestamps come
    /// from the clock the stats were given ([`Stats::now`]); `facts` is asked only what the transport
    /// knows (TLS). `stopping` asks to close at the next request boundary
    /// (graceful shutdown).
    pub fn step(&mut self, facts: &impl Facts, p: &Pipeline, stopping: bool) -> Io {
        let mode = self.mode;
        // A timestamp (timing on) taken at the end of one step, for the next
        // step to start with instead of reading the clock again: valid for
        // one turn of the loop only, in which nothing waits.
        let mut just_read: Option<u64> = None;
        loop {
            let fresh = just_read.take();
            match &mut self.state {
                State::Ready(ready) if mode.runs_inline(&ready.plan) => {
                    let State::Ready(job) = std::mem::replace(&mut self.state, State::Head) else {
                        unreachable!("matched Ready");
                    };
                    let Job { request, plan } = *job;
                    self.answer_inline(request.expect("a ready job holds its request"), plan, fresh, p);
                }
                State::Ready(_) | State::Processing(_) => return Io::Wait(Want::Process),
                State::Collect(_) | State::Stream(_) => {
                    if let Some(io) = self.streamed_step(facts, p) {
                        return io;
                    }
                }
                State::Head => {
                    let read = if let Some(read) = self.take_read(facts) {
                        read
                    } else {
                        if self.start < self.end {
                            let parse_start = if let Some(now) = self.stamp(fresh) {
                                if self.tm.first.get().is_none() {
                                    self.tm.first = Mark::at(now);
                                    if let Some(idle_since) = self.tm.idle_since.get() {
                                        // A first request over TLS waited for its handshake, then for its bytes.
                                        let shook = facts.handshake_ended().filter(|_| self.served == 0);
                                        let since = match shook.map(|at| p.stats.ns_at(at)) {
                                            Some(done) => {
                                                self.tm
                                                    .phases
                                                    .set(Phase::Handshake, done.saturating_sub(idle_since));
                                                done
                                            }
                                            None => idle_since,
                                        };
                                        self.tm.phases.set(Phase::Wait, now.saturating_sub(since));
                                    }
                                }
                                Some(now)
                            } else {
                                None
                            };
                            let parsed = self.parse_head(&p.settings.limits);
                            match parsed {
                                Ok(Parsed::Complete { head, len }) => {
                                    self.start += len;
                                    if let (Some(t0), Some(first)) = (parse_start, self.tm.first.get()) {
                                        let now = self.stats.now();
                                        self.tm.phases.set(Phase::Read, t0.saturating_sub(first));
                                        self.tm.phases.set(Phase::Parse, now.saturating_sub(t0));
                                        self.tm.service_start = Mark::at(now);
                                        just_read = Some(now);
                                        if p.stats.sample() {
                                            self.tm.trace_path = Some(head.path().into());
                                        }
                                    }
                                    let (request, plan) = self.plan(head, || facts.local_addr(), p, stopping);
                                    if plan.streamed() {
                                        match request.head.framing {
                                            // RFC 9110 §15.5.14
                                            BodyFraming::Length(n) if n > p.settings.max_body => {
                                                let what =
                                                    format!("a body of {n} bytes for {}", request.path());
                                                self.note_limit(413, &what, p);
                                                self.fail_planned(plan, 413, p);
                                                continue;
                                            }
                                            BodyFraming::Chunked | BodyFraming::Length(1..)
                                                if request.head.expect_continue =>
                                            {
                                                // `100 Continue` promises to read the body: first
                                                // make sure its handler will (RFC 9110 §10.1.1),
                                                // where a lookup may block. Should it not, the
                                                // error closes the connection rather than wait
                                                // for a body it would drop.
                                                let check = request.to_check();
                                                let mut plan = plan;
                                                if let Some(body) = plan.body.as_mut() {
                                                    body.held = Some(Box::new(request));
                                                }
                                                self.state = State::ready(check, plan);
                                                continue;
                                            }
                                            BodyFraming::Chunked | BodyFraming::Length(1..) => {
                                                let now = self.deadline_base(None);
                                                self.state = collect(request, plan, b"", now, p);
                                                continue;
                                            }
                                            _ => {}
                                        }
                                    }
                                    if mode.runs_inline(&plan) {
                                        self.answer_inline(request, plan, just_read.take(), p);
                                    } else {
                                        self.state = State::ready(request, plan);
                                    }
                                    continue;
                                }
                                // A client that keeps dribbling never lets a
                                // blocking read time out: the head deadline is
                                // checked on the data path too (slowloris).
                                Ok(Parsed::Partial)
                                    if self.deadline_base(parse_start) >= self.head_due(p) =>
                                {
                                    self.refuse(408, p);
                                    continue;
                                }
                                Ok(Parsed::Partial) => {}
                                Err(e) => {
                                    self.note_limit(e.status(), "a request head", p);
                                    self.refuse(e.status(), p);
                                    continue;
                                }
                            }
                        } else if stopping && self.served > 0 {
                            // Idle between requests: look, whatever the last edge
                            // said; a request there is answered (stop.rs).
                            self.drained = false;
                        }
                        match self.read_at_once() {
                            Some(read) => read,
                            None => return Io::Read,
                        }
                    };
                    match read {
                        Outcome::Eof => return Io::Wait(self.cut_off(p)),
                        // Over TLS the first head's deadline also starts
                        // with its first bytes: the handshake had its own.
                        Outcome::Began if self.served > 0 || p.tls.is_some() => {
                            self.set_state(ConnState::Reading);
                            // The next request began: one reading for its
                            // deadline and its first timestamp.
                            just_read = self.stamp(None);
                            self.head_deadline = self.deadline_base(just_read) + p.settings.header_timeout;
                        }
                        Outcome::Bytes | Outcome::Began => {}
                        Outcome::NotNow => {
                            if stopping && self.start == self.end {
                                return Io::Wait(self.stop_wait().map_or(Want::Close, Want::Read));
                            }
                            if self.served == 0 && self.start == self.end && facts.handshaking() {
                                let accepted = self.head_deadline - p.settings.header_timeout;
                                return Io::Wait(Want::Read(accepted + p.settings.tls_handshake_timeout));
                            }
                            let pending = self.start < self.end || self.served == 0;
                            if !pending && self.now.read() >= self.idle_deadline {
                                // The last look after the idle deadline found nothing.
                                return Io::Wait(Want::Close);
                            }
                            return Io::Wait(Want::Read(if pending {
                                self.head_due(p)
                            } else {
                                self.idle_deadline
                            }));
                        }
                        _ => return Io::Wait(Want::Close),
                    }
                }
                State::Write(pending) => {
                    let progress = match std::mem::replace(&mut self.outcome, Outcome::Nothing) {
                        Outcome::Sent(progress) => progress,
                        Outcome::Failed => {
                            self.abort(p);
                            return Io::Wait(Want::Close);
                        }
                        _ => {
                            let limit = match &p.settings.schedule {
                                Schedule::Fifo => u64::MAX,
                                Schedule::Srpt(srpt) => {
                                    let now = self.now.read();
                                    let class =
                                        srpt.class(pending.reply.out.remaining(), now - pending.started);
                                    if class != self.class {
                                        let first = self.class == UNSCHEDULED && srpt.unsent_limit > 0;
                                        self.class = class;
                                        return Io::Prioritize {
                                            priority: srpt.priority(class),
                                            unsent_limit: first.then_some(srpt.unsent_limit),
                                        };
                                    }
                                    srpt.quantum
                                }
                            };
                            let limit = match self.warm_ahead {
                                0 => limit,
                                window => match pending.warm_allowance(window) {
                                    Some(allowed) => limit.min(allowed),
                                    None => return Io::Wait(Want::Warm),
                                },
                            };
                            return Io::Send { limit };
                        }
                    };
                    match progress {
                        // A quantum went out: look at the class again, after
                        // the loop's other connections if it serves in turns.
                        Progress::Paused if self.yielding => return Io::Wait(Want::Again),
                        Progress::Paused => {}
                        Progress::Done => {
                            if let Some(want) = self.finish_response(p) {
                                return Io::Wait(want);
                            }
                            // The response's end (timing on) is a pipelined
                            // request's first timestamp.
                            just_read = self.tm.idle_since.get();
                        }
                        Progress::Blocked => {
                            let sent = pending.reply.out.bytes_sent();
                            // `deadline_base(None)`, but `self.state` is borrowed.
                            let now = self.now.read();
                            if sent != pending.sent_mark {
                                pending.sent_mark = sent;
                                pending.deadline = now + p.settings.send_timeout;
                            }
                            match p.settings.rate_deadline(pending.started, sent) {
                                // A reader slower than --min-rate is cut, as
                                // nginx's send_timeout cuts one that stalls.
                                Some(due) if due <= now => {
                                    self.abort(p);
                                    return Io::Wait(Want::Close);
                                }
                                Some(due) => return Io::Wait(Want::Write(due.min(pending.deadline))),
                                None => return Io::Wait(Want::Write(pending.deadline)),
                            }
                        }
                    }
                }
                State::Discard { deadline, .. } => {
                    let deadline = *deadline;
                    let read = match self.take_read(facts) {
                        Some(read) => read,
                        None => {
                            let State::Discard { remaining, .. } = &mut self.state else {
                                unreachable!("matched Discard");
                            };
                            let buffered = (self.end - self.start) as u64;
                            let take = buffered.min(*remaining);
                            self.start += take as usize;
                            *remaining -= take;
                            if *remaining == 0 {
                                self.await_next_head(p, fresh);
                                just_read = fresh;
                                continue;
                            }
                            match self.read_at_once() {
                                Some(read) => read,
                                None => return Io::Read,
                            }
                        }
                    };
                    if let Some(io) = read_on(read, deadline) {
                        return io;
                    }
                }
                State::Shut { deadline } => {
                    // Our FIN follows the response; the client's bytes are read
                    // until it closes too. Closed under bytes it sent (a keep-alive
                    // client's next request at --max-keepalive-requests), the kernel
                    // would reset the connection and drop the response's unsent tail.
                    self.state = State::Linger { deadline: *deadline };
                    return Io::ShutdownWrite;
                }
                State::Linger { deadline } => {
                    let deadline = *deadline;
                    let read = match self.take_read(facts) {
                        Some(read) => read,
                        None => {
                            self.start = 0;
                            self.end = 0;
                            match self.read_at_once() {
                                Some(read) => read,
                                None => return Io::Read,
                            }
                        }
                    };
                    if let Some(io) = read_on(read, deadline) {
                        return io;
                    }
                }
            }
        }
    }

    /// The deadline last returned by `drive` has passed. Returns `true` if
    /// there is something to send (a 408), so `drive` should be called
    /// again; `false` if the socket should just be closed.
    pub fn timed_out(&mut self, p: &Pipeline) -> bool {
        match std::mem::replace(&mut self.state, State::Head) {
            State::Stream(streaming) => return self.stream_timed_out(*streaming, p),
            State::Collect(collect) => {
                self.fail_planned(collect.plan, 408, p);
                return true;
            }
            other => self.state = other,
        }
        match self.state {
            // A request had begun: say why it is refused (RFC 9110 §15.5.9).
            // An idle connection is closed silently, as nginx does, so
            // browsers' speculative connections do not log errors.
            State::Head if self.start < self.end => {
                self.refuse(408, p);
                true
            }
            State::Head if self.served > 0 => self.last_look(),
            _ => {
                self.abort(p);
                false
            }
        }
    }

    /// Answers a planned request with an error page and closes.
    fn fail_planned(&mut self, plan: Plan, status: u16, p: &Pipeline) {
        let log = plan.log.map(|log| LogRecord { status, ..log });
        let reply =
            response::error_page(&p.settings, status, h1::Version::Http11, false, plan.head_only, &[]);
        self.respond(reply, log, 0, true, None, p);
    }
}

/// What a state that only reads and drops (a body nobody reads, a
/// lingering close) does after a read: go on with the bytes, wait for more
/// until `deadline`, or close at the end of the stream or an error.
fn read_on(read: Outcome, deadline: Instant) -> Option<Io> {
    match read {
        Outcome::Bytes | Outcome::Began => None,
        Outcome::NotNow => Some(Io::Wait(Want::Read(deadline))),
        _ => Some(Io::Wait(Want::Close)),
    }
}
