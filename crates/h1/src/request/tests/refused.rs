//! Heads refused: malformed lines, unsupported versions, bad fields, and
//! the limits on their sizes.

use super::*;

const NAME: ParseError = BadRequest("invalid header field name");
const VALUE: ParseError = BadRequest("invalid header field value");
const LINE_ENDING: ParseError = BadRequest("invalid line ending");
const VERSION: ParseError = BadRequest("invalid HTTP version");
const METHOD: ParseError = BadRequest("invalid method");
const TARGET: ParseError = BadRequest("invalid request-target");
const HOST: ParseError = BadRequest("invalid Host header");

#[test]
fn malformed_request_lines() {
    let cases: &[(&[u8], ParseError)] = &[
        (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"GET /  HTTP/1.1\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n", VERSION),
        (b"GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", METHOD),
        (b"GET /\tHTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"GET / HTTP/1.1\t\r\nHost: h\r\n\r\n", VERSION),
        (b" GET / HTTP/1.1\r\nHost: h\r\n\r\n", METHOD),
        (b"\tGET / HTTP/1.1\r\nHost: h\r\n\r\n", METHOD),
        (b"GET\r\n\r\n", METHOD),
        (b"GET / \r\n\r\n", VERSION),
        // HTTP/0.9 simple requests.
        (b"GET /\r\n", BadRequest("missing HTTP version")),
        (b"GET /\n", BadRequest("missing HTTP version")),
        // HTTP-version = %s"HTTP/" DIGIT "." DIGIT
        (b"GET / http/1.1\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / Http/1.1\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/1.10\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/01.1\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/1.1x\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/1\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/1.\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/11\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/1,1\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/a.b\r\nHost: h\r\n\r\n", VERSION),
        (b"GET / HTTP/\xd9\xa1.1\r\n", VERSION),
        (b"GET / HTTPS/1.1\r\n", VERSION),
        (b"GET / HTTP/1.1 HTTP/1.1\r\n", VERSION),
        // Methods are tokens.
        (b"G@T / HTTP/1.1\r\nHost: h\r\n\r\n", METHOD),
        (b"GET( / HTTP/1.1\r\n", METHOD),
        (b"GE\x00T / HTTP/1.1\r\n", METHOD),
        (b"G\xc3\x89T / HTTP/1.1\r\n", METHOD),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", METHOD),
        (b"GET/ HTTP/1.1\r\n", METHOD),
        // Targets: no SP, CTL, '#', or non-ASCII.
        (b"GET /a\x00b HTTP/1.1\r\n", TARGET),
        (b"GET /a\x01 HTTP/1.1\r\n", TARGET),
        (b"GET /a\x7f HTTP/1.1\r\n", TARGET),
        (b"GET /a\x0bb HTTP/1.1\r\n", TARGET),
        (b"GET /#frag HTTP/1.1\r\n", TARGET),
        (b"GET /a?b#c HTTP/1.1\r\n", TARGET),
        (b"GET /caf\xc3\xa9 HTTP/1.1\r\n", TARGET),
        (b"GET /\xff HTTP/1.1\r\n", TARGET),
        (b"GET /a\rb HTTP/1.1\r\n", BadRequest("missing HTTP version")),
        (b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", VERSION),
        // Line ends.
        (b"GET / HTTP/1.1\nHost: h\n\n", LINE_ENDING),
        (b"GET / HTTP/1.1\rHost: h\r\n\r\n", LINE_ENDING),
        (b"GET / HTTP/1.1\r\r\n", LINE_ENDING),
        (b"\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", LINE_ENDING),
        (b"\r\n\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", LINE_ENDING),
        (b"\rGET / HTTP/1.1\r\nHost: h\r\n\r\n", LINE_ENDING),
        (b"\r\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", LINE_ENDING),
    ];
    for &(input, expected) in cases {
        assert_refused(input, expected);
    }
}

#[test]
fn unsupported_versions() {
    for version in ["2.0", "3.0", "0.9", "9.9", "2.1", "0.0"] {
        let input = format!("GET / HTTP/{version}\r\nHost: h\r\n\r\n");
        assert_refused(input.as_bytes(), VersionNotSupported);
    }
    // The HTTP/2 connection preface.
    assert_refused(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", VersionNotSupported);
}

#[test]
fn request_target_forms() {
    let cases: &[(&[u8], ParseError)] = &[
        (b"GET x HTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"GET example.com HTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"GET example.com:80 HTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"GET ?q HTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"OPTIONS */x HTTP/1.1\r\nHost: h\r\n\r\n", TARGET),
        (b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest("asterisk-form target without OPTIONS")),
        (b"CONNECT / HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest("CONNECT needs an authority-form target")),
        (b"CONNECT h HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest("CONNECT needs an authority-form target")),
        (b"GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest("invalid authority in request-target")),
        (b"GET http:///p HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest("invalid authority in request-target")),
    ];
    for &(input, expected) in cases {
        assert_refused(input, expected);
    }
}

#[test]
fn malformed_field_lines() {
    let cases: &[(&[u8], ParseError)] = &[
        // Whitespace between name and colon: MUST 400 (RFC 9112 §5.1).
        (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", NAME),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\n", NAME),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n", NAME),
        // obs-fold, and whitespace before the first field (RFC 9112 §2.2, §5.2).
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n\tb\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\n Host: h\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\n \r\nHost: h\r\n\r\n", NAME),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", NAME),
        // Names are tokens.
        (b"GET / HTTP/1.1\r\nHost: h\r\n: x\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX\x00: y\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX\rY: y\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX y: z\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX[]: y\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX@: y\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX\xa0: y\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX\x85: y\r\n\r\n", NAME),
        // No colon.
        (b"GET / HTTP/1.1\r\nHost: h\r\nFoo bar\r\n\r\n", NAME),
        (b"GET / HTTP/1.1\r\nHost: h\r\nFoo\r\n\r\n", NAME),
        // Values: no CR, LF, NUL (RFC 9110 §5.5) or other controls but HTAB.
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", VALUE),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", VALUE),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n", VALUE),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x1b[31m\r\n\r\n", VALUE),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n", VALUE),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: \x0bchunked\r\n\r\n", VALUE),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \x0bchunked\r\n\r\n", VALUE),
        // Only CRLF ends a line.
        (b"GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n", LINE_ENDING),
        (b"GET / HTTP/1.1\r\nHost: h\r\n\n", LINE_ENDING),
        (b"GET / HTTP/1.1\r\nHost: h\n\n", LINE_ENDING),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX:\n\r\n", LINE_ENDING),
        (b"GET / HTTP/1.1\r\n\n", LINE_ENDING),
        (b"GET / HTTP/1.1\r\nHost: h\r\n\rX", LINE_ENDING),
        (b"GET / HTTP/1.1\r\nHost: h\r\n\r\r\n", LINE_ENDING),
    ];
    for &(input, expected) in cases {
        assert_refused(input, expected);
    }
}

#[test]
fn host_field() {
    let missing = BadRequest("missing Host header");
    let duplicate = BadRequest("duplicate Host header");
    let cases: &[(&[u8], ParseError)] = &[
        (b"GET / HTTP/1.1\r\n\r\n", missing),
        (b"GET / HTTP/1.1\r\nX-Host: h\r\n\r\n", missing),
        (b"GET http://h/ HTTP/1.1\r\n\r\n", missing),
        (b"OPTIONS * HTTP/1.1\r\n\r\n", missing),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", duplicate),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", duplicate),
        (b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", duplicate),
        (b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", duplicate),
        (b"GET http://h/ HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n", duplicate),
        (b"GET / HTTP/1.1\r\nHost:\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: \r\n\r\n", HOST),
        (b"GET / HTTP/1.0\r\nHost:\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: a, b\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: user:pass@b\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: ..\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: .example.com\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: a..b\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: h:99999\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: h:-1\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: h:\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: ::80\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: :80\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: h\tx\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: caf\xc3\xa9\r\n\r\n", HOST),
        (b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", HOST),
        // An absolute-form target does not excuse an invalid Host.
        (b"GET http://h/ HTTP/1.1\r\nHost: a@b\r\n\r\n", HOST),
    ];
    for &(input, expected) in cases {
        assert_refused(input, expected);
    }
}

#[test]
fn content_length() {
    let invalid = BadRequest("invalid Content-Length");
    let duplicate = BadRequest("duplicate Content-Length");
    let cases: &[(&[u8], ParseError)] = &[
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x5\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1_0\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 0\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5,\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551616\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n", invalid),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 10\r\n\r\n", duplicate),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", duplicate),
        (b"POST / HTTP/1.1\r\nHost: h\r\ncontent-length: 5\r\nContent-Length: 50\r\n\r\n", duplicate),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", duplicate),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", duplicate),
    ];
    for &(input, expected) in cases {
        assert_refused(input, expected);
    }
}

#[test]
fn transfer_encoding() {
    let both = BadRequest("both Transfer-Encoding and Content-Length");
    let not_last = BadRequest("Transfer-Encoding does not end in chunked");
    let twice = BadRequest("chunked applied more than once");
    let unsupported = NotImplemented("unsupported transfer-coding");
    let cases: &[(&[u8], ParseError)] = &[
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", both),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", both),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            BadRequest("Transfer-Encoding in an HTTP/1.0 request"),
        ),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", not_last),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", not_last),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", not_last),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n", not_last),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", twice),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            twice,
        ),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", unsupported),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked;x=y\r\n\r\n", unsupported),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked x\r\n\r\n",
            BadRequest("invalid Transfer-Encoding"),
        ),
    ];
    for &(input, expected) in cases {
        assert_refused(input, expected);
    }
    // RFC 9110 §5.6.1.2: empty list elements are ignored.
    let (head, _) = parse_complete(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ,chunked\r\n\r\n");
    assert_eq!(head.framing, BodyFraming::Chunked);
}

