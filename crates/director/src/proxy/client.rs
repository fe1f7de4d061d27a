//! Driving a client connection through REQUEST and PEEK, and the end of its
//! exchange (RECEIVE and RESPONSE are in `exchange.rs`).

use std::time::Instant;

use super::*;
use crate::admin::label;
use crate::backend::{pick, LARGE};
use request::{read_request, Cause, Refusal, RequestRead};

/// What becomes of a backend connection once its exchange is over.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Reuse {
    /// The exchange was clean: the connection may serve the next request.
    Pool,
    /// Something of the exchange may be left on it: close it.
    Close,
}

/// Why a backend connection failed before its response head.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Fault {
    /// A reused keep-alive connection the backend closed as the request went
    /// out, with nothing of it answered and nothing lost if it is resent
    /// (a bodiless request): try again on another connection.
    KeepAliveRace,
    /// The backend failed this request: it counts against the backend.
    Backend,
}

impl Director {
    pub(super) fn drive(&mut self, token: u64) {
        for _ in 0..STEPS_PER_TURN {
            match self.step(token) {
                Step::Again => {}
                Step::Blocked => {
                    self.arm_client(token);
                    return;
                }
                Step::Peek => self.admit(token),
                Step::Yield => break,
                Step::Starved => {
                    self.starved.push(token);
                    self.arm_client(token);
                    return;
                }
                Step::Close => {
                    self.close_client(token);
                    return;
                }
            }
        }
        // Still busy (e.g. a pipelining flood): continue next turn.
        self.ready.push_back(token);
        self.arm_client(token);
    }

    pub(super) fn step(&mut self, token: u64) -> Step {
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        let in_memory = c.io.unsent();
        if c.spill.pending() > 0 && in_memory < OUT_CAP {
            if let Err(e) = c.spill.take_into(&mut c.io.out, OUT_CAP - in_memory) {
                self.watch.spill_failed("read", &e);
                return self.abort(token);
            }
        }
        let wrote = match c.io.flush(&c.stream) {
            Ok(w) => w,
            Err(()) => return Step::Close,
        };
        if c.state == ClientState::Response && (wrote || c.timer.deadline().is_none()) {
            c.timer.set_unarmed(Instant::now() + self.cfg.send_timeout);
        }
        match c.state {
            ClientState::Request => self.step_request(token),
            ClientState::Peek => {
                if c.ex.as_ref().is_some_and(Exchange::is_queued) {
                    Step::Blocked
                } else {
                    Step::Peek
                }
            }
            ClientState::Receive | ClientState::Response => self.step_exchange(token, wrote),
            ClientState::Linger => {
                // What comes now is dropped: the connection is closing.
                loop {
                    c.io.inbuf.clear();
                    match c.io.fill(&c.stream, READ_SIZE) {
                        Io::Data => {}
                        Io::Blocked => return Step::Blocked,
                        Io::Eof | Io::Failed => return Step::Close,
                    }
                }
            }
        }
    }

