//! Mutated heads, field lookups in any case and past the first slots,
//! spans and reuse: what a parsed head holds and reads back.

use super::*;

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
