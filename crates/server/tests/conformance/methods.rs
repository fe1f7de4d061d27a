// Methods and protocol versions. (Included once per model by `models!`.)

use super::MODEL;
use crate::common::*;

#[test]
fn options_is_204_with_allow() {
    let (_root, srv) = standard(MODEL, &[]);
    let mut c = srv.client();
    // A GET pipelined behind shows the 204 really had no body.
    c.send(
        "OPTIONS /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n\
         GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    let r = c.read_response("OPTIONS");
    check_common(&r, "OPTIONS");
    r.assert_status(204);
    assert_eq!(r.header_one("allow"), ALLOW, "{}", r.describe());
    let g = c.read_response("GET");
    g.assert_status(200);
    assert_eq!(g.body_str(), HELLO);
}

#[test]
fn options_asterisk_is_204_with_allow() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = request(&srv, "OPTIONS", "*", &[]);
    r.assert_status(204);
    assert_eq!(r.header_one("allow"), ALLOW, "{}", r.describe());
}

#[track_caller]
fn expect_405(method: &str) {
    let (_root, srv) = standard(MODEL, &[]);
    let r = request(&srv, method, "/hello.txt", &[]);
    r.assert_status(405);
    assert_eq!(r.header_one("allow"), ALLOW, "{}", r.describe());
    assert!(!r.body_str().contains(HELLO), "405 carried the file\n{}", r.describe());
}

#[test]
fn post_is_405() {
    expect_405("POST");
}

#[test]
fn put_is_405() {
    expect_405("PUT");
}

#[test]
fn delete_is_405() {
    expect_405("DELETE");
}

#[test]
fn patch_is_405() {
    expect_405("PATCH");
}

#[test]
fn trace_is_405() {
    expect_405("TRACE");
}

#[test]
fn post_body_is_never_parsed_as_a_request() {
    // RFC 9112 §9.3 / bad-input A14: after a 405 the server either reads
    // and discards the body or closes; it never answers the body as a
    // request.
    let (_root, srv) = standard(MODEL, &[]);
    let inner = "GET /alphabet.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut c = srv.client();
    c.send(format!(
        "POST /hello.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{inner}\
         GET /style.css HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        inner.len()
    ));
    let r = c.read_response("POST");
    check_common(&r, "POST");
    r.assert_status(405);
    if r.connection_has("close") {
        let rest = c.read_to_end_expect_closed();
        assert!(rest.is_empty(), "bytes after Connection: close: {:?}", String::from_utf8_lossy(&rest));
    } else {
        let next = c.read_response("GET");
        assert!(
            !next.body_str().contains(ALPHABET),
            "the POST body was answered as a request\n{}",
            next.describe()
        );
        next.assert_status(200);
        assert_eq!(next.header_one("content-type"), "text/css; charset=utf-8");
        let rest = c.read_to_end_expect_closed();
        assert!(rest.is_empty(), "extra bytes: {:?}", String::from_utf8_lossy(&rest));
    }
}

#[test]
fn unknown_method_is_501() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = request(&srv, "FOO", "/hello.txt", &[]);
    r.assert_status(501);
    check_html_error(&r);
    assert_serves(&srv);
}

#[test]
fn lowercase_method_is_501() {
    // Methods are case-sensitive (RFC 9110 §9.1): `get` is unknown.
    let (_root, srv) = standard(MODEL, &[]);
    let r = request(&srv, "get", "/hello.txt", &[]);
    r.assert_status(501);
    assert!(!r.body_str().contains(HELLO), "{}", r.describe());
    assert_serves(&srv);
}

#[test]
fn http_2_0_is_505() {
    let (_root, srv) = standard(MODEL, &[]);
    let mut c = srv.client();
    c.send("GET /hello.txt HTTP/2.0\r\nHost: localhost\r\n\r\n");
    let r = c.read_response("GET");
    check_common(&r, "GET");
    r.assert_status(505);
    assert_serves(&srv);
}

#[test]
fn version_1_10_is_400() {
    let (_root, srv) = standard(MODEL, &[]);
    expect_rejected(&srv, b"GET /hello.txt HTTP/1.10\r\nHost: localhost\r\n\r\n", &[400]);
}

#[test]
fn lowercase_version_is_400() {
    let (_root, srv) = standard(MODEL, &[]);
    expect_rejected(&srv, b"GET /hello.txt http/1.1\r\nHost: localhost\r\n\r\n", &[400]);
}

#[test]
fn missing_version_is_400() {
    let (_root, srv) = standard(MODEL, &[]);
    expect_rejected(&srv, b"GET /hello.txt\r\nHost: localhost\r\n\r\n", &[400]);
}

#[test]
fn http_1_0_request_is_served() {
    let (_root, srv) = standard(MODEL, &[]);
    let mut c = srv.client();
    c.send("GET /hello.txt HTTP/1.0\r\n\r\n");
    let r = c.read_response("GET");
    check_common(&r, "GET");
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
}
