//! REQUEST without the socket: what the bytes a client sent so far make of
//! its next request ([`read_request`]). The connection reads, answers and
//! counts (`client.rs`); this decides.

use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use h1::{BodyFraming, Parsed};

use super::intake::{collect_body, Collected, Intake, Interim};
use super::queue::Target;
use super::stage::{After, Answer, Exchange, Expect, Stage, Upload};
use crate::forward::{over_limits, request_head};
use crate::options::{Config, QueueOrder};
use crate::relay::RequestBody;

/// What REQUEST makes of the input so far.
#[derive(Debug)]
pub(super) enum RequestRead {
    /// Read more, until the input buffer holds `cap` bytes. `spooling`:
    /// the body is past its memory part, so it must keep moving (the body
    /// deadline) rather than arrive within the header deadline.
    More { cap: usize, spooling: bool },
    /// Tell the client `100 Continue` (it waits for it to send the body
    /// the director reads before admission), then read on.
    Continue,
    /// Refused: answer it and close.
    Refuse(Refusal),
    /// A request, ready for admission; its head is off the input buffer,
    /// its body (or the first part of it) is next there.
    Ready(Exchange),
}

/// A request REQUEST refuses.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) status: u16,
    pub(super) reason: Cow<'static, str>,
    pub(super) cause: Cause,
}

/// Whose fault a refusal is, for the counters.
#[derive(Debug)]
pub(super) enum Cause {
    /// A bad request.
    Client,
    /// A good request whose forwarded head would pass the limits: a bad
    /// request too, counted once its body (if any) was read.
    Forwarded,
    /// The request's temp file could not be written.
    Spool(io::Error),
}

fn refuse(status: u16, reason: impl Into<Cow<'static, str>>, cause: Cause) -> RequestRead {
    RequestRead::Refuse(Refusal { status, reason: reason.into(), cause })
}

