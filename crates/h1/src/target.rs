//! The four forms of request-target (RFC 9112 §3.2) and the authority
//! syntax shared by absolute-form, authority-form and the `Host` field.

use std::net::Ipv6Addr;

use crate::{Method, ParseError};

/// A request-target split into the parts the server routes by.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target<'a> {
    /// See [`RequestHead::path`](crate::RequestHead::path).
    pub(crate) path: Path<'a>,
    /// The query without its `?`.
    pub(crate) query: Option<&'a str>,
    /// The authority of an absolute-form or authority-form target, which
    /// takes the place of `Host` (RFC 9112 §3.2.2, §3.3).
    pub(crate) authority: Option<&'a str>,
}

/// The path of a target: received as part of it, or implied by its form.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Path<'a> {
    Received(&'a str),
    Implied(&'static str),
}

/// Whether `b` may appear in a request-target.
///
/// This is every visible ASCII character except `#`: a fragment is never
/// sent (RFC 9110 §7.1), and SP, controls and non-ASCII bytes are not part of
/// any URI (RFC 3986 §2). Like nginx and httparse, the RFC 3986 characters
/// that must be percent-encoded but are harmless here (`"<>\^`{|}`) are
/// tolerated because real clients send them; the path decoder downstream
/// decides what they mean.
pub(crate) fn is_target_char(b: u8) -> bool {
    matches!(b, b'!'..=b'~') && b != b'#'
}

/// Splits `target` (already checked with [`is_target_char`]) by form.
pub(crate) fn parse<'a>(method: &Method, target: &'a str) -> Result<Target<'a>, ParseError> {
    // authority-form is only for CONNECT, and CONNECT only takes that form
    // (RFC 9112 §3.2.3). It has no path.
    if matches!(method, Method::Connect) {
        return if is_valid_authority(target.as_bytes(), PortRule::Required) {
            Ok(Target { path: Path::Implied(""), query: None, authority: Some(target) })
        } else {
            Err(ParseError::BadRequest("CONNECT needs an authority-form target"))
        };
    }
    if target == "*" {
        // asterisk-form is only for a server-wide OPTIONS (RFC 9112 §3.2.4).
        return if matches!(method, Method::Options) {
            Ok(Target { path: Path::Received(target), query: None, authority: None })
        } else {
            Err(ParseError::BadRequest("asterisk-form target without OPTIONS"))
        };
    }
    if target.starts_with('/') {
        let (path, query) = split_query(target);
        return Ok(Target { path: Path::Received(path), query, authority: None });
    }
    // absolute-form (RFC 9112 §3.2.2), which servers MUST accept. Only http
    // and https name resources this server can have.
    let rest = strip_prefix_ignore_case(target, "http://")
        .or_else(|| strip_prefix_ignore_case(target, "https://"))
        .ok_or(ParseError::BadRequest("invalid request-target"))?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(authority_end);
    // RFC 9110 §4.2.1 and §4.2.4: an empty host and userinfo both make an
    // http(s) URI invalid; the authority syntax below rules out both.
    if !is_valid_authority(authority.as_bytes(), PortRule::Optional) {
        return Err(ParseError::BadRequest("invalid authority in request-target"));
    }
    let (path, query) = split_query(path_and_query);
    let path = match path {
        // RFC 9112 §3.2.4: an OPTIONS for an absolute URI with an empty path
        // and no query is the server-wide OPTIONS that asterisk-form spells `*`.
        "" if matches!(method, Method::Options) && query.is_none() => Path::Implied("*"),
        // RFC 9110 §4.2.3: an empty path is equivalent to "/".
        "" => Path::Implied("/"),
        path => Path::Received(path),
    };
    Ok(Target { path, query, authority: Some(authority) })
}

