//! What the pipeline answers a request with ([`Reply`]: a response, or a
//! streamed responder's start), and the answer for the site's files,
//! directories and listings.

use std::io;

use h1::{Method, RequestHead};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use transport::{Chunk, Data};

use crate::cache::Variant;
use crate::compress::{self, Coding};
use crate::conditional::{self, Precondition};
use crate::range::{self, RangeOutcome};
use crate::responder::{Start, Starter};
use crate::response::{error_page, finish, start, Response};
use crate::site::{fnv1a, Blocking, Found, Refusal, Resource};
use crate::{multipart, Pipeline, Route, Settings, Site};

/// What the pipeline answers a request from a connection with.
///
/// A file, a cached entry, an error or admin page is a [`Response`], a
/// plain variant: the static path allocates nothing and calls nothing
/// indirectly for it (see `responder.rs`); only a streamed answer is a
/// trait object.
#[derive(Debug)]
pub enum Reply {
    /// A response to write.
    Response(Response),
    /// A streamed responder's start (a CGI script, spawned; or word that it
    /// exists, asked before a `100 Continue`): the connection streams it.
    Stream {
        /// The start, as its handler made it.
        start: Start,
        /// Time to start it (timing on).
        took: std::time::Duration,
    },
}

impl Reply {
    /// How long the pipeline took (timing on).
    pub(crate) fn took(&self) -> std::time::Duration {
        match self {
            Reply::Response(r) => r.data.took,
            Reply::Stream { took, .. } => *took,
        }
    }

    /// Records how long the pipeline took (timing on).
    pub(crate) fn set_took(&mut self, d: std::time::Duration) {
        match self {
            Reply::Response(r) => r.data.took = d,
            Reply::Stream { took, .. } => *took = d,
        }
    }

    /// A streamed responder's start.
    pub(crate) fn stream(starter: Box<dyn Starter>) -> Reply {
        Reply::Stream { start: Start(starter), took: std::time::Duration::ZERO }
    }
}

/// What a static resource allows; sent with 405 and OPTIONS (RFC 9110 §10.2.1).
const ALLOW: &str = "GET, HEAD, OPTIONS";

/// Characters escaped when a decoded path goes back into a `Location`
/// header: everything that is not a valid path character, so no CR/LF or
/// quote can reach the header (response splitting).
const PATH_ESCAPES: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

pub(crate) fn handle(
    p: &Pipeline,
    req: &RequestHead,
    route: Route,
    path: &str,
    keep_alive: bool,
    blocking: Blocking,
) -> Option<Response> {
    let fail = |status, extra: &[(&str, &str)]| error_response(p, req, keep_alive, blocking, status, extra);
    match route {
        Route::Site => {}
        Route::Refuse(status) => return fail(status, &[]),
        Route::ServerWide => return Some(no_content_allow(&p.settings, req, keep_alive)),
        Route::Streamed => {
            // A streamed handler is started by `Pipeline::handle_request`
            // (CGI's in `cgi_stream.rs`), which knows the connection; here
            // its path is refused rather than ever served as a file.
            if blocking == Blocking::Avoid {
                return None;
            }
            p.error_log.error(format_args!("{}: CGI request without its connection", req.path()));
            return fail(500, &[]);
        }
    }
    let (found, hit) = p.site.lookup(path, &p.cache, &p.settings, blocking)?;
    let mut reply = answer(p, req, keep_alive, path, found, blocking)?;
    reply.data.hit = hit;
    Some(reply)
}

