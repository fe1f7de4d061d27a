//! The director's event loop: one thread, one epoll instance, every socket
//! non-blocking and registered once, edge-triggered, for both directions.
//!
//! Each client connection is a state machine with the paper's four states
//! ([`Phase`]):
//!
//! * **REQUEST** — read and validate a request head with `h1::parse_request`
//!   (the server's own limits and smuggling rules) under a total header
//!   deadline; a small `Content-Length` body (≤ [`PREBUFFER`]) is read too.
//!   Nothing reaches a backend before this state is done, so a malformed or
//!   slow request never holds a backend connection.
//! * **PEEK** — admission ([`Director::admit`]): pick the backend with room
//!   and the fewest requests in flight; none with room → wait in the FIFO
//!   pending queue (bounded by `--queue`) for up to `--queue-timeout`, then
//!   the busy page; no backend up → 502 at once.
//! * **RECEIVE** — send the re-serialised request (and body) on a pooled
//!   keep-alive connection and read the backend's response head, validated
//!   before anything goes to the client (bad → 502, none in time → 504).
//! * **RESPONSE** — relay the body to the client as it arrives, through a
//!   bounded buffer (never the whole body): Content-Length as is, chunked
//!   decoded and re-chunked, close-delimited re-chunked for HTTP/1.1
//!   clients. The backend connection goes back to the pool only after a
//!   complete, correctly framed response; then the client connection goes
//!   back to REQUEST (keep-alive, pipelined requests in order) or closes.
//!
//! Timers are a min-heap of (deadline, token) with at most one live entry
//! per socket. Per-backend bookkeeping is in [`crate::backend`].
//!
//! The same loop runs the health checks (`--health-path`: one HTTP probe
//! per backend per interval, each a non-blocking connection with its own
//! deadline) and serves the admin listener (`--admin`, rendered by
//! [`crate::admin`]); neither ever blocks it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown as NetShutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use h1::{BodyFraming, ChunkedDecoder, Parsed as ReqParsed};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use transport::poller::{Events, Interest, Poller, Trigger};
use transport::Shutdown;

use crate::admin::{label, Metrics};
use crate::backend::{pick, Backend, Limiter, MonitorState};
use crate::forward::{encode_chunk, request_head, LAST_CHUNK};
use crate::monitor::{self, MAX_LINE};
use crate::options::Config;
use crate::response::{client_head, parse_response, ClientFraming, Framing, Parsed, MAX_RESPONSE_HEAD};
use crate::watch::Watch;
use transport::deadlines::{self, Deadlines};
use transport::slab::Slab;

/// A `Content-Length` body up to this size, or this much of a chunked body
/// (all of it if it is shorter), is read in REQUEST, before admission, so
/// that a slow body cannot hold a backend connection either; a longer one
/// is streamed under `--body-timeout`.
pub const PREBUFFER: u64 = 64 * 1024;
/// Bytes buffered towards one peer before the director stops reading from
/// the other (flow control: large bodies are streamed, not buffered).
const OUT_CAP: usize = 64 * 1024;
/// One read.
const READ_SIZE: usize = 16 * 1024;
/// Connections accepted per listener event (the rest on the next round).
const ACCEPT_BATCH: usize = 64;
/// How long a closing connection drains input so the client sees the
/// response rather than a reset.
const LINGER: Duration = Duration::from_secs(2);
/// Steps one connection may take per turn before others get theirs.
const STEPS_PER_TURN: usize = 64;

/// The loop's own descriptors: tokens of kind 0, which no slab issues.
const LISTENER: u64 = 1;
const STOP: u64 = 2;
const MONITOR_LISTENER: u64 = 3;
const ADMIN_LISTENER: u64 = 4;
/// The kinds of the slabs' tokens (`transport::slab`).
const CLIENT: u8 = 1;
const BCONN: u8 = 2;
const MONITOR: u8 = 3;
const ADMIN: u8 = 4;
const PROBE: u8 = 5;
/// Time an admin client gets to send its request and read the answer.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Consecutive passing health checks that bring a backend back.
const HEALTH_RISE: u32 = 2;
/// Consecutive failing health checks that take a backend out (one lost
/// check is not an outage; with the 500 ms default interval a dead backend
/// is still out within about a second).
const HEALTH_FALL: u32 = 2;
/// Statuses that count as failures for the adaptive limiter.
fn is_server_error(status: u16) -> bool {
    matches!(status, 500 | 502 | 503 | 504)
}
/// Passive health counts only gateway errors among statuses (a 500 or 503
/// is the application's answer; see `backend::FailureWindow`).
fn is_gateway_error(status: u16) -> bool {
    matches!(status, 502 | 504)
}
/// How far back requests/s looks.
const RATE_WINDOW: Duration = Duration::from_secs(5);

/// The paper's connection-object states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Reading and validating the request.
    Request,
    /// Deciding: forward, park in the pending queue, or refuse.
    Peek,
    /// Forwarding the request and reading the response head.
    Receive,
    /// Relaying the response to the client.
    Response,
    /// Closing: our side shut, draining input until EOF or a short timeout.
    Linger,
}

impl Phase {
    fn index(self) -> usize {
        self as usize
    }
    const NAMES: [&'static str; 5] = ["REQUEST", "PEEK", "RECEIVE", "RESPONSE", "LINGER"];
}

/// The body of the request being forwarded.
#[derive(Debug)]
enum ReqBody {
    /// Sent (or none).
    Done,
    /// This many bytes still to send.
    Length(u64),
    /// Decoded and re-chunked as it arrives.
    Chunked(Box<ChunkedDecoder>),
}

/// The response being relayed.
#[derive(Debug)]
struct Relay {
    framing: Framing,
    to_client: ClientFraming,
    remaining: u64,
    decoder: Option<Box<ChunkedDecoder>>,
    done: bool,
    backend_close: bool,
}

/// One request/response exchange.
#[derive(Debug)]
struct Exchange {
    fwd_head: Vec<u8>,
    head_request: bool,
    client_11: bool,
    keep_alive: bool,
    expect_continue: bool,
    body: ReqBody,
    /// The request has no body, so it may be sent again after a failure
    /// before any response byte on a reused connection.
    retryable: bool,
    attempts: u32,
    backend: Option<(usize, u64)>,
    /// The response head has gone to the client (after that, a failure can
    /// only abort the connection).
    head_sent: bool,
    relay: Option<Relay>,
    /// The exchange is over once the client's output is flushed.
    done: bool,
    close_after: bool,
    queued_at: Option<Instant>,
    /// The request was parsed (REQUEST done).
    started: Instant,
    /// The backend's requests in flight when this one was attached.
    attached_inflight: usize,
    /// When the whole request (head and body) had been written to the
    /// backend, and `attached_inflight`: the limiter's latency clock
    /// starts there, so a client's slow upload is not the backend's
    /// latency. `None` before (an early answer or a failure during the
    /// upload gives no latency sample).
    sent: Option<(Instant, usize)>,
    /// The status answered (relayed or local).
    status: u16,
}

struct Client {
    stream: TcpStream,
    peer: SocketAddr,
    readable: bool,
    writable: bool,
    phase: Phase,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    deadline: Option<Instant>,
    armed: Option<Instant>,
    /// The next request's head started (first byte, or accept for a fresh
    /// connection): the header deadline runs from here.
    head_started: Option<Instant>,
    /// A chunked body being pre-buffered in REQUEST: its decoder and the
    /// bytes after the head it has consumed.
    chunk_scan: Option<(Box<ChunkedDecoder>, usize)>,
    /// The director answered `100 Continue` to the request being read (it
    /// pre-buffers the body itself; RFC 9110 §10.1.1 lets a proxy do so).
    continued: bool,
    ex: Option<Exchange>,
}

struct BConn {
    stream: TcpStream,
    backend: usize,
    connected: bool,
    readable: bool,
    writable: bool,
    client: Option<u64>,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    /// Has carried a complete exchange: a failure before the first response
    /// byte may be the backend closing an idle keep-alive connection.
    reused: bool,
    deadline: Option<Instant>,
    armed: Option<Instant>,
}

/// An `--admin` client.
struct AdminConn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    answered: bool,
}

/// A `--health-path` check in progress.
struct Probe {
    stream: TcpStream,
    backend: usize,
    connected: bool,
    out: Vec<u8>,
    out_pos: usize,
    inbuf: Vec<u8>,
}

struct MonConn {
    stream: TcpStream,
    peer: IpAddr,
    inbuf: Vec<u8>,
    backends: Option<Vec<usize>>,
    interval: Duration,
}

#[derive(Debug, Default)]
struct Stats {
    accepted: u64,
    requests: u64,
    bad_requests: u64,
    busy_pages: u64,
    queued_total: u64,
    refused_per_ip: u64,
    refused_total: u64,
    bad_gateway: u64,
    gateway_timeout: u64,
    /// Busy pages because the pending queue was full.
    queue_full: u64,
    body_timeouts: u64,
    /// Responses completed, by status.
    responses: BTreeMap<u16, u64>,
}

/// Latency distributions in microseconds (for percentiles; Prometheus
/// gets its own bucketed histograms in [`Metrics`]).
struct Latencies {
    request: Histogram<u64>,
    queue: Histogram<u64>,
    backend: Histogram<u64>,
    per_backend: Vec<Histogram<u64>>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("static bounds")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(d.as_micros().clamp(1, u128::from(u64::MAX)) as u64);
}

