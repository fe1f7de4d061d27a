//! An attached exchange's RECEIVE and RESPONSE, in three phases a step runs
//! in order: the request body goes to the backend ([`Director::send_request`]),
//! the response head comes back and is checked ([`Director::receive_head`]),
//! the response body is relayed to the client, through the temp file when
//! the client is slower ([`Director::relay_response`]). Each phase looks its
//! client, exchange and backend connection up by token, so none holds
//! another's borrows.

use std::time::Instant;

use super::*;
use crate::admin::label;
use crate::relay::ResponseBody;
use crate::response::{client_head, parse_response, HeadParse, MAX_RESPONSE_HEAD};
use crate::spill::SpillError;

impl Director {
    /// RECEIVE and RESPONSE: one step of the exchange the client `token` is
    /// in — finish it once done and flushed, else move the request body,
    /// then read the response head (RECEIVE) or relay the body (RESPONSE).
    pub(super) fn step_exchange(&mut self, token: u64, progress: bool) -> Step {
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        let Some(ex) = c.ex.as_mut() else { return Step::Close };
        if ex.is_done() {
            if !c.io.flushed() || c.spill.pending() > 0 {
                // Still writable: `out` went out whole and the temp file
                // has more for the next step.
                return if c.io.writable { Step::Again } else { Step::Blocked };
            }
            return self.finish(token);
        }
        let Some((b, btoken)) = ex.backend() else { return Step::Blocked };
        if !self.bconns.get(btoken).is_some_and(|bc| bc.connected) {
            return Step::Blocked;
        }
        let progress = match self.send_request(token, btoken) {
            Ok(moved) => progress | moved,
            Err(step) => return step,
        };
        if self.clients.get(token).is_some_and(|c| c.state == ClientState::Receive) {
            self.receive_head(token, b, btoken, progress)
        } else {
            self.relay_response(token, b, btoken, progress)
        }
    }

    /// The request body, client → backend: from the client's input buffer,
    /// its intake file, then its socket; re-framed, at most `OUT_CAP`
    /// waiting for the backend. `Ok(true)` if anything moved; `Err` with
    /// the step when the exchange ended here.
    fn send_request(&mut self, token: u64, btoken: u64) -> Result<bool, Step> {
        let cfg = &self.cfg;
        let (Some(c), Some(bc)) = (self.clients.get_mut(token), self.bconns.get_mut(btoken)) else {
            return Err(Step::Blocked);
        };
        let Some(ex) = c.ex.as_mut() else { return Err(Step::Close) };
        let mut progress = false;
        let body_was_pending = !ex.upload.is_done();
        let mut body_moved = false;
        while !ex.upload.is_done() && bc.io.unsent() < OUT_CAP {
            if c.io.inbuf.is_empty() {
                match intake::refill(&mut c.intake, &mut c.io.inbuf) {
                    Ok(true) => {}
                    Ok(false) => match c.io.fill(&c.stream, READ_SIZE) {
                        Io::Data => {}
                        Io::Blocked => break,
                        // The client left in the middle of its body.
                        Io::Eof | Io::Failed => return Err(self.abort(token, false)),
                    },
                    Err(e) => {
                        self.watch.spill_failed("read", &e);
                        return Err(self.abort(token, false));
                    }
                }
            }
            match ex.upload.forward(&c.io.inbuf, &mut bc.io.out) {
                Ok(consumed) => {
                    c.io.inbuf.drain(..consumed);
                }
                Err(e) => {
                    self.stats.bad_requests += 1;
                    return Err(self.fail(token, e.status(), e.reason(), false));
                }
            }
            progress = true;
            body_moved = true;
        }
        if body_moved && c.state == ClientState::Receive {
            let now = Instant::now();
            c.deadline =
                Some(if ex.upload.is_done() { now + cfg.backend_timeout } else { now + cfg.body_timeout });
        } else if body_was_pending && ex.upload.is_done() {
            c.deadline = Some(Instant::now() + cfg.backend_timeout);
        }
        match bc.io.flush(&bc.stream) {
            Ok(w) => progress |= w,
            Err(()) => {
                let retry = ex.upload.resendable() && bc.reused && bc.io.inbuf.is_empty() && !ex.head_sent();
                return Err(self.backend_failed(token, retry, "backend connection failed"));
            }
        }
        if let Stage::Attached(a) = &mut ex.stage {
            if a.sent.is_none() && ex.upload.is_done() && bc.io.flushed() {
                a.sent = Some(Instant::now());
            }
        }

        Ok(progress)
    }

