//! The phases of a CGI request on a connection: a chunked body collected
//! before the script starts, the `100 Continue` probe, the script's I/O
//! streamed, local redirects, the script's timeout.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use h1::{BodyFraming, ChunkedDecoder, RequestHead};
use transport::poller::Interest;
use transport::Wire;

use super::*;
use crate::cgi_stream::{CgiRun, Step};
use crate::stats::{now_ns, Phase as TimedPhase};
use crate::Pipeline;

/// Internal redirects one request may take (Apache's `LimitInternalRecursion 10`).
pub(super) const MAX_REDIRECTS: u8 = 10;

/// A chunked request body being collected for a script.
#[derive(Debug)]
pub(super) struct Collect {
    pub(super) request: Request,
    pub(super) plan: Plan,
    pub(super) decoder: ChunkedDecoder,
    pub(super) body: Vec<u8>,
    /// `100 Continue` still to send, if the client waits for it.
    pub(super) interim: &'static [u8],
    pub(super) deadline: Instant,
}

/// How a CGI request's body reaches the script.
#[derive(Debug)]
pub(super) struct CgiPlan {
    pub(super) keep_alive: bool,
    pub(super) expect_continue: bool,
    /// `Content-Length` bytes not yet received (streamed to the script).
    pub(super) remaining: u64,
    /// A de-chunked body, received in full.
    pub(super) collected: Vec<u8>,
    /// The request whose script is being looked for (`Request::probe`),
    /// for when it is found.
    pub(super) probed: Option<Box<Request>>,
}

impl Connection {
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

    /// [`plan`](Self::plan) for a script: its body is the script's input,
    /// so it is read whole (a chunked one before the script starts), and
    /// the connection can stay open after any body we accept.
    pub(super) fn plan_cgi(
        &self,
        head: RequestHead,
        normal_path: Option<Box<str>>,
        sock: &dyn Wire,
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
        let local = sock.local_addr();
        let peer = self.info.peer;
        let request = Request {
            head,
            keep_alive,
            peer,
            local,
            redirects: 0,
            probe: false,
            route: Route::Script,
            normal_path,
        };
        (request, plan)
    }

    /// Collects a chunked body for a script. `Some` ends `drive`.
    pub(super) fn collect_body(&mut self, sock: &dyn Wire, p: &Pipeline) -> Option<Want> {
        let Phase::CgiBody(mut c) = std::mem::replace(&mut self.phase, Phase::Head) else {
            unreachable!("called in the CgiBody phase");
        };
        loop {
            if !c.interim.is_empty() {
                match sock.write_now(c.interim) {
                    Ok(n) => c.interim = &c.interim[n..],
                    Err(e) if would_block(&e) || e.kind() == std::io::ErrorKind::Interrupted => {
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
                        let what = format!("a chunked body for {}", c.request.path());
                        self.note_limit(e.status(), &what, p);
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
    pub(super) fn cgi_timed_out(&mut self, mut run: CgiRun, plan: Plan, p: &Pipeline) -> bool {
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
    pub(super) fn drive_cgi(&mut self, sock: &dyn Wire, p: &Pipeline) -> Option<Want> {
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
                let request =
                    Request::routed(p, head, keep_alive, self.info.peer, sp.local, sp.redirects + 1);
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

    pub(super) fn log_cgi(&mut self, run: &CgiRun, plan: Plan, p: &Pipeline) {
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

    /// The answer to a request planned for a script: the probe passed (a
    /// chunked body is collected next), or the script started (its run
    /// begins; `at` is its start, timing on). `Some` gives back what is
    /// answered like any request: the script's error page.
    pub(super) fn start_script(
        &mut self,
        mut plan: Plan,
        reply: Reply,
        at: Option<u64>,
        p: &Pipeline,
    ) -> Option<(Plan, Response)> {
        let probed = plan.cgi.as_mut().and_then(|cgi| cgi.probed.take());
        match reply {
            Reply::Continue => {
                let Some(request) = probed else {
                    p.error_log.error(format_args!("100 Continue for a request that was no probe"));
                    self.fail_planned(plan, 500, p);
                    return None;
                };
                // The script exists: ask for the body, then start it.
                self.phase = collect_chunked(*request, plan, CONTINUE, p);
                None
            }
            Reply::Script { spawned, .. } => {
                let Some(cgi_plan) = plan.cgi.take() else {
                    p.error_log.error(format_args!("a script started for a request planned as a file"));
                    self.fail_planned(plan, 500, p);
                    return None;
                };
                let CgiPlan { keep_alive, expect_continue, mut remaining, collected, .. } = cgi_plan;
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
                None
            }
            // The script did not start (404, 403, 503...), or the probe's
            // error page: a body, if any, is dropped to find the next request.
            Reply::Response(response) => {
                if let Some(cgi_plan) = plan.cgi.take() {
                    plan.discard += cgi_plan.remaining;
                }
                Some((plan, response))
            }
        }
    }
}

pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The phase that receives a chunked body for a script, after `interim`.
pub(super) fn collect_chunked(request: Request, plan: Plan, interim: &'static [u8], p: &Pipeline) -> Phase {
    Phase::CgiBody(Box::new(Collect {
        interim,
        decoder: ChunkedDecoder::new(p.settings.max_body),
        body: Vec::new(),
        deadline: Instant::now() + p.settings.header_timeout,
        request,
        plan,
    }))
}
