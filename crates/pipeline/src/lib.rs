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
//! * [`cgi`]: CGI/1.1 scripts (RFC 3875) — the environment, the response
//!   head, starting and reaping; the connection streams their I/O.
//! * Pure helpers: [`resolve`] (safe paths), [`range`], [`conditional`],
//!   [`multipart`], [`listing`].
//!
//! Nothing here spawns a thread, forks or polls; that is the models' job.
#![warn(missing_docs)]

pub mod accesslog;
mod cache;
pub mod cgi;
mod cgi_stream;
pub mod conditional;
mod conn;
pub mod errorlog;
pub mod listing;
pub mod multipart;
pub mod range;
mod reply;
pub mod resolve;
mod settings;
mod site;
mod spares;
pub mod stats;

pub use accesslog::{AccessLog, LogRecord};
pub use cache::Cache;
pub use cgi::{CgiSettings, Program, Scripts};
pub use conn::{
    refuse_overloaded, serve_blocking, serve_blocking_queued, ConnInfo, Connection, Request, Waiting, Want,
    BLOCKING_TICK,
};
pub use errorlog::ErrorLog;
pub use reply::{Reply, Response};
pub use settings::Settings;
pub use site::{EmbeddedFile, Site};
pub use stats::Stats;

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
    /// Running CGI scripts (count, reaping).
    cgi_runtime: Arc<cgi::Runtime>,
    /// Per-phase timing, counters, queues, scoreboard, trace.
    pub stats: Arc<Stats>,
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
        let stats = Arc::default();
        Pipeline { settings, site, cache, access_log, error_log, cgi_runtime: Arc::default(), stats }
    }

    /// Replaces the (default: timing on, no trace) statistics.
    pub fn with_stats(mut self, stats: Stats) -> Pipeline {
        self.stats = Arc::new(stats);
        self
    }

    /// CGI scripts running in this process now.
    pub fn cgi_running(&self) -> usize {
        self.cgi_runtime.running()
    }

    /// Runs `f`, stamping the reply with how long it took (timing on).
    fn timed(&self, f: impl FnOnce() -> Reply) -> Reply {
        if !self.stats.timing {
            return f();
        }
        let start = std::time::Instant::now();
        let mut reply = f();
        reply.set_took(start.elapsed());
        reply
    }

    /// All request stages fused: resolve the target, load the resource
    /// (may block on the disk), evaluate conditionals and ranges, and plan
    /// the response. `keep_alive` is the connection's decision, echoed in
    /// the `Connection` header.
    pub fn handle(&self, head: &h1::RequestHead, keep_alive: bool) -> Reply {
        self.timed(|| self.handle_untimed(head, keep_alive))
    }

    fn handle_untimed(&self, head: &h1::RequestHead, keep_alive: bool) -> Reply {
        Reply::Response(
            reply::handle(self, head, keep_alive, reply::Blocking::Allowed).expect("blocking is allowed"),
        )
    }

    /// Whether `head` names a CGI script (its normalised path is under the
    /// CGI prefix). Cheap: no file system access.
    pub fn is_cgi(&self, head: &h1::RequestHead) -> bool {
        self.settings.cgi.as_ref().is_some_and(|cgi| {
            head.path().starts_with('/')
                && resolve::normalize(head.path()).is_ok_and(|path| cgi::route(&cgi.prefix, &path))
        })
    }

    /// [`handle`](Self::handle) for a request taken from a [`Connection`]:
    /// the same, except that a CGI script is started (which may block on
    /// `stat` and `exec`, like a disk read) and handed to the connection in
    /// the reply, which then streams its I/O.
    pub fn handle_request(&self, req: &Request) -> Reply {
        self.timed(|| self.answer(req))
    }

    /// [`handle_request`](Self::handle_request) without its timing, for a
    /// connection that runs the pipeline itself between timestamps it takes anyway.
    pub(crate) fn answer(&self, req: &Request) -> Reply {
        match &self.settings.cgi {
            Some(cgi) if self.is_cgi(&req.head) => self.start_script(cgi, req),
            _ => self.handle_untimed(&req.head, req.keep_alive),
        }
    }

    fn start_script(&self, settings: &CgiSettings, req: &Request) -> Reply {
        let head = &req.head;
        // A HEAD answer has no body, or the next response on the
        // connection would be read from the middle of this one.
        let is_head = head.method == h1::Method::Head;
        let page = |status, extra: &[(&str, &str)]| {
            Reply::Response(reply::error_page(
                &self.settings,
                status,
                head.version,
                req.keep_alive,
                is_head,
                extra,
            ))
        };
        let Ok(path) = resolve::normalize(head.path()) else { return page(400, &[]) };
        let (file, args, script_name, path_info) = match cgi::lookup(settings, &path) {
            cgi::Lookup::Script { file, args, script_name, path_info } => {
                (file, args, script_name, path_info)
            }
            cgi::Lookup::Missing => return page(404, &[]),
            cgi::Lookup::Forbidden => return page(403, &[]),
        };
        if req.probe {
            // The script exists: the connection may now send `100 Continue`.
            return Reply::Continue;
        }
        let document_root = match &self.site {
            Site::Dir(root) => Some(root.path()),
            Site::Embedded(_) => None,
        };
        let env = cgi::build_env(&cgi::EnvInput {
            head,
            script_name: &script_name,
            path_info: &path_info,
            script_filename: &file,
            document_root,
            remote: req.peer,
            local: req.local,
            server_software: &self.settings.server_name,
            path_env: &settings.path_env,
        });
        let body = matches!(head.framing, h1::BodyFraming::Length(1..));
        match cgi::spawn(&self.cgi_runtime, settings, &file, &args, env, body, script_name) {
            Ok(process) => {
                let spawned = cgi_stream::Spawned {
                    process,
                    head: head.clone(),
                    local: req.local,
                    redirects: req.redirects,
                };
                Reply::Script { spawned: Box::new(spawned), took: Default::default() }
            }
            // RFC 9110 §15.6.4: overloaded, try again shortly.
            Err(cgi::SpawnError::Busy) => page(503, &[("Retry-After", "1")]),
            Err(cgi::SpawnError::Exec(e)) => match e.kind() {
                std::io::ErrorKind::NotFound => page(404, &[]),
                std::io::ErrorKind::PermissionDenied => page(403, &[]),
                _ => {
                    self.error_log.error(format_args!("cgi {path}: cannot start: {e}"));
                    page(500, &[])
                }
            },
        }
    }

    /// [`handle`](Self::handle), but only if the answer needs no disk I/O
    /// beyond one `stat` (whose inode a served file keeps in memory): a
    /// validated cache hit, an embedded file, or an error decided by the
    /// request alone. `None` means "ask a thread that may block" — Flash's
    /// split between its event loop and its helpers.
    pub fn handle_in_memory(&self, head: &h1::RequestHead, keep_alive: bool) -> Option<Reply> {
        if !self.stats.timing {
            return reply::handle(self, head, keep_alive, reply::Blocking::Avoid).map(Reply::Response);
        }
        let start = std::time::Instant::now();
        let mut response = reply::handle(self, head, keep_alive, reply::Blocking::Avoid)?;
        response.data.took = start.elapsed();
        Some(Reply::Response(response))
    }
}
