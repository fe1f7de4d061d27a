//! An attached exchange's RECEIVE and RESPONSE, in three phases a step runs
//! in order: the request body goes to the backend ([`Director::send_request`]),
//! the response head comes back and is checked ([`Director::receive_head`];
//! what the backend's bytes make of it is [`read_head`]'s to say, without
//! a socket),
//! the response body is relayed to the client, through the temp file when
//! the client is slower ([`Director::relay_response`]). Each phase looks its
//! client, exchange and backend connection up by token, so none holds
//! another's borrows.

use std::time::Instant;

use super::client::{Fault, Reuse};
use super::stage::Answer;
use super::*;
use crate::admin::label;
use crate::relay::ResponseBody;
use crate::response::{client_head, parse_response, Framing, HeadParse, MAX_RESPONSE_HEAD};
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
        if !self.bconns.get(btoken).is_some_and(|bc| bc.link.connected()) {
            return Step::Blocked;
        }
        let progress = match self.send_request(token, btoken) {
            Sending::Moved => true,
            Sending::Idle => progress,
            Sending::Ended(step) => return step,
        };
        if self.clients.get(token).is_some_and(|c| c.state == ClientState::Receive) {
            self.receive_head(token, b, btoken, progress)
        } else {
            self.relay_response(token, b, btoken, progress)
        }
    }

    /// The request body, client → backend: from the client's input buffer,
    /// its intake file, then its socket; re-framed, at most `OUT_CAP`
    /// waiting for the backend.
    fn send_request(&mut self, token: u64, btoken: u64) -> Sending {
        let cfg = &self.cfg;
        let (Some(c), Some(bc)) = (self.clients.get_mut(token), self.bconns.get_mut(btoken)) else {
            return Sending::Ended(Step::Blocked);
        };
        let Some(ex) = c.ex.as_mut() else { return Sending::Ended(Step::Close) };
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
                        Io::Eof | Io::Failed => return Sending::Ended(self.abort(token)),
                    },
                    Err(e) => {
                        self.watch.spill_failed("read", &e);
                        return Sending::Ended(self.abort(token));
                    }
                }
            }
            match ex.upload.forward(&c.io.inbuf, &mut bc.io.out) {
                Ok(consumed) => {
                    c.io.inbuf.drain(..consumed);
                }
                Err(e) => {
                    self.stats.bad_requests += 1;
                    return Sending::Ended(self.fail(token, e.status(), e.reason(), After::Close));
                }
            }
            progress = true;
            body_moved = true;
        }
        if body_moved && c.state == ClientState::Receive {
            let now = Instant::now();
            c.timer.set_unarmed(if ex.upload.is_done() {
                now + cfg.backend_timeout
            } else {
                now + cfg.body_timeout
            });
        } else if body_was_pending && ex.upload.is_done() {
            c.timer.set_unarmed(Instant::now() + cfg.backend_timeout);
        }
        match bc.io.flush(&bc.stream) {
            Ok(w) => progress |= w,
            Err(()) => {
                let fault = if ex.upload.resendable()
                    && bc.link == Link::Reused
                    && bc.io.inbuf.is_empty()
                    && !ex.head_sent()
                {
                    Fault::KeepAliveRace
                } else {
                    Fault::Backend
                };
                return Sending::Ended(self.backend_failed(token, fault, "backend connection failed"));
            }
        }
        if let Stage::Attached(a) = &mut ex.stage {
            if a.sent.is_none() && ex.upload.is_done() && bc.io.flushed() {
                a.sent = Some(Instant::now());
            }
        }

        if progress {
            Sending::Moved
        } else {
            Sending::Idle
        }
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
            match read_head(&mut bc.io.inbuf, ex.answer, ex.version, ex.after) {
                HeadRead::Bad(reason) => {
                    self.backends[b].errors += 1;
                    return self.backend_failed(token, Fault::Backend, &reason);
                }
                HeadRead::Final(head) => {
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
                    ex.after.close_unless(head.keep);
                    c.io.out.extend_from_slice(&head.bytes);
                    let Stage::Attached(attachment) = std::mem::replace(&mut ex.stage, Stage::Done) else {
                        unreachable!("RECEIVE is attached");
                    };
                    if let (Some(target), Framing::Length(bytes)) = (ex.target, head.framing) {
                        self.queue.learn(target, bytes);
                    }
                    ex.stage = Stage::Relaying(attachment, head.body);
                    c.state = ClientState::Response;
                    c.timer.set_unarmed(Instant::now() + cfg.send_timeout);
                    if is_gateway_error(head.status) {
                        self.passive_failure(b, "gateway_error");
                    } else {
                        self.passive_success(b);
                    }
                    return Step::Again;
                }
                HeadRead::Partial => {}
            }
            let had = bc.io.inbuf.len();
            match bc.io.fill(&bc.stream, MAX_RESPONSE_HEAD + 1) {
                Io::Data => progress = true,
                Io::Blocked => break,
                Io::Eof | Io::Failed => {
                    let fault = if ex.upload.resendable() && bc.link == Link::Reused && had == 0 {
                        Fault::KeepAliveRace
                    } else {
                        Fault::Backend
                    };
                    return self.backend_failed(token, fault, "backend closed before responding");
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
        // RESPONSE: backend → client as fast as the backend sends; where
        // the bytes go is `route`'s to say.
        let Stage::Relaying(_, relay) = &mut ex.stage else { unreachable!("RESPONSE relays") };
        let mut spilled = 0;
        while !relay.is_done() {
            let room = || c.spill.has_room(cfg.max_buffered_response);
            let to_file = match route(c.spill.pending(), c.io.unsent(), spilled, self.spill_budget, room) {
                Route::Memory => false,
                Route::File => true,
                Route::Yield => return Step::Yield,
                Route::Starved => return Step::Starved,
                Route::Full => break,
            };
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
                    return self.abort(token);
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
                        return self.abort(token);
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
            let reuse = if relay.backend_reusable()
                && bc.io.inbuf.is_empty()
                && ex.upload.is_done()
                && bc.io.flushed()
            {
                Reuse::Pool
            } else {
                Reuse::Close
            };
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

/// What sending the request did, for the phase after it.
enum Sending {
    /// Bytes moved: towards the backend, or out to it.
    Moved,
    /// Nothing could move now.
    Idle,
    /// The exchange ended here (answered, retried or aborted): this step.
    Ended(Step),
}

/// Where RESPONSE puts the next bytes it relays, or why it reads none now.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// The client's output: it has room, and the temp file holds nothing
    /// that must go before them.
    Memory,
    /// The temp file.
    File,
    /// This step wrote its share to the file: other connections first.
    Yield,
    /// This turn of the loop wrote its share to files: next turn.
    Starved,
    /// The file is full (`--max-buffered-response`): the backend is read
    /// at the client's pace.
    Full,
}

/// What the client has not taken waits in its output up to `OUT_CAP`, then
/// in the temp file; bytes go to the file once the output is full and as
/// long as the file has any, so they stay in order. `in_file`: bytes in
/// the file; `unsent`: in the output; `spilled`: written to the file this
/// step; `budget`: what this turn may still write to files; `room`: the
/// file may grow.
fn route(in_file: u64, unsent: usize, spilled: usize, budget: usize, room: impl FnOnce() -> bool) -> Route {
    if in_file == 0 && unsent < OUT_CAP {
        Route::Memory
    } else if spilled >= SPILL_PER_TURN {
        Route::Yield
    } else if budget == 0 {
        Route::Starved
    } else if !room() {
        Route::Full
    } else {
        Route::File
    }
}

/// What RECEIVE makes of the backend's bytes so far.
#[derive(Debug)]
enum HeadRead {
    /// The final head is not all here.
    Partial,
    /// A head the client cannot be given: 502, for this reason.
    Bad(String),
    /// The final head, written for the client.
    Final(FinalHead),
}

/// A backend's final response head, as the client gets it.
#[derive(Debug)]
struct FinalHead {
    status: u16,
    /// How the backend frames the body.
    framing: Framing,
    /// The head the client gets.
    bytes: Vec<u8>,
    /// The body, to relay in the client's framing.
    body: ResponseBody,
    /// The client connection may stay open after it.
    keep: bool,
}

/// Takes the response heads at the front of `inbuf` off it — interim
/// (1xx) ones are skipped — up to the final one, which is checked and
/// written for a client that asked in `version`, with `answer`, and whose
/// connection is to do `after`. The body's first bytes stay in `inbuf`.
fn read_head(inbuf: &mut Vec<u8>, answer: Answer, version: h1::Version, after: After) -> HeadRead {
    loop {
        let head = match parse_response(inbuf, answer.head_only()) {
            Err(reason) => return HeadRead::Bad(reason.to_string()),
            Ok(HeadParse::Partial) => return HeadRead::Partial,
            Ok(HeadParse::Complete(head, len)) => {
                inbuf.drain(..len);
                head
            }
        };
        if head.is_interim() {
            continue;
        }
        let client_11 = version == h1::Version::Http11;
        return match client_head(&head, client_11, after.keeps_alive()) {
            Ok((bytes, to_client, keep)) => HeadRead::Final(FinalHead {
                status: head.status,
                framing: head.framing,
                bytes,
                body: ResponseBody::new(head.framing, to_client, head.backend_close),
                keep,
            }),
            Err(why) => HeadRead::Bad(why),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP11: h1::Version = h1::Version::Http11;

    /// Feeds `bytes` to [`read_head`] a byte at a time; returns the final
    /// head, after how many bytes it came, and what was left in the buffer.
    fn feed(bytes: &[u8], answer: Answer, version: h1::Version, after: After) -> (FinalHead, usize, Vec<u8>) {
        let mut inbuf = Vec::new();
        for (i, &b) in bytes.iter().enumerate() {
            inbuf.push(b);
            match read_head(&mut inbuf, answer, version, after) {
                HeadRead::Partial => {}
                HeadRead::Final(head) => return (head, i + 1, inbuf),
                HeadRead::Bad(why) => panic!("refused after {} bytes: {why}", i + 1),
            }
        }
        panic!("no final head in {:?}", String::from_utf8_lossy(bytes));
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    #[test]
    fn a_head_split_at_every_byte_comes_whole_once_its_last_byte_is_in() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nX-App: 1\r\n\r\n";
        let mut response = head.to_vec();
        response.extend_from_slice(b"hello");
        for split in 0..head.len() {
            let mut inbuf = response[..split].to_vec();
            assert!(
                matches!(read_head(&mut inbuf, Answer::Full, HTTP11, After::KeepAlive), HeadRead::Partial),
                "{split} bytes"
            );
            assert_eq!(inbuf.len(), split, "a partial head stays where it is");
        }
        let (got, after, _) = feed(&response, Answer::Full, HTTP11, After::KeepAlive);
        assert_eq!(after, head.len(), "final the moment its blank line is in");
        assert_eq!((got.status, got.framing, got.keep), (200, Framing::Length(5), true));
        let written = text(&got.bytes);
        assert!(written.starts_with("HTTP/1.1 200 OK\r\n") && written.ends_with("\r\n\r\n"), "{written}");
        assert!(written.contains("Content-Length: 5\r\n") && written.contains("X-App: 1\r\n"), "{written}");
        assert!(!written.to_ascii_lowercase().contains("connection: keep-alive"), "hop-by-hop: {written}");

        // The body that follows is the relay's; the bytes after the head
        // stay for it.
        let mut inbuf = response.clone();
        let HeadRead::Final(mut got) = read_head(&mut inbuf, Answer::Full, HTTP11, After::KeepAlive) else {
            panic!("a head")
        };
        assert_eq!(inbuf, b"hello");
        let mut out = Vec::new();
        assert_eq!(got.body.relay(&inbuf, &mut out), Ok(5));
        assert_eq!(out, b"hello");
        assert!(got.body.is_done() && got.body.backend_reusable());
    }

    #[test]
    fn interim_heads_are_skipped_at_every_split() {
        let response = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
                         HTTP/1.1 204 No Content\r\n\r\n";
        let (got, after, left) = feed(response, Answer::Full, HTTP11, After::KeepAlive);
        assert_eq!((got.status, after), (204, response.len()));
        assert!(left.is_empty());
        assert!(text(&got.bytes).starts_with("HTTP/1.1 204 No Content\r\n"));

        // An interim head whole, the final one not yet: the interim one is
        // taken off, the rest waits.
        let mut inbuf = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2".to_vec();
        assert!(matches!(read_head(&mut inbuf, Answer::Full, HTTP11, After::KeepAlive), HeadRead::Partial));
        assert_eq!(inbuf, b"HTTP/1.1 2");
    }

    #[test]
    fn the_client_decides_framing_and_keep_alive() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        // HTTP/1.0 cannot take chunks: the body runs to the close.
        let mut inbuf = chunked.to_vec();
        let HeadRead::Final(mut got) =
            read_head(&mut inbuf, Answer::Full, h1::Version::Http10, After::KeepAlive)
        else {
            panic!("a head")
        };
        assert!(!got.keep, "a body to the close ends the connection");
        assert!(!text(&got.bytes).to_ascii_lowercase().contains("transfer-encoding"));
        let mut out = Vec::new();
        assert_eq!(got.body.relay(&inbuf, &mut out), Ok(inbuf.len()));
        assert_eq!(out, b"hello", "decoded, sent plain");
        assert!(got.body.is_done());

        // A connection that closes after this exchange is told so.
        let (got, _, _) =
            feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", Answer::Full, HTTP11, After::Close);
        assert!(!got.keep);
        assert!(text(&got.bytes).contains("Connection: close\r\n"), "{}", text(&got.bytes));

        // A HEAD answer has no body, whatever its length says.
        let (got, _, _) = feed(
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n",
            Answer::HeadOnly,
            HTTP11,
            After::KeepAlive,
        );
        assert_eq!(got.framing, Framing::None);
        assert!(got.body.is_done());
    }

    #[test]
    fn relayed_bytes_go_to_the_file_once_memory_is_full_and_while_it_has_any() {
        let room = || true;
        assert_eq!(route(0, 0, 0, SPILL_PER_LOOP, room), Route::Memory);
        assert_eq!(route(0, OUT_CAP - 1, 0, SPILL_PER_LOOP, room), Route::Memory);
        assert_eq!(route(0, OUT_CAP, 0, SPILL_PER_LOOP, room), Route::File);
        assert_eq!(route(1, 0, 0, SPILL_PER_LOOP, room), Route::File, "behind the file's bytes, in order");
        assert_eq!(route(1, 0, SPILL_PER_TURN, SPILL_PER_LOOP, room), Route::Yield);
        assert_eq!(route(1, 0, 0, 0, room), Route::Starved);
        assert_eq!(route(1, 0, 0, 1, || false), Route::Full);
        // Memory needs neither the file's room nor the turn's budget.
        assert_eq!(route(0, 0, SPILL_PER_TURN, 0, || panic!("not asked")), Route::Memory);
    }

    #[test]
    fn a_bad_head_is_a_bad_gateway() {
        for response in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"garbage\r\n\r\n",
        ] {
            let mut inbuf = response.to_vec();
            let got = read_head(&mut inbuf, Answer::Full, HTTP11, After::KeepAlive);
            assert!(matches!(got, HeadRead::Bad(_)), "{}: {got:?}", text(response));
        }
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        while huge.len() <= MAX_RESPONSE_HEAD {
            huge.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        let got = read_head(&mut huge, Answer::Full, HTTP11, After::KeepAlive);
        assert!(matches!(got, HeadRead::Bad(_)), "a head past the limit never completes: {got:?}");
    }
}
