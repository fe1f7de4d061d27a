//! A raw HTTP/1.1 client: exact bytes out, strictly parsed responses in.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::tls::ClientStream;
use std::time::Duration;

/// Read and write timeout of every [`Client`] socket.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Upper bound on a response head, so a broken server can't make a test
/// buffer forever.
const MAX_HEAD: usize = 256 * 1024;

/// One parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The protocol version from the status line, e.g. `HTTP/1.1`.
    pub version: String,
    /// The status code.
    pub status: u16,
    /// The reason phrase (may be empty).
    pub reason: String,
    /// Header fields in order, duplicates kept, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body after de-chunking (empty for HEAD, 1xx, 204 and 304).
    pub body: Vec<u8>,
    /// The response head exactly as received, including the final CRLFCRLF.
    pub raw_head: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// All values of header `name` (case-insensitive), in order.
    pub fn headers_all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    /// The value of header `name`; panics if it is missing or repeated.
    #[track_caller]
    pub fn header_one(&self, name: &str) -> &str {
        match self.headers_all(name).as_slice() {
            [v] => v,
            vs => panic!("expected exactly one `{name}` header, got {vs:?}\n{}", self.describe()),
        }
    }

    /// Whether the `Connection` header lists `token` (case-insensitive).
    pub fn connection_has(&self, token: &str) -> bool {
        self.headers_all("connection")
            .iter()
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    }

    /// The `Content-Length` value as a number, if present and valid.
    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")?.trim().parse().ok()
    }

    /// The body as (lossy) UTF-8.
    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Head plus the first 300 body bytes, for failure messages.
    pub fn describe(&self) -> String {
        let n = self.body.len().min(300);
        format!(
            "{}[body: {} bytes] {:?}{}",
            String::from_utf8_lossy(&self.raw_head),
            self.body.len(),
            String::from_utf8_lossy(&self.body[..n]),
            if n < self.body.len() { "..." } else { "" }
        )
    }

    /// Panics (with the whole response) unless the status is `status`.
    #[track_caller]
    pub fn assert_status(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "unexpected status\n{}", self.describe());
        self
    }
}

/// One GET on a fresh connection to a server that closes after answering
/// (the admin listeners): (status, content-type, body).
pub fn get_once(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head[9..12].parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: ").or_else(|| l.strip_prefix("content-type: ")))
        .unwrap_or_default()
        .to_string();
    (status, ctype, body.to_string())
}

/// A raw client connection with 5 s read and write timeouts.
///
/// Bytes received but not yet consumed by a parse are kept, so pipelined
/// responses can be read one after the other.
#[derive(Debug)]
pub struct Client {
    stream: ClientStream,
    buf: Vec<u8>,
    eof: bool,
}

impl Client {
    /// Connects to `addr`; panics on failure.
    #[track_caller]
    pub fn connect(addr: SocketAddr) -> Client {
        Client::try_connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
    }

