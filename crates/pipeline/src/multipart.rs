//! The `multipart/byteranges` body of a 206 response to a multi-range
//! request (RFC 9110 §14.6), laid out as byte strings interleaved with file
//! slices so the slices can still be sent with `sendfile`.

use std::fmt::Write as _;
use std::ops::Range;

/// One piece of a multipart body, in sending order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Literal bytes: boundary delimiters and part headers.
    Bytes(Vec<u8>),
    /// `len` bytes of the representation starting at `offset`.
    File {
        /// Offset of the first byte in the representation.
        offset: u64,
        /// Number of bytes.
        len: u64,
    },
}

/// A laid-out `multipart/byteranges` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Multipart {
    /// The response's `Content-Type`: `multipart/byteranges; boundary=...`.
    pub content_type: String,
    /// The body, in order.
    pub parts: Vec<Part>,
    /// The exact body length, for `Content-Length`.
    pub content_length: u64,
}

/// Lays out the body for `ranges` (half-open, non-empty, within
/// `total_len`) of a representation of `total_len` bytes whose type is
/// `content_type`.
///
/// `boundary` is chosen by the caller, e.g. derived from the ETag, so the
/// output is deterministic. It must be 1 to 70 characters that are legal in
/// both a boundary (RFC 2046 §5.1.1) and an unquoted parameter value (a
/// token), must not occur in the selected bytes, and is used as given.
pub fn layout(ranges: &[Range<u64>], total_len: u64, content_type: &str, boundary: &str) -> Multipart {
    debug_assert!(
        (1..=70).contains(&boundary.len())
            && boundary.bytes().all(|b| b.is_ascii_alphanumeric() || b"'+_-.".contains(&b)),
        "boundary {boundary:?} is not a safe token"
    );
    let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
    // Each part's trailing CRLF belongs to the next delimiter (RFC 2046
    // §5.1.1: the delimiter is CRLF "--" boundary), so it rides in the same
    // byte string as the next part's headers.
    let mut head = String::new();
    for range in ranges {
        debug_assert!(range.start < range.end && range.end <= total_len);
        // `write!` into a String cannot fail.
        let _ = write!(
            head,
            "--{boundary}\r\nContent-Type: {content_type}\r\n\
             Content-Range: bytes {}-{}/{total_len}\r\n\r\n",
            range.start,
            range.end - 1
        );
        parts.push(Part::Bytes(std::mem::take(&mut head).into_bytes()));
        parts.push(Part::File { offset: range.start, len: range.end - range.start });
        head.push_str("\r\n");
    }
    let _ = write!(head, "--{boundary}--\r\n");
    parts.push(Part::Bytes(head.into_bytes()));

    let content_length = parts
        .iter()
        .map(|part| match part {
            Part::Bytes(bytes) => bytes.len() as u64,
            Part::File { len, .. } => *len,
        })
        .sum();
    Multipart { content_type: format!("multipart/byteranges; boundary={boundary}"), parts, content_length }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(m: &Multipart, file: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for part in &m.parts {
            match part {
                Part::Bytes(bytes) => body.extend_from_slice(bytes),
                Part::File { offset, len } => {
                    body.extend_from_slice(&file[*offset as usize..(*offset + *len) as usize])
                }
            }
        }
        body
    }

    /// A minimal multipart/byteranges reader: (content-type, content-range,
    /// data) per part.
    fn parse(body: &[u8], boundary: &str) -> Vec<(String, String, Vec<u8>)> {
        let delimiter = format!("\r\n--{boundary}").into_bytes();
        let mut rest = body
            .strip_prefix(format!("--{boundary}").as_bytes())
            .expect("body starts with the first boundary");
        let mut parts = Vec::new();
        loop {
            if let Some(tail) = rest.strip_prefix(b"--") {
                assert_eq!(tail, b"\r\n", "nothing after the close delimiter");
                return parts;
            }
            rest = rest.strip_prefix(b"\r\n").expect("CRLF after boundary");
            let end = rest
                .windows(delimiter.len())
                .position(|w| w == delimiter.as_slice())
                .expect("next delimiter");
            let part = &rest[..end];
            rest = &rest[end + delimiter.len()..];
            let split = part.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            let headers = std::str::from_utf8(&part[..split]).unwrap();
            let mut content_type = String::new();
            let mut content_range = String::new();
            for line in headers.split("\r\n") {
                let (name, value) = line.split_once(": ").unwrap();
                match name {
                    "Content-Type" => content_type = value.to_owned(),
                    "Content-Range" => content_range = value.to_owned(),
                    other => panic!("unexpected header {other}"),
                }
            }
            parts.push((content_type, content_range, part[split + 4..].to_vec()));
        }
    }

    #[test]
    fn exact_layout() {
        let m = layout(&[0..2, 5..6], 10, "text/plain", "B");
        assert_eq!(m.content_type, "multipart/byteranges; boundary=B");
        assert_eq!(
            m.parts,
            vec![
                Part::Bytes(
                    b"--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n".to_vec()
                ),
                Part::File { offset: 0, len: 2 },
                Part::Bytes(
                    b"\r\n--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 5-5/10\r\n\r\n".to_vec()
                ),
                Part::File { offset: 5, len: 1 },
                Part::Bytes(b"\r\n--B--\r\n".to_vec()),
            ]
        );
        let body = render(&m, b"0123456789");
        assert_eq!(
            body,
            b"--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n01\r\n\
              --B\r\nContent-Type: text/plain\r\nContent-Range: bytes 5-5/10\r\n\r\n5\r\n\
              --B--\r\n"
        );
        assert_eq!(m.content_length, body.len() as u64);
    }

    #[test]
    fn round_trip() {
        let file: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        let ranges = [0..1, 100..250, 1000..1001, 4000..5000];
        let boundary = "3f2a-1388-17c0ffee";
        let m = layout(&ranges, file.len() as u64, "application/octet-stream", boundary);
        let body = render(&m, &file);
        assert_eq!(m.content_length, body.len() as u64);
        let parsed = parse(&body, boundary);
        assert_eq!(parsed.len(), ranges.len());
        for ((content_type, content_range, data), range) in parsed.iter().zip(&ranges) {
            assert_eq!(content_type, "application/octet-stream");
            assert_eq!(content_range, &format!("bytes {}-{}/5000", range.start, range.end - 1));
            assert_eq!(data.as_slice(), &file[range.start as usize..range.end as usize]);
        }
    }

    #[test]
    fn content_length_is_sum_of_parts() {
        let m = layout(&[3..7, 9..10, 20..40], 1 << 40, "text/html; charset=utf-8", "x");
        let bytes: u64 = m
            .parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len() as u64,
                Part::File { len, .. } => *len,
            })
            .sum();
        assert_eq!(m.content_length, bytes);
        assert!(m.parts.iter().any(|p| matches!(p,
            Part::Bytes(b) if b.ends_with(b"Content-Range: bytes 20-39/1099511627776\r\n\r\n"))));
    }
}