#[test]
fn statuses_of_the_errors() {
    let cases: &[(&[u8], u16)] = &[
        (b"GET  / HTTP/1.1\r\n", 400),
        (b"GET / HTTP/2.0\r\n", 505),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ];
    for &(input, status) in cases {
        assert_eq!(parse(input).unwrap_err().status(), status, "{:?}", show(input));
    }
    let long_line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(9000));
    assert_eq!(parse(long_line.as_bytes()).unwrap_err().status(), 414);
    let many_fields = format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(101));
    assert_eq!(parse(many_fields.as_bytes()).unwrap_err().status(), 431);
}

fn small_limits() -> Limits {
    Limits { max_request_line: 32, max_header_bytes: 128, max_headers: 4, max_field_size: 24 }
}

fn get_with_target(target_len: usize) -> Vec<u8> {
    // "GET " + target + " HTTP/1.1" is target_len + 13 bytes.
    format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(target_len - 1)).into_bytes()
}

#[test]
fn default_limits() {
    let limits = Limits::default();
    assert_eq!(
        (limits.max_request_line, limits.max_header_bytes, limits.max_headers, limits.max_field_size),
        (8192, 32768, 100, 8192)
    );
    // A request line of exactly 8192 bytes, and one more.
    parse_complete(&get_with_target(8192 - 13));
    assert_eq!(parse(&get_with_target(8192 - 12)), Err(UriTooLong));
}

