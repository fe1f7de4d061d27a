//! `modus direct` and `modus monitor` (paper 002), black-box: the real
//! binary in front of a real `modus serve` or a tiny in-test backend that
//! records what reaches it. Loopback only; every wait is bounded; no
//! assertion depends on timing, only on outcomes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use testkit::{assert_bytes_eq, pseudo_random_bytes, Client, Docroot, Server};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

fn director(backends: &[SocketAddr], extra: &[&str]) -> Server {
    let mut b = Server::builder(BIN).subcommand("direct").no_defaults().args(["--listen", "127.0.0.1:0"]);
    for addr in backends {
        b = b.args(["--backend", &addr.to_string()]);
    }
    b.args(extra).start()
}

fn status(d: &Server) -> String {
    let mut c = d.client();
    c.request("GET", "/.director", &[]).assert_status(200).body_str()
}

/// Polls the status page (bounded) until `pred` holds; returns it.
#[track_caller]
fn wait_status(d: &Server, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        last = status(d);
        if pred(&last) {
            return last;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("status never showed {what}:\n{last}");
}

// ----- a tiny backend that records what reaches it -------------------------

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Vec<u8>>>,
    bytes: AtomicUsize,
    active: AtomicUsize,
    max_active: AtomicUsize,
    gate: (Mutex<bool>, Condvar),
}

/// Answers every request with `respond(head, body)`; while the gate is
/// closed, it holds requests whose head contains `/slow`.
struct TestBackend {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

type Responder = dyn Fn(&str, &[u8]) -> Vec<u8> + Send + Sync;

impl TestBackend {
    fn start(respond: impl Fn(&str, &[u8]) -> Vec<u8> + Send + Sync + 'static) -> TestBackend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        *shared.gate.0.lock().unwrap() = true;
        let respond: Arc<Responder> = Arc::new(respond);
        let s = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (s, respond) = (s.clone(), respond.clone());
                std::thread::spawn(move || serve_test_conn(stream, &s, &*respond));
            }
        });
        TestBackend { addr, shared }
    }

    fn ok() -> TestBackend {
        TestBackend::start(|_, _| b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec())
    }

    fn close_gate(&self) {
        *self.shared.gate.0.lock().unwrap() = false;
    }

    fn open_gate(&self) {
        *self.shared.gate.0.lock().unwrap() = true;
        self.shared.gate.1.notify_all();
    }

    fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().unwrap().iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect()
    }

    #[track_caller]
    fn wait_requests(&self, n: usize) {
        for _ in 0..400 {
            if self.shared.requests.lock().unwrap().len() >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("backend saw {} requests, expected {n}", self.requests().len());
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn serve_test_conn(mut stream: TcpStream, s: &Shared, respond: &Responder) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        // One request: head, then a Content-Length or chunked body.
        let (head_end, body_end) = loop {
            if let Some(h) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..h]).to_ascii_lowercase();
                let cl = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse::<usize>().unwrap());
                if let Some(cl) = cl {
                    if buf.len() >= h + 4 + cl {
                        break (h + 4, h + 4 + cl);
                    }
                } else if head.contains("transfer-encoding: chunked") {
                    if let Some(end) = find(&buf[h + 4..], b"0\r\n\r\n") {
                        break (h + 4, h + 4 + end + 5);
                    }
                } else {
                    break (h + 4, h + 4);
                }
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    s.bytes.fetch_add(n, Ordering::SeqCst);
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
        };
        let request: Vec<u8> = buf.drain(..body_end).collect();
        let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
        let active = s.active.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_active.fetch_max(active, Ordering::SeqCst);
        s.requests.lock().unwrap().push(request.clone());
        if head.contains("/slow") {
            let mut open = s.gate.0.lock().unwrap();
            while !*open {
                open = s.gate.1.wait(open).unwrap();
            }
        }
        let response = respond(&head, &request[head_end..]);
        s.active.fetch_sub(1, Ordering::SeqCst);
        if stream.write_all(&response).is_err() {
            return;
        }
        if head.contains("/close") {
            return;
        }
    }
}