    /// RECEIVE: the backend's response head, interim ones skipped, checked
    /// and rewritten for the client; the exchange moves to RESPONSE.
    fn receive_head(&mut self, token: u64, b: usize, btoken: u64, mut progress: bool) -> Step {
        let cfg = &self.cfg;
        let (Some(c), Some(bc)) = (self.clients.get_mut(token), self.bconns.get_mut(btoken)) else {
            return Step::Blocked;
        };
        let Some(ex) = c.ex.as_mut() else { return Step::Close };
        loop {
            match parse_response(&bc.io.inbuf, ex.answer.head_only()) {
                Err(reason) => {
                    self.backends[b].errors += 1;
                    return self.backend_failed(token, false, reason);
                }
                Ok(HeadParse::Complete(head, len)) => {
                    bc.io.inbuf.drain(..len);
                    if head.is_interim() {
                        continue;
                    }
                    let client_11 = ex.version == h1::Version::Http11;
                    let (bytes, to_client, keep) = match client_head(&head, client_11, ex.after.keeps_alive())
                    {
                        Ok(written) => written,
                        Err(why) => {
                            self.backends[b].errors += 1;
                            return self.backend_failed(token, false, &why);
                        }
                    };
                    ex.status = head.status;
                    let failed = is_server_error(head.status);
                    if failed {
                        self.backends[b].server_errors += 1;
                    }
                    if let Some((sent, inflight)) = ex.attachment().and_then(|a| Some((a.sent?, a.inflight)))
                    {
                        let latency = sent.elapsed();
                        let backend = &mut self.backends[b];
                        backend.limiter.sample(latency, failed, inflight);
                        record(&mut self.latencies.backend, latency);
                        record(&mut self.latencies.per_backend[b], latency);
                        self.metrics
                            .backend_response
                            .get_or_create(&label("backend", &backend.name))
                            .observe(latency.as_secs_f64());
                    }
                    ex.after.close_unless(keep);
                    c.io.out.extend_from_slice(&bytes);
                    let Stage::Attached(attachment) = std::mem::replace(&mut ex.stage, Stage::Done) else {
                        unreachable!("RECEIVE is attached");
                    };
                    if let (Some(target), &crate::response::Framing::Length(bytes)) =
                        (ex.target, &head.framing)
                    {
                        self.queue.learn(target, bytes);
                    }
                    let body = ResponseBody::new(head.framing, to_client, head.backend_close);
                    ex.stage = Stage::Relaying(attachment, body);
                    c.state = ClientState::Response;
                    c.deadline = Some(Instant::now() + cfg.send_timeout);
                    if is_gateway_error(head.status) {
                        self.passive_failure(b, "gateway_error");
                    } else {
                        self.passive_success(b);
                    }
                    return Step::Again;
                }
                Ok(HeadParse::Partial) => {}
            }
            let had = bc.io.inbuf.len();
            match bc.io.fill(&bc.stream, MAX_RESPONSE_HEAD + 1) {
                Io::Data => progress = true,
                Io::Blocked => break,
                Io::Eof | Io::Failed => {
                    let retry = ex.upload.resendable() && bc.reused && had == 0;
                    return self.backend_failed(token, retry, "backend closed before responding");
                }
            }
        }
        if progress {
            Step::Again
        } else {
            Step::Blocked
        }
    }

