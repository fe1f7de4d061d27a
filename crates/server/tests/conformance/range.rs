// Range requests (RFC 9110 §14). (Included once per model.)

use super::MODEL;
use crate::common::*;

/// GET /alphabet.txt (26 bytes) with the given extra headers.
#[track_caller]
fn get_alpha(srv: &Server, headers: &[&str]) -> Response {
    request(srv, "GET", "/alphabet.txt", headers)
}

/// Asserts a single-part 206 for `first..=last` of `full`.
#[track_caller]
fn assert_single(r: &Response, full: &[u8], first: usize, last: usize) {
    r.assert_status(206);
    assert_eq!(
        r.header_one("content-range"),
        format!("bytes {first}-{last}/{}", full.len()),
        "{}",
        r.describe()
    );
    assert_eq!(r.header_one("content-length"), (last - first + 1).to_string());
    assert_bytes_eq(&r.body, &full[first..=last], "range body");
}

#[track_caller]
fn assert_full_200(r: &Response, full: &[u8]) {
    r.assert_status(200);
    assert!(r.header("content-range").is_none(), "{}", r.describe());
    assert_bytes_eq(&r.body, full, "full body");
}

/// One part of a `multipart/byteranges` body.
#[derive(Debug)]
struct Part {
    content_type: Option<String>,
    first: usize,
    last: usize,
    total: usize,
    data: Vec<u8>,
}

/// Parses a 206 `multipart/byteranges` response (RFC 9110 §14.6) strictly.
#[track_caller]
fn parse_multipart(r: &Response) -> Vec<Part> {
    r.assert_status(206);
    assert!(r.header("content-range").is_none(), "multipart 206 with Content-Range\n{}", r.describe());
    let ct = r.header_one("content-type");
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("Content-Type {ct:?}"))
        .trim_matches('"');
    assert!(!boundary.is_empty());
    let delim = format!("--{boundary}").into_bytes();
    let body = &r.body[..];
    let find = |hay: &[u8], from: usize, needle: &[u8]| {
        hay[from..].windows(needle.len()).position(|w| w == needle).map(|p| p + from)
    };
    // The body may start with a preamble (usually just CRLF or nothing).
    let mut pos = find(body, 0, &delim).expect("no first boundary") + delim.len();
    let mut parts = Vec::new();
    loop {
        if body[pos..].starts_with(b"--") {
            break; // close-delimiter
        }
        assert!(body[pos..].starts_with(b"\r\n"), "boundary not followed by CRLF");
        pos += 2;
        let head_end = find(body, pos, b"\r\n\r\n").expect("part head end");
        let head = std::str::from_utf8(&body[pos..head_end]).expect("part head UTF-8");
        let mut content_type = None;
        let mut range = None;
        for line in head.split("\r\n") {
            let (n, v) = line.split_once(':').expect("part header colon");
            let v = v.trim();
            if n.eq_ignore_ascii_case("content-type") {
                content_type = Some(v.to_string());
            } else if n.eq_ignore_ascii_case("content-range") {
                let spec = v.strip_prefix("bytes ").expect("Content-Range unit");
                let (fl, total) = spec.split_once('/').expect("Content-Range /");
                let (f, l) = fl.split_once('-').expect("Content-Range -");
                range = Some((f.parse().unwrap(), l.parse().unwrap(), total.parse().unwrap()));
            }
        }
        let (first, last, total) = range.unwrap_or_else(|| panic!("part without Content-Range: {head:?}"));
        let data_start = head_end + 4;
        let mut end_delim = b"\r\n".to_vec();
        end_delim.extend_from_slice(&delim);
        let data_end = find(body, data_start, &end_delim).expect("part data end");
        parts.push(Part { content_type, first, last, total, data: body[data_start..data_end].to_vec() });
        pos = data_end + end_delim.len();
    }
    parts
}

/// Every part's bytes are the claimed slice of `full`.
#[track_caller]
fn check_parts(parts: &[Part], full: &[u8], ct: &str) {
    for p in parts {
        assert_eq!(p.total, full.len(), "{p:?}");
        assert!(p.first <= p.last && p.last < full.len(), "{p:?}");
        assert_bytes_eq(&p.data, &full[p.first..=p.last], "part data");
        assert_eq!(p.content_type.as_deref(), Some(ct), "part Content-Type");
    }
}

const TXT: &str = "text/plain; charset=utf-8";

