//! The director's event loop: one thread, one epoll instance, every socket
//! non-blocking and registered once, edge-triggered, for both directions.
//!
//! Each client connection is a state machine with the paper's four states
//! ([`ClientState`]):
//!
//! * **REQUEST** — read and validate a request head with `h1::parse_request`
//!   (the server's own limits and smuggling rules) under a total header
//!   deadline, and its body with it — 64 KiB in memory, the rest in a temp
//!   file up to `--max-buffered-request` (`intake.rs`), under
//!   `--body-timeout` once past memory. Nothing reaches a backend before
//!   this state is done, so a malformed or slow request, or a slow upload,
//!   never holds a backend connection.
//! * **PEEK** — admission ([`Director::admit`]): pick the backend with room
//!   and the fewest requests in flight; none with room → wait in the
//!   pending queue (bounded by `--queue`, served smallest expected answer
//!   first or FIFO, `queue.rs`) for up to `--queue-timeout`, then the busy
//!   page; no backend up → 502 at once.
//! * **RECEIVE** — send the re-serialised request (and body) on a pooled
//!   keep-alive connection and read the backend's response head, validated
//!   before anything goes to the client (bad → 502, none in time → 504).
//! * **RESPONSE** — relay the body to the client as fast as the backend
//!   sends it: Content-Length as is, chunked decoded and re-chunked,
//!   close-delimited re-chunked for HTTP/1.1 clients. What the client has
//!   not taken yet waits in a bounded memory buffer, then in a temp file
//!   (`crate::spill`, up to `--max-buffered-response`; past it, the backend
//!   is read at the client's pace). The backend connection goes back to
//!   the pool as soon as the response is complete and correctly framed,
//!   while the client may still be reading it; once the client has it
//!   all, its connection goes back to REQUEST (keep-alive, pipelined
//!   requests in order) or closes.
//!
//! Sockets live in `transport::slab` slabs (one per kind of peer), their
//! timeouts in `transport::deadlines`, at most one live entry per socket.
//! Per-backend bookkeeping is in [`crate::backend`].
//!
//! The same loop runs the health checks (`--health-path`: one HTTP probe
//! per backend per interval, each a non-blocking connection with its own
//! deadline) and serves the admin listener (`--admin`, rendered by
//! [`crate::admin`]); neither ever blocks it.
//!
//! Its files: this one (the types, the loop), `accept.rs`, `client.rs`
//! (REQUEST and PEEK), `request.rs` (what REQUEST makes of the bytes read),
//! `exchange.rs` (RECEIVE and RESPONSE), `intake.rs` (a request body read
//! before admission), `upstream.rs` (backend connections, pools, passive
//! health), `tick.rs` (timers, the end of a turn), `health.rs` (active checks),
//! `admin_listener.rs`, `monitors.rs`, `status.rs` (stop, snapshot),
//! `buffered.rs` (the buffers and readiness every peer has), `stage.rs`
//! (what an exchange is and holds), `tests.rs` (the loop driven a turn at a
//! time over loopback).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use transport::poller::{Events, Interest, Poller, Trigger};
use transport::{Shutdown, Wire};

use crate::admin::Metrics;
use crate::backend::{Backend, Limiter};
use crate::options::Config;
use crate::spill::Spill;
use crate::watch::Watch;
use transport::deadlines::{Deadlines, Timer};
use transport::slab::Slab;
use transport::turn::{self, AcceptPause, Finish, Turn};

mod accept;
mod admin_listener;
mod buffered;
mod client;
mod exchange;
mod health;
mod intake;
mod monitors;
mod queue;
mod request;
mod stage;
mod status;
#[cfg(test)]
mod tests;
mod tick;
mod upstream;

use buffered::{Buffered, Io};
use intake::Intake;
use queue::PendingQueue;
use stage::{After, Attachment, Exchange, Stage};

