//! What a request needs, independent of who runs it.
//!
//! Brief overview:
//! * [`Pipeline`] holds everything shared by all connections — the [`Site`]
//!   being served, the file [`Cache`], the logs, the [`Settings`] — and turns
//!   a parsed request head into a [`Reply`] ([`Pipeline::handle`]).
//! * [`Connection`] is the per-connection HTTP/1.1 state machine: it reads
//!   heads, asks the pipeline for replies, writes them and decides about
//!   keep-alive, timeouts and lingering close. It works on blocking and
//!   non-blocking sockets alike and reports what it waits for ([`Want`]), so
//!   every concurrency model drives the same code.
//! * Pure helpers: [`resolve`] (safe paths), [`range`], [`conditional`],
//!   [`multipart`], [`listing`].
//!
//! Nothing here spawns a thread, forks or polls; that is the models' job.
#![warn(missing_docs)]

pub mod accesslog;
mod cache;
pub mod conditional;
mod connection;
pub mod errorlog;
pub mod listing;
pub mod multipart;
pub mod range;
mod reply;
pub mod resolve;
mod settings;
mod site;

pub use accesslog::{AccessLog, LogRecord};
pub use cache::Cache;
pub use connection::{refuse_overloaded, serve_blocking, ConnInfo, Connection, Request, Want, BLOCKING_TICK};
pub use errorlog::ErrorLog;
pub use reply::Reply;
pub use settings::Settings;
pub use site::{EmbeddedFile, Site};

use std::sync::Arc;

/// The shared, thread-safe request core. Models hold it in an `Arc`.
#[derive(Debug)]
pub struct Pipeline {
    /// Limits, timeouts and features.
    pub settings: Settings,
    /// What is served.
    pub site: Site,
    /// Small hot files kept in memory.
    pub cache: Cache,
    /// Combined Log Format lines.
    pub access_log: Arc<AccessLog>,
    /// Diagnostics.
    pub error_log: Arc<ErrorLog>,
}

impl Pipeline {
    /// Assembles a pipeline.
    pub fn new(
        settings: Settings,
        site: Site,
        access_log: Arc<AccessLog>,
        error_log: Arc<ErrorLog>,
    ) -> Pipeline {
        let cache = Cache::new(settings.cache_size, settings.max_cached_file);
        Pipeline { settings, site, cache, access_log, error_log }
    }

    /// All request stages fused: resolve the target, load the resource
    /// (may block on the disk), evaluate conditionals and ranges, and plan
    /// the response. `keep_alive` is the connection's decision, echoed in
    /// the `Connection` header.
    pub fn handle(&self, head: &h1::RequestHead, keep_alive: bool) -> Reply {
        reply::handle(self, head, keep_alive, reply::Blocking::Allowed).expect("blocking is allowed")
    }

    /// [`handle`](Self::handle), but only if the answer needs no disk I/O
    /// beyond one `stat` (whose inode a served file keeps in memory): a
    /// validated cache hit, an embedded file, or an error decided by the
    /// request alone. `None` means "ask a thread that may block" — Flash's
    /// split between its event loop and its helpers.
    pub fn handle_in_memory(&self, head: &h1::RequestHead, keep_alive: bool) -> Option<Reply> {
        reply::handle(self, head, keep_alive, reply::Blocking::Avoid)
    }
}
