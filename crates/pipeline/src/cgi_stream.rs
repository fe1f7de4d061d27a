//! A CGI script as the connection's streamed responder: its start (the
//! answer to a request under the CGI prefix, [`answer`]: looked up, its
//! `100 Continue` check, spawned) and its run — moving bytes between a
//! client and the script, without ever blocking: the request body (collected whole by the connection before the
//! script starts, in memory or spooled) to the script's stdin, its stdout
//! (head parsed, then framed) to the connection, which sends it, its stderr to the error log —
//! all at once, so a script that prints before it reads its input cannot
//! deadlock against us (bad-input K11).
//!
//! A script's run is the [`Responder`] the connection drives: its `pump`
//! goes as far as every pipe allows, hands the framed output to the
//! connection's [`Output`] and says what it waits for; it touches no
//! socket, so the same code runs for a blocking model (which then `poll`s,
//! see [`Connection::wait_blocking`](crate::Connection::wait_blocking)) and
//! an event loop (which registers the pipes in epoll).
//! Memory is bounded: the script's stdout is not read while [`OUT_HIGH`]
//! bytes of output are unsent, and at most [`IN_CHUNK`] bytes of a
//! spooled body are held, so a 3 GB response streams in constant space.

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use h1::{BodyFraming, RequestHead, Version};
use rustix::io::Errno;
use transport::poller::Interest;

use crate::cgi::{self, parse_head, CgiProcess, CgiSettings, ScriptResponse};
use crate::responder::{BodyStart, Output, Responder, Starter, Streamed};
use crate::spool::Spool;
use crate::stats::Phase;
use crate::{reply, response, site, Pipeline, Reply, Request, Site};

/// Internal redirects one request may take (Apache's `LimitInternalRecursion 10`).
const MAX_REDIRECTS: u8 = 10;

/// A script started for a request, on its way from the pipeline (which
/// may run on a helper thread) to the connection. Opaque outside the
/// pipeline: models only carry it, inside a [`Reply`](crate::Reply).
#[derive(Debug)]
pub struct Spawned {
    pub(crate) process: CgiProcess,
    /// The request, for a local redirect (§6.2.2).
    pub(crate) head: RequestHead,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) redirects: u8,
}

impl Starter for Spawned {
    /// `cgi_spawn`, and `cgi` in the trace's data column.
    fn timed(&self) -> Option<(Phase, &'static str)> {
        Some((Phase::CgiSpawn, "cgi"))
    }

    fn start(self: Box<Self>, body: BodyStart, p: &Pipeline) -> Result<Box<dyn Responder>, u16> {
        Ok(Box::new(CgiRun::new(self, body, p)))
    }
}

/// A script that exists, for a request whose body is still to come: the
/// connection may send `100 Continue`, collect the body, and ask again.
#[derive(Debug)]
struct Found;

impl Starter for Found {
    fn timed(&self) -> Option<(Phase, &'static str)> {
        None
    }

    fn start(self: Box<Self>, _body: BodyStart, p: &Pipeline) -> Result<Box<dyn Responder>, u16> {
        p.error_log.error(format_args!("cgi: a script's check was taken for its start"));
        Err(500)
    }
}

/// Whether `head` only asks if its script exists: a body is announced but
/// not sent until `100 Continue` (RFC 9110 §10.1.1). The connection asks
/// so before it reads a body, and asks for the start with the body
/// collected, its expectation cleared.
fn body_to_come(head: &RequestHead) -> bool {
    head.expect_continue && matches!(head.framing, BodyFraming::Chunked | BodyFraming::Length(1..))
}

