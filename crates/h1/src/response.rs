//! Writing response heads (RFC 9112 §4, §5).

use crate::date::http_date_now;

/// Defines [`reason_phrase`] and [`status_line`] from one list.
macro_rules! statuses {
    ($($code:literal $reason:literal,)*) => {
        /// The reason phrase for `status`: every status code defined in RFC 9110 §15
        /// plus 429 and 431 (RFC 6585), with RFC 9110's names (413 is "Content Too
        /// Large"). `""` for anything else, including the reserved 306 and 418; the
        /// reason phrase is optional (RFC 9112 §4).
        pub fn reason_phrase(status: u16) -> &'static str {
            match status {
                $($code => $reason,)*
                _ => "",
            }
        }

        /// The whole status line of a status with a reason phrase, CRLF
        /// included: one copy instead of four appends.
        fn status_line(status: u16) -> Option<&'static [u8]> {
            match status {
                $($code => Some(concat!("HTTP/1.1 ", $code, " ", $reason, "\r\n").as_bytes()),)*
                _ => None,
            }
        }
    };
}

statuses! {
    100 "Continue",
    101 "Switching Protocols",
    200 "OK",
    201 "Created",
    202 "Accepted",
    203 "Non-Authoritative Information",
    204 "No Content",
    205 "Reset Content",
    206 "Partial Content",
    300 "Multiple Choices",
    301 "Moved Permanently",
    302 "Found",
    303 "See Other",
    304 "Not Modified",
    305 "Use Proxy",
    307 "Temporary Redirect",
    308 "Permanent Redirect",
    400 "Bad Request",
    401 "Unauthorized",
    402 "Payment Required",
    403 "Forbidden",
    404 "Not Found",
    405 "Method Not Allowed",
    406 "Not Acceptable",
    407 "Proxy Authentication Required",
    408 "Request Timeout",
    409 "Conflict",
    410 "Gone",
    411 "Length Required",
    412 "Precondition Failed",
    413 "Content Too Large",
    414 "URI Too Long",
    415 "Unsupported Media Type",
    416 "Range Not Satisfiable",
    417 "Expectation Failed",
    421 "Misdirected Request",
    422 "Unprocessable Content",
    426 "Upgrade Required",
    429 "Too Many Requests",
    431 "Request Header Fields Too Large",
    500 "Internal Server Error",
    501 "Not Implemented",
    502 "Bad Gateway",
    503 "Service Unavailable",
    504 "Gateway Timeout",
    505 "HTTP Version Not Supported",
}

/// An encoder for a response head: status line, field lines, empty line.
///
/// The status line always says `HTTP/1.1`: a server sends the highest
/// version it conforms to whose major version is that of the request
/// (RFC 9110 §2.5), and HTTP/1.0 clients understand it.
///
/// ```
/// let mut head = h1::ResponseHead::new(200);
/// head.header("Content-Type", "text/plain").header_u64("Content-Length", 5);
/// assert_eq!(
///     head.finish(),
///     b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n"
/// );
/// ```
#[derive(Clone, Debug)]
pub struct ResponseHead {
    buf: Vec<u8>,
}

impl ResponseHead {
    /// Starts a head with the status line for `status`, a three-digit code.
    pub fn new(status: u16) -> Self {
        Self::with_capacity(status, 256)
    }

    /// Like [`new`](Self::new), reserving `cap` bytes for the whole head.
    pub fn with_capacity(status: u16, cap: usize) -> Self {
        Self::in_buffer(status, Vec::with_capacity(cap))
    }

    /// Like [`new`](Self::new), writing into `buf` in place of what it
    /// held: a sent head's buffer is reused without allocating again.
    pub fn in_buffer(status: u16, mut buf: Vec<u8>) -> Self {
        debug_assert!((100..=999).contains(&status), "status code {status} does not have three digits");
        buf.clear();
        if let Some(line) = status_line(status) {
            buf.extend_from_slice(line);
            return Self { buf };
        }
        buf.extend_from_slice(b"HTTP/1.1 ");
        let digits = [status / 100 % 10, status / 10 % 10, status % 10];
        buf.extend(digits.map(|digit| b'0' + digit as u8));
        // The SP is required even when the reason phrase is empty (RFC 9112 §4).
        buf.push(b' ');
        buf.extend_from_slice(b"\r\n");
        Self { buf }
    }