    /// REQUEST: read and validate a head (and a small body); what the
    /// bytes make of it is [`read_request`]'s to say.
    pub(super) fn step_request(&mut self, token: u64) -> Step {
        let cfg = &self.cfg;
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        if !c.io.flushed() {
            // Responses go out in order: finish the previous one first.
            return Step::Blocked;
        }
        loop {
            let (cap, spooling) =
                match read_request(&mut c.io.inbuf, &mut c.intake, cfg, c.peer, self.finish.is_stopping()) {
                    RequestRead::More { cap, spooling } => (cap, spooling),
                    RequestRead::Continue => {
                        c.io.out.extend_from_slice(CONTINUE);
                        return Step::Again;
                    }
                    RequestRead::Refuse(Refusal { status, reason, cause }) => {
                        match cause {
                            Cause::Client => self.stats.bad_requests += 1,
                            Cause::Forwarded => {
                                if c.intake.file.pending() > 0 {
                                    self.stats.requests_to_file += 1;
                                    self.metrics.requests_to_file.inc();
                                }
                                self.stats.bad_requests += 1;
                            }
                            Cause::Spool(e) => self.watch.spill_failed("write", &e),
                        }
                        respond_local(
                            c,
                            status,
                            "text/plain",
                            &error_page(status, &reason),
                            &[],
                            After::Close,
                        );
                        return Step::Again;
                    }
                    RequestRead::Ready(ex) => {
                        if c.intake.file.pending() > 0 {
                            self.stats.requests_to_file += 1;
                            self.metrics.requests_to_file.inc();
                        }
                        self.stats.requests += 1;
                        c.ex = Some(ex);
                        c.state = ClientState::Peek;
                        c.timer.cancel();
                        c.head_started = None;
                        return Step::Peek;
                    }
                };
            let was_empty = c.io.inbuf.is_empty();
            match c.io.fill(&c.stream, cap) {
                Io::Data => {
                    if was_empty && c.head_started.is_none() {
                        // The header deadline runs from the first byte; the
                        // keep-alive timeout covered the wait before it.
                        let now = Instant::now();
                        c.head_started = Some(now);
                        c.timer.set_unarmed(now + cfg.header_timeout);
                    } else if spooling {
                        c.timer.set_unarmed(Instant::now() + cfg.body_timeout);
                    }
                }
                Io::Blocked => return Step::Blocked,
                Io::Eof | Io::Failed => return Step::Close,
            }
        }
    }

    /// PEEK: forward now, park in the pending queue, or refuse.
    pub(super) fn admit(&mut self, token: u64) {
        let Some(c) = self.clients.get_mut(token) else { return };
        let Some(ex) = c.ex.as_mut() else { return };
        if ex.fwd_head.is_empty() {
            let page = self.status_page();
            let c = self.clients.get_mut(token).expect("just seen");
            let after = discard_body(c);
            respond_local(c, 200, "text/plain; charset=utf-8", page.as_bytes(), &[], after);
            return;
        }
        // Each failed attempt (refused connection, keep-alive race) comes
        // back here; a bounded number of them, then 502.
        if !self.backends.iter().any(|b| b.up) || ex.attempts > self.backends.len() as u32 + 1 {
            self.stats.bad_gateway += 1;
            let after = discard_body(c);
            respond_local(c, 502, "text/plain", &error_page(502, "no backend available"), &[], after);
            return;
        }
        let expected = self.queue.expected(ex.target);
        if let Some(b) = pick(&self.backends, self.cfg.max_backend_conns, self.rr, expected >= LARGE) {
            self.rr = self.rr.wrapping_add(1);
            self.attach(token, b);
            return;
        }
        if !ex.is_queued() && self.queue.len() < self.cfg.queue {
            let now = Instant::now();
            ex.stage = Stage::Queued(now);
            c.timer.set_unarmed(now + self.cfg.queue_timeout);
            self.stats.queued_total += 1;
            self.queue.push(token, expected);
            return;
        }
        self.stats.queue_full += 1;
        self.busy_page(token, "queue_full");
    }

    pub(super) fn busy_page(&mut self, token: u64, reason: &str) {
        let Some(c) = self.clients.get_mut(token) else { return };
        self.stats.busy_pages += 1;
        self.metrics.refused.get_or_create(&label("reason", reason)).inc();
        let after = discard_body(c);
        let extra = [("Retry-After", self.cfg.retry_after.to_string()), ("Cache-Control", "no-store".into())];
        respond_local(c, 503, "text/html; charset=utf-8", &self.cfg.busy_page, &extra, after);
    }