    /// RESPONSE: the body, backend → client; the backend connection is
    /// released as soon as the body is read.
    fn relay_response(&mut self, token: u64, b: usize, btoken: u64, mut progress: bool) -> Step {
        let cfg = &self.cfg;
        let (Some(c), Some(bc)) = (self.clients.get_mut(token), self.bconns.get_mut(btoken)) else {
            return Step::Blocked;
        };
        let Some(ex) = c.ex.as_mut() else { return Step::Close };
        // RESPONSE: backend → client as fast as the backend sends. What the
        // client has not taken waits in `c.io.out` up to OUT_CAP, then in the
        // temp file up to --max-buffered-response; past that, the backend
        // is read at the client's pace. Bytes go to the file once `c.io.out`
        // is full and as long as the file has any, so they stay in order.
        let Stage::Relaying(_, relay) = &mut ex.stage else { unreachable!("RESPONSE relays") };
        let mut spilled = 0;
        while !relay.is_done() {
            let to_file = c.spill.pending() > 0 || c.io.unsent() >= OUT_CAP;
            if to_file {
                if spilled >= SPILL_PER_TURN {
                    return Step::Yield;
                }
                if self.spill_budget == 0 {
                    return Step::Starved;
                }
                if !c.spill.has_room(cfg.max_buffered_response) {
                    break;
                }
            }
            let size = if to_file { SPILL_READ_SIZE } else { READ_SIZE };
            let closed = bc.io.inbuf.is_empty()
                && match bc.io.fill_sized(&bc.stream, size, size) {
                    Io::Data => false,
                    Io::Blocked => break,
                    Io::Eof | Io::Failed => true,
                };
            progress = true;
            let start = c.io.out.len();
            let relayed = if closed {
                // The end of a body that runs to the close, or a truncation.
                relay.backend_closed(&mut c.io.out).map(|()| 0)
            } else {
                relay.relay(&bc.io.inbuf, &mut c.io.out)
            };
            match relayed {
                Ok(consumed) => {
                    bc.io.inbuf.drain(..consumed);
                }
                // The client cannot be told except by closing.
                Err(_) => {
                    self.backends[b].errors += 1;
                    self.passive_failure(b, "broken");
                    return self.abort(token, true);
                }
            }
            if to_file && c.io.out.len() > start {
                match c.spill.append(&c.io.out[start..]) {
                    Ok(made) => {
                        if made {
                            self.stats.buffered_to_file += 1;
                            self.metrics.buffered_to_file.inc();
                        }
                        spilled += c.io.out.len() - start;
                        self.spill_budget = self.spill_budget.saturating_sub(c.io.out.len() - start);
                        c.io.out.truncate(start);
                    }
                    // The file is empty, so the bytes may stay in memory,
                    // in order; the rest goes at the client's pace.
                    Err(SpillError::Create(e)) => self.watch.spill_failed("create", &e),
                    Err(SpillError::Write(e)) => {
                        self.watch.spill_failed("write", &e);
                        return self.abort(token, false);
                    }
                }
            }
        }
        if relay.is_done() {
            // The backend is free as soon as its response is read, whatever
            // the client's speed: reuse it only if the exchange was clean.
            // A body that is Done is only copied into `bc.io.out`; if a backend
            // answered early, part of it may still be unsent, and the next
            // request on that connection would be read as its tail.
            let reuse =
                relay.backend_reusable() && bc.io.inbuf.is_empty() && ex.upload.is_done() && bc.io.flushed();
            if !ex.upload.is_done() {
                // The backend answered before the whole body was sent: the
                // rest of it is unread, so the client connection must close.
                ex.after = After::Close;
            }
            self.release(token, reuse);
            return Step::Again;
        }
        if progress {
            Step::Again
        } else {
            Step::Blocked
        }
    }
}
