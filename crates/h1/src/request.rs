//! Parsing of a request head: request line and field section (RFC 9112
//! §2–§5, §6 for framing).

use crate::error::INVALID_LINE_ENDING;
use crate::framing::{BodyFraming, FramingFields};
use crate::syntax::{has_token, is_tchar};
use crate::target::{self, is_target_char, is_valid_authority, PortRule};
use crate::ParseError;

/// Limits on the size of a request head.
///
/// The defaults follow nginx (8 KiB request line, 4×8 KiB of fields) and
/// Apache (100 fields, 8 KiB per field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line, without its CRLF; longer is
    /// [`ParseError::UriTooLong`] (414, RFC 9112 §3). Default 8192, above the
    /// 8000 octets RFC 9112 §3 recommends supporting.
    pub max_request_line: usize,
    /// Largest head in bytes: leading empty lines, request line and field
    /// section including the final empty line; larger is
    /// [`ParseError::HeadersTooLarge`] (431). Default 32768.
    pub max_header_bytes: usize,
    /// Most field lines; more is [`ParseError::HeadersTooLarge`] (431).
    /// Default 100.
    pub max_headers: usize,
    /// Longest field line, without its CRLF; longer is
    /// [`ParseError::HeadersTooLarge`] (431). Default 8192.
    pub max_field_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_request_line: 8192, max_header_bytes: 32768, max_headers: 100, max_field_size: 8192 }
    }
}

/// The HTTP version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1, and any later HTTP/1.x, which RFC 9110 §2.5 says to process
    /// as the highest minor version implemented.
    Http11,
}

impl Version {
    /// The protocol as written in a start line, e.g. `"HTTP/1.1"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Http10 => "HTTP/1.0",
            Self::Http11 => "HTTP/1.1",
        }
    }
}

/// A request method.
///
/// The named variants are the methods of RFC 9110 §9 plus PATCH (RFC 5789).
/// Method names are case-sensitive (RFC 9110 §9.1), so `get` is
/// `Other("get")`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET (RFC 9110 §9.3.1).
    Get,
    /// HEAD (RFC 9110 §9.3.2).
    Head,
    /// POST (RFC 9110 §9.3.3).
    Post,
    /// PUT (RFC 9110 §9.3.4).
    Put,
    /// DELETE (RFC 9110 §9.3.5).
    Delete,
    /// CONNECT (RFC 9110 §9.3.6).
    Connect,
    /// OPTIONS (RFC 9110 §9.3.7).
    Options,
    /// TRACE (RFC 9110 §9.3.8).
    Trace,
    /// PATCH (RFC 5789).
    Patch,
    /// Any other syntactically valid method (a `token`). The parser accepts
    /// it so that the server can answer 501 (RFC 9110 §9.1) or 405 itself.
    Other(String),
}

impl Method {
    fn from_token(token: &str) -> Self {
        match token {
            "GET" => Self::Get,
            "HEAD" => Self::Head,
            "POST" => Self::Post,
            "PUT" => Self::Put,
            "DELETE" => Self::Delete,
            "CONNECT" => Self::Connect,
            "OPTIONS" => Self::Options,
            "TRACE" => Self::Trace,
            "PATCH" => Self::Patch,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The method name as sent.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
            Self::Options => "OPTIONS",
            Self::Trace => "TRACE",
            Self::Patch => "PATCH",
            Self::Other(name) => name,
        }
    }

    /// Whether this is one of the named methods rather than [`Method::Other`].
    pub fn is_known(&self) -> bool {
        !matches!(self, Self::Other(_))
    }
}

/// One field line of a request, borrowed from its [`RequestHead`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// The field name as received (a `token`; compare it case-insensitively).
    pub name: &'a str,
    /// The field value without leading and trailing whitespace. Guaranteed
    /// free of CR, LF, NUL and other controls except HTAB; may contain
    /// obs-text bytes (≥ 0x80), so it is not necessarily UTF-8.
    pub value: &'a [u8],
}