fn split_query(path_and_query: &str) -> (&str, Option<&str>) {
    // A plain byte loop: paths are short, and str's pattern search costs
    // more to set up than this takes. '?' is ASCII, so it splits on a char
    // boundary.
    match path_and_query.bytes().position(|b| b == b'?') {
        Some(mark) => (&path_and_query[..mark], Some(&path_and_query[mark + 1..])),
        None => (path_and_query, None),
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    // URI schemes are case-insensitive (RFC 3986 §3.1).
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

/// Whether an authority must carry a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortRule {
    /// `uri-host [ ":" port ]`, as in `Host` and absolute-form.
    Optional,
    /// `uri-host ":" port`, as in authority-form.
    Required,
}

/// Whether `s` is `uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2),
/// without userinfo.
///
/// Beyond the grammar, this refuses what no http(s) authority can be and what
/// turns a host into a path when it is used to pick a virtual host:
/// - an empty host (RFC 9110 §4.2.1: MUST reject as invalid),
/// - an empty port (`host:`): RFC 3986 allows it, but `port` is `1*DIGIT`
///   for us, and it must be at most 65535,
/// - empty labels: a leading dot or `..` (as lighttpd and nginx do),
/// - IPv6 zone identifiers and IPvFuture literals, which have no use here.
pub(crate) fn is_valid_authority(s: &[u8], port_rule: PortRule) -> bool {
    let (host_ok, port) = if let Some(literal) = s.strip_prefix(b"[") {
        let Some(close) = literal.iter().position(|&b| b == b']') else {
            return false;
        };
        let port = match &literal[close + 1..] {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return false,
        };
        (is_ipv6(&literal[..close]), port)
    } else {
        let Some(host_len) = reg_name_len(s) else {
            return false;
        };
        // `reg_name_len` stops only at the end or at a ':'.
        (true, s.get(host_len + 1..))
    };
    host_ok
        && match port {
            Some(port) => is_port(port),
            None => port_rule == PortRule::Optional,
        }
}

fn is_ipv6(literal: &[u8]) -> bool {
    std::str::from_utf8(literal).is_ok_and(|s| s.parse::<Ipv6Addr>().is_ok())
}

/// `unreserved / sub-delims` of RFC 3986 but `.`, which ends a label: the
/// bytes of a reg-name that stand for themselves.
static REG_NAME_CHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = matches!(
            b as u8,
            // unreserved
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'~'
            // sub-delims
            | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
        );
        b += 1;
    }
    table
};

/// The length of the `reg-name` (RFC 3986 §3.2.2, which also covers IPv4
/// addresses) that `s` starts with, if it is non-empty, has no empty labels
/// and is followed by nothing or by a `:`. One pass, as this runs for the
/// Host of every request.
fn reg_name_len(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    // A '.' here would make a label empty: a leading dot or "..".
    let mut label_start = true;
    while let Some(&b) = s.get(i) {
        if REG_NAME_CHAR[usize::from(b)] {
            i += 1;
        } else if b == b'.' && !label_start {
            label_start = true;
            i += 1;
            continue;
        } else if b == b'%' && s.get(i + 1..i + 3).is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
            i += 3;
        } else if b == b':' {
            break;
        } else {
            return None;
        }
        label_start = false;
    }
    (i > 0).then_some(i)
}

