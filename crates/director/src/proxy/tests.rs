//! The loop driven one turn at a time over loopback sockets: accepting
//! (`accept.rs`), a client's exchange (`client.rs`, `exchange.rs`), backend
//! connections (`upstream.rs`) and timers (`tick.rs`). Nothing here waits
//! for a time to pass except a deadline the director itself keeps.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;

use super::*;
use crate::options::config_of;

struct Harness {
    director: Director,
    events: Events,
    /// A regression that stops the loop making progress fails the test
    /// here instead of hanging it (every wait below turns the loop).
    give_up: std::time::Instant,
}

/// Far beyond any deadline a test sets (the longest is 1 s): only a loop
/// that stopped making progress reaches it.
const GIVE_UP: std::time::Duration = std::time::Duration::from_secs(120);

/// What a client received: the bytes, and whether the connection ended.
struct Received {
    text: String,
    closed: bool,
}

impl Harness {
    fn new(args: &[&str]) -> Harness {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let shutdown = Shutdown::new().expect("a stop flag");
        let director = Director::new(config_of(args), listener, None, None, shutdown).expect("a director");
        Harness { director, events: Events::with_capacity(64), give_up: std::time::Instant::now() + GIVE_UP }
    }

    fn connect(&self) -> TcpStream {
        let listener = self.director.listener.as_ref().expect("listening");
        let client = TcpStream::connect(listener.local_addr().expect("an address")).expect("connect");
        client.set_nonblocking(true).expect("non-blocking");
        client
    }

    fn turn(&mut self) {
        assert!(std::time::Instant::now() < self.give_up, "the loop made no progress in {GIVE_UP:?}");
        self.director.turn(&mut self.events).expect("a turn of the loop");
    }

    /// Turns the loop until `client` has one whole response (by its
    /// `Content-Length`) or its connection ended.
    fn response(&mut self, client: &mut TcpStream) -> Received {
        self.receive(client, |got| response_end(got).is_some_and(|end| got.len() >= end))
    }

    /// Turns the loop until `client`'s connection ends.
    fn until_closed(&mut self, client: &mut TcpStream) -> Received {
        self.receive(client, |_| false)
    }

    fn receive(&mut self, client: &mut TcpStream, enough: impl Fn(&[u8]) -> bool) -> Received {
        let mut got = Vec::new();
        loop {
            self.turn();
            let mut buf = [0; 4096];
            loop {
                match client.read(&mut buf) {
                    Ok(0) => {
                        return Received { text: String::from_utf8_lossy(&got).into_owned(), closed: true }
                    }
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                        return Received { text: String::from_utf8_lossy(&got).into_owned(), closed: true }
                    }
                    Err(e) => panic!("reading the response: {e}"),
                }
            }
            if enough(&got) {
                return Received { text: String::from_utf8_lossy(&got).into_owned(), closed: false };
            }
        }
    }
}

/// Where a response with a `Content-Length` ends, once its head is in.
fn response_end(got: &[u8]) -> Option<usize> {
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    let length =
        head.lines().find_map(|l| l.strip_prefix("content-length:"))?.trim().parse::<usize>().ok()?;
    Some(head_end + length)
}

/// An address where nothing listens and nothing else can start to: a
/// socket bound to it, never listening, refuses every connection.
fn refusing_address() -> (socket2::Socket, SocketAddr) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    socket.bind(&any.into()).expect("bind");
    let addr = socket.local_addr().expect("its address").as_socket().expect("an IP address");
    (socket, addr)
}

#[test]
fn past_max_conns_a_connection_gets_the_503_page_and_is_closed() {
    let (_refusing, backend) = refusing_address();
    let mut h = Harness::new(&["--backend", &backend.to_string(), "--max-conns", "1"]);
    let _first = h.connect();
    let mut second = h.connect();
    let got = h.until_closed(&mut second);
    assert!(got.text.starts_with("HTTP/1.1 503 "), "{}", got.text);
    assert!(got.text.contains("Retry-After: "), "{}", got.text);
    assert!(got.text.ends_with("503 Service Unavailable: too many connections\n"), "{}", got.text);
    assert_eq!(h.director.clients.len(), 1, "the first connection stays");
    assert_eq!(h.director.stats.refused_total, 1);
}