/// The answer to a request under the CGI prefix (the [`crate::Route::Streamed`]
/// that `Pipeline::route` gives it): its script's start, or
/// its error page (the site's `--error-page`, as for files). May block,
/// as a disk read may: `stat` in the lookup, `fork`/`exec` in the start.
pub(crate) fn answer(p: &Pipeline, settings: &CgiSettings, req: &Request) -> Reply {
    let head = &req.head;
    // A HEAD answer gets no body.
    let page = |status, extra: &[(&str, &str)]| {
        let blocking = site::Blocking::Allowed;
        Reply::Response(
            reply::error_response(p, head, req.keep_alive, blocking, status, extra)
                .expect("blocking is allowed"),
        )
    };
    let path = req.path();
    let (file, args, script_name, path_info) = match cgi::lookup(settings, path) {
        cgi::Lookup::Script { file, args, script_name, path_info } => (file, args, script_name, path_info),
        cgi::Lookup::Missing => return page(404, &[]),
        cgi::Lookup::Forbidden => return page(403, &[]),
    };
    if body_to_come(head) {
        return Reply::stream(Box::new(Found));
    }
    let document_root = match &p.site {
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
        server_software: &p.settings.server_name,
        path_env: &settings.path_env,
        https: p.tls.is_some(),
    });
    let body = matches!(head.framing, BodyFraming::Length(1..));
    match cgi::spawn(&p.cgi_runtime, settings, &file, &args, env, body, script_name) {
        Ok(process) => Reply::stream(Box::new(Spawned {
            process,
            head: head.clone(),
            local: req.local,
            redirects: req.redirects,
        })),
        // RFC 9110 §15.6.4: overloaded, try again shortly.
        Err(cgi::SpawnError::Busy) => page(503, &[("Retry-After", "1")]),
        Err(cgi::SpawnError::Exec(e)) => match e.kind() {
            std::io::ErrorKind::NotFound => page(404, &[]),
            std::io::ErrorKind::PermissionDenied => page(403, &[]),
            _ => {
                p.error_log.error(format_args!("cgi {path}: cannot start: {e}"));
                page(500, &[])
            }
        },
    }
}

/// Output unsent to the client beyond which the script's stdout is not
/// read (it then blocks on its pipe: back-pressure, not buffering).
const OUT_HIGH: u64 = 64 << 10;
/// One read from the script.
const READ_SIZE: usize = 16 << 10;
/// Spooled body bytes read back per step.
const IN_CHUNK: usize = 64 << 10;
/// A partial stderr line is logged once it grows this long.
const MAX_STDERR_LINE: usize = 4096;
/// Stderr lines logged per run; the rest is read and dropped, so a script
/// that floods stderr cannot fill the error log.
const MAX_STDERR_LINES: u32 = 1000;
/// One read of stderr.
const STDERR_READ: usize = 4096;

/// How the script's body reaches the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// `Transfer-Encoding: chunked` (HTTP/1.1 without a script `Content-Length`).
    Chunked,
    /// The script's `Content-Length`: this many bytes are still due.
    Length(u64),
    /// HTTP/1.0 without a length: the close delimits the body.
    Close,
    /// HEAD, 204, 304: the script's body is read and dropped.
    Drop,
}

/// How long a script's output may stay open after the script exited
/// (a background child holding it) before its response is ended.
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, PartialEq, Eq)]
enum Out {
    /// Reading the script's header block.
    Head,
    Body(Framing),
    /// The script closed stdout; its response is complete once sent.
    Eof,
    /// The script closed stdout without a valid head: answer once it has
    /// exited (its status decides 500 or 502).
    Failed(&'static str),
}

/// A script's run, seen from the connection.
#[derive(Debug)]
struct CgiRun {
    sp: Box<Spawned>,
    keep_alive: bool,
    version: Version,
    head_only: bool,
    /// A spooled body, still being passed to the script.
    spool: Option<Spool>,
    stdin_buf: Vec<u8>,
    stdin_pos: usize,
    /// Output unsent after the last `pump`: less at the next one means
    /// the connection sent some, which is progress.
    unsent_seen: u64,
    script_head: Vec<u8>,
    state: Out,
    stderr_line: Vec<u8>,
    stderr_lines_logged: u32,
    /// The status sent (or to send).
    status: u16,
    /// The final response head has been queued: a failure can no longer be told.
    started: bool,
    /// Body bytes (payload) queued for the client.
    body_bytes: u64,
    close_after: bool,
    deadline: Instant,
    timeout: Duration,
    /// When the script was seen to have exited while its output was still
    /// open (a background child holds it): its response ends [`EXIT_GRACE`]
    /// later.
    exited_at: Option<Instant>,
}

impl CgiRun {
    fn new(sp: Box<Spawned>, body: BodyStart, p: &Pipeline) -> CgiRun {
        let BodyStart { keep_alive, buffered, spooled } = body;
        let timeout = p.settings.cgi.as_ref().map_or(Duration::from_secs(60), |c| c.timeout);
        CgiRun {
            version: sp.head.version,
            head_only: sp.head.method == h1::Method::Head,
            sp,
            keep_alive,
            spool: spooled,
            stdin_buf: buffered,
            stdin_pos: 0,
            unsent_seen: 0,
            script_head: Vec::new(),
            state: Out::Head,
            stderr_line: Vec::new(),
            stderr_lines_logged: 0,
            status: 200,
            started: false,
            body_bytes: 0,
            close_after: false,
            deadline: Instant::now() + timeout,
            timeout,
            exited_at: None,
        }
    }

