//! Removing the chunked transfer coding from a request body (RFC 9112 §7.1).

use crate::error::INVALID_LINE_ENDING;
use crate::syntax::{is_ows, is_tchar};
use crate::ParseError;

/// Most bytes of chunk extensions accepted per body. RFC 9112 §7.1.1 lets
/// extensions be ignored but not their cost: without a bound, a body of
/// one-byte chunks with long extensions is a cheap way to make a server parse
/// much more than it accounts as body (Node CVE-2024-22019, Go CVE-2023-39326).
const MAX_EXTENSION_BYTES: usize = 4096;

/// Most bytes of the trailer section, including its final CRLF.
const MAX_TRAILER_BYTES: usize = 8192;

/// A `u64` has 16 hex digits. Allowing no more (even as leading zeros) makes
/// overflow impossible and bounds the chunk-size line.
const MAX_SIZE_DIGITS: u32 = 16;

const INVALID_CHUNK_SIZE: ParseError = ParseError::BadRequest("invalid chunk size");
const INVALID_EXTENSION: ParseError = ParseError::BadRequest("invalid chunk extension");
const INVALID_TRAILER: ParseError = ParseError::BadRequest("invalid trailer field");

/// An incremental, sans-IO decoder of the chunked transfer coding
/// (RFC 9112 §7.1) for request bodies.
///
/// Feed it the bytes that follow the request head, in pieces of any size,
/// until [`is_done`](Self::is_done); the result does not depend on how the
/// input is split. It is strict wherever a lenient reading could differ from
/// another parser's, which would let a request be smuggled in the body:
///
/// - `chunk-size` is `1*HEXDIG`, at most 16 digits; no sign, `0x`, or
///   whitespace (except `BWS` before a `;`).
/// - A chunk larger than what is left of `max_body` is refused as soon as its
///   size is known ([`ParseError::PayloadTooLarge`]), never after reading it.
/// - Chunk extensions must match the grammar of RFC 9112 §7.1.1 and are then
///   ignored; all of them together may take at most 4 KiB per body.
/// - Every line ends in CRLF, and chunk data is followed by exactly CRLF.
/// - The trailer section is parsed as field lines, limited to 8 KiB
///   ([`ParseError::HeadersTooLarge`]), and discarded: trailers must not
///   affect framing or routing (RFC 9112 §7.1.2), and none of ours needs them.
///
/// After an error the decoder stays failed and returns that error again.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    max_body: u64,
    body_len: u64,
    /// The size of the chunk whose line is being parsed.
    chunk_size: u64,
    size_digits: u32,
    extension_bytes: usize,
    trailer_bytes: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// In the `chunk-size` digits.
    Size,
    /// In `BWS` that must be followed by `;`.
    ExtensionBws,
    /// After `;`, before the extension name.
    ExtensionNameStart,
    ExtensionName,
    /// In `BWS` after a name: `=` or `;` next.
    ExtensionNameEnd,
    /// After `=`, before the value.
    ExtensionValueStart,
    ExtensionToken,
    ExtensionQuoted,
    /// After a backslash in a quoted string.
    ExtensionQuotedPair,
    /// After a chunk-size or a quoted value: `;`, `BWS` or CR next.
    ExtensionEnd,
    /// After the CR of a chunk-size line.
    SizeLf,
    /// This many data bytes of the current chunk are still to come.
    Data(u64),
    DataCr,
    DataLf,
    TrailerLineStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    /// After the CR of the empty line that ends the body.
    EndLf,
    Done,
    Failed(ParseError),
}

impl State {
    fn is_extension(self) -> bool {
        matches!(
            self,
            Self::ExtensionBws
                | Self::ExtensionNameStart
                | Self::ExtensionName
                | Self::ExtensionNameEnd
                | Self::ExtensionValueStart
                | Self::ExtensionToken
                | Self::ExtensionQuoted
                | Self::ExtensionQuotedPair
                | Self::ExtensionEnd
        )
    }

    fn is_trailer(self) -> bool {
        matches!(
            self,
            Self::TrailerLineStart | Self::TrailerName | Self::TrailerValue | Self::TrailerLf | Self::EndLf
        )
    }
}

impl ChunkedDecoder {
    /// A decoder for one body of at most `max_body` data bytes.
    pub fn new(max_body: u64) -> Self {
        Self {
            state: State::Size,
            max_body,
            body_len: 0,
            chunk_size: 0,
            size_digits: 0,
            extension_bytes: 0,
            trailer_bytes: 0,
        }
    }