    /// Appends the field line `name: value`.
    ///
    /// `name` must be a token and `value` must not contain CR, LF or NUL; debug
    /// builds assert both. In release builds CR, LF and NUL are replaced by SP
    /// (the remedy RFC 9110 §5.5 gives recipients), so that a caller's bug,
    /// such as echoing a decoded `%0d%0a` from a path into `Location`, can
    /// never split the response.
    pub fn header(&mut self, name: &str, value: impl AsRef<[u8]>) -> &mut Self {
        push_field(&mut self.buf, name, value.as_ref());
        self
    }

    /// Appends field lines encoded before (see [`FieldLines`]).
    pub fn lines(&mut self, lines: &FieldLines) -> &mut Self {
        self.buf.extend_from_slice(&lines.buf);
        self
    }

    /// Appends the field line `name: value` with `value` in decimal, without
    /// allocating.
    pub fn header_u64(&mut self, name: &str, value: u64) -> &mut Self {
        self.header(name, itoa::Buffer::new().format(value))
    }

    /// Appends `Date: <now>`, from the per-thread cache of
    /// [`http_date_now`](crate::http_date_now). The date is our own
    /// formatting, so it skips the scan for CR, LF and NUL.
    pub fn date(&mut self) -> &mut Self {
        let date = http_date_now();
        self.buf.reserve(date.len() + 8);
        self.buf.extend_from_slice(b"Date: ");
        self.buf.extend_from_slice(&date);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// Appends the empty line that ends the head and returns the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(b"\r\n");
        self.buf
    }
}

/// Field lines encoded once and appended to many heads with
/// [`ResponseHead::lines`]: a cached file's type, length and validators are
/// the same in every response that sends it whole (Flash's cached response
/// headers, paper 004). Built only through [`header`](Self::header), so it
/// holds the same sanitised bytes a head would.
///
/// ```
/// let mut lines = h1::FieldLines::default();
/// lines.header("Content-Type", "text/plain").header_u64("Content-Length", 5);
/// let mut head = h1::ResponseHead::new(200);
/// head.lines(&lines);
/// assert_eq!(head.finish(), b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldLines {
    buf: Vec<u8>,
}

impl FieldLines {
    /// Appends the field line `name: value`, as [`ResponseHead::header`] does.
    pub fn header(&mut self, name: &str, value: impl AsRef<[u8]>) -> &mut Self {
        push_field(&mut self.buf, name, value.as_ref());
        self
    }

    /// Appends `name: value` with `value` in decimal.
    pub fn header_u64(&mut self, name: &str, value: u64) -> &mut Self {
        self.header(name, itoa::Buffer::new().format(value))
    }

    /// The encoded lines, each ending in CRLF.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// Encodes `name: value` CRLF into `buf` (see [`ResponseHead::header`]).
fn push_field(buf: &mut Vec<u8>, name: &str, value: &[u8]) {
    debug_assert!(crate::syntax::is_token(name.as_bytes()), "invalid field name {name:?}");
    let forbidden = |b: &u8| matches!(b, b'\r' | b'\n' | b'\0');
    // A branch-free fold, not `any`: the compiler vectorises it, and
    // every value of every response head passes through here.
    let has_forbidden = value.iter().fold(false, |found, b| found | forbidden(b));
    debug_assert!(!has_forbidden, "CR, LF or NUL in the value of {name}");
    buf.reserve(name.len() + value.len() + 4);
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b": ");
    if has_forbidden {
        buf.extend(value.iter().map(|b| if forbidden(b) { b' ' } else { *b }));
    } else {
        buf.extend_from_slice(value);
    }
    buf.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_http_date;

