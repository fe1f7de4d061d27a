//! The engine: `--threads` independent mio (epoll, edge-triggered) loops,
//! each owning its share of the connections, its own random stream and its
//! own [`Stats`]; nothing is shared on the hot path but two relaxed
//! counters for the progress line and, with `-n`, one atomic ticket count.
//!
//! * Closed loop: every connection is a user; after each response it
//!   thinks (`--think-time`) and sends the next request. The intended start
//!   of a request is the end of the think time.
//! * Open loop (`--rate`): each thread draws its share of the arrivals
//!   (Poisson or constant gaps) from the start of the run; an arrival goes
//!   to a free connection or waits in a bounded queue. Latency is measured
//!   from the arrival's intended time (wrk2's correction of coordinated
//!   omission), and the send lag is recorded separately.
//!
//! `--close`: one connection per request. On loopback the client side of
//! each closed connection can sit in TIME_WAIT for 60 s, and a run at 20k
//! connections/s exhausts the ~28k ephemeral ports of one source address
//! (connect fails with EADDRNOTAVAIL). Linux's `net.ipv4.tcp_tw_reuse`
//! (2 = loopback only, the default) usually avoids this; when it does not,
//! the engine binds each new connection to another 127.x.y.z source address
//! (all of 127.0.0.0/8 is local), multiplying the available 4-tuples.
//! `--spread-source` does so from the start.
//!
//! Its files: this one (the configuration, [`run`], what the threads
//! share), `worker.rs` (one thread's loop: timers, users, arrivals, the
//! record of each request), `conn.rs` (one connection: connect, write,
//! read, parse, fail).

use std::io::{self};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Token;

use crate::dist::DurationDist;
use crate::stats::{ErrorKind, Stats};
use crate::target::{Chooser, Workload};

mod conn;
mod wire;
mod worker;

use worker::Worker;

/// What a connection to an `https://` target needs.
#[derive(Clone, Debug)]
pub struct Tls {
    /// Versions, verification, ALPN, resumption.
    pub config: Arc<rustls::ClientConfig>,
    /// The name asked for (SNI) and checked.
    pub name: rustls::pki_types::ServerName<'static>,
}

/// Open-loop arrival process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Equal gaps.
    Constant,
}

/// The engine's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The server.
    pub addr: SocketAddr,
    /// `https://`: how to speak TLS to it.
    pub tls: Option<Tls>,
    /// The `Host` header value.
    pub host: String,
    /// Method (GET or HEAD).
    pub method: String,
    /// Extra header lines (`Name: value`).
    pub headers: Vec<String>,
    /// What to request.
    pub workload: Workload,
    /// Connections (closed loop: users).
    pub connections: usize,
    /// Event-loop threads.
    pub threads: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// A new connection per request.
    pub close: bool,
    /// Bind `--close` connections to varied 127.x.y.z source addresses.
    pub spread_source: bool,
    /// Open loop at this total rate (requests/s).
    pub rate: Option<f64>,
    /// Open-loop arrival process.
    pub arrivals: Arrivals,
    /// Closed-loop think time.
    pub think: Option<DurationDist>,
    /// Replay the workload's own think times (SURGE OFF times).
    pub stream_think: bool,
    /// Start a replayed stream over when it ends (else the run ends).
    pub repeat_stream: bool,
    /// Open loop at a replayed stream's own request times, sped up by this
    /// factor.
    pub stream_times: Option<f64>,
    /// Measured duration.
    pub duration: Option<Duration>,
    /// Measured requests.
    pub requests: Option<u64>,
    /// Unmeasured time before.
    pub warmup: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Open loop: arrivals waiting for a connection, at most.
    pub max_queue: usize,
    /// Send lag above which a send counts as late.
    pub lag_threshold: Duration,
    /// Random seed.
    pub seed: u64,
    /// Hash bodies and compare responses of the same URL.
    pub checksum: bool,
    /// Record every request.
    pub timeline: bool,
}

/// Live counters for the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    /// Responses.
    pub requests: AtomicU64,
    /// Errors.
    pub errors: AtomicU64,
}

struct Shared {
    start: Instant,
    measure_start: Instant,
    end: Option<Instant>,
    /// Measured requests left to issue (`-n`); `u64::MAX` when unbounded.
    tickets: AtomicU64,
    cursor: AtomicUsize,
    /// A request was not sent because it was due past the end.
    past_end: AtomicBool,
    requests: Vec<Vec<u8>>,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
}

