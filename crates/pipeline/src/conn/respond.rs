//! Writing a response, logging it, and what follows it.

use std::time::Instant;

use h1::RequestHead;

use super::*;
use crate::accesslog::first_line;
use crate::reply::Reply;
use crate::response::{self, Response};
use crate::spares::{self, Spares};
use crate::stats::{ConnState, Phase};
use crate::{LogRecord, Pipeline};

thread_local! {
    /// The boxes of sent responses' [`Pending`]s, taken back once their
    /// record and queue are out (what is left in them holds no allocation).
    static SPARE_PENDINGS: Spares<Box<Pending>> = const { Spares::new(16, |_| true) };
    /// Log records whose strings are reused for the next request's, kept
    /// here rather than in the connection, so an idle keep-alive connection
    /// holds none; records grown by unusually long heads are freed.
    static SPARE_LOG_RECORDS: Spares<LogRecord> = const { Spares::new(64, |record| record_bytes(record) <= 2048) };
}

/// The bytes a log record's strings hold.
pub(super) fn record_bytes(record: &LogRecord) -> usize {
    [&record.request_line, &record.referer, &record.user_agent]
        .iter()
        .flat_map(|s| s.as_ref())
        .map(Vec::capacity)
        .sum()
}

#[derive(Debug)]
pub(super) struct Pending {
    pub(super) reply: Response,
    pub(super) log: Option<LogRecord>,
    /// Body bytes to drop after the response before the next head.
    pub(super) discard: u64,
    /// Input may still be arriving that we will not read: linger on close.
    pub(super) linger: bool,
    /// Bytes sent when the deadline was last moved; progress moves it.
    pub(super) sent_mark: u64,
    pub(super) deadline: Instant,
    /// When the write began (for SRPT's starvation bound).
    pub(super) started: Instant,
    /// (Warm-ahead) bytes sent when the pages up to here were last seen in memory.
    pub(super) warm_edge: u64,
    /// (Warm-ahead) the next window's pages, cold, until the driver takes them.
    pub(super) cold: Option<transport::FilePages>,
}

impl Pending {
    /// (Warm-ahead, `window` bytes) how much may be sent before pages not
    /// known to be in memory, `u64::MAX` when all the rest is; `None` when
    /// the next window holds a cold page (now in `cold`), which the driver
    /// must have read in first.
    pub(super) fn warm_allowance(&mut self, window: u64) -> Option<u64> {
        let out = &self.reply.out;
        let sent = out.bytes_sent();
        if sent >= self.warm_edge {
            let next = out.file_pages(window);
            if !next.is_empty() && !next.cached() {
                self.cold = Some(next);
                return None;
            }
            self.warm_edge = sent + window;
        }
        // Unbounded when the edge is past the end: a response sent in one
        // go keeps the unbounded write.
        let allowed = self.warm_edge - sent;
        Some(if allowed >= out.remaining() { u64::MAX } else { allowed })
    }
}

impl Connection {
    /// A record from this thread's spares when there is one: its strings
    /// keep their allocations.
    pub(super) fn log_record(&self, head: &RequestHead, p: &Pipeline) -> Option<LogRecord> {
        if !p.access_log.is_enabled() {
            return None;
        }
        let mut record = spares::take(&SPARE_LOG_RECORDS).unwrap_or_else(|| LogRecord {
            peer: self.info.peer.ip(),
            user: None,
            request_line: None,
            status: 0,
            body_bytes: 0,
            referer: None,
            user_agent: None,
        });
        record.peer = self.info.peer.ip();
        (record.status, record.body_bytes) = (0, 0);
        write_request_line(head, record.request_line.get_or_insert_default());
        overwrite(&mut record.referer, head.header("Referer"));
        overwrite(&mut record.user_agent, head.header("User-Agent"));
        record.user = head.header("Authorization").and_then(basic_user);
        Some(record)
    }

