//! What the pipeline answers a request with ([`Reply`]: a response, a
//! started script, or `Continue`), and the answer for the site's files,
//! directories and listings.

use std::io;

use h1::{Method, RequestHead};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use transport::{Chunk, Data};

use crate::conditional::{self, Precondition};
use crate::range::{self, RangeOutcome};
use crate::response::{error_page, finish, start, Response};
use crate::site::{fnv1a, Blocking, Found, Refusal, Resource};
use crate::{multipart, Pipeline, Route, Settings, Site};

/// What the pipeline answers a request from a connection with.
#[derive(Debug)]
pub enum Reply {
    /// A response to write.
    Response(Response),
    /// A CGI script was started: the connection streams its response.
    Script {
        /// The running script and what its response needs of the request.
        spawned: Box<crate::cgi_stream::Spawned>,
        /// Time to start it (timing on).
        took: std::time::Duration,
    },
    /// The request was a `100 Continue` probe (a chunked body is coming)
    /// and its script exists: the connection asks for the body.
    Continue,
}

impl Reply {
    /// How long the pipeline took (timing on; zero for a probe).
    pub(crate) fn took(&self) -> std::time::Duration {
        match self {
            Reply::Response(r) => r.data.took,
            Reply::Script { took, .. } => *took,
            Reply::Continue => std::time::Duration::ZERO,
        }
    }

