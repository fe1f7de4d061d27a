// Conditional requests (RFC 9110 §13). (Included once per model.)

use super::MODEL;
use crate::common::*;

/// Standard root with `hello.txt` at a fixed old mtime; returns the
/// server and hello.txt's ETag and Last-Modified.
fn setup() -> (Docroot, Server, String, String) {
    let root = Docroot::standard();
    root.set_mtime("hello.txt", old_mtime());
    let srv = serve(MODEL, &root, &[]);
    let r = get(&srv, "/hello.txt");
    r.assert_status(200);
    let etag = check_validators(&r);
    let lm = r.header_one("last-modified").to_string();
    (root, srv, etag, lm)
}

/// Sends a conditional GET followed by a plain GET on the same connection
/// (which proves a 304 had no body) and returns the first response.
#[track_caller]
fn cond_get(srv: &Server, headers: &[&str]) -> Response {
    let mut c = srv.client();
    let mut req = String::from("GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\nGET /alphabet.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    c.send(req);
    let r = c.read_response("GET");
    check_common(&r, "GET");
    let next = c.read_response("GET");
    next.assert_status(200);
    assert_eq!(next.body_str(), ALPHABET, "response after the conditional one");
    r
}

#[track_caller]
fn assert_304(r: &Response, etag: &str) {
    r.assert_status(304);
    assert!(r.body.is_empty());
    assert_eq!(r.header_one("etag"), etag, "304 must carry the ETag\n{}", r.describe());
}

#[test]
fn if_none_match_etag_is_304() {
    let (_root, srv, etag, _lm) = setup();
    let r = cond_get(&srv, &[&format!("If-None-Match: {etag}")]);
    assert_304(&r, &etag);
}

#[test]
fn if_none_match_star_is_304() {
    let (_root, srv, etag, _lm) = setup();
    let r = cond_get(&srv, &["If-None-Match: *"]);
    assert_304(&r, &etag);
}

#[test]
fn if_none_match_list_containing_etag_is_304() {
    let (_root, srv, etag, _lm) = setup();
    let r = cond_get(&srv, &[&format!("If-None-Match: \"nope\", {etag}, \"other\"")]);
    assert_304(&r, &etag);
    // The list over several lines is one list (RFC 9110 §5.3).
    let r = cond_get(&srv, &["If-None-Match: \"nope\"", &format!("If-None-Match: {etag}")]);
    assert_304(&r, &etag);
    // If-Match's too: the second line's tag matches, the request proceeds.
    let r = cond_get(&srv, &["If-Match: \"nope\"", &format!("If-Match: {etag}")]);
    assert_eq!(r.status, 200, "{}", r.describe());
}

#[test]
fn if_none_match_uses_weak_comparison() {
    // RFC 9110 §13.1.2: If-None-Match uses the weak comparison function.
    let (_root, srv, etag, _lm) = setup();
    let r = cond_get(&srv, &[&format!("If-None-Match: W/{etag}")]);
    assert_304(&r, &etag);
}

#[test]
fn if_none_match_other_etag_is_200() {
    let (_root, srv, _etag, _lm) = setup();
    let r = cond_get(&srv, &["If-None-Match: \"definitely-not-it\""]);
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
}

#[test]
fn if_modified_since_equal_is_304() {
    let (_root, srv, etag, lm) = setup();
    let r = cond_get(&srv, &[&format!("If-Modified-Since: {lm}")]);
    assert_304(&r, &etag);
}

#[test]
fn if_modified_since_later_is_304() {
    let (_root, srv, etag, _lm) = setup();
    let later = httpdate::fmt_http_date(old_mtime() + std::time::Duration::from_secs(3600));
    let r = cond_get(&srv, &[&format!("If-Modified-Since: {later}")]);
    assert_304(&r, &etag);
}

#[test]
fn if_modified_since_earlier_is_200() {
    let (_root, srv, _etag, _lm) = setup();
    let earlier = httpdate::fmt_http_date(old_mtime() - std::time::Duration::from_secs(1));
    let r = cond_get(&srv, &[&format!("If-Modified-Since: {earlier}")]);
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
}

#[test]
fn if_modified_since_invalid_date_is_ignored() {
    let (_root, srv, _etag, _lm) = setup();
    for v in ["not a date", "2020-01-02T03:04:05Z", ""] {
        let r = cond_get(&srv, &[&format!("If-Modified-Since: {v}")]);
        assert_eq!(r.status, 200, "IMS {v:?}\n{}", r.describe());
        assert_eq!(r.body_str(), HELLO);
    }
}

#[test]
fn if_none_match_takes_precedence_over_ims() {
    // RFC 9110 §13.2.2: with If-None-Match present, If-Modified-Since is
    // not evaluated.
    let (_root, srv, etag, lm) = setup();
    let r = cond_get(&srv, &["If-None-Match: \"other\"", &format!("If-Modified-Since: {lm}")]);
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);

    let earlier = httpdate::fmt_http_date(old_mtime() - std::time::Duration::from_secs(86400));
    let r = cond_get(&srv, &[&format!("If-None-Match: {etag}"), &format!("If-Modified-Since: {earlier}")]);
    assert_304(&r, &etag);
}