fn summary(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!({"count": 0, "mean": null, "p50": null, "p99": null});
    }
    json!({
        "count": h.len(),
        "mean": h.mean().round(),
        "p50": h.value_at_quantile(0.5),
        "p99": h.value_at_quantile(0.99),
    })
}

enum Io {
    Data,
    Eof,
    Blocked,
    Failed,
}

fn read_some(stream: &mut TcpStream, readable: &mut bool, buf: &mut Vec<u8>, cap: usize) -> Io {
    if !*readable || buf.len() >= cap {
        return Io::Blocked;
    }
    let start = buf.len();
    buf.resize(start + READ_SIZE.min(cap - start), 0);
    let r = stream.read(&mut buf[start..]);
    match r {
        Ok(0) => {
            buf.truncate(start);
            Io::Eof
        }
        Ok(n) => {
            buf.truncate(start + n);
            Io::Data
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            buf.truncate(start);
            *readable = false;
            Io::Blocked
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            buf.truncate(start);
            Io::Data
        }
        Err(_) => {
            buf.truncate(start);
            Io::Failed
        }
    }
}

/// Writes what it can; `Err` if the peer is gone. `Ok(true)` if anything
/// was written.
fn flush(
    stream: &mut TcpStream,
    writable: &mut bool,
    out: &mut Vec<u8>,
    pos: &mut usize,
) -> Result<bool, ()> {
    let mut progress = false;
    while *pos < out.len() && *writable {
        match stream.write(&out[*pos..]) {
            Ok(0) => return Err(()),
            Ok(n) => {
                *pos += n;
                progress = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => *writable = false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
    if *pos == out.len() {
        out.clear();
        *pos = 0;
    } else if *pos >= OUT_CAP {
        out.drain(..*pos);
        *pos = 0;
    }
    Ok(progress)
}

/// A response the director writes itself.
fn local_bytes(
    status: u16,
    content_type: &str,
    body: &[u8],
    extra: &[(&str, String)],
    client_11: bool,
    keep: bool,
    head_only: bool,
) -> Vec<u8> {
    let mut h = h1::ResponseHead::new(status);
    h.date().header("Server", "modus-director").header("Content-Type", content_type);
    h.header_u64("Content-Length", body.len() as u64);
    for (name, value) in extra {
        h.header(name, value);
    }
    if !keep {
        h.header("Connection", "close");
    } else if !client_11 {
        h.header("Connection", "keep-alive");
    }
    let mut bytes = h.finish();
    if !head_only {
        bytes.extend_from_slice(body);
    }
    bytes
}

fn error_page(status: u16, detail: &str) -> Vec<u8> {
    format!("{status} {}: {detail}\n", h1::reason_phrase(status)).into_bytes()
}

/// What one step of a client connection asks of the loop.
enum Step {
    /// Progress was made; step again.
    Again,
    /// Waiting for readiness or a timer.
    Blocked,
    /// A request is ready for admission.
    Peek,
    /// Close the connection now.
    Close,
}

/// The director.
pub struct Director {
    cfg: Config,
    poller: Poller,
    listener: Option<TcpListener>,
    monitor_listener: Option<TcpListener>,
    admin_listener: Option<TcpListener>,
    shutdown: Shutdown,
    clients: Slab<Client>,
    bconns: Slab<BConn>,
    monitors: Slab<MonConn>,
    admins: Slab<AdminConn>,
    probes: Slab<Probe>,
    /// The health check in progress per backend.
    probing: Vec<Option<u64>>,
    metrics: Metrics,
    latencies: Latencies,
    /// (when, requests answered) at recent ticks, for requests/s.
    rate_samples: VecDeque<(Instant, u64)>,
    backends: Vec<Backend>,
    queue: VecDeque<u64>,
    timers: Deadlines,
    ready: VecDeque<u64>,
    per_ip: HashMap<IpAddr, usize>,
    rr: usize,
    stats: Stats,
    stopping: Option<Instant>,
    next_tick: Instant,
    started: Instant,
    /// Listener tokens taken out of the poller after an accept failed for
    /// lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS): a
    /// level-triggered listener would wake the loop at once, forever;
    /// `tick` puts them back.
    paused_listeners: Vec<u64>,
    /// What the error log was last told of each backend.
    watch: Watch,
}

impl Director {
    /// Sets up the loop around bound listeners.
    pub fn new(
        cfg: Config,
        listener: TcpListener,
        monitor_listener: Option<TcpListener>,
        admin_listener: Option<TcpListener>,
        shutdown: Shutdown,
    ) -> io::Result<Director> {
        let poller = Poller::new()?;
        listener.set_nonblocking(true)?;
        rustix::net::sockopt::set_tcp_nodelay(&listener, true)?;
        poller.add(&listener, LISTENER, Interest::READABLE, Trigger::Level)?;
        poller.add(shutdown.wake_fd(), STOP, Interest::READABLE, Trigger::Level)?;
        if let Some(m) = &monitor_listener {
            m.set_nonblocking(true)?;
            poller.add(m, MONITOR_LISTENER, Interest::READABLE, Trigger::Level)?;
        }
        if let Some(a) = &admin_listener {
            a.set_nonblocking(true)?;
            poller.add(a, ADMIN_LISTENER, Interest::READABLE, Trigger::Level)?;
        }
        let monitored = monitor_listener.is_some();
        let backends: Vec<Backend> = cfg
            .backends
            .iter()
            .map(|(name, addr)| {
                let limiter = Limiter::new(cfg.adaptive, cfg.max_backend_conns);
                Backend::new(name.clone(), *addr, monitored, limiter)
            })
            .collect();
        let n = backends.len();
        let now = Instant::now();
        let watch = Watch::new(&backends);
        Ok(Director {
            cfg,
            poller,
            listener: Some(listener),
            monitor_listener,
            admin_listener,
            shutdown,
            clients: Slab::new(CLIENT),
            bconns: Slab::new(BCONN),
            monitors: Slab::new(MONITOR),
            admins: Slab::new(ADMIN),
            probes: Slab::new(PROBE),
            probing: vec![None; n],
            metrics: Metrics::new(),
            latencies: Latencies {
                request: histogram(),
                queue: histogram(),
                backend: histogram(),
                per_backend: (0..n).map(|_| histogram()).collect(),
            },
            rate_samples: VecDeque::new(),
            backends,
            queue: VecDeque::new(),
            timers: Deadlines::default(),
            ready: VecDeque::new(),
            per_ip: HashMap::new(),
            rr: 0,
            stats: Stats::default(),
            stopping: None,
            next_tick: now,
            paused_listeners: Vec::new(),
            started: now,
            watch,
        })
    }

    /// Runs until a stop is requested and the connections in flight are done.
    pub fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(512);
        for b in 0..self.backends.len() {
            self.replenish(b);
        }
        loop {
            let now = Instant::now();
            let mut wake = self.next_tick.saturating_duration_since(now);
            if let Some(next) = self.timers.next_in(now) {
                wake = wake.min(next);
            }
            let timeout = if self.ready.is_empty() { wake } else { Duration::ZERO };
            self.poller.wait(&mut events, Some(timeout))?;
            for ev in events.iter() {
                let token = ev.token();
                match (Slab::<()>::kind_of(token), token) {
                    (0, LISTENER) => self.accept(),
                    (0, MONITOR_LISTENER) => self.accept_monitors(),
                    (0, ADMIN_LISTENER) => self.accept_admins(),
                    (0, STOP) => self.begin_stop(),
                    (CLIENT, _) => {
                        if let Some(c) = self.clients.get_mut(token) {
                            c.readable |= ev.is_readable();
                            c.writable |= ev.is_writable();
                            self.drive(token);
                        }
                    }
                    (BCONN, _) => {
                        if let Some(b) = self.bconns.get_mut(token) {
                            b.readable |= ev.is_readable();
                            b.writable |= ev.is_writable();
                            self.backend_event(token, ev.is_gone());
                        }
                    }
                    (MONITOR, _) => self.monitor_event(token),
                    (ADMIN, _) => self.admin_event(token),
                    (PROBE, _) => self.probe_event(token, ev.is_gone()),
                    _ => {}
                }
            }
            self.expire_timers();
            if Instant::now() >= self.next_tick {
                self.tick();
            }
            for _ in 0..self.ready.len() {
                let Some(token) = self.ready.pop_front() else { break };
                self.drive(token);
            }
            self.watch.report(&self.backends);
            if let Some(deadline) = self.stopping {
                if self.clients.is_empty() || Instant::now() >= deadline {
                    return Ok(());
                }
            }
        }
    }

    // ----- accepting -----------------------------------------------------

    fn accept(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let Some(listener) = &self.listener else { return };
            let (mut stream, peer) = match listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.pause_listener(LISTENER);
                    return;
                }
            };
            self.stats.accepted += 1;
            let _ = stream.set_nonblocking(true);
            let ip = peer.ip();
            let per_ip = self.per_ip.get(&ip).copied().unwrap_or(0);
            if self.clients.len() >= self.cfg.max_conns {
                self.stats.refused_total += 1;
                *self.stats.responses.entry(503).or_default() += 1;
                self.metrics.responses.get_or_create(&label("status", 503)).inc();
                self.metrics.refused.get_or_create(&label("reason", "max_conns")).inc();
                let body = error_page(503, "too many connections");
                let extra = [("Retry-After", self.cfg.retry_after.to_string())];
                let _ = stream.write(&local_bytes(503, "text/plain", &body, &extra, true, false, false));
                continue;
            }
            if self.cfg.max_conns_per_ip > 0 && per_ip >= self.cfg.max_conns_per_ip {
                self.stats.refused_per_ip += 1;
                *self.stats.responses.entry(429).or_default() += 1;
                self.metrics.responses.get_or_create(&label("status", 429)).inc();
                self.metrics.refused.get_or_create(&label("reason", "per_ip")).inc();
                let body = error_page(429, "too many connections from your address");
                let extra = [("Retry-After", self.cfg.retry_after.to_string())];
                let _ = stream.write(&local_bytes(429, "text/plain", &body, &extra, true, false, false));
                continue;
            }
            let now = Instant::now();
            let client = Client {
                stream,
                peer,
                readable: false,
                writable: false,
                phase: Phase::Request,
                inbuf: Vec::new(),
                out: Vec::new(),
                out_pos: 0,
                deadline: Some(now + self.cfg.header_timeout),
                armed: None,
                head_started: Some(now),
                chunk_scan: None,
                continued: false,
                ex: None,
            };
            let Some(token) = self.clients.insert(client) else { continue };
            let Some(c) = self.clients.get(token) else { continue };
            if self.poller.add(&c.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
                self.clients.remove(token);
                continue;
            }
            *self.per_ip.entry(ip).or_default() += 1;
            self.arm_client(token);
        }
    }

    // ----- driving a client connection ----------------------------------

    fn drive(&mut self, token: u64) {
        for _ in 0..STEPS_PER_TURN {
            match self.step(token) {
                Step::Again => {}
                Step::Blocked => {
                    self.arm_client(token);
                    return;
                }
                Step::Peek => self.admit(token),
                Step::Close => {
                    self.close_client(token);
                    return;
                }
            }
        }
        // Still busy (e.g. a pipelining flood): continue next turn.
        self.ready.push_back(token);
        self.arm_client(token);
    }

    fn step(&mut self, token: u64) -> Step {
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        let wrote = match flush(&mut c.stream, &mut c.writable, &mut c.out, &mut c.out_pos) {
            Ok(w) => w,
            Err(()) => return Step::Close,
        };
        if c.phase == Phase::Response && (wrote || c.deadline.is_none()) {
            c.deadline = Some(Instant::now() + self.cfg.send_timeout);
        }
        match c.phase {
            Phase::Request => self.step_request(token),
            Phase::Peek => {
                if c.ex.as_ref().is_some_and(|ex| ex.queued_at.is_some()) {
                    Step::Blocked
                } else {
                    Step::Peek
                }
            }
            Phase::Receive | Phase::Response => self.step_exchange(token, wrote),
            Phase::Linger => {
                let mut sink = Vec::new();
                loop {
                    sink.clear();
                    match read_some(&mut c.stream, &mut c.readable, &mut sink, READ_SIZE) {
                        Io::Data => {}
                        Io::Blocked => return Step::Blocked,
                        Io::Eof | Io::Failed => return Step::Close,
                    }
                }
            }
        }
    }

    /// REQUEST: read and validate a head (and a small body).
    fn step_request(&mut self, token: u64) -> Step {
        let cfg = &self.cfg;
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        if c.out_pos < c.out.len() {
            // Responses go out in order: finish the previous one first.
            return Step::Blocked;
        }
        loop {
            let mut cap = cfg.limits.max_header_bytes;
            match h1::parse_request(&c.inbuf, &cfg.limits) {
                Err(e) => {
                    self.stats.bad_requests += 1;
                    let status = e.status();
                    respond_local(c, status, "text/plain", &error_page(status, e.reason()), &[], false, true);
                    return Step::Again;
                }
                Ok(ReqParsed::Complete { head, len }) => {
                    let small = match head.framing {
                        BodyFraming::Length(n) if n > cfg.max_body => {
                            self.stats.bad_requests += 1;
                            let page = error_page(413, "request body too large");
                            respond_local(c, 413, "text/plain", &page, &[], false, true);
                            return Step::Again;
                        }
                        BodyFraming::Length(n) if n <= PREBUFFER => n as usize,
                        BodyFraming::Chunked => {
                            let (decoder, scanned) = c
                                .chunk_scan
                                .get_or_insert_with(|| (Box::new(ChunkedDecoder::new(cfg.max_body)), 0));
                            let mut sink = Vec::new();
                            match decoder.decode(&c.inbuf[len + *scanned..], &mut sink) {
                                Ok(consumed) => *scanned += consumed,
                                Err(e) => {
                                    self.stats.bad_requests += 1;
                                    c.chunk_scan = None;
                                    let status = e.status();
                                    let page = error_page(status, e.reason());
                                    respond_local(c, status, "text/plain", &page, &[], false, true);
                                    return Step::Again;
                                }
                            }
                            if decoder.is_done() || c.inbuf.len() - len >= PREBUFFER as usize {
                                0
                            } else {
                                // Not yet: read up to the prebuffer size.
                                PREBUFFER as usize
                            }
                        }
                        _ => 0,
                    };
                    if c.inbuf.len() < len + small
                        && head.expect_continue
                        && head.version == h1::Version::Http11
                        && !c.continued
                    {
                        // The body is pre-buffered here, so the client is
                        // told to send it now rather than when a backend
                        // slot frees (a client that never sends it then
                        // holds no slot).
                        c.continued = true;
                        c.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                        return Step::Again;
                    }
                    if c.inbuf.len() >= len + small {
                        c.inbuf.drain(..len);
                        c.chunk_scan = None;
                        let continued = std::mem::take(&mut c.continued);
                        self.stats.requests += 1;
                        let backend_name = &cfg.backends[0].0;
                        let body = match head.framing {
                            BodyFraming::None | BodyFraming::Length(0) => ReqBody::Done,
                            BodyFraming::Length(n) => ReqBody::Length(n),
                            BodyFraming::Chunked => {
                                ReqBody::Chunked(Box::new(ChunkedDecoder::new(cfg.max_body)))
                            }
                        };
                        let retryable = matches!(body, ReqBody::Done);
                        let is_status = cfg.status_path.as_deref().is_some_and(|p| head.path() == p);
                        c.ex = Some(Exchange {
                            fwd_head: if is_status {
                                Vec::new()
                            } else {
                                request_head(&head, c.peer, backend_name)
                            },
                            head_request: head.method == h1::Method::Head,
                            client_11: head.version == h1::Version::Http11,
                            keep_alive: head.keep_alive && self.stopping.is_none(),
                            expect_continue: head.expect_continue && !continued,
                            body,
                            retryable,
                            attempts: 0,
                            backend: None,
                            head_sent: false,
                            relay: None,
                            done: false,
                            close_after: false,
                            queued_at: None,
                            started: Instant::now(),
                            attached_inflight: 0,
                            sent: None,
                            status: 0,
                        });
                        c.phase = Phase::Peek;
                        c.deadline = None;
                        c.head_started = None;
                        return Step::Peek;
                    }
                    cap = len + small;
                }
                Ok(ReqParsed::Partial) => {}
            }
            let was_empty = c.inbuf.is_empty();
            match read_some(&mut c.stream, &mut c.readable, &mut c.inbuf, cap) {
                Io::Data => {
                    if was_empty && c.head_started.is_none() {
                        // The header deadline runs from the first byte; the
                        // keep-alive timeout covered the wait before it.
                        let now = Instant::now();
                        c.head_started = Some(now);
                        c.deadline = Some(now + cfg.header_timeout);
                    }
                }
                Io::Blocked => return Step::Blocked,
                Io::Eof | Io::Failed => return Step::Close,
            }
        }
    }

    /// PEEK: forward now, park in the pending queue, or refuse.
    fn admit(&mut self, token: u64) {
        let Some(c) = self.clients.get_mut(token) else { return };
        let Some(ex) = c.ex.as_mut() else { return };
        if ex.fwd_head.is_empty() {
            let page = self.status_page();
            let c = self.clients.get_mut(token).expect("just seen");
            let keep = discard_body(c);
            respond_local(c, 200, "text/plain; charset=utf-8", page.as_bytes(), &[], keep, false);
            return;
        }
        // Each failed attempt (refused connection, keep-alive race) comes
        // back here; a bounded number of them, then 502.
        if !self.backends.iter().any(|b| b.up) || ex.attempts > self.backends.len() as u32 + 1 {
            self.stats.bad_gateway += 1;
            let keep = discard_body(c);
            respond_local(c, 502, "text/plain", &error_page(502, "no backend available"), &[], keep, false);
            return;
        }
        if let Some(b) = pick(&self.backends, self.cfg.max_backend_conns, self.rr) {
            self.rr = self.rr.wrapping_add(1);
            self.attach(token, b);
            return;
        }
        if ex.queued_at.is_none() && self.queue.len() < self.cfg.queue {
            let now = Instant::now();
            ex.queued_at = Some(now);
            c.deadline = Some(now + self.cfg.queue_timeout);
            self.stats.queued_total += 1;
            self.queue.push_back(token);
            return;
        }
        self.stats.queue_full += 1;
        self.busy_page(token, "queue_full");
    }

    fn busy_page(&mut self, token: u64, reason: &str) {
        let Some(c) = self.clients.get_mut(token) else { return };
        self.stats.busy_pages += 1;
        self.metrics.refused.get_or_create(&label("reason", reason)).inc();
        let keep = discard_body(c);
        let extra = [("Retry-After", self.cfg.retry_after.to_string()), ("Cache-Control", "no-store".into())];
        respond_local(c, 503, "text/html; charset=utf-8", &self.cfg.busy_page, &extra, keep, false);
    }

    /// Attaches the client's request to a connection of backend `b`: an
    /// idle pooled one, or a new one.
    fn attach(&mut self, token: u64, b: usize) {
        let btoken = loop {
            match self.backends[b].idle.pop() {
                Some(t) if self.bconns.get(t).is_some() => break Some(t),
                Some(_) => continue,
                None => break self.open_conn(b),
            }
        };
        let Some(c) = self.clients.get_mut(token) else { return };
        let Some(ex) = c.ex.as_mut() else { return };
        let Some(btoken) = btoken else {
            // Could not even create a socket: the backend is marked down;
            // admission tries again (another backend, or 502).
            ex.attempts += 1;
            self.ready.push_back(token);
            return;
        };
        self.backends[b].inflight += 1;
        let now = Instant::now();
        ex.backend = Some((b, btoken));
        ex.attached_inflight = self.backends[b].inflight;
        ex.sent = None;
        if let Some(queued) = ex.queued_at.take() {
            let waited = now.duration_since(queued);
            record(&mut self.latencies.queue, waited);
            self.metrics.queue_wait.observe(waited.as_secs_f64());
        }
        let body_pending = !matches!(ex.body, ReqBody::Done);
        if ex.expect_continue && body_pending {
            c.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        c.phase = Phase::Receive;
        // While the body is coming, the client must keep it moving; after
        // it, the backend has --backend-timeout to answer.
        c.deadline = Some(now + if body_pending { self.cfg.body_timeout } else { self.cfg.backend_timeout });
        let bc = self.bconns.get_mut(btoken).expect("checked above");
        bc.client = Some(token);
        bc.out.extend_from_slice(&ex.fwd_head);
        bc.deadline = None;
        self.ready.push_back(token);
    }

    /// RECEIVE and RESPONSE: move the request body, read the response head,
    /// relay the response body.
    fn step_exchange(&mut self, token: u64, mut progress: bool) -> Step {
        let cfg = &self.cfg;
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        let Some(ex) = c.ex.as_mut() else { return Step::Close };
        if ex.done {
            if c.out_pos < c.out.len() {
                return Step::Blocked;
            }
            return self.finish(token);
        }
        let Some((b, btoken)) = ex.backend else { return Step::Blocked };
        let Some(bc) = self.bconns.get_mut(btoken) else { return Step::Blocked };
        if !bc.connected {
            return Step::Blocked;
        }

        // Request body: client → backend, re-framed, bounded.
        let body_was_pending = !matches!(ex.body, ReqBody::Done);
        let mut body_moved = false;
        while !matches!(ex.body, ReqBody::Done) && bc.out.len() - bc.out_pos < OUT_CAP {
            if c.inbuf.is_empty() {
                match read_some(&mut c.stream, &mut c.readable, &mut c.inbuf, READ_SIZE) {
                    Io::Data => {}
                    Io::Blocked => break,
                    // The client left in the middle of its body.
                    Io::Eof | Io::Failed => return self.abort(token, false),
                }
            }
            match &mut ex.body {
                ReqBody::Length(remaining) => {
                    let n = (*remaining).min(c.inbuf.len() as u64) as usize;
                    bc.out.extend_from_slice(&c.inbuf[..n]);
                    c.inbuf.drain(..n);
                    *remaining -= n as u64;
                    if *remaining == 0 {
                        ex.body = ReqBody::Done;
                    }
                }
                ReqBody::Chunked(decoder) => {
                    let mut data = Vec::new();
                    match decoder.decode(&c.inbuf, &mut data) {
                        Ok(consumed) => {
                            c.inbuf.drain(..consumed);
                            encode_chunk(&mut bc.out, &data);
                            if decoder.is_done() {
                                bc.out.extend_from_slice(LAST_CHUNK);
                                ex.body = ReqBody::Done;
                            }
                        }
                        Err(e) => {
                            self.stats.bad_requests += 1;
                            return self.fail(token, e.status(), e.reason(), false);
                        }
                    }
                }
                ReqBody::Done => {}
            }
            progress = true;
            body_moved = true;
        }
        if body_moved && c.phase == Phase::Receive {
            let now = Instant::now();
            c.deadline = Some(if matches!(ex.body, ReqBody::Done) {
                now + cfg.backend_timeout
            } else {
                now + cfg.body_timeout
            });
        } else if body_was_pending && matches!(ex.body, ReqBody::Done) {
            c.deadline = Some(Instant::now() + cfg.backend_timeout);
        }
        match flush(&mut bc.stream, &mut bc.writable, &mut bc.out, &mut bc.out_pos) {
            Ok(w) => progress |= w,
            Err(()) => {
                let retry = ex.retryable && bc.reused && bc.inbuf.is_empty() && !ex.head_sent;
                return self.backend_failed(token, retry, "backend connection failed");
            }
        }
        if ex.sent.is_none() && matches!(ex.body, ReqBody::Done) && bc.out_pos == bc.out.len() {
            ex.sent = Some((Instant::now(), ex.attached_inflight));
        }

        if c.phase == Phase::Receive {
            loop {
                match parse_response(&bc.inbuf, ex.head_request) {
                    Err(reason) => {
                        self.backends[b].errors += 1;
                        return self.backend_failed(token, false, reason);
                    }
                    Ok(Parsed::Complete(head, len)) => {
                        bc.inbuf.drain(..len);
                        if head.is_interim() {
                            continue;
                        }
                        ex.status = head.status;
                        let failed = is_server_error(head.status);
                        if failed {
                            self.backends[b].server_errors += 1;
                        }
                        if let Some((sent, inflight)) = ex.sent {
                            let latency = sent.elapsed();
                            let backend = &mut self.backends[b];
                            backend.limiter.sample(latency, failed, inflight);
                            record(&mut self.latencies.backend, latency);
                            record(&mut self.latencies.per_backend[b], latency);
                            self.metrics
                                .backend_response
                                .get_or_create(&label("backend", &backend.name))
                                .observe(latency.as_secs_f64());
                        }
                        let keep = ex.keep_alive && !ex.close_after;
                        let (bytes, to_client, keep) = client_head(&head, ex.client_11, keep);
                        ex.close_after |= !keep;
                        c.out.extend_from_slice(&bytes);
                        ex.head_sent = true;
                        ex.relay = Some(Relay {
                            framing: head.framing,
                            to_client,
                            remaining: match head.framing {
                                Framing::Length(n) => n,
                                _ => 0,
                            },
                            decoder: (head.framing == Framing::Chunked)
                                .then(|| Box::new(ChunkedDecoder::new(u64::MAX))),
                            done: head.framing == Framing::None || head.framing == Framing::Length(0),
                            backend_close: head.backend_close,
                        });
                        c.phase = Phase::Response;
                        c.deadline = Some(Instant::now() + cfg.send_timeout);
                        if is_gateway_error(head.status) {
                            self.passive_failure(b, "gateway_error");
                        } else {
                            self.passive_success(b);
                        }
                        return Step::Again;
                    }
                    Ok(Parsed::Partial) => {}
                }
                let had = bc.inbuf.len();
                match read_some(&mut bc.stream, &mut bc.readable, &mut bc.inbuf, MAX_RESPONSE_HEAD + 1) {
                    Io::Data => progress = true,
                    Io::Blocked => break,
                    Io::Eof | Io::Failed => {
                        let retry = ex.retryable && bc.reused && had == 0 && matches!(ex.body, ReqBody::Done);
                        return self.backend_failed(token, retry, "backend closed before responding");
                    }
                }
            }
            return if progress { Step::Again } else { Step::Blocked };
        }

        // RESPONSE: backend → client, bounded by the client's buffer.
        let relay = ex.relay.as_mut().expect("RESPONSE has a relay");
        while !relay.done && c.out.len() - c.out_pos < OUT_CAP {
            if bc.inbuf.is_empty() {
                match read_some(&mut bc.stream, &mut bc.readable, &mut bc.inbuf, READ_SIZE) {
                    Io::Data => {}
                    Io::Blocked => break,
                    Io::Eof | Io::Failed if relay.framing == Framing::Close => {
                        if relay.to_client == ClientFraming::Chunked {
                            c.out.extend_from_slice(LAST_CHUNK);
                        }
                        relay.done = true;
                        relay.backend_close = true;
                        break;
                    }
                    // Truncated: the client cannot be told except by closing.
                    Io::Eof | Io::Failed => {
                        self.backends[b].errors += 1;
                        self.passive_failure(b, "broken");
                        return self.abort(token, true);
                    }
                }
            }
            progress = true;
            match relay.framing {
                Framing::None => relay.done = true,
                Framing::Length(_) => {
                    let n = relay.remaining.min(bc.inbuf.len() as u64) as usize;
                    c.out.extend_from_slice(&bc.inbuf[..n]);
                    bc.inbuf.drain(..n);
                    relay.remaining -= n as u64;
                    relay.done = relay.remaining == 0;
                }
                Framing::Chunked => {
                    let decoder = relay.decoder.as_mut().expect("chunked relay has a decoder");
                    let mut data = Vec::new();
                    match decoder.decode(&bc.inbuf, &mut data) {
                        Ok(consumed) => {
                            bc.inbuf.drain(..consumed);
                            match relay.to_client {
                                ClientFraming::Chunked => encode_chunk(&mut c.out, &data),
                                _ => c.out.extend_from_slice(&data),
                            }
                            if decoder.is_done() {
                                if relay.to_client == ClientFraming::Chunked {
                                    c.out.extend_from_slice(LAST_CHUNK);
                                }
                                relay.done = true;
                            }
                        }
                        Err(_) => {
                            self.backends[b].errors += 1;
                            self.passive_failure(b, "broken");
                            return self.abort(token, true);
                        }
                    }
                }
                Framing::Close => {
                    match relay.to_client {
                        ClientFraming::Chunked => encode_chunk(&mut c.out, &bc.inbuf),
                        _ => c.out.extend_from_slice(&bc.inbuf),
                    }
                    bc.inbuf.clear();
                }
            }
        }
        if relay.done {
            // The backend is free as soon as its response is read, whatever
            // the client's speed: reuse it only if the exchange was clean.
            // A body that is Done is only copied into `bc.out`; if a backend
            // answered early, part of it may still be unsent, and the next
            // request on that connection would be read as its tail.
            let reuse = !relay.backend_close
                && relay.framing != Framing::Close
                && bc.inbuf.is_empty()
                && matches!(ex.body, ReqBody::Done)
                && bc.out_pos == bc.out.len();
            if !matches!(ex.body, ReqBody::Done) {
                // The backend answered before the whole body was sent: the
                // rest of it is unread, so the client connection must close.
                ex.close_after = true;
            }
            ex.done = true;
            self.release(token, reuse);
            return Step::Again;
        }
        if progress {
            Step::Again
        } else {
            Step::Blocked
        }
    }

    /// The exchange is complete and flushed: next request, or close.
    fn finish(&mut self, token: u64) -> Step {
        let Some(c) = self.clients.get_mut(token) else { return Step::Blocked };
        let Some(ex) = c.ex.take() else { return Step::Close };
        *self.stats.responses.entry(ex.status).or_default() += 1;
        self.metrics.responses.get_or_create(&label("status", ex.status)).inc();
        let took = ex.started.elapsed();
        record(&mut self.latencies.request, took);
        self.metrics.request_duration.observe(took.as_secs_f64());
        if ex.close_after || !ex.keep_alive || self.stopping.is_some() {
            let _ = c.stream.shutdown(NetShutdown::Write);
            c.phase = Phase::Linger;
            c.deadline = Some(Instant::now() + LINGER);
            return Step::Again;
        }
        c.phase = Phase::Request;
        let now = Instant::now();
        if c.inbuf.is_empty() {
            c.head_started = None;
            c.deadline = Some(now + self.cfg.keepalive_timeout);
        } else {
            c.head_started = Some(now);
            c.deadline = Some(now + self.cfg.header_timeout);
        }
        Step::Again
    }

    /// Gives the backend connection back (to the pool if `reuse`), and
    /// lets a queued request have the slot.
    fn release(&mut self, token: u64, reuse: bool) {
        let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) else { return };
        let Some((b, btoken)) = ex.backend.take() else { return };
        let backend = &mut self.backends[b];
        backend.inflight -= 1;
        backend.served += 1;
        if let Some(bc) = self.bconns.get_mut(btoken) {
            bc.client = None;
            if reuse && backend.up && bc.out_pos == bc.out.len() {
                bc.reused = true;
                bc.out.clear();
                bc.out_pos = 0;
                backend.idle.push(btoken);
            } else {
                self.close_bconn(btoken);
            }
        }
        self.dispatch_queue();
    }

    /// A backend connection failed during RECEIVE: retry (a keep-alive
    /// race on a reused connection, request without body), or 502.
    fn backend_failed(&mut self, token: u64, retry: bool, reason: &str) -> Step {
        let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) else { return Step::Close };
        let sent = ex.sent;
        if let Some((b, btoken)) = ex.backend.take() {
            self.backends[b].inflight -= 1;
            self.close_bconn(btoken);
            if !retry {
                // Not a keep-alive race: the backend failed this request.
                if let Some((at, inflight)) = sent {
                    self.backends[b].limiter.sample(at.elapsed(), true, inflight);
                }
                self.passive_failure(b, "broken");
            }
        }
        let c = self.clients.get_mut(token).expect("seen above");
        let ex = c.ex.as_mut().expect("seen above");
        if retry && ex.attempts < 2 {
            ex.attempts += 1;
            c.phase = Phase::Peek;
            self.dispatch_queue();
            return Step::Peek;
        }
        self.stats.bad_gateway += 1;
        let step = self.fail(token, 502, reason, true);
        self.dispatch_queue();
        step
    }

    /// Answers `status` if no response head went out yet, else aborts.
    fn fail(&mut self, token: u64, status: u16, reason: &str, keep_if_possible: bool) -> Step {
        let Some(c) = self.clients.get_mut(token) else { return Step::Close };
        let Some(ex) = c.ex.as_mut() else { return Step::Close };
        if ex.head_sent {
            return self.abort(token, true);
        }
        if let Some((b, btoken)) = ex.backend.take() {
            self.backends[b].inflight -= 1;
            self.close_bconn(btoken);
            self.dispatch_queue();
        }
        let c = self.clients.get_mut(token).expect("seen above");
        let keep = keep_if_possible && discard_body(c);
        respond_local(c, status, "text/plain", &error_page(status, reason), &[], keep, false);
        Step::Again
    }

    /// Drops the exchange and the client connection (no way to tell the
    /// client more than that).
    fn abort(&mut self, token: u64, _backend_fault: bool) -> Step {
        if let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) {
            if let Some((b, btoken)) = ex.backend.take() {
                self.backends[b].inflight -= 1;
                self.close_bconn(btoken);
                self.dispatch_queue();
            }
        }
        Step::Close
    }

    fn close_client(&mut self, token: u64) {
        if let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) {
            if let Some((b, btoken)) = ex.backend.take() {
                self.backends[b].inflight -= 1;
                self.close_bconn(btoken);
            }
        }
        if let Some(c) = self.clients.remove(token) {
            if c.ex.as_ref().is_some_and(|ex| ex.queued_at.is_some()) {
                self.queue.retain(|&t| t != token);
            }
            let ip = c.peer.ip();
            if let Some(n) = self.per_ip.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.per_ip.remove(&ip);
                }
            }
        }
        self.dispatch_queue();
    }

    /// Serves queued requests while backends have room (FIFO); answers
    /// them all at once if no backend is up.
    fn dispatch_queue(&mut self) {
        while let Some(&token) = self.queue.front() {
            let queued = self
                .clients
                .get(token)
                .is_some_and(|c| c.ex.as_ref().is_some_and(|ex| ex.queued_at.is_some()));
            if !queued {
                self.queue.pop_front();
                continue;
            }
            if !self.backends.iter().any(|b| b.up) {
                self.queue.pop_front();
                self.unqueue_and_admit(token);
                continue;
            }
            let Some(b) = pick(&self.backends, self.cfg.max_backend_conns, self.rr) else { return };
            self.rr = self.rr.wrapping_add(1);
            self.queue.pop_front();
            self.attach(token, b);
        }
    }

    /// Takes a queued client out of the queue and admits it again (for the
    /// 502 when nothing is up).
    fn unqueue_and_admit(&mut self, token: u64) {
        if let Some(ex) = self.clients.get_mut(token).and_then(|c| c.ex.as_mut()) {
            ex.queued_at = None;
            self.admit(token);
            self.ready.push_back(token);
        }
    }

    // ----- backend connections -------------------------------------------

    /// Opens a connection to backend `b` (non-blocking connect).
    fn open_conn(&mut self, b: usize) -> Option<u64> {
        let addr = self.backends[b].addr;
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking().cloexec(),
            Some(socket2::Protocol::TCP),
        )
        .ok()?;
        let _ = socket.set_tcp_nodelay(true);
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
            Err(_) => {
                self.backends[b].connect_failures += 1;
                self.count_failure(b, "connect");
                self.mark_down(b, "connect failed");
                return None;
            }
        }
        let stream: TcpStream = socket.into();
        let token = self.bconns.insert(BConn {
            stream,
            backend: b,
            connected: false,
            readable: false,
            writable: false,
            client: None,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            reused: false,
            deadline: Some(Instant::now() + self.cfg.connect_timeout),
            armed: None,
        })?;
        let bc = self.bconns.get(token)?;
        if self.poller.add(&bc.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
            self.bconns.remove(token);
            return None;
        }
        self.arm_bconn(token);
        self.backends[b].conns += 1;
        self.backends[b].connecting += 1;
        Some(token)
    }

    fn backend_event(&mut self, token: u64, gone: bool) {
        let Some(bc) = self.bconns.get_mut(token) else { return };
        if !bc.connected {
            if !(bc.writable || gone) {
                return;
            }
            let failure = match bc.stream.take_error() {
                Ok(Some(e)) | Err(e) => Some(describe_io(&e)),
                Ok(None) if gone => Some("the connection closed at once".to_string()),
                Ok(None) => None,
            };
            if let Some(why) = failure {
                self.connect_failed(token, &why);
            } else {
                self.connected(token);
            }
            return;
        }
        match bc.client {
            Some(client) => self.drive(client),
            None => {
                // An idle pooled connection has nothing to say: EOF (the
                // backend closed it), an error, or stray bytes all end it.
                if bc.readable {
                    let mut buf = Vec::new();
                    match read_some(&mut bc.stream, &mut bc.readable, &mut buf, 1) {
                        Io::Blocked => {}
                        _ => {
                            let b = bc.backend;
                            self.close_bconn(token);
                            self.replenish(b);
                        }
                    }
                }
            }
        }
    }

    fn connected(&mut self, token: u64) {
        let Some(bc) = self.bconns.get_mut(token) else { return };
        bc.connected = true;
        bc.deadline = None;
        let b = bc.backend;
        let client = bc.client;
        let backend = &mut self.backends[b];
        backend.connecting -= 1;
        if !backend.up && self.cfg.health_path.is_some() && client.is_none() {
            // Out by a failed check or passive health: only passing checks
            // bring it back, an open port is not enough. (A connection
            // opened for a request before the backend went out still
            // carries it.)
            self.close_bconn(token);
            return;
        }
        let recovered = !backend.up && self.cfg.health_path.is_none();
        if recovered {
            backend.up = true;
            backend.down_reason = "";
            backend.failures.clear();
        }
        match client {
            Some(client) => self.drive(client),
            None => {
                let target = self.cfg.backend_conns.max(1);
                if backend.idle.len() >= target && recovered {
                    // A health probe of a backend that had enough idle
                    // connections already (none can be left after going
                    // down, so this is rare).
                    self.close_bconn(token);
                } else {
                    backend.idle.push(token);
                }
                if recovered {
                    self.replenish(b);
                }
                self.dispatch_queue();
            }
        }
    }

    fn connect_failed(&mut self, token: u64, why: &str) {
        let Some(bc) = self.bconns.get(token) else { return };
        let (b, client) = (bc.backend, bc.client);
        self.watch.connect_failed(&self.backends[b], why);
        self.backends[b].connect_failures += 1;
        self.count_failure(b, "connect");
        self.close_bconn(token);
        self.mark_down(b, "connect failed");
        if let Some(client) = client {
            // Passive health: the request goes back to PEEK and may be
            // served by another backend (or get a quick 502).
            if let Some(c) = self.clients.get_mut(client) {
                if let Some(ex) = c.ex.as_mut() {
                    ex.backend = None;
                    ex.attempts += 1;
                    self.backends[b].inflight -= 1;
                    c.phase = Phase::Peek;
                    self.ready.push_back(client);
                }
            }
        }
        self.dispatch_queue();
    }

    fn count_failure(&mut self, b: usize, kind: &str) {
        let labels =
            vec![("backend".to_string(), self.backends[b].name.clone()), ("kind".to_string(), kind.into())];
        self.metrics.backend_failures.get_or_create(&labels).inc();
    }

    /// Passive health: a failed exchange; too many in the window take the
    /// backend out until a health check (or, without `--health-path`, a
    /// connection attempt) passes.
    fn passive_failure(&mut self, b: usize, kind: &str) {
        self.count_failure(b, kind);
        let (window, threshold) = (self.cfg.fail_window, self.cfg.max_fails);
        if self.backends[b].failures.record(Instant::now(), true, window, threshold) && self.backends[b].up {
            self.mark_down(b, "too many failures");
            self.dispatch_queue();
        }
    }

    /// Passive health: an exchange that got a response head (the failure
    /// share needs the successes too).
    fn passive_success(&mut self, b: usize) {
        let window = self.cfg.fail_window;
        self.backends[b].failures.record(Instant::now(), false, window, 0);
    }

    /// Brings a backend back into rotation.
    fn mark_up(&mut self, b: usize) {
        let backend = &mut self.backends[b];
        backend.up = true;
        backend.down_reason = "";
        backend.failures.clear();
        self.replenish(b);
        self.dispatch_queue();
    }

    fn mark_down(&mut self, b: usize, reason: &'static str) {
        let backend = &mut self.backends[b];
        if !backend.up {
            return;
        }
        backend.up = false;
        backend.down_reason = reason;
        backend.probe_successes = 0;
        for t in std::mem::take(&mut backend.idle) {
            self.close_bconn(t);
        }
    }

    fn close_bconn(&mut self, token: u64) {
        if let Some(bc) = self.bconns.remove(token) {
            let backend = &mut self.backends[bc.backend];
            backend.conns -= 1;
            if !bc.connected {
                backend.connecting -= 1;
            }
            backend.idle.retain(|&t| t != token);
        }
    }

    /// Keeps `--backend-conns` connections open to an up backend.
    fn replenish(&mut self, b: usize) {
        while self.backends[b].up
            && self.stopping.is_none()
            && self.backends[b].conns < self.cfg.backend_conns
        {
            if self.open_conn(b).is_none() {
                return;
            }
        }
    }

    // ----- timers and the tick --------------------------------------------

    fn arm_client(&mut self, token: u64) {
        if let Some(c) = self.clients.get_mut(token) {
            if let Some(d) = c.deadline {
                self.timers.arm(&mut c.armed, token, d);
            }
        }
    }

    fn arm_bconn(&mut self, token: u64) {
        if let Some(bc) = self.bconns.get_mut(token) {
            if let Some(d) = bc.deadline {
                self.timers.arm(&mut bc.armed, token, d);
            }
        }
    }

    fn expire_timers(&mut self) {
        let now = Instant::now();
        while let Some((t, token)) = self.timers.pop_due(now) {
            match Slab::<()>::kind_of(token) {
                CLIENT => {
                    let Some(c) = self.clients.get_mut(token) else { continue };
                    if !deadlines::fired(&mut c.armed, t) {
                        continue;
                    }
                    match c.deadline {
                        Some(d) if d <= now => self.client_timeout(token),
                        Some(_) => self.arm_client(token),
                        None => {}
                    }
                }
                BCONN => {
                    let Some(bc) = self.bconns.get_mut(token) else { continue };
                    if !deadlines::fired(&mut bc.armed, t) {
                        continue;
                    }
                    match bc.deadline {
                        Some(d) if d <= now && !bc.connected => {
                            let why = format!(
                                "timed out after {}",
                                humantime::format_duration(self.cfg.connect_timeout)
                            );
                            self.connect_failed(token, &why)
                        }
                        Some(_) => self.arm_bconn(token),
                        None => {}
                    }
                }
                // One timer each, never re-armed: when it fires, time is up.
                ADMIN => self.close_admin(token),
                PROBE => self.end_probe(token, false),
                _ => {}
            }
        }
    }

    fn client_timeout(&mut self, token: u64) {
        let Some(c) = self.clients.get_mut(token) else { return };
        c.deadline = None;
        match c.phase {
            Phase::Request => {
                if c.inbuf.is_empty() {
                    // Idle keep-alive, or connected and never sent a byte:
                    // close quietly.
                    self.close_client(token);
                    return;
                }
                self.stats.bad_requests += 1;
                let page = error_page(408, "request head not received in time");
                respond_local(c, 408, "text/plain", &page, &[], false, true);
            }
            Phase::Peek => {
                // The queue wait is over: the busy page.
                if let Some(ex) = c.ex.as_mut() {
                    ex.queued_at = None;
                }
                self.queue.retain(|&t| t != token);
                self.busy_page(token, "queue_timeout");
            }
            Phase::Receive => {
                let ex = c.ex.as_ref();
                let body_pending = ex.is_some_and(|ex| !matches!(ex.body, ReqBody::Done));
                let backend = ex.and_then(|ex| ex.backend);
                let backend_reading = backend
                    .and_then(|(_, bt)| self.bconns.get(bt))
                    .is_some_and(|bc| bc.connected && bc.out_pos == bc.out.len());
                if body_pending && backend_reading {
                    // The client stopped sending its body: its fault, and
                    // the backend slot is freed now.
                    self.stats.body_timeouts += 1;
                    self.fail(token, 408, "request body not received in time", false);
                } else {
                    self.stats.gateway_timeout += 1;
                    if let Some((b, _)) = backend {
                        self.backends[b].errors += 1;
                        if let Some((sent, inflight)) = ex.and_then(|ex| ex.sent) {
                            self.backends[b].limiter.sample(sent.elapsed(), true, inflight);
                        }
                        self.passive_failure(b, "timeout");
                    }
                    self.fail(token, 504, "backend did not respond in time", false);
                }
            }
            Phase::Response | Phase::Linger => {
                self.abort(token, false);
                self.close_client(token);
                return;
            }
        }
        self.ready.push_back(token);
    }

    /// Health checks, monitor staleness, pool upkeep, rate samples;
    /// accepting again.
    fn tick(&mut self) {
        let now = Instant::now();
        self.next_tick = now + self.cfg.health_interval;
        self.rate_samples.push_back((now, self.answered()));
        while self.rate_samples.len() > 2
            && self.rate_samples.front().is_some_and(|&(t, _)| now.duration_since(t) > RATE_WINDOW)
        {
            self.rate_samples.pop_front();
        }
        if self.cfg.health_path.is_some() && self.stopping.is_none() {
            for b in 0..self.backends.len() {
                if self.probing[b].is_none() {
                    self.start_probe(b);
                }
            }
        }
        let mut changed = false;
        for b in 0..self.backends.len() {
            let backend = &mut self.backends[b];
            if matches!(backend.monitor, MonitorState::Serviceable | MonitorState::Overloaded)
                && backend.monitor_seen.is_none_or(|seen| now.duration_since(seen) > backend.monitor_valid)
            {
                backend.monitor = MonitorState::Unknown;
                changed = true;
            }
            // Without --health-path, the active check is a connection
            // attempt to a down backend every health interval; when it
            // succeeds the backend is back.
            if !backend.up
                && backend.connecting == 0
                && self.stopping.is_none()
                && self.cfg.health_path.is_none()
            {
                let _ = self.open_conn(b);
            } else {
                self.replenish(b);
            }
        }
        if changed {
            self.dispatch_queue();
        }
        for token in std::mem::take(&mut self.paused_listeners) {
            if let Some(l) = self.listener_of(token) {
                let _ = self.poller.add(l, token, Interest::READABLE, Trigger::Level);
            }
        }
        if self.listener.is_some() {
            self.accept();
        }
    }

    fn listener_of(&self, token: u64) -> Option<&TcpListener> {
        match token {
            LISTENER => self.listener.as_ref(),
            MONITOR_LISTENER => self.monitor_listener.as_ref(),
            ADMIN_LISTENER => self.admin_listener.as_ref(),
            _ => None,
        }
    }

    /// An accept failed other than for want of connections (out of
    /// descriptors, typically): stop polling that listener until the next
    /// tick instead of spinning on it.
    fn pause_listener(&mut self, token: u64) {
        if self.paused_listeners.contains(&token) {
            return;
        }
        if let Some(l) = self.listener_of(token) {
            if self.poller.delete(l).is_ok() {
                self.paused_listeners.push(token);
            }
        }
    }

    // ----- health checks ---------------------------------------------------

    /// Starts a `--health-path` check of backend `b`: a fresh connection
    /// (a pooled one could hide a backend that no longer accepts), a GET,
    /// and `--health-timeout` for the status line.
    fn start_probe(&mut self, b: usize) {
        let addr = self.backends[b].addr;
        let path = self.cfg.health_path.as_deref().unwrap_or("/");
        let socket = match socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking().cloexec(),
            Some(socket2::Protocol::TCP),
        ) {
            Ok(s) => s,
            Err(_) => return,
        };
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
            Err(_) => return self.probe_result(b, false),
        }
        let stream: TcpStream = socket.into();
        let host = match addr {
            SocketAddr::V4(a) => a.to_string(),
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
        };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: modus-director-health-check\r\n\
             Connection: close\r\n\r\n"
        );
        let probe = Probe {
            stream,
            backend: b,
            connected: false,
            out: request.into_bytes(),
            out_pos: 0,
            inbuf: Vec::new(),
        };
        let Some(token) = self.probes.insert(probe) else { return };
        let Some(p) = self.probes.get(token) else { return };
        if self.poller.add(&p.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
            self.probes.remove(token);
            return;
        }
        self.probing[b] = Some(token);
        self.timers.once(token, Instant::now() + self.cfg.health_timeout);
    }

    fn probe_event(&mut self, token: u64, gone: bool) {
        let Some(p) = self.probes.get_mut(token) else { return };
        if !p.connected {
            if gone || !matches!(p.stream.take_error(), Ok(None)) {
                return self.end_probe(token, false);
            }
            p.connected = true;
        }
        let mut writable = true;
        if flush(&mut p.stream, &mut writable, &mut p.out, &mut p.out_pos).is_err() {
            return self.end_probe(token, false);
        }
        loop {
            let mut readable = true;
            match parse_response(&p.inbuf, false) {
                Ok(Parsed::Complete(head, len)) if head.is_interim() => {
                    p.inbuf.drain(..len);
                    continue;
                }
                Ok(Parsed::Complete(head, _)) => {
                    let ok = (200..400).contains(&head.status);
                    return self.end_probe(token, ok);
                }
                Err(_) => return self.end_probe(token, false),
                Ok(Parsed::Partial) => {}
            }
            match read_some(&mut p.stream, &mut readable, &mut p.inbuf, MAX_RESPONSE_HEAD + 1) {
                Io::Data => {}
                Io::Blocked => return,
                Io::Eof | Io::Failed => return self.end_probe(token, false),
            }
        }
    }

    fn end_probe(&mut self, token: u64, ok: bool) {
        if let Some(p) = self.probes.remove(token) {
            let _ = self.poller.delete(&p.stream);
            self.probing[p.backend] = None;
            self.probe_result(p.backend, ok);
        }
    }

    /// [`HEALTH_FALL`] checks failing in a row take the backend out (the
    /// check has a sub-second deadline, so a hung backend is out within
    /// about two intervals plus the timeout); [`HEALTH_RISE`] passing in a
    /// row bring it back.
    fn probe_result(&mut self, b: usize, ok: bool) {
        let backend = &mut self.backends[b];
        if ok {
            backend.probe_successes += 1;
            backend.probe_failures_in_row = 0;
            if !backend.up && backend.probe_successes >= HEALTH_RISE {
                self.mark_up(b);
            }
        } else {
            backend.probe_failures += 1;
            backend.probe_successes = 0;
            backend.probe_failures_in_row += 1;
            self.count_failure(b, "health_check");
            if self.backends[b].up && self.backends[b].probe_failures_in_row >= HEALTH_FALL {
                self.mark_down(b, "health check failed");
                self.dispatch_queue();
            }
        }
    }

    // ----- the admin listener ----------------------------------------------

    fn accept_admins(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let Some(l) = &self.admin_listener else { return };
            let stream = match l.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.pause_listener(ADMIN_LISTENER);
                    return;
                }
            };
            let _ = stream.set_nonblocking(true);
            let admin = AdminConn { stream, inbuf: Vec::new(), out: Vec::new(), out_pos: 0, answered: false };
            let Some(token) = self.admins.insert(admin) else { continue };
            let Some(a) = self.admins.get(token) else { continue };
            if self.poller.add(&a.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
                self.admins.remove(token);
                continue;
            }
            self.timers.once(token, Instant::now() + ADMIN_TIMEOUT);
            self.admin_event(token);
        }
    }

    fn admin_event(&mut self, token: u64) {
        let Some(a) = self.admins.get_mut(token) else { return };
        if !a.answered {
            let limits = &self.cfg.limits;
            let request = loop {
                match h1::parse_request(&a.inbuf, limits) {
                    Ok(ReqParsed::Complete { head, .. }) => break Some(Ok(head)),
                    Ok(ReqParsed::Partial) => {}
                    Err(e) => break Some(Err(e)),
                }
                let mut readable = true;
                match read_some(&mut a.stream, &mut readable, &mut a.inbuf, limits.max_header_bytes) {
                    Io::Data => {}
                    Io::Blocked if a.inbuf.len() < limits.max_header_bytes => break None,
                    _ => {
                        self.close_admin(token);
                        return;
                    }
                }
            };
            let Some(request) = request else { return };
            let bytes = match request {
                Ok(head) => {
                    crate::admin::answer(&head.method, head.path(), || self.status_json(), &self.metrics)
                }
                Err(e) => local_bytes(
                    e.status(),
                    "text/plain",
                    &error_page(e.status(), e.reason()),
                    &[],
                    true,
                    false,
                    false,
                ),
            };
            let a = self.admins.get_mut(token).expect("seen above");
            a.out = bytes;
            a.answered = true;
        }
        let a = self.admins.get_mut(token).expect("seen above");
        let mut writable = true;
        match flush(&mut a.stream, &mut writable, &mut a.out, &mut a.out_pos) {
            Ok(_) if a.out.is_empty() => {
                let _ = a.stream.shutdown(NetShutdown::Write);
                self.close_admin(token);
            }
            Ok(_) => {}
            Err(()) => self.close_admin(token),
        }
    }

    fn close_admin(&mut self, token: u64) {
        if let Some(a) = self.admins.remove(token) {
            let _ = self.poller.delete(&a.stream);
        }
    }

    // ----- monitors --------------------------------------------------------

    fn accept_monitors(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let Some(l) = &self.monitor_listener else { return };
            let (stream, peer) = match l.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.pause_listener(MONITOR_LISTENER);
                    return;
                }
            };
            let _ = stream.set_nonblocking(true);
            let monitor = MonConn {
                stream,
                peer: peer.ip(),
                inbuf: Vec::new(),
                backends: None,
                interval: Duration::from_millis(200),
            };
            let Some(token) = self.monitors.insert(monitor) else { continue };
            let Some(m) = self.monitors.get(token) else { continue };
            if self.poller.add(&m.stream, token, Interest::READABLE, Trigger::Edge).is_err() {
                self.monitors.remove(token);
                continue;
            }
        }
    }

    fn monitor_event(&mut self, token: u64) {
        let mut close = false;
        let mut changed = false;
        loop {
            let Some(m) = self.monitors.get_mut(token) else { return };
            let mut readable = true;
            match read_some(&mut m.stream, &mut readable, &mut m.inbuf, 4 * MAX_LINE) {
                Io::Data => {}
                Io::Blocked if m.inbuf.len() < 4 * MAX_LINE => break,
                _ => {
                    close = true;
                    break;
                }
            }
            while let Some(lf) = m.inbuf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = m.inbuf.drain(..=lf).collect();
                let Ok(line) = std::str::from_utf8(&line) else {
                    close = true;
                    break;
                };
                let line = line.trim_end();
                match &m.backends {
                    None => match monitor::parse_hello(line) {
                        Some(hello) => {
                            let list: Vec<usize> = self
                                .backends
                                .iter()
                                .enumerate()
                                .filter(|(_, b)| match &hello.backend {
                                    Some(name) => *name == b.name || name.parse() == Ok(b.addr),
                                    None => b.addr.ip() == m.peer,
                                })
                                .map(|(i, _)| i)
                                .collect();
                            if list.is_empty() {
                                close = true;
                                break;
                            }
                            m.interval = hello.interval;
                            m.backends = Some(list);
                        }
                        None => {
                            close = true;
                            break;
                        }
                    },
                    Some(list) => match monitor::parse_report(line) {
                        Some(report) => {
                            let now = Instant::now();
                            for &b in list {
                                let backend = &mut self.backends[b];
                                let state = if report.overloaded {
                                    MonitorState::Overloaded
                                } else {
                                    MonitorState::Serviceable
                                };
                                changed |= backend.monitor != state;
                                backend.monitor = state;
                                backend.monitor_seen = Some(now);
                                backend.monitor_valid = (m.interval * 3).max(Duration::from_secs(1));
                                backend.monitor_detail = report.detail.clone();
                            }
                        }
                        None => {
                            close = true;
                            break;
                        }
                    },
                }
            }
            if close {
                break;
            }
        }
        if close {
            if let Some(m) = self.monitors.remove(token) {
                for b in m.backends.unwrap_or_default() {
                    self.backends[b].monitor = MonitorState::Unknown;
                    self.backends[b].monitor_seen = None;
                }
                changed = true;
            }
        }
        if changed {
            self.dispatch_queue();
        }
    }

    // ----- stop and status ---------------------------------------------------

    fn begin_stop(&mut self) {
        let _ = self.poller.delete(self.shutdown.wake_fd());
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(Instant::now() + self.cfg.shutdown_timeout);
        self.listener = None;
        // Idle connections close now; requests in flight finish.
        for token in self.clients.tokens() {
            let idle =
                self.clients.get(token).is_some_and(|c| c.phase == Phase::Request && c.inbuf.is_empty());
            if idle {
                self.close_client(token);
            }
        }
    }

    /// Responses completed.
    fn answered(&self) -> u64 {
        self.stats.responses.values().sum()
    }

    /// Everything `--admin` shows, as JSON.
    fn status_json(&self) -> Value {
        let mut phases = [0usize; 5];
        for t in self.clients.tokens() {
            if let Some(c) = self.clients.get(t) {
                phases[c.phase.index()] += 1;
            }
        }
        let now = Instant::now();
        let answered = self.answered();
        let rate = match self.rate_samples.front() {
            Some(&(t, n)) if now.duration_since(t) >= Duration::from_millis(100) => {
                (answered - n) as f64 / now.duration_since(t).as_secs_f64()
            }
            _ => 0.0,
        };
        let s = &self.stats;
        let max = self.cfg.max_backend_conns;
        let backends: Vec<Value> = self
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let h = &self.latencies.per_backend[i];
                json!({
                    "name": b.name,
                    "addr": b.addr.to_string(),
                    "health": if b.up { "up" } else { "down" },
                    "down_reason": if b.up { Value::Null } else { Value::from(b.down_reason) },
                    "monitor": b.monitor.as_str(),
                    "monitor_detail": b.monitor_detail,
                    "inflight": b.inflight,
                    "limit": b.limit(max),
                    "adaptive_limit": b.limiter.limit(),
                    "monitor_limit": b.monitor_limit(max),
                    "window_latency_us": b.limiter.last_rtt().map(|d| d.as_micros() as u64),
                    "latency_us": if h.is_empty() { Value::Null } else { Value::from(h.value_at_quantile(0.5)) },
                    "latency_p99_us": if h.is_empty() { Value::Null } else { Value::from(h.value_at_quantile(0.99)) },
                    "idle": b.idle.len(),
                    "conns": b.conns,
                    "served": b.served,
                    "server_errors": b.server_errors,
                    "errors": b.errors,
                    "connect_failures": b.connect_failures,
                    "recent_failures": b.failures.recent(now, self.cfg.fail_window),
                    "health_check_failures": b.probe_failures,
                })
            })
            .collect();
        let in_flight: usize = self.backends.iter().map(|b| b.inflight).sum();
        let idle: usize = self.backends.iter().map(|b| b.idle.len()).sum();
        let connections: serde_json::Map<String, Value> =
            Phase::NAMES.iter().zip(phases).map(|(name, n)| (name.to_string(), Value::from(n))).collect();
        let responses: serde_json::Map<String, Value> =
            s.responses.iter().map(|(code, n)| (code.to_string(), Value::from(*n))).collect();
        json!({
            "model": "direct",
            "pid": std::process::id(),
            "uptime_s": self.started.elapsed().as_secs(),
            "requests_total": answered,
            "requests_received": s.requests,
            "requests_per_s": rate,
            "connections_accepted": s.accepted,
            "connections_open": self.clients.len(),
            "connections": connections,
            "responses": responses,
            "latency_us": summary(&self.latencies.request),
            "phases_us": {
                "queue": summary(&self.latencies.queue),
                "backend": summary(&self.latencies.backend),
            },
            "queues": {"pending": self.queue.len()},
            "workers": {"busy": in_flight, "idle": idle},
            "admission": {
                "in_flight": in_flight,
                "queued": self.queue.len(),
                "queue_capacity": self.cfg.queue,
                "queued_total": s.queued_total,
                "refused": {
                    "queue_timeout": s.busy_pages - s.queue_full,
                    "queue_full": s.queue_full,
                    "max_conns": s.refused_total,
                    "per_ip": s.refused_per_ip,
                    "bad_request": s.bad_requests,
                    "body_timeout": s.body_timeouts,
                    "no_backend": s.bad_gateway,
                    "gateway_timeout": s.gateway_timeout,
                },
            },
            "adaptive": self.cfg.adaptive.as_str(),
            "max_backend_conns": max,
            "backends": backends,
        })
    }

    fn status_page(&self) -> String {
        let mut phases = [0usize; 5];
        for t in self.clients.tokens() {
            if let Some(c) = self.clients.get(t) {
                phases[c.phase.index()] += 1;
            }
        }
        let s = &self.stats;
        let mut out = format!(
            "modus director\nuptime_s: {}\nconnections: {}\n",
            self.started.elapsed().as_secs(),
            self.clients.len()
        );
        for (name, n) in Phase::NAMES.iter().zip(phases) {
            out.push_str(&format!("state {name}: {n}\n"));
        }
        out.push_str(&format!(
            "queued: {}\naccepted: {}\nrequests: {}\nqueued_total: {}\nbusy_pages: {}\nbad_requests: {}\n\
             bad_gateway: {}\ngateway_timeout: {}\nrefused_per_ip: {}\nrefused_total: {}\n",
            self.queue.len(),
            s.accepted,
            s.requests,
            s.queued_total,
            s.busy_pages,
            s.bad_requests,
            s.bad_gateway,
            s.gateway_timeout,
            s.refused_per_ip,
            s.refused_total,
        ));
        for b in &self.backends {
            out.push_str(&format!(
                "backend {} health={} monitor={} inflight={} limit={} idle={} conns={} served={} \
                 connect_failures={} errors={} report=[{}]\n",
                b.name,
                if b.up { "up" } else { "down" },
                b.monitor.as_str(),
                b.inflight,
                b.limit(self.cfg.max_backend_conns),
                b.idle.len(),
                b.conns,
                b.served,
                b.connect_failures,
                b.errors,
                b.monitor_detail,
            ));
        }
        out
    }
}

