//! The verdict on a request head from its bytes in order (issue 34, item 8).
//!
//! [`parse_request`](super::parse_request) reads a complete head with
//! httparse and its own request-line parser, which is fast but answers an
//! incomplete or refused head by what it happened to look at first: the
//! limit of the unfinished line only, or httparse's syntax error before a
//! line's length. So one head could get 400 whole and 431 in pieces. Any
//! verdict other than a complete, accepted head is this module's: the
//! bytes are taken one after another, and the first that breaks a rule —
//! its syntax, the request line's, a field line's or the head's size, the
//! number of fields — decides, then and there. What a prefix says is then
//! what every longer buffer says, or it is still undecided.
//!
//! [`HeadScan`] keeps its place, so a head that arrives in pieces is
//! looked at once per byte, however it is cut.

use super::{Limits, Method, Parsed, INVALID_VERSION};
use crate::error::INVALID_LINE_ENDING;
use crate::syntax::is_tchar;
use crate::target::{self, is_target_char};
use crate::ParseError;

const INVALID_NAME: ParseError = ParseError::BadRequest("invalid header field name");
const INVALID_VALUE: ParseError = ParseError::BadRequest("invalid header field value");

/// httparse's field-value bytes: HTAB, SP, VCHAR and obs-text.
fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

/// Where the next byte falls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Part {
    /// The start of a line before the request line (empty lines are skipped).
    #[default]
    Leading,
    /// After the CR of an empty line before the request line.
    LeadingCr,
    /// The method, one byte of it at least.
    Method,
    /// After the method's SP.
    TargetStart,
    /// The target, one byte of it at least.
    Target,
    /// The version, `HTTP/#.#`, this many bytes of it so far; then its CR.
    Version(u8),
    /// After the request line's CR.
    RequestLineCr,
    /// The start of a field line, or of the empty line that ends the head.
    FieldStart,
    Name,
    /// After the colon: whitespace and the value.
    Value,
    /// After a field line's CR.
    ValueCr,
    /// After the CR of the empty line.
    EndCr,
}

/// What the bytes so far decide.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing yet: no byte breaks a rule, the head has not ended.
    Undecided,
    /// The head ends here (its length), every byte within the rules; its
    /// meaning (Host, framing) is for the full parse.
    Ended(usize),
    /// Refused, by the first byte that broke a rule.
    Refused(ParseError),
}

/// A request head being received, checked a byte at a time. Give
/// [`parse`](Self::parse) the head so far — the same first bytes every
/// time, more of them as they arrive — until it answers other than
/// `Partial`; it then starts afresh for the next head.
///
/// Each connection holds one, so it is small: 12 bytes.
#[derive(Clone, Debug, Default)]
pub struct HeadScan {
    /// Bytes looked at.
    pos: u32,
    /// Where the line `pos` is in starts.
    line_start: u32,
    /// Field lines begun, counted to 65,535: a `max_headers` above that
    /// is checked by the full parse, at the head's end.
    fields: u16,
    part: Part,
}