    /// Connects to `addr`.
    pub fn try_connect(addr: SocketAddr) -> io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Client { stream: ClientStream::over(stream)?, buf: Vec::new(), eof: false })
    }

    /// Connects to `addr` from the loopback address `from` (127.0.0.x: a
    /// client of its own as far as a per-address cap is concerned).
    pub fn connect_from(addr: SocketAddr, from: std::net::Ipv4Addr) -> Client {
        use rustix::net::{AddressFamily, SocketType};
        let connected = (|| -> io::Result<TcpStream> {
            let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None)?;
            rustix::net::bind(&fd, &SocketAddr::from((from, 0)))?;
            rustix::net::connect(&fd, &addr)?;
            Ok(TcpStream::from(fd))
        })();
        let stream = connected.unwrap_or_else(|e| panic!("connect to {addr} from {from}: {e}"));
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        let stream = ClientStream::over(stream).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Client { stream, buf: Vec::new(), eof: false }
    }

    /// The underlying stream (e.g. to change its timeouts).
    pub fn stream(&self) -> &TcpStream {
        self.stream.tcp()
    }

    /// Writes all of `bytes`; panics on error.
    #[track_caller]
    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.try_send(bytes).unwrap_or_else(|e| panic!("send: {e}"))
    }

    /// Writes all of `bytes`. Useful when the server may legitimately close
    /// before reading everything (oversized requests).
    pub fn try_send(&mut self, bytes: impl AsRef<[u8]>) -> io::Result<()> {
        self.stream.write_all(bytes.as_ref())?;
        self.stream.flush()
    }

    /// Writes all of `bytes` while reading what the server sends meanwhile
    /// (kept for the next parse), so a server that answers before it has
    /// read the whole request — a script that prints first — cannot
    /// deadlock with a client that only writes. One thread, so it works
    /// over TLS too, where a socket cannot be written from a second thread.
    pub fn send_reading(&mut self, bytes: impl AsRef<[u8]>) -> io::Result<()> {
        for piece in bytes.as_ref().chunks(16 << 10) {
            self.stream.write_all(piece)?;
            self.stream.flush()?;
            self.stream.tcp().set_read_timeout(Some(Duration::from_millis(5)))?;
            let drained = loop {
                match self.fill() {
                    Ok(0) => break Ok(()),
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        break Ok(())
                    }
                    Err(e) => break Err(e),
                }
            };
            self.stream.tcp().set_read_timeout(Some(IO_TIMEOUT))?;
            drained?;
        }
        Ok(())
    }

    /// Half-closes the write side (the server sees EOF).
    pub fn shutdown_write(&mut self) {
        self.stream.shutdown_write();
    }

    /// Sends `METHOD TARGET HTTP/1.1`, `Host: localhost`, the given extra
    /// header lines, and reads the response. Panics on any error.
    #[track_caller]
    pub fn request(&mut self, method: &str, target: &str, headers: &[&str]) -> Response {
        let mut req = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\n");
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        self.send(req);
        self.read_response(method)
    }

    /// Reads one response to a request made with `method` (which decides
    /// whether a body follows). Panics with details on any error.
    #[track_caller]
    pub fn read_response(&mut self, method: &str) -> Response {
        match self.try_read_response(method) {
            Ok(r) => r,
            Err(e) => panic!(
                "reading the response to {method}: {e}\nunparsed bytes: {:?}",
                String::from_utf8_lossy(&self.buf[..self.buf.len().min(500)])
            ),
        }
    }

    /// Reads one response; framing follows RFC 9112 §6.3: no body for HEAD,
    /// 1xx, 204 and 304; chunked; Content-Length; else until close.
    ///
    /// The parse is strict (CRLF line endings, `HTTP/x.y NNN reason`,
    /// `name: value` fields) so malformed output from the server is an
    /// error, not something the test silently tolerates.
    pub fn try_read_response(&mut self, method: &str) -> io::Result<Response> {
        let head_len = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(invalid("response head too large"));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    if self.buf.is_empty() {
                        "connection closed before any response byte"
                    } else {
                        "connection closed in the middle of a response head"
                    },
                ));
            }
        };
        let raw_head: Vec<u8> = self.buf.drain(..head_len).collect();
        let mut resp = parse_head(&raw_head)?;

        let no_body = method.eq_ignore_ascii_case("HEAD")
            || (100..200).contains(&resp.status)
            || resp.status == 204
            || resp.status == 304;
        let te = resp.headers_all("transfer-encoding");
        if no_body {
        } else if !te.is_empty() {
            if te.len() != 1 || !te[0].trim().eq_ignore_ascii_case("chunked") {
                return Err(invalid(format!("unsupported Transfer-Encoding {te:?}")));
            }
            if resp.header("content-length").is_some() {
                return Err(invalid("response has both Transfer-Encoding and Content-Length"));
            }
            resp.body = self.read_chunked()?;
        } else if let Some(cl) = resp.header("content-length") {
            if resp.headers_all("content-length").len() != 1 {
                return Err(invalid("several Content-Length headers"));
            }
            let n: usize = cl.trim().parse().map_err(|_| invalid(format!("bad Content-Length {cl:?}")))?;
            resp.body = self.read_exact_body(n)?;
        } else {
            resp.body = self.read_body_to_close()?;
        }
        Ok(resp)
    }

    /// Reads until at least `n` bytes are buffered, without consuming them
    /// (a later [`Client::read_response`] parses them). Use it to know a
    /// response is in flight. Panics on EOF or timeout.
    #[track_caller]
    pub fn wait_for_bytes(&mut self, n: usize) {
        while self.buf.len() < n {
            match self.fill() {
                Ok(0) => panic!("connection closed after {} of {n} bytes", self.buf.len()),
                Ok(_) => {}
                Err(e) => panic!("waiting for {n} bytes (have {}): {e}", self.buf.len()),
            }
        }
    }

    /// Reads until the server closes, returning everything not yet consumed.
    /// Panics if the connection is still open after the read timeout.
    /// A reset counts as closed.
    #[track_caller]
    pub fn read_to_end_expect_closed(&mut self) -> Vec<u8> {
        match self.read_until_close() {
            Ok(v) => v,
            Err(e) => panic!(
                "expected the server to close the connection, but: {e}; received so far: {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Whether the server has closed the connection: true on EOF or reset;
    /// false if bytes arrive (they are kept for the next parse) or nothing
    /// happens within the read timeout (so this blocks for up to 5 s on an
    /// open, idle connection — to show a connection is *open*, send another
    /// request instead).
    pub fn is_closed(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        match self.fill() {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) if is_reset(&e) => true,
            Err(_) => false,
        }
    }

    /// Reads more bytes into the buffer; returns 0 at EOF. A reset after
    /// EOF-worthy data is reported as EOF.
    fn fill(&mut self) -> io::Result<usize> {
        if self.eof {
            return Ok(0);
        }
        let mut tmp = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut tmp) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(0);
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_reset(&e) => {
                    self.eof = true;
                    return Err(e);
                }
                Err(e) if is_timeout(&e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("read timed out after {IO_TIMEOUT:?}"),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn read_exact_body(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("connection closed after {} of {n} body bytes", self.buf.len()),
                ));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    fn read_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).take(i).collect();
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(invalid("chunk line too long"));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside a chunked body",
                ));
            }
        }
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line()?;
            let line = String::from_utf8_lossy(&line).into_owned();
            let size_str = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_str, 16)
                .map_err(|_| invalid(format!("bad chunk size line {line:?}")))?;
            if size == 0 {
                // Trailer section, up to the empty line.
                while !self.read_line()?.is_empty() {}
                return Ok(body);
            }
            body.extend(self.read_exact_body(size)?);
            if !self.read_line()?.is_empty() {
                return Err(invalid("chunk data not followed by CRLF"));
            }
        }
    }

    /// A body delimited by the close (RFC 9112 §6.3, item 8): complete only
    /// at a clean end of stream. A reset is the server (or its kernel)
    /// aborting the connection, and the kernel drops whatever it had not
    /// sent yet, so the bytes read so far may be any prefix of the body:
    /// an error naming the reset, not a shorter body that only a byte
    /// comparison would catch, without its cause.
    fn read_body_to_close(&mut self) -> io::Result<Vec<u8>> {
        loop {
            match self.fill() {
                Ok(0) => return Ok(std::mem::take(&mut self.buf)),
                Ok(_) => {}
                Err(e) if is_reset(&e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "{e} after {} bytes of a body delimited by the close: \
                             the end of such a body is a clean close, a reset may have dropped its tail",
                            self.buf.len()
                        ),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn read_until_close(&mut self) -> io::Result<Vec<u8>> {
        loop {
            match self.fill() {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if is_reset(&e) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }
}

fn parse_head(raw: &[u8]) -> io::Result<Response> {
    let text = std::str::from_utf8(raw).map_err(|_| invalid("response head is not UTF-8"))?;
    let text = &text[..text.len() - 4];
    if text.split("\r\n").any(|l| l.contains(['\r', '\n'])) {
        return Err(invalid(format!("bare CR or LF in response head {text:?}")));
    }
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("").to_string();
    let code = parts.next().unwrap_or("");
    let reason = parts.next().unwrap_or("").to_string();
    let valid_version = version.len() == 8
        && version.starts_with("HTTP/")
        && version.as_bytes()[5].is_ascii_digit()
        && version.as_bytes()[6] == b'.'
        && version.as_bytes()[7].is_ascii_digit();
    if !valid_version || code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(format!("bad status line {status_line:?}")));
    }
    let status = code.parse().expect("three digits");
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) =
            line.split_once(':').ok_or_else(|| invalid(format!("header line without colon {line:?}")))?;
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(invalid(format!("bad header name in {line:?}")));
        }
        headers.push((name.to_string(), value.trim_matches([' ', '\t']).to_string()));
    }
    Ok(Response { version, status, reason, headers, body: Vec::new(), raw_head: raw.to_vec() })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn is_reset(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A client connected to a one-shot server that writes `reply` after
    /// reading a little, then closes.
    fn canned(reply: &[u8]) -> Client {
        let reply = reply.to_vec();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            // Dribble the reply to exercise partial reads.
            for chunk in reply.chunks(7) {
                s.write_all(chunk).unwrap();
            }
        });
        let mut c = Client::connect(addr);
        c.send("x");
        c
    }

    #[test]
    fn pipelined_content_length_responses() {
        let mut c = canned(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello\
              HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
        );
        let r = c.read_response("GET");
        assert_eq!((r.status, r.version.as_str(), r.reason.as_str()), (200, "HTTP/1.1", "OK"));
        assert_eq!(r.body, b"hello");
        assert_eq!(r.headers_all("X-A"), ["1", "2"]);
        assert_eq!(r.content_length(), Some(5));
        let r = c.read_response("GET");
        assert_eq!(r.status, 404);
        assert!(r.body.is_empty());
        assert!(c.is_closed());
    }

    #[test]
    fn chunked_head_and_304_framing() {
        let mut c = canned(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n\
              HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n\
              HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n\
              HTTP/1.1 200 OK\r\n\r\nuntil close",
        );
        assert_eq!(c.read_response("GET").body, b"abcde");
        assert!(c.read_response("HEAD").body.is_empty());
        assert_eq!(c.read_response("GET").status, 304);
        assert_eq!(c.read_response("GET").body, b"until close");
    }

    #[test]
    fn malformed_responses_are_errors() {
        for reply in [
            &b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        ] {
            assert!(canned(reply).try_read_response("GET").is_err(), "{:?}", String::from_utf8_lossy(reply));
        }
    }

    /// A body delimited by the close that ends in a reset is an error
    /// that says so, never a shorter body.
    #[test]
    fn a_reset_does_not_end_a_body_delimited_by_the_close() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            s.write_all(b"HTTP/1.0 200 OK\r\n\r\npart of a body").unwrap();
            // SO_LINGER 0: the close is a reset.
            rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
        });
        let mut c = Client::connect(addr);
        c.send("x");
        server.join().unwrap();
        let e = c.try_read_response("GET").expect_err("a reset is no end of the body");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
        assert!(e.to_string().contains("delimited by the close"), "{e}");
        // A clean close still ends one.
        assert_eq!(canned(b"HTTP/1.0 200 OK\r\n\r\nwhole").read_response("GET").body, b"whole");
    }

    #[test]
    fn wait_for_bytes_keeps_them_for_the_parse() {
        let mut c = canned(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        c.wait_for_bytes(3);
        assert_eq!(c.read_response("GET").body, b"ok");
        assert!(c.read_to_end_expect_closed().is_empty());
    }
}
