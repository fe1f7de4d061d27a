//! The connection's state machine driven with byte slices: a
//! [`MemoryWire`] stands for the socket and the tests set the clock, so
//! every phase, deadline and error path runs without sockets or sleeps.

use super::*;
use crate::accesslog::LogTarget;
use crate::stats::TRACE_HEADER;
use crate::{AccessLog, EmbeddedFile, ErrorLog, Settings, Site};
use std::sync::Arc;
use std::time::Duration;

mod cgi;
mod core;
mod push;
mod responder;
mod schedule;
mod slow;
mod warm;
mod wire;

use wire::MemoryWire;

static BIG: [u8; 100_000] = [b'x'; 100_000];
static FILES: &[EmbeddedFile] =
    &[EmbeddedFile { path: "/a.txt", bytes: b"hello" }, EmbeddedFile { path: "/big.bin", bytes: &BIG }];
const GET: &[u8] = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";

/// A connection, its wire and a clock the test moves.
struct Harness {
    p: Pipeline,
    conn: Connection,
    wire: MemoryWire,
    now: Instant,
    records: Vec<LogRecord>,
}

impl Harness {
    fn new() -> Harness {
        Harness::with(Settings::default(), Mode::Inline)
    }

    fn with(settings: Settings, mode: Mode) -> Harness {
        let access = Arc::new(AccessLog::open(LogTarget::Stdout).unwrap());
        let p = Pipeline::new(settings, Site::embedded(FILES), access, Arc::new(ErrorLog::stderr()))
            .with_stats(Stats::new(false));
        let now = Instant::now();
        let peer = SocketAddr::from(([192, 0, 2, 7], 40000));
        let mut conn = Connection::new(ConnInfo { peer }, now, &p, mode);
        // Kept for the tests to read instead of written to stdout.
        conn.defer_log();
        Harness { p, conn, wire: MemoryWire::new(), now, records: Vec::new() }
    }

    /// One `drive` at the harness's time.
    fn drive(&mut self) -> Want {
        self.drive_stopping(false)
    }

    fn drive_stopping(&mut self, stopping: bool) -> Want {
        self.conn.set_now(self.now);
        let want = self.conn.drive(&self.wire, &self.p, stopping);
        self.records.extend(self.conn.take_log());
        want
    }

    /// The client sends `bytes`; the connection is driven once.
    fn send(&mut self, bytes: &[u8]) -> Want {
        self.wire.arrive(bytes);
        self.drive()
    }

    /// Moves the clock to `at` and tells the connection its deadline passed.
    fn time_out_at(&mut self, at: Instant) -> bool {
        self.now = at;
        self.conn.set_now(at);
        let more = self.conn.timed_out(&self.p);
        self.records.extend(self.conn.take_log());
        more
    }

    /// The responses written since the last call.
    fn responses(&self) -> Vec<Response> {
        parse_responses(&self.wire.take_written())
    }

    /// The one response written since the last call.
    fn response(&self) -> Response {
        let mut all = self.responses();
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }

    fn statuses(&self) -> Vec<(u16, u64)> {
        self.records.iter().map(|r| (r.status, r.body_bytes)).collect()
    }
}

/// A response as the client reads it.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn closes(&self) -> bool {
        self.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// Splits `bytes` into responses framed by `Content-Length` or chunked
/// (or with no body at all: 1xx, 304). Answers to HEAD
/// have a length and no body: read them with [`parse_bodiless`].
fn parse_responses(bytes: &[u8]) -> Vec<Response> {
    parse_with(bytes, false)
}

/// [`parse_responses`] for answers to HEAD requests.
fn parse_bodiless(bytes: &[u8]) -> Vec<Response> {
    parse_with(bytes, true)
}

fn parse_with(mut bytes: &[u8], bodiless: bool) -> Vec<Response> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head") + 4;
        let head = std::str::from_utf8(&bytes[..end]).unwrap();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
        let status: u16 = status_line[9..12].parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.to_string(), v.trim().to_string())
            })
            .collect();
        let mut response = Response { status, headers, body: Vec::new() };
        bytes = &bytes[end..];
        let has_body = status >= 200 && !bodiless;
        if has_body && response.header("transfer-encoding") == Some("chunked") {
            loop {
                let line_end = bytes.windows(2).position(|w| w == b"\r\n").unwrap();
                let size = std::str::from_utf8(&bytes[..line_end]).unwrap();
                let size = usize::from_str_radix(size, 16).unwrap();
                let data = &bytes[line_end + 2..];
                if size == 0 {
                    assert!(data.starts_with(b"\r\n"), "no trailers here");
                    bytes = &data[2..];
                    break;
                }
                response.body.extend_from_slice(&data[..size]);
                assert_eq!(&data[size..size + 2], b"\r\n");
                bytes = &data[size + 2..];
            }
        } else if let Some(len) = response.header("content-length").filter(|_| has_body) {
            let len = len.parse::<usize>().unwrap();
            response.body = bytes[..len].to_vec();
            bytes = &bytes[len..];
        }
        out.push(response);
    }
    out
}

