//! `cgi-echo`: answers with the request body, streamed (RFC 3875 §4.2: the
//! body is on stdin, `CONTENT_LENGTH` bytes of it), with the request's
//! `CONTENT_TYPE` (or `application/octet-stream`).

use std::io::{self, Read, Write};

pub fn main() -> io::Result<()> {
    let length: u64 = std::env::var("CONTENT_LENGTH").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let content_type =
        std::env::var("CONTENT_TYPE").unwrap_or_else(|_| "application/octet-stream".to_string());
    let mut out = io::stdout().lock();
    write!(out, "Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n")?;
    // Copies as it reads: the server streams both ways at once.
    io::copy(&mut io::stdin().lock().take(length), &mut out)?;
    out.flush()
}
