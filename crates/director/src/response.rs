//! Backend responses: a strict, sans-IO parse of the head (httparse plus the
//! checks a proxy needs so that it never forwards a response it cannot
//! frame, bad-input note M3), and the head re-serialised for the client.

use h1::has_token;

/// Largest backend response head.
pub const MAX_RESPONSE_HEAD: usize = 32 * 1024;
/// Most header fields in a backend response.
const MAX_RESPONSE_FIELDS: usize = 128;

/// How the backend delimits the response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the backend closes (RFC 9112 §6.3 rule 8).
    Close,
}

/// A validated backend response head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendHead {
    /// Status code, 100..=599.
    pub status: u16,
    /// Reason phrase as sent (validated by httparse: no CR/LF).
    pub reason: Vec<u8>,
    /// Fields in order, including the hop-by-hop ones.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body framing.
    pub framing: Framing,
    /// The backend will close the connection after this response.
    pub backend_close: bool,
}

impl BackendHead {
    /// A 1xx interim response, to be skipped (we never ask for one, but a
    /// server may send `100 Continue` anyway).
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// The outcome of [`parse_response`].
#[derive(Debug, PartialEq, Eq)]
pub enum HeadParse {
    /// A head of `len` bytes.
    Complete(BackendHead, usize),
    /// Need more bytes.
    Partial,
}

/// Parses and validates a response head at the start of `buf`. `head_request`
/// says whether the request was HEAD (no body whatever the fields say).
/// Every error means: answer 502, never reuse the backend connection.
pub fn parse_response(buf: &[u8], head_request: bool) -> Result<HeadParse, &'static str> {
    let window = &buf[..buf.len().min(MAX_RESPONSE_HEAD)];
    let mut slots = [httparse::EMPTY_HEADER; MAX_RESPONSE_FIELDS];
    let mut response = httparse::Response::new(&mut slots);
    let len = match response.parse(window) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_RESPONSE_HEAD => {
            return Err("response head too large")
        }
        Ok(httparse::Status::Partial) => return Ok(HeadParse::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err("too many response fields"),
        Err(_) => return Err("malformed response head"),
    };
    // httparse accepts a bare LF; a peer that disagrees about line ends
    // disagrees about where the message ends.
    for line in window[..len].split_inclusive(|&b| b == b'\n') {
        if !line.ends_with(b"\r\n") {
            return Err("bare LF in response head");
        }
    }
    let version = response.version.ok_or("no version")?;
    let status = response.code.ok_or("no status")?;
    if !(100..=599).contains(&status) {
        return Err("invalid status code");
    }
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut close = version == 0;
    let mut keep_alive = false;
    let mut headers = Vec::with_capacity(response.headers.len());
    for field in response.headers.iter() {
        let (name, value) = (field.name, field.value);
        if name.eq_ignore_ascii_case("content-length") {
            if content_length.is_some() {
                return Err("several Content-Length fields");
            }
            content_length = Some(parse_decimal(value).ok_or("invalid Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if chunked || !trim(value).eq_ignore_ascii_case(b"chunked") {
                return Err("unsupported Transfer-Encoding");
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            close |= has_token(value, "close");
            keep_alive |= has_token(value, "keep-alive");
        }
        headers.push((name.to_owned(), value.to_vec()));
    }
    if version == 0 && keep_alive {
        close = false;
    }
    if chunked && content_length.is_some() {
        return Err("both Transfer-Encoding and Content-Length");
    }
    if chunked && version == 0 {
        return Err("Transfer-Encoding in an HTTP/1.0 response");
    }
    if status == 101 {
        return Err("unrequested protocol switch");
    }
    if status == 204 && (chunked || content_length.is_some_and(|n| n > 0)) {
        return Err("body on a 204 response");
    }
    let framing = if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = content_length {
        Framing::Length(n)
    } else {
        close = true;
        Framing::Close
    };
    Ok(HeadParse::Complete(
        BackendHead {
            status,
            reason: response.reason.unwrap_or("").as_bytes().to_vec(),
            headers,
            framing,
            backend_close: close,
        },
        len,
    ))
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !b" \t".contains(b)).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !b" \t".contains(b)).map_or(start, |e| e + 1);
    &v[start..end]
}