    /// `at`: a timestamp just taken (timing on), the start of what follows.
    pub(super) fn respond_planned(&mut self, plan: Plan, reply: Reply, at: Option<u64>, p: &Pipeline) {
        let (plan, reply) = match reply {
            Reply::Response(response) if plan.body.is_none() => (plan, response),
            reply => match self.start_stream(plan, reply, at, p) {
                Some(answer) => answer,
                None => return,
            },
        };
        let log = plan.log.map(|log| LogRecord { status: reply.status, ..log });
        let close = reply.close;
        self.respond(reply, log, if close { 0 } else { plan.discard }, close && plan.unread, at, p);
    }

    /// Says which limit refused `what` (413, 414, 431) and how to raise
    /// it, once a minute per limit: the client only sees the status, and an
    /// operator whose users hit it should not have to guess which flag.
    pub(super) fn note_limit(&self, status: u16, what: &str, p: &Pipeline) {
        let s = &p.settings;
        let limit = match status {
            413 => format!("--max-body ({} bytes)", s.max_body),
            414 => format!("--max-request-line ({} bytes)", s.limits.max_request_line),
            431 => format!(
                "--max-header-bytes ({} bytes), --max-headers ({} fields) or a field line's length",
                s.limits.max_header_bytes, s.limits.max_headers
            ),
            _ => return,
        };
        p.error_log.warn_once(
            &format!("limit {status}"),
            format_args!(
                "{status} to {}: {what} over {limit}; if such requests are legitimate, raise that limit",
                self.info.peer.ip()
            ),
        );
    }

    /// The client closed in the middle of a request head: logged as nginx
    /// logs it, `400 0` with what the request line was (nothing is sent).
    pub(super) fn cut_off(&mut self, p: &Pipeline) -> Want {
        if self.start < self.end && p.access_log.is_enabled() {
            let record = LogRecord {
                peer: self.info.peer.ip(),
                user: None,
                request_line: first_line(&self.buf[self.start..self.end]),
                status: 400,
                body_bytes: 0,
                referer: None,
                user_agent: None,
            };
            if self.defer_log {
                self.deferred_log.push(record);
            } else {
                p.access_log.record(&record);
            }
        }
        Want::Close
    }

    /// Answers input that is not a request: parse errors and timeouts.
    pub(super) fn refuse(&mut self, status: u16, p: &Pipeline) {
        let log = p.access_log.is_enabled().then(|| LogRecord {
            peer: self.info.peer.ip(),
            user: None,
            request_line: first_line(&self.buf[self.start..self.end]),
            status,
            body_bytes: 0,
            referer: None,
            user_agent: None,
        });
        self.respond(response::refuse(&p.settings, status), log, 0, true, None, p);
    }

    /// `at`: a timestamp just taken (timing on), when the write starts.
    pub(super) fn respond(
        &mut self,
        mut reply: Response,
        log: Option<LogRecord>,
        discard: u64,
        linger: bool,
        at: Option<u64>,
        p: &Pipeline,
    ) {
        // The write starts when its deadline is set: one clock read for both.
        self.tm.write_start = self.stamp(at).into();
        self.set_state(ConnState::Writing);
        let started = self.deadline_base(self.tm.write_start.get());
        let deadline = started + p.settings.send_timeout;
        // Closed (or shut down, lingering) as soon as it is out: its tail and
        // the FIN leave in one segment.
        reply.out.closing(reply.close);
        let pending = Pending {
            reply,
            log,
            discard,
            linger,
            sent_mark: 0,
            deadline,
            started,
            warm_edge: 0,
            cold: None,
        };
        self.state = State::Write(match spares::take(&SPARE_PENDINGS) {
            Some(mut spare) => {
                *spare = pending;
                spare
            }
            None => Box::new(pending),
        });
    }

    /// The response is out: log it and move on. `Some` ends `drive`.
    pub(super) fn finish_response(&mut self, p: &Pipeline) -> Option<Want> {
        let State::Write(mut pending) = std::mem::replace(&mut self.state, State::Head) else {
            unreachable!("called in the write phase");
        };
        self.served += 1;
        self.log(p, &mut pending);
        response::spare::give_back(std::mem::take(&mut pending.reply.out));
        let (close, linger, discard) = (pending.reply.close, pending.linger, pending.discard);
        debug_assert!(pending.log.is_none());
        spares::give_back(&SPARE_PENDINGS, pending);
        self.after_response(close, linger, discard, p)
    }

