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
mod admission;
mod cache;
pub mod cache_control;
pub mod cgi;
mod cgi_stream;
pub mod compress;
pub mod conditional;
mod conn;
pub mod error_pages;
pub mod errorlog;
mod flights;
pub mod lifecycle;
pub mod listing;
pub mod multipart;
pub mod range;
mod reply;
pub mod resolve;
mod responder;
mod response;
pub mod schedule;
mod settings;
mod site;
mod spares;
mod spool;
pub mod stats;
mod watch;

pub use accesslog::{AccessLog, LogRecord};
pub use admission::{refuse_at_capacity, ConnsPerIp, IpSlot, OverCap};
pub use cache::{Cache, INLINE_MAX_COPY, INLINE_MAX_SENDFILE};
pub use cgi::{CgiSettings, Program, Scripts};
pub use conn::{
    serve_blocking, serve_ready, Client, ConnInfo, Connection, Facts, Gated, Io, Mode, Request, Waiting,
    Want, BLOCKING_TICK, WRITE_PATIENCE,
};
pub use errorlog::ErrorLog;
pub use reply::Reply;
pub use response::Response;
pub use settings::Settings;
pub use site::{EmbeddedFile, Site};
pub use stats::Stats;

use std::sync::Arc;

/// What a request asks of the server: decided once, from its head, when
/// it is parsed ([`Pipeline::route`]), and carried with it
/// ([`Request::route`]), so that no later stage — a helper thread, a
/// stage queue, the pipeline — asks again and answers differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// A resource of the site: a file, a directory, a listing.
    Site,
    /// A handler mounted at a prefix that reads the body and streams its
    /// answer (today the CGI scripts, under the CGI prefix).
    Streamed,
    /// `OPTIONS *`: the server as a whole.
    ServerWide,
    /// Refused by the request alone: an unknown method (501) or a path
    /// that can name nothing (400, 404).
    Refuse(u16),
}

impl Route {
    /// Whether its handler reads the request body itself and streams the
    /// response, rather than being answered at once.
    pub fn reads_body(self) -> bool {
        self == Route::Streamed
    }
}

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
    /// The certificates and settings of a server that speaks TLS.
    pub tls: Option<transport::tls::ServerTls>,
    /// Open connections per client address (`--max-conns-per-ip`), shared
    /// by every process of the server.
    per_ip: Option<ConnsPerIp>,
}

impl Pipeline {
    /// Assembles a pipeline.
    pub fn new(
        settings: Settings,
        site: Site,
        access_log: Arc<AccessLog>,
        error_log: Arc<ErrorLog>,
    ) -> Pipeline {
        let cache = Cache::new(settings.cache_size, settings.max_cached_file)
            .holding_bytes_up_to(settings.inline_max);
        let stats = Arc::default();
        let per_ip = (settings.max_conns_per_ip > 0).then(|| ConnsPerIp::new(settings.max_conns_per_ip));
        let per_ip = per_ip.and_then(|table| {
            table
                .map_err(|e| error_log.error(format_args!("--max-conns-per-ip: no table ({e}); no cap")))
                .ok()
        });
        Pipeline {
            settings,
            site,
            cache,
            access_log,
            error_log,
            cgi_runtime: Arc::default(),
            stats,
            tls: None,
            per_ip,
        }
    }

    /// Speaks TLS with `tls` on every connection.
    pub fn with_tls(mut self, tls: transport::tls::ServerTls) -> Pipeline {
        self.tls = Some(tls);
        self
    }

    /// For an event loop: watches the files the cache holds for changes
    /// (inotify), so a cache hit costs no `stat`, and returns the
    /// descriptor to add to the loop's poll set. Whenever it is readable,
    /// the loop calls [`Pipeline::files_changed`] before anything else it
    /// serves in that turn. `None`: nothing to watch (an embedded site), or
    /// no watch could be made (said in the error log; hits keep the `stat`).
    pub fn watch_files(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        let root = self.site.root_fd()?;
        match self.cache.watch(root, &self.error_log) {
            Ok(fd) => Some(fd),
            Err(e) => {
                self.error_log.warn_once(
                    "inotify",
                    format_args!("cache: cannot watch the document root for changes ({e}): every cache hit is checked with a stat"),
                );
                None
            }
        }
    }

    /// Drops the cache entries of files that changed since the last call
    /// (see [`Pipeline::watch_files`]).
    pub fn files_changed(&self) {
        self.cache.files_changed();
    }

    /// Called instead of [`Pipeline::files_changed`] by a turn that did not
    /// see the watch readable: another loop may have read the changes and
    /// still be dropping their entries; this waits until it has.
    pub fn files_settled(&self) {
        self.cache.settle();
    }