/// An idle keep-alive connection of the event models is this struct and
/// little else (`bench/models.sh idle`: PSS per idle connection, target
/// 0.5 KiB with the loop's own bookkeeping), so growing it is a decision.
/// 400 → 408: the TLS handshake's phase (a plain connection carries its
/// 8 bytes unused; a TLS one holds kilobytes of rustls session besides).
/// 408 → 416: the one-byte result of the I/O a step asked its driver for
/// (`drive.rs`), which the fields' packing rounds up to a word.
#[test]
fn a_connection_stays_small() {
    let size = std::mem::size_of::<Connection>();
    assert!(size <= 416, "Connection is {size} bytes");
    assert_eq!(std::mem::size_of::<Mark>(), 8);
}

#[test]
fn deferred_log_records_go_to_the_caller() {
    let mut h = Harness::new();
    h.send(&[GET, b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"].concat());
    assert_eq!(h.statuses(), [(200, 5), (404, h.records[1].body_bytes)]);
    assert_eq!(h.records[0].request_line.as_deref(), Some(&b"GET /a.txt HTTP/1.1"[..]));
    assert_eq!(h.records[0].peer, std::net::IpAddr::from([192, 0, 2, 7]));
    assert!(h.conn.take_log().next().is_none(), "taken records are gone");
}

#[test]
fn deadlines_count_from_the_drivers_time_only() {
    let mut h = Harness::new();
    let keepalive = h.p.settings.keepalive_timeout;
    // A reading the connection cannot have taken itself.
    h.now += Duration::from_secs(3600);
    assert_eq!(h.send(GET), Want::Read(h.now + keepalive));
    // It stands until the driver gives another: the connection reads no clock.
    h.wire.arrive(GET);
    let Want::Read(idle) = h.conn.drive(&h.wire, &h.p, false) else { panic!() };
    assert_eq!(idle, h.now + keepalive);
    // A driver whose drive waits gives its clock, read at each deadline.
    fn two_hours_on() -> Instant {
        Instant::now() + Duration::from_secs(7200)
    }
    h.conn.set_clock(two_hours_on);
    let before = Instant::now();
    h.wire.arrive(GET);
    let Want::Read(idle) = h.conn.drive(&h.wire, &h.p, false) else { panic!() };
    assert!(idle >= before + Duration::from_secs(7200) + keepalive, "{idle:?}");
    assert_eq!(h.conn.served(), 3);
}

#[test]
fn phases_follow_each_other_without_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let (log, trace) = (dir.path().join("access.log"), dir.path().join("trace.csv"));
    let access = Arc::new(AccessLog::open(LogTarget::File(log)).unwrap());
    let stats = Stats::new(true).with_trace(&trace, 1.0).unwrap();
    let p = Pipeline::new(Settings::default(), Site::embedded(FILES), access, Arc::new(ErrorLog::stderr()))
        .with_stats(stats);
    let peer = SocketAddr::from(([127, 0, 0, 1], 40000));
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p, Mode::Inline);
    let wire = MemoryWire::new();
    // The second request is pipelined: it starts when the first ends.
    wire.arrive(&[GET, GET].concat());
    let Want::Read(idle) = conn.drive(&wire, &p, false) else { panic!() };
    assert_eq!(conn.served(), 2);
    assert!(idle <= Instant::now() + p.settings.keepalive_timeout, "{idle:?}");
    p.stats.flush();
    let text = std::fs::read_to_string(&trace).unwrap();
    let header: Vec<&str> = TRACE_HEADER.trim_end().split(',').collect();
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for row in rows {
        let us = |name: &str| row[header.iter().position(|h| *h == name).unwrap()].parse::<f64>().unwrap();
        let phases = ["read_us", "parse_us", "data_us", "write_us", "log_us"].map(us);
        let total = us("service_end_us") - us("arrival_us");
        // Microseconds, each rounded on its own.
        assert!((phases.iter().sum::<f64>() - total).abs() <= 2.0, "{phases:?} against {total}: {row:?}");
        let head = us("service_start_us") - us("arrival_us");
        assert!((phases[0] + phases[1] - head).abs() <= 2.0, "{phases:?} against {head}: {row:?}");
    }
}