#[test]
fn a_request_is_relayed_and_its_backend_connection_pooled() {
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let backend_addr = backend.local_addr().expect("an address");
    let server = thread::spawn(move || {
        let (mut conn, _) = backend.accept().expect("the director connects");
        let mut request = Vec::new();
        let mut buf = [0; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).expect("the request");
            assert!(n > 0, "the director closed before its request was whole");
            request.extend_from_slice(&buf[..n]);
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-App: yes\r\n\r\nhello").expect("answer");
        // Returned, not dropped: the pooled connection stays open.
        (String::from_utf8_lossy(&request).into_owned(), conn)
    });
    let mut h = Harness::new(&["--backend", &backend_addr.to_string(), "--backend-conns", "0"]);
    let mut client = h.connect();
    client.write_all(b"GET /page HTTP/1.1\r\nHost: site.test\r\n\r\n").expect("send");
    let got = h.response(&mut client);
    assert!(got.text.starts_with("HTTP/1.1 200 OK\r\n"), "{}", got.text);
    assert!(got.text.contains("X-App: yes\r\n") && got.text.ends_with("\r\n\r\nhello"), "{}", got.text);
    assert!(!got.closed, "keep-alive");

    let (forwarded, _conn) = server.join().expect("the backend thread");
    assert!(forwarded.starts_with("GET /page HTTP/1.1\r\n"), "{forwarded}");
    assert!(forwarded.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{forwarded}");
    let b = &h.director.backends[0];
    assert_eq!((b.inflight, b.served, b.idle.len()), (0, 1, 1), "released to the pool");
    let pooled = h.director.bconns.get(b.idle[0]).expect("the pooled connection");
    assert_eq!(pooled.link, Link::Reused);
    assert_eq!(h.director.stats.responses.get(&200), Some(&1));
}

/// Reads one request head from a backend's connection.
fn read_request_head(conn: &mut TcpStream) -> Option<String> {
    let mut request = Vec::new();
    let mut byte = [0; 1];
    while !request.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).expect("reading a request") == 0 {
            return None;
        }
        request.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&request).into_owned())
}

/// A backend that closes a pooled connection as a request arrives on it
/// (its idle timeout crossing the request): the request has no body, so
/// it goes again on a new connection, and the client never knows.
#[test]
fn a_request_lost_on_a_reused_connection_is_sent_again() {
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let backend_addr = backend.local_addr().expect("an address");
    let server = thread::spawn(move || {
        let (mut first, _) = backend.accept().expect("the first connection");
        assert!(read_request_head(&mut first).is_some_and(|r| r.starts_with("GET /one ")));
        first.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none").expect("answer");
        assert!(read_request_head(&mut first).is_some_and(|r| r.starts_with("GET /two ")));
        drop(first);
        let (mut second, _) = backend.accept().expect("the second connection");
        assert!(read_request_head(&mut second).is_some_and(|r| r.starts_with("GET /two ")));
        second.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo").expect("answer");
        second
    });
    let mut h = Harness::new(&["--backend", &backend_addr.to_string(), "--backend-conns", "0"]);
    let mut client = h.connect();
    client.write_all(b"GET /one HTTP/1.1\r\nHost: h\r\n\r\n").expect("send");
    assert!(h.response(&mut client).text.ends_with("\r\n\r\none"));
    client.write_all(b"GET /two HTTP/1.1\r\nHost: h\r\n\r\n").expect("send");
    let got = h.response(&mut client);
    assert!(got.text.starts_with("HTTP/1.1 200 OK\r\n") && got.text.ends_with("\r\n\r\ntwo"), "{}", got.text);
    let _second = server.join().expect("the backend thread");
    assert_eq!(h.director.stats.bad_gateway, 0);
    assert_eq!(h.director.backends[0].served, 2);
}