/// Where a part of the head lies in [`RequestHead::bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// Where `part`, a subslice of `whole`, lies in it. An empty `part` may
    /// come from anywhere (a parser's `&[]`); any empty span reads the same.
    fn within(whole: &[u8], part: &[u8]) -> Span {
        if part.is_empty() {
            return Span { start: 0, end: 0 };
        }
        let start = (part.as_ptr().addr())
            .checked_sub(whole.as_ptr().addr())
            .filter(|start| start + part.len() <= whole.len())
            .expect("part of the head's bytes");
        Span { start, end: start + part.len() }
    }

    fn of<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        &bytes[self.start..self.end]
    }
}

/// A [`Span`] of text: the target and its parts, the host and field names
/// (ASCII when parsed; a redirect's target is any UTF-8). It remembers that
/// it was made from a `&str`, so reading it needs no second UTF-8 check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TextSpan(Span);

impl TextSpan {
    /// Where `part`, a subslice of `whole`, lies in it.
    fn within(whole: &[u8], part: &str) -> TextSpan {
        TextSpan(Span::within(whole, part.as_bytes()))
    }

    /// The text of this span in `bytes`, which must be the `whole` it was
    /// made [`within`](Self::within) or a copy of it (a longer one must
    /// start with it).
    #[allow(unsafe_code)] // from_utf8 on every read was 1 in 40 instructions of a request
    fn text<'a>(&self, bytes: &'a [u8]) -> &'a str {
        let text = self.0.of(bytes);
        debug_assert!(std::str::from_utf8(text).is_ok(), "a span of text");
        // SAFETY: a TextSpan is only made by `within`, from a `&str` lying at
        // exactly these positions of its `whole`, and a RequestHead reads its
        // spans only in `bytes`, which is that `whole` copied (or, for
        // `redirected`, a buffer that starts with it) and never changed. So
        // these are the bytes of that `&str`, which are UTF-8.
        unsafe { std::str::from_utf8_unchecked(text) }
    }
}

/// A field line's name and value in [`RequestHead::bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FieldSpan {
    name: TextSpan,
    value: Span,
}

/// The field names of a head as a set that may hold more names than it does,
/// never fewer: each name sets one of 64 bits, picked by its length and its
/// first and last bytes, case-insensitively. Most lookups are of fields a
/// request does not have (conditionals, Range, Referer for a script), and
/// those are then answered without comparing any name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NameFilter(u64);

impl NameFilter {
    #[inline]
    fn bit(name: &[u8]) -> u64 {
        let (first, last) = match name {
            [first, .., last] => (*first, *last),
            [only] => (*only, *only),
            [] => (0, 0),
        };
        // `| 0x20` folds ASCII case: bytes equal but for case fold alike.
        let key = (name.len() as u32) ^ u32::from(first | 0x20) << 8 ^ u32::from(last | 0x20) << 16;
        // Fibonacci hashing: the top 6 bits of the product spread the keys.
        1 << (key.wrapping_mul(0x9e37_79b1) >> 26)
    }

    fn insert(&mut self, name: &[u8]) {
        self.0 |= Self::bit(name);
    }

    /// False only if no name inserted equals `name` case-insensitively.
    #[inline]
    fn may_contain(&self, name: &[u8]) -> bool {
        self.0 & Self::bit(name) != 0
    }
}

/// The path of a request: part of the target, or implied by its form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PathSpan {
    Received(TextSpan),
    /// `"/"` for an absolute-form target with empty path, `"*"` for the
    /// server-wide OPTIONS in absolute-form (RFC 9112 §3.2.4).
    Implied(&'static str),
}