    #[test]
    fn status_lines() {
        let cases: &[(u16, &[u8])] = &[
            (200, b"HTTP/1.1 200 OK\r\n\r\n"),
            (100, b"HTTP/1.1 100 Continue\r\n\r\n"),
            (404, b"HTTP/1.1 404 Not Found\r\n\r\n"),
            (413, b"HTTP/1.1 413 Content Too Large\r\n\r\n"),
            (431, b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n"),
            (505, b"HTTP/1.1 505 HTTP Version Not Supported\r\n\r\n"),
            (299, b"HTTP/1.1 299 \r\n\r\n"),
            (999, b"HTTP/1.1 999 \r\n\r\n"),
        ];
        for &(status, expected) in cases {
            assert_eq!(ResponseHead::new(status).finish(), expected, "{status}");
        }
    }

    #[test]
    fn every_status_line_is_code_sp_reason() {
        for status in 100..1000 {
            let expected = format!("HTTP/1.1 {status} {}\r\n\r\n", reason_phrase(status));
            assert_eq!(ResponseHead::new(status).finish(), expected.as_bytes(), "{status}");
        }
    }

    #[test]
    fn reason_phrases() {
        let defined: Vec<u16> = (0..1000).filter(|&s| !reason_phrase(s).is_empty()).collect();
        assert_eq!(
            defined,
            [
                100, 101, 200, 201, 202, 203, 204, 205, 206, 300, 301, 302, 303, 304, 305, 307, 308, 400,
                401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421,
                422, 426, 429, 431, 500, 501, 502, 503, 504, 505
            ]
        );
        assert_eq!(reason_phrase(429), "Too Many Requests");
        assert_eq!(reason_phrase(306), "");
        assert_eq!(reason_phrase(418), "");
    }

    #[test]
    fn fields_in_order() {
        let mut head = ResponseHead::with_capacity(204, 16);
        head.header("Server", "modus")
            .header("X-Bytes", b"\x80\xff".as_slice())
            .header("Empty", "")
            .header("Vary", String::from("Accept-Encoding"));
        assert_eq!(
            head.finish(),
            b"HTTP/1.1 204 No Content\r\nServer: modus\r\nX-Bytes: \x80\xff\r\nEmpty: \r\n\
              Vary: Accept-Encoding\r\n\r\n"
        );
    }

    #[test]
    fn decimal_values() {
        for value in [0, 7, 10, 99, 100, 12_345, 1 << 32, u64::MAX - 1, u64::MAX] {
            let mut head = ResponseHead::new(200);
            head.header_u64("Content-Length", value);
            let expected = format!("HTTP/1.1 200 OK\r\nContent-Length: {value}\r\n\r\n");
            assert_eq!(head.finish(), expected.as_bytes());
        }
    }

    #[test]
    fn date_field() {
        let mut head = ResponseHead::new(200);
        head.date();
        let bytes = head.finish();
        let text = std::str::from_utf8(&bytes).unwrap();
        let date = text
            .strip_prefix("HTTP/1.1 200 OK\r\nDate: ")
            .and_then(|rest| rest.strip_suffix("\r\n\r\n"))
            .unwrap();
        assert!(parse_http_date(date).is_some(), "{date:?}");
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "CR, LF or NUL"))]
    fn never_splits_a_response() {
        let mut head = ResponseHead::new(301);
        head.header("Location", "/a\r\nSet-Cookie: x=1\0");
        assert_eq!(
            head.finish(),
            b"HTTP/1.1 301 Moved Permanently\r\nLocation: /a  Set-Cookie: x=1 \r\n\r\n"
        );
    }

    #[test]
    fn field_lines_are_the_bytes_header_writes() {
        let mut lines = FieldLines::default();
        lines.header("ETag", "\"1-2\"").header_u64("Content-Length", 500);
        let mut direct = ResponseHead::new(200);
        direct.date().header("ETag", "\"1-2\"").header_u64("Content-Length", 500);
        let mut reused = ResponseHead::new(200);
        reused.date().lines(&lines);
        assert_eq!(reused.finish(), direct.finish());
        assert_eq!(lines.as_bytes(), b"ETag: \"1-2\"\r\nContent-Length: 500\r\n");
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "CR, LF or NUL"))]
    fn field_lines_never_split_a_response() {
        let mut lines = FieldLines::default();
        lines.header("Content-Type", "text/plain\r\nX: y");
        assert_eq!(lines.as_bytes(), b"Content-Type: text/plain  X: y\r\n");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invalid field name")]
    fn field_names_are_checked_in_debug_builds() {
        ResponseHead::new(200).header("Bad Name", "x");
    }
}