    /// Every pipe of the script, with the readiness it can ever report: for
    /// registering them once with an edge-triggered poller.
    fn all_pipes(&self) -> Vec<(BorrowedFd<'_>, Interest)> {
        let pr = &self.sp.process;
        let mut v = Vec::with_capacity(4);
        v.extend(pr.stdin.as_ref().map(|fd| (fd.as_fd(), Interest::WRITABLE)));
        v.extend(pr.stdout.as_ref().map(|fd| (fd.as_fd(), Interest::READABLE)));
        v.extend(pr.stderr.as_ref().map(|fd| (fd.as_fd(), Interest::READABLE)));
        v.extend(pr.pidfd.as_ref().map(|fd| (fd.as_fd(), Interest::READABLE)));
        v
    }

    /// What the last `pump` is waiting for, exactly (for level-triggered
    /// `poll`): each pipe's readiness, with `out` left unsent.
    fn wants(&self, out: &Output) -> Vec<(BorrowedFd<'_>, Interest)> {
        let pr = &self.sp.process;
        let out_pending = out.pending();
        let stdin_pending = self.stdin_pos < self.stdin_buf.len();
        let mut fds = Vec::with_capacity(4);
        if stdin_pending {
            fds.extend(pr.stdin.as_ref().map(|fd| (fd.as_fd(), Interest::WRITABLE)));
        }
        if out.unsent() < OUT_HIGH {
            fds.extend(pr.stdout.as_ref().map(|fd| (fd.as_fd(), Interest::READABLE)));
        }
        fds.extend(pr.stderr.as_ref().map(|fd| (fd.as_fd(), Interest::READABLE)));
        // Its exit is awaited once its output is handled, and watched for
        // while the output is open (a background child may hold it); once
        // seen, the grace's deadline wakes the waiter, not the pidfd, which
        // stays readable.
        if (pr.stdout.is_none() && !out_pending) || (pr.stdout.is_some() && self.exited_at.is_none()) {
            fds.extend(pr.pidfd.as_ref().map(|fd| (fd.as_fd(), Interest::READABLE)));
        }
        fds
    }

    /// Moves every byte that can move now, the output into `out`.
    fn move_bytes(&mut self, out: &mut Output, p: &Pipeline) -> Streamed {
        // What the connection sent since the last call moved the response.
        let mut moved = out.unsent() < self.unsent_seen;
        // Stderr is drained (a full pipe would stall the script) but is not
        // progress, and only a bounded amount per call: a script writing it
        // non-stop must neither keep us here nor escape its timeout.
        self.pump_stderr(p);
        loop {
            let mut progress = false;
            match self.pump_stdin(p) {
                Ok(true) => progress = true,
                Ok(false) => {}
                Err(end) => return end,
            }
            if out.unsent() < OUT_HIGH {
                match self.pump_stdout(out, p) {
                    Ok(true) => progress = true,
                    Ok(false) => {}
                    Err(streamed) => return streamed,
                }
            }
            if self.sp.process.stdout.is_none() && !out.pending() {
                // Everything the script said has been handled: wait for its exit.
                let exited = self.sp.process.try_reap();
                if exited.is_some() || self.sp.process.pidfd.is_none() {
                    self.drain_stderr(p);
                    return match std::mem::replace(&mut self.state, Out::Eof) {
                        Out::Failed(why) => {
                            let failed = exited.is_some_and(|s| !s.success());
                            let status = if failed { 500 } else { 502 };
                            let how = exited.map_or("?".into(), |s| s.to_string());
                            p.error_log.error(format_args!(
                                "cgi {}: {why} ({how}); answered {status}",
                                self.sp.process.name
                            ));
                            Streamed::Failed(status)
                        }
                        _ => Streamed::Done { close: self.close_after || !self.keep_alive },
                    };
                }
            }
            if !progress {
                if self.output_outlives_the_script(out, p) {
                    continue;
                }
                break;
            }
            moved = true;
        }
        self.unsent_seen = out.unsent();
        let now = Instant::now();
        if moved {
            // A timeout for a script that makes no progress (Apache's
            // `Timeout`): moving its input or output moves it.
            self.deadline = now + self.timeout;
        } else if now >= self.deadline {
            return Streamed::TimedOut;
        }
        Streamed::Wait(self.exited_at.map_or(self.deadline, |at| self.deadline.min(at + EXIT_GRACE)))
    }