/// A parsed and validated request head.
///
/// The head is copied once, as received; the target, path, query, host and
/// field lines are views into that copy, so a request costs two allocations
/// (bytes and field positions) however many fields it has, and none if
/// those of an earlier head are reused ([`parse_request_reusing`]).
#[derive(Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The request method.
    pub method: Method,
    /// The HTTP version.
    pub version: Version,
    /// How the body is delimited.
    pub framing: BodyFraming,
    /// Whether the connection may be reused after this request: for 1.1
    /// unless `Connection: close`, for 1.0 only with `Connection: keep-alive`
    /// (RFC 9112 §9.3).
    pub keep_alive: bool,
    /// Whether the request carries `Expect: 100-continue` (RFC 9110 §10.1.1;
    /// always false for HTTP/1.0, where the expectation MUST be ignored).
    pub expect_continue: bool,
    /// The request line and field lines as received (or as rebuilt by
    /// [`redirected`](Self::redirected)); the spans below point into it.
    bytes: Vec<u8>,
    target: TextSpan,
    path: PathSpan,
    query: Option<TextSpan>,
    host: Option<TextSpan>,
    /// All field lines in the order received.
    fields: Vec<FieldSpan>,
    /// The names of `fields`.
    names: NameFilter,
}

impl RequestHead {
    /// The raw request-target as received.
    pub fn target(&self) -> &str {
        self.target.text(&self.bytes)
    }

    /// The raw, still percent-encoded path: the path of an origin-form target
    /// or of an absolute-form target (`"/"` if empty), `"*"` for asterisk-form
    /// and for an absolute-form OPTIONS with empty path and no query (RFC 9112
    /// §3.2.4), and `""` for the authority-form of CONNECT, which has no path.
    pub fn path(&self) -> &str {
        match self.path {
            PathSpan::Received(span) => span.text(&self.bytes),
            PathSpan::Implied(path) => path,
        }
    }

    /// The raw query after the first `?`, without the `?`.
    pub fn query(&self) -> Option<&str> {
        self.query.map(|span| span.text(&self.bytes))
    }

    /// The authority of an absolute-form or authority-form target if there is
    /// one (then the Host field is ignored, RFC 9112 §3.2.2), else the `Host`
    /// value; `None` only for an HTTP/1.0 request without Host. Validated as
    /// `uri-host [ ":" port ]` but not normalised: compare it
    /// case-insensitively.
    pub fn host(&self) -> Option<&str> {
        self.host.map(|span| span.text(&self.bytes))
    }