    /// Attaches the client's request to a connection of backend `b`: an
    /// idle pooled one, or a new one.
    pub(super) fn attach(&mut self, token: u64, b: usize) {
        let btoken = loop {
            match self.backends[b].idle.pop() {
                Some(t) if self.bconns.get(t).is_some() => break Some(t),
                Some(_) => continue,
                None => break self.open_conn(b),
            }
        };
        let Some(c) = self.clients.get_mut(token) else { return };
        let Some(ex) = c.ex.as_mut() else { return };
        let Some(btoken) = btoken else {
            // Could not even create a socket: the backend is marked down;
            // admission tries again (another backend, or 502).
            ex.attempts += 1;
            self.ready.push_back(token);
            return;
        };
        self.backends[b].inflight += 1;
        let now = Instant::now();
        let attachment = Attachment { backend: (b, btoken), inflight: self.backends[b].inflight, sent: None };
        if let Stage::Queued(queued) = std::mem::replace(&mut ex.stage, Stage::Attached(attachment)) {
            let waited = now.duration_since(queued);
            record(&mut self.latencies.queue, waited);
            self.metrics.queue_wait.observe(waited.as_secs_f64());
        }
        let body_pending = !ex.upload.is_done();
        if ex.upload.owes_continue() {
            c.io.out.extend_from_slice(CONTINUE);
        }
        c.state = ClientState::Receive;
        // While the body is coming, the client must keep it moving; after
        // it, the backend has --backend-timeout to answer.
        c.timer
            .set_unarmed(now + if body_pending { self.cfg.body_timeout } else { self.cfg.backend_timeout });
        let bc = self.bconns.get_mut(btoken).expect("checked above");
        bc.client = Some(token);
        bc.io.out.extend_from_slice(&ex.fwd_head);
        bc.timer.cancel();
        self.ready.push_back(token);
    }

    /// The exchange is complete and flushed: next request, or close.
    pub(super) fn finish(&mut self, token: u64) -> Step {
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        let Some(ex) = c.ex.take() else { return Step::Close };
        // Drained: the file goes with its exchange.
        c.spill = Spill::Unused;
        *self.stats.responses.entry(ex.status).or_default() += 1;
        self.metrics.responses.get_or_create(&label("status", ex.status)).inc();
        let took = ex.started.elapsed();
        record(&mut self.latencies.request, took);
        self.metrics.request_duration.observe(took.as_secs_f64());
        if !ex.after.keeps_alive() || self.finish.is_stopping() {
            c.stream.shutdown_write();
            c.state = ClientState::Linger;
            c.timer.set_unarmed(Instant::now() + LINGER);
            return Step::Again;
        }
        c.state = ClientState::Request;
        let now = Instant::now();
        if c.io.inbuf.is_empty() {
            c.head_started = None;
            c.timer.set_unarmed(now + self.cfg.keepalive_timeout);
        } else {
            c.head_started = Some(now);
            c.timer.set_unarmed(now + self.cfg.header_timeout);
        }
        Step::Again
    }