/// The answer for an error `status`: the site's page for it
/// (`--error-page`) with that status, or the built-in one — also when the
/// site's page cannot be served, which the error log says (once a minute).
/// `None`: the page is not in memory and `blocking` says not to read it.
pub(crate) fn error_response(
    p: &Pipeline,
    req: &RequestHead,
    keep_alive: bool,
    blocking: Blocking,
    status: u16,
    extra: &[(&str, &str)],
) -> Option<Response> {
    let settings = &p.settings;
    let is_head = req.method == Method::Head;
    if let Some(page_path) = settings.error_pages.for_status(status) {
        let why = match p.site.lookup(page_path, &p.cache, settings, blocking)?.0 {
            Found::Resource(page) => {
                let mut head = start(settings, status, req.version, keep_alive);
                for (name, value) in extra {
                    head.header(name, value);
                }
                let len = page.len();
                head.header("Content-Type", page.content_type()).header_u64("Content-Length", len);
                let body = (!is_head).then(|| page.chunk(0..len));
                return Some(finish(status, head, body, keep_alive));
            }
            Found::Missing => "not found".to_string(),
            Found::Failed(e) => e.to_string(),
            Found::Forbidden(_) => "forbidden".to_string(),
            Found::AddSlash | Found::Listing(_) => "a directory".to_string(),
        };
        p.error_log.warn_once(
            page_path,
            format_args!("--error-page {status}={page_path}: {why}; the built-in page is sent instead"),
        );
    }
    Some(error_page(settings, status, req.version, keep_alive, is_head, extra))
}

/// Says in the error log why a path got 403 (once a minute per path, see
/// `ErrorLog::warn_once`): an operator who sees 403s in the access log
/// should not have to guess between permissions, a symlink and a missing
/// index. nginx and Apache log the same causes.
fn log_refusal(p: &Pipeline, path: &str, why: &Refusal) {
    let Site::Dir(root) = &p.site else { return };
    let on_disk = root.path().join(path.trim_start_matches('/'));
    let on_disk = on_disk.display();
    let reason = match why {
        Refusal::NoIndex => {
            format!("directory {on_disk} has no index.html and listings are off (--browse lists it)")
        }
        Refusal::NotRegular => format!("{on_disk} is not a regular file or directory: never served"),
        Refusal::Denied(e) => match e.get_ref().and_then(|inner| inner.downcast_ref::<io::Error>()) {
            Some(inner) if inner.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => format!(
                "{on_disk} leads out of ROOT (through a symlink; --follow-symlinks allows that): {inner}"
            ),
            Some(inner) => format!("{on_disk}: a symlink that is refused or loops: {inner}"),
            None if e.raw_os_error().is_some() => {
                format!("{on_disk} cannot be opened by the server's user: {e}")
            }
            None => format!("{on_disk}: {e}"),
        },
    };
    p.error_log.warn_once(path, format_args!("403 {path}: {reason}"));
}

/// The reply for what the lookup found.
fn answer(
    p: &Pipeline,
    req: &RequestHead,
    keep_alive: bool,
    path: &str,
    found: Found,
    blocking: Blocking,
) -> Option<Response> {
    let settings = &p.settings;
    let is_head = req.method == Method::Head;
    let fail = |status, extra: &[(&str, &str)]| error_response(p, req, keep_alive, blocking, status, extra);
    if !matches!(found, Found::Resource(_) | Found::Listing(_)) {
        return match found {
            Found::AddSlash => {
                let mut location = utf8_percent_encode(path, PATH_ESCAPES).to_string();
                location.push('/');
                if let Some(query) = req.query() {
                    location.push('?');
                    location.push_str(query);
                }
                // A redirect is no error: the built-in page carries it.
                Some(error_page(settings, 301, req.version, keep_alive, is_head, &[("Location", &location)]))
            }
            Found::Forbidden(why) => {
                log_refusal(p, path, &why);
                fail(403, &[])
            }
            Found::Failed(e) => {
                p.error_log.error(format_args!("{path}: {e}"));
                fail(500, &[])
            }
            _ => fail(404, &[]),
        };
    }
    match req.method {
        Method::Get | Method::Head => {}
        Method::Options => return Some(no_content_allow(settings, req, keep_alive)),
        _ => return fail(405, &[("Allow", ALLOW)]),
    }
    match found {
        Found::Resource(resource) => {
            // A directory's resource is its index: encodings are the index's.
            let file_path: std::borrow::Cow<'_, str> =
                if path.ends_with('/') { format!("{path}index.html").into() } else { path.into() };
            let chosen = choose(p, req, &file_path, &resource, blocking)?;
            respond(p, req, path, &chosen, keep_alive, blocking)
        }
        Found::Listing(html) => {
            let mut head = start(settings, 200, req.version, keep_alive);
            head.header("Content-Type", "text/html; charset=utf-8")
                .header_u64("Content-Length", html.len() as u64)
                .header("Cache-Control", "no-cache");
            let chunk = (!is_head).then(|| Chunk::Bytes(Data::Owned(html.into_bytes())));
            Some(finish(200, head, chunk, keep_alive))
        }
        _ => unreachable!("only resources and listings get here"),
    }
}