    /// All field lines in the order received.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = Header<'_>> + '_ {
        self.fields
            .iter()
            .map(|field| Header { name: field.name.text(&self.bytes), value: field.value.of(&self.bytes) })
    }

    /// The value of the first field named `name` (ASCII case-insensitive).
    // Inline, so that the filter's bit of a literal name is a constant.
    #[inline]
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        if !self.names.may_contain(name.as_bytes()) {
            return None;
        }
        self.find_header(name)
    }

    fn find_header(&self, name: &str) -> Option<&[u8]> {
        self.fields.iter().find(|field| self.is_named(field, name)).map(|field| field.value.of(&self.bytes))
    }

    /// Like [`header`](Self::header), if the value is valid UTF-8.
    #[inline]
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|value| std::str::from_utf8(value).ok())
    }

    /// The values of all fields named `name` (ASCII case-insensitive), in
    /// order received.
    pub fn headers_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields_maybe_named(name)
            .iter()
            .filter(move |field| self.is_named(field, name))
            .map(|field| field.value.of(&self.bytes))
    }

    /// A list field (`Accept-Encoding`, `If-None-Match`, …) whose members
    /// may be spread over several field lines: their values joined with
    /// ", ", as one field value (RFC 9110 §5.3), borrowed when there is
    /// one line; `None` if there is none, or a value is not UTF-8.
    #[inline]
    pub fn list_header<'a>(&'a self, name: &'a str) -> Option<std::borrow::Cow<'a, str>> {
        // Inlined, the filter's bit for a constant name is a constant: the
        // conditional fields most requests lack cost a test and a branch.
        if !self.names.may_contain(name.as_bytes()) {
            return None;
        }
        self.joined_list(name)
    }

    fn joined_list<'a>(&'a self, name: &'a str) -> Option<std::borrow::Cow<'a, str>> {
        let mut lines = self.headers_named(name);
        let first = std::str::from_utf8(lines.next()?).ok()?;
        let Some(second) = lines.next() else { return Some(first.into()) };
        let mut joined = String::from(first);
        for line in std::iter::once(second).chain(lines) {
            joined.push_str(", ");
            joined.push_str(std::str::from_utf8(line).ok()?);
        }
        Some(joined.into())
    }

    /// All fields if one may be named `name`, else none.
    fn fields_maybe_named(&self, name: &str) -> &[FieldSpan] {
        if self.names.may_contain(name.as_bytes()) {
            &self.fields
        } else {
            &[]
        }
    }

    fn is_named(&self, field: &FieldSpan, name: &str) -> bool {
        field.name.0.of(&self.bytes).eq_ignore_ascii_case(name.as_bytes())
    }

    /// A copy of this head that asks for `target` instead, keeping the host
    /// and the field lines `keep` accepts: for a redirect the server follows
    /// itself (a CGI local redirect). `target` is an origin-form path with an
    /// optional `?query`; it is taken as given, not validated again.
    pub fn redirected(&self, target: &str, mut keep: impl FnMut(&Header<'_>) -> bool) -> RequestHead {
        let kept: Vec<Header<'_>> = self.headers().filter(|header| keep(header)).collect();
        let host = self.host().unwrap_or_default();
        let size = target.len()
            + host.len()
            + kept.iter().map(|header| header.name.len() + header.value.len()).sum::<usize>();
        // The text first, so that its spans are made from the `&str` it is;
        // the values, which need not be text, follow it.
        let mut text = String::with_capacity(size);
        let mut push = |part: &str| {
            let start = text.len();
            text.push_str(part);
            start..text.len()
        };
        let target_range = push(target);
        let host_range = self.host.map(|_| push(host));
        let name_ranges: Vec<_> = kept.iter().map(|header| push(header.name)).collect();
        let span = |range: std::ops::Range<usize>| TextSpan::within(text.as_bytes(), &text[range]);
        let target_span = span(target_range.clone());
        let (path, query) = match text[target_range].split_once('?') {
            Some((path, query)) => {
                (TextSpan::within(text.as_bytes(), path), Some(TextSpan::within(text.as_bytes(), query)))
            }
            None => (target_span, None),
        };
        let host_span = host_range.map(span);
        let name_spans: Vec<TextSpan> = name_ranges.into_iter().map(span).collect();
        let mut names = NameFilter::default();
        for header in &kept {
            names.insert(header.name.as_bytes());
        }
        let mut bytes = text.into_bytes();
        let fields = kept
            .iter()
            .zip(name_spans)
            .map(|(header, name)| {
                let start = bytes.len();
                bytes.extend_from_slice(header.value);
                FieldSpan { name, value: Span { start, end: bytes.len() } }
            })
            .collect();
        RequestHead {
            method: self.method.clone(),
            version: self.version,
            framing: self.framing,
            keep_alive: self.keep_alive,
            expect_continue: self.expect_continue,
            bytes,
            target: target_span,
            path: PathSpan::Received(path),
            query,
            host: host_span,
            fields,
            names,
        }
    }
}

/// Shows the parts, not the spans.
impl std::fmt::Debug for RequestHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Fields<'a>(&'a RequestHead);
        impl std::fmt::Debug for Fields<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_map()
                    .entries(self.0.headers().map(|h| (h.name, String::from_utf8_lossy(h.value))))
                    .finish()
            }
        }
        f.debug_struct("RequestHead")
            .field("method", &self.method)
            .field("target", &self.target())
            .field("path", &self.path())
            .field("query", &self.query())
            .field("version", &self.version)
            .field("headers", &Fields(self))
            .field("host", &self.host())
            .field("framing", &self.framing)
            .field("keep_alive", &self.keep_alive)
            .field("expect_continue", &self.expect_continue)
            .finish()
    }
}

/// The outcome of [`parse_request`] on bytes that are not (yet) an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete head.
    Complete {
        /// The head.
        head: RequestHead,
        /// Bytes of the buffer taken by the head, including ignored leading
        /// empty lines; the body or next request starts here.
        len: usize,
    },
    /// The head is not complete yet: call again with more bytes.
    Partial,
}

/// Field slots for a first try, more than most heads need. httparse needs
/// its slots filled before it starts, and filling all 100 cost more than
/// parsing the fields of a small head.
const FIRST_FIELD_SLOTS: usize = 24;