/// The first bytes of a request body kept in memory in REQUEST; the rest of
/// it goes to a temp file (`intake.rs`), or, past `--max-buffered-request`
/// (and for every longer body with `0`), is streamed under `--body-timeout`.
pub const PREBUFFER: u64 = 64 * 1024;
/// Bytes buffered in memory towards one peer before the director stops
/// reading from the other (flow control), or, for a response, sends the
/// rest to its temp file (`crate::spill`).
const OUT_CAP: usize = 64 * 1024;
/// Bytes of a response one turn of the loop writes to its temp file
/// before other connections get theirs.
const SPILL_PER_TURN: usize = 256 * 1024;
/// Bytes all responses together write to temp files in one turn of the
/// loop. Copying into the page cache is the costliest thing the director
/// does (a flood of slow readers of a large file has it copy gigabytes);
/// bounded per turn, the copying goes on over many short turns, and the
/// small exchanges between them wait one short turn, not a long one.
const SPILL_PER_LOOP: usize = 1024 * 1024;
/// One read of a response that goes to a temp file (fewer, larger reads:
/// the bytes only pass through).
const SPILL_READ_SIZE: usize = 64 * 1024;
/// The interim answer to `Expect: 100-continue`.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
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
pub enum ClientState {
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

impl ClientState {
    fn index(self) -> usize {
        self as usize
    }
    const NAMES: [&'static str; 5] = ["REQUEST", "PEEK", "RECEIVE", "RESPONSE", "LINGER"];
}

struct Client {
    stream: transport::Stream,
    peer: SocketAddr,
    io: Buffered,
    state: ClientState,
    timer: Timer,
    /// The next request's head started (first byte, or accept for a fresh
    /// connection): the header deadline runs from here.
    head_started: Option<Instant>,
    /// The response's bytes beyond `out`, in a temp file, while the client
    /// reads slower than its backend sent them (`--max-buffered-response`).
    spill: Spill,
    /// What REQUEST keeps of a request body read before admission
    /// (`intake.rs`).
    intake: Intake,
    ex: Option<Exchange>,
}

struct BConn {
    stream: TcpStream,
    backend: usize,
    link: Link,
    client: Option<u64>,
    io: Buffered,
    timer: Timer,
}

/// An `--admin` client.
struct AdminConn {
    stream: TcpStream,
    io: Buffered,
    /// Its one deadline, [`ADMIN_TIMEOUT`] after it was accepted.
    timer: Timer,
}

/// A `--health-path` check in progress.
struct Probe {
    stream: TcpStream,
    backend: usize,
    link: Link,
    io: Buffered,
    /// Its one deadline, `--health-timeout` after it started.
    timer: Timer,
}

/// Where a connection to a backend is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// The non-blocking connect is under way.
    Connecting,
    /// Connected, and has carried no complete exchange.
    Fresh,
    /// Has carried a complete exchange: a failure before the first response
    /// byte may be the backend closing an idle keep-alive connection.
    Reused,
}

impl Link {
    fn connected(self) -> bool {
        self != Link::Connecting
    }
}

struct MonConn {
    stream: TcpStream,
    peer: IpAddr,
    io: Buffered,
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
    /// Responses that went partly through a temp file.
    buffered_to_file: u64,
    /// Request bodies read partly into a temp file before admission.
    requests_to_file: u64,
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
    /// More to do, but other connections first: copying a fast backend's
    /// response to a temp file could otherwise take a whole turn.
    Yield,
    /// More to copy to the temp file, but this turn's [`SPILL_PER_LOOP`]
    /// is spent: first in line next turn.
    Starved,
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
    queue: PendingQueue,
    timers: Deadlines,
    ready: VecDeque<u64>,
    /// What this turn may still write to temp files ([`SPILL_PER_LOOP`]).
    spill_budget: usize,
    /// Connections that found it spent, in the order they came.
    starved: Vec<u64>,
    per_ip: HashMap<IpAddr, usize>,
    rr: usize,
    stats: Stats,
    /// The stop, and its graceful finish within `--shutdown-timeout`.
    finish: Finish,
    /// Health checks, upkeep, and the end of an accept pause.
    next_tick: Instant,
    /// The clock as of the end of the turn's events.
    now: Instant,
    started: Instant,
    /// Accepting paused after an accept failed for lack of descriptors or
    /// memory (EMFILE, ENFILE, ENOBUFS), until the next tick.
    accept_pause: AcceptPause,
    /// The listeners taken out of the poller meanwhile (a level-triggered
    /// listener would wake the loop at once, forever); the turn the pause
    /// ends in puts them back (`watch_listener`).
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
        let queue = PendingQueue::new(cfg.queue_order);
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
            queue,
            timers: Deadlines::default(),
            ready: VecDeque::new(),
            spill_budget: SPILL_PER_LOOP,
            starved: Vec::new(),
            per_ip: HashMap::new(),
            rr: 0,
            stats: Stats::default(),
            finish: Finish::default(),
            next_tick: now,
            now,
            accept_pause: AcceptPause::default(),
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
            self.turn(&mut events)?;
            if self.finish.over(Instant::now(), self.clients.is_empty()) {
                return Ok(());
            }
        }
    }

    /// One turn of the loop: wait for readiness (or the next timer, or not
    /// at all with connections ready), handle the events, the timers, the
    /// tick and the ready connections.
    fn turn(&mut self, events: &mut Events) -> io::Result<()> {
        self.spill_budget = SPILL_PER_LOOP;
        for token in self.starved.drain(..).rev() {
            self.ready.push_front(token);
        }
        // The tick is the director's other wake-up (an accept pause ends
        // with it), so the wait always has a bound.
        let wake = turn::wait_timeout(&self.timers, Instant::now(), Some(self.next_tick));
        let timeout = if self.ready.is_empty() { wake } else { Some(Duration::ZERO) };
        self.poller.wait(events, timeout)?;
        for ev in events.iter() {
            let token = ev.token();
            match (Slab::<()>::kind_of(token), token) {
                (0, LISTENER) => self.accept(),
                (0, MONITOR_LISTENER) => self.accept_monitors(),
                (0, ADMIN_LISTENER) => self.accept_admins(),
                (0, STOP) => self.begin_stop(),
                (CLIENT, _) => {
                    if let Some(c) = self.clients.get_mut(token) {
                        c.io.ready(ev.is_readable(), ev.is_writable());
                        self.drive(token);
                    }
                }
                (BCONN, _) => {
                    if let Some(b) = self.bconns.get_mut(token) {
                        b.io.ready(ev.is_readable(), ev.is_writable());
                        self.backend_event(token, ev.is_gone());
                    }
                }
                (MONITOR, _) => {
                    if let Some(m) = self.monitors.get_mut(token) {
                        m.io.ready(ev.is_readable(), false);
                        self.monitor_event(token);
                    }
                }
                (ADMIN, _) => {
                    if let Some(a) = self.admins.get_mut(token) {
                        a.io.ready(ev.is_readable(), ev.is_writable());
                        self.admin_event(token);
                    }
                }
                (PROBE, _) => {
                    if let Some(p) = self.probes.get_mut(token) {
                        p.io.ready(ev.is_readable(), ev.is_writable());
                        self.probe_event(token, ev.is_gone());
                    }
                }
                _ => {}
            }
        }
        // One reading for the deadlines and the tick: the tick's turn ends
        // an accept pause (paused until a tick) before the tick accepts.
        self.now = Instant::now();
        self.end_turn();
        if self.now >= self.next_tick {
            self.tick();
        }
        for _ in 0..self.ready.len() {
            let Some(token) = self.ready.pop_front() else { break };
            self.drive(token);
        }
        self.watch.report(&self.backends);
        Ok(())
    }
}