#[test]
fn request_line_limit() {
    let limits = small_limits();
    let (_, len) = parse_complete_with(&get_with_target(32 - 13), &limits);
    assert_eq!(len, 32 + 2 + 9 + 2);
    assert_refused_with(&get_with_target(32 - 12), &limits, UriTooLong);
    assert_refused_with(&get_with_target(1000), &limits, UriTooLong);
    // Refused without waiting for the end of the line…
    let unterminated = get_with_target(1000);
    assert_eq!(parse_request(&unterminated[..34], &limits), Err(UriTooLong));
    // …but only once it is certain: 32 bytes and a CR may still be fine.
    let line = &get_with_target(32 - 13)[..33];
    assert_eq!(parse_request(line, &limits), Ok(Parsed::Partial));
    // Leading empty lines are not part of the request line.
    let input = [b"\r\n\r\n".as_slice(), &get_with_target(32 - 13)].concat();
    parse_complete_with(&input, &limits);
    // An invalid byte is reported as such, even in a long line.
    let mut invalid = get_with_target(1000);
    invalid[10] = 0;
    assert_eq!(parse_request(&invalid, &limits), Err(TARGET));
}

#[test]
fn header_bytes_limit() {
    let limits = Limits { max_field_size: 1000, ..small_limits() };
    // "GET / HTTP/1.1\r\nHost: h\r\nX: " is 28 bytes, then value, CRLF, CRLF.
    let with_value =
        |len: usize| format!("GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n", "v".repeat(len)).into_bytes();
    let (_, len) = parse_complete_with(&with_value(128 - 32), &limits);
    assert_eq!(len, 128);
    assert_refused_with(&with_value(128 - 31), &limits, HeadersTooLarge);
    // A head that never ends is refused once it has reached the limit.
    let endless = with_value(10_000);
    assert_eq!(parse_request(&endless[..127], &limits), Ok(Parsed::Partial));
    assert_eq!(parse_request(&endless[..128], &limits), Err(HeadersTooLarge));
    // So are endless empty lines before the request line.
    let blank = "\r\n".repeat(64);
    assert_eq!(parse_request(&blank.as_bytes()[..127], &limits), Ok(Parsed::Partial));
    assert_eq!(parse_request(blank.as_bytes(), &limits), Err(HeadersTooLarge));
    // And a request line that alone exceeds the head limit.
    let limits = Limits { max_request_line: 1000, ..limits };
    assert_refused_with(&get_with_target(200), &limits, HeadersTooLarge);
}