    /// Replaces the (default: timing on, no trace) statistics.
    pub fn with_stats(mut self, stats: Stats) -> Pipeline {
        self.stats = Arc::new(stats);
        self
    }

    /// Writes out the buffered access-log lines and trace rows (the log
    /// flusher calls it twice a second), and says in the error log if
    /// access-log lines had to be dropped (see [`AccessLog::dropped_report`]).
    pub fn flush_logs(&self) {
        self.access_log.flush();
        self.stats.flush();
        if let Some((lines, why)) = self.access_log.dropped_report() {
            self.error_log.error(format_args!(
                "access log: {lines} line(s) dropped, writing failed: {why}; writing resumes by itself once it \
                 succeeds (SIGUSR1 reopens the file)"
            ));
        }
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
    /// the `Connection` header. A script is not started here (that needs
    /// the connection: [`handle_request`](Self::handle_request)).
    pub fn handle(&self, head: &h1::RequestHead, keep_alive: bool) -> Reply {
        self.timed(|| {
            let (route, path) = self.route(head);
            self.answer_route(head, route, path.as_deref().unwrap_or(""), keep_alive)
        })
    }

    fn answer_route(&self, head: &h1::RequestHead, route: Route, path: &str, keep_alive: bool) -> Reply {
        let blocking = site::Blocking::Allowed;
        Reply::Response(
            reply::handle(self, head, route, path, keep_alive, blocking).expect("blocking is allowed"),
        )
    }

    /// What `head` asks of the server, and its normalised path (borrowed
    /// when the path was normal already; `None` when the route needs none).
    /// Decided once per request, when its head is parsed.
    ///
    /// Under the CGI prefix any method goes to the script, which decides
    /// what it supports (RFC 3875 §4.1.12; Apache passes unknown methods
    /// to CGI scripts too, where lighttpd answers 501): the script owns
    /// that URL space. Elsewhere an unknown method is 501 before the path
    /// is looked at.
    pub fn route<'h>(&self, head: &'h h1::RequestHead) -> (Route, Option<std::borrow::Cow<'h, str>>) {
        let raw = head.path();
        let normal = if raw.starts_with('/') { Some(resolve::normalize(raw)) } else { None };
        if let (Some(cgi), Some(Ok(path))) = (&self.settings.cgi, &normal) {
            if cgi::route(&cgi.prefix, path) {
                return (Route::Streamed, normal.and_then(Result::ok));
            }
        }
        if !head.method.is_known() {
            return (Route::Refuse(501), None);
        }
        match normal {
            Some(Ok(path)) => (Route::Site, Some(path)),
            Some(Err(resolve::PathError::BadRequest)) => (Route::Refuse(400), None),
            Some(Err(resolve::PathError::NotFound)) => (Route::Refuse(404), None),
            // The parser admits no other target without a leading '/' than
            // `*`, and that only with OPTIONS.
            None if raw == "*" => (Route::ServerWide, None),
            None => (Route::Refuse(400), None),
        }
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
        match (&self.settings.cgi, req.route) {
            (Some(cgi), Route::Streamed) => cgi_stream::answer(self, cgi, req),
            (_, route) => self.answer_route(&req.head, route, req.path(), req.keep_alive),
        }
    }

