//! Helpers shared by the feature files: starting servers, one-shot
//! requests, and the checks every response must pass.

use std::time::{Duration, SystemTime};

pub use testkit::{assert_bytes_eq, pseudo_random_bytes, Client, Docroot, Response, Server, Signal, SECRET};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// `Allow` value for every static file (spec).
pub const ALLOW: &str = "GET, HEAD, OPTIONS";

/// Content of `hello.txt` in [`Docroot::standard`].
pub const HELLO: &str = "Hello, world!\n";

/// Content of `alphabet.txt` in [`Docroot::standard`].
pub const ALPHABET: &str = "abcdefghijklmnopqrstuvwxyz";

/// A fixed, whole-second modification time in the past (2020-01-02
/// 03:04:05 UTC), so `Last-Modified` is a strong validator and
/// predictable.
pub fn old_mtime() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_934_245)
}

/// Polls `done` every 50 ms, 200 times at most (generous, count-based).
pub fn poll_until(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// Long enough for any graceful stop in these tests.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// Starts `modus serve ROOT --model MODEL --listen 127.0.0.1:0
/// --access-log off ARGS...`.
pub fn serve(model: &str, root: &Docroot, args: &[&str]) -> Server {
    Server::start(BIN, model, root.path(), args)
}

/// The standard docroot and a server for it.
pub fn standard(model: &str, args: &[&str]) -> (Docroot, Server) {
    let root = Docroot::standard();
    let srv = serve(model, &root, args);
    (root, srv)
}

/// One request on a fresh connection (`Host: localhost` plus `headers`),
/// checked with [`check_common`].
#[track_caller]
pub fn request(srv: &Server, method: &str, target: &str, headers: &[&str]) -> Response {
    let mut c = srv.client();
    let r = c.request(method, target, headers);
    check_common(&r, method);
    r
}

/// `GET target` on a fresh connection, checked with [`check_common`].
#[track_caller]
pub fn get(srv: &Server, target: &str) -> Response {
    request(srv, "GET", target, &[])
}

/// Checks what every response must have (spec + RFC 9110):
/// `HTTP/1.1` status line, one IMF-fixdate `Date`, `Server:
/// modus/<version>`, and framing: exactly one `Content-Length` equal to the
/// body length (the GET length for HEAD — checked by callers), none on
/// 1xx/204 (RFC 9110 §8.6), and no `Transfer-Encoding` anywhere.
#[track_caller]
pub fn check_common(r: &Response, method: &str) {
    let ctx = r.describe();
    assert_eq!(r.version, "HTTP/1.1", "status line version\n{ctx}");
    let date = r.header_one("date");
    let t = httpdate::parse_http_date(date)
        .unwrap_or_else(|e| panic!("Date {date:?} is not an HTTP-date ({e})\n{ctx}"));
    assert_eq!(httpdate::fmt_http_date(t), date, "Date is not in IMF-fixdate form\n{ctx}");
    assert_eq!(r.header_one("server"), concat!("modus/", env!("CARGO_PKG_VERSION")), "Server header\n{ctx}");
    assert!(r.header("transfer-encoding").is_none(), "unexpected Transfer-Encoding\n{ctx}");
    match r.status {
        100..=199 | 204 => assert!(
            r.header("content-length").is_none(),
            "Content-Length on a {} (RFC 9110 §8.6)\n{ctx}",
            r.status
        ),
        304 => {}
        _ => {
            let cl: usize = r
                .header_one("content-length")
                .parse()
                .unwrap_or_else(|_| panic!("Content-Length not a number\n{ctx}"));
            if !method.eq_ignore_ascii_case("HEAD") {
                assert_eq!(cl, r.body.len(), "Content-Length vs body\n{ctx}");
            }
        }
    }
}

/// Checks a file response's validators: a strong, quoted `ETag` and an
/// IMF-fixdate `Last-Modified`; returns the ETag.
#[track_caller]
pub fn check_validators(r: &Response) -> String {
    let etag = r.header_one("etag");
    assert!(is_strong_etag(etag), "ETag {etag:?} is not a strong entity-tag\n{}", r.describe());
    let lm = r.header_one("last-modified");
    let t = httpdate::parse_http_date(lm)
        .unwrap_or_else(|e| panic!("Last-Modified {lm:?}: {e}\n{}", r.describe()));
    assert_eq!(httpdate::fmt_http_date(t), lm, "Last-Modified form");
    etag.to_string()
}

/// `"` *etagc `"` without the `W/` prefix (RFC 9110 §8.8.3).
pub fn is_strong_etag(v: &str) -> bool {
    v.len() >= 2
        && v.starts_with('"')
        && v.ends_with('"')
        && v[1..v.len() - 1].bytes().all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
}

/// Checks that an error response carries an HTML body of the declared
/// length (the length itself is checked by [`check_common`]).
#[track_caller]
pub fn check_html_error(r: &Response) {
    let ct = r.header_one("content-type");
    assert!(ct.starts_with("text/html"), "error Content-Type {ct:?}\n{}", r.describe());
    assert!(!r.body.is_empty() && r.body_str().contains('<'), "error body is not HTML\n{}", r.describe());
}

/// A normal request still works (the server survived whatever came before).
#[track_caller]
pub fn assert_serves(srv: &Server) {
    let r = get(srv, "/hello.txt");
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
}

/// The request every bad-input case pipelines after itself: it must never
/// be answered, because the connection must close after the error.
pub const CANARY: &str = "GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// Sends `req` followed by [`CANARY`] on a fresh connection and asserts the
/// bad-input contract: one response with a status in `statuses`,
/// `Connection: close`, an HTML body of the right length, then the
/// connection closes with nothing more (the canary is not answered); and
/// the server still serves a normal request afterwards.
#[track_caller]
pub fn expect_rejected(srv: &Server, req: &[u8], statuses: &[u16]) -> Response {
    let mut c = srv.client();
    let mut bytes = req.to_vec();
    bytes.extend_from_slice(CANARY.as_bytes());
    // The server may answer and close before reading everything (e.g. a
    // huge header block): a failed write is fine, the response is what
    // counts.
    let _ = c.try_send(&bytes);
    let r = match c.try_read_response("GET") {
        Ok(r) => r,
        Err(e) => panic!(
            "no response to {:?}: {e}\n(a reset here usually means the server closed with \
             unread input and no lingering close, RFC 9112 §9.6)",
            shorten(req)
        ),
    };
    assert!(
        statuses.contains(&r.status),
        "request {:?}: want status in {statuses:?}\n{}",
        shorten(req),
        r.describe()
    );
    check_common(&r, "GET");
    assert!(
        r.connection_has("close"),
        "request {:?}: error response without `Connection: close`\n{}",
        shorten(req),
        r.describe()
    );
    check_html_error(&r);
    let rest = c.read_to_end_expect_closed();
    assert!(
        rest.is_empty(),
        "request {:?}: bytes after the error response (the canary was answered?): {:?}",
        shorten(req),
        String::from_utf8_lossy(&rest)
    );
    assert_serves(srv);
    r
}

/// First 200 bytes of a request, for messages.
pub fn shorten(req: &[u8]) -> String {
    let n = req.len().min(200);
    let s = String::from_utf8_lossy(&req[..n]).into_owned();
    if n < req.len() {
        format!("{s}... ({} bytes)", req.len())
    } else {
        s
    }
}

/// `body` decoded from the content coding `coding` (`br`, `zstd`, `gzip`),
/// with the decoders of the codings' own crates.
#[track_caller]
pub fn decode(coding: &str, body: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    match coding {
        "gzip" => flate2::read::GzDecoder::new(body).read_to_end(&mut out).map(drop),
        "br" => brotli::Decompressor::new(body, 4096).read_to_end(&mut out).map(drop),
        "zstd" => zstd::stream::copy_decode(body, &mut out),
        other => panic!("no decoder for {other:?}"),
    }
    .unwrap_or_else(|e| panic!("{coding} body does not decode: {e}"));
    out
}

/// `data` gzip-encoded, as a precompressed `FILE.gz` would be.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}