#[cfg(test)]
thread_local! {
    /// Bytes looked at on this thread, full parses included.
    pub(super) static WORK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl HeadScan {
    /// A scan of a new head.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether this scan has looked at any bytes of the head.
    pub fn started(&self) -> bool {
        self.pos > 0
    }

    /// Bytes of the head looked at so far (0 once it has its verdict).
    pub fn seen(&self) -> usize {
        self.pos as usize
    }

    /// [`parse_request_reusing`](super::parse_request_reusing) of `buf`,
    /// the head so far, looking only at the bytes not seen before while
    /// they decide nothing.
    #[inline]
    pub fn parse(
        &mut self,
        buf: &[u8],
        limits: &Limits,
        spare: &mut Option<super::HeadBuffers>,
    ) -> Result<Parsed, ParseError> {
        if !self.started() {
            self.count(buf.len().min(limits.max_header_bytes));
            let mut decided = true;
            let verdict = super::parse_fast(buf, limits, spare, &mut decided);
            if decided {
                return verdict;
            }
        }
        let verdict = self.advance(buf, limits);
        let outcome = match verdict {
            Verdict::Undecided => return Ok(Parsed::Partial),
            Verdict::Refused(error) => Err(error),
            Verdict::Ended(len) => {
                self.count(len);
                // Decided or not: where the two readings disagree on the
                // grammar, the refusal stands, as the stricter reading's.
                super::parse_fast(buf, limits, spare, &mut true)
            }
        };
        *self = HeadScan::default();
        outcome
    }

    #[allow(clippy::unused_self)]
    fn count(&self, _bytes: usize) {
        #[cfg(test)]
        WORK.with(|work| work.set(work.get() + _bytes));
    }

    /// Takes the bytes of `buf` not seen yet, up to the first that decides.
    pub(super) fn advance(&mut self, buf: &[u8], limits: &Limits) -> Verdict {
        let window = &buf[..buf.len().min(limits.max_header_bytes)];
        let line_limit = limits.max_request_line.saturating_add(2);
        let mut pos = self.pos as usize;
        while pos < window.len() {
            let b = window[pos];
            self.count(1);
            let line_start = self.line_start as usize;
            let next = match self.step(b, pos, window, limits) {
                Ok(next) => next,
                Err(error) => return Verdict::Refused(error),
            };
            if let Some(end) = next {
                return Verdict::Ended(end);
            }
            pos += 1;
            self.pos = pos as u32;
            let in_request_line = matches!(
                self.part,
                Part::Method | Part::TargetStart | Part::Target | Part::Version(_) | Part::RequestLineCr
            );
            // The line so far, without a CR that may yet end it.
            let content =
                pos - line_start - usize::from(matches!(self.part, Part::ValueCr | Part::RequestLineCr));
            if in_request_line && pos - line_start >= line_limit {
                return Verdict::Refused(ParseError::UriTooLong);
            }
            if matches!(self.part, Part::Name | Part::Value | Part::ValueCr)
                && content > limits.max_field_size
            {
                return Verdict::Refused(ParseError::HeadersTooLarge);
            }
        }
        if window.len() >= limits.max_header_bytes {
            return Verdict::Refused(ParseError::HeadersTooLarge);
        }
        Verdict::Undecided
    }

    /// Takes byte `b` at `pos`: `Ok(Some(len))` if it ends the head.
    fn step(
        &mut self,
        b: u8,
        pos: usize,
        window: &[u8],
        limits: &Limits,
    ) -> Result<Option<usize>, ParseError> {
        let next_line = pos as u32 + 1;
        self.part = match self.part {
            Part::Leading => match b {
                b'\r' => Part::LeadingCr,
                b'\n' => return Err(INVALID_LINE_ENDING),
                _ if is_tchar(b) => Part::Method,
                _ => return Err(ParseError::BadRequest("invalid method")),
            },
            Part::LeadingCr => match b {
                b'\n' => {
                    self.line_start = next_line;
                    Part::Leading
                }
                _ => return Err(INVALID_LINE_ENDING),
            },
            Part::Method => return self.method_byte(b),
            Part::TargetStart | Part::Target => match b {
                _ if is_target_char(b) => Part::Target,
                b' ' if self.part == Part::Target => Part::Version(0),
                b'\r' | b'\n' => return Err(ParseError::BadRequest("missing HTTP version")),
                _ => return Err(ParseError::BadRequest("invalid request-target")),
            },
            Part::Version(at @ 0..=7) => {
                let ok = match b"HTTP/#.#"[usize::from(at)] {
                    b'#' => b.is_ascii_digit(),
                    expected => b == expected,
                };
                if !ok {
                    return Err(INVALID_VERSION);
                }
                Part::Version(at + 1)
            }
            Part::Version(_) => match b {
                b'\r' => Part::RequestLineCr,
                b'\n' => return Err(INVALID_LINE_ENDING),
                _ => return Err(INVALID_VERSION),
            },
            Part::RequestLineCr => match b {
                b'\n' => {
                    self.request_line_ends(&window[..=pos])?;
                    self.line_start = next_line;
                    Part::FieldStart
                }
                _ => return Err(INVALID_LINE_ENDING),
            },
            Part::FieldStart => match b {
                b'\r' => Part::EndCr,
                b'\n' => return Err(INVALID_LINE_ENDING),
                _ if is_tchar(b) => {
                    self.fields = self.fields.saturating_add(1);
                    if usize::from(self.fields) > limits.max_headers {
                        return Err(ParseError::HeadersTooLarge);
                    }
                    Part::Name
                }
                _ => return Err(INVALID_NAME),
            },
            Part::Name => match b {
                b':' => Part::Value,
                _ if is_tchar(b) => Part::Name,
                _ => return Err(INVALID_NAME),
            },
            Part::Value => match b {
                b'\r' => Part::ValueCr,
                b'\n' => return Err(INVALID_LINE_ENDING),
                _ if is_value_byte(b) => Part::Value,
                _ => return Err(INVALID_VALUE),
            },
            Part::ValueCr => match b {
                b'\n' => {
                    self.line_start = next_line;
                    Part::FieldStart
                }
                _ => return Err(INVALID_VALUE),
            },
            Part::EndCr => match b {
                b'\n' => return Ok(Some(pos + 1)),
                _ => return Err(INVALID_LINE_ENDING),
            },
        };
        Ok(None)
    }

    fn method_byte(&mut self, b: u8) -> Result<Option<usize>, ParseError> {
        self.part = match b {
            _ if is_tchar(b) => Part::Method,
            b' ' => Part::TargetStart,
            _ => return Err(ParseError::BadRequest("invalid method")),
        };
        Ok(None)
    }

    /// The checks of a whole request line, at its LF (`head` ends there):
    /// the major version (505), then the target's form for the method.
    fn request_line_ends(&self, head: &[u8]) -> Result<(), ParseError> {
        let line = super::parse_request_line(&head[self.line_start as usize..])?
            .expect("a request line checked to its LF");
        target::parse(&Method::from_token(line.method), line.target).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_request;

    /// The three heads of issue 34, item 8, with the limits they were
    /// found under and the verdict the bytes decide.
    fn issue_heads() -> Vec<(Vec<u8>, Limits, ParseError)> {
        let mut long = b"GET /cgi-bin/echo HTTP/1.1\r\nHost: h\r\nX-Long: ".to_vec();
        long.extend_from_slice(&[b'a'; 8200]);
        long.extend_from_slice(b"\r\nBad Header: x\r\n\r\n");
        // The same at a 200-byte field limit, so that a test of every cut stays quick.
        let short = String::from_utf8(long.clone()).unwrap().replace(&"a".repeat(8200), &"a".repeat(208));
        let range = b"GET /index.html HTTP/1.1\r\nHost: h\r\nRange: bytes=0-0,1-1\r\n\rJ".to_vec();
        let small = Limits { max_field_size: 16, ..Limits::default() };
        vec![
            // The X-Long line passes 8 KiB before the bad name arrives: 431, whole or not.
            (long, Limits::default(), ParseError::HeadersTooLarge),
            (
                short.into_bytes(),
                Limits { max_field_size: 200, ..Limits::default() },
                ParseError::HeadersTooLarge,
            ),
            // The Range line passes 16 bytes before the CR without LF.
            (range, small, ParseError::HeadersTooLarge),
            (b"GE(T / HTTP/1.1".to_vec(), Limits::default(), ParseError::BadRequest("invalid method")),
        ]
    }

    /// Every prefix says `Partial` or the whole's verdict, and a scan fed
    /// the head in two pieces, cut anywhere, or a byte at a time, says
    /// what the whole says — at the first byte that decides.
    #[test]
    fn one_head_one_verdict_however_it_arrives() {
        for (head, limits, expected) in issue_heads() {
            let show = String::from_utf8_lossy(&head[..head.len().min(60)]).into_owned();
            assert_eq!(parse_request(&head, &limits), Err(expected), "{show}");
            // The shortest prefix refused (found a byte at a time), and every longer one the same way.
            let mut scan = HeadScan::new();
            let first = (0..=head.len())
                .find(|&end| scan.parse(&head[..end], &limits, &mut None) != Ok(Parsed::Partial))
                .expect("refused");
            assert!(first == head.len() || parse_request(&head[..first - 1], &limits) == Ok(Parsed::Partial));
            // Every cut; of the 8 KiB head, those at its ends and around its verdict.
            let cuts: Vec<usize> = if head.len() < 1000 {
                (0..head.len()).collect()
            } else {
                (0..head.len()).filter(|&c| c < 64 || c.abs_diff(first) < 64 || c + 64 > head.len()).collect()
            };
            for &end in cuts.iter().chain([&head.len()]) {
                let want = if end < first { Ok(Parsed::Partial) } else { Err(expected) };
                assert_eq!(parse_request(&head[..end], &limits), want, "{show}: prefix {end}");
            }
            for &cut in &cuts {
                let mut scan = HeadScan::new();
                let early = scan.parse(&head[..cut], &limits, &mut None);
                let got =
                    if early == Ok(Parsed::Partial) { scan.parse(&head, &limits, &mut None) } else { early };
                assert_eq!(got, Err(expected), "{show}: cut at {cut}");
            }
            assert_eq!(parse_request(&head[..first], &limits), Err(expected), "{show}: decided at {first}");
        }
    }

    /// `GE` then `(T / HTTP/1.1`: refused when the `(` arrives, with no
    /// line feed in sight.
    #[test]
    fn a_split_error_needs_no_line_feed() {
        let limits = Limits::default();
        let mut scan = HeadScan::new();
        assert_eq!(scan.parse(b"GE", &limits, &mut None), Ok(Parsed::Partial));
        assert_eq!(scan.parse(b"GE(", &limits, &mut None), Err(ParseError::BadRequest("invalid method")));
        let mut scan = HeadScan::new();
        let head = b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x01";
        assert_eq!(scan.parse(&head[..20], &limits, &mut None), Ok(Parsed::Partial));
        assert_eq!(scan.parse(head, &limits, &mut None), Err(INVALID_VALUE));
    }

    /// A head sent a byte at a time is looked at about once per byte, not
    /// once per byte for every byte before it; and a resumed scan agrees
    /// with a fresh parse at every length.
    #[test]
    fn a_dribbled_head_costs_work_linear_in_its_length() {
        let limits = Limits::default();
        let mut head = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..20 {
            head.extend_from_slice(format!("X-Field-{i}: {}\r\n", "v".repeat(100)).as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        let mut scan = HeadScan::new();
        WORK.with(|work| work.set(0));
        for end in 1..head.len() {
            assert_eq!(scan.parse(&head[..end], &limits, &mut None), Ok(Parsed::Partial), "{end}");
        }
        let work = WORK.with(std::cell::Cell::get);
        assert!(work <= head.len(), "{work} bytes looked at for {}", head.len() - 1);
        assert_eq!(scan.seen(), head.len() - 1);
        match scan.parse(&head, &limits, &mut None) {
            Ok(Parsed::Complete { len, .. }) => assert_eq!(len, head.len()),
            other => panic!("{other:?}"),
        }
        assert!(!scan.started(), "afresh for the next head");
    }

    /// The verdict where two rules break at one byte, and the request
    /// line's limits against the head's, as the bytes come.
    #[test]
    fn limits_in_the_order_of_the_bytes() {
        // A field line at the limit that then goes on with a bad byte: the size is broken first.
        let limits = Limits { max_field_size: 8, ..Limits::default() };
        let head = b"GET / HTTP/1.1\r\nHost: h\r\nX: 123456\x01\r\n\r\n";
        assert_eq!(parse_request(head, &limits), Err(ParseError::HeadersTooLarge));
        let head = b"GET / HTTP/1.1\r\nHost: h\r\nX: 12345\x01\r\n\r\n";
        assert_eq!(parse_request(head, &limits), Err(INVALID_VALUE));
        // A request line longer than the whole head may be: the head's limit is reached first,
        // and a syntax error past it is never seen.
        let limits = Limits { max_header_bytes: 40, ..Limits::default() };
        let mut head = b"GET /".to_vec();
        head.extend_from_slice(&[b'a'; 50]);
        head.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        assert_eq!(parse_request(&head, &limits), Err(ParseError::HeadersTooLarge));
        head[45] = b'#';
        assert_eq!(parse_request(&head, &limits), Err(ParseError::HeadersTooLarge));
        head[20] = b'#';
        assert_eq!(parse_request(&head, &limits), Err(ParseError::BadRequest("invalid request-target")));
        // The 101st field is refused at its first byte.
        let mut head = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for _ in 1..100 {
            head.extend_from_slice(b"X: v\r\n");
        }
        let at_limit = head.len();
        head.extend_from_slice(b"Y");
        assert_eq!(parse_request(&head[..at_limit], &Limits::default()), Ok(Parsed::Partial));
        assert_eq!(parse_request(&head, &Limits::default()), Err(ParseError::HeadersTooLarge));
    }
}
