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

use serde_json::Value;
use testkit::{assert_bytes_eq, get_once, pseudo_random_bytes, Client, Docroot, Server};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// The admin listener: `director/admin.rs`.
#[path = "director/admin.rs"]
mod admin;
/// Response buffering: `director/buffering.rs`.
#[path = "director/buffering.rs"]
mod buffering;
/// An early answer, no descriptors left: `director/edges.rs`.
#[path = "director/edges.rs"]
mod edges;
/// Backend health: `director/health.rs`.
#[path = "director/health.rs"]
mod health;
/// Request buffering: `director/intake.rs`.
#[path = "director/intake.rs"]
mod intake;
/// The monitor: `director/monitor.rs`.
#[path = "director/monitor.rs"]
mod monitor;

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
    /// Connections accepted.
    conns: AtomicUsize,
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
                s.conns.fetch_add(1, Ordering::SeqCst);
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

    /// Waits until the backend has read at least `n` bytes.
    #[track_caller]
    fn wait_bytes(&self, n: usize) {
        for _ in 0..1000 {
            if self.shared.bytes.load(Ordering::SeqCst) >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("backend read {} bytes, expected {n}", self.shared.bytes.load(Ordering::SeqCst));
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
        // A tunnel: refused before a backend (one answering 200 would hold its slot).
        ("CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n", 501),
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

/// The fields the director adds (X-Forwarded-For, X-Forwarded-Proto,
/// Forwarded, Via) count against the limit it holds clients to, which is a
/// modus backend's: a head the director admits is one its backend takes,
/// and one it cannot forward whole gets the director's own 431 saying why,
/// not the backend's. A client's forwarding fields are folded into the
/// director's, however many lines they came in.
#[test]
fn forwarded_heads_stay_within_the_backends_field_limit() {
    let root = Docroot::standard();
    let backend = Server::start(BIN, "pool", root.path(), &["--access-log", "off"]);
    let d = director(&[backend.addr()], &[]);
    // `n` fields: Host, then X-N fields.
    let head = |n: usize, extra: &str| {
        let fields: String = (1..n).map(|i| format!("X-{i}: v\r\n")).collect();
        format!("GET /hello.txt HTTP/1.1\r\nHost: h\r\n{extra}{fields}\r\n")
    };
    let mut c = d.client();
    c.send(head(96, ""));
    c.read_response("GET").assert_status(200);
    // 99 fields of the client's, three of them Via and X-Forwarded-For lines: the director's
    // fields take their place, so 100 go to the backend.
    c.send(head(96, "Via: 1.1 a\r\nX-Forwarded-For: 192.0.2.1\r\nVia: 1.0 b\r\n"));
    c.read_response("GET").assert_status(200);
    let mut c = d.client();
    c.send(head(97, ""));
    let r = c.read_response("GET");
    r.assert_status(431);
    assert!(
        r.body_str().contains("101 header fields, more than the 100 a backend takes"),
        "{}",
        r.describe()
    );
    assert!(c.is_closed());
    // The same head straight to the backend is taken: it is the director's fields that do not fit.
    let mut straight = backend.client();
    straight.send(head(97, ""));
    straight.read_response("GET").assert_status(200);
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

/// Issue 34 item 7: a close-delimited head at the backend field limit
/// (128) takes the director's `Transfer-Encoding` to 129; the director
/// answered with it, and a second director chained in front refused it
/// with a 502 of its own. Now the first director says 502 itself, and a
/// head one field under the limit passes through both.
#[test]
fn the_director_never_writes_a_response_head_it_would_refuse() {
    // `/close/N`: N fields, the body delimited by the backend's close.
    let backend = TestBackend::start(|head, _| {
        let path = head.split(' ').nth(1).unwrap_or("/");
        let n: usize = path.trim_start_matches("/close/").parse().unwrap_or(0);
        format!("HTTP/1.1 200 OK\r\n{}\r\nbody", "X: v\r\n".repeat(n)).into_bytes()
    });
    let inner = director(&[backend.addr], &[]);
    let outer = director(&[inner.addr()], &[]);
    // 127 fields + Transfer-Encoding = 128, the limit: through one director and through two.
    for d in [&inner, &outer] {
        let r = d.client().request("GET", "/close/127", &[]);
        assert_eq!((r.status, r.body_str().as_str()), (200, "body"), "{}", r.describe());
        assert_eq!(r.header("Transfer-Encoding"), Some("chunked"), "{}", r.describe());
        assert_eq!(r.headers.iter().filter(|(n, _)| n == "X").count(), 127, "{}", r.describe());
    }
    let r = inner.client().request("GET", "/close/128", &[]);
    assert_eq!(r.status, 502, "{}", r.describe());
    assert!(r.body_str().contains("129 fields, more than the 128"), "{}", r.describe());
    // Through the chain the client gets the inner director's 502 relayed, not a 502 the outer one
    // makes of a head the inner one should never have written.
    let r = outer.client().request("GET", "/close/128", &[]);
    assert_eq!(r.status, 502, "{}", r.describe());
    assert!(r.body_str().contains("129 fields, more than the 128"), "{}", r.describe());
    inner.client().request("GET", "/close/1", &[]).assert_status(200);
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

/// The order the backend saw the queued requests in, after `/slow` held
/// its only slot while `/big`, `/big` and `/small` queued (in that order),
/// with `/big` known to answer 100,000 bytes and `/small` 2.
fn queued_order(order: &str) -> Vec<String> {
    let backend = TestBackend::start(|head, _| {
        if head.starts_with("GET /big") {
            let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec();
            r.resize(r.len() + 100_000, b'x');
            r
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
        }
    });
    let d = director(
        &[backend.addr],
        &[
            "--max-backend-conns",
            "1",
            "--queue-timeout",
            "30s",
            "--queue-order",
            order,
            "--status-path",
            "/.director",
        ],
    );
    let mut c = d.client();
    for target in ["/big", "/small"] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"));
        c.read_response("GET").assert_status(200);
    }
    backend.close_gate();
    let mut slow = d.client();
    slow.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    backend.wait_requests(3);
    let mut queued = Vec::new();
    for (i, target) in ["/big", "/big", "/small"].iter().enumerate() {
        let mut q = d.client();
        q.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"));
        wait_status(&d, "the request queued", |s| s.contains(&format!("\nqueued: {}\n", i + 1)));
        queued.push(q);
    }
    backend.open_gate();
    slow.read_response("GET").assert_status(200);
    for q in &mut queued {
        q.read_response("GET").assert_status(200);
    }
    let lines: Vec<String> =
        backend.requests().iter().map(|r| r.lines().next().unwrap_or_default().to_string()).collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    lines[3..].to_vec()
}

/// `--queue-order srpt` (the default): the queued request whose target
/// answered the fewest bytes last time goes first, so small requests are not
/// stuck behind a flood of large downloads; `fifo` keeps arrival order.
#[test]
fn the_queue_serves_the_smallest_expected_answer_first() {
    assert_eq!(queued_order("srpt"), ["GET /small HTTP/1.1", "GET /big HTTP/1.1", "GET /big HTTP/1.1"]);
    assert_eq!(queued_order("fifo"), ["GET /big HTTP/1.1", "GET /big HTTP/1.1", "GET /small HTTP/1.1"]);
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
    // The error log says which backend and why, once (it is retried every
    // health interval).
    let refused = format!("backend {dead_addr} ({dead_addr}): cannot connect: connection refused");
    eventually("the refused connection in the log", || d.stderr().contains(&refused));
    let down = format!("backend {dead_addr} ({dead_addr}) is down: connect failed");
    eventually("the down line", || d.stderr().contains(&down));
    assert_eq!(d.stderr().matches(&refused).count(), 1, "{}", d.stderr());
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
    eventually("the down line", || d.stderr().contains(&format!("backend {addr} ({addr}) is down: ")));
    let _restarted = Server::start(BIN, "pool", root.path(), &["--listen", &addr.to_string()]);
    wait_status(&d, "the backend up again", |s| s.contains("health=up"));
    eventually("the up line", || {
        d.stderr().contains(&format!("backend {addr} ({addr}) is up: back in rotation"))
    });
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

// ----- the pool, bodies, Expect ------------------------------------------------

/// Polls `pred` (bounded); panics with `what` if it never holds.
#[track_caller]
fn eventually(what: &str, pred: impl Fn() -> bool) {
    for _ in 0..400 {
        if pred() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("never: {what}");
}

#[test]
fn pooled_connections_are_opened_ahead_and_reused() {
    let backend = TestBackend::ok();
    let d = director(&[backend.addr], &["--backend-conns", "3", "--max-backend-conns", "3"]);
    eventually("three connections opened before any request", || {
        backend.shared.conns.load(Ordering::SeqCst) == 3
    });
    assert!(backend.requests().is_empty());
    for _ in 0..10 {
        let mut c = d.client();
        for _ in 0..5 {
            c.request("GET", "/", &[]).assert_status(200);
        }
    }
    assert_eq!(backend.requests().len(), 50);
    let conns = backend.shared.conns.load(Ordering::SeqCst);
    assert!(conns <= 3, "50 requests over 10 client connections used {conns} backend connections");
}

#[test]
fn a_broken_pooled_connection_is_replaced() {
    // `/close`: the backend closes its end after answering, without saying
    // so, as a server whose keep-alive timeout ran out would.
    let backend = TestBackend::ok();
    let d = director(&[backend.addr], &["--backend-conns", "2", "--max-backend-conns", "2"]);
    eventually("the pool opened", || backend.shared.conns.load(Ordering::SeqCst) == 2);
    let mut c = d.client();
    for i in 0..20 {
        let r = c.request("GET", if i % 2 == 0 { "/close" } else { "/" }, &[]);
        assert_eq!(r.status, 200, "request {i}: {}", r.describe());
    }
    assert_eq!(backend.requests().len(), 20, "each request reached the backend once");
    // Each closed connection is replaced once the director sees it close.
    eventually("ten closed connections replaced", || backend.shared.conns.load(Ordering::SeqCst) >= 2 + 10);
}

fn echo_backend() -> TestBackend {
    TestBackend::start(|head, body| {
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n", body.len()).into_bytes();
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            r.extend_from_slice(b"X-Was-Chunked: 1\r\n");
        }
        r.extend_from_slice(b"\r\n");
        r.extend_from_slice(body);
        r
    })
}

#[test]
fn large_and_chunked_uploads_are_relayed() {
    let backend = echo_backend();
    let d = director(&[backend.addr], &["--backend-conns", "1"]);
    let mut c = d.client();
    let big = pseudo_random_bytes(300 << 10, 11);
    c.send(format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", big.len()));
    c.send(&big);
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_bytes_eq(&r.body, &big, "300 KiB Content-Length body echoed");

    // Chunked, in chunks of varied sizes, longer than the prebuffer.
    c.send("POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut at = 0;
    for (i, size) in [1usize, 10_000, 70_000, 3, 100_000].iter().cycle().enumerate() {
        if at >= big.len() {
            break;
        }
        let end = (at + size).min(big.len());
        c.send(format!("{:x}\r\n", end - at));
        c.send(&big[at..end]);
        c.send("\r\n");
        at = end;
        if i % 3 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    c.send("0\r\n\r\n");
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.header("X-Was-Chunked"), Some("1"));
    assert_bytes_eq(&dechunk(&r.body), &big, "300 KiB chunked body, re-chunked to the backend");
    // The connection is still good.
    c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.read_response("POST").body_str(), "hi");
}

#[test]
fn expect_100_continue() {
    let backend = echo_backend();
    let d = director(&[backend.addr], &["--backend-conns", "1"]);
    let mut c = d.client();
    c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    let interim = c.read_response("POST");
    assert_eq!(interim.status, 100, "{}", interim.describe());
    // Answered by the director, which pre-buffers the body: not a byte
    // went to the backend yet.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(backend.shared.bytes.load(Ordering::SeqCst), 0, "nothing forwarded before the body");
    c.send("hello");
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.body_str(), "hello");
    let reqs = backend.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        !reqs[0].to_ascii_lowercase().contains("expect:"),
        "Expect is handled by the director: {}",
        reqs[0]
    );
}

#[test]
fn an_expect_100_continue_client_that_never_sends_its_body_holds_no_backend_slot() {
    let backend = echo_backend();
    let d = director(&[backend.addr], &["--max-backend-conns", "1", "--queue", "0"]);
    let mut stalled = d.client();
    stalled.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    assert_eq!(stalled.read_response("POST").status, 100);
    let mut chunked = d.client();
    chunked
        .send("POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n");
    assert_eq!(chunked.read_response("POST").status, 100);
    // The only slot is free: with no queue, a held slot would mean a 503.
    for _ in 0..3 {
        let r = d.client().request("GET", "/", &[]);
        r.assert_status(200);
    }
    chunked.send("5\r\nhello\r\n0\r\n\r\n");
    let r = chunked.read_response("POST");
    r.assert_status(200);
    assert_eq!(dechunk(&r.body), b"hello");
    assert_eq!(backend.requests().len(), 4);
}

// ----- the adaptive concurrency limit -----------------------------------------------

/// `/status.json` from the admin listener.
fn admin_json(admin: SocketAddr) -> Value {
    let (status, ctype, body) = get_once(admin, "/status.json");
    assert_eq!(status, 200);
    assert_eq!(ctype, "application/json");
    serde_json::from_str(&body).expect("valid JSON")
}

/// Runs `clients` concurrent clients of `each` requests against a backend
/// that gets slower the more requests it has at once (3 ms each, as a CPU
/// shared by all of them would); returns the adaptive limit afterwards.
fn adaptive_limit_after_load(mode: &str) -> u64 {
    let active = Arc::new(AtomicUsize::new(0));
    let a = active.clone();
    let backend = TestBackend::start(move |_, _| {
        let n = a.fetch_add(1, Ordering::SeqCst) + 1;
        std::thread::sleep(Duration::from_millis(3 * n as u64));
        a.fetch_sub(1, Ordering::SeqCst);
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    });
    let d = director(
        &[backend.addr],
        &[
            "--adaptive",
            mode,
            "--max-backend-conns",
            "16",
            "--backend-conns",
            "16",
            "--queue-timeout",
            "30s",
            "--admin",
            "127.0.0.1:0",
        ],
    );
    let admin = d.announced("admin");
    // One at a time: the baseline.
    let mut c = d.client();
    for _ in 0..48 {
        c.request("GET", "/", &[]).assert_status(200);
    }
    let addr = d.addr();
    let threads: Vec<_> = (0..32)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..12 {
                    c.request("GET", "/", &[]).assert_status(200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let v = admin_json(admin);
    assert_eq!(v["requests_total"], 48 + 32 * 12, "{v:#}");
    v["backends"][0]["adaptive_limit"].as_u64().unwrap()
}

#[test]
fn the_adaptive_limit_drops_when_concurrency_slows_the_backend() {
    let limit = adaptive_limit_after_load("gradient");
    assert!(limit < 16, "gradient: the limit stayed at {limit}");
    let limit = adaptive_limit_after_load("aimd");
    assert!(limit < 16, "aimd: the limit stayed at {limit}");
    assert_eq!(adaptive_limit_after_load("off"), 16);
}
