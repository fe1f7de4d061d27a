//! A response ready to write, and how the pipeline builds one: the head
//! every response starts with, error pages, and the per-thread spares of
//! sent responses' buffers. Everything that answers — files, listings,
//! scripts' heads, the connection's own refusals — builds on this.

use h1::{ResponseHead, Version};
use transport::{Chunk, Data, Outbound};

use crate::listing::html_escape;
use crate::Settings;

/// What the pipeline decided to send for one request.
#[derive(Debug)]
pub struct Response {
    /// Status code (for the log and the metrics).
    pub status: u16,
    /// Head and body, ready to write.
    pub out: Outbound,
    /// Bytes of `out` that are the head (the access log counts body bytes).
    pub head_len: u64,
    /// The connection must close after this response.
    pub close: bool,
    /// How the pipeline got the answer, and how long it took (timing on).
    pub(crate) data: DataPhase,
    /// The file it sends, for same-document grouping (`--schedule srpt-group`).
    pub document: Option<crate::schedule::Document>,
}

/// The data phase of a reply, for the per-phase statistics.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DataPhase {
    /// Served from memory (cache hit, embedded file).
    pub hit: bool,
    /// Time in the pipeline (zero with timing off).
    pub took: std::time::Duration,
}

/// Starts a response head with the headers every response carries.
#[inline]
pub(crate) fn start(settings: &Settings, status: u16, version: Version, keep_alive: bool) -> ResponseHead {
    let mut head = ResponseHead::in_buffer(status, spare::head_buffer());
    head.date().header("Server", &settings.server_name);
    if let Some(hsts) = &settings.hsts {
        head.header("Strict-Transport-Security", &**hsts);
    }
    if !keep_alive {
        head.header("Connection", "close");
    } else if version == Version::Http10 {
        // A 1.0 client keeps the connection only if told so (RFC 9112 §9.3).
        head.header("Connection", "keep-alive");
    }
    head
}

#[inline]
pub(crate) fn finish(
    status: u16,
    head: ResponseHead,
    body: impl IntoIterator<Item = Chunk>,
    keep_alive: bool,
) -> Response {
    let head = head.finish();
    let head_len = head.len() as u64;
    let mut out = spare::outbound();
    out.push(Chunk::Bytes(Data::Owned(head)));
    for chunk in body {
        out.push(chunk);
    }
    Response { status, out, head_len, close: !keep_alive, data: DataPhase::default(), document: None }
}

/// The allocations of sent replies, per thread, for the next ones: a head
/// is written into a sent head's buffer and queued in a sent response's
/// queue, which spares two allocations per response. A thread that builds
/// replies another thread sends finds none and allocates, as before.
pub(crate) mod spare {
    use transport::Outbound;

    use crate::spares::{self, Spares};

    /// What a new head reserves, as `ResponseHead::new` does.
    const HEAD_CAPACITY: usize = 256;

    thread_local! {
        /// Enough for the replies a thread has in flight, mostly; a larger
        /// head buffer (a head with long fields) is freed.
        static HEADS: Spares<Vec<u8>> = const { Spares::new(16, |head| (1..=4096).contains(&head.capacity())) };
        /// Queues with room for a head and a body, or a few ranges: one
        /// grown by a many-part reply is freed, not kept for good.
        static QUEUES: Spares<Outbound> = const { Spares::new(16, |out| out.queue_capacity() <= 8) };
    }

    pub(super) fn head_buffer() -> Vec<u8> {
        spares::take(&HEADS).unwrap_or_else(|| Vec::with_capacity(HEAD_CAPACITY))
    }

    pub(super) fn outbound() -> Outbound {
        spares::take(&QUEUES).unwrap_or_default()
    }

    /// Takes back a reply's `out` once it has been sent.
    pub(crate) fn give_back(mut out: Outbound) {
        spares::give_back(&HEADS, out.recycle());
        spares::give_back(&QUEUES, out);
    }
}

/// A small HTML error page with exact framing. `extra` headers precede the body headers.
pub(crate) fn error_page(
    settings: &Settings,
    status: u16,
    version: Version,
    keep_alive: bool,
    is_head: bool,
    extra: &[(&str, &str)],
) -> Response {
    let reason = h1::reason_phrase(status);
    let body = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{status} {reason}</title></head>\n\
         <body><h1>{status} {reason}</h1><hr><p>{}</p></body></html>\n",
        html_escape(&settings.server_name)
    );
    let mut head = start(settings, status, version, keep_alive);
    for (name, value) in extra {
        head.header(name, value);
    }
    head.header("Content-Type", "text/html; charset=utf-8").header_u64("Content-Length", body.len() as u64);
    let chunk = (!is_head).then(|| Chunk::Bytes(Data::Owned(body.into_bytes())));
    finish(status, head, chunk, keep_alive)
}

/// The answer to a request that could not be parsed: always closes, since
/// the position of the next request in the stream is unknown (RFC 9112 §9.3).
pub(crate) fn refuse(settings: &Settings, status: u16) -> Response {
    error_page(settings, status, Version::Http11, false, false, &[])
}