    /// [`handle`](Self::handle), but only if the answer needs no disk I/O
    /// beyond one `stat` (whose inode a served file keeps in memory): a
    /// validated cache hit, an embedded file, or an error decided by the
    /// request alone. `None` means "ask a thread that may block" — Flash's
    /// split between its event loop and its helpers.
    pub fn handle_in_memory(&self, req: &Request) -> Option<Reply> {
        let (head, route, path, keep_alive) = (&req.head, req.route, req.path(), req.keep_alive);
        if !self.stats.timing {
            return reply::handle(self, head, route, path, keep_alive, site::Blocking::Avoid)
                .map(Reply::Response);
        }
        let start = std::time::Instant::now();
        let mut response = reply::handle(self, head, route, path, keep_alive, site::Blocking::Avoid)?;
        response.data.took = start.elapsed();
        Some(Reply::Response(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accesslog::LogTarget;

    fn pipeline(cgi: bool) -> Pipeline {
        let mut settings = Settings::default();
        if cgi {
            settings.cgi = Some(CgiSettings::new(Scripts::Dir("/nonexistent".into())));
        }
        let access = Arc::new(AccessLog::open(LogTarget::Off).unwrap());
        Pipeline::new(settings, Site::embedded(&[]), access, Arc::new(ErrorLog::stderr()))
    }

    fn route(p: &Pipeline, request_line: &str) -> (Route, Option<String>) {
        let bytes = format!("{request_line}\r\nHost: x\r\n\r\n");
        let Ok(h1::Parsed::Complete { head, .. }) = h1::parse_request(bytes.as_bytes(), &p.settings.limits)
        else {
            panic!("{request_line:?} parses");
        };
        let (route, path) = p.route(&head);
        (route, path.map(|p| p.into_owned()))
    }

    #[test]
    fn every_request_has_one_route() {
        let (cgi, plain) = (pipeline(true), pipeline(false));
        let site = |path: &str| (Route::Site, Some(path.to_string()));
        assert_eq!(route(&plain, "GET /a/b.txt HTTP/1.1"), site("/a/b.txt"));
        assert_eq!(route(&plain, "GET /a/%62.txt HTTP/1.1"), site("/a/b.txt"), "decoded once, here");
        assert_eq!(route(&plain, "GET /cgi-bin/env HTTP/1.1"), site("/cgi-bin/env"), "CGI off");
        assert_eq!(route(&cgi, "GET /cgi-bin/env HTTP/1.1"), (Route::Streamed, Some("/cgi-bin/env".into())));
        assert_eq!(route(&cgi, "GET /x/../cgi-bin/env HTTP/1.1").0, Route::Streamed, "normalised first");
        assert_eq!(route(&cgi, "FOO /cgi-bin/env HTTP/1.1").0, Route::Streamed, "the script decides");
        assert_eq!(route(&cgi, "FOO /a.txt HTTP/1.1"), (Route::Refuse(501), None));
        assert_eq!(route(&plain, "OPTIONS * HTTP/1.1"), (Route::ServerWide, None));
        assert_eq!(route(&plain, "GET /a%00b HTTP/1.1").0, Route::Refuse(400));
        assert_eq!(route(&plain, "GET /.hidden HTTP/1.1").0, Route::Refuse(404));
    }

    /// `--schedule srpt-group`: requests missing on one document together
    /// are all answered with its bytes (whichever of them read it).
    #[test]
    fn grouped_misses_all_get_the_document() {
        let dir = tempfile::tempdir().unwrap();
        let body: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("doc.bin"), &body).unwrap();
        let srpt = schedule::Srpt { group: true, ..schedule::Srpt::default() };
        let settings = Settings { schedule: schedule::Schedule::Srpt(srpt), ..Settings::default() };
        let access = Arc::new(AccessLog::open(LogTarget::Off).unwrap());
        let site = Site::dir(dir.path(), false).unwrap();
        let p = Pipeline::new(settings, site, access, Arc::new(ErrorLog::stderr()));
        let bytes = b"GET /doc.bin HTTP/1.1\r\nHost: x\r\n\r\n";
        let Ok(h1::Parsed::Complete { head, .. }) = h1::parse_request(bytes, &p.settings.limits) else {
            panic!()
        };
        let bodies: Vec<Vec<u8>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| match p.handle(&head, true) {
                        Reply::Response(mut r) => {
                            assert_eq!(r.status, 200);
                            let mut out = Vec::new();
                            r.out.copy_into(&mut out, usize::MAX).unwrap();
                            out.split_off(r.head_len as usize)
                        }
                        other => panic!("{other:?}"),
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(bodies.iter().all(|b| *b == body));
    }

    /// A cached file past `inline_max` is held as a descriptor and goes out
    /// as a file chunk (`sendfile`); up to it, as bytes. TLS and `uring`
    /// raise `inline_max` so the same file is sent from memory.
    #[test]
    fn cached_files_past_inline_max_go_out_as_files() {
        let dir = tempfile::tempdir().unwrap();
        let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("doc.bin"), &body).unwrap();
        let sent_as_file = |inline_max: u64| {
            let settings = Settings { inline_max, ..Settings::default() };
            let access = Arc::new(AccessLog::open(LogTarget::Off).unwrap());
            let p = Pipeline::new(
                settings,
                Site::dir(dir.path(), false).unwrap(),
                access,
                Arc::new(ErrorLog::stderr()),
            );
            let bytes = b"GET /doc.bin HTTP/1.1\r\nHost: x\r\n\r\n";
            let Ok(h1::Parsed::Complete { head, .. }) = h1::parse_request(bytes, &p.settings.limits) else {
                panic!()
            };
            // The second request is the cache hit.
            let mut kinds = Vec::new();
            for _ in 0..2 {
                let Reply::Response(mut r) = p.handle(&head, true) else { panic!("a response") };
                let mut out = Vec::new();
                r.out.copy_into(&mut out, r.head_len as usize).unwrap();
                kinds.push(matches!(r.out.front(), Some((transport::Chunk::File { .. }, _))));
                out.clear();
                r.out.copy_into(&mut out, usize::MAX).unwrap();
                assert!(out == body, "the file's bytes");
            }
            kinds
        };
        assert_eq!(sent_as_file(INLINE_MAX_SENDFILE), [true, true]);
        assert_eq!(sent_as_file(INLINE_MAX_COPY), [false, false]);
    }
}
