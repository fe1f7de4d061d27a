//! The phases of a request whose handler reads the body itself and streams
//! its response (a [`Responder`]; a CGI script is the one there is): its
//! body received whole before the handler starts — a chunked one because
//! the handler must know its length (RFC 3875 §4.1.2), a `Content-Length`
//! one so that nothing the handler runs on (a thread, a process, a stage)
//! ever waits for a slow sender, and every model gives a script the same
//! input for the same bytes; past [`SPOOL_AT`] bytes into an unnamed file,
//! so its size costs disk, not memory — written from the loop's thread, as
//! nginx does (its request buffering) —, the check before `100 Continue`,
//! the responder started and driven, the request it answers instead (a local redirect), its
//! timeout. What the responder runs is not this file's business.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use h1::{BodyFraming, ChunkedDecoder, RequestHead};
use transport::poller::Interest;
use transport::{Chunk, Data, Outbound, Progress};

use super::*;
use crate::responder::{BodyStart, Output, Responder, Streamed};
use crate::spool::{Spool, SPOOL_AT};
use crate::Pipeline;

/// A request body being received whole before its handler starts.
#[derive(Debug)]
pub(super) struct Collect {
    pub(super) request: Request,
    pub(super) plan: Plan,
    pub(super) framed: Framed,
    /// Received (de-chunked) bytes not yet in the spool (all of them while under [`SPOOL_AT`]).
    pub(super) body: Vec<u8>,
    pub(super) spool: Option<Spool>,
    /// Body bytes received so far (for `--min-rate`).
    pub(super) received: u64,
    /// `100 Continue` still to send, if the client waits for it.
    pub(super) interim: Outbound,
    /// A total deadline, as for a head: it moves with progress, but never
    /// past what `--min-rate` allows for the bytes received.
    pub(super) deadline: Instant,
    /// When the body began to be awaited (for `--min-rate`).
    pub(super) started: Instant,
}

/// Room reserved for a body at most this long when its head arrives.
const SHORT_BODY: usize = 4096;

/// How the body being collected is framed.
#[derive(Debug)]
pub(super) enum Framed {
    /// Chunked: decoded as it arrives.
    Chunked(ChunkedDecoder),
    /// `Content-Length`: this many bytes still to come.
    Length(u64),
}

/// How a request's body reaches a handler that reads it itself.
#[derive(Debug)]
pub(super) struct BodyPlan {
    pub(super) keep_alive: bool,
    pub(super) expect_continue: bool,
    /// Body bytes not yet received: the handler's only if it never starts
    /// (dropped before the next request); a handler that starts has its
    /// whole body collected first.
    pub(super) remaining: u64,
    /// The body, received in full (de-chunked): in memory, or spooled.
    pub(super) collected: Vec<u8>,
    pub(super) spooled: Option<Spool>,
    /// The request itself while a copy asks whether its handler takes the
    /// body (`Request::to_check`), for when it does.
    pub(super) held: Option<Box<Request>>,
}

impl BodyPlan {
    /// After the handler started: nothing more to send it.
    fn spent(keep_alive: bool) -> BodyPlan {
        BodyPlan {
            keep_alive,
            expect_continue: false,
            remaining: 0,
            collected: Vec::new(),
            spooled: None,
            held: None,
        }
    }
}

/// A responder at work, its output on the way, and the plan of the request it answers.
#[derive(Debug)]
pub(super) struct Streaming {
    pub(super) responder: Box<dyn Responder>,
    pub(super) out: Output,
    pub(super) plan: Plan,
}

