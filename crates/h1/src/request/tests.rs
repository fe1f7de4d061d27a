use super::*;

use ParseError::{BadRequest, HeadersTooLarge, NotImplemented, UriTooLong, VersionNotSupported};

fn parse(input: &[u8]) -> Result<Parsed, ParseError> {
    parse_request(input, &Limits::default())
}

fn show(input: &[u8]) -> String {
    String::from_utf8_lossy(input).into_owned()
}

/// Parses a complete head, checking that every shorter prefix is `Partial`
/// and that every longer buffer gives the same result.
fn parse_complete_with(input: &[u8], limits: &Limits) -> (RequestHead, usize) {
    let (head, len) = match parse_request(input, limits) {
        Ok(Parsed::Complete { head, len }) => (head, len),
        other => panic!("{:?}: {other:?}", show(input)),
    };
    for end in 0..len {
        assert_eq!(
            parse_request(&input[..end], limits),
            Ok(Parsed::Partial),
            "prefix of {end} bytes of {:?}",
            show(input)
        );
    }
    for end in len..input.len() {
        assert_eq!(
            parse_request(&input[..end], limits),
            Ok(Parsed::Complete { head: head.clone(), len }),
            "prefix of {end} bytes of {:?}",
            show(input)
        );
    }
    (head, len)
}

fn parse_complete(input: &[u8]) -> (RequestHead, usize) {
    parse_complete_with(input, &Limits::default())
}

/// Asserts that `input` is refused with `expected`, and that each prefix of
/// it is either still `Partial` or already refused the same way.
fn assert_refused_with(input: &[u8], limits: &Limits, expected: ParseError) {
    assert_eq!(parse_request(input, limits), Err(expected), "{:?}", show(input));
    for end in 0..input.len() {
        let result = parse_request(&input[..end], limits);
        assert!(
            result == Ok(Parsed::Partial) || result == Err(expected),
            "prefix of {end} bytes of {:?}: {result:?}",
            show(input)
        );
    }
}

fn assert_refused(input: &[u8], expected: ParseError) {
    assert_refused_with(input, &Limits::default(), expected);
}

/// The interpreted parts of a head on one line, for table-driven tests.
fn summary(head: &RequestHead) -> String {
    format!(
        "{} {} {:?} path={} query={:?} host={:?} {:?} keep_alive={} expect_continue={}",
        head.method.as_str(),
        head.target(),
        head.version,
        head.path(),
        head.query(),
        head.host(),
        head.framing,
        head.keep_alive,
        head.expect_continue,
    )
}

#[test]
fn simple_get() {
    let input = b"GET /index.html?a=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\n";
    let (head, len) = parse_complete(input);
    assert_eq!(len, input.len());
    assert_eq!(head.method, Method::Get);
    assert_eq!(head.target(), "/index.html?a=1");
    assert_eq!(head.path(), "/index.html");
    assert_eq!(head.query(), Some("a=1"));
    assert_eq!(head.version, Version::Http11);
    let headers: Vec<Header<'_>> = head.headers().collect();
    assert_eq!(
        headers,
        [Header { name: "Host", value: b"example.com" }, Header { name: "User-Agent", value: b"t" }]
    );
    assert_eq!(head.host(), Some("example.com"));
    assert_eq!(head.framing, BodyFraming::None);
    assert!(head.keep_alive);
    assert!(!head.expect_continue);
}