    /// Gives the backend connection back (to the pool if `reuse` says so and
    /// it is still up and flushed), and lets a queued request have the slot.
    pub(super) fn release(&mut self, token: u64, reuse: Reuse) {
        let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) else { return };
        let Some(Attachment { backend: (b, btoken), .. }) = ex.detach() else { return };
        let backend = &mut self.backends[b];
        backend.inflight -= 1;
        backend.served += 1;
        if let Some(bc) = self.bconns.get_mut(btoken) {
            bc.client = None;
            if reuse == Reuse::Pool && backend.up && bc.io.flushed() {
                bc.link = Link::Reused;
                backend.idle.push(btoken);
            } else {
                self.close_bconn(btoken);
            }
        }
        self.dispatch_queue();
    }

    /// A backend connection failed during RECEIVE: retry a keep-alive race
    /// (at most twice), or 502.
    pub(super) fn backend_failed(&mut self, token: u64, fault: Fault, reason: &str) -> Step {
        let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) else { return Step::Close };
        if let Some(Attachment { backend: (b, btoken), inflight, sent }) = ex.detach() {
            self.backends[b].inflight -= 1;
            self.close_bconn(btoken);
            if fault == Fault::Backend {
                if let Some(at) = sent {
                    self.backends[b].limiter.sample(at.elapsed(), true, inflight);
                }
                self.passive_failure(b, "broken");
            }
        }
        let c = self.clients.get_mut(token).expect("seen above");
        let ex = c.ex.as_mut().expect("seen above");
        if fault == Fault::KeepAliveRace && ex.attempts < 2 {
            ex.attempts += 1;
            c.state = ClientState::Peek;
            self.dispatch_queue();
            return Step::Peek;
        }
        self.stats.bad_gateway += 1;
        let step = self.fail(token, 502, reason, After::KeepAlive);
        self.dispatch_queue();
        step
    }

    /// Answers `status` if no response head went out yet, else aborts.
    /// `after`: `KeepAlive` if the connection may stay open past the
    /// answer (when the request's body is here to be dropped).
    pub(super) fn fail(&mut self, token: u64, status: u16, reason: &str, after: After) -> Step {
        let Some(c) = self.clients.get_mut(token) else { return Step::Close };
        let Some(ex) = c.ex.as_mut() else { return Step::Close };
        if ex.head_sent() {
            return self.abort(token);
        }
        if let Some(Attachment { backend: (b, btoken), .. }) = ex.detach() {
            self.backends[b].inflight -= 1;
            self.close_bconn(btoken);
            self.dispatch_queue();
        }
        let c = self.clients.get_mut(token).expect("seen above");
        let after = match after {
            After::KeepAlive => discard_body(c),
            After::Close => After::Close,
        };
        respond_local(c, status, "text/plain", &error_page(status, reason), &[], after);
        Step::Again
    }

    /// Drops the exchange and the client connection (no way to tell the
    /// client more than that).
    pub(super) fn abort(&mut self, token: u64) -> Step {
        if let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) {
            if let Some(Attachment { backend: (b, btoken), .. }) = ex.detach() {
                self.backends[b].inflight -= 1;
                self.close_bconn(btoken);
                self.dispatch_queue();
            }
        }
        Step::Close
    }

    pub(super) fn close_client(&mut self, token: u64) {
        if let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) {
            if let Some(Attachment { backend: (b, btoken), .. }) = ex.detach() {
                self.backends[b].inflight -= 1;
                self.close_bconn(btoken);
            }
        }
        if let Some(c) = self.clients.remove(token) {
            if c.ex.as_ref().is_some_and(Exchange::is_queued) {
                self.queue.remove(token);
            }
            let ip = c.peer.ip();
            if let Some(n) = self.per_ip.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.per_ip.remove(&ip);
                }
            }
        }
        self.dispatch_queue();
    }

    /// Serves queued requests while backends have room, in the queue's
    /// order (`--queue-order`); answers them all at once if no backend is up.
    pub(super) fn dispatch_queue(&mut self) {
        while let Some(next) = self.queue.next() {
            let token = next.token;
            let queued =
                self.clients.get(token).is_some_and(|c| c.ex.as_ref().is_some_and(Exchange::is_queued));
            if !queued {
                self.queue.take(next);
                continue;
            }
            if !self.backends.iter().any(|b| b.up) {
                self.queue.take(next);
                self.unqueue_and_admit(token);
                continue;
            }
            let Some(b) = pick(&self.backends, self.cfg.max_backend_conns, self.rr, next.large) else {
                return;
            };
            self.rr = self.rr.wrapping_add(1);
            self.queue.take(next);
            self.attach(token, b);
        }
    }

    /// Takes a queued client out of the queue and admits it again (for the
    /// 502 when nothing is up).
    pub(super) fn unqueue_and_admit(&mut self, token: u64) {
        if let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) {
            ex.stage = Stage::Parsed;
            self.admit(token);
            self.ready.push_back(token);
        }
    }
}