    /// Body to the script: the bytes in memory, or the spool's, read back
    /// a chunk at a time. `Err`: how the run ends (the spool failed).
    fn pump_stdin(&mut self, p: &Pipeline) -> Result<bool, Streamed> {
        let Some(stdin) = &self.sp.process.stdin else { return Ok(false) };
        let mut progress = false;
        if self.stdin_pos < self.stdin_buf.len() {
            match rustix::io::write(stdin, &self.stdin_buf[self.stdin_pos..]) {
                Ok(n) => {
                    self.stdin_pos += n;
                    progress = true;
                }
                Err(Errno::AGAIN | Errno::INTR) => return Ok(false),
                Err(_) => {
                    // EPIPE: the script does not want (the rest of) its
                    // input. What is left of the body is dropped by the
                    // connection before the next request.
                    self.sp.process.stdin = None;
                    self.spool = None;
                    self.stdin_buf = Vec::new();
                    self.stdin_pos = 0;
                    return Ok(true);
                }
            }
        }
        if self.stdin_pos < self.stdin_buf.len() {
            return Ok(progress);
        }
        self.stdin_buf.clear();
        self.stdin_pos = 0;
        if let Some(spool) = &mut self.spool {
            self.stdin_buf.resize(IN_CHUNK, 0);
            return match spool.read_next(&mut self.stdin_buf) {
                Ok(n) => {
                    self.stdin_buf.truncate(n);
                    if n == 0 {
                        self.spool = None;
                        self.sp.process.stdin = None;
                    }
                    Ok(true)
                }
                Err(e) => {
                    // The script is cut short of its body: stop it rather
                    // than let it act on a part.
                    p.error_log.error(format_args!(
                        "cgi {}: reading the spooled request body back: {e}; script stopped",
                        self.sp.process.name
                    ));
                    self.sp.process.kill();
                    Err(if self.started { Streamed::Abort } else { Streamed::Failed(500) })
                }
            };
        }
        // §4.2: the script sees end-of-file after exactly CONTENT_LENGTH bytes.
        self.sp.process.stdin = None;
        Ok(true)
    }

    /// The script's output: head, then body. `Err` ends the run.
    /// The script's output ended: the response is ended by its framing
    /// (the last chunk; a close where the body came short of its length or
    /// is delimited by the close), or fails if no head was read.
    fn end_of_output(&mut self, out: &mut Output) {
        self.sp.process.stdout = None;
        // The script is done talking; it gets no more input either.
        self.sp.process.stdin = None;
        self.state = match std::mem::replace(&mut self.state, Out::Eof) {
            Out::Head if self.script_head.is_empty() => Out::Failed("no output"),
            Out::Head => Out::Failed("output ended inside the header block"),
            Out::Body(Framing::Chunked) => {
                out.extend_from_slice(b"0\r\n\r\n");
                Out::Eof
            }
            Out::Body(Framing::Length(due)) => {
                // Shorter than its Content-Length: only a close tells the client.
                self.close_after |= due > 0;
                Out::Eof
            }
            Out::Body(Framing::Close) => {
                self.close_after = true;
                Out::Eof
            }
            other => other,
        };
    }

    /// Whether the script exited [`EXIT_GRACE`] ago with its output still
    /// open — a background child it started holds it (`sleep 60 &`) — in
    /// which case its output is taken as ended here (what it wrote before
    /// is sent, the response ends properly) and the error log says why;
    /// its process group, the child with it, goes when it is reaped.
    /// Apache waits for the end of file, up to its `Timeout`.
    fn output_outlives_the_script(&mut self, out: &mut Output, p: &Pipeline) -> bool {
        if self.sp.process.stdout.is_none() || out.pending() {
            return false;
        }
        let now = Instant::now();
        match self.exited_at {
            None => {
                if self.sp.process.has_exited() {
                    self.exited_at = Some(now);
                }
                false
            }
            Some(at) if now >= at + EXIT_GRACE => {
                p.error_log.warn(format_args!(
                    "cgi {}: exited, but its output stayed open {} s (a process it started holds it); \
                     the response ends with what it wrote",
                    self.sp.process.name,
                    EXIT_GRACE.as_secs()
                ));
                self.end_of_output(out);
                true
            }
            Some(_) => false,
        }
    }