/// A byte that breaks a rule is answered when it arrives, not when its line
/// ends; and a head gets the answer its bytes decide however they arrive
/// (issue 34, item 8).
#[test]
fn a_head_is_answered_by_its_bytes_however_they_arrive() {
    let mut h = Harness::new();
    h.send(b"GE");
    assert_eq!(h.conn.served(), 0);
    h.send(b"(T / HTTP/1.1");
    assert_eq!(h.response().status, 400, "no line feed needed");
    let mut long = b"GET /a.txt HTTP/1.1\r\nHost: h\r\nX-Long: ".to_vec();
    long.extend_from_slice(&[b'a'; 8200]);
    long.extend_from_slice(b"\r\nBad Header: x\r\n\r\n");
    for cut in [0, 40, 8240, long.len() - 3] {
        let mut h = Harness::new();
        h.send(&long[..cut]);
        h.send(&long[cut..]);
        assert_eq!(h.response().status, 431, "cut at {cut}");
    }
}

/// A head that arrives a byte at a time is looked at once per byte, not
/// once per byte for every byte before it; limits still apply to a line
/// that never ends.
#[test]
fn a_dribbled_head_is_looked_at_once_per_byte() {
    let mut h = Harness::new();
    let mut head = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..20 {
        head.extend_from_slice(format!("X-Field-{i}: {}\r\n", "v".repeat(100)).as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    let (last, most) = head.split_last().unwrap();
    for byte in most {
        h.send(&[*byte]);
    }
    // The connection kept its scan's place: each byte was looked at by the scan alone (h1's own
    // test counts the work of a resumed scan).
    assert_eq!(h.conn.served(), 0);
    assert_eq!(h.conn.head_scan.seen(), most.len());
    h.send(&[*last]);
    assert_eq!(h.conn.served(), 1);
    assert_eq!(h.response().status, 200);

    // A request line that never ends still gets its 414 once it passes the limit.
    let mut h = Harness::new();
    h.send(b"GET /");
    for _ in 0..9 {
        h.send(&[b'a'; 1000]);
    }
    assert_eq!(h.response().status, 414);
}

thread_local! {
    /// The test clock's last reading, in nanoseconds.
    static TICKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A clock that moves a microsecond each time it is read.
fn ticking() -> u64 {
    TICKS.with(|t| {
        t.set(t.get() + 1_000);
        t.get()
    })
}

/// The phases of a request are measured by the clock the connection is
/// given, never one it reads: under a clock that moves exactly a
/// microsecond a reading, every phase is a whole number of microseconds,
/// and parsing — one reading before the parser, one after — exactly one.
#[test]
fn phases_are_timed_by_the_clock_given() {
    let access = Arc::new(AccessLog::open(LogTarget::Stdout).unwrap());
    let stats = Stats::new(true).with_clock(ticking);
    let p = Pipeline::new(Settings::default(), Site::embedded(FILES), access, Arc::new(ErrorLog::stderr()))
        .with_stats(stats);
    let peer = SocketAddr::from(([127, 0, 0, 1], 40000));
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p, Mode::Inline);
    conn.defer_log();
    let wire = MemoryWire::new();
    wire.arrive(GET);
    let before = TICKS.with(std::cell::Cell::get);
    assert!(matches!(conn.drive(&wire, &p, false), Want::Read(_)));
    assert_eq!(conn.served(), 1);
    let readings = (TICKS.with(std::cell::Cell::get) - before) / 1_000;
    let snap = p.stats.snapshot();
    assert_eq!(snap.phase(Phase::Parse).sum_ns, 1_000, "{snap:?}");
    let mut timed = 0;
    for phase in Phase::ALL {
        let sum = snap.phase(phase).sum_ns;
        assert_eq!(sum % 1_000, 0, "{phase:?}: {sum} ns is no whole number of readings");
        if phase != Phase::Total {
            timed += sum;
        }
    }
    // One request's phases follow each other: together, no more time than
    // the readings the connection took.
    assert!(timed > 0 && timed <= readings * 1_000, "{timed} ns in phases from {readings} readings");
}