/// Decodes a chunked body (test side, lenient).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = find(body, b"\r\n").expect("chunk size line");
        let size_text = String::from_utf8_lossy(&body[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

// ----- relay correctness against modus serve --------------------------------

#[test]
fn relays_a_modus_backend_faithfully() {
    let root = Docroot::standard();
    let big = pseudo_random_bytes(3 << 20, 7);
    root.file("big.bin", &big);
    let backend = Server::start(BIN, "pool", root.path(), &[]);
    let d = director(&[backend.addr()], &["--backend-conns", "2"]);

    let mut c = d.client();
    let r = c.request("GET", "/hello.txt", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), "Hello, world!\n");
    let etag = r.header_one("ETag").to_string();

    let r = c.request("HEAD", "/hello.txt", &[]);
    r.assert_status(200);
    assert_eq!(r.content_length(), Some(14));
    assert!(r.body.is_empty());

    let r = c.request("GET", "/alphabet.txt", &["Range: bytes=2-5"]);
    r.assert_status(206);
    assert_eq!(r.body_str(), "cdef");
    assert_eq!(r.header("Content-Range"), Some("bytes 2-5/26"));

    let r = c.request("GET", "/hello.txt", &[&format!("If-None-Match: {etag}")]);
    r.assert_status(304);
    assert!(r.body.is_empty());

    c.request("GET", "/missing.txt", &[]).assert_status(404);

    let r = c.request("GET", "/big.bin", &[]);
    r.assert_status(200);
    assert_bytes_eq(&r.body, &big, "3 MiB body through the director");

    // Pipelining: three requests in one write, answered in order.
    c.send(
        "GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /alphabet.txt HTTP/1.1\r\nHost: x\r\n\r\n\
         HEAD /dir/nested/deep.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(c.read_response("GET").body_str(), "Hello, world!\n");
    assert_eq!(c.read_response("GET").body_str(), "abcdefghijklmnopqrstuvwxyz");
    let r = c.read_response("HEAD");
    assert_eq!((r.status, r.content_length()), (200, Some(10)));
    // Still the same keep-alive connection.
    c.request("GET", "/hello.txt", &[]).assert_status(200);

    // HTTP/1.0 without keep-alive: answered, then closed.
    let mut old = d.client();
    old.send("GET /hello.txt HTTP/1.0\r\n\r\n");
    assert_eq!(old.read_response("GET").body_str(), "Hello, world!\n");
    assert!(old.is_closed());

    // Connection: close is honoured.
    let mut once = d.client();
    let r = once.request("GET", "/hello.txt", &["Connection: close"]);
    assert!(r.connection_has("close"), "{}", r.describe());
    assert!(once.is_closed());
}

// ----- L7 validation ---------------------------------------------------------

#[test]
fn malformed_and_slow_requests_never_reach_the_backend() {
    let backend = TestBackend::ok();
    let d = director(&[backend.addr], &["--backend-conns", "1", "--header-timeout", "300ms"]);
    let cases: &[(&str, u16)] = &[
        (
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
        ("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
        ("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n folded\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400),
        ("GET / HTTP/1.1\nHost: x\n\n", 400),
        ("GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        ("GET / HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n", 400),
    ];
    for &(raw, want) in cases {
        let mut c = d.client();
        c.send(raw);
        let r = c.read_response("GET");
        assert_eq!(r.status, want, "{raw:?}\n{}", r.describe());
        assert!(c.is_closed(), "{raw:?}: the connection must close after a framing error");
    }
    let mut long = d.client();
    long.send(format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000)));
    long.read_response("GET").assert_status(414);
    let mut chunked_bad = d.client();
    chunked_bad.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    chunked_bad.read_response("POST").assert_status(400);
    // Slowloris: a head that never ends gets 408 once the header deadline passes.
    let mut slow = d.client();
    slow.send("GET / HTTP/1.1\r\nHost: x\r\n");
    slow.read_response("GET").assert_status(408);
    // None of it reached the backend, not even one byte.
    assert_eq!(backend.shared.bytes.load(Ordering::SeqCst), 0, "{:?}", backend.requests());
    // The path to the backend works.
    d.client().request("GET", "/", &[]).assert_status(200);
    assert_eq!(backend.requests().len(), 1);
}

#[test]
fn requests_are_reserialised_with_forwarding_fields() {
    let backend = TestBackend::ok();
    let d = director(&[backend.addr], &["--backend-conns", "1"]);
    let mut c = d.client();
    c.send(
        "GET http://example.test/p?q=1 HTTP/1.1\r\nHost: ignored\r\nConnection: keep-alive, X-Secret\r\n\
         X-Secret: 1\r\nKeep-Alive: timeout=9\r\nTE: trailers\r\nUpgrade: websocket\r\nProxy-Authorization: pw\r\n\
         X-Forwarded-For: 203.0.113.9\r\nAccept: */*\r\n\r\n",
    );
    c.read_response("GET").assert_status(200);
    c.send("POST /cl HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello");
    c.read_response("POST").assert_status(200);
    c.send("POST /chunked HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n");
    c.read_response("POST").assert_status(200);
    let reqs = backend.requests();
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    let get = &reqs[0];
    assert!(get.starts_with("GET /p?q=1 HTTP/1.1\r\nHost: example.test\r\n"), "{get}");
    for hop in ["X-Secret", "Keep-Alive", "TE:", "Upgrade", "Proxy-Authorization", "Connection"] {
        assert!(!get.contains(hop), "{hop} was forwarded:\n{get}");
    }
    assert!(get.contains("\r\nAccept: */*\r\n"), "{get}");
    assert!(get.contains("\r\nX-Forwarded-For: 203.0.113.9, 127.0.0.1\r\n"), "{get}");
    assert!(get.contains("\r\nForwarded: for=127.0.0.1;proto=http;host=\"example.test\"\r\n"), "{get}");
    assert!(reqs[1].ends_with("Content-Length: 5\r\n\r\nhello"), "{}", reqs[1]);
    let chunked = reqs[2].as_bytes();
    let body_at = find(chunked, b"\r\n\r\n").unwrap() + 4;
    assert!(reqs[2].contains("Transfer-Encoding: chunked\r\n"), "{}", reqs[2]);
    assert_eq!(dechunk(&chunked[body_at..]), b"hello world");
    assert!(!reqs[2].contains("ext=1") && !reqs[2].contains("X-T"), "re-encoded, not copied: {}", reqs[2]);
}

// ----- response validation and re-framing -----------------------------------

fn shaped_backend() -> TestBackend {
    TestBackend::start(|head, _| {
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let r: &[u8] = match path.as_str() {
            "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
            "/close" => b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
            "/cl-te" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "/two-cl" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            "/bad-status" => b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
            "/bare-lf" => b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
            "/interim" => b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            "/hop" => b"HTTP/1.1 200 OK\r\nConnection: X-Internal\r\nX-Internal: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok",
            _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        };
        r.to_vec()
    })
}

#[test]
fn responses_are_validated_and_reframed() {
    let backend = shaped_backend();
    let d = director(&[backend.addr], &["--backend-conns", "1"]);
    let mut c = d.client();
    let r = c.request("GET", "/chunked", &[]);
    r.assert_status(200);
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
    assert_eq!(r.body_str(), "hello world");
    let r = c.request("GET", "/interim", &[]);
    assert_eq!((r.status, r.body_str().as_str()), (200, "ok"));
    let r = c.request("GET", "/hop", &[]);
    assert!(r.header("X-Internal").is_none() && r.header("Keep-Alive").is_none(), "{}", r.describe());
    // A close-delimited backend body is re-chunked: the client keeps its connection.
    let r = c.request("GET", "/close", &[]);
    assert_eq!((r.status, r.body_str().as_str()), (200, "until the end"));
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"), "{}", r.describe());
    c.request("GET", "/", &[]).assert_status(200);

    // An HTTP/1.0 client gets the chunked body de-chunked, close-delimited.
    let mut old = d.client();
    old.send("GET /chunked HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = old.read_response("GET");
    assert_eq!((r.status, r.body_str().as_str()), (200, "hello world"));
    assert!(r.header("Transfer-Encoding").is_none(), "{}", r.describe());

    for path in ["/cl-te", "/two-cl", "/bad-status", "/bare-lf"] {
        let r = d.client().request("GET", path, &[]);
        assert_eq!(r.status, 502, "{path}: {}", r.describe());
    }
    // The director still serves afterwards.
    d.client().request("GET", "/", &[]).assert_status(200);
}

// ----- admission control ------------------------------------------------------

#[test]
fn excess_requests_queue_then_get_the_busy_page() {
    let backend = TestBackend::ok();
    backend.close_gate();
    let busy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(busy.path(), "<p>come back later</p>").unwrap();
    let d = director(
        &[backend.addr],
        &[
            "--max-backend-conns",
            "2",
            "--backend-conns",
            "2",
            "--queue-timeout",
            "1s",
            "--retry-after",
            "7",
            "--status-path",
            "/.director",
            "--busy-page",
            busy.path().to_str().unwrap(),
        ],
    );
    let mut held: Vec<Client> = Vec::new();
    for i in 0..2 {
        let mut c = d.client();
        c.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
        backend.wait_requests(i + 1);
        held.push(c);
    }
    let mut queued: Vec<Client> = Vec::new();
    for _ in 0..3 {
        let mut c = d.client();
        c.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
        queued.push(c);
    }
    let st = wait_status(&d, "three queued requests", |s| s.contains("\nqueued: 3\n"));
    // Three parked, plus the status request itself, decided in PEEK.
    assert!(st.contains("state PEEK: 4") && st.contains("state RECEIVE: 2"), "{st}");
    assert!(st.contains("inflight=2 limit=2"), "{st}");
    for c in &mut queued {
        let r = c.read_response("GET");
        r.assert_status(503);
        assert_eq!(r.header("Retry-After"), Some("7"));
        assert_eq!(r.body_str(), "<p>come back later</p>");
        // No body was pending, so the connection may stay open.
        assert!(!r.connection_has("close"), "{}", r.describe());
    }
    backend.open_gate();
    for c in &mut held {
        let r = c.read_response("GET");
        assert_eq!((r.status, r.body_str().as_str()), (200, "ok"));
    }
    assert_eq!(backend.shared.max_active.load(Ordering::SeqCst), 2, "never more than --max-backend-conns");
    assert_eq!(backend.requests().len(), 2, "the refused requests never reached the backend");
    let st = status(&d);
    assert!(st.contains("busy_pages: 3"), "{st}");
}

#[test]
fn a_queued_request_gets_the_next_free_slot() {
    let backend = TestBackend::ok();
    backend.close_gate();
    let d = director(
        &[backend.addr],
        &["--max-backend-conns", "1", "--queue-timeout", "30s", "--status-path", "/.director"],
    );
    let mut first = d.client();
    first.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    backend.wait_requests(1);
    let mut second = d.client();
    second.send("GET /slow/2 HTTP/1.1\r\nHost: x\r\n\r\n");
    wait_status(&d, "one queued request", |s| s.contains("\nqueued: 1\n"));
    assert_eq!(backend.requests().len(), 1);
    backend.open_gate();
    first.read_response("GET").assert_status(200);
    second.read_response("GET").assert_status(200);
    assert_eq!(backend.shared.max_active.load(Ordering::SeqCst), 1);
}

#[test]
fn per_ip_connection_cap() {
    let backend = TestBackend::ok();
    let d = director(&[backend.addr], &["--max-conns-per-ip", "2"]);
    let mut a = d.client();
    let mut b = d.client();
    a.request("GET", "/", &[]).assert_status(200);
    b.request("GET", "/", &[]).assert_status(200);
    let mut third = d.client();
    let r = third.read_response("GET");
    r.assert_status(429);
    drop(a);
    // The slot comes back once a connection closes (bounded retries).
    let ok = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        let mut c = d.client();
        c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        c.try_read_response("GET").is_ok_and(|r| r.status == 200)
    });
    assert!(ok);
}

// ----- several backends, health -----------------------------------------------

#[test]
fn least_outstanding_balancing_and_a_dead_backend() {
    let one = TestBackend::ok();
    let two = TestBackend::ok();
    one.close_gate();
    two.close_gate();
    let d = director(&[one.addr, two.addr], &["--backend-conns", "1"]);
    let mut a = d.client();
    a.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut b = d.client();
    b.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    one.wait_requests(1);
    two.wait_requests(1);
    one.open_gate();
    two.open_gate();
    a.read_response("GET").assert_status(200);
    b.read_response("GET").assert_status(200);

    // A backend nobody listens on: taken out on its first refused
    // connection; every request is still answered by the other.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let d = director(&[dead_addr, one.addr], &["--status-path", "/.director"]);
    for _ in 0..10 {
        d.client().request("GET", "/", &[]).assert_status(200);
    }
    let st =
        wait_status(&d, "the dead backend down", |s| s.contains(&format!("backend {dead_addr} health=down")));
    assert!(st.contains(&format!("backend {} health=up", one.addr)), "{st}");
}

#[test]
fn backend_killed_then_restarted() {
    let root = Docroot::standard();
    let backend = Server::start(BIN, "pool", root.path(), &[]);
    let addr = backend.addr();
    let d = director(&[addr], &["--health-interval", "100ms", "--status-path", "/.director"]);
    d.client().request("GET", "/hello.txt", &[]).assert_status(200);
    drop(backend);
    // Every request is answered, quickly with 502/503 once the backend is
    // gone — never a hang or a dropped connection.
    let mut refused = false;
    for _ in 0..100 {
        let r = d.client().request("GET", "/hello.txt", &[]);
        assert!(matches!(r.status, 200 | 502 | 503), "{}", r.describe());
        if r.status != 200 {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(refused, "the director kept answering 200 with its backend dead");
    wait_status(&d, "the backend down", |s| s.contains("health=down"));
    let _restarted = Server::start(BIN, "pool", root.path(), &["--listen", &addr.to_string()]);
    wait_status(&d, "the backend up again", |s| s.contains("health=up"));
    let mut recovered = false;
    for _ in 0..100 {
        if d.client().request("GET", "/hello.txt", &[]).status == 200 {
            recovered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(recovered);
}

// ----- the monitor ------------------------------------------------------------

/// A fake /proc with a static /proc/stat and loadavg, and `syn` half-open
/// sockets in net/tcp (files replaced atomically).
fn fake_proc(dir: &Path, syn: usize) {
    std::fs::create_dir_all(dir.join("net")).unwrap();
    let write = |rel: &str, text: String| {
        let tmp = dir.join(format!("{rel}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(rel)).unwrap();
    };
    write(
        "stat",
        "cpu  10 0 10 1000 0 0 0 0 0 0\ncpu0 10 0 10 1000 0 0 0 0 0 0\nctxt 100\nprocs_running 1\n".into(),
    );
    write("loadavg", "0.10 0.10 0.10 1/100 200\n".into());
    let mut tcp = String::from("  sl  local_address rem_address   st tx_queue rx_queue\n");
    for i in 0..syn {
        tcp.push_str(&format!("{i}: 0100007F:1F90 0100007F:{:04X} 03 00000000:00000000\n", 1000 + i));
    }
    tcp.push_str("99: 0100007F:1F90 00000000:0000 0A 00000000:00000000\n");
    write("net/tcp", tcp);
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_monitor(director: SocketAddr, proc_root: &Path, backend: &str) -> Killed {
    let child = Command::new(BIN)
        .args(["monitor", "--director", &director.to_string(), "--interval", "40ms", "--backend", backend])
        .args(["--enter", "2", "--leave", "3", "--syn-high", "50", "--syn-low", "5", "--proc-root"])
        .arg(proc_root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Killed(child)
}

#[test]
fn monitor_reports_with_hysteresis() {
    let proc_dir = tempfile::tempdir().unwrap();
    fake_proc(proc_dir.path(), 0);
    let fake_director = TcpListener::bind("127.0.0.1:0").unwrap();
    let _monitor = spawn_monitor(fake_director.local_addr().unwrap(), proc_dir.path(), "127.0.0.1:9");
    let (conn, _) = fake_director.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut lines = BufReader::new(conn).lines().map(|l| l.expect("a report line"));
    let hello = lines.next().unwrap();
    assert_eq!(hello, "MODUS-MONITOR 1 interval_ms=40 backend=127.0.0.1:9");
    let mut next_with = |syn: usize| -> String {
        let want = format!("synrecv={syn}");
        (0..500).map(|_| lines.next().unwrap()).find(|l| l.ends_with(&want)).expect("a matching report")
    };
    assert!(next_with(0).starts_with("S ") && next_with(0).contains(" OK "));
    // Hot: the first hot sample does not flip the verdict, the second does.
    fake_proc(proc_dir.path(), 80);
    assert!(next_with(80).contains(" OK "), "one hot sample is not enough");
    assert!(next_with(80).contains(" OVER "));
    // Between the marks: the verdict holds.
    fake_proc(proc_dir.path(), 20);
    assert!(next_with(20).contains(" OVER "));
    assert!(next_with(20).contains(" OVER "));
    // Cool: three cool samples in a row to return to OK.
    fake_proc(proc_dir.path(), 0);
    assert!(next_with(0).contains(" OVER "));
    assert!(next_with(0).contains(" OVER "));
    assert!(next_with(0).contains(" OK "));
}

fn monitor_addr(d: &Server) -> SocketAddr {
    let word =
        d.first_line().split(' ').find_map(|w| w.strip_prefix("monitor=")).expect("monitor= in first line");
    word.parse().unwrap()
}

#[test]
fn an_overloaded_backend_is_paused_and_a_silent_monitor_is_unknown() {
    let backend = TestBackend::ok();
    let d = director(
        &[backend.addr],
        &[
            "--monitor-listen",
            "127.0.0.1:0",
            "--queue-timeout",
            "200ms",
            "--max-backend-conns",
            "4",
            "--status-path",
            "/.director",
        ],
    );
    // No monitor yet: unknown, half the limit — not "healthy".
    let st = status(&d);
    assert!(st.contains("monitor=unknown inflight=0 limit=2"), "{st}");
    let mut m = TcpStream::connect(monitor_addr(&d)).unwrap();
    m.write_all(
        format!("MODUS-MONITOR 1 interval_ms=5000 backend={}\nS 1 OVER cpu=0.99\n", backend.addr).as_bytes(),
    )
    .unwrap();
    wait_status(&d, "overloaded", |s| s.contains("monitor=overloaded"));
    let r = d.client().request("GET", "/", &[]);
    r.assert_status(503);
    assert_eq!(backend.requests().len(), 0, "nothing is admitted to an overloaded backend");
    m.write_all(b"S 2 OK cpu=0.20\n").unwrap();
    wait_status(&d, "serviceable", |s| s.contains("monitor=ok inflight=0 limit=4"));
    d.client().request("GET", "/", &[]).assert_status(200);
    drop(m);
    wait_status(&d, "unknown after the monitor left", |s| s.contains("monitor=unknown"));
    d.client().request("GET", "/", &[]).assert_status(200);

    // End to end: the real monitor on a hot fake /proc pauses admission.
    let proc_dir = tempfile::tempdir().unwrap();
    fake_proc(proc_dir.path(), 200);
    let _monitor = spawn_monitor(monitor_addr(&d), proc_dir.path(), &backend.addr.to_string());
    let st = wait_status(&d, "overloaded from modus monitor", |s| s.contains("monitor=overloaded"));
    assert!(st.contains("synrecv=200"), "{st}");
    d.client().request("GET", "/", &[]).assert_status(503);
    fake_proc(proc_dir.path(), 0);
    wait_status(&d, "ok from modus monitor", |s| s.contains("monitor=ok"));
    d.client().request("GET", "/", &[]).assert_status(200);
}

#[test]
fn sigterm_stops_the_director_cleanly() {
    let backend = TestBackend::ok();
    let mut d = director(&[backend.addr], &[]);
    let mut idle = d.client();
    idle.request("GET", "/", &[]).assert_status(200);
    d.signal(testkit::Signal::Term);
    assert!(d.wait_exit(Duration::from_secs(10)).success(), "{}", d.stderr());
    assert!(idle.is_closed(), "idle keep-alive connections are closed at stop");
}

#[test]
fn bad_options_exit_with_status_2() {
    let out = testkit::run(BIN, ["direct", "--listen", "127.0.0.1:0"], Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "--backend is required: {}", out.stderr);
    let args =
        ["direct", "--listen", "127.0.0.1:0", "--backend", "127.0.0.1:1", "--busy-page", "/nonexistent/busy"];
    let out = testkit::run(BIN, args, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--busy-page"), "{}", out.stderr);
}
