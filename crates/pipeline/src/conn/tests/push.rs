//! The connection core driven by its actions alone: no `Wire` and no
//! socket. Each test plays the driver — it answers `Io::Read` with the
//! bytes it chooses, `Io::Send` by taking what the send room allows, and
//! sets the time — so what the core asks for, in which order, is checked
//! as well as what it answers.

use std::io;

use super::responder::{EchoStart, ECHO_PIECE};
use super::*;
use crate::schedule::{Schedule, Srpt};
use crate::{CgiSettings, Scripts};

/// A plain connection: no TLS, nothing held back, no local address asked.
struct Plain;

impl Facts for Plain {
    fn holds_more(&self) -> bool {
        false
    }
    fn handshaking(&self) -> bool {
        false
    }
    fn handshake_ended(&self) -> Option<Instant> {
        None
    }
    fn local_addr(&self) -> Option<SocketAddr> {
        None
    }
}

/// What the client side does, and what the core asked of it.
#[derive(Default)]
struct Peer {
    /// Bytes for the next reads, each read taking at most what it has room for.
    input: Vec<u8>,
    /// After `input`, reads find the end of stream (else nothing now).
    closed: bool,
    /// The next read fails.
    reset: bool,
    /// Bytes the send buffer takes before it is full; `None`: unlimited.
    room: Option<usize>,
    written: Vec<u8>,
    /// The most bytes a send was offered.
    most_offered: u64,
    /// The next send that empties the queue leaves bytes in the transport
    /// (a TLS session's records the socket did not take): `Blocked`.
    holds_records: bool,
    /// The actions, in order, but for `Wait`.
    asked: Vec<String>,
}

impl Peer {
    fn read(&mut self, into: &mut [u8]) -> io::Result<usize> {
        if std::mem::take(&mut self.reset) {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if self.input.is_empty() {
            return if self.closed { Ok(0) } else { Err(io::ErrorKind::WouldBlock.into()) };
        }
        let n = into.len().min(self.input.len());
        into[..n].copy_from_slice(&self.input[..n]);
        self.input.drain(..n);
        Ok(n)
    }

    fn send(&mut self, out: &mut transport::Outbound, limit: u64) -> io::Result<Progress> {
        self.most_offered = self.most_offered.max(out.remaining());
        let room = self.room.unwrap_or(usize::MAX);
        if room == 0 {
            return Ok(Progress::Blocked);
        }
        let allowed = usize::try_from(limit).unwrap_or(usize::MAX).min(room);
        let n = out.copy_into(&mut self.written, allowed)?;
        if let Some(room) = self.room.as_mut() {
            *room -= n;
        }
        Ok(match () {
            _ if out.is_empty() && std::mem::take(&mut self.holds_records) => Progress::Blocked,
            _ if out.is_empty() => Progress::Done,
            _ if n as u64 == limit => Progress::Paused,
            _ => Progress::Blocked,
        })
    }
}

/// A connection, its pipeline and the driver's time.
struct Core {
    p: Pipeline,
    conn: Connection,
    peer: Peer,
    now: Instant,
}

impl Core {
    fn new() -> Core {
        Core::with(Settings::default())
    }

    fn with(settings: Settings) -> Core {
        let h = Harness::with(settings, Mode::Inline);
        Core { p: h.p, conn: h.conn, peer: Peer::default(), now: h.now }
    }

    /// A connection whose requests are handed out, with a route whose
    /// handler reads the body (the CGI prefix; no script is looked up).
    fn handing_out() -> Core {
        let cgi = Some(CgiSettings::new(Scripts::Dir("/nonexistent".into())));
        let h = Harness::with(Settings { cgi, ..Settings::default() }, Mode::HandOut);
        Core { p: h.p, conn: h.conn, peer: Peer::default(), now: h.now }
    }

    /// Steps the core, performing each action, until it waits.
    fn run(&mut self) -> Want {
        self.conn.set_now(self.now);
        loop {
            let io = self.conn.step(&Plain, &self.p, false);
            if let Io::Wait(want) = io {
                return want;
            }
            self.peer.asked.push(format!("{io:?}"));
            match io {
                Io::Read => {
                    let read = self.peer.read(self.conn.read_room());
                    self.conn.received(read);
                }
                Io::Send { limit } => {
                    let sent = self.peer.send(self.conn.outbound(), limit);
                    self.conn.sent(sent);
                }
                Io::Prioritize { .. } | Io::ShutdownWrite => {}
                Io::Wait(_) => unreachable!("returned above"),
            }
        }
    }

