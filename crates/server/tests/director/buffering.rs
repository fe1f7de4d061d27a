//! Response buffering (`--max-buffered-response`): a client that does not
//! read holds no backend connection. Each response here is larger than
//! any loopback socket buffers can hold (16 MiB; the send buffer tops at
//! 4 MiB, a receiver that never reads keeps its initial window), so a
//! director relaying at the client's pace cannot have finished it.

use super::*;
use std::time::Instant;

const BIG: usize = 16 << 20;

/// The three framings a backend may send a body in: `/big-length`,
/// `/big-chunked`, `/close-big` (to the close: the test backend closes
/// after a head containing `/close`); anything else gets `ok`.
fn big_backend() -> (TestBackend, Arc<Vec<u8>>) {
    let body = Arc::new(pseudo_random_bytes(BIG, 16));
    let b = body.clone();
    let backend = TestBackend::start(move |head, _| {
        let path = head.split(' ').nth(1).unwrap_or("");
        let mut out = Vec::with_capacity(BIG + 4096);
        match path {
            "/big-length" => {
                out.extend_from_slice(format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").as_bytes());
                out.extend_from_slice(&b);
            }
            "/big-chunked" => {
                out.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
                for chunk in b.chunks(100_000) {
                    out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    out.extend_from_slice(chunk);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
            "/close-big" => {
                out.extend_from_slice(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                out.extend_from_slice(&b);
            }
            _ => out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        }
        out
    });
    (backend, body)
}

const BIG_PATHS: [&str; 3] = ["/big-length", "/big-chunked", "/close-big"];

/// Sends `GET path` and reads nothing.
fn unread_request(d: &Server, path: &str) -> Client {
    let mut c = d.client();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"));
    c
}

fn small_request(d: &Server) -> u16 {
    let mut c = d.client();
    c.send("GET /small HTTP/1.1\r\nHost: x\r\n\r\n");
    c.read_response("GET").status
}

#[track_caller]
fn read_whole(c: &mut Client, want: &[u8], what: &str) {
    let r = c.read_response("GET");
    r.assert_status(200);
    assert_bytes_eq(&r.body, want, what);
}

/// With one backend slot, a client that does not read its 16 MiB answer
/// lets the next request through (the backend connection was freed once
/// the backend had sent it all), then gets every byte of it — for each of
/// the backend's framings.
#[test]
fn a_client_that_does_not_read_holds_no_backend_connection() {
    let (backend, body) = big_backend();
    // Only the freed slot can serve the second request: the queue would
    // wait longer than the client's read timeout.
    let d = director(
        &[backend.addr],
        &[
            "--max-backend-conns",
            "1",
            "--backend-conns",
            "1",
            "--queue-timeout",
            "30s",
            "--admin",
            "127.0.0.1:0",
        ],
    );
    for path in BIG_PATHS {
        let mut slow = unread_request(&d, path);
        assert_eq!(small_request(&d), 200, "{path}: the next request was not served");
        if path != "/close-big" {
            // Back to the pool, not closed: one connection carried them all.
            assert_eq!(backend.shared.conns.load(Ordering::SeqCst), 1, "{path}");
        }
        read_whole(&mut slow, &body, path);
    }
    let admin = d.announced("admin");
    assert_eq!(admin_json(admin)["responses_buffered_to_file"], 3);
    let (_, _, metrics) = get_once(admin, "/metrics");
    assert!(metrics.lines().any(|l| l == "modus_director_responses_buffered_to_file_total 3"), "{metrics}");
}

/// `--max-buffered-response 0` relays at the client's pace, as before:
/// the backend slot stays taken while the client does not read.
#[test]
fn no_buffering_keeps_the_backend_until_the_client_reads() {
    let (backend, body) = big_backend();
    let d = director(
        &[backend.addr],
        &[
            "--max-backend-conns",
            "1",
            "--queue-timeout",
            "300ms",
            "--max-buffered-response",
            "0",
            "--admin",
            "127.0.0.1:0",
        ],
    );
    let mut slow = unread_request(&d, "/big-length");
    assert_eq!(small_request(&d), 503, "the slot should still be held by the unread response");
    read_whole(&mut slow, &body, "unbuffered body");
    assert_eq!(small_request(&d), 200);
    assert_eq!(admin_json(d.announced("admin"))["responses_buffered_to_file"], 0);
}

/// A response larger than `--max-buffered-response` goes on at the
/// client's pace once the file is full (the slot stays taken meanwhile)
/// and still arrives whole.
#[test]
fn a_response_past_the_maximum_arrives_whole() {
    let (backend, body) = big_backend();
    let d = director(
        &[backend.addr],
        &["--max-backend-conns", "1", "--queue-timeout", "300ms", "--max-buffered-response", "1MiB"],
    );
    for path in BIG_PATHS {
        let mut slow = unread_request(&d, path);
        assert_eq!(small_request(&d), 503, "{path}: 15 MiB past the maximum cannot have been read");
        read_whole(&mut slow, &body, path);
        assert_eq!(small_request(&d), 200, "{path}: the slot is free again");
    }
}

/// No temp file can be made (`$TMPDIR` does not exist): the error log says
/// so, and the response goes at the client's pace, whole.
#[test]
fn without_a_temp_file_the_response_is_streamed_and_the_log_says_why() {
    let (backend, body) = big_backend();
    let missing = std::env::temp_dir().join("modus-test-no-such-dir");
    let d = Server::builder(BIN)
        .subcommand("direct")
        .no_defaults()
        .env("TMPDIR", &missing)
        .args(["--listen", "127.0.0.1:0", "--backend", &backend.addr.to_string()])
        .args(["--max-backend-conns", "1", "--queue-timeout", "300ms", "--admin", "127.0.0.1:0"])
        .start();
    let mut slow = unread_request(&d, "/big-length");
    eventually("the error log line", || d.stderr().contains("cannot create a temp file in"));
    assert!(d.stderr().contains(&missing.display().to_string()), "{}", d.stderr());
    assert_eq!(small_request(&d), 503, "streamed: the slot is still held");
    read_whole(&mut slow, &body, "streamed body");
    assert_eq!(admin_json(d.announced("admin"))["responses_buffered_to_file"], 0);
}

/// More responses going to temp files at once than one turn of the loop
/// copies (each turn writes at most 1 MiB in all, 256 KiB per response):
/// the ones left out of a turn go first in the next, so every one is read
/// from its backend in full and every client gets every byte, in order;
/// a small request meanwhile is served.
#[test]
fn many_responses_copied_to_temp_files_at_once_all_finish() {
    let (backend, body) = big_backend();
    let d = director(
        &[backend.addr],
        &["--max-backend-conns", "16", "--queue-timeout", "30s", "--admin", "127.0.0.1:0"],
    );
    let mut slow: Vec<(Client, &str)> =
        (0..9).map(|i| BIG_PATHS[i % 3]).map(|path| (unread_request(&d, path), path)).collect();
    assert_eq!(small_request(&d), 200);
    // No client reads yet, so each answer, larger than the sockets hold,
    // goes to a file of its own.
    let admin = d.announced("admin");
    let deadline = Instant::now() + Duration::from_secs(20);
    while admin_json(admin)["responses_buffered_to_file"] != 9 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admin_json(admin)["responses_buffered_to_file"], 9);
    for (c, path) in &mut slow {
        read_whole(c, &body, path);
    }
}