/// The result of a run.
#[derive(Debug)]
pub struct Outcome {
    /// Everything recorded, merged.
    pub stats: Stats,
    /// Measured wall time (s): the duration, or until the last response.
    pub duration_s: f64,
    /// Event-loop threads that ran (`--threads`, at most one per connection).
    pub threads: usize,
}

impl Config {
    /// Open loop: arrivals at a rate or at a stream's times.
    pub fn open_loop(&self) -> bool {
        self.rate.is_some() || self.stream_times.is_some()
    }
}

/// A loop busier than this (fraction of its wall time outside the epoll
/// wait) cannot be trusted to send on time or to be faster than the server.
pub const BUSY_LIMIT: f64 = 0.9;

/// Runs the load. `progress` is updated as responses arrive; `stop` ends
/// the run early.
pub fn run(cfg: &Config, progress: Arc<Progress>, stop: Arc<AtomicBool>) -> io::Result<Outcome> {
    let requests = cfg
        .workload
        .targets
        .iter()
        .map(|t| {
            let mut r = format!("{} {} HTTP/1.1\r\nHost: {}\r\n", cfg.method, t.path, cfg.host);
            for h in &cfg.headers {
                r.push_str(h);
                r.push_str("\r\n");
            }
            if cfg.close {
                r.push_str("Connection: close\r\n");
            }
            r.push_str("\r\n");
            r.into_bytes()
        })
        .collect();
    let start = Instant::now();
    let measure_start = start + cfg.warmup;
    let shared = Arc::new(Shared {
        start,
        measure_start,
        end: cfg.duration.map(|d| measure_start + d),
        tickets: AtomicU64::new(cfg.requests.unwrap_or(u64::MAX)),
        cursor: AtomicUsize::new(0),
        past_end: AtomicBool::new(false),
        requests,
        progress,
        stop,
    });
    let threads = cfg.threads.clamp(1, cfg.connections.max(1));
    let results: Vec<io::Result<Stats>> = std::thread::scope(|s| {
        let mut first = 0;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let conns = cfg.connections / threads + usize::from(t < cfg.connections % threads);
                let shared = Arc::clone(&shared);
                let range = first..first + conns;
                first += conns;
                std::thread::Builder::new()
                    .name(format!("load-{t}"))
                    .spawn_scoped(s, move || Worker::new(cfg, shared, t, threads, range)?.run())
                    .expect("spawn a load thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("load thread panicked")).collect()
    });
    let mut stats = Stats::new(cfg.workload.classes.len());
    for r in results {
        stats.merge(r?);
    }
    stats.timeline.sort_by_key(|r| (r.intended_us, r.actual_us));
    let duration_s = match cfg.duration {
        Some(d) if cfg.requests.is_none() || stats.last_end_us as f64 > d.as_secs_f64() * 1e6 => {
            // Every user done early because its next request was due past
            // the end (thinking users: SURGE's OFF times run to seconds)
            // held the load the whole time: the window is the duration,
            // else a second's six requests would read as 500 req/s.
            let thought_past =
                shared.past_end.load(Ordering::Relaxed) && !shared.stop.load(Ordering::Relaxed);
            if thought_past {
                d.as_secs_f64()
            } else {
                d.as_secs_f64().min(measure_start.elapsed().as_secs_f64())
            }
        }
        _ => (stats.last_end_us as f64 / 1e6).max(1e-6),
    };
    Ok(Outcome { stats, duration_s, threads })
}

const TIMER_TOKEN: Token = Token(usize::MAX);

fn us_between(a: Instant, b: Instant) -> u64 {
    b.saturating_duration_since(a).as_micros() as u64
}

/// When stream entry `i` is due under `--stream-times` (None past the end).
fn stream_time(cfg: &Config, start: Instant, i: usize) -> Option<Instant> {
    let (Some(speedup), Chooser::Stream(seq)) = (cfg.stream_times, &cfg.workload.chooser) else {
        return None;
    };
    let first = seq.first()?.time_us;
    let r = seq.get(i)?;
    Some(start + Duration::from_secs_f64((r.time_us - first) as f64 / 1e6 / speedup))
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32)
}

fn io_kind(e: &io::Error) -> ErrorKind {
    match e.kind() {
        io::ErrorKind::ConnectionRefused | io::ErrorKind::AddrNotAvailable => ErrorKind::Connect,
        io::ErrorKind::TimedOut => ErrorKind::Timeout,
        _ => ErrorKind::Reset,
    }
}