    /// Records how long the pipeline took (timing on).
    pub(crate) fn set_took(&mut self, d: std::time::Duration) {
        match self {
            Reply::Response(r) => r.data.took = d,
            Reply::Script { took, .. } => *took = d,
            Reply::Continue => {}
        }
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
    let settings = &p.settings;
    let is_head = req.method == Method::Head;
    let page = |status, extra: &[(&str, &str)]| {
        error_page(settings, status, req.version, keep_alive, is_head, extra)
    };
    match route {
        Route::Site => {}
        Route::Refuse(status) => return Some(page(status, &[])),
        Route::ServerWide => return Some(no_content_allow(settings, req, keep_alive)),
        Route::Script => {
            // Scripts are started by `Pipeline::handle_request`, which knows the
            // connection; here a CGI path is refused rather than ever served as a file.
            if blocking == Blocking::Avoid {
                return None;
            }
            p.error_log.error(format_args!("{}: CGI request without its connection", req.path()));
            return Some(page(500, &[]));
        }
    }
    let (found, hit) = p.site.lookup(path, &p.cache, settings, blocking)?;
    let mut reply = answer(p, req, keep_alive, path, found);
    reply.data.hit = hit;
    Some(reply)
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
fn answer(p: &Pipeline, req: &RequestHead, keep_alive: bool, path: &str, found: Found) -> Response {
    let settings = &p.settings;
    let is_head = req.method == Method::Head;
    let page = |status, extra: &[(&str, &str)]| {
        error_page(settings, status, req.version, keep_alive, is_head, extra)
    };
    if !matches!(found, Found::Resource(_) | Found::Listing(_)) {
        return match found {
            Found::AddSlash => {
                let mut location = utf8_percent_encode(path, PATH_ESCAPES).to_string();
                location.push('/');
                if let Some(query) = req.query() {
                    location.push('?');
                    location.push_str(query);
                }
                page(301, &[("Location", &location)])
            }
            Found::Forbidden(why) => {
                log_refusal(p, path, &why);
                page(403, &[])
            }
            Found::Failed(e) => {
                p.error_log.error(format_args!("{path}: {e}"));
                page(500, &[])
            }
            _ => page(404, &[]),
        };
    }
    match req.method {
        Method::Get | Method::Head => {}
        Method::Options => return no_content_allow(settings, req, keep_alive),
        _ => return page(405, &[("Allow", ALLOW)]),
    }
    match found {
        Found::Resource(resource) => respond(settings, req, path, &resource, keep_alive),
        Found::Listing(html) => {
            let mut head = start(settings, 200, req.version, keep_alive);
            head.header("Content-Type", "text/html; charset=utf-8")
                .header_u64("Content-Length", html.len() as u64)
                .header("Cache-Control", "no-cache");
            let chunk = (!is_head).then(|| Chunk::Bytes(Data::Owned(html.into_bytes())));
            finish(200, head, chunk, keep_alive)
        }
        _ => unreachable!("only resources and listings get here"),
    }
}

fn no_content_allow(settings: &Settings, req: &RequestHead, keep_alive: bool) -> Response {
    let mut head = start(settings, 204, req.version, keep_alive);
    head.header("Allow", ALLOW);
    finish(204, head, None, keep_alive)
}

/// GET or HEAD of a file: conditionals (RFC 9110 §13.2.2), then ranges (§14).
fn respond(settings: &Settings, req: &RequestHead, path: &str, res: &Resource, keep_alive: bool) -> Response {
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
    let len = res.len();
    let precondition = conditional::evaluate(
        true,
        req.header_str("If-Match"),
        req.header_str("If-Unmodified-Since"),
        req.header_str("If-None-Match"),
        req.header_str("If-Modified-Since"),
        res.etag(),
        res.modified(),
    );
    match precondition {
        Precondition::Proceed => {}
        Precondition::Failed => return error_page(settings, 412, req.version, keep_alive, is_head, &[]),
        Precondition::NotModified => {
            // 304 carries the validators a 200 would have, and no body (RFC 9110 §15.4.5).
            let mut head = start(settings, 304, req.version, keep_alive);
            head.header("ETag", res.etag()).header("Last-Modified", res.last_modified().as_ref());
            add_caching(&mut head);
            return finish(304, head, None, keep_alive);
        }
    }
    // Range handling is defined for GET only (RFC 9110 §14.2).
    let ranges = match req.header_str("Range") {
        Some(value) if req.method == Method::Get => {
            let honoured = req
                .header_str("If-Range")
                .is_none_or(|v| conditional::if_range_allows(v, res.etag(), res.modified()));
            if honoured {
                range::evaluate(value, len, settings.max_ranges)
            } else {
                RangeOutcome::Full
            }
        }
        _ => RangeOutcome::Full,
    };
    let content_type = res.content_type();
    // A whole file or a single range is one chunk: no list to allocate.
    let (status, head, chunk, parts) = match ranges {
        RangeOutcome::Full => {
            let mut head = start(settings, 200, req.version, keep_alive);
            res.whole_fields(&mut head);
            add_caching(&mut head);
            (200, head, Some(res.chunk(0..len)), Vec::new())
        }
        RangeOutcome::Unsatisfiable => {
            let content_range = format!("bytes */{len}");
            return error_page(
                settings,
                416,
                req.version,
                keep_alive,
                is_head,
                &[("Content-Range", &content_range)],
            );
        }
        RangeOutcome::Partial(ranges) if ranges.len() == 1 => {
            let r = ranges[0].clone();
            let mut head = start(settings, 206, req.version, keep_alive);
            head.header("Content-Type", content_type)
                .header("Content-Range", format!("bytes {}-{}/{len}", r.start, r.end - 1))
                .header_u64("Content-Length", r.end - r.start);
            res.validators(&mut head);
            add_caching(&mut head);
            (206, head, Some(res.chunk(r)), Vec::new())
        }
        RangeOutcome::Partial(ranges) => {
            let boundary = format!("{:016x}", fnv1a(res.etag().as_bytes()));
            let layout = multipart::layout(&ranges, len, content_type, &boundary);
            let mut head = start(settings, 206, req.version, keep_alive);
            head.header("Content-Type", &layout.content_type)
                .header_u64("Content-Length", layout.content_length);
            res.validators(&mut head);
            add_caching(&mut head);
            let parts = layout
                .parts
                .into_iter()
                .map(|part| match part {
                    multipart::Part::Bytes(b) => Chunk::Bytes(Data::Owned(b)),
                    multipart::Part::File { offset, len } => res.chunk(offset..offset + len),
                })
                .collect();
            (206, head, None, parts)
        }
    };
    let body = chunk.into_iter().chain(parts).filter(|_| !is_head);
    finish(status, head, body, keep_alive)
}