/// The same loss on a fresh connection is the backend's failure: 502.
#[test]
fn a_request_lost_on_a_fresh_connection_is_a_bad_gateway() {
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let backend_addr = backend.local_addr().expect("an address");
    let server = thread::spawn(move || {
        let (mut first, _) = backend.accept().expect("a connection");
        assert!(read_request_head(&mut first).is_some());
    });
    let mut h = Harness::new(&["--backend", &backend_addr.to_string(), "--backend-conns", "0"]);
    let mut client = h.connect();
    client.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").expect("send");
    let got = h.response(&mut client);
    server.join().expect("the backend thread");
    assert!(got.text.starts_with("HTTP/1.1 502 "), "{}", got.text);
    assert!(got.text.ends_with("backend closed before responding\n"), "{}", got.text);
    assert_eq!(h.director.stats.bad_gateway, 1);
}

#[test]
fn a_refused_backend_is_marked_down_and_the_client_gets_502() {
    let (_refusing, backend) = refusing_address();
    let mut h = Harness::new(&["--backend", &backend.to_string()]);
    let mut client = h.connect();
    client.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").expect("send");
    let got = h.response(&mut client);
    assert!(got.text.starts_with("HTTP/1.1 502 "), "{}", got.text);
    assert!(got.text.ends_with("no backend available\n"), "{}", got.text);
    let b = &h.director.backends[0];
    assert!(!b.up && b.down_reason == "connect failed" && b.inflight == 0);
}

#[test]
fn a_head_that_stops_coming_gets_408_and_the_close() {
    let (_refusing, backend) = refusing_address();
    // Long enough that the first bytes are read before it passes.
    let mut h = Harness::new(&["--backend", &backend.to_string(), "--header-timeout", "1s"]);
    let mut client = h.connect();
    client.write_all(b"GET / HT").expect("send");
    let got = h.until_closed(&mut client);
    assert!(got.text.starts_with("HTTP/1.1 408 "), "{}", got.text);
    assert!(got.text.contains("Connection: close\r\n"), "{}", got.text);
    assert!(got.text.ends_with("request head not received in time\n"), "{}", got.text);
    drop(client);
    while !h.director.clients.is_empty() {
        h.turn();
    }
}

#[test]
fn a_connection_that_sends_nothing_is_closed_quietly() {
    let (_refusing, backend) = refusing_address();
    let mut h = Harness::new(&["--backend", &backend.to_string(), "--header-timeout", "50ms"]);
    let mut client = h.connect();
    let got = h.until_closed(&mut client);
    assert_eq!(got.text, "", "no page for a connection that asked nothing");
    assert!(h.director.clients.is_empty());
}

/// An admin client's one deadline is in the timer set every peer shares:
/// one that asks nothing is closed when it passes, and no other peer's
/// deadline stands in for it.
#[test]
fn an_admin_client_that_asks_nothing_is_closed_at_its_deadline() {
    let (_refusing, backend) = refusing_address();
    let admin = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let admin_addr = admin.local_addr().expect("an address");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let shutdown = Shutdown::new().expect("a stop flag");
    let config = config_of(&["--backend", &backend.to_string()]);
    let director = Director::new(config, listener, None, Some(admin), shutdown).expect("a director");
    let mut h =
        Harness { director, events: Events::with_capacity(64), give_up: std::time::Instant::now() + GIVE_UP };
    let mut client = TcpStream::connect(admin_addr).expect("connect");
    client.set_nonblocking(true).expect("non-blocking");
    while h.director.admins.is_empty() {
        h.turn();
    }
    let got = h.until_closed(&mut client);
    assert_eq!(got.text, "", "nothing asked, nothing answered");
    assert!(h.director.admins.is_empty());
}