#[test]
fn first_bytes() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=0-4"]);
    assert_single(&r, ALPHABET.as_bytes(), 0, 4);
    assert_eq!(r.header_one("content-type"), TXT);
    assert_eq!(r.body_str(), "abcde");
}

#[test]
fn middle_bytes() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=10-12"]);
    assert_single(&r, ALPHABET.as_bytes(), 10, 12);
}

#[test]
fn suffix() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=-5"]);
    assert_single(&r, ALPHABET.as_bytes(), 21, 25);
    assert_eq!(r.body_str(), "vwxyz");
}

/// A satisfiable range covering the whole file: a 206 for all its bytes,
/// with `Content-Range`, as nginx answers (a 200 would be allowed, RFC 9110
/// §14.2, but a client that asked for a range expects one).
#[track_caller]
fn assert_whole(r: &Response, full: &[u8]) {
    assert_single(r, full, 0, full.len() - 1);
}

#[test]
fn suffix_longer_than_file_is_whole_file() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=-100"]);
    assert_whole(&r, ALPHABET.as_bytes());
}

#[test]
fn open_ended() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=5-"]);
    assert_single(&r, ALPHABET.as_bytes(), 5, 25);
}

#[test]
fn last_beyond_end_is_clamped() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=20-100"]);
    assert_single(&r, ALPHABET.as_bytes(), 20, 25);
    // Bad-input H4: no overflow on the largest u64.
    let r = get_alpha(&srv, &["Range: bytes=0-18446744073709551615"]);
    assert_whole(&r, ALPHABET.as_bytes());
    let r = get_alpha(&srv, &["Range: bytes=1-18446744073709551615"]);
    assert_single(&r, ALPHABET.as_bytes(), 1, 25);
}

#[test]
fn unsatisfiable_is_416() {
    let (_root, srv) = standard(MODEL, &[]);
    for spec in ["bytes=26-", "bytes=100-200", "bytes=-0"] {
        let r = get_alpha(&srv, &[&format!("Range: {spec}")]);
        assert_eq!(r.status, 416, "{spec}\n{}", r.describe());
        assert_eq!(r.header_one("content-range"), "bytes */26", "{spec}\n{}", r.describe());
    }
}

#[test]
fn range_on_empty_file_is_416() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = request(&srv, "GET", "/empty.txt", &["Range: bytes=0-"]);
    r.assert_status(416);
    assert_eq!(r.header_one("content-range"), "bytes */0");
}

#[test]
fn invalid_syntax_is_ignored() {
    let (_root, srv) = standard(MODEL, &[]);
    for spec in ["bytes=abc", "items=0-1", "bytes 0-4", "bytes=0-4 5-", "bytes=", "bytes=--1"] {
        let r = get_alpha(&srv, &[&format!("Range: {spec}")]);
        assert_eq!(r.status, 200, "{spec}\n{}", r.describe());
        assert_full_200(&r, ALPHABET.as_bytes());
    }
}

#[test]
fn reversed_range_is_ignored_or_416() {
    // RFC 9110 §14.1.1: last < first makes the range-spec invalid; §14.2:
    // the server MAY ignore (200) or reject (416) it. Never a 206.
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=5-2"]);
    match r.status {
        200 => assert_full_200(&r, ALPHABET.as_bytes()),
        416 => assert_eq!(r.header_one("content-range"), "bytes */26"),
        _ => panic!("want 200 or 416\n{}", r.describe()),
    }
}

#[test]
fn two_ranges_are_multipart() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=0-1,4-5"]);
    let parts = parse_multipart(&r);
    check_parts(&parts, ALPHABET.as_bytes(), TXT);
    let got: Vec<(usize, usize)> = parts.iter().map(|p| (p.first, p.last)).collect();
    assert_eq!(got, [(0, 1), (4, 5)], "{}", r.describe());
    assert_eq!(parts[0].data, b"ab");
    assert_eq!(parts[1].data, b"ef");
}

#[test]
fn overlapping_ranges_are_merged() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=0-4,2-6"]);
    r.assert_status(206);
    let got: Vec<(usize, usize)> = if r.header("content-range").is_some() {
        assert_single(&r, ALPHABET.as_bytes(), 0, 6);
        vec![(0, 6)]
    } else {
        let parts = parse_multipart(&r);
        check_parts(&parts, ALPHABET.as_bytes(), TXT);
        parts.iter().map(|p| (p.first, p.last)).collect()
    };
    assert_eq!(got, [(0, 6)], "overlapping ranges not merged\n{}", r.describe());
}