fn parse_decimal(v: &[u8]) -> Option<u64> {
    let v = trim(v);
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        let d = char::from(b).to_digit(10)?;
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// The fields RFC 9110 §7.6.1 makes hop-by-hop, plus the framing fields the
/// director always writes itself, plus the pre-standard `Keep-Alive`,
/// `Proxy-Connection` and `Proxy-Authorization`/`Proxy-Authenticate`
/// (meant for the proxy, not the origin).
pub fn is_hop_by_hop(name: &str) -> bool {
    const HOP: [&str; 9] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "transfer-encoding",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
        "trailer",
    ];
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// Whether any `Connection` field in `headers` names `name` (RFC 9110
/// §7.6.1: those fields are hop-by-hop too).
pub fn named_by_connection<'a>(connection_values: impl Iterator<Item = &'a [u8]>, name: &str) -> bool {
    connection_values.into_iter().any(|v| has_token(v, name))
}

/// How the body goes to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientFraming {
    /// As the backend framed it, or no body.
    Same,
    /// Re-chunked (backend chunked or close-delimited, HTTP/1.1 client).
    Chunked,
    /// Until the director closes (HTTP/1.0 client, chunked or
    /// close-delimited backend body).
    Close,
}

/// The head to send to the client, and how the body is framed for it.
/// `client_11`: the client spoke HTTP/1.1; `keep`: the client connection
/// may stay open as far as the request is concerned.
///
/// The fields the director writes itself (`Transfer-Encoding`,
/// `Connection`) can take a head the backend sent within the limits past
/// them; such a head is refused here (`Err`: why, for the 502) rather than
/// sent to a client that holds responses to the same limits — a second
/// director in front would answer 502 for it anyway, and blame the first.
pub fn client_head(
    head: &BackendHead,
    client_11: bool,
    keep: bool,
) -> Result<(Vec<u8>, ClientFraming, bool), String> {
    let framing = match head.framing {
        Framing::None | Framing::Length(_) => ClientFraming::Same,
        Framing::Chunked | Framing::Close if client_11 => ClientFraming::Chunked,
        Framing::Chunked | Framing::Close => ClientFraming::Close,
    };
    let keep = keep && framing != ClientFraming::Close;
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(head.status.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(&head.reason);
    out.extend_from_slice(b"\r\n");
    let connection: Vec<&[u8]> = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .map(|(_, v)| v.as_slice())
        .collect();
    // The body's framing is written from the parsed framing, never copied:
    // a `Connection` header naming `Content-Length` (a hop-by-hop claim the
    // backend may make) must not leave a keep-alive client without a length.
    let length = match head.framing {
        Framing::Length(n) => Some(n),
        _ => None,
    };
    for (name, value) in &head.headers {
        if is_hop_by_hop(name) || named_by_connection(connection.iter().copied(), name) {
            continue;
        }
        if length.is_some() && name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        // A Trailer announcement stays only if trailers do (they never do:
        // the chunked relay drops them).
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(n) = length {
        out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
    }
    if framing == ClientFraming::Chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    if !keep {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if !client_11 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if let Some(why) = over_limits(&out) {
        return Err(why);
    }
    Ok((out, framing, keep))
}

/// Why `out`, a head [`client_head`] wrote, breaks the limits
/// [`parse_response`] holds backends to, or `None`.
fn over_limits(out: &[u8]) -> Option<String> {
    // The status line and the empty line that ends the head are no fields.
    let fields = out.windows(2).filter(|w| w == b"\r\n").count().saturating_sub(2);
    if fields > MAX_RESPONSE_FIELDS {
        return Some(format!(
            "with the director's own framing fields the response head would have {fields} fields, more than \
             the {MAX_RESPONSE_FIELDS} a response may have"
        ));
    }
    if out.len() > MAX_RESPONSE_HEAD {
        return Some(format!(
            "with the director's own framing fields the response head would be {} bytes, more than the \
             {MAX_RESPONSE_HEAD} a response may have",
            out.len()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<HeadParse, &'static str> {
        parse_response(raw.as_bytes(), false)
    }

    fn head(raw: &str) -> BackendHead {
        match parse(raw) {
            Ok(HeadParse::Complete(h, len)) => {
                assert_eq!(len, raw.find("\r\n\r\n").unwrap() + 4);
                h
            }
            other => panic!("{raw:?}: {other:?}"),
        }
    }

    #[test]
    fn connection_cannot_take_the_length_away() {
        for raw in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: content-length\r\n\r\n",
            "HTTP/1.1 200 OK\r\nConnection: Content-Length, close\r\nContent-Length: 5\r\n\r\n",
        ] {
            let (out, framing, keep) = client_head(&head(raw), true, true).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert_eq!(framing, ClientFraming::Same, "{raw:?}");
            assert_eq!(text.matches("Content-Length: 5\r\n").count(), 1, "{raw:?}\n{text}");
            assert!(keep, "the backend's Connection is hop-by-hop: the client's connection stays");
        }
        let (out, ..) =
            client_head(&head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), true, true).unwrap();
        assert_eq!(String::from_utf8(out).unwrap().matches("Content-Length").count(), 1, "written once");
    }

    #[test]
    fn framing_of_valid_responses() {
        assert_eq!(head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").framing, Framing::Length(5));
        assert_eq!(head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").framing, Framing::Chunked);
        let close = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((close.framing, close.backend_close), (Framing::Close, true));
        assert_eq!(head("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n").framing, Framing::None);
        assert_eq!(head("HTTP/1.1 204 No Content\r\n\r\n").framing, Framing::None);
        assert!(head("HTTP/1.1 100 Continue\r\n\r\n").is_interim());
        let ka10 = head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
        assert!(!ka10.backend_close);
        assert!(head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").backend_close);
        assert!(head("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").backend_close);
        match parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true).unwrap() {
            HeadParse::Complete(h, _) => assert_eq!(h.framing, Framing::None, "HEAD has no body"),
            p => panic!("{p:?}"),
        }
        assert_eq!(parse("HTTP/1.1 200 OK\r\nContent-Le"), Ok(HeadParse::Partial));
    }

    #[test]
    fn unframeable_responses_are_refused() {
        for raw in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/1.1 099 Low\r\n\r\n",
            "HTTP/1.1 700 High\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/2.0 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            "HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(parse(raw).is_err(), "{raw:?} must be refused, got {:?}", parse(raw));
        }
        let huge = format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(MAX_RESPONSE_HEAD));
        assert!(parse(&huge).is_err());
    }

    #[test]
    fn client_head_drops_hop_by_hop_and_reframes() {
        let h = head(
            "HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\n\
             Transfer-Encoding: chunked\r\nContent-Type: text/plain\r\nUpgrade: h2c\r\n\r\n",
        );
        let (bytes, framing, keep) = client_head(&h, true, true).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!((framing, keep), (ClientFraming::Chunked, true));
        let (bytes, framing, keep) = client_head(&h, false, true).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.ends_with("Content-Type: text/plain\r\nConnection: close\r\n\r\n"), "{text}");
        assert_eq!((framing, keep), (ClientFraming::Close, false));
        let cl = head("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n");
        let (bytes, framing, keep) = client_head(&cl, false, true).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n"
        );
        assert_eq!((framing, keep), (ClientFraming::Same, true));
    }

    /// Issue 34 item 7: a head the backend sent at the limits, plus the
    /// director's framing fields, went out past them; what goes out now
    /// always parses again, or is refused.
    #[test]
    fn the_client_head_stays_within_the_limits_backends_are_held_to() {
        let fields = |n: usize| format!("HTTP/1.1 200 OK\r\n{}\r\n", "X:\r\n".repeat(n));
        for (client_11, keep, added) in
            [(true, true, 1), (true, false, 2), (false, true, 1), (false, false, 1)]
        {
            for n in [MAX_RESPONSE_FIELDS - added - 1, MAX_RESPONSE_FIELDS - added, MAX_RESPONSE_FIELDS] {
                let got = client_head(&head(&fields(n)), client_11, keep);
                if n + added <= MAX_RESPONSE_FIELDS {
                    let (out, ..) = got.unwrap_or_else(|e| panic!("{n} fields + {added}: {e}"));
                    assert!(
                        matches!(parse_response(&out, false), Ok(HeadParse::Complete(_, l)) if l == out.len())
                    );
                } else {
                    let why = got.expect_err("over the field limit");
                    assert!(why.contains(&format!("{} fields, more than the 128", n + added)), "{why}");
                }
            }
        }
        // The fuzz target's input: flag 0x01 (an HTTP/1.1 client, not keep-alive), 128 empty fields.
        assert!(client_head(&head(&fields(128)), true, false).is_err());
        // A close-delimited head just under the byte limit: the chunked framing takes it over.
        let pad = MAX_RESPONSE_HEAD - "HTTP/1.1 200 OK\r\nX: \r\n\r\n".len();
        let raw = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(pad));
        assert_eq!(raw.len(), MAX_RESPONSE_HEAD);
        let why = client_head(&head(&raw), true, true).expect_err("over the byte limit");
        assert!(why.contains("bytes, more than the 32768"), "{why}");
        let fits = format!(
            "HTTP/1.1 200 OK\r\nX: {}\r\n\r\n",
            "a".repeat(pad - "Transfer-Encoding: chunked\r\n".len())
        );
        let (out, ..) = client_head(&head(&fits), true, true).unwrap();
        assert_eq!(out.len(), MAX_RESPONSE_HEAD);
        assert!(matches!(parse_response(&out, false), Ok(HeadParse::Complete(_, l)) if l == out.len()));
    }
}