/// Puts a locally generated response in the client's output and marks the
/// exchange done. With `close`, the connection closes after it.
fn respond_local(
    c: &mut Client,
    status: u16,
    content_type: &str,
    body: &[u8],
    extra: &[(&str, String)],
    keep: bool,
    close_now: bool,
) {
    let (client_11, keep_alive, head_only) = match &c.ex {
        Some(ex) => (ex.client_11, ex.keep_alive, ex.head_request),
        None => (true, false, false),
    };
    let keep = keep && keep_alive && !close_now;
    c.out.extend_from_slice(&local_bytes(status, content_type, body, extra, client_11, keep, head_only));
    let ex = c.ex.get_or_insert_with(|| Exchange {
        fwd_head: Vec::new(),
        head_request: false,
        client_11: true,
        keep_alive: false,
        expect_continue: false,
        body: ReqBody::Done,
        retryable: false,
        attempts: 0,
        backend: None,
        head_sent: false,
        relay: None,
        done: false,
        close_after: true,
        queued_at: None,
        started: Instant::now(),
        attached_inflight: 0,
        sent: None,
        status,
    });
    ex.head_sent = true;
    ex.done = true;
    ex.queued_at = None;
    ex.status = status;
    ex.close_after |= !keep;
    c.phase = Phase::Response;
    c.deadline = None;
}

/// Drops a request body that is already buffered so the connection can
/// stay open after a local answer; false if the body is not all here.
fn discard_body(c: &mut Client) -> bool {
    let Some(ex) = c.ex.as_mut() else { return false };
    match ex.body {
        ReqBody::Done => true,
        ReqBody::Length(n) if (c.inbuf.len() as u64) >= n => {
            c.inbuf.drain(..n as usize);
            ex.body = ReqBody::Done;
            true
        }
        _ => false,
    }
}

/// An I/O error in words, without the "(os error N)" tail: "Connection
/// refused", "No route to host".
fn describe_io(e: &io::Error) -> String {
    let text = e.to_string();
    text.split(" (os error").next().unwrap_or(&text).to_lowercase()
}