#[test]
fn field_count_limit() {
    let with_fields = |count: usize| {
        format!("GET / HTTP/1.1\r\nHost: h\r\n{}\r\n", "X: y\r\n".repeat(count - 1)).into_bytes()
    };
    let (head, _) = parse_complete_with(&with_fields(4), &small_limits());
    assert_eq!(head.headers().len(), 4);
    assert_refused_with(&with_fields(5), &small_limits(), HeadersTooLarge);

    let (head, _) = parse_complete(&with_fields(100));
    assert_eq!(head.headers().len(), 100);
    assert_refused(&with_fields(101), HeadersTooLarge);

    // More slots than fit on the stack.
    let limits = Limits { max_headers: 300, ..Limits::default() };
    let (head, _) = parse_complete_with(&with_fields(300), &limits);
    assert_eq!(head.headers().len(), 300);
    assert_refused_with(&with_fields(301), &limits, HeadersTooLarge);

    let no_fields = Limits { max_headers: 0, ..Limits::default() };
    parse_complete_with(b"GET / HTTP/1.0\r\n\r\n", &no_fields);
    assert_refused_with(b"GET / HTTP/1.0\r\nX: y\r\n\r\n", &no_fields, HeadersTooLarge);
}

#[test]
fn field_size_limit() {
    let limits = small_limits();
    // "X-Long: " is 8 bytes.
    let with_value =
        |len: usize| format!("GET / HTTP/1.1\r\nHost: h\r\nX-Long: {}\r\n\r\n", "v".repeat(len)).into_bytes();
    parse_complete_with(&with_value(24 - 8), &limits);
    assert_refused_with(&with_value(24 - 7), &limits, HeadersTooLarge);
    // Trailing whitespace counts too.
    let padded = b"GET / HTTP/1.1\r\nHost: h\r\nX-Long: v                 \r\n\r\n";
    assert_refused_with(padded, &limits, HeadersTooLarge);
    // A line that never ends is refused once it is over the limit.
    let endless = with_value(100);
    let line_start = 25;
    assert_eq!(parse_request(&endless[..line_start + 24], &limits), Ok(Parsed::Partial));
    assert_eq!(parse_request(&endless[..line_start + 25], &limits), Err(HeadersTooLarge));

    // The default: 8192 bytes per field line.
    let value =
        |len: usize| format!("GET / HTTP/1.1\r\nHost: h\r\nCookie: {}\r\n\r\n", "c".repeat(len)).into_bytes();
    assert!(matches!(parse(&value(8192 - 8)), Ok(Parsed::Complete { .. })));
    assert_eq!(parse(&value(8192 - 7)), Err(HeadersTooLarge));
}