/// Field slots kept on the stack for a head with more fields than the first
/// try had. Heads with a larger [`Limits::max_headers`] use the heap.
const STACK_FIELD_SLOTS: usize = 100;

/// Parses one request head from the start of `buf`.
///
/// Returns [`Parsed::Partial`] if `buf` holds a valid but incomplete head. The
/// limits are enforced on incomplete heads too, so a client that never ends
/// its head is refused once it has sent more than allowed. Only the first
/// [`Limits::max_header_bytes`] of `buf` are ever looked at, so each call
/// costs at most that much, however much the caller has buffered.
///
/// The verdict is a function of the bytes: every prefix of `buf` gets
/// `Partial` or `buf`'s own verdict, and a refusal comes with the first
/// byte that breaks a rule — of syntax or of size, in the order the bytes
/// come ([`HeadScan`]) — without waiting for its line to end.
///
/// Every error means: answer [`ParseError::status`] and close the connection.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parsed, ParseError> {
    parse_request_reusing(buf, limits, &mut None)
}

/// The allocations of a finished [`RequestHead`]
/// ([`RequestHead::into_buffers`]), for [`parse_request_reusing`] to fill
/// instead of allocating.
#[derive(Debug, Default)]
pub struct HeadBuffers {
    bytes: Vec<u8>,
    fields: Vec<FieldSpan>,
}

impl HeadBuffers {
    /// The bytes of memory held, for a caller that keeps only small ones.
    pub fn held(&self) -> usize {
        self.bytes.capacity() + self.fields.capacity() * std::mem::size_of::<FieldSpan>()
    }
}

impl RequestHead {
    /// Gives up this head's allocations for the next one to reuse.
    pub fn into_buffers(self) -> HeadBuffers {
        HeadBuffers { bytes: self.bytes, fields: self.fields }
    }
}

/// [`parse_request`], taking the allocations of the head from `spare` if it
/// has any. They are taken only once the head is complete, so after a
/// [`Parsed::Partial`] `spare` still holds them; a complete head that is
/// refused (a missing Host, conflicting framing) frees them.
pub fn parse_request_reusing(
    buf: &[u8],
    limits: &Limits,
    spare: &mut Option<HeadBuffers>,
) -> Result<Parsed, ParseError> {
    HeadScan::new().parse(buf, limits, spare)
}

/// [`parse_fast`]'s answer when it cannot decide — the head is
/// incomplete, or refused by whatever was looked at first (the error, if
/// any) — so the bytes in order must ([`scan`]): the refusal to give if
/// they end the head anyway, and `decided` cleared. Told apart by a flag
/// beside the verdict, not by an enum around it, so that a decided verdict
/// (a complete head, or a refusal decided by bytes every one of which
/// before it keeps the rules) goes back to the connection without a copy
/// at each level (29 instructions each, by callgrind).
fn undecided(decided: &mut bool, error: Option<ParseError>) -> Result<Parsed, ParseError> {
    *decided = false;
    Err(error.unwrap_or(INVALID_LINE_ENDING))
}