/// Reads the request at the front of `inbuf`, its body as far as REQUEST
/// does (`intake.rs`). `stopping`: the director is stopping, so no
/// connection is kept alive.
pub(super) fn read_request(
    inbuf: &mut Vec<u8>,
    intake: &mut Intake,
    cfg: &Config,
    peer: SocketAddr,
    stopping: bool,
) -> RequestRead {
    let (head, len) = match h1::parse_request(inbuf, &cfg.limits) {
        Err(e) => return refuse(e.status(), e.reason(), Cause::Client),
        Ok(Parsed::Partial) => {
            return RequestRead::More { cap: cfg.limits.max_header_bytes, spooling: false }
        }
        Ok(Parsed::Complete { head, len }) => (head, len),
    };
    if head.method == h1::Method::Connect {
        // A tunnel is not an exchange the director can admit, time or
        // relay: refused here, before any backend (one that answered 200
        // would hold its slot for good).
        return refuse(
            501,
            "CONNECT is not supported: the director relays requests, not tunnels",
            Cause::Client,
        );
    }
    if let BodyFraming::Length(n) = head.framing {
        if n > cfg.max_body {
            return refuse(413, "request body too large", Cause::Client);
        }
    }
    match collect_body(inbuf, intake, head.framing, len, cfg) {
        Collected::Enough => {}
        Collected::More(cap) => {
            if head.expect_continue
                && head.version == h1::Version::Http11
                && intake.interim == Interim::Unanswered
            {
                // The body is pre-buffered here, so the client is told to
                // send it now rather than when a backend slot frees (a
                // client that never sends it then holds no slot).
                intake.interim = Interim::Continued;
                return RequestRead::Continue;
            }
            return RequestRead::More { cap, spooling: intake.file.pending() > 0 };
        }
        Collected::Refuse(status, reason, None) => return refuse(status, reason, Cause::Client),
        Collected::Refuse(status, reason, Some(e)) => return refuse(status, reason, Cause::Spool(e)),
    }
    let is_status = cfg.status_path.as_deref().is_some_and(|p| head.path() == p);
    let fwd_head =
        if is_status { Vec::new() } else { request_head(&head, peer, cfg.tls.is_some(), &cfg.backends[0].0) };
    if let Some(why) = over_limits(&fwd_head, &cfg.limits) {
        return refuse(431, why, Cause::Forwarded);
    }
    inbuf.drain(..len);
    intake.chunk_scan = None;
    let interim = std::mem::replace(&mut intake.interim, Interim::Unanswered);
    let body = match head.framing {
        BodyFraming::None | BodyFraming::Length(0) => RequestBody::Done,
        BodyFraming::Length(n) => RequestBody::Length(n),
        BodyFraming::Chunked => RequestBody::chunked(cfg.max_body),
    };
    let head_only = head.method == h1::Method::Head;
    RequestRead::Ready(Exchange {
        fwd_head,
        // Only the size-ordered queue reads it: FIFO keeps no copy.
        target: (cfg.queue_order == QueueOrder::Srpt && !head_only).then(|| Target::of(head.target())),
        version: head.version,
        answer: if head_only { Answer::HeadOnly } else { Answer::Full },
        after: if head.keep_alive && !stopping { After::KeepAlive } else { After::Close },
        upload: Upload::new(
            body,
            if head.expect_continue && interim == Interim::Unanswered {
                Expect::Continue
            } else {
                Expect::Nothing
            },
        ),
        attempts: 0,
        stage: Stage::Parsed,
        started: Instant::now(),
        status: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::config_of;

    fn config(extra: &[&str]) -> Config {
        let mut args = vec!["--backend", "127.0.0.1:9"];
        args.extend_from_slice(extra);
        config_of(&args)
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:40000".parse().expect("an address")
    }

    /// Feeds `bytes` one at a time, as a client sending a byte per packet
    /// would, and returns the outcomes in order, a run of equal `More`
    /// outcomes counted once.
    fn feed(bytes: &[u8], cfg: &Config) -> (Vec<String>, Vec<u8>, Option<Exchange>) {
        let mut inbuf = Vec::new();
        let mut intake = Intake::new();
        let mut seen: Vec<String> = Vec::new();
        for &b in bytes {
            inbuf.push(b);
            loop {
                let outcome = read_request(&mut inbuf, &mut intake, cfg, peer(), false);
                let name = match &outcome {
                    RequestRead::More { cap, spooling } => format!("more {cap} {spooling}"),
                    RequestRead::Continue => "100".to_string(),
                    RequestRead::Refuse(r) => format!("refuse {} {}", r.status, r.reason),
                    RequestRead::Ready(_) => "ready".to_string(),
                };
                if seen.last() != Some(&name) {
                    seen.push(name.clone());
                }
                match outcome {
                    RequestRead::Ready(ex) => return (seen, inbuf, Some(ex)),
                    RequestRead::Refuse(_) => return (seen, inbuf, None),
                    RequestRead::Continue => continue,
                    RequestRead::More { .. } => break,
                }
            }
        }
        (seen, inbuf, None)
    }

    #[test]
    fn a_head_split_at_every_byte_is_read_once_whole() {
        let cfg = config(&[]);
        let request = b"GET /a?b HTTP/1.1\r\nHost: example.test\r\n\r\nGET /next";
        let head_len = request.len() - b"GET /next".len();
        for split in 1..head_len {
            // Everything up to `split` at once, then the rest a byte at a time.
            let mut inbuf = request[..split].to_vec();
            let mut intake = Intake::new();
            let outcome = read_request(&mut inbuf, &mut intake, &cfg, peer(), false);
            assert!(
                matches!(outcome, RequestRead::More { cap, spooling: false } if cap == cfg.limits.max_header_bytes),
                "{split} bytes: {outcome:?}"
            );
        }
        let (seen, left, ex) = feed(request, &cfg);
        assert_eq!(seen, [format!("more {} false", cfg.limits.max_header_bytes), "ready".to_string()]);
        let ex = ex.expect("a request");
        assert!(left.is_empty(), "the head is taken off the input: {left:?}");
        let fwd = String::from_utf8(ex.fwd_head).expect("text");
        assert!(fwd.starts_with("GET /a?b HTTP/1.1\r\n"), "{fwd}");
        assert!(fwd.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{fwd}");
        assert_eq!((ex.version, ex.answer, ex.after), (h1::Version::Http11, Answer::Full, After::KeepAlive));
        assert!(ex.upload.resendable(), "no body: it may be sent again");
        assert!(matches!(ex.stage, Stage::Parsed));
    }

    #[test]
    fn a_body_is_read_before_admission_and_stays_in_the_buffer() {
        let cfg = config(&[]);
        let (seen, left, ex) = feed(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", &cfg);
        let head_len = b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n".len();
        assert_eq!(seen.last().map(String::as_str), Some("ready"));
        assert!(seen.contains(&format!("more {} false", head_len + 5)), "{seen:?}");
        assert_eq!(left, b"hello", "the body waits in the buffer for RECEIVE");
        let ex = ex.expect("a request");
        assert!(!ex.upload.resendable() && !ex.upload.owes_continue());
    }

    #[test]
    fn expect_100_continue_is_answered_once_by_the_director() {
        let cfg = config(&[]);
        let request = b"PUT /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc";
        let (seen, left, ex) = feed(request, &cfg);
        assert_eq!(seen.iter().filter(|s| *s == "100").count(), 1, "{seen:?}");
        assert_eq!(left, b"abc");
        let ex = ex.expect("a request");
        assert!(!ex.upload.owes_continue(), "answered already: the backend's turn owes none");
    }

    #[test]
    fn bad_requests_are_refused_with_their_status() {
        let cfg = config(&["--max-body", "10"]);
        for (request, status) in [
            (&b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..], 400),
            (b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", 501),
            (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", 413),
            (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        ] {
            let (seen, _, ex) = feed(request, &cfg);
            assert!(ex.is_none());
            let last = seen.last().expect("an outcome");
            assert!(
                last.starts_with(&format!("refuse {status} ")),
                "{}: {seen:?}",
                String::from_utf8_lossy(request)
            );
        }
    }

    #[test]
    fn head_http_1_0_and_stopping_shape_the_answer() {
        let cfg = config(&[]);
        let mut inbuf = b"HEAD / HTTP/1.0\r\n\r\n".to_vec();
        let RequestRead::Ready(ex) = read_request(&mut inbuf, &mut Intake::new(), &cfg, peer(), false) else {
            panic!("a request")
        };
        assert_eq!((ex.version, ex.answer, ex.after), (h1::Version::Http10, Answer::HeadOnly, After::Close));
        assert!(ex.target.is_none(), "a HEAD answer teaches the queue no size");

        let mut inbuf = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n".to_vec();
        let RequestRead::Ready(ex) = read_request(&mut inbuf, &mut Intake::new(), &cfg, peer(), true) else {
            panic!("a request")
        };
        assert_eq!(ex.after, After::Close, "no keep-alive while stopping");
    }

    #[test]
    fn the_status_path_forwards_nothing() {
        let cfg = config(&["--status-path", "/director"]);
        let mut inbuf = b"GET /director HTTP/1.1\r\nHost: h\r\n\r\n".to_vec();
        let RequestRead::Ready(ex) = read_request(&mut inbuf, &mut Intake::new(), &cfg, peer(), false) else {
            panic!("a request")
        };
        assert!(ex.fwd_head.is_empty(), "answered by the director itself");
    }
}