impl Connection {
    /// While [`Want::Source`]: what the connection waits for, exactly (for
    /// `poll` and other level-triggered waits).
    pub fn waiting(&self) -> Waiting<'_> {
        match &self.state {
            State::Stream(streaming) => Waiting {
                socket: streaming.out.pending().then_some(Interest::WRITABLE),
                sources: streaming.responder.waiting(&streaming.out),
            },
            _ => Waiting { socket: None, sources: Vec::new() },
        }
    }

    /// The descriptors (a script's pipes) of a responder started since the
    /// last call, each with every readiness it can report; empty otherwise.
    /// For edge-triggered pollers that register a descriptor once: they are
    /// closed (and so leave any epoll set) when the responder ends.
    pub fn new_sources(&mut self) -> Vec<(BorrowedFd<'_>, Interest)> {
        if !std::mem::take(&mut self.stream_new) {
            return Vec::new();
        }
        match &self.state {
            State::Stream(streaming) => streaming.responder.descriptors(),
            _ => Vec::new(),
        }
    }

    /// [`plan`](Self::plan) for a request whose handler reads the body: it
    /// is the handler's input, so it is read whole (a chunked one before the
    /// handler starts), and the connection can stay open after any body we
    /// accept.
    pub(super) fn plan_streamed(
        &self,
        head: RequestHead,
        route: Route,
        normal_path: Option<Box<str>>,
        local: Option<SocketAddr>,
        p: &Pipeline,
        stopping: bool,
    ) -> (Request, Plan) {
        let settings = &p.settings;
        let (body_ok, remaining) = match head.framing {
            BodyFraming::None => (true, 0),
            BodyFraming::Length(n) => (n <= settings.max_body, n),
            BodyFraming::Chunked => (true, 0),
        };
        let keep_alive =
            head.keep_alive && body_ok && !stopping && self.served + 1 < settings.max_keepalive_requests;
        let log = self.log_record(&head, p);
        let unread = self.start < self.end || head.framing != BodyFraming::None || head.keep_alive;
        let body = BodyPlan {
            keep_alive,
            expect_continue: head.expect_continue,
            remaining,
            collected: Vec::new(),
            spooled: None,
            held: None,
        };
        let plan =
            Plan { log, discard: 0, unread, head_only: head.method == h1::Method::Head, body: Some(body) };
        let peer = self.info.peer;
        let request = Request { head, keep_alive, peer, local, redirects: 0, route, normal_path };
        (request, plan)
    }

    /// The next action of a request whose handler streams (states
    /// `Collect` and `Stream`); `None`: the state changed, step on.
    pub(super) fn streamed_step(&mut self, facts: &impl Facts, p: &Pipeline) -> Option<Io> {
        match self.state {
            State::Collect(_) => self.collect_step(facts, p),
            _ => self.stream_step(p),
        }
    }

    /// The next action of the phase that receives a body whole for its
    /// handler: `100 Continue` sent first if the client waits for it, then
    /// the body read (as a head is: into [`read_room`](Self::read_room)),
    /// de-chunked and spooled as it comes. `None`: the phase ended (the
    /// request is ready, or answered with an error page); step on.
    fn collect_step(&mut self, facts: &impl Facts, p: &Pipeline) -> Option<Io> {
        let State::Collect(mut c) = std::mem::replace(&mut self.state, State::Head) else {
            unreachable!("called in the Collect phase");
        };
        if !c.interim.is_empty() {
            // Only the interim is sent in this phase: the outcome is its send's.
            let io = match std::mem::replace(&mut self.outcome, Outcome::Nothing) {
                Outcome::Sent(Progress::Blocked) => Io::Wait(Want::Write(c.deadline)),
                Outcome::Failed => return Some(Io::Wait(Want::Close)),
                _ => Io::Send { limit: u64::MAX },
            };
            if !c.interim.is_empty() {
                self.state = State::Collect(c);
                return Some(io);
            }
        }
        loop {
            let read = match self.take_read(facts) {
                Some(read) => read,
                None => {
                    if self.start < self.end {
                        c = self.take_body(c, p)?;
                    }
                    if self.now.read() >= c.deadline {
                        self.fail_planned(c.plan, 408, p);
                        return None;
                    }
                    match self.read_at_once() {
                        Some(read) => read,
                        None => {
                            self.state = State::Collect(c);
                            return Some(Io::Read);
                        }
                    }
                }
            };
            match read {
                Outcome::Bytes | Outcome::Began => {}
                Outcome::NotNow => {
                    let deadline = c.deadline;
                    self.state = State::Collect(c);
                    return Some(Io::Wait(Want::Read(deadline)));
                }
                _ => {
                    self.log_abandoned(c.plan, p);
                    return Some(Io::Wait(Want::Close));
                }
            }
        }
    }

    /// Takes the buffered input into the body. `None`: the phase ended —
    /// the body is complete (its request is ready) or refused.
    fn take_body(&mut self, mut c: Box<Collect>, p: &Pipeline) -> Option<Box<Collect>> {
        let held = c.body.len();
        let input = &self.buf[self.start..self.end];
        match &mut c.framed {
            Framed::Chunked(decoder) => match decoder.decode(input, &mut c.body) {
                Ok(n) => self.start += n,
                Err(e) => {
                    let what = format!("a chunked body for {}", c.request.path());
                    self.note_limit(e.status(), &what, p);
                    self.fail_planned(c.plan, e.status(), p);
                    return None;
                }
            },
            Framed::Length(left) => {
                let take = usize::try_from(*left).unwrap_or(usize::MAX).min(input.len());
                c.body.extend_from_slice(&input[..take]);
                self.start += take;
                *left -= take as u64;
            }
        }
        c.received += (c.body.len() - held) as u64;
        // Progress moves the deadline, but never past what
        // --min-rate allows for the bytes received so far.
        let idle = self.now.read() + p.settings.header_timeout;
        c.deadline = match p.settings.rate_deadline(c.started, c.received) {
            Some(due) => due.min(idle),
            None => idle,
        };
        let done = match &c.framed {
            Framed::Chunked(decoder) => decoder.is_done(),
            Framed::Length(left) => *left == 0,
        };
        if c.spool.is_some() || c.body.len() >= SPOOL_AT {
            if let Err(e) = spool_body(&mut c) {
                p.error_log.error(format_args!(
                    "a body for {}: cannot spool it to a temp file in {}: {e}; answered 500",
                    c.request.path(),
                    std::env::temp_dir().display()
                ));
                self.fail_planned(c.plan, 500, p);
                return None;
            }
        }
        if !done {
            return Some(c);
        }
        let Collect { mut request, mut plan, body, spool, .. } = *c;
        // The handler sees a body of known length (§4.1.2).
        let len = spool.as_ref().map_or(body.len() as u64, Spool::len);
        request.head.framing = BodyFraming::Length(len);
        request.head.expect_continue = false;
        plan.unread = self.start < self.end || request.head.keep_alive;
        if let Some(plan_body) = plan.body.as_mut() {
            plan_body.remaining = 0;
            plan_body.collected = body;
            plan_body.spooled = spool;
            plan_body.expect_continue = false;
        }
        self.state = State::ready(request, plan);
        None
    }

    /// The client left in the middle of its request's body, before any
    /// response: logged as nginx logs it, 499 (client closed request) with
    /// no bytes sent, rather than not at all.
    pub(super) fn log_abandoned(&mut self, plan: Plan, p: &Pipeline) {
        let end = p.stats.timing.then(|| p.stats.now());
        if let Some(mut record) = plan.log {
            record.status = CLIENT_CLOSED;
            record.body_bytes = 0;
            if self.defer_log {
                self.deferred_log.push(record);
            } else {
                p.access_log.record(&record);
            }
        }
        self.finish_request(CLIENT_CLOSED, 0, end);
    }

    /// The responder's deadline passed: it is stopped. `true`: an error
    /// page (504) is queued; `false`: output had begun, so only a close can
    /// tell the client.
    pub(super) fn stream_timed_out(&mut self, streaming: Streaming, p: &Pipeline) -> bool {
        if streaming.responder.woken() {
            // Its own timer, not a timeout: drive it again.
            self.state = State::Stream(Box::new(streaming));
            return true;
        }
        let Streaming { mut responder, plan, .. } = streaming;
        if let Some(status) = responder.stop(p) {
            self.fail_planned(plan, status, p);
            return true;
        }
        self.log_streamed(responder.as_ref(), plan, p);
        false
    }

    /// The next action of a streamed response: its responder's output
    /// sent ([`Io::Send`]) as far as the socket takes it, the responder
    /// pumped after each send and whenever the driver comes back, and a
    /// wait on its sources (and on the socket while output is left:
    /// [`waiting`](Self::waiting)) when neither can move. `None`: the
    /// response ended; step on.
    fn stream_step(&mut self, p: &Pipeline) -> Option<Io> {
        let State::Stream(mut streaming) = std::mem::replace(&mut self.state, State::Head) else {
            unreachable!("called in the Stream phase");
        };
        let blocked = match std::mem::replace(&mut self.outcome, Outcome::Nothing) {
            Outcome::Sent(progress) => {
                streaming.out.sent(&progress);
                progress == Progress::Blocked
            }
            Outcome::Failed => {
                // The client is gone: what was sent is logged.
                let Streaming { responder, plan, .. } = *streaming;
                self.log_streamed(responder.as_ref(), plan, p);
                return Some(Io::Wait(Want::Close));
            }
            // The driver came back (a source or the socket is ready):
            // the socket first, as far as it takes what is left.
            _ if streaming.out.pending() => {
                return Some(self.stream_on(streaming, Io::Send { limit: u64::MAX }))
            }
            _ => false,
        };
        let Streaming { responder, out, .. } = &mut *streaming;
        match responder.pump(out, p) {
            Streamed::Wait(deadline) => {
                out.seal();
                let io = match out.pending() && !blocked {
                    true => Io::Send { limit: u64::MAX },
                    false => Io::Wait(Want::Source(deadline)),
                };
                Some(self.stream_on(streaming, io))
            }
            Streamed::TimedOut => (!self.stream_timed_out(*streaming, p)).then_some(Io::Wait(Want::Close)),
            Streamed::Done { close } => {
                let Streaming { responder, plan, .. } = *streaming;
                let discard = plan.discard;
                let unread = discard > 0 || self.start < self.end || plan.unread;
                self.log_streamed(responder.as_ref(), plan, p);
                drop(responder);
                self.after_response(close, unread, discard, p).map(Io::Wait)
            }
            Streamed::Failed(status) => {
                let Streaming { responder, plan, .. } = *streaming;
                drop(responder);
                self.fail_planned(plan, status, p);
                None
            }
            Streamed::Instead { head, local, redirects } => {
                let Streaming { responder, plan, .. } = *streaming;
                let keep_alive = plan.body.as_ref().is_some_and(|b| b.keep_alive);
                let request = Request::routed(p, *head, keep_alive, self.info.peer, local, redirects);
                // The first response's body is dropped.
                let discard = plan.discard;
                drop(responder);
                let plan = Plan { body: Some(BodyPlan::spent(keep_alive)), discard, ..plan };
                self.state = State::ready(request, plan);
                None
            }
            Streamed::Abort => {
                let Streaming { responder, plan, .. } = *streaming;
                self.log_streamed(responder.as_ref(), plan, p);
                Some(Io::Wait(Want::Close))
            }
        }
    }

    /// Keeps streaming after `io`.
    fn stream_on(&mut self, streaming: Box<Streaming>, io: Io) -> Io {
        self.state = State::Stream(streaming);
        io
    }

    pub(super) fn log_streamed(&mut self, responder: &dyn Responder, plan: Plan, p: &Pipeline) {
        let mut end = p.stats.timing.then(|| p.stats.now());
        if let (Some(start), Some(now)) = (self.tm.stream_start.take(), end) {
            self.tm.phases.set(responder.phase(), now.saturating_sub(start));
        }
        let (status, body_bytes) = (responder.status(), responder.body_bytes());
        self.served += 1;
        if let Some(mut record) = plan.log {
            record.status = status;
            record.body_bytes = body_bytes;
            if self.defer_log {
                self.deferred_log.push(record);
            } else {
                self.lend_now(end, || p.access_log.record(&record));
                end = end.map(|start| self.timed_log(start));
            }
        }
        self.finish_request(status, body_bytes, end);
    }

    /// The answer to a request planned for a streamed responder: its
    /// handler takes the body (a chunked one is collected next, after
    /// `100 Continue`), or it started (the responder runs; `at` is its
    /// start, timing on). `Some` gives back what is answered like any
    /// request: the handler's error page.
    pub(super) fn start_stream(
        &mut self,
        mut plan: Plan,
        reply: Reply,
        at: Option<u64>,
        p: &Pipeline,
    ) -> Option<(Plan, Response)> {
        let held = plan.body.as_mut().and_then(|body| body.held.take());
        match (reply, held) {
            // The check passed: ask for the body, then for the start.
            (Reply::Stream { .. }, Some(request)) => {
                self.state = collect(*request, plan, CONTINUE, self.deadline_base(None), p);
                None
            }
            (Reply::Stream { start, .. }, None) => {
                let Some(body) = plan.body.take() else {
                    p.error_log.error(format_args!("a responder started for a request planned as a file"));
                    self.fail_planned(plan, 500, p);
                    return None;
                };
                // The body was collected whole before the start was asked for.
                let BodyPlan { keep_alive, collected, spooled, .. } = body;
                let body = BodyStart { keep_alive, buffered: collected, spooled };
                plan.body = Some(BodyPlan::spent(keep_alive));
                match start.0.start(body, p) {
                    Ok(responder) => {
                        let out = Output::default();
                        self.state = State::Stream(Box::new(Streaming { responder, out, plan }));
                        self.stream_new = true;
                        self.tm.stream_start = self.stamp(at).into();
                    }
                    Err(status) => self.fail_planned(plan, status, p),
                }
                None
            }
            // The handler did not start (404, 403, 503...), or the check's
            // error page: a body, if any, is dropped to find the next request.
            (Reply::Response(response), _) => {
                if let Some(body) = plan.body.take() {
                    plan.discard += body.remaining;
                }
                Some((plan, response))
            }
        }
    }
}

pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The status logged for a request its client abandoned before any
/// response (nginx's 499); never sent.
pub const CLIENT_CLOSED: u16 = 499;

/// The phase that receives the body of `request` (chunked, or a
/// `Content-Length` of at least a byte) for its handler, after `interim`,
/// from `now` on.
pub(super) fn collect(
    request: Request,
    plan: Plan,
    interim: &'static [u8],
    now: Instant,
    p: &Pipeline,
) -> State {
    // A short body's room at once; a long one's grows as it arrives, so a
    // head that only announces a megabyte costs no more than its bytes.
    let (framed, hint) = match request.head.framing {
        BodyFraming::Length(n) => {
            (Framed::Length(n), usize::try_from(n).unwrap_or(SHORT_BODY).min(SHORT_BODY))
        }
        BodyFraming::Chunked | BodyFraming::None => {
            (Framed::Chunked(ChunkedDecoder::new(p.settings.max_body)), 0)
        }
    };
    let mut continued = Outbound::new();
    // Empty, nothing is queued (and nothing allocated).
    continued.push(Chunk::Bytes(Data::Static(interim)));
    State::Collect(Box::new(Collect {
        interim: continued,
        framed,
        body: Vec::with_capacity(hint),
        spool: None,
        received: 0,
        deadline: now + p.settings.header_timeout,
        started: now,
        request,
        plan,
    }))
}

/// Moves what is received so far into the spool, starting it if need be.
fn spool_body(c: &mut Collect) -> std::io::Result<()> {
    let spool = match &mut c.spool {
        Some(spool) => spool,
        None => c.spool.insert(Spool::new()?),
    };
    spool.append(&c.body)?;
    c.body.clear();
    Ok(())
}