/// `n` one-byte ranges with one-byte gaps: `0-0,2-2,4-4,...`.
fn many_ranges(n: usize) -> String {
    let specs: Vec<String> = (0..n).map(|i| format!("{0}-{0}", 2 * i)).collect();
    format!("Range: bytes={}", specs.join(","))
}

#[test]
fn max_ranges_is_allowed() {
    let root = Docroot::standard();
    let data = pseudo_random_bytes(1000, 7);
    root.file("k.bin", &data);
    let srv = serve(MODEL, &root, &[]);
    let r = request(&srv, "GET", "/k.bin", &[&many_ranges(200)]);
    // The server MAY coalesce near ranges (RFC 9110 §14.2), so only the
    // parts' correctness is asserted, not their number.
    let parts = parse_multipart(&r);
    check_parts(&parts, &data, "application/octet-stream");
}

#[test]
fn too_many_ranges_is_full_200() {
    let root = Docroot::standard();
    let data = pseudo_random_bytes(1000, 7);
    root.file("k.bin", &data);
    let srv = serve(MODEL, &root, &[]);
    let r = request(&srv, "GET", "/k.bin", &[&many_ranges(201)]);
    assert_full_200(&r, &data);
}

#[test]
fn max_ranges_flag() {
    let (_root, srv) = standard(MODEL, &["--max-ranges", "1"]);
    let r = get_alpha(&srv, &["Range: bytes=0-1,4-5"]);
    assert_full_200(&r, ALPHABET.as_bytes());
    let r = get_alpha(&srv, &["Range: bytes=0-1"]);
    assert_single(&r, ALPHABET.as_bytes(), 0, 1);
}

#[test]
fn if_range_current_etag_honours_range() {
    let (_root, srv) = standard(MODEL, &[]);
    let etag = get_alpha(&srv, &[]).header_one("etag").to_string();
    let r = get_alpha(&srv, &["Range: bytes=0-4", &format!("If-Range: {etag}")]);
    assert_single(&r, ALPHABET.as_bytes(), 0, 4);
}

#[test]
fn if_range_other_etag_is_full_200() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get_alpha(&srv, &["Range: bytes=0-4", "If-Range: \"stale-etag\""]);
    assert_full_200(&r, ALPHABET.as_bytes());
}

#[test]
fn if_range_weak_etag_is_full_200() {
    // RFC 9110 §13.1.5: If-Range uses the strong comparison.
    let (_root, srv) = standard(MODEL, &[]);
    let etag = get_alpha(&srv, &[]).header_one("etag").to_string();
    let r = get_alpha(&srv, &["Range: bytes=0-4", &format!("If-Range: W/{etag}")]);
    assert_full_200(&r, ALPHABET.as_bytes());
}

#[test]
fn if_range_date() {
    // RFC 9110 §13.1.5: an HTTP-date validator matches only if it equals
    // Last-Modified exactly.
    let root = Docroot::standard();
    root.set_mtime("alphabet.txt", old_mtime());
    let srv = serve(MODEL, &root, &[]);
    let lm = httpdate::fmt_http_date(old_mtime());
    let r = get_alpha(&srv, &["Range: bytes=0-4", &format!("If-Range: {lm}")]);
    assert_single(&r, ALPHABET.as_bytes(), 0, 4);
    let other = httpdate::fmt_http_date(old_mtime() - std::time::Duration::from_secs(60));
    let r = get_alpha(&srv, &["Range: bytes=0-4", &format!("If-Range: {other}")]);
    assert_full_200(&r, ALPHABET.as_bytes());
}

#[test]
fn range_on_uncached_large_file() {
    // Files above --max-cached-file go out via sendfile: offsets matter.
    let root = Docroot::standard();
    let data = pseudo_random_bytes(300_000, 99);
    root.file("big.bin", &data);
    let srv = serve(MODEL, &root, &["--max-cached-file", "64KiB"]);
    let r = request(&srv, "GET", "/big.bin", &["Range: bytes=100000-250000"]);
    assert_single(&r, &data, 100_000, 250_000);
    let r = request(&srv, "GET", "/big.bin", &["Range: bytes=-70000"]);
    assert_single(&r, &data, 230_000, 299_999);
    let r = request(&srv, "GET", "/big.bin", &["Range: bytes=1-2,200000-200100"]);
    let parts = parse_multipart(&r);
    check_parts(&parts, &data, "application/octet-stream");
    assert_eq!(parts.len(), 2);
}