fn no_content_allow(settings: &Settings, req: &RequestHead, keep_alive: bool) -> Response {
    let mut head = start(settings, 204, req.version, keep_alive);
    head.header("Allow", ALLOW);
    finish(204, head, None, keep_alive)
}

/// GET or HEAD of a file: conditionals (RFC 9110 §13.2.2), then ranges (§14),
/// all on the representation chosen — an encoded one has its own length,
/// validator and byte ranges (§14.1.1: ranges are of the encoded bytes).
fn respond(
    p: &Pipeline,
    req: &RequestHead,
    path: &str,
    rep: &Chosen<'_>,
    keep_alive: bool,
    blocking: Blocking,
) -> Option<Response> {
    let settings = &p.settings;
    let is_head = req.method == Method::Head;
    let caching = settings.cache_control.for_path(path);
    // What the 200 would say of caching, on every answer that stands for it.
    let add_caching = |head: &mut h1::ResponseHead| {
        if let Some(rule) = caching {
            head.header("Cache-Control", rule.value());
            // An HTTP/1.0 cache may know only Expires (RFC 9111 §5.3).
            if req.version == h1::Version::Http10 {
                if let Some(expires) = rule.expires(std::time::SystemTime::now()) {
                    head.header("Expires", &expires);
                }
            }
        }
    };
    let len = rep.len();
    let precondition = conditional::evaluate(
        true,
        req.list_header("If-Match").as_deref(),
        req.header_str("If-Unmodified-Since"),
        req.list_header("If-None-Match").as_deref(),
        req.header_str("If-Modified-Since"),
        rep.etag(),
        rep.modified(),
    );
    match precondition {
        Precondition::Proceed => {}
        Precondition::Failed => return error_response(p, req, keep_alive, blocking, 412, &[]),
        Precondition::NotModified => {
            // 304 carries the validators a 200 would have, Vary too, and
            // no body (RFC 9110 §15.4.5).
            let mut head = start(settings, 304, req.version, keep_alive);
            head.header("ETag", rep.etag()).header("Last-Modified", rep.last_modified().as_ref());
            if rep.vary {
                head.header("Vary", "Accept-Encoding");
            }
            add_caching(&mut head);
            return Some(finish(304, head, None, keep_alive));
        }
    }
    // Range handling is defined for GET only (RFC 9110 §14.2).
    let ranges = match req.header_str("Range") {
        Some(value) if req.method == Method::Get => {
            let honoured = req
                .header_str("If-Range")
                .is_none_or(|v| conditional::if_range_allows(v, rep.etag(), rep.modified()));
            if honoured {
                range::evaluate(value, len, settings.max_ranges)
            } else {
                RangeOutcome::Full
            }
        }
        _ => RangeOutcome::Full,
    };
    let content_type = rep.res.content_type();
    // A whole file or a single range is one chunk: no list to allocate.
    let (status, head, chunk, parts) = match ranges {
        RangeOutcome::Full => {
            let mut head = start(settings, 200, req.version, keep_alive);
            rep.whole_fields(&mut head);
            add_caching(&mut head);
            (200, head, Some(rep.chunk(0..len)), Vec::new())
        }
        RangeOutcome::Unsatisfiable => {
            let content_range = format!("bytes */{len}");
            return error_response(p, req, keep_alive, blocking, 416, &[("Content-Range", &content_range)]);
        }
        RangeOutcome::Partial(ranges) if ranges.len() == 1 => {
            let r = ranges[0].clone();
            let mut head = start(settings, 206, req.version, keep_alive);
            head.header("Content-Type", content_type)
                .header("Content-Range", format!("bytes {}-{}/{len}", r.start, r.end - 1))
                .header_u64("Content-Length", r.end - r.start);
            rep.validators(&mut head);
            add_caching(&mut head);
            (206, head, Some(rep.chunk(r)), Vec::new())
        }
        RangeOutcome::Partial(ranges) => {
            let boundary = format!("{:016x}", fnv1a(rep.etag().as_bytes()));
            let layout = multipart::layout(&ranges, len, content_type, &boundary);
            let mut head = start(settings, 206, req.version, keep_alive);
            head.header("Content-Type", &layout.content_type)
                .header_u64("Content-Length", layout.content_length);
            rep.validators(&mut head);
            add_caching(&mut head);
            let parts = layout
                .parts
                .into_iter()
                .map(|part| match part {
                    multipart::Part::Bytes(b) => Chunk::Bytes(Data::Owned(b)),
                    multipart::Part::File { offset, len } => rep.chunk(offset..offset + len),
                })
                .collect();
            (206, head, None, parts)
        }
    };
    let body = chunk.into_iter().chain(parts).filter(|_| !is_head);
    let mut response = finish(status, head, body, keep_alive);
    response.document = (!is_head).then(|| rep.document());
    Some(response)
}

