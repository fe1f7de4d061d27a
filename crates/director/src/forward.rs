//! Requests as the director forwards them: re-serialised from the parsed
//! head (bad-input note M1: never the client's raw framing), hop-by-hop
//! fields removed (RFC 9110 §7.6.1, including those `Connection` names),
//! `X-Forwarded-For`, `Forwarded` and `Via` extended, `X-Forwarded-Proto`
//! set. Each of the four is one field line however many the client sent, so
//! what the director adds is four lines at most, and [`over_limits`] holds
//! the result to the limits the director holds clients to.

use std::net::{IpAddr, SocketAddr};

use h1::{BodyFraming, RequestHead};

use crate::response::{is_hop_by_hop, named_by_connection};

/// The head to send to the backend for `head`, from client `peer`, which
/// came over TLS if `https`; `backend` names the backend for an HTTP/1.0
/// request without Host.
pub fn request_head(head: &RequestHead, peer: SocketAddr, https: bool, backend: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    // Origin-form always (RFC 9112 §3.2.1); the authority of an
    // absolute-form target becomes Host (§3.2.2), consistently with the
    // host h1 validated.
    match head.path() {
        "*" => out.push(b'*'),
        path => {
            out.extend_from_slice(if path.is_empty() { b"/" } else { path.as_bytes() });
            if let Some(q) = head.query() {
                out.push(b'?');
                out.extend_from_slice(q.as_bytes());
            }
        }
    }
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(head.host().unwrap_or(backend).as_bytes());
    out.extend_from_slice(b"\r\n");
    let connection: Vec<&[u8]> = head.headers_named("connection").collect();
    let mut xff: Option<Vec<u8>> = None;
    let mut forwarded: Option<Vec<u8>> = None;
    let mut via: Option<Vec<u8>> = None;
    for h in head.headers() {
        let name = h.name;
        if name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("expect")
            || is_hop_by_hop(name)
            || named_by_connection(connection.iter().copied(), name)
        {
            continue;
        }
        // Chains the director extends rather than copies. They are the
        // client's claims: admission never looks at them (note M7).
        if name.eq_ignore_ascii_case("x-forwarded-for") {
            append_list(&mut xff, h.value);
            continue;
        }
        if name.eq_ignore_ascii_case("forwarded") {
            append_list(&mut forwarded, h.value);
            continue;
        }
        if name.eq_ignore_ascii_case("via") {
            append_list(&mut via, h.value);
            continue;
        }
        // The scheme is the director's to say: a client's claim is dropped.
        if name.eq_ignore_ascii_case("x-forwarded-proto") {
            continue;
        }
        field(&mut out, name, h.value);
    }
    let ip = peer.ip();
    append_list(&mut xff, ip.to_string().as_bytes());
    field(&mut out, "X-Forwarded-For", xff.as_deref().unwrap_or_default());
    let proto = if https { "https" } else { "http" };
    field(&mut out, "X-Forwarded-Proto", proto.as_bytes());
    let node = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("\"[{v6}]\""),
    };
    let mut element = format!("for={node};proto={proto}");
    if let Some(host) = head.host() {
        element.push_str(&format!(";host=\"{host}\""));
    }
    append_list(&mut forwarded, element.as_bytes());
    field(&mut out, "Forwarded", forwarded.as_deref().unwrap_or_default());
    append_list(&mut via, if head.version == h1::Version::Http10 { b"1.0 modus" } else { b"1.1 modus" });
    field(&mut out, "Via", via.as_deref().unwrap_or_default());
    match head.framing {
        BodyFraming::None => {}
        BodyFraming::Length(n) => field(&mut out, "Content-Length", n.to_string().as_bytes()),
        BodyFraming::Chunked => field(&mut out, "Transfer-Encoding", b"chunked"),
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Why `fwd`, a head [`request_head`] made, breaks `limits` — those the
/// director holds clients to, which are `modus serve`'s, so a modus
/// backend's — or `None` if it does not. A client's head within the limits
/// can break them once forwarded (the fields the director adds, a chain it
/// extended): it is refused here with a 431 that says why, rather than by
/// the backend.
pub fn over_limits(fwd: &[u8], limits: &h1::Limits) -> Option<String> {
    // Field lines without their LF (the CR stays): the request line and the final empty line left out.
    let (mut fields, mut too_long) = (0, None);
    for line in fwd.split(|&b| b == b'\n').skip(1).filter(|l| l.len() > 1) {
        fields += 1;
        if too_long.is_none() && line.len() - 1 > limits.max_field_size {
            too_long = Some(line);
        }
    }
    if fields > limits.max_headers {
        return Some(format!(
            "with the director's own fields (X-Forwarded-For, X-Forwarded-Proto, Forwarded, Via) the request \
             would have {fields} header fields, more than the {} a backend takes",
            limits.max_headers
        ));
    }
    if let Some(long) = too_long {
        let name = long.split(|&b| b == b':').next().unwrap_or_default();
        return Some(format!(
            "the {} field the director would forward is {} bytes long, more than the {} a backend takes",
            String::from_utf8_lossy(name),
            long.len() - 1,
            limits.max_field_size
        ));
    }
    if fwd.len() > limits.max_header_bytes {
        return Some(format!(
            "with the director's own fields the request head would be {} bytes, more than the {} a backend takes",
            fwd.len(),
            limits.max_header_bytes
        ));
    }
    None
}

fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn append_list(list: &mut Option<Vec<u8>>, value: &[u8]) {
    match list {
        Some(l) => {
            l.extend_from_slice(b", ");
            l.extend_from_slice(value);
        }
        None => *list = Some(value.to_vec()),
    }
}

/// Appends `data` as one chunk (nothing for empty data, which would end
/// the body).
pub fn encode_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk and an empty trailer section.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(raw: &str) -> String {
        let head = match h1::parse_request(raw.as_bytes(), &h1::Limits::default()).unwrap() {
            h1::Parsed::Complete { head, .. } => head,
            h1::Parsed::Partial => panic!("partial"),
        };
        String::from_utf8(request_head(&head, "192.0.2.7:5555".parse().unwrap(), false, "10.0.0.1:80"))
            .unwrap()
    }

    #[test]
    fn hop_by_hop_fields_are_removed() {
        let out = forwarded(
            "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n\
             Keep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nProxy-Authorization: x\r\nProxy-Connection: y\r\n\
             Accept: */*\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
        );
        assert_eq!(
            out,
            "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nX-Forwarded-For: 192.0.2.7\r\n\
             X-Forwarded-Proto: http\r\nForwarded: for=192.0.2.7;proto=http;host=\"example.com\"\r\n\
             Via: 1.1 modus\r\nContent-Length: 3\r\n\r\n"
        );
    }

    #[test]
    fn the_scheme_is_the_directors_to_say() {
        let raw = "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: https\r\n\r\n";
        let head = match h1::parse_request(raw.as_bytes(), &h1::Limits::default()).unwrap() {
            h1::Parsed::Complete { head, .. } => head,
            h1::Parsed::Partial => panic!("partial"),
        };
        let peer = "192.0.2.7:5555".parse().unwrap();
        let plain = String::from_utf8(request_head(&head, peer, false, "b")).unwrap();
        assert_eq!(plain.matches("X-Forwarded-Proto").count(), 1, "{plain}");
        assert!(plain.contains("X-Forwarded-Proto: http\r\n") && plain.contains(";proto=http;"), "{plain}");
        let tls = String::from_utf8(request_head(&head, peer, true, "b")).unwrap();
        assert!(tls.contains("X-Forwarded-Proto: https\r\n") && tls.contains(";proto=https;"), "{tls}");
    }

    #[test]
    fn forwarding_chains_are_appended() {
        let out = forwarded(
            "POST / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\nForwarded: for=1.1.1.1\r\n\
             Transfer-Encoding: chunked\r\n\r\n",
        );
        assert!(out.contains("\r\nX-Forwarded-For: 1.1.1.1, 192.0.2.7\r\n"), "{out}");
        assert!(out.contains("\r\nForwarded: for=1.1.1.1, for=192.0.2.7;proto=http;host=\"h\"\r\n"), "{out}");
        assert!(out.ends_with("Transfer-Encoding: chunked\r\n\r\n"), "{out}");
        // A client cannot make the director drop what it adds.
        let out = forwarded("GET / HTTP/1.1\r\nHost: h\r\nConnection: X-Forwarded-For, Forwarded\r\n\r\n");
        assert!(out.contains("X-Forwarded-For: 192.0.2.7\r\n") && out.contains("Forwarded: for="), "{out}");
    }

    #[test]
    fn absolute_form_becomes_origin_form_with_its_host() {
        let out = forwarded("GET http://real.example:8080/p?q HTTP/1.1\r\nHost: other\r\n\r\n");
        assert!(out.starts_with("GET /p?q HTTP/1.1\r\nHost: real.example:8080\r\n"), "{out}");
        let out = forwarded("GET / HTTP/1.0\r\n\r\n");
        assert!(out.starts_with("GET / HTTP/1.1\r\nHost: 10.0.0.1:80\r\n"), "{out}");
        assert!(out.contains("Via: 1.0 modus"), "{out}");
        assert!(forwarded("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").starts_with("OPTIONS * HTTP/1.1\r\n"));
    }

    #[test]
    fn via_is_one_line_the_director_extends() {
        let out = forwarded("GET / HTTP/1.1\r\nHost: h\r\nVia: 1.1 a\r\nVia: 1.0 b, 1.1 c\r\n\r\n");
        assert_eq!(out.matches("Via:").count(), 1, "{out}");
        assert!(out.contains("\r\nVia: 1.1 a, 1.0 b, 1.1 c, 1.1 modus\r\n"), "{out}");
    }

    /// A head of `n` fields: Host, then `X-N` fields up to `n`.
    fn head_of(n: usize) -> String {
        let mut raw = String::from("GET / HTTP/1.1\r\nHost: h\r\n");
        for i in 1..n {
            raw.push_str(&format!("X-{i}: v\r\n"));
        }
        raw + "\r\n"
    }

    #[test]
    fn the_fields_the_director_adds_count_against_the_limit() {
        let limits = h1::Limits::default();
        // 96 of the client's fields + the 4 the director adds = 100: taken.
        let fwd = forwarded(&head_of(96));
        assert_eq!(fwd.matches("\r\n").count() - 2, 100, "{fwd}");
        assert_eq!(over_limits(fwd.as_bytes(), &limits), None);
        // 97 are within the client's limit but not once forwarded.
        let why = over_limits(forwarded(&head_of(97)).as_bytes(), &limits).expect("over");
        assert!(why.contains("101 header fields, more than the 100"), "{why}");
        // The client's own forwarding fields are folded into the director's, so they cost nothing.
        let raw = head_of(94).replace("Host: h\r\n", "Host: h\r\nVia: 1.1 a\r\nX-Forwarded-For: 1.1.1.1\r\n");
        assert_eq!(over_limits(forwarded(&raw).as_bytes(), &limits), None);
    }

    #[test]
    fn a_chain_extended_past_the_field_size_is_refused() {
        let limits = h1::Limits::default();
        let chain = vec!["203.0.113.77"; 400].join(", ");
        assert!(chain.len() < limits.max_field_size);
        let raw = format!(
            "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: {chain}\r\nX-Forwarded-For: {chain}\r\n\r\n"
        );
        let why = over_limits(forwarded(&raw).as_bytes(), &limits).expect("over");
        assert!(why.starts_with("the X-Forwarded-For field"), "{why}");
        let small = h1::Limits { max_header_bytes: 120, ..h1::Limits::default() };
        let why =
            over_limits(forwarded("GET / HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes(), &small).expect("over");
        assert!(why.contains("bytes, more than the 120"), "{why}");
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        encode_chunk(&mut out, b"");
        encode_chunk(&mut out, &[b'x'; 26]);
        out.extend_from_slice(LAST_CHUNK);
        assert_eq!(out, [b"1a\r\n".as_slice(), &[b'x'; 26], b"\r\n0\r\n\r\n"].concat());
    }
}