/// `port = 1*DIGIT` with a value of at most 65535.
fn is_port(port: &[u8]) -> bool {
    let mut value = 0u32;
    for &b in port {
        if !b.is_ascii_digit() {
            return false;
        }
        value = value * 10 + u32::from(b - b'0');
        if value > u32::from(u16::MAX) {
            return false;
        }
    }
    !port.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path (received or implied alike), query and authority.
    type Parts<'a> = (&'a str, Option<&'a str>, Option<&'a str>);

    fn target(method: Method, target: &str) -> Result<Parts<'_>, ParseError> {
        parse(&method, target).map(|t| {
            let path = match t.path {
                Path::Received(path) => path,
                Path::Implied(path) => path,
            };
            (path, t.query, t.authority)
        })
    }

    fn ok<'a>(path: &'a str, query: Option<&'a str>, authority: Option<&'a str>) -> Parts<'a> {
        (path, query, authority)
    }

    #[test]
    fn target_chars() {
        let allowed: Vec<u8> = (0..=255u8).filter(|&b| is_target_char(b)).collect();
        let expected: Vec<u8> = (0x21..=0x7e).filter(|&b| b != b'#').collect();
        assert_eq!(allowed, expected);
    }

    #[test]
    fn origin_form() {
        let cases = [
            ("/", ok("/", None, None)),
            ("/a/b", ok("/a/b", None, None)),
            ("/a%20b?x=1&y=%2F", ok("/a%20b", Some("x=1&y=%2F"), None)),
            ("/?", ok("/", Some(""), None)),
            ("/a?b?c", ok("/a", Some("b?c"), None)),
            ("//double", ok("//double", None, None)),
        ];
        for (input, expected) in cases {
            assert_eq!(target(Method::Get, input), Ok(expected), "{input}");
        }
    }

    #[test]
    fn absolute_form() {
        let cases = [
            ("http://example.com/p?q", ok("/p", Some("q"), Some("example.com"))),
            ("http://example.com", ok("/", None, Some("example.com"))),
            ("http://example.com?q", ok("/", Some("q"), Some("example.com"))),
            ("https://h:8443/a/b", ok("/a/b", None, Some("h:8443"))),
            ("HTTP://H/x", ok("/x", None, Some("H"))),
            ("hTtPs://h/", ok("/", None, Some("h"))),
            ("http://[::1]:8080/", ok("/", None, Some("[::1]:8080"))),
            ("http://127.0.0.1/", ok("/", None, Some("127.0.0.1"))),
        ];
        for (input, expected) in cases {
            assert_eq!(target(Method::Get, input), Ok(expected), "{input}");
        }
    }

    #[test]
    fn absolute_form_of_server_wide_options() {
        assert_eq!(target(Method::Options, "http://h"), Ok(ok("*", None, Some("h"))));
        assert_eq!(target(Method::Options, "http://h/"), Ok(ok("/", None, Some("h"))));
        assert_eq!(target(Method::Options, "http://h?q"), Ok(ok("/", Some("q"), Some("h"))));
    }

    #[test]
    fn asterisk_and_authority_forms() {
        assert_eq!(target(Method::Options, "*"), Ok(ok("*", None, None)));
        assert_eq!(target(Method::Connect, "example.com:443"), Ok(ok("", None, Some("example.com:443"))));
        assert_eq!(target(Method::Connect, "[2001:db8::1]:443"), Ok(ok("", None, Some("[2001:db8::1]:443"))));
    }

    #[test]
    fn invalid_targets() {
        let invalid = ParseError::BadRequest("invalid request-target");
        let bad_authority = ParseError::BadRequest("invalid authority in request-target");
        let asterisk = ParseError::BadRequest("asterisk-form target without OPTIONS");
        let connect = ParseError::BadRequest("CONNECT needs an authority-form target");
        let cases = [
            (Method::Get, "x", invalid),
            (Method::Get, "example.com", invalid),
            (Method::Get, "example.com:80", invalid),
            (Method::Get, "ftp://h/", invalid),
            (Method::Get, "http:/h/", invalid),
            (Method::Get, "http:", invalid),
            (Method::Get, "*x", invalid),
            (Method::Options, "*/x", invalid),
            (Method::Get, "http:///p", bad_authority),
            (Method::Get, "http://u@h/p", bad_authority),
            (Method::Get, "http://u:p@h/p", bad_authority),
            (Method::Get, "http://h:99999/", bad_authority),
            (Method::Get, "http://h:/", bad_authority),
            (Method::Get, "http://h\\x/", bad_authority),
            (Method::Get, "*", asterisk),
            (Method::Head, "*", asterisk),
            (Method::Connect, "/", connect),
            (Method::Connect, "example.com", connect),
            (Method::Connect, "http://example.com:443/", connect),
            (Method::Connect, "*", connect),
            (Method::Connect, "u@example.com:443", connect),
            (Method::Options, "example.com:443", invalid),
        ];
        for (method, input, expected) in cases {
            assert_eq!(target(method.clone(), input), Err(expected), "{method:?} {input}");
        }
    }

    #[test]
    fn authorities() {
        let valid: &[&str] = &[
            "example.com",
            "EXAMPLE.com",
            "example.com.",
            "a",
            "localhost:8080",
            "h:0",
            "h:65535",
            "h:00080",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "[2001:db8::7]",
            "[::ffff:192.0.2.1]:1",
            "my_host-1.example",
            "xn--bcher-kva.example",
            "%41bc",
            "a~b",
            "a,b",
            "a;b=c",
        ];
        for host in valid {
            assert!(is_valid_authority(host.as_bytes(), PortRule::Optional), "{host:?}");
        }
        let invalid: &[&[u8]] = &[
            b"",
            b":80",
            b"::80",
            b"h:",
            b"h:99999",
            b"h:65536",
            b"h:-1",
            b"h:+80",
            b"h:8 0",
            b"h:80:80",
            b"a@b",
            b"user:pass@b",
            b"a/b",
            b"a\\b",
            b"a b",
            b" a",
            b"a\t",
            b"a\x01b",
            b"a\x7fb",
            b"a\xc3\xa9",
            b"..",
            b".a",
            b"a..b",
            b"a..",
            b"%4",
            b"%zz",
            b"a%",
            b"[::1",
            b"::1",
            b"[::1]x",
            b"[::1]:",
            b"[::1]:99999",
            b"[127.0.0.1]",
            b"[fe80::1%25eth0]",
            b"[v1.x]",
            b"[]",
            b"a?b",
            b"a#b",
            b"a[b",
        ];
        for host in invalid {
            assert!(!is_valid_authority(host, PortRule::Optional), "{:?}", String::from_utf8_lossy(host));
        }
    }

    /// The authority check as first written, one rule at a time: what the
    /// one-pass [`is_valid_authority`] must agree with.
    fn reference_authority(s: &[u8], port_rule: PortRule) -> bool {
        fn is_reg_name(host: &[u8]) -> bool {
            if host.is_empty() || host.starts_with(b".") || host.windows(2).any(|w| w == b"..") {
                return false;
            }
            let mut i = 0;
            while i < host.len() {
                match host[i] {
                    b'%' => {
                        let escape = host.get(i + 1..i + 3);
                        if !escape.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                            return false;
                        }
                        i += 3;
                    }
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => i += 1,
                    b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => i += 1,
                    _ => return false,
                }
            }
            true
        }
        fn is_port(port: &[u8]) -> bool {
            !port.is_empty()
                && port
                    .iter()
                    .try_fold(0u32, |value, &b| {
                        let value = value * 10 + char::from(b).to_digit(10)?;
                        (value <= u32::from(u16::MAX)).then_some(value)
                    })
                    .is_some()
        }
        let (host_ok, port) = if let Some(literal) = s.strip_prefix(b"[") {
            let Some(close) = literal.iter().position(|&b| b == b']') else {
                return false;
            };
            let port = match &literal[close + 1..] {
                [] => None,
                [b':', port @ ..] => Some(port),
                _ => return false,
            };
            (is_ipv6(&literal[..close]), port)
        } else {
            match s.iter().position(|&b| b == b':') {
                Some(colon) => (is_reg_name(&s[..colon]), Some(&s[colon + 1..])),
                None => (is_reg_name(s), None),
            }
        };
        host_ok
            && match port {
                Some(port) => is_port(port),
                None => port_rule == PortRule::Optional,
            }
    }

    fn assert_agrees_with_reference(host: &[u8]) {
        for rule in [PortRule::Optional, PortRule::Required] {
            assert_eq!(
                is_valid_authority(host, rule),
                reference_authority(host, rule),
                "{:?} {rule:?}",
                String::from_utf8_lossy(host)
            );
        }
    }

    #[test]
    fn one_pass_authority_agrees_with_the_rules() {
        let table: &[&[u8]] = &[
            b"127.0.0.1:18441",
            b"127.0.0.1",
            b"localhost:8080",
            b"example.com.",
            b"example.com.:80",
            b"a.b.c:0",
            b"h:65535",
            b"h:65536",
            b"h:000000000080",
            b"h:99999999999999999999",
            b"h:",
            b"h::",
            b":",
            b":80",
            b"",
            b".",
            b".:80",
            b"a.",
            b"a..",
            b"..a",
            b"a..b:1",
            b"a.%2E.b",
            b"%2E%2E",
            b"%",
            b"%4",
            b"%4:1",
            b"%41",
            b"%41:1",
            b"a%:1",
            b"%g1",
            b"%3A:1",
            b"u@h",
            b"u:p@h:1",
            b"@h",
            b"[::1]",
            b"[::1]:",
            b"[::1]:80",
            b"[::1]80",
            b"[::1",
            b"::1",
            b"[fe80::1%25eth0]:80",
            b"[v1.fe]:80",
            b"[]",
            b"[127.0.0.1]",
            b"h\xc3\xa9:80",
            b"\xc3\xa9",
            b"\xff",
            b"h\x00",
            b"h :80",
            b"h: 80",
            b"h:8\t",
            b"h/p",
            b"h?q",
            b"h#f",
            b"h[",
            b"h]",
            b"h:80/",
            b"!$&'()*+,;=-_~:1",
        ];
        for host in table {
            assert_agrees_with_reference(host);
        }
        // Every string of up to 5 bytes from an alphabet of the bytes that
        // matter: letters, digits, the separators and a non-ASCII byte.
        let alphabet = b"aF09.:%[]@/ \xc3";
        let mut host = Vec::new();
        fn all(alphabet: &[u8], host: &mut Vec<u8>, left: usize) {
            assert_agrees_with_reference(host);
            if left > 0 {
                for &b in alphabet {
                    host.push(b);
                    all(alphabet, host, left - 1);
                    host.pop();
                }
            }
        }
        all(alphabet, &mut host, 5);
    }

    #[test]
    fn authority_form_needs_a_port() {
        assert!(is_valid_authority(b"h:1", PortRule::Required));
        assert!(is_valid_authority(b"[::1]:1", PortRule::Required));
        assert!(!is_valid_authority(b"h", PortRule::Required));
        assert!(!is_valid_authority(b"[::1]", PortRule::Required));
    }
}