    fn pump_stdout(&mut self, out: &mut Output, p: &Pipeline) -> Result<bool, Streamed> {
        let Some(stdout) = &self.sp.process.stdout else { return Ok(false) };
        let mut buf = [0u8; READ_SIZE];
        let n = match rustix::io::read(stdout, &mut buf) {
            Ok(n) => n,
            Err(Errno::AGAIN) => return Ok(false),
            Err(Errno::INTR) => return Ok(true),
            Err(_) => 0,
        };
        if n == 0 {
            self.end_of_output(out);
            return Ok(true);
        }
        let data = &buf[..n];
        match self.state {
            Out::Head => {
                self.script_head.extend_from_slice(data);
                let max = p.settings.limits.max_header_bytes;
                match parse_head(&self.script_head, max) {
                    Ok(None) => {}
                    Ok(Some((response, len))) => {
                        let rest = self.script_head.split_off(len);
                        self.script_head = Vec::new();
                        self.start_response(out, response, p)?;
                        self.body(out, &rest);
                    }
                    Err(why) => {
                        p.error_log.error(format_args!(
                            "cgi {}: invalid response head: {why}; answered 502",
                            self.sp.process.name
                        ));
                        self.drain_stderr(p);
                        return Err(Streamed::Failed(502));
                    }
                }
            }
            Out::Body(_) => self.body(out, data),
            Out::Eof | Out::Failed(_) => {}
        }
        Ok(true)
    }

    /// Plans the response from the script's head and queues our head.
    fn start_response(
        &mut self,
        out: &mut Output,
        response: ScriptResponse,
        p: &Pipeline,
    ) -> Result<(), Streamed> {
        let (status, reason, content_length, fields) = match response {
            ScriptResponse::LocalRedirect(location) => return Err(self.redirect(&location, p)),
            ScriptResponse::Document { status, reason, content_length, fields } => {
                (status, reason, content_length, fields)
            }
        };
        let no_body = self.head_only || status == 204 || status == 304;
        let framing = match content_length {
            _ if no_body => Framing::Drop,
            Some(n) => Framing::Length(n),
            None if self.version == Version::Http11 => Framing::Chunked,
            // RFC 9112 §6.3: a 1.0 client reads to the close.
            None => Framing::Close,
        };
        if framing == Framing::Close {
            self.keep_alive = false;
        }
        let mut head = response::start(&p.settings, status, self.version, self.keep_alive);
        for (name, value) in &fields {
            head.header(name, value);
        }
        match (framing, content_length) {
            (Framing::Chunked, _) => {
                head.header("Transfer-Encoding", "chunked");
            }
            (Framing::Length(n), _) => {
                head.header_u64("Content-Length", n);
            }
            // A HEAD answer says what the GET would (RFC 9110 §9.3.2).
            (Framing::Drop, Some(n)) if self.head_only => {
                head.header_u64("Content-Length", n);
            }
            _ => {}
        }
        let head = head.finish();
        match reason {
            // "HTTP/1.1 NNN " is 13 bytes; the standard phrase runs to the CRLF.
            Some(reason) => {
                let line_end = head.iter().position(|&b| b == b'\r').unwrap_or(13);
                out.extend_from_slice(&head[..13]);
                out.extend_from_slice(reason.as_bytes());
                out.extend_from_slice(&head[line_end..]);
            }
            None => out.extend_from_slice(&head),
        }
        self.status = status;
        self.started = true;
        self.state = Out::Body(framing);
        Ok(())
    }

    /// Queues body bytes in the response's framing.
    fn body(&mut self, out: &mut Output, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        match &mut self.state {
            Out::Body(Framing::Chunked) => {
                out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
                self.body_bytes += data.len() as u64;
            }
            Out::Body(Framing::Length(due)) => {
                let take = (*due).min(data.len() as u64);
                *due -= take;
                out.extend_from_slice(&data[..take as usize]);
                self.body_bytes += take;
                if take < data.len() as u64 {
                    // More than it announced: the excess is not sent, and the
                    // connection cannot be trusted to be in sync afterwards.
                    self.close_after = true;
                }
            }
            Out::Body(Framing::Close) => {
                out.extend_from_slice(data);
                self.body_bytes += data.len() as u64;
            }
            _ => {}
        }
    }