#[test]
fn if_match_mismatch_is_412() {
    let (_root, srv, _etag, _lm) = setup();
    let r = cond_get(&srv, &["If-Match: \"not-the-etag\""]);
    r.assert_status(412);
    assert!(!r.body_str().contains(HELLO), "{}", r.describe());
}

#[test]
fn if_match_current_etag_is_200() {
    let (_root, srv, etag, _lm) = setup();
    for v in [etag.as_str(), "*"] {
        let r = cond_get(&srv, &[&format!("If-Match: {v}")]);
        assert_eq!(r.status, 200, "If-Match {v}\n{}", r.describe());
        assert_eq!(r.body_str(), HELLO);
    }
}

#[test]
fn if_none_match_on_head_is_304() {
    let (_root, srv, etag, _lm) = setup();
    let r = request(&srv, "HEAD", "/hello.txt", &[&format!("If-None-Match: {etag}")]);
    assert_304(&r, &etag);
}

/// `--cache-control` rules: the first match by path wins, a directory's
/// index counts as its `index.html`, and a file no rule names gets none.
#[test]
fn cache_control_rules_apply_by_path() {
    let (_root, srv) = standard(
        MODEL,
        &["--cache-control", "*.css=max-age=31536000, immutable", "--cache-control", "*.html=no-cache"],
    );
    let r = get(&srv, "/style.css");
    r.assert_status(200);
    assert_eq!(r.header_one("cache-control"), "max-age=31536000, immutable");
    assert!(r.header("expires").is_none(), "an HTTP/1.1 client gets no Expires");
    assert_eq!(get(&srv, "/dir/").header_one("cache-control"), "no-cache");
    assert!(get(&srv, "/hello.txt").header("cache-control").is_none());
    // A range of it says the same of caching.
    let r = request(&srv, "GET", "/style.css", &["Range: bytes=0-3"]);
    r.assert_status(206);
    assert_eq!(r.header_one("cache-control"), "max-age=31536000, immutable");
}

/// A 304 carries the Cache-Control its 200 would (RFC 9110 §15.4.5), and
/// an HTTP/1.0 client also gets Expires from max-age (RFC 9111 §5.3).
#[test]
fn cache_control_on_304_and_expires_for_http_1_0() {
    let (_root, srv) = standard(MODEL, &["--cache-control", "*=public, max-age=3600"]);
    let etag = get(&srv, "/hello.txt").header_one("etag").to_string();
    let r = request(&srv, "GET", "/hello.txt", &[&format!("If-None-Match: {etag}")]);
    r.assert_status(304);
    assert_eq!(r.header_one("cache-control"), "public, max-age=3600");
    let mut c = srv.client();
    c.send("GET /hello.txt HTTP/1.0\r\n\r\n");
    let r = c.read_response("GET");
    r.assert_status(200);
    assert_eq!(r.header_one("cache-control"), "public, max-age=3600");
    let expires = h1::parse_http_date(r.header_one("expires")).expect("an HTTP date");
    let date = h1::parse_http_date(r.header_one("date")).expect("an HTTP date");
    let ahead = expires.duration_since(date).expect("Expires after Date").as_secs();
    assert!((3599..=3601).contains(&ahead), "Expires is Date + max-age: {ahead} s");
}