/// A head read the fast way: the request line, then httparse over the
/// field section. Right for a complete head; anything else is only a hint.
fn parse_fast(
    buf: &[u8],
    limits: &Limits,
    spare: &mut Option<HeadBuffers>,
    decided: &mut bool,
) -> Result<Parsed, ParseError> {
    let window = &buf[..buf.len().min(limits.max_header_bytes)];
    let line_start = match skip_empty_lines(window) {
        Ok(Some(start)) => start,
        Ok(None) => return undecided(decided, None),
        Err(error) => return undecided(decided, Some(error)),
    };
    // A request line that has not ended within its limit plus CRLF is too
    // long; looking further would only waste time.
    let rest = &window[line_start..];
    let line = match parse_request_line(&rest[..rest.len().min(limits.max_request_line.saturating_add(2))]) {
        Ok(Some(line)) => line,
        Ok(None) => return undecided(decided, None),
        Err(error) => return undecided(decided, Some(error)),
    };
    let method = Method::from_token(line.method);
    // A refusal here is decided: the target's form at the line's end.
    let target = target::parse(&method, line.target)?;

    let fields_start = line_start + line.len;
    let block = &window[fields_start..];
    let mut first_slots = [httparse::EMPTY_HEADER; FIRST_FIELD_SLOTS];
    let mut stack_slots;
    let mut heap_slots;
    // httparse::parse_headers with its default configuration is strict: no
    // whitespace before the colon, no obs-fold, no invalid fields skipped.
    // It refuses a field for want of a slot only once the field's line is
    // complete, so up to there the first try answers as the second would.
    let parsed =
        match httparse::parse_headers(block, &mut first_slots[..limits.max_headers.min(FIRST_FIELD_SLOTS)]) {
            Err(httparse::Error::TooManyHeaders) if limits.max_headers > FIRST_FIELD_SLOTS => {
                let slots = if limits.max_headers <= STACK_FIELD_SLOTS {
                    stack_slots = [httparse::EMPTY_HEADER; STACK_FIELD_SLOTS];
                    &mut stack_slots[..limits.max_headers]
                } else {
                    heap_slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
                    &mut heap_slots[..]
                };
                httparse::parse_headers(block, slots)
            }
            parsed => parsed,
        };
    let (fields_len, fields) = match parsed {
        Ok(httparse::Status::Complete(done)) => done,
        Ok(httparse::Status::Partial) => return undecided(decided, None),
        Err(error) => return undecided(decided, Some(field_section_error(error))),
    };
    if let Err(error) = check_field_lines(&block[..fields_len], fields, limits.max_field_size) {
        return undecided(decided, Some(error));
    }
    let head = validate(&buf[line_start..fields_start + fields_len], method, line, target, fields, spare);
    head.map(|head| Parsed::Complete { head, len: fields_start + fields_len })
}

/// Skips the empty lines a request may be preceded by (RFC 9112 §2.2: a
/// server SHOULD ignore at least one; some clients send a CRLF after a POST
/// body). Their number is bounded only by [`Limits::max_header_bytes`].
/// Returns where the request line starts, or `None` if `buf` ends first.
fn skip_empty_lines(buf: &[u8]) -> Result<Option<usize>, ParseError> {
    let mut start = 0;
    loop {
        match &buf[start..] {
            [b'\r', b'\n', ..] => start += 2,
            [] | [b'\r'] => return Ok(None),
            [b'\r' | b'\n', ..] => return Err(INVALID_LINE_ENDING),
            _ => return Ok(Some(start)),
        }
    }
}

/// A syntactically valid request line.
#[derive(Debug)]
struct RequestLine<'a> {
    method: &'a str,
    target: &'a str,
    version: Version,
    /// Length including the CRLF.
    len: usize,
}