    /// The script's stderr into the error log, a line at a time, each
    /// tagged with the script's name: until it would block, or at most the
    /// pipe's capacity. That bound still empties everything that was in
    /// the pipe when this call began (reads take the oldest bytes first),
    /// so what is left was written since and an edge-triggered poller
    /// reports it again.
    fn pump_stderr(&mut self, p: &Pipeline) {
        let Some(stderr) = &self.sp.process.stderr else { return };
        let budget = rustix::pipe::fcntl_getpipe_size(stderr).unwrap_or(64 << 10).max(STDERR_READ);
        let mut read = 0;
        let mut buf = [0u8; STDERR_READ];
        while read < budget {
            let Some(stderr) = &self.sp.process.stderr else { return };
            match rustix::io::read(stderr, &mut buf) {
                Ok(0) | Err(Errno::BADF | Errno::IO) => {
                    self.sp.process.stderr = None;
                    self.flush_stderr(p, true);
                    return;
                }
                Ok(n) => {
                    read += n;
                    if self.stderr_lines_logged < MAX_STDERR_LINES {
                        self.stderr_line.extend_from_slice(&buf[..n]);
                        self.flush_stderr(p, false);
                    }
                }
                Err(Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    /// Logs what the script wrote to stderr before it ended.
    fn drain_stderr(&mut self, p: &Pipeline) {
        self.pump_stderr(p);
        self.flush_stderr(p, true);
    }

    fn flush_stderr(&mut self, p: &Pipeline, all: bool) {
        while let Some(nl) = self.stderr_line.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.stderr_line.drain(..=nl).collect();
            self.log_stderr(p, &line[..nl]);
        }
        if (all && !self.stderr_line.is_empty()) || self.stderr_line.len() >= MAX_STDERR_LINE {
            let line = std::mem::take(&mut self.stderr_line);
            self.log_stderr(p, &line);
        }
    }

    fn log_stderr(&mut self, p: &Pipeline, line: &[u8]) {
        if self.stderr_lines_logged >= MAX_STDERR_LINES {
            return;
        }
        self.stderr_lines_logged += 1;
        if self.stderr_lines_logged == MAX_STDERR_LINES {
            self.stderr_line.clear();
            p.error_log.error(format_args!(
                "cgi {}: stderr truncated after {} lines; the rest is dropped",
                self.sp.process.name,
                MAX_STDERR_LINES - 1
            ));
            return;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // Escaped: a script must not forge log lines with control characters.
        let text: String = String::from_utf8_lossy(line)
            .chars()
            .flat_map(|c| {
                let escaped: Vec<char> = if c.is_control() { c.escape_default().collect() } else { vec![c] };
                escaped
            })
            .collect();
        p.error_log.error(format_args!("cgi {}: {text}", self.sp.process.name));
    }

    /// `Location: /path` (§6.2.2): the answer is that of a GET of the
    /// path, without the body; a HEAD stays a HEAD (Apache keeps
    /// `header_only`), so its answer has no body either.
    fn redirect(&self, location: &str, p: &Pipeline) -> Streamed {
        let sp = &self.sp;
        if sp.redirects + 1 >= MAX_REDIRECTS {
            p.error_log.error(format_args!(
                "cgi {}: more than {MAX_REDIRECTS} internal redirects (to {location})",
                sp.process.name
            ));
            return Streamed::Failed(500);
        }
        let mut head = sp.head.redirected(location, |h| {
            !["content-length", "content-type", "transfer-encoding"]
                .iter()
                .any(|n| h.name.eq_ignore_ascii_case(n))
        });
        if head.method != h1::Method::Head {
            head.method = h1::Method::Get;
        }
        head.framing = BodyFraming::None;
        head.expect_continue = false;
        Streamed::Instead { head: Box::new(head), local: sp.local, redirects: sp.redirects + 1 }
    }
}

impl Responder for CgiRun {
    fn pump(&mut self, out: &mut Output, p: &Pipeline) -> Streamed {
        self.move_bytes(out, p)
    }

    fn waiting(&self, out: &Output) -> Vec<(BorrowedFd<'_>, Interest)> {
        self.wants(out)
    }

    fn descriptors(&self) -> Vec<(BorrowedFd<'_>, Interest)> {
        self.all_pipes()
    }

    /// The grace after the script's exit ran out with its output open.
    fn woken(&self) -> bool {
        let now = Instant::now();
        self.sp.process.stdout.is_some() && self.exited_at.is_some_and(|at| now >= at + EXIT_GRACE)
    }

    /// --cgi-timeout: the script made no progress; its whole process
    /// group goes (bad-input K12).
    fn stop(&mut self, p: &Pipeline) -> Option<u16> {
        self.sp.process.kill();
        p.error_log.error(format_args!("cgi {}: timed out; killed", self.sp.process.name));
        (!self.started).then_some(504)
    }

    fn status(&self) -> u16 {
        self.status
    }

    fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    fn phase(&self) -> Phase {
        Phase::CgiRun
    }
}