    /// Decodes as much of `input` as possible, appending the data bytes to
    /// `out`, and returns how many bytes of `input` were consumed.
    ///
    /// That is all of `input` unless the body ends inside it: then the rest
    /// belongs to the next request. Call again with more input until
    /// [`is_done`](Self::is_done). On error, `out` holds the data decoded
    /// before the offending byte.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ParseError> {
        let mut consumed = 0;
        loop {
            match self.state {
                State::Failed(error) => return Err(error),
                State::Done => return Ok(consumed),
                _ if consumed == input.len() => return Ok(consumed),
                State::Data(remaining) => {
                    let available = &input[consumed..];
                    let n = usize::try_from(remaining)
                        .map_or(available.len(), |remaining| remaining.min(available.len()));
                    out.extend_from_slice(&available[..n]);
                    consumed += n;
                    // Lossless: n <= remaining, a u64.
                    let n = n as u64;
                    self.body_len += n;
                    self.state = match remaining - n {
                        0 => State::DataCr,
                        remaining => State::Data(remaining),
                    };
                }
                _ => {
                    let byte = input[consumed];
                    consumed += 1;
                    if let Err(error) = self.step(byte) {
                        self.state = State::Failed(error);
                    }
                }
            }
        }
    }

    /// Whether the whole body, including the trailer section, has been
    /// decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// How many data bytes have been decoded so far.
    pub fn body_len(&self) -> u64 {
        self.body_len
    }

    /// Consumes one byte outside of chunk data.
    fn step(&mut self, b: u8) -> Result<(), ParseError> {
        let next = match self.state {
            State::Size => match char::from(b).to_digit(16) {
                Some(_) if self.size_digits == MAX_SIZE_DIGITS => {
                    return Err(ParseError::BadRequest("chunk size too long"));
                }
                Some(digit) => {
                    self.chunk_size = (self.chunk_size << 4) | u64::from(digit);
                    self.size_digits += 1;
                    State::Size
                }
                None if self.size_digits == 0 => return Err(INVALID_CHUNK_SIZE),
                None => {
                    // body_len <= max_body always holds, so no underflow.
                    if self.chunk_size > self.max_body - self.body_len {
                        return Err(ParseError::PayloadTooLarge);
                    }
                    after_extension(b, INVALID_CHUNK_SIZE)?
                }
            },
            // chunk-ext = *( BWS ";" BWS chunk-ext-name
            //                [ BWS "=" BWS chunk-ext-val ] )   (RFC 9112 §7.1.1)
            State::ExtensionBws => match b {
                b';' => State::ExtensionNameStart,
                b if is_ows(b) => State::ExtensionBws,
                _ => return Err(INVALID_EXTENSION),
            },
            State::ExtensionNameStart => match b {
                b if is_tchar(b) => State::ExtensionName,
                b if is_ows(b) => State::ExtensionNameStart,
                _ => return Err(INVALID_EXTENSION),
            },
            State::ExtensionName => match b {
                b if is_tchar(b) => State::ExtensionName,
                b'=' => State::ExtensionValueStart,
                b if is_ows(b) => State::ExtensionNameEnd,
                _ => after_extension(b, INVALID_EXTENSION)?,
            },
            State::ExtensionNameEnd => match b {
                b'=' => State::ExtensionValueStart,
                b';' => State::ExtensionNameStart,
                b if is_ows(b) => State::ExtensionNameEnd,
                _ => return Err(INVALID_EXTENSION),
            },
            // chunk-ext-val = token / quoted-string
            State::ExtensionValueStart => match b {
                b'"' => State::ExtensionQuoted,
                b if is_tchar(b) => State::ExtensionToken,
                b if is_ows(b) => State::ExtensionValueStart,
                _ => return Err(INVALID_EXTENSION),
            },
            State::ExtensionToken => match b {
                b if is_tchar(b) => State::ExtensionToken,
                _ => after_extension(b, INVALID_EXTENSION)?,
            },
            // quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
            // (RFC 9110 §5.6.4). CR and LF are in neither, so a line never
            // ends inside quotes.
            State::ExtensionQuoted => match b {
                b'"' => State::ExtensionEnd,
                b'\\' => State::ExtensionQuotedPair,
                b'\t' | b' ' | b'!' | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => State::ExtensionQuoted,
                _ => return Err(INVALID_EXTENSION),
            },
            State::ExtensionQuotedPair => match b {
                b'\t' | b' '..=0x7e | 0x80..=0xff => State::ExtensionQuoted,
                _ => return Err(INVALID_EXTENSION),
            },
            State::ExtensionEnd => after_extension(b, INVALID_EXTENSION)?,
            State::SizeLf => match b {
                b'\n' if self.chunk_size == 0 => State::TrailerLineStart,
                b'\n' => State::Data(self.chunk_size),
                _ => return Err(INVALID_LINE_ENDING),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(ParseError::BadRequest("chunk data not followed by CRLF")),
            },
            State::DataLf => match b {
                b'\n' => {
                    self.chunk_size = 0;
                    self.size_digits = 0;
                    State::Size
                }
                _ => return Err(INVALID_LINE_ENDING),
            },
            // trailer-section = *( field-line CRLF ), then CRLF (RFC 9112 §7.1.2).
            State::TrailerLineStart => match b {
                b'\r' => State::EndLf,
                b if is_tchar(b) => State::TrailerName,
                b'\n' => return Err(INVALID_LINE_ENDING),
                // Including obs-fold, a line starting with whitespace.
                _ => return Err(INVALID_TRAILER),
            },
            // No whitespace before the colon (RFC 9112 §5.1).
            State::TrailerName => match b {
                b if is_tchar(b) => State::TrailerName,
                b':' => State::TrailerValue,
                _ => return Err(INVALID_TRAILER),
            },
            // The same bytes a field value in the head may have.
            State::TrailerValue => match b {
                b'\r' => State::TrailerLf,
                b'\t' | b' '..=0x7e | 0x80..=0xff => State::TrailerValue,
                b'\n' => return Err(INVALID_LINE_ENDING),
                _ => return Err(INVALID_TRAILER),
            },
            State::TrailerLf => match b {
                b'\n' => State::TrailerLineStart,
                _ => return Err(INVALID_LINE_ENDING),
            },
            State::EndLf => match b {
                b'\n' => State::Done,
                _ => return Err(INVALID_LINE_ENDING),
            },
            State::Data(_) | State::Done | State::Failed(_) => {
                unreachable!("decode handles {:?} without step", self.state)
            }
        };
        if next.is_extension() {
            self.extension_bytes += 1;
            if self.extension_bytes > MAX_EXTENSION_BYTES {
                return Err(ParseError::BadRequest("chunk extensions too long"));
            }
        }
        if self.state.is_trailer() {
            self.trailer_bytes += 1;
            if self.trailer_bytes > MAX_TRAILER_BYTES {
                return Err(ParseError::HeadersTooLarge);
            }
        }
        self.state = next;
        Ok(())
    }
}