/// A client that reads nothing while its backend sends a large response:
/// what the kernel and `OUT_CAP` do not hold goes to the temp file, the
/// backend connection goes back to the pool once the response is read, and
/// the client still gets every byte, in order.
#[test]
fn a_response_its_client_does_not_read_frees_the_backend_through_the_temp_file() {
    // Past what loopback's socket buffers take (a few MiB) while the
    // client reads nothing.
    const SIZE: usize = 16 << 20;
    let body: Vec<u8> = (0..SIZE).map(|i| b'a' + (i % 26) as u8).collect();
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let backend_addr = backend.local_addr().expect("an address");
    let sent = body.clone();
    let server = thread::spawn(move || {
        let (mut conn, _) = backend.accept().expect("the director connects");
        assert!(read_request_head(&mut conn).is_some());
        conn.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n").as_bytes())
            .expect("head");
        conn.write_all(&sent).expect("body");
        conn
    });
    let mut h = Harness::new(&["--backend", &backend_addr.to_string(), "--backend-conns", "0"]);
    let mut client = h.connect();
    client.write_all(b"GET /large HTTP/1.1\r\nHost: h\r\n\r\n").expect("send");
    while h.director.backends[0].idle.is_empty() {
        h.turn();
    }
    let _conn = server.join().expect("the backend thread");
    assert_eq!(h.director.stats.buffered_to_file, 1, "the response went through its temp file");

    let mut got = Vec::new();
    let mut buf = vec![0; 1 << 16];
    let end = loop {
        h.turn();
        loop {
            match client.read(&mut buf) {
                Ok(0) => panic!("closed after {} bytes", got.len()),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading the response: {e}"),
            }
        }
        if let Some(end) = response_end(&got).filter(|&end| got.len() >= end) {
            break end;
        }
    };
    assert_eq!(end, got.len(), "nothing after the response");
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(got[end - SIZE..] == body[..], "every byte, in order");
}

/// A backend that takes the request and reads on without answering, until
/// the director closes the connection; returns the request head, if one
/// came before the close.
fn silent_backend() -> (SocketAddr, thread::JoinHandle<Option<String>>) {
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = backend.local_addr().expect("an address");
    let server = thread::spawn(move || {
        let (mut conn, _) = backend.accept().expect("the director connects");
        let head = read_request_head(&mut conn);
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
        head
    });
    (addr, server)
}

#[test]
fn a_backend_that_does_not_answer_in_time_gets_its_client_a_504() {
    let (backend, server) = silent_backend();
    let mut h = Harness::new(&[
        "--backend",
        &backend.to_string(),
        "--backend-conns",
        "0",
        "--backend-timeout",
        "100ms",
    ]);
    let mut client = h.connect();
    client.write_all(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n").expect("send");
    let got = h.response(&mut client);
    assert!(got.text.starts_with("HTTP/1.1 504 "), "{}", got.text);
    assert!(got.text.ends_with("backend did not respond in time\n"), "{}", got.text);
    server.join().expect("the backend thread");
    assert_eq!(h.director.stats.gateway_timeout, 1);
    assert_eq!(h.director.backends[0].inflight, 0, "the slot is free again");
}

/// A body too long to read before admission is streamed; a client that
/// stops sending it is at fault (408), not the backend reading it.
#[test]
fn a_streamed_body_that_stops_coming_gets_408_and_frees_the_backend() {
    let (backend, server) = silent_backend();
    let mut h = Harness::new(&[
        "--backend",
        &backend.to_string(),
        "--backend-conns",
        "0",
        "--max-buffered-request",
        "0",
        // Long enough for the backend connection to be made and the first
        // bytes to reach it before it passes: then the client is at fault.
        "--body-timeout",
        "1s",
    ]);
    let mut client = h.connect();
    client.write_all(b"PUT /up HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\nfirst").expect("send");
    let got = h.response(&mut client);
    assert!(got.text.starts_with("HTTP/1.1 408 "), "{}", got.text);
    assert!(got.text.ends_with("request body not received in time\n"), "{}", got.text);
    let head = server.join().expect("the backend thread");
    assert!(head.is_some_and(|h| h.starts_with("PUT /up ")));
    assert_eq!((h.director.stats.body_timeouts, h.director.stats.gateway_timeout), (1, 0));
    assert_eq!(h.director.backends[0].inflight, 0, "the slot is free again");
}