    /// What follows a logged response (a file's or a script's): close, at
    /// once or lingering if the client may still be sending (`linger`);
    /// or read and drop `discard` body bytes; or wait for the next head.
    /// Deadlines count from the response's end. `Some` ends `drive`.
    pub(super) fn after_response(
        &mut self,
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
            // Our side is shut first (`Io::ShutdownWrite`), then input drained.
            let deadline = self.deadline_base(ended) + p.settings.linger_timeout;
            self.state = State::Shut { deadline };
        } else if discard > 0 {
            let deadline = self.deadline_base(ended) + p.settings.header_timeout;
            self.state = State::Discard { remaining: discard, deadline };
        } else {
            self.await_next_head(p, ended);
        }
        None
    }

    /// `ended` is when the previous request ended, if just now and timed:
    /// its timestamp starts the deadlines too instead of another clock read.
    pub(super) fn await_next_head(&mut self, p: &Pipeline, ended: Option<u64>) {
        if self.start == self.end {
            // An idle keep-alive connection keeps no buffer until its next
            // request arrives (nginx does the same): ten thousand idle
            // clients then cost a few hundred bytes each, not 4 KiB.
            spares::give_back(&SPARE_BUFFERS, std::mem::take(&mut self.buf));
            (self.start, self.end) = (0, 0);
            self.set_state(ConnState::KeepAlive);
        }
        let now = self.deadline_base(ended);
        self.state = State::Head;
        self.head_deadline = now + p.settings.header_timeout;
        self.idle_deadline = now + p.settings.keepalive_timeout;
    }

    /// The connection dies mid-response: log what was sent (a 200 that was
    /// cut short still shows its real byte count).
    pub(super) fn abort(&mut self, p: &Pipeline) {
        match std::mem::replace(&mut self.state, State::Head) {
            State::Write(mut pending) => self.log(p, &mut pending),
            State::Stream(streaming) => {
                let Streaming { responder, plan, .. } = *streaming;
                self.log_streamed(responder.as_ref(), plan, p);
            }
            _ => {}
        }
    }

    pub(super) fn log(&mut self, p: &Pipeline, pending: &mut Pending) {
        let mut end = p.stats.timing.then(|| p.stats.now());
        if let (Some(start), Some(now)) = (self.tm.write_start.take(), end) {
            self.tm.phases.set(Phase::Write, now.saturating_sub(start));
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

/// The request line as received, for the log, in place of what `line`
/// held; built by hand because `format!` costs a measurable share of a
/// small keep-alive request.
pub(super) fn write_request_line(head: &RequestHead, line: &mut Vec<u8>) {
    let (method, target, version) = (head.method.as_str(), head.target(), version_str(head.version));
    line.clear();
    line.reserve(method.len() + target.len() + version.len() + 2);
    line.extend_from_slice(method.as_bytes());
    line.push(b' ');
    line.extend_from_slice(target.as_bytes());
    line.push(b' ');
    line.extend_from_slice(version.as_bytes());
}

/// Sets `slot` to `value`, in the buffer it already has if any.
pub(super) fn overwrite(slot: &mut Option<Vec<u8>>, value: Option<&[u8]>) {
    match (slot.as_mut(), value) {
        (Some(old), Some(value)) => {
            old.clear();
            old.extend_from_slice(value);
        }
        (_, value) => *slot = value.map(<[u8]>::to_vec),
    }
}

/// The user of a `Basic` Authorization (RFC 7617): the credentials'
/// bytes before the first `:`, as nginx's `$remote_user` (no password
/// checked: modus authenticates no one; a script may).
pub(super) fn basic_user(authorization: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let (scheme, credentials) = authorization.split_at(authorization.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(credentials.trim_ascii()).ok()?;
    let user = &decoded[..decoded.iter().position(|&b| b == b':').unwrap_or(decoded.len())];
    (!user.is_empty()).then(|| user.to_vec())
}

pub(super) fn version_str(v: h1::Version) -> &'static str {
    match v {
        h1::Version::Http10 => "HTTP/1.0",
        h1::Version::Http11 => "HTTP/1.1",
    }
}
