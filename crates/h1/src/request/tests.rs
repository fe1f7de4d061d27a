//! The request parser's tests: heads that parse (here), heads refused
//! (`refused.rs`), what a parsed head holds (`fields.rs`).

use super::*;

mod fields;
mod refused;

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
