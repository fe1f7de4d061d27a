//! Incremental HTTP/1.1 response parsing: the head with `httparse`, the
//! body framed by Content-Length, chunked coding or the close of the
//! connection; HEAD, 1xx, 204 and 304 have no body (RFC 9112 §6.3).

/// Why a response could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Malformed head, bad Content-Length, bad chunk framing, head too large.
    Parse,
    /// The connection closed before the body was complete.
    ShortBody,
    /// The connection closed before a complete head.
    Closed,
}

/// Limit on a response head (bytes).
pub const MAX_HEAD: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    Size { n: u64, digits: u32 },
    Ext { n: u64 },
    SizeLf { n: u64 },
    Data(u64),
    DataCr,
    DataLf,
    Trailer(usize),
    TrailerLf(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// A completed response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Bytes of the head (status line and headers).
    pub head_bytes: u64,
    /// Body bytes after removing the transfer coding.
    pub body_bytes: u64,
    /// Bytes on the wire (head + encoded body).
    pub wire_bytes: u64,
    /// The connection may carry another request.
    pub keep_alive: bool,
    /// FNV-1a 64 of the body, when checksumming is on.
    pub checksum: Option<u64>,
}

/// Parses one response at a time; `reset` before the next.
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    resp: Response,
    checksum: bool,
}

/// What `feed` did with the bytes it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes used from the start of the buffer.
    pub consumed: usize,
    /// The response is complete (see [`ResponseParser::response`]).
    pub done: bool,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a 64 of `data`: what `--checksum` computes over each body.
pub fn fnv1a(data: &[u8]) -> u64 {
    fnv(FNV_OFFSET, data)
}