/// The representation a GET or HEAD of a file is answered with.
struct Chosen<'a> {
    /// The file as it is on disk.
    res: &'a Resource,
    form: Form<'a>,
    /// Whether the answer depends on `Accept-Encoding`: `Vary` says so to
    /// caches, on the unencoded answer too (RFC 9110 §12.5.5).
    vary: bool,
}

enum Form<'a> {
    Identity,
    /// Encoded by the server, kept in the file's cache entry.
    Encoded(&'a Variant),
    /// A precompressed file (`FILE.br`) in place of the file.
    Sibling(Coding, Resource),
}

/// Picks the representation: the best coding the client accepts of a
/// precompressed sibling (not older than the file) or of the cached
/// file encoded by the server, else the file as it is. Files of other
/// types, or below `--compress-min-size` without precompressed siblings,
/// are never encoded, so their answers do not vary.
fn choose<'a>(
    p: &Pipeline,
    req: &RequestHead,
    file_path: &str,
    res: &'a Resource,
    blocking: Blocking,
) -> Option<Chosen<'a>> {
    let identity = |vary| Some(Chosen { res, form: Form::Identity, vary });
    let c = &p.settings.compression;
    if !c.is_on() || !c.compressible(res.content_type()) {
        return identity(false);
    }
    // On the fly: files the cache holds (larger ones go out as they are:
    // encoding them per request would cost CPU per request and lose
    // `sendfile`; precompress those).
    let entry = match res {
        Resource::Cached(entry) if !c.codings.is_empty() && res.len() >= c.min_size => Some(entry),
        _ => None,
    };
    if entry.is_none() && !c.precompressed {
        return identity(false);
    }
    let offered = offered(&c.codings, c.precompressed);
    let accept_encoding = req.list_header("Accept-Encoding");
    let accepted = compress::accepted(accept_encoding.as_deref(), &offered.list[..offered.len]);
    for coding in accepted.codings() {
        if c.precompressed {
            let mut sibling_path = String::with_capacity(file_path.len() + 4);
            sibling_path.push_str(file_path);
            sibling_path.push_str(coding.extension());
            match p.site.sibling(&sibling_path, &p.cache, &p.settings, blocking)? {
                Some(sibling) if not_older(sibling.modified(), res.modified()) => {
                    return Some(Chosen { res, form: Form::Sibling(coding, sibling), vary: true });
                }
                _ => {}
            }
        }
        let Some(entry) = entry.filter(|_| c.codings.contains(&coding)) else { continue };
        if entry.variant_made(coding).is_none() {
            if blocking == Blocking::Avoid {
                // Encoding is CPU work a loop should not do: a helper makes it, once.
                return None;
            }
            if c.aside && entry.identity.len > compress::ENCODE_INLINE_MAX {
                // A loop that runs the pipeline itself has no helper to
                // wait on: the encoder makes it, and until then the file
                // goes out as it is (still `Vary`: a later answer differs).
                entry.encode_aside(coding);
                continue;
            }
        }
        if let Some(variant) = entry.variant(coding, &p.cache, file_path) {
            return Some(Chosen { res, form: Form::Encoded(variant), vary: true });
        }
    }
    // Nothing it accepts can be made: the file as it is, even where the
    // client said `identity;q=0` — as nginx and Caddy answer, and as RFC
    // 9110 §12.5.3 prefers ("SHOULD send a response without any content
    // coding"); §15.5.7 lets a server disregard the field rather than
    // answer 406, which clients that send it handle worse than a body.
    identity(true)
}