    /// The client sends `bytes`; the core runs until it waits.
    fn arrive(&mut self, bytes: &[u8]) -> Want {
        self.peer.input.extend_from_slice(bytes);
        self.run()
    }

    fn responses(&mut self) -> Vec<Response> {
        parse_responses(&std::mem::take(&mut self.peer.written))
    }

    fn asked(&mut self) -> Vec<String> {
        std::mem::take(&mut self.peer.asked)
    }

    fn statuses(&mut self) -> Vec<(u16, u64)> {
        self.conn.take_log().map(|r| (r.status, r.body_bytes)).collect()
    }

    /// The body collected for the request just taken, as its handler gets it.
    fn collected(&self) -> Vec<u8> {
        match &self.conn.state {
            State::Processing(job) => job.plan.body.as_ref().expect("a streamed request").collected.clone(),
            _ => panic!("no request taken"),
        }
    }
}

/// `request` arrives cut in two at every byte, then a byte at a time: each
/// time the core only reads until the body is whole, its handler gets
/// `body` with its length, and nothing is sent.
fn collects_whole_however_cut(request: &[u8], body: &[u8]) {
    let arrivals = (1..request.len())
        .map(|cut| vec![&request[..cut], &request[cut..]])
        .chain(std::iter::once(request.chunks(1).collect()));
    for pieces in arrivals {
        let mut c = Core::handing_out();
        let (last, first) = pieces.split_last().unwrap();
        for piece in first {
            let want = c.arrive(piece);
            assert_eq!(want, Want::Read(c.now + c.p.settings.header_timeout), "{pieces:?}");
        }
        assert_eq!(c.arrive(last), Want::Process, "{pieces:?}");
        assert!(c.asked().iter().all(|a| a == "Read"), "{pieces:?}");
        assert!(c.peer.written.is_empty(), "{pieces:?}");
        let request = c.conn.take_request().expect("ready once the body is in");
        assert_eq!(request.head.framing, h1::BodyFraming::Length(body.len() as u64), "{pieces:?}");
        assert!(!request.head.expect_continue);
        assert_eq!(c.collected(), body, "{pieces:?}");
    }
}

#[test]
fn a_body_with_a_length_is_read_as_actions_however_it_is_cut() {
    let request = b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\nhello, world";
    collects_whole_however_cut(request, b"hello, world");
}

#[test]
fn a_chunked_body_is_read_as_actions_and_decoded_however_it_is_cut() {
    let request = b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                    5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
    collects_whole_however_cut(request, b"hello, world");
}

#[test]
fn continue_is_a_send_before_the_body_is_read_and_a_blocked_one_waits_for_room() {
    let mut c = Core::handing_out();
    let head = b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    assert_eq!(c.arrive(head), Want::Process, "its handler is asked first");
    assert!(c.conn.take_request().expect("the check").head.expect_continue);
    let starts = Arc::default();
    c.conn.deliver(Reply::stream(Box::new(EchoStart(Arc::clone(&starts)))), &c.p);
    c.asked();
    c.peer.room = Some(10);
    let Want::Write(due) = c.run() else { panic!("the interim waits for room") };
    assert_eq!(due, c.now + c.p.settings.header_timeout);
    assert_eq!(c.asked(), ["Send { limit: 18446744073709551615 }"], "no read before it is out");
    assert_eq!(c.peer.written, b"HTTP/1.1 1");
    c.peer.room = None;
    assert_eq!(c.run(), Want::Read(due));
    assert_eq!(c.asked(), ["Send { limit: 18446744073709551615 }", "Read"]);
    assert_eq!(std::mem::take(&mut c.peer.written), b"HTTP/1.1 100 Continue\r\n\r\n");
    assert_eq!(c.arrive(b"hello"), Want::Process);
    assert_eq!(c.asked(), ["Read"]);
    let request = c.conn.take_request().expect("ready once the body is in");
    assert!(!request.head.expect_continue);
    assert_eq!(c.collected(), b"hello");
    assert!(c.peer.written.is_empty(), "one interim");
    assert_eq!(starts.load(std::sync::atomic::Ordering::Relaxed), 0, "the check starts nothing");
}

#[test]
fn a_keep_alive_get_split_at_every_byte_is_answered_once_whole() {
    for cut in 1..GET.len() {
        let mut c = Core::new();
        let header = c.p.settings.header_timeout;
        let Want::Read(due) = c.arrive(&GET[..cut]) else { panic!("cut at {cut}") };
        assert_eq!(due, c.now + header, "cut at {cut}: the head's deadline");
        assert!(c.peer.written.is_empty(), "cut at {cut}");
        assert_eq!(c.asked(), ["Read", "Read"], "cut at {cut}: the bytes, then nothing more now");
        assert_eq!(c.arrive(&GET[cut..]), Want::Read(c.now + c.p.settings.keepalive_timeout));
        assert_eq!(c.asked(), ["Read", "Send { limit: 18446744073709551615 }", "Read"], "cut at {cut}");
        let responses = c.responses();
        assert_eq!(responses.len(), 1, "cut at {cut}");
        assert_eq!((responses[0].status, &responses[0].body[..]), (200, &b"hello"[..]));
        assert_eq!(c.statuses(), [(200, 5)]);
    }
}

#[test]
fn pipelined_requests_are_answered_in_order_from_one_read() {
    let mut c = Core::new();
    let missing = b"GET /none HTTP/1.1\r\nHost: x\r\n\r\n";
    c.arrive(&[GET, missing, GET].concat());
    let statuses: Vec<u16> = c.responses().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 404, 200]);
    assert_eq!(c.conn.served(), 3);
    let asked = c.asked();
    assert_eq!(asked.iter().filter(|a| *a == "Read").count(), 2, "{asked:?}");
}