/// The state after byte `b` following a complete chunk-size or extension:
/// another extension, `BWS` before one, or the end of the line. Any other
/// byte is `otherwise`, or a bare LF.
fn after_extension(b: u8, otherwise: ParseError) -> Result<State, ParseError> {
    match b {
        b';' => Ok(State::ExtensionNameStart),
        b'\r' => Ok(State::SizeLf),
        b'\n' => Err(INVALID_LINE_ENDING),
        b if is_ows(b) => Ok(State::ExtensionBws),
        _ => Err(otherwise),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1 << 20;

    /// What decoding `input` produced: the result, the data, and whether the
    /// body was complete.
    type Outcome = (Result<usize, ParseError>, Vec<u8>, bool);

    fn decode_at_once(input: &[u8], max_body: u64) -> Outcome {
        let mut decoder = ChunkedDecoder::new(max_body);
        let mut out = Vec::new();
        let result = decoder.decode(input, &mut out);
        (result, out, decoder.is_done())
    }

    fn decode_split(pieces: &[&[u8]], max_body: u64) -> Outcome {
        let mut decoder = ChunkedDecoder::new(max_body);
        let mut out = Vec::new();
        let mut consumed = 0;
        for piece in pieces {
            match decoder.decode(piece, &mut out) {
                Ok(n) => consumed += n,
                error => return (error, out, decoder.is_done()),
            }
            if decoder.is_done() {
                break;
            }
        }
        (Ok(consumed), out, decoder.is_done())
    }

    /// Decodes `input` at once, byte by byte, and split in two at every
    /// position, asserts that all agree, and returns the outcome.
    fn decode_every_way(input: &[u8], max_body: u64) -> Outcome {
        let at_once = decode_at_once(input, max_body);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(
            decode_split(&bytes, max_body),
            at_once,
            "byte by byte: {:?}",
            String::from_utf8_lossy(input)
        );
        for split in 0..=input.len() {
            let (a, b) = input.split_at(split);
            assert_eq!(
                decode_split(&[a, b], max_body),
                at_once,
                "split at {split}: {:?}",
                String::from_utf8_lossy(input)
            );
        }
        at_once
    }

    #[test]
    fn valid_bodies() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"0\r\n\r\n", b""),
            (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
            (b"a\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
            (b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
            (b"0000000000000005\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"00\r\n\r\n", b""),
            (b"3\r\n\r\n\r\r\n0\r\n\r\n", b"\r\n\r"),
            (b"2\r\n\x00\xff\r\n0\r\n\r\n", b"\x00\xff"),
            // Extensions (RFC 9112 §7.1.1), including BWS.
            (b"5;a\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5;a=b\r\nhello\r\n0;last\r\n\r\n", b"hello"),
            (b"5;a=b;c=d;e\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5 ;a = b ; c\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5\t;\ta\t=\tb\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5;a=\"q\"\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5;a=\"x;y=\\\"z\\\\\";b\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5;a=\"\"\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5;a=\"\xc3\xa9 \t\"\r\nhello\r\n0\r\n\r\n", b"hello"),
            // Trailers, discarded.
            (b"5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n", b"hello"),
            (b"0\r\nContent-Length: 99\r\nTransfer-Encoding: gzip\r\nHost: evil\r\n\r\n", b""),
            (b"0\r\nX:\r\nY:  \t v \xff\t\r\n\r\n", b""),
        ];
        for &(input, body) in cases {
            let (result, out, done) = decode_every_way(input, MAX);
            assert_eq!(result, Ok(input.len()), "{:?}", String::from_utf8_lossy(input));
            assert_eq!(out, body, "{:?}", String::from_utf8_lossy(input));
            assert!(done, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn stops_at_the_end_of_the_body() {
        let input = b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        let (result, out, done) = decode_every_way(input, MAX);
        assert_eq!(result, Ok(13));
        assert_eq!(out, b"abc");
        assert!(done);

        let mut decoder = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        assert_eq!(decoder.decode(input, &mut out), Ok(13));
        assert_eq!(decoder.decode(b"more", &mut out), Ok(0));
        assert_eq!(decoder.body_len(), 3);
    }

    #[test]
    fn incomplete_bodies_consume_everything() {
        let input = b"5\r\nhello\r\n0\r\n\r\n";
        for end in 0..input.len() {
            let (result, out, done) = decode_every_way(&input[..end], MAX);
            assert_eq!(result, Ok(end));
            assert!(!done, "{end}");
            assert_eq!(out, &b"hello"[..end.saturating_sub(3).min(5)]);
        }
    }

    #[test]
    fn invalid_bodies() {
        use ParseError::BadRequest;
        let size = INVALID_CHUNK_SIZE;
        let extension = INVALID_EXTENSION;
        let line = INVALID_LINE_ENDING;
        let trailer = INVALID_TRAILER;
        let no_crlf = BadRequest("chunk data not followed by CRLF");
        let cases: &[(&[u8], ParseError)] = &[
            // chunk-size = 1*HEXDIG
            (b"\r\n", size),
            (b"\r\nhello\r\n0\r\n\r\n", size),
            (b";a\r\n", size),
            (b"0x5\r\nhello\r\n0\r\n\r\n", size),
            (b"+5\r\nhello\r\n0\r\n\r\n", size),
            (b"-5\r\nhello\r\n0\r\n\r\n", size),
            (b"5_0\r\n", size),
            (b" 5\r\nhello\r\n0\r\n\r\n", size),
            (b"\t5\r\n", size),
            (b"g\r\n", size),
            (b"5\x00\r\n", size),
            (b"5\n", line),
            (b"5\r\rhello", line),
            (b"5\rhello", line),
            (b"00000000000000005\r\nhello\r\n0\r\n\r\n", BadRequest("chunk size too long")),
            (b"10000000000000000\r\n", BadRequest("chunk size too long")),
            (b"ffffffffffffffffffff\r\n", BadRequest("chunk size too long")),
            // Trailing whitespace is only BWS before a ';'.
            (b"5 \r\nhello\r\n0\r\n\r\n", extension),
            (b"5\t\r\n", extension),
            (b"5 a\r\n", extension),
            // Extension syntax.
            (b"5;\r\nhello\r\n0\r\n\r\n", extension),
            (b"5;;a\r\n", extension),
            (b"5;=b\r\n", extension),
            (b"5;a=\r\n", extension),
            (b"5;a b\r\n", extension),
            (b"5;a=b c\r\n", extension),
            (b"5;a=b \r\n", extension),
            (b"5;a \r\n", extension),
            (b"5;a=\"b\r\n\"\r\nhello\r\n0\r\n\r\n", extension),
            (b"5;a=\"b\nc\"\r\n", extension),
            (b"5;a=\"\\\r\"\r\n", extension),
            (b"5;a=\"b\x01\"\r\n", extension),
            (b"5;a=\"b\"c\r\n", extension),
            (b"5;a=b\x7f\r\n", extension),
            (b"5;a\x00\r\n", extension),
            (b"5;a\n", line),
            (b"5;a=b\n", line),
            (b"5;a=\"b\"\n", line),
            // CRLF exactly, after the size line and after the data.
            (b"5\r\nhello0\r\n\r\n", no_crlf),
            (b"5\r\nhello!\r\n0\r\n\r\n", no_crlf),
            (b"5\r\nhell\r\n0\r\n\r\n", no_crlf),
            (b"5\r\nhello\n0\r\n\r\n", no_crlf),
            (b"5\r\nhello\r0\r\n\r\n", line),
            (b"5\r\nhello\r\r\n0\r\n\r\n", line),
            (b"0\n\r\n", line),
            (b"0\r\n\n", line),
            (b"0\r\n\r\r\n", line),
            (b"0\r\n\rX", line),
            // Trailer syntax.
            (b"0\r\n X: y\r\n\r\n", trailer),
            (b"0\r\n\tX: y\r\n\r\n", trailer),
            (b"0\r\nX: y\r\n z\r\n\r\n", trailer),
            (b"0\r\nX : y\r\n\r\n", trailer),
            (b"0\r\n: y\r\n\r\n", trailer),
            (b"0\r\nX\r\n\r\n", trailer),
            (b"0\r\nX y\r\n\r\n", trailer),
            (b"0\r\nX: a\x00b\r\n\r\n", trailer),
            (b"0\r\nX: a\x7fb\r\n\r\n", trailer),
            (b"0\r\nX: a\rb\r\n\r\n", line),
            (b"0\r\nX: a\n\r\n", line),
            (b"0\r\nX: a\r\n\n", line),
        ];
        for &(input, expected) in cases {
            let (result, _, done) = decode_every_way(input, MAX);
            assert_eq!(result, Err(expected), "{:?}", String::from_utf8_lossy(input));
            assert!(!done);
        }
    }

    #[test]
    fn body_limit() {
        let body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        let (result, out, _) = decode_every_way(body, 11);
        assert_eq!((result, out.as_slice()), (Ok(body.len()), &b"hello world"[..]));
        let (result, out, _) = decode_every_way(body, 10);
        assert_eq!((result, out.as_slice()), (Err(ParseError::PayloadTooLarge), &b"hello"[..]));
        let (result, _, _) = decode_every_way(b"0\r\n\r\n", 0);
        assert_eq!(result, Ok(5));
        // Refused when the size is known, before any of the data is read.
        let (result, out, _) = decode_every_way(b"b\r\nhello", 10);
        assert_eq!((result, out.len()), (Err(ParseError::PayloadTooLarge), 0));
        let (result, _, _) = decode_every_way(b"ffffffffffffffff\r\n", u64::MAX - 1);
        assert_eq!(result, Err(ParseError::PayloadTooLarge));
        let (result, _, _) = decode_every_way(b"ffffffffffffffff;x\r\n", MAX);
        assert_eq!(result, Err(ParseError::PayloadTooLarge));
    }

    #[test]
    fn largest_chunk_size_does_not_wrap() {
        let mut decoder = ChunkedDecoder::new(u64::MAX);
        let mut out = Vec::new();
        assert_eq!(decoder.decode(b"ffffffffffffffff\r\nab", &mut out), Ok(20));
        assert_eq!(decoder.body_len(), 2);
        assert_eq!(out, b"ab");
        assert!(!decoder.is_done());
    }

    #[test]
    fn extension_budget_is_per_body() {
        // 4096 extension bytes in total are fine, one more is not.
        let mut at_limit = Vec::new();
        for _ in 0..1024 {
            at_limit.extend_from_slice(b"1;abc\r\nx\r\n");
        }
        at_limit.extend_from_slice(b"0\r\n\r\n");
        let mut decoder = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        assert_eq!(decoder.decode(&at_limit, &mut out), Ok(at_limit.len()));
        assert_eq!(out.len(), 1024);
        assert!(decoder.is_done());

        let over = [&at_limit[..at_limit.len() - 5], b"0;\r\n\r\n"].concat();
        let (result, _, _) = decode_every_way(&over, MAX);
        assert_eq!(result, Err(ParseError::BadRequest("chunk extensions too long")));

        let long = [b"1;a=".as_slice(), &[b'b'; 4093], b"\r\nx\r\n0\r\n\r\n"].concat();
        assert_eq!(decode_at_once(&long, MAX).0, Ok(long.len()));
        let too_long = [b"1;a=".as_slice(), &[b'b'; 4094], b"\r\nx\r\n0\r\n\r\n"].concat();
        assert_eq!(
            decode_at_once(&too_long, MAX).0,
            Err(ParseError::BadRequest("chunk extensions too long"))
        );
    }

    #[test]
    fn trailer_budget() {
        // The trailer section is "X: " + value + CRLF + CRLF.
        let trailer = |value_len| [b"0\r\nX: ".as_slice(), &vec![b'v'; value_len], b"\r\n\r\n"].concat();
        let at_limit = trailer(MAX_TRAILER_BYTES - 7);
        assert_eq!(decode_at_once(&at_limit, MAX).0, Ok(at_limit.len()));
        let over = trailer(MAX_TRAILER_BYTES - 6);
        let (result, _, _) = decode_every_way(&over, MAX);
        assert_eq!(result, Err(ParseError::HeadersTooLarge));
    }

    #[test]
    fn errors_are_sticky() {
        let mut decoder = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        assert_eq!(
            decoder.decode(b"3\r\nabcX", &mut out),
            Err(ParseError::BadRequest("chunk data not followed by CRLF"))
        );
        assert_eq!(out, b"abc");
        assert_eq!(
            decoder.decode(b"\r\n0\r\n\r\n", &mut out),
            Err(ParseError::BadRequest("chunk data not followed by CRLF"))
        );
        assert_eq!(
            decoder.decode(b"", &mut out),
            Err(ParseError::BadRequest("chunk data not followed by CRLF"))
        );
        assert!(!decoder.is_done());
        assert_eq!(out, b"abc");
    }

    #[test]
    fn large_chunks_are_copied_in_bulk() {
        let data = vec![b'z'; 100_000];
        let input = [format!("{:x}\r\n", data.len()).as_bytes(), &data, b"\r\n0\r\n\r\n"].concat();
        let mut decoder = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        let mut consumed = 0;
        for piece in input.chunks(4096) {
            consumed += decoder.decode(piece, &mut out).unwrap();
        }
        assert_eq!(consumed, input.len());
        assert_eq!(out, data);
        assert_eq!(decoder.body_len(), 100_000);
        assert!(decoder.is_done());
    }

    /// Decoding never panics, the outcome does not depend on how the input is
    /// split ([`decode_every_way`] asserts that), and input is consumed up
    /// to the end of the body or of the input.
    #[test]
    fn mutated_bodies_decode_consistently() {
        let seeds: &[&[u8]] = &[b"5;a=\"b\"\r\nhello\r\n0\r\nX: y\r\n\r\n", b"1 ; a = b\r\nx\r\n00\r\n\r\n"];
        let interesting = b"\x00\t\n\r \";=\"\\0aFg\x7f\x80";
        let mut inputs = Vec::new();
        for seed in seeds {
            for i in 0..seed.len() {
                let mut deleted = seed.to_vec();
                deleted.remove(i);
                inputs.push(deleted);
                for &b in interesting {
                    let mut replaced = seed.to_vec();
                    replaced[i] = b;
                    inputs.push(replaced);
                    let mut inserted = seed.to_vec();
                    inserted.insert(i, b);
                    inputs.push(inserted);
                }
            }
        }
        for input in inputs {
            let (result, _, done) = decode_every_way(&input, 4);
            if let Ok(consumed) = result {
                assert!(done || consumed == input.len(), "{:?}", String::from_utf8_lossy(&input));
            }
        }
    }
}