/// Parses `method SP request-target SP HTTP-version CRLF` (RFC 9112 §3)
/// exactly: one SP each, no other whitespace, no HTTP/0.9 line without
/// version (RFC 9112 §3 lets servers be this strict, and lenient splitting is
/// a classic source of disagreement between parsers).
///
/// Errors are reported at the first offending byte, so garbage is refused
/// without waiting for the end of the line. `None` means more bytes are
/// needed.
///
/// httparse has a request-line parser, but it cannot tell 400 from 505 or
/// 414, and admits `#` and non-ASCII in the target, so every one of its
/// answers would need a second look at the bytes. Doing it here is one pass.
fn parse_request_line(line: &[u8]) -> Result<Option<RequestLine<'_>>, ParseError> {
    let method_len = line.iter().position(|&b| !is_tchar(b)).unwrap_or(line.len());
    match line.get(method_len) {
        None => return Ok(None),
        Some(b' ') if method_len > 0 => {}
        Some(_) => return Err(ParseError::BadRequest("invalid method")),
    }

    let target_start = method_len + 1;
    let target_len =
        line[target_start..].iter().position(|&b| !is_target_char(b)).unwrap_or(line.len() - target_start);
    let target_end = target_start + target_len;
    match line.get(target_end) {
        None => return Ok(None),
        Some(b' ') if target_len > 0 => {}
        Some(b'\r' | b'\n') => return Err(ParseError::BadRequest("missing HTTP version")),
        Some(_) => return Err(ParseError::BadRequest("invalid request-target")),
    }

    // HTTP-version = "HTTP" "/" DIGIT "." DIGIT, case-sensitive (RFC 9112 §2.3).
    let version_start = target_end + 1;
    let (version, after) = line[version_start..].split_at((line.len() - version_start).min(8));
    if !is_version_prefix(version) {
        return Err(INVALID_VERSION);
    }
    match after {
        [] | [b'\r'] => return Ok(None),
        [b'\r', b'\n', ..] => {}
        [b'\r' | b'\n', ..] => return Err(INVALID_LINE_ENDING),
        // `HTTP/1.10`, `HTTP/1.1x`, trailing whitespace, ...
        _ => return Err(INVALID_VERSION),
    }
    let version = match (version[5], version[7]) {
        (b'1', b'0') => Version::Http10,
        // RFC 9110 §2.5: a higher minor version SHOULD be processed as the
        // highest one implemented.
        (b'1', _) => Version::Http11,
        // RFC 9110 §15.6.6: 505 is about the major version.
        _ => return Err(ParseError::VersionNotSupported),
    };
    Ok(Some(RequestLine {
        method: ascii(&line[..method_len]).expect("tchars are ASCII"),
        target: ascii(&line[target_start..target_end]).expect("target characters are ASCII"),
        version,
        len: version_start + 8 + 2,
    }))
}

const INVALID_VERSION: ParseError = ParseError::BadRequest("invalid HTTP version");

/// Whether `version` is the start of `HTTP/DIGIT.DIGIT`.
#[inline]
fn is_version_prefix(version: &[u8]) -> bool {
    // The whole version, as almost always, in a few comparisons.
    if let [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] = version {
        return major.is_ascii_digit() && minor.is_ascii_digit();
    }
    version.iter().zip(b"HTTP/#.#").all(|(&b, &expected)| match expected {
        b'#' => b.is_ascii_digit(),
        _ => b == expected,
    })
}

/// `bytes` as text if it is ASCII: cheaper than `std::str::from_utf8` for the
/// short parts of a head.
#[allow(unsafe_code)] // no safe conversion skips the UTF-8 decoder
#[inline]
fn ascii(bytes: &[u8]) -> Option<&str> {
    // SAFETY: ASCII is UTF-8.
    bytes.is_ascii().then(|| unsafe { std::str::from_utf8_unchecked(bytes) })
}

fn field_section_error(error: httparse::Error) -> ParseError {
    match error {
        httparse::Error::TooManyHeaders => ParseError::HeadersTooLarge,
        // Also whitespace before the colon (RFC 9112 §5.1: MUST 400), a line
        // without colon, and obs-fold (RFC 9112 §5.2), all of which stop the
        // field name at a non-tchar.
        httparse::Error::HeaderName => ParseError::BadRequest("invalid header field name"),
        // CR, LF, NUL (RFC 9110 §5.5: reject or replace) and other controls
        // except HTAB, which a field value has no use for.
        httparse::Error::HeaderValue => ParseError::BadRequest("invalid header field value"),
        httparse::Error::NewLine => INVALID_LINE_ENDING,
        // Errors of the start line, which parse_headers does not parse.
        httparse::Error::Status | httparse::Error::Token | httparse::Error::Version => {
            ParseError::BadRequest("malformed header section")
        }
    }
}