fn fnv(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl ResponseParser {
    /// A parser; `checksum` hashes every body.
    pub fn new(checksum: bool) -> ResponseParser {
        let mut p = ResponseParser {
            state: State::Head,
            resp: Response {
                status: 0,
                head_bytes: 0,
                body_bytes: 0,
                wire_bytes: 0,
                keep_alive: false,
                checksum: None,
            },
            checksum,
        };
        p.reset();
        p
    }

    /// Ready for the next response.
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.resp = Response {
            status: 0,
            head_bytes: 0,
            body_bytes: 0,
            wire_bytes: 0,
            keep_alive: false,
            checksum: self.checksum.then_some(FNV_OFFSET),
        };
    }

    /// The response, once `feed` reported `done`.
    pub fn response(&self) -> Response {
        self.resp
    }

    /// True once any byte of the current response has been consumed.
    pub fn started(&self) -> bool {
        self.state != State::Head || self.resp.wire_bytes > 0
    }

    fn body(&mut self, data: &[u8]) {
        self.resp.body_bytes += data.len() as u64;
        if let Some(h) = self.resp.checksum.as_mut() {
            *h = fnv(*h, data);
        }
    }

    /// Feeds bytes (the unconsumed part of the read buffer). `head_request`:
    /// the request was HEAD, so no body follows whatever the headers say.
    pub fn feed(&mut self, buf: &[u8], head_request: bool) -> Result<Progress, ParseError> {
        // Only the framing fields' values are read, as text.
        fn text(v: &[u8]) -> Result<&str, ParseError> {
            std::str::from_utf8(v).map(str::trim).map_err(|_| ParseError::Parse)
        }
        let mut pos = 0;
        loop {
            match self.state {
                State::Done => return Ok(Progress { consumed: pos, done: true }),
                State::Head => {
                    let mut headers = [httparse::EMPTY_HEADER; 64];
                    let mut r = httparse::Response::new(&mut headers);
                    let n = match r.parse(&buf[pos..]) {
                        Ok(httparse::Status::Complete(n)) => n,
                        Ok(httparse::Status::Partial) => {
                            if buf.len() - pos > MAX_HEAD {
                                return Err(ParseError::Parse);
                            }
                            return Ok(Progress { consumed: pos, done: false });
                        }
                        Err(_) => return Err(ParseError::Parse),
                    };
                    let status = r.code.unwrap_or(0);
                    if (100..200).contains(&status) && status != 101 {
                        // Interim response: skip it, the final one follows.
                        pos += n;
                        self.resp.wire_bytes += n as u64;
                        continue;
                    }
                    let mut length: Option<u64> = None;
                    let mut chunked = false;
                    let mut close = r.version == Some(0);
                    for h in r.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let v = text(h.value)?;
                            let n: u64 = v.parse().map_err(|_| ParseError::Parse)?;
                            if length.is_some_and(|l| l != n) {
                                return Err(ParseError::Parse);
                            }
                            length = Some(n);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = text(h.value)?
                                .rsplit(',')
                                .next()
                                .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            for t in text(h.value)?.split(',').map(str::trim) {
                                if t.eq_ignore_ascii_case("close") {
                                    close = true;
                                } else if t.eq_ignore_ascii_case("keep-alive") && r.version == Some(0) {
                                    close = false;
                                }
                            }
                        }
                    }
                    pos += n;
                    self.resp.status = status;
                    self.resp.head_bytes = n as u64;
                    self.resp.wire_bytes += n as u64;
                    self.resp.keep_alive = !close;
                    self.state = if head_request || status == 204 || status == 304 {
                        State::Done
                    } else if chunked {
                        State::Chunked(Chunk::Size { n: 0, digits: 0 })
                    } else if let Some(l) = length {
                        State::Length(l)
                    } else {
                        self.resp.keep_alive = false;
                        State::UntilClose
                    };
                    if self.state == State::Length(0) {
                        self.state = State::Done;
                    }
                }
                State::Length(rem) => {
                    let take = rem.min((buf.len() - pos) as u64) as usize;
                    self.body(&buf[pos..pos + take]);
                    pos += take;
                    self.resp.wire_bytes += take as u64;
                    if rem == take as u64 {
                        self.state = State::Done;
                    } else {
                        self.state = State::Length(rem - take as u64);
                        return Ok(Progress { consumed: pos, done: false });
                    }
                }
                State::UntilClose => {
                    let data = &buf[pos..];
                    self.body(data);
                    self.resp.wire_bytes += data.len() as u64;
                    return Ok(Progress { consumed: buf.len(), done: false });
                }
                State::Chunked(c) => {
                    if pos == buf.len() {
                        return Ok(Progress { consumed: pos, done: false });
                    }
                    if let Chunk::Data(rem) = c {
                        let take = rem.min((buf.len() - pos) as u64) as usize;
                        self.body(&buf[pos..pos + take]);
                        pos += take;
                        self.resp.wire_bytes += take as u64;
                        let rem = rem - take as u64;
                        self.state = State::Chunked(if rem == 0 { Chunk::DataCr } else { Chunk::Data(rem) });
                        continue;
                    }
                    let b = buf[pos];
                    pos += 1;
                    self.resp.wire_bytes += 1;
                    let next = match (c, b) {
                        (Chunk::Size { n, digits }, b) if b.is_ascii_hexdigit() => {
                            if digits >= 15 {
                                return Err(ParseError::Parse);
                            }
                            let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                            Chunk::Size { n: n * 16 + d, digits: digits + 1 }
                        }
                        (Chunk::Size { n, digits }, b';' | b' ' | b'\t') if digits > 0 => Chunk::Ext { n },
                        (Chunk::Size { n, digits }, b'\r') if digits > 0 => Chunk::SizeLf { n },
                        (Chunk::Ext { n }, b'\r') => Chunk::SizeLf { n },
                        (Chunk::Ext { n }, _) => Chunk::Ext { n },
                        (Chunk::SizeLf { n: 0 }, b'\n') => Chunk::Trailer(0),
                        (Chunk::SizeLf { n }, b'\n') => Chunk::Data(n),
                        (Chunk::DataCr, b'\r') => Chunk::DataLf,
                        (Chunk::DataLf, b'\n') => Chunk::Size { n: 0, digits: 0 },
                        (Chunk::Trailer(len), b'\r') => Chunk::TrailerLf(len),
                        (Chunk::Trailer(len), _) if len < MAX_HEAD => Chunk::Trailer(len + 1),
                        (Chunk::TrailerLf(0), b'\n') => {
                            self.state = State::Done;
                            continue;
                        }
                        (Chunk::TrailerLf(_), b'\n') => Chunk::Trailer(0),
                        _ => return Err(ParseError::Parse),
                    };
                    self.state = State::Chunked(next);
                }
            }
        }
    }

    /// The peer closed the connection: completes a close-delimited body,
    /// otherwise says what was cut short.
    pub fn eof(&mut self) -> Result<Response, ParseError> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Ok(self.resp)
            }
            State::Head => Err(ParseError::Closed),
            _ => Err(ParseError::ShortBody),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes, as reads would deliver it.
    fn parse_in_steps(wire: &[u8], step: usize, head: bool) -> Result<(Response, usize), ParseError> {
        let mut p = ResponseParser::new(true);
        let mut buf = Vec::new();
        let mut fed = 0;
        let mut used = 0;
        while fed < wire.len() {
            let end = (fed + step).min(wire.len());
            buf.extend_from_slice(&wire[fed..end]);
            fed = end;
            let prog = p.feed(&buf, head)?;
            buf.drain(..prog.consumed);
            used += prog.consumed;
            if prog.done {
                return Ok((p.response(), used));
            }
        }
        p.eof().map(|r| (r, used))
    }

    #[test]
    fn content_length_in_any_split() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n";
        for step in [1, 2, 7, 100] {
            let (r, used) = parse_in_steps(wire, step, false).unwrap();
            assert_eq!((r.status, r.body_bytes, r.keep_alive), (200, 5, true));
            assert_eq!(used, 43);
            assert_eq!(r.wire_bytes, 43);
        }
        let (a, _) = parse_in_steps(wire, 3, false).unwrap();
        let (b, _) = parse_in_steps(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhellx", 3, false).unwrap();
        assert_ne!(a.checksum, b.checksum);
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nT: v\r\n\r\n";
        for step in [1, 4, 1000] {
            let (r, used) = parse_in_steps(wire, step, false).unwrap();
            assert_eq!((r.status, r.body_bytes), (200, 11));
            assert_eq!(used, wire.len());
        }
        assert_eq!(
            parse_in_steps(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 100, false),
            Err(ParseError::Parse)
        );
    }

    #[test]
    fn no_body_cases_and_close_delimited() {
        for (wire, head) in [
            (&b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"[..], true),
            (b"HTTP/1.1 204 No Content\r\n\r\n", false),
            (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", false),
            (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", false),
        ] {
            let (r, used) = parse_in_steps(wire, 1000, head).unwrap();
            assert_eq!(r.body_bytes, 0);
            assert_eq!(used, wire.len());
        }
        let (r, _) = parse_in_steps(b"HTTP/1.0 200 OK\r\n\r\nabc", 2, false).unwrap();
        assert_eq!((r.body_bytes, r.keep_alive), (3, false));
        let (r, _) =
            parse_in_steps(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 9, false)
                .unwrap();
        assert!(!r.keep_alive);
    }

    #[test]
    fn errors_are_classified() {
        assert_eq!(
            parse_in_steps(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 5, false),
            Err(ParseError::ShortBody)
        );
        assert_eq!(parse_in_steps(b"HTTP/1.1 200 O", 5, false), Err(ParseError::Closed));
        assert_eq!(parse_in_steps(b"garbage\r\n\r\n", 50, false), Err(ParseError::Parse));
        assert_eq!(
            parse_in_steps(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 50, false),
            Err(ParseError::Parse)
        );
    }
}
