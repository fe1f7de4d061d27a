//! A streamed responder the connection has never heard of — the request's
//! body echoed back from memory — handed to it as a model hands a reply
//! back: the connection collects the body, asks before a `100 Continue`,
//! starts it, drives it and logs it with nothing more than the
//! [`Starter`] and [`Responder`] traits. No process, no pipe, no sleep.

use std::os::fd::BorrowedFd;

use transport::poller::Interest;

use super::*;
use crate::responder::{BodyStart, Output, Responder, Starter, Streamed};
use crate::stats::Phase;
use crate::{CgiSettings, Scripts};

/// Starts an [`Echo`] of the body; counts its starts.
#[derive(Debug)]
pub(super) struct EchoStart(pub(super) Arc<std::sync::atomic::AtomicU32>);

impl Starter for EchoStart {
    fn timed(&self) -> Option<(Phase, &'static str)> {
        Some((Phase::CgiSpawn, "echo"))
    }

    fn start(self: Box<Self>, body: BodyStart, _p: &Pipeline) -> Result<Box<dyn Responder>, u16> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body_bytes = body.buffered.len() as u64;
        let mut response = format!("HTTP/1.1 200 OK\r\nContent-Length: {body_bytes}\r\n\r\n").into_bytes();
        response.extend_from_slice(&body.buffered);
        Ok(Box::new(Echo {
            response,
            made: 0,
            body_bytes,
            deadline: Instant::now() + Duration::from_secs(60),
        }))
    }
}

/// Starts a responder that never says anything.
#[derive(Debug)]
struct SilentStart;

impl Starter for SilentStart {
    fn timed(&self) -> Option<(Phase, &'static str)> {
        Some((Phase::CgiSpawn, "silent"))
    }

    fn start(self: Box<Self>, _body: BodyStart, _p: &Pipeline) -> Result<Box<dyn Responder>, u16> {
        let deadline = Instant::now() + Duration::from_secs(60);
        Ok(Box::new(Echo { response: Vec::new(), made: 0, body_bytes: 0, deadline }))
    }
}

/// The most an [`Echo`] makes before what it made is sent.
pub(super) const ECHO_PIECE: usize = 1000;

/// A response made from memory a piece at a time, as a script's output
/// is read: the next piece only once less than a piece is unsent.
#[derive(Debug)]
struct Echo {
    response: Vec<u8>,
    /// Bytes of `response` handed to the connection.
    made: usize,
    body_bytes: u64,
    deadline: Instant,
}

impl Responder for Echo {
    fn pump(&mut self, out: &mut Output, _p: &Pipeline) -> Streamed {
        while self.made < self.response.len() && out.unsent() < ECHO_PIECE as u64 {
            let piece = &self.response[self.made..][..ECHO_PIECE.min(self.response.len() - self.made)];
            out.extend_from_slice(piece);
            self.made += piece.len();
        }
        match self.response.is_empty() || out.pending() || self.made < self.response.len() {
            true => Streamed::Wait(self.deadline),
            false => Streamed::Done { close: false },
        }
    }

    fn waiting(&self, _out: &Output) -> Vec<(BorrowedFd<'_>, Interest)> {
        Vec::new()
    }

    fn descriptors(&self) -> Vec<(BorrowedFd<'_>, Interest)> {
        Vec::new()
    }

    fn stop(&mut self, _p: &Pipeline) -> Option<u16> {
        (self.made == 0).then_some(504)
    }

    fn status(&self) -> u16 {
        200
    }

    fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    fn phase(&self) -> Phase {
        Phase::CgiRun
    }
}

/// A connection whose requests are handed out, with a route whose handler
/// reads the body (the CGI prefix; no script is ever looked up here).
fn handing_out() -> (Harness, Arc<std::sync::atomic::AtomicU32>) {
    let cgi = Some(CgiSettings::new(Scripts::Dir("/nonexistent".into())));
    (Harness::with(Settings { cgi, ..Settings::default() }, Mode::HandOut), Arc::default())
}

#[test]
fn a_responder_the_connection_never_heard_of_streams_the_body_back() {
    let (mut h, starts) = handing_out();
    let want = h.send(b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhel");
    assert!(matches!(want, Want::Read(_)), "the body is collected whole first: {want:?}");
    assert_eq!(h.send(b"lo"), Want::Process);
    let request = h.conn.take_request().expect("ready once the body is in");
    assert_eq!(request.head.framing, h1::BodyFraming::Length(5));
    h.conn.deliver(Reply::stream(Box::new(EchoStart(starts.clone()))), &h.p);
    assert!(matches!(h.drive(), Want::Read(_)), "kept alive for the next request");
    let response = h.response();
    assert_eq!((response.status, response.body.as_slice()), (200, &b"hello"[..]));
    assert_eq!(h.statuses(), [(200, 5)]);
    assert_eq!(starts.load(std::sync::atomic::Ordering::Relaxed), 1);
    // The next request is the connection's as usual.
    assert!(matches!(h.send(GET), Want::Process));
}

#[test]
fn its_check_before_100_continue_starts_nothing_and_its_start_gets_the_body() {
    let (mut h, starts) = handing_out();
    let want = h.send(
        b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
    );
    assert_eq!(want, Want::Process, "asked before the body");
    let check = h.conn.take_request().unwrap();
    assert!(check.head.expect_continue && !check.keep_alive, "a chunked body cannot be dropped unread");
    h.conn.deliver(Reply::stream(Box::new(EchoStart(starts.clone()))), &h.p);
    assert!(matches!(h.drive(), Want::Read(_)));
    assert_eq!(h.wire.take_written(), b"HTTP/1.1 100 Continue\r\n\r\n");
    assert_eq!(starts.load(std::sync::atomic::Ordering::Relaxed), 0, "the check's start is dropped");
    assert_eq!(h.send(b"3\r\nabc\r\n0\r\n\r\n"), Want::Process);
    let request = h.conn.take_request().unwrap();
    assert!(!request.head.expect_continue && request.keep_alive);
    assert_eq!(request.head.framing, h1::BodyFraming::Length(3));
    h.conn.deliver(Reply::stream(Box::new(EchoStart(starts.clone()))), &h.p);
    assert!(matches!(h.drive(), Want::Read(_)));
    assert_eq!(h.response().body, b"abc");
    assert_eq!(starts.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn a_responder_that_times_out_before_its_output_gets_its_status() {
    let (mut h, _) = handing_out();
    h.send(b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz");
    h.conn.take_request().expect("ready once the body is in");
    h.conn.deliver(Reply::stream(Box::new(SilentStart)), &h.p);
    let Want::Source(deadline) = h.drive() else { panic!("it says nothing") };
    assert!(h.conn.waiting().socket.is_none(), "nothing to send");
    assert!(h.time_out_at(deadline), "an error page is queued");
    h.drive();
    assert_eq!(h.response().status, 504);
}

#[test]
fn a_responder_whose_output_began_is_closed_at_its_deadline() {
    let (mut h, starts) = handing_out();
    h.wire.send_room(10);
    h.send(b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz");
    h.conn.take_request().expect("ready once the body is in");
    h.conn.deliver(Reply::stream(Box::new(EchoStart(starts))), &h.p);
    let Want::Source(deadline) = h.drive() else { panic!("the client takes ten bytes") };
    assert_eq!(h.conn.waiting().socket, Some(Interest::WRITABLE), "output waits for the socket");
    assert!(!h.time_out_at(deadline), "only a close can tell the client");
    assert_eq!(h.wire.take_written(), b"HTTP/1.1 2");
    assert_eq!(h.statuses(), [(200, 1)]);
}
