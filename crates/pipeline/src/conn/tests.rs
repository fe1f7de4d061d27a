use super::*;
use crate::accesslog::LogTarget;
use crate::stats::TRACE_HEADER;
use crate::{AccessLog, EmbeddedFile, ErrorLog, Settings, Site};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

/// An idle keep-alive connection of the event models is this struct and
/// little else (`bench/models.sh idle`: PSS per idle connection, target
/// 0.5 KiB with the loop's own bookkeeping), so growing it is a decision.
#[test]
fn a_connection_stays_small() {
    let size = std::mem::size_of::<Connection>();
    assert!(size <= 400, "Connection is {size} bytes");
    assert_eq!(std::mem::size_of::<Mark>(), 8);
}

#[test]
fn deferred_log_records_go_to_the_caller() {
    static FILES: &[EmbeddedFile] = &[EmbeddedFile { path: "/a.txt", bytes: b"hello" }];
    let access = Arc::new(AccessLog::open(LogTarget::Stdout).unwrap());
    let p = Pipeline::new(Settings::default(), Site::embedded(FILES), access, Arc::new(ErrorLog::stderr()));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, peer) = listener.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
    conn.defer_log();
    client.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut records = Vec::new();
    for _ in 0..100 {
        assert!(matches!(conn.drive(&server, &p, false), Want::Read(_)));
        records.extend(conn.take_log());
        if records.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let got: Vec<_> = records.iter().map(|r| (r.status, r.body_bytes)).collect();
    assert_eq!(got[0], (200, 5));
    assert_eq!(got[1].0, 404);
    assert_eq!(records[0].request_line.as_deref(), Some("GET /a.txt HTTP/1.1"));
    assert!(conn.take_log().next().is_none(), "taken records are gone");
}

static FILE: &[EmbeddedFile] = &[EmbeddedFile { path: "/a.txt", bytes: b"hello" }];
const GET: &[u8] = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";

/// A client and the server's non-blocking end of its connection.
fn connected() -> (TcpStream, TcpStream, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, peer) = listener.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    (client, server, peer)
}

/// Drives until `served` responses are out; the deadline it then waits for.
fn drive_until_served(
    conn: &mut Connection,
    sock: &TcpStream,
    p: &Pipeline,
    served: u32,
    now: Option<Instant>,
) -> Instant {
    for _ in 0..100 {
        if let Some(now) = now {
            conn.set_now(now);
        }
        match conn.drive(sock, p, false) {
            Want::Read(deadline) if conn.served() == served => return deadline,
            Want::Read(_) => std::thread::sleep(Duration::from_millis(10)),
            other => panic!("{other:?}"),
        }
    }
    panic!("no response");
}

#[test]
fn deadlines_count_from_the_callers_reading_for_one_drive() {
    let access = Arc::new(AccessLog::off());
    let p = Pipeline::new(Settings::default(), Site::embedded(FILE), access, Arc::new(ErrorLog::stderr()))
        .with_stats(Stats::new(false));
    let (mut client, server, peer) = connected();
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
    // A reading the connection cannot have taken itself.
    let lent = Instant::now() + Duration::from_secs(3600);
    client.write_all(GET).unwrap();
    let idle = drive_until_served(&mut conn, &server, &p, 1, Some(lent));
    assert_eq!(idle, lent + p.settings.keepalive_timeout);
    // Not lent again: the connection reads the clock.
    client.write_all(GET).unwrap();
    let idle = drive_until_served(&mut conn, &server, &p, 2, None);
    assert!(idle <= Instant::now() + p.settings.keepalive_timeout, "{idle:?}");
}

#[test]
fn phases_follow_each_other_without_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let (log, trace) = (dir.path().join("access.log"), dir.path().join("trace.csv"));
    let access = Arc::new(AccessLog::open(LogTarget::File(log)).unwrap());
    let stats = Stats::new(true).with_trace(&trace, 1.0).unwrap();
    let p = Pipeline::new(Settings::default(), Site::embedded(FILE), access, Arc::new(ErrorLog::stderr()))
        .with_stats(stats);
    let (mut client, server, peer) = connected();
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
    // The second request is pipelined: it starts when the first ends.
    client.write_all(&[GET, GET].concat()).unwrap();
    let idle = drive_until_served(&mut conn, &server, &p, 2, None);
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

thread_local! {
    /// Heads parsed to a `Partial` on this thread (see `head_parsed`).
    pub(super) static PARTIAL_PARSES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A head that arrives a byte at a time is parsed once per line, not once
/// per byte; limits still apply to a line that never ends.
#[test]
fn a_dribbled_head_is_parsed_once_per_line() {
    let access = Arc::new(AccessLog::open(LogTarget::Off).unwrap());
    let p = Pipeline::new(Settings::default(), Site::embedded(FILE), access, Arc::new(ErrorLog::stderr()));
    let (mut client, server, peer) = connected();
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
    let mut head = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..20 {
        head.extend_from_slice(format!("X-Field-{i}: {}\r\n", "v".repeat(100)).as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    let lines = head.iter().filter(|&&b| b == b'\n').count() as u32;
    PARTIAL_PARSES.with(|n| n.set(0));
    for (i, byte) in head.iter().enumerate() {
        client.write_all(&[*byte]).unwrap();
        // Each byte on its own read: wait until the server sees it.
        for _ in 0..1000 {
            let _ = conn.drive(&server, &p, false);
            if conn.served() == 1 || conn.end - conn.start > i {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    drive_until_served(&mut conn, &server, &p, 1, None);
    let partial = PARTIAL_PARSES.with(|n| n.get());
    assert!(partial <= lines + 1, "{partial} partial parses for {} bytes in {lines} lines", head.len());
    assert!(partial >= 2, "the head arrived in pieces: {partial}");
    let mut response = [0u8; 12];
    client.read_exact(&mut response).unwrap();
    assert_eq!(&response, b"HTTP/1.1 200");

    // A request line that never ends still gets its 414 once it passes the limit.
    let (mut client, server, peer) = connected();
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p);
    client.write_all(b"GET /").unwrap();
    let _ = conn.drive(&server, &p, false);
    client.write_all(&vec![b'a'; 9000]).unwrap();
    // Drive until the 414 is written (the head never completes: only the limit decides).
    for _ in 0..200 {
        if conn.drive(&server, &p, false) == Want::Close {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut response = [0u8; 12];
    client.read_exact(&mut response).unwrap();
    assert_eq!(&response, b"HTTP/1.1 414");
}