/// Puts a locally generated response in the client's output and marks the
/// exchange done. `after`: what the answer lets the connection do; it
/// stays open only if the request asked for that too.
fn respond_local(
    c: &mut Client,
    status: u16,
    content_type: &str,
    body: &[u8],
    extra: &[(&str, String)],
    after: After,
) {
    let (client_11, keep_alive, head_only) = match &c.ex {
        Some(ex) => (ex.version == h1::Version::Http11, ex.after.keeps_alive(), ex.answer.head_only()),
        None => (true, false, false),
    };
    let keep = after.keeps_alive() && keep_alive;
    c.io.out.extend_from_slice(&local_bytes(status, content_type, body, extra, client_11, keep, head_only));
    let ex = c.ex.get_or_insert_with(|| Exchange::local(status));
    ex.stage = Stage::Done;
    ex.status = status;
    ex.after.close_unless(keep);
    c.state = ClientState::Response;
    c.timer.cancel();
}

/// Drops a request body that is already buffered so the connection can
/// stay open after a local answer (`KeepAlive`); `Close` if the body is not
/// all here.
fn discard_body(c: &mut Client) -> After {
    let Some(ex) = c.ex.as_mut() else { return After::Close };
    match ex.upload.discard(c.io.inbuf.len()) {
        Some(n) => {
            c.io.inbuf.drain(..n);
            After::KeepAlive
        }
        None => After::Close,
    }
}

/// An I/O error in words, without the "(os error N)" tail: "Connection
/// refused", "No route to host".
fn describe_io(e: &io::Error) -> String {
    let text = e.to_string();
    text.split(" (os error").next().unwrap_or(&text).to_lowercase()
}
