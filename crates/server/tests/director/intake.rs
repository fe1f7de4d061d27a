//! Request buffering (`--max-buffered-request`): a request body is read
//! whole before admission — 64 KiB in memory, the rest in a temp file — so
//! clients uploading slowly hold no backend slot, and the backend gets
//! every byte in order once it is all there.

use super::*;

/// One slot and no queue: a request that finds the slot held is answered
/// 503 at once, so a 200 proves the slot was free.
fn one_slot_no_queue(backend: &TestBackend, extra: &[&str]) -> Server {
    let mut args = vec!["--backend-conns", "1", "--max-backend-conns", "1", "--queue", "0"];
    args.extend_from_slice(extra);
    director(&[backend.addr], &args)
}

/// Starts a 1 MB upload and sends its first `sent` bytes.
fn half_upload(d: &Server, body: &[u8], sent: usize) -> Client {
    let mut c = d.client();
    c.send(format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len()));
    c.send(&body[..sent]);
    c
}

#[test]
fn slow_uploads_past_memory_hold_no_backend_slot_and_arrive_whole() {
    let backend = echo_backend();
    let d = one_slot_no_queue(&backend, &["--admin", "127.0.0.1:0"]);
    let body = pseudo_random_bytes(1 << 20, 21);
    // Five uploads stopped at 100 KB to 900 KB, all past the memory part.
    let mut uploads: Vec<(Client, usize)> =
        (1..=5).map(|i| i * 180_000).map(|sent| (half_upload(&d, &body, sent), sent)).collect();
    // Every upload's bytes so far are with the director; none with the backend.
    for _ in 0..3 {
        let r = d.client().request("GET", "/", &[]);
        r.assert_status(200);
    }
    let gets: usize = backend.requests().iter().map(String::len).sum();
    assert_eq!(
        backend.shared.bytes.load(Ordering::SeqCst),
        gets,
        "the backend read only the three GETs, nothing of the unfinished uploads"
    );
    // Each upload, finished, reaches the backend whole and in order.
    for (c, sent) in &mut uploads {
        c.send(&body[*sent..]);
        let r = c.read_response("POST");
        r.assert_status(200);
        assert_bytes_eq(&r.body, &body, "1 MB upload, buffered in a temp file");
    }
    d.client().request("GET", "/", &[]).assert_status(200);
    assert_eq!(admin_json(d.announced("admin"))["requests_buffered_to_file"], 5);
}

#[test]
fn a_chunked_upload_past_memory_keeps_the_pipelined_request_after_it() {
    let backend = echo_backend();
    let d = one_slot_no_queue(&backend, &[]);
    let body = pseudo_random_bytes(300_000, 22);
    let mut wire = b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for chunk in body.chunks(50_000) {
        wire.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        wire.extend_from_slice(chunk);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    // The next request in the same bytes: it must come after the body, not
    // between the body's memory part and its file.
    wire.extend_from_slice(b"POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nnext");
    let mut c = d.client();
    c.send(&wire);
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.header("X-Was-Chunked"), Some("1"));
    assert_bytes_eq(&dechunk(&r.body), &body, "300 KB chunked upload");
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.body_str(), "next");
}

#[test]
fn a_stalled_upload_past_memory_gets_408_without_touching_the_backend() {
    let backend = echo_backend();
    let d = one_slot_no_queue(&backend, &["--body-timeout", "300ms"]);
    let body = pseudo_random_bytes(500_000, 23);
    let mut stalled = half_upload(&d, &body, 200_000);
    let r = stalled.read_response("POST");
    r.assert_status(408);
    assert!(r.body_str().contains("request body not received in time"), "{}", r.body_str());
    assert!(stalled.is_closed());
    assert_eq!(backend.shared.bytes.load(Ordering::SeqCst), 0);
    d.client().request("GET", "/", &[]).assert_status(200);
}

/// `--max-buffered-request 0` streams a body past 64 KiB as it comes, as
/// before: the upload holds the only slot, so the GET finds none.
#[test]
fn zero_streams_long_bodies_and_holds_the_slot() {
    let backend = echo_backend();
    let d = one_slot_no_queue(&backend, &["--max-buffered-request", "0"]);
    let body = pseudo_random_bytes(500_000, 24);
    let mut upload = half_upload(&d, &body, 200_000);
    backend.wait_bytes(100_000);
    d.client().request("GET", "/", &[]).assert_status(503);
    upload.send(&body[200_000..]);
    let r = upload.read_response("POST");
    r.assert_status(200);
    assert_bytes_eq(&r.body, &body, "streamed upload");
}

/// A body longer than `--max-buffered-request` (plus the memory part) is
/// streamed too: the file's limit is not a body limit.
#[test]
fn a_body_over_the_limit_is_streamed_whole() {
    let backend = echo_backend();
    let d = one_slot_no_queue(&backend, &["--max-buffered-request", "100KiB"]);
    let body = pseudo_random_bytes(400_000, 25);
    let mut upload = half_upload(&d, &body, 200_000);
    backend.wait_bytes(100_000);
    upload.send(&body[200_000..]);
    let r = upload.read_response("POST");
    r.assert_status(200);
    assert_bytes_eq(&r.body, &body, "a body over the limit, streamed");
}

#[test]
fn slow_uploads_do_not_hold_a_backend_slot() {
    let backend = echo_backend();
    let d = director(
        &[backend.addr],
        &[
            "--backend-conns",
            "1",
            "--max-backend-conns",
            "1",
            "--header-timeout",
            "500ms",
            "--body-timeout",
            "500ms",
        ],
    );
    // A short chunked body that stalls: pre-buffered in REQUEST, so it
    // never reaches the backend and ends with the header deadline.
    let mut short = d.client();
    short.send("POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    short.read_response("POST").assert_status(408);
    assert_eq!(backend.shared.bytes.load(Ordering::SeqCst), 0);

    // A long body that stalls half-way: read into a temp file before
    // admission, abandoned by --body-timeout; the only backend slot was
    // free all along (--max-buffered-request 0's streaming is tested in
    // director/intake.rs).
    let mut long = d.client();
    long.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n");
    long.send(vec![b'x'; 100_000]);
    let mut waiting = d.client();
    waiting.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok");
    long.read_response("POST").assert_status(408);
    assert!(long.is_closed());
    let r = waiting.read_response("POST");
    assert_eq!((r.status, r.body_str().as_str()), (200, "ok"));
    assert_eq!(backend.requests().len(), 1, "only the complete request was answered by the backend");
    assert_eq!(
        backend.shared.bytes.load(Ordering::SeqCst),
        backend.requests()[0].len(),
        "nothing of the stalled body reached the backend"
    );
}