/// Whether a precompressed sibling made at `sibling` is as new as its
/// file, made at `file`, to the whole second: `brotli -k` (1.0.9) and
/// `gzip -k` keep the file's time in whole seconds, so a sibling made from
/// a file with a fractional time looks a fraction older than it.
fn not_older(sibling: std::time::SystemTime, file: std::time::SystemTime) -> bool {
    let secs = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    secs(sibling) >= secs(file)
}

/// The codings a file may be sent in, in the server's order: `--compress`'s
/// list, then (for `--precompressed`) the others.
struct Offered {
    list: [Coding; 3],
    len: usize,
}

fn offered(codings: &[Coding], precompressed: bool) -> Offered {
    let mut out = Offered { list: Coding::ALL, len: 0 };
    let rest = Coding::ALL.into_iter().filter(|c| precompressed && !codings.contains(c));
    for coding in codings.iter().copied().chain(rest) {
        out.list[out.len] = coding;
        out.len += 1;
    }
    out
}

impl Chosen<'_> {
    fn len(&self) -> u64 {
        match &self.form {
            Form::Identity => self.res.len(),
            Form::Encoded(variant) => variant.bytes.len() as u64,
            Form::Sibling(_, sibling) => sibling.len(),
        }
    }

    fn etag(&self) -> &str {
        match &self.form {
            Form::Identity => self.res.etag(),
            Form::Encoded(variant) => &variant.etag,
            // Its own inode, size and time: a tag of its own.
            Form::Sibling(_, sibling) => sibling.etag(),
        }
    }

    fn modified(&self) -> std::time::SystemTime {
        match &self.form {
            Form::Sibling(_, sibling) => sibling.modified(),
            _ => self.res.modified(),
        }
    }

    fn last_modified(&self) -> std::borrow::Cow<'_, str> {
        match &self.form {
            Form::Sibling(_, sibling) => sibling.last_modified(),
            _ => self.res.last_modified(),
        }
    }

    fn coding(&self) -> Option<Coding> {
        match &self.form {
            Form::Identity => None,
            Form::Encoded(variant) => Some(variant.coding),
            Form::Sibling(coding, _) => Some(*coding),
        }
    }

    /// The fields of a 200: type (the file's own), coding, length, validators.
    fn whole_fields(&self, head: &mut h1::ResponseHead) {
        match &self.form {
            Form::Identity => {
                self.res.whole_fields(head);
                if self.vary {
                    head.header("Vary", "Accept-Encoding");
                }
            }
            Form::Encoded(variant) => {
                head.lines(&variant.whole_fields);
            }
            Form::Sibling(..) => {
                head.header("Content-Type", self.res.content_type()).header_u64("Content-Length", self.len());
                self.validators(head);
            }
        }
    }

    /// What follows the framing fields of a 200 or 206: coding, validators, `Vary`.
    fn validators(&self, head: &mut h1::ResponseHead) {
        if let Some(coding) = self.coding() {
            head.header("Content-Encoding", coding.token());
        }
        head.header("Last-Modified", self.last_modified().as_ref())
            .header("ETag", self.etag())
            .header("Accept-Ranges", "bytes");
        if self.vary {
            head.header("Vary", "Accept-Encoding");
        }
    }

    /// The file whose bytes go out: the precompressed sibling if that is
    /// the answer, else the file (an encoding made by the server is kept
    /// with it).
    fn document(&self) -> crate::schedule::Document {
        match &self.form {
            Form::Sibling(_, sibling) => sibling.document(),
            Form::Identity | Form::Encoded(_) => self.res.document(),
        }
    }

    fn chunk(&self, range: std::ops::Range<u64>) -> Chunk {
        match &self.form {
            Form::Identity => self.res.chunk(range),
            Form::Encoded(variant) => {
                Chunk::Bytes(Data::Shared(variant.bytes.clone(), range.start as usize..range.end as usize))
            }
            Form::Sibling(_, sibling) => sibling.chunk(range),
        }
    }
}