/// Checks the line ends and lengths of a complete field section, including
/// the empty line that ends it, and its `fields` as httparse parsed them.
///
/// httparse accepts a bare LF as line end, which we do not (see
/// [`INVALID_LINE_ENDING`]); a lone CR it already rejects. As it is
/// configured, every line but the empty one is a field line that starts with
/// the field's name, so the lines are found from the names, without looking
/// at every byte again.
fn check_field_lines(
    section: &[u8],
    fields: &[httparse::Header<'_>],
    max_field_size: usize,
) -> Result<(), ParseError> {
    // A complete section ends with its empty line, and a line before it
    // ends with LF, so a CRLF at the end is the empty line.
    let empty_line = section.len() - if section.ends_with(b"\r\n") { 2 } else { 1 };
    let check = |line: &[u8]| match line.strip_suffix(b"\r\n") {
        None => Err(INVALID_LINE_ENDING),
        Some(content) if content.len() > max_field_size => Err(ParseError::HeadersTooLarge),
        Some(_) => Ok(()),
    };
    let mut line_start = None;
    for field in fields {
        let next_start = Span::within(section, field.name.as_bytes()).start;
        if let Some(start) = line_start {
            check(&section[start..next_start])?;
        }
        line_start = Some(next_start);
    }
    if let Some(start) = line_start {
        check(&section[start..empty_line])?;
    }
    if &section[empty_line..] == b"\r\n" {
        Ok(())
    } else {
        Err(INVALID_LINE_ENDING)
    }
}

/// The checks and interpretation that need the whole head. `received` is
/// the head from its request line on; every other argument borrows from it.
fn validate(
    received: &[u8],
    method: Method,
    line: RequestLine<'_>,
    target: target::Target<'_>,
    fields: &[httparse::Header<'_>],
    spare: &mut Option<HeadBuffers>,
) -> Result<RequestHead, ParseError> {
    let HeadBuffers { mut bytes, fields: mut field_spans } = spare.take().unwrap_or_default();
    bytes.clear();
    field_spans.clear();
    field_spans.reserve_exact(fields.len());
    let mut names = NameFilter::default();
    let mut framing = FramingFields::default();
    let mut host_field = None;
    let mut close = false;
    let mut keep_alive = false;
    let mut expect_continue = false;
    for field in fields {
        let (name, value) = (field.name, field.value);
        // Field names are case-insensitive (RFC 9110 §5.1). Note that
        // `Content_Length` is a different field and frames nothing.
        if name.eq_ignore_ascii_case("host") {
            // RFC 9112 §3.2: MUST 400 on more than one Host line, even if
            // identical.
            if host_field.replace(value).is_some() {
                return Err(ParseError::BadRequest("duplicate Host header"));
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            framing.content_length(value)?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            framing.transfer_encoding(value)?;
        } else if name.eq_ignore_ascii_case("connection") {
            close |= has_token(value, "close");
            keep_alive |= has_token(value, "keep-alive");
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue |= has_token(value, "100-continue");
        }
        names.insert(name.as_bytes());
        field_spans
            .push(FieldSpan { name: TextSpan::within(received, name), value: Span::within(received, value) });
    }

    // RFC 9112 §3.2: MUST 400 on an HTTP/1.1 request without Host and on a
    // Host with an invalid value, whatever the form of the target.
    let host_field = match host_field {
        None if line.version == Version::Http11 => {
            return Err(ParseError::BadRequest("missing Host header"));
        }
        None => None,
        // A valid authority is ASCII.
        Some(value) => match ascii(value) {
            Some(host) if is_valid_authority(value, PortRule::Optional) => Some(host),
            _ => return Err(ParseError::BadRequest("invalid Host header")),
        },
    };
    let framing = framing.finish(line.version)?;
    let (keep_alive, expect_continue) = match line.version {
        Version::Http11 => (!close, expect_continue),
        Version::Http10 => (keep_alive && !close, false),
    };
    let path = match target.path {
        target::Path::Received(path) => PathSpan::Received(TextSpan::within(received, path)),
        target::Path::Implied(path) => PathSpan::Implied(path),
    };
    // RFC 9112 §3.2.2: the authority of the target wins over Host.
    let host = target.authority.or(host_field);
    Ok(RequestHead {
        method,
        version: line.version,
        framing,
        keep_alive,
        expect_continue,
        target: TextSpan::within(received, line.target),
        path,
        query: target.query.map(|query| TextSpan::within(received, query)),
        host: host.map(|host| TextSpan::within(received, host)),
        fields: field_spans,
        names,
        bytes: {
            bytes.reserve_exact(received.len());
            bytes.extend_from_slice(received);
            bytes
        },
    })
}

mod scan;
pub use scan::HeadScan;

#[cfg(test)]
mod tests;