#[test]
fn valid_requests() {
    let cases: &[(&[u8], &str)] = &[
        (
            b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        (
            b"GET /a%20b/c?x=%41&y HTTP/1.1\r\nHost: h:8080\r\n\r\n",
            "GET /a%20b/c?x=%41&y Http11 path=/a%20b/c query=Some(\"x=%41&y\") host=Some(\"h:8080\") None keep_alive=true expect_continue=false",
        ),
        (
            b"GET /? HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
            "GET /? Http11 path=/ query=Some(\"\") host=Some(\"[::1]:80\") None keep_alive=true expect_continue=false",
        ),
        // Characters real clients send unencoded.
        (
            b"GET /{a}|b^c\"d\\e<f>`g? HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET /{a}|b^c\"d\\e<f>`g? Http11 path=/{a}|b^c\"d\\e<f>`g query=Some(\"\") host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        // HTTP/1.0: Host optional, keep-alive only on request.
        (
            b"GET / HTTP/1.0\r\n\r\n",
            "GET / Http10 path=/ query=None host=None None keep_alive=false expect_continue=false",
        ),
        (
            b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
            "GET / Http10 path=/ query=None host=None None keep_alive=true expect_continue=false",
        ),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            "GET / Http10 path=/ query=None host=None None keep_alive=false expect_continue=false",
        ),
        (
            b"GET / HTTP/1.0\r\nHost: h\r\nExpect: 100-continue\r\n\r\n",
            "GET / Http10 path=/ query=None host=Some(\"h\") None keep_alive=false expect_continue=false",
        ),
        // Connection in 1.1, as token lists over several lines.
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
            "GET / Http11 path=/ query=None host=Some(\"h\") None keep_alive=false expect_continue=false",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nConnection: x, CLOSE\r\n\r\n",
            "GET / Http11 path=/ query=None host=Some(\"h\") None keep_alive=false expect_continue=false",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: closed, x-close\r\n\r\n",
            "GET / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        // Later HTTP/1.x minor versions are handled as 1.1 (RFC 9110 §2.5).
        (
            b"GET / HTTP/1.2\r\nHost: h\r\n\r\n",
            "GET / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        (
            b"GET / HTTP/1.9\r\nHost: h\r\n\r\n",
            "GET / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        // absolute-form: the target's authority wins over Host.
        (
            b"GET http://a.example:8080/p?q HTTP/1.1\r\nHost: other.example\r\n\r\n",
            "GET http://a.example:8080/p?q Http11 path=/p query=Some(\"q\") host=Some(\"a.example:8080\") None keep_alive=true expect_continue=false",
        ),
        (
            b"GET HTTPS://a.example HTTP/1.1\r\nHost: a.example\r\n\r\n",
            "GET HTTPS://a.example Http11 path=/ query=None host=Some(\"a.example\") None keep_alive=true expect_continue=false",
        ),
        (
            b"GET http://a.example/ HTTP/1.0\r\n\r\n",
            "GET http://a.example/ Http10 path=/ query=None host=Some(\"a.example\") None keep_alive=false expect_continue=false",
        ),
        // asterisk-form and authority-form.
        (
            b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
            "OPTIONS * Http11 path=* query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        (
            b"OPTIONS http://h HTTP/1.1\r\nHost: h\r\n\r\n",
            "OPTIONS http://h Http11 path=* query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        (
            b"CONNECT h.example:443 HTTP/1.1\r\nHost: h.example:443\r\n\r\n",
            "CONNECT h.example:443 Http11 path= query=None host=Some(\"h.example:443\") None keep_alive=true expect_continue=false",
        ),
        // Methods other than the known ones are the server's business.
        (
            b"PURGE / HTTP/1.1\r\nHost: h\r\n\r\n",
            "PURGE / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        (
            b"get / HTTP/1.1\r\nHost: h\r\n\r\n",
            "get / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        (
            b"X!#$%&'*+-.^_`|~0 / HTTP/1.1\r\nHost: h\r\n\r\n",
            "X!#$%&'*+-.^_`|~0 / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        // Framing.
        (
            b"POST /f HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n",
            "POST /f Http11 path=/f query=None host=Some(\"h\") Length(5) keep_alive=true expect_continue=false",
        ),
        (
            b"POST /f HTTP/1.1\r\nHost: h\r\ncontent-length: 0\r\n\r\n",
            "POST /f Http11 path=/f query=None host=Some(\"h\") Length(0) keep_alive=true expect_continue=false",
        ),
        (
            b"POST /f HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /f Http11 path=/f query=None host=Some(\"h\") Chunked keep_alive=true expect_continue=false",
        ),
        (
            b"POST /f HTTP/1.1\r\nHost: h\r\nTRANSFER-ENCODING:  Chunked \t\r\n\r\n",
            "POST /f Http11 path=/f query=None host=Some(\"h\") Chunked keep_alive=true expect_continue=false",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n",
            "GET / Http11 path=/ query=None host=Some(\"h\") Length(3) keep_alive=true expect_continue=false",
        ),
        // `_` makes a different field that frames nothing (RFC 9110 §17.10).
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent_Length: 5\r\nTransfer_Encoding: chunked\r\n\r\n",
            "POST / Http11 path=/ query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent_Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / Http11 path=/ query=None host=Some(\"h\") Length(6) keep_alive=true expect_continue=false",
        ),
        // Expect.
        (
            b"PUT /u HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            "PUT /u Http11 path=/u query=None host=Some(\"h\") Length(1) keep_alive=true expect_continue=true",
        ),
        (
            b"PUT /u HTTP/1.1\r\nHost: h\r\nexpect: 100-Continue\r\n\r\n",
            "PUT /u Http11 path=/u query=None host=Some(\"h\") None keep_alive=true expect_continue=true",
        ),
        (
            b"PUT /u HTTP/1.1\r\nHost: h\r\nExpect: something-else\r\n\r\n",
            "PUT /u Http11 path=/u query=None host=Some(\"h\") None keep_alive=true expect_continue=false",
        ),
    ];
    for &(input, expected) in cases {
        let (head, len) = parse_complete(input);
        assert_eq!(len, input.len(), "{:?}", show(input));
        assert_eq!(summary(&head), expected, "{:?}", show(input));
    }
}

#[test]
fn known_methods() {
    let cases = [
        ("GET", Method::Get),
        ("HEAD", Method::Head),
        ("POST", Method::Post),
        ("PUT", Method::Put),
        ("DELETE", Method::Delete),
        ("OPTIONS", Method::Options),
        ("TRACE", Method::Trace),
        ("PATCH", Method::Patch),
    ];
    for (name, method) in cases {
        let input = format!("{name} /x HTTP/1.1\r\nHost: h\r\n\r\n");
        let (head, _) = parse_complete(input.as_bytes());
        assert_eq!(head.method, method);
        assert_eq!(head.method.as_str(), name);
        assert!(head.method.is_known());
    }
    let (head, _) = parse_complete(b"CONNECT h:1 HTTP/1.1\r\nHost: h:1\r\n\r\n");
    assert_eq!((head.method.as_str(), head.method.is_known()), ("CONNECT", true));
}

#[test]
fn unknown_methods_are_parsed_for_the_server_to_refuse() {
    let long = "A".repeat(100);
    for name in ["get", "Get", "PROPFIND", "BREW", long.as_str()] {
        let input = format!("{name} / HTTP/1.1\r\nHost: h\r\n\r\n");
        let (head, _) = parse_complete(input.as_bytes());
        assert_eq!(head.method, Method::Other(name.to_owned()));
        assert_eq!(head.method.as_str(), name);
        assert!(!head.method.is_known());
    }
}

#[test]
fn version_strings() {
    assert_eq!(Version::Http10.as_str(), "HTTP/1.0");
    assert_eq!(Version::Http11.as_str(), "HTTP/1.1");
}

#[test]
fn field_values_and_lookup() {
    let input = b"GET / HTTP/1.1\r\nHost: h\r\nX-A:   spaced  out \t\r\nx-a:\r\nX-Bin: \x80\xff\r\n\
                  X-Tab: a\tb\r\nAccept: */*\r\n\r\n";
    let (head, _) = parse_complete(input);
    let names: Vec<&str> = head.headers().map(|h| h.name).collect();
    assert_eq!(names, ["Host", "X-A", "x-a", "X-Bin", "X-Tab", "Accept"]);
    assert_eq!(head.header("x-A"), Some(&b"spaced  out"[..]));
    assert_eq!(head.header_str("X-A"), Some("spaced  out"));
    let all: Vec<&[u8]> = head.headers_named("X-A").collect();
    assert_eq!(all, [&b"spaced  out"[..], b""]);
    assert_eq!(head.header("x-bin"), Some(&b"\x80\xff"[..]));
    assert_eq!(head.header_str("x-bin"), None, "not UTF-8");
    assert_eq!(head.header("X-Tab"), Some(&b"a\tb"[..]));
    assert_eq!(head.header("missing"), None);
    assert_eq!(head.headers_named("missing").count(), 0);
    // A list field's lines are one list (RFC 9110 §5.3).
    assert_eq!(head.list_header("x-a").as_deref(), Some("spaced  out, "));
    assert!(
        matches!(head.list_header("Accept"), Some(std::borrow::Cow::Borrowed("*/*"))),
        "one line: borrowed"
    );
    assert_eq!(head.list_header("x-bin"), None, "not UTF-8");
    assert_eq!(head.list_header("missing"), None);
}

#[test]
fn leading_empty_lines_are_skipped_and_counted() {
    for blank_lines in [1, 2, 5, 50] {
        let input = ["\r\n".repeat(blank_lines), "GET / HTTP/1.1\r\nHost: h\r\n\r\n".into()].concat();
        let (head, len) = parse_complete(input.as_bytes());
        assert_eq!(len, input.len());
        assert_eq!(head.target(), "/");
    }
    assert_eq!(parse(b""), Ok(Parsed::Partial));
    assert_eq!(parse(b"\r\n\r\n\r"), Ok(Parsed::Partial));
}

#[test]
fn head_length_excludes_the_body() {
    let input = b"POST /u HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
    let (head, len) = parse_complete(input);
    assert_eq!(&input[len..], b"hello");
    assert_eq!(head.framing, BodyFraming::Length(5));
}

#[test]
fn pipelined_requests() {
    let first = b"GET /one HTTP/1.1\r\nHost: h\r\n\r\n".as_slice();
    let second = b"POST /two HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi".as_slice();
    let third = b"\r\nGET /three HTTP/1.0\r\n\r\n".as_slice();
    let buf = [first, second, third].concat();

    let (head, len) = parse_complete(&buf);
    assert_eq!((head.path(), len), ("/one", first.len()));
    let rest = &buf[len..];
    let (head, len) = parse_complete(rest);
    assert_eq!((head.path(), len), ("/two", second.len() - 2));
    let rest = &rest[len + 2..];
    let (head, len) = parse_complete(rest);
    assert_eq!((head.path(), len), ("/three", third.len()));
}

#[test]
fn a_large_buffer_is_fine_if_the_head_fits() {
    let mut input = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000\r\n\r\n".to_vec();
    let head_len = input.len();
    input.resize(head_len + 1_000_000, b'x');
    let Ok(Parsed::Complete { len, .. }) = parse(&input) else {
        panic!("not complete");
    };
    assert_eq!(len, head_len);
}

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

/// Bytes that mean something somewhere in a head.
const INTERESTING: &[u8] = b"\x00\t\n\r \"#%,/:;?@[\\]aZ0\x7f\x80\xff";

/// Every single-byte replacement, deletion and insertion applied to `seed`.
fn mutations(seed: &[u8]) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    for i in 0..seed.len() {
        let mut deleted = seed.to_vec();
        deleted.remove(i);
        all.push(deleted);
        for &b in INTERESTING {
            let mut replaced = seed.to_vec();
            replaced[i] = b;
            all.push(replaced);
            let mut inserted = seed.to_vec();
            inserted.insert(i, b);
            all.push(inserted);
        }
    }
    all
}

/// Whatever the input, the parser does not panic, and feeding it a prefix
/// never contradicts what it says about the whole: a prefix is `Partial`,
/// the same error, or (past the head) the same head.
#[test]
fn mutated_requests_parse_consistently() {
    let seeds: &[&[u8]] = &[
        b"GET /a?b HTTP/1.1\r\nHost: h:1\r\nConnection: close\r\n\r\n",
        b"POST http://h/ HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"\r\nPUT / HTTP/1.0\r\nContent-Length: 1\r\n\r\nx",
        b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n",
    ];
    let limits = Limits { max_request_line: 40, max_header_bytes: 90, max_headers: 3, max_field_size: 30 };
    for seed in seeds {
        for input in mutations(seed) {
            let whole = parse_request(&input, &limits);
            for end in 0..input.len() {
                let prefix = parse_request(&input[..end], &limits);
                let consistent = match (&prefix, &whole) {
                    (Ok(Parsed::Partial), _) => true,
                    (Err(a), Err(b)) => a == b,
                    (Ok(Parsed::Complete { len, .. }), Ok(Parsed::Complete { len: whole_len, .. })) => {
                        prefix == whole && len == whole_len
                    }
                    _ => false,
                };
                assert!(consistent, "{:?}: prefix of {end}: {prefix:?}, whole: {whole:?}", show(&input));
            }
        }
    }
}

#[test]
fn redirected_head_keeps_host_and_chosen_fields() {
    let input = b"POST http://example.com:81/cgi?x HTTP/1.1\r\nHost: other\r\nContent-Length: 2\r\n\
                  Accept: a\r\naccept: b\r\n\r\nhi";
    let (head, _) = parse_complete(input);
    let moved = head.redirected("/new/place?y=1", |h| !h.name.eq_ignore_ascii_case("content-length"));
    assert_eq!((moved.target(), moved.path(), moved.query()), ("/new/place?y=1", "/new/place", Some("y=1")));
    assert_eq!(moved.host(), Some("example.com:81"), "the host as the request named it");
    let names: Vec<&str> = moved.headers().map(|h| h.name).collect();
    assert_eq!(names, ["Host", "Accept", "accept"]);
    assert_eq!(moved.headers_named("ACCEPT").collect::<Vec<_>>(), [b"a", b"b"]);
    assert_eq!(
        (moved.method, moved.framing),
        (Method::Post, BodyFraming::Length(2)),
        "for the caller to change"
    );

    let plain = head.redirected("/p", |_| false);
    assert_eq!((plain.path(), plain.query(), plain.headers().len()), ("/p", None, 0));

    let (old, _) = parse_complete(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(old.redirected("/q", |_| true).host(), None);
}

#[test]
fn implied_paths() {
    let (head, _) = parse_complete(b"OPTIONS http://h HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!((head.target(), head.path()), ("http://h", "*"));
    let (head, _) = parse_complete(b"GET http://h?q HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!((head.path(), head.query()), ("/", Some("q")));
    let (head, _) = parse_complete(b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n");
    assert_eq!((head.path(), head.host()), ("", Some("h:443")));
}

/// The text accessors read their spans without a second UTF-8 check; these
/// are the cases where the text is not only ASCII or not where it was parsed.
#[test]
fn text_spans_read_back_their_text() {
    let (head, _) = parse_complete(b"GET /a?b HTTP/1.1\r\nHost: h:1\r\n\r\n");
    assert_eq!(
        (head.target(), head.path(), head.query(), head.host()),
        ("/a?b", "/a", Some("b"), Some("h:1"))
    );
    assert_refused(
        b"GET / HTTP/1.1\r\nHost: h\r\nX-\xc3\xa9: v\r\n\r\n",
        BadRequest("invalid header field name"),
    );

    let (head, _) = parse_complete(b"GET / HTTP/1.1\r\nHost: h\r\nX-A: \xff\xc3\r\nX-B: v\r\n\r\n");
    let moved = head.redirected("/caf\u{e9}/\u{1f600}?q=\u{fc}", |_| true);
    assert_eq!(moved.target(), "/caf\u{e9}/\u{1f600}?q=\u{fc}");
    assert_eq!((moved.path(), moved.query()), ("/caf\u{e9}/\u{1f600}", Some("q=\u{fc}")));
    assert_eq!(moved.host(), Some("h"));
    let fields: Vec<(&str, &[u8])> = moved.headers().map(|h| (h.name, h.value)).collect();
    assert_eq!(fields, [("Host", &b"h"[..]), ("X-A", b"\xff\xc3"), ("X-B", b"v")]);
    assert_eq!(moved.header_str("x-a"), None, "a value that is not UTF-8");
    let again = moved.redirected("/\u{e9}", |h| h.name == "X-B");
    assert_eq!((again.path(), again.query(), again.host()), ("/\u{e9}", None, Some("h")));
    assert_eq!(again.headers().map(|h| h.name).collect::<Vec<_>>(), ["X-B"]);
}

#[test]
fn ascii_only_converts_ascii() {
    assert_eq!(ascii(b"GET"), Some("GET"));
    assert_eq!(ascii(b""), Some(""));
    assert_eq!(ascii(b"caf\xc3\xa9"), None);
    assert_eq!(ascii(b"\xff"), None);
}

/// Names of fields browsers, tools and the server's own lookups use, and
/// tokens with the bytes a name may have.
const FIELD_NAMES: &[&str] = &[
    "Host",
    "User-Agent",
    "Accept",
    "Accept-Language",
    "Accept-Encoding",
    "Connection",
    "Referer",
    "Cookie",
    "Upgrade-Insecure-Requests",
    "Sec-Fetch-Site",
    "Sec-Fetch-Mode",
    "Sec-Fetch-User",
    "Sec-Fetch-Dest",
    "Cache-Control",
    "Pragma",
    "Content-Length",
    "Content-Type",
    "Authorization",
    "Origin",
    "Priority",
    "DNT",
    "TE",
    "X-Forwarded-For",
    "If-Match",
    "If-Unmodified-Since",
    "If-None-Match",
    "If-Modified-Since",
    "Range",
    "If-Range",
    "Expect",
    "a",
    "Z",
    "x",
    "~",
    "!#$%&'*+-.^_`|~",
    "0",
    "9z",
    "a-b-c-d-e-f-g-h-i-j-k-l-m",
];

/// `name` in upper, lower and alternating case.
fn case_variants(name: &str) -> [String; 3] {
    let alternating =
        name.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
    [name.to_ascii_uppercase(), name.to_ascii_lowercase(), alternating]
}

#[test]
fn name_filter_never_hides_an_inserted_name() {
    let mut filter = NameFilter::default();
    assert!(!filter.may_contain(b"Host"), "an empty filter holds nothing");
    for (i, name) in FIELD_NAMES.iter().enumerate() {
        filter.insert(name.as_bytes());
        for earlier in &FIELD_NAMES[..=i] {
            for variant in case_variants(earlier) {
                assert!(filter.may_contain(variant.as_bytes()), "{variant} after {name}");
            }
        }
    }
    // Every one-byte name (tokens are ASCII, but the filter takes any bytes).
    for b in 0..=255u8 {
        let mut filter = NameFilter::default();
        filter.insert(&[b]);
        assert!(filter.may_contain(&[b]));
        assert!(
            filter.may_contain(&[b.to_ascii_lowercase()]) && filter.may_contain(&[b.to_ascii_uppercase()])
        );
    }
}

#[test]
fn lookups_find_every_field_in_any_case() {
    for count in [1, 2, 5, FIELD_NAMES.len()] {
        let present = &FIELD_NAMES[..count];
        let mut input = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for (i, name) in present.iter().enumerate().filter(|(_, name)| !name.eq_ignore_ascii_case("host")) {
            input.extend_from_slice(format!("{name}: {i}\r\n").as_bytes());
        }
        input.extend_from_slice(b"\r\n");
        let head = match parse(&input) {
            Ok(Parsed::Complete { head, .. }) => head,
            other => panic!("{:?}: {other:?}", show(&input)),
        };
        for name in FIELD_NAMES {
            let linear = head.headers().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
            assert_eq!(
                linear.is_some(),
                present.contains(name) || name.eq_ignore_ascii_case("host"),
                "{name}"
            );
            for variant in case_variants(name) {
                assert_eq!(head.header(&variant), linear, "{variant} of {count} fields");
                assert_eq!(head.headers_named(&variant).next(), linear, "{variant} of {count} fields");
                let redirected = head.redirected("/r", |_| true);
                assert_eq!(redirected.header(&variant), linear, "{variant} after a redirect");
            }
        }
        assert_eq!(head.header(""), None);
        assert_eq!(head.header("Hos"), None);
        assert_eq!(head.header("Hostt"), None);
    }
}

/// Around the number of fields the first try has slots for, heads parse and
/// fail as with all the slots at once.
#[test]
fn fields_beyond_the_first_slots() {
    let with_fields = |count: usize, last: &str| {
        format!("GET / HTTP/1.1\r\nHost: h\r\n{}{last}\r\n", "X: y\r\n".repeat(count - 1)).into_bytes()
    };
    for count in FIRST_FIELD_SLOTS - 2..=FIRST_FIELD_SLOTS + 2 {
        let (head, _) = parse_complete(&with_fields(count, ""));
        assert_eq!(head.headers().len(), count);
        assert_eq!(head.headers_named("x").count(), count - 1);
        assert_refused(&with_fields(count, "X : y\r\n"), BadRequest("invalid header field name"));
        assert_refused(&with_fields(count, "X: \x01\r\n"), BadRequest("invalid header field value"));
        assert_refused(&with_fields(count, "X: y\n"), BadRequest("invalid line ending"));
        for max_headers in [count - 1, count, count + 1] {
            let limits = Limits { max_headers, ..Limits::default() };
            if count <= max_headers {
                parse_complete_with(&with_fields(count, ""), &limits);
            } else {
                assert_refused_with(&with_fields(count, ""), &limits, HeadersTooLarge);
            }
        }
    }
}

/// The line check as first written, every byte looked at: what the check
/// from the field names must agree with.
fn reference_check_field_lines(section: &[u8], max_field_size: usize) -> Result<(), ParseError> {
    for line in section.split_inclusive(|&b| b == b'\n') {
        let Some(content) = line.strip_suffix(b"\r\n") else {
            return Err(INVALID_LINE_ENDING);
        };
        if content.len() > max_field_size {
            return Err(ParseError::HeadersTooLarge);
        }
    }
    Ok(())
}

#[test]
fn field_lines_checked_from_the_names_as_from_every_byte() {
    let seeds: &[&[u8]] = &[
        b"\r\n",
        b"Host: h\r\n\r\n",
        b"A: 1\r\nBb: 22 \r\nC:\r\nD: \t\r\n\r\n",
        b"A: 1\nB: 2\r\n\r\n",
        b"A: 1\r\nB: 2\n\r\n",
        b"A: 1\r\nB: 2\r\n\n",
        b"\n",
        b"Long-Name: long value\r\nX: y\r\n\r\n",
    ];
    let mut checked = 0;
    for seed in seeds {
        let mut inputs = mutations(seed);
        inputs.push(seed.to_vec());
        for input in inputs {
            let mut slots = [httparse::EMPTY_HEADER; 8];
            let Ok(httparse::Status::Complete((len, fields))) = httparse::parse_headers(&input, &mut slots)
            else {
                continue;
            };
            for max in [0, 1, 3, 4, 5, 12, 100] {
                assert_eq!(
                    check_field_lines(&input[..len], fields, max),
                    reference_check_field_lines(&input[..len], max),
                    "{:?} with lines up to {max}",
                    show(&input[..len])
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} complete sections");
}

#[test]
fn reused_buffers_give_the_same_heads() {
    let inputs: &[&[u8]] = &[
        b"GET /a?b HTTP/1.1\r\nHost: h\r\n\r\n",
        b"POST http://example.com/cgi?x HTTP/1.1\r\nHost: other\r\nContent-Length: 2\r\nAccept: a\r\n\
          accept: b\r\nUser-Agent: a long one, longer than the heads before it\r\n\r\nhi",
        b"GET / HTTP/1.0\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: [::1]:8080\r\nX: \xff\r\n\r\n",
    ];
    let mut spare = None;
    for _ in 0..2 {
        for input in inputs {
            let kept = spare.as_ref().map(HeadBuffers::held);
            assert_eq!(
                parse_request_reusing(&input[..input.len() / 2], &Limits::default(), &mut spare),
                Ok(Parsed::Partial)
            );
            assert_eq!(spare.as_ref().map(HeadBuffers::held), kept, "a partial head leaves the spare alone");
            let reused = parse_request_reusing(input, &Limits::default(), &mut spare);
            assert!(spare.is_none(), "a complete head takes the spare");
            assert_eq!(reused, parse(input), "{:?}", show(input));
            let Ok(Parsed::Complete { head, .. }) = reused else { panic!("{:?}", show(input)) };
            assert_eq!(head.header("accept"), parse_complete(input).0.header("accept"));
            let buffers = head.redirected("/r?q", |_| true).into_buffers();
            assert!(buffers.held() > 0);
            spare = Some(buffers);
        }
    }
    assert_eq!(
        parse_request_reusing(b"GET / HTTP/1.1\r\n\r\n", &Limits::default(), &mut spare),
        Err(BadRequest("missing Host header"))
    );
}