#[test]
fn a_body_nobody_reads_is_read_in_pieces_and_dropped_then_the_next_request_answered() {
    let mut c = Core::new();
    c.arrive(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    assert_eq!(c.responses()[0].status, 200);
    // The rest of the body, then the next request, in two arrivals.
    c.arrive(b"defg");
    assert!(c.responses().is_empty(), "still in the body");
    c.arrive(&[&b"hij"[..], GET].concat());
    let responses = c.responses();
    assert_eq!(responses.len(), 1);
    assert_eq!(responses[0].body, b"hello");
    assert_eq!(c.statuses(), [(200, 5), (200, 5)]);
}

#[test]
fn a_send_that_blocks_waits_for_room_and_resumes_where_it_stopped() {
    let mut c = Core::new();
    c.peer.room = Some(10);
    let Want::Write(due) = c.arrive(GET) else { panic!("waits to write") };
    assert_eq!(due, c.now + c.p.settings.send_timeout);
    assert_eq!(c.peer.written.len(), 10);
    assert_eq!(c.asked(), ["Read", "Send { limit: 18446744073709551615 }"]);
    c.peer.room = None;
    assert_eq!(c.run(), Want::Read(c.now + c.p.settings.keepalive_timeout));
    let responses = c.responses();
    assert_eq!((responses.len(), &responses[0].body[..]), (1, &b"hello"[..]));
    assert_eq!(c.statuses(), [(200, 5)]);
}

#[test]
fn a_read_error_closes_without_an_answer() {
    let mut c = Core::new();
    c.peer.reset = true;
    assert_eq!(c.run(), Want::Close);
    assert!(c.peer.written.is_empty());
    assert!(c.statuses().is_empty());
}

#[test]
fn the_end_of_stream_mid_head_closes_logged_400() {
    let mut c = Core::new();
    c.peer.closed = true;
    assert_eq!(c.arrive(b"GET /a.txt HT"), Want::Close);
    assert!(c.peer.written.is_empty(), "nothing is sent");
    assert_eq!(c.statuses(), [(400, 0)]);
}

#[test]
fn a_head_not_complete_by_its_deadline_gets_408_then_lingers_after_shutting_our_side() {
    let mut c = Core::new();
    let Want::Read(due) = c.arrive(b"GET /a.txt HTTP/1.1\r\nHo") else { panic!("waits for the head") };
    c.now = due;
    c.conn.set_now(due);
    assert!(c.conn.timed_out(&c.p), "a 408 to send");
    c.asked();
    let Want::Read(linger) = c.run() else { panic!("lingers") };
    assert_eq!(linger, due + c.p.settings.linger_timeout);
    assert_eq!(c.asked(), ["Send { limit: 18446744073709551615 }", "ShutdownWrite", "Read"]);
    let responses = c.responses();
    assert_eq!(responses[0].status, 408);
    assert!(responses[0].closes());
    // What the client still sends is read and dropped; its close ends it.
    c.peer.closed = true;
    assert_eq!(c.arrive(b"st: x\r\n\r\n"), Want::Close);
    assert!(c.responses().is_empty());
}

#[test]
fn srpt_asks_for_the_sockets_priority_as_the_class_of_what_is_left_falls() {
    let srpt = Srpt { cutoffs: vec![10_000, 50_000], quantum: 10_000, ..Srpt::default() };
    let mut c = Core::with(Settings { schedule: Schedule::Srpt(srpt), ..Settings::default() });
    c.arrive(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.responses()[0].body.len(), BIG.len());
    let priorities: Vec<String> = c.asked().into_iter().filter(|a| a.starts_with("Prioritize")).collect();
    let unsent = Srpt::UNSENT_LIMIT;
    assert_eq!(
        priorities,
        [
            format!("Prioritize {{ priority: {}, unsent_limit: Some({unsent}) }}", 0x10003),
            format!("Prioritize {{ priority: {}, unsent_limit: None }}", 0x10002),
            format!("Prioritize {{ priority: {}, unsent_limit: None }}", 0x10001),
        ]
    );
}

#[test]
fn a_responders_output_goes_out_as_sends_a_bounded_amount_at_a_time_and_resumes_after_a_block() {
    let mut c = Core::handing_out();
    let body = vec![b'e'; 5 * ECHO_PIECE];
    let head = format!("POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len());
    assert_eq!(c.arrive(&[head.as_bytes(), &body].concat()), Want::Process);
    c.conn.take_request().expect("ready once the body is in");
    c.conn.deliver(Reply::stream(Box::new(EchoStart(Arc::default()))), &c.p);
    c.asked();
    c.peer.room = Some(1500);
    let Want::Source(_) = c.run() else { panic!("waits for the socket") };
    assert_eq!(c.peer.written.len(), 1500);
    // A piece went, the next was cut short by the full socket.
    let send = "Send { limit: 18446744073709551615 }";
    assert_eq!(c.asked(), [send, send]);
    assert_eq!(c.conn.waiting().socket, Some(transport::poller::Interest::WRITABLE));
    assert!(c.peer.most_offered < 2 * ECHO_PIECE as u64, "{} bytes held", c.peer.most_offered);
    // The driver comes back: the socket took nothing more, the responder waits.
    assert!(matches!(c.run(), Want::Source(_)));
    assert_eq!((c.asked(), c.peer.written.len()), (vec![send.to_string()], 1500));
    c.peer.room = None;
    assert_eq!(c.run(), Want::Read(c.now + c.p.settings.keepalive_timeout));
    assert!(c.asked().iter().filter(|a| *a == send).count() >= 4, "a piece at a time");
    assert!(c.peer.most_offered < 2 * ECHO_PIECE as u64, "{} bytes held", c.peer.most_offered);
    let responses = c.responses();
    assert_eq!((responses.len(), responses[0].status), (1, 200));
    assert_eq!(responses[0].body, body);
    assert_eq!(c.statuses(), [(200, body.len() as u64)]);
}

#[test]
fn a_streamed_response_ends_only_once_the_transport_holds_none_of_it() {
    let mut c = Core::handing_out();
    let request = b"POST /cgi-bin/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
    assert_eq!(c.arrive(request), Want::Process);
    c.conn.take_request().expect("ready once the body is in");
    c.conn.deliver(Reply::stream(Box::new(EchoStart(Arc::default()))), &c.p);
    c.asked();
    c.peer.holds_records = true;
    let Want::Source(_) = c.run() else { panic!("the transport still holds the last bytes") };
    assert_eq!(c.conn.waiting().socket, Some(transport::poller::Interest::WRITABLE));
    assert!(c.statuses().is_empty(), "not logged before it is out");
    let send = "Send { limit: 18446744073709551615 }";
    assert_eq!(c.asked(), [send]);
    assert_eq!(c.run(), Want::Read(c.now + c.p.settings.keepalive_timeout));
    assert_eq!(c.asked(), [send, "Read"]);
    assert_eq!(c.responses()[0].body, b"hi");
    assert_eq!(c.statuses(), [(200, 2)]);
}
