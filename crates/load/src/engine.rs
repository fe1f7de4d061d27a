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

use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::dist::{self, DurationDist, Rng};
use crate::http::{ParseError, Response, ResponseParser};
use crate::stats::{ErrorKind, LoopUsage, Row, Stats};
use crate::target::{Chooser, StreamRef, Workload};

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
            d.as_secs_f64().min(measure_start.elapsed().as_secs_f64())
        }
        _ => (stats.last_end_us as f64 / 1e6).max(1e-6),
    };
    Ok(Outcome { stats, duration_s, threads })
}

#[derive(Debug)]
struct Req {
    intended: Instant,
    actual: Instant,
    first_byte: Option<Instant>,
    target: u32,
    measured: bool,
    retried: bool,
}

struct Conn {
    sock: Option<TcpStream>,
    connected: bool,
    since: Instant,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    rpos: usize,
    rlen: usize,
    inflight: VecDeque<Req>,
    parser: ResponseParser,
    served: u64,
    /// Closed loop: the user has no more requests to send.
    done: bool,
    /// Open loop: in the free list.
    listed: bool,
    /// Waiting for a timer (think time or reconnect back-off).
    waiting: bool,
    /// Closed loop: the request to send when the think time ends.
    deferred: Option<(Instant, u32, bool)>,
    /// Bumped on every close, so a read loop notices a replaced socket.
    generation: u64,
    /// Registered for WRITABLE too (connecting, or a write would block).
    /// Otherwise READABLE only: with edge triggering every ACK that frees
    /// send-buffer space would wake the loop (wrk likewise watches
    /// writability only while it has something to write).
    want_write: bool,
}

const RBUF: usize = 64 * 1024;

struct Worker<'a> {
    cfg: &'a Config,
    sh: Arc<Shared>,
    poll: Poll,
    conns: Vec<Conn>,
    st: Stats,
    rng: Rng,
    rr: usize,
    /// Timers: (when, connection).
    timers: BinaryHeap<std::cmp::Reverse<(Instant, usize)>>,
    /// Open loop.
    open: bool,
    /// `--stream-times`: this thread's next stream entry, and the stride
    /// (the threads take turns).
    stream_next: usize,
    stream_step: usize,
    /// When the arrival schedule starts (the loop's start).
    origin: Instant,
    gap_s: f64,
    next_arrival: Instant,
    arrivals_done: bool,
    pending: VecDeque<(Instant, u32, bool)>,
    free: Vec<usize>,
    /// Source address rotation for `--close`.
    spread: bool,
    src_next: u32,
    src_base: u8,
    checksums: Vec<Option<u64>>,
    /// `--workload`, closed loop: each connection's requests (its users')
    /// and how far it got.
    scripts: Vec<Vec<StreamRef>>,
    script_pos: Vec<usize>,
    last_timeout_scan: Instant,
    tick: Duration,
    /// epoll waits in whole milliseconds; a timerfd wakes the loop on time
    /// for arrivals and think-time ends (else sends would lag ~0.5 ms).
    timerfd: std::os::fd::OwnedFd,
    armed: Option<Instant>,
}

const TIMER_TOKEN: Token = Token(usize::MAX);

fn us_between(a: Instant, b: Instant) -> u64 {
    b.saturating_duration_since(a).as_micros() as u64
}

impl<'a> Worker<'a> {
    fn new(
        cfg: &'a Config,
        sh: Arc<Shared>,
        t: usize,
        threads: usize,
        range: std::ops::Range<usize>,
    ) -> io::Result<Worker<'a>> {
        let now = Instant::now();
        let nconns = range.len();
        let mut scripts = vec![Vec::new(); nconns];
        if let (Chooser::Stream(seq), false) = (&cfg.workload.chooser, cfg.open_loop()) {
            // A SURGE user's pages, and the OFF times between them, stay on
            // one connection, as a browser's would.
            for r in seq {
                let g = r.user as usize % cfg.connections;
                if range.contains(&g) {
                    scripts[g - range.start].push(*r);
                }
            }
        }
        let conns = (0..nconns)
            .map(|_| Conn {
                sock: None,
                connected: false,
                since: now,
                wbuf: Vec::new(),
                wpos: 0,
                rbuf: vec![0; RBUF],
                rpos: 0,
                rlen: 0,
                inflight: VecDeque::new(),
                parser: ResponseParser::new(cfg.checksum),
                served: 0,
                done: false,
                listed: false,
                waiting: false,
                deferred: None,
                generation: 0,
                want_write: false,
            })
            .collect();
        let thread_rate = cfg.rate.map(|r| r * nconns as f64 / cfg.connections.max(1) as f64);
        let mut rng = dist::rng(cfg.seed, t as u64);
        let gap_s = thread_rate.map_or(0.0, |r| 1.0 / r);
        // Stagger the threads' first arrivals so constant schedules interleave.
        let first = match cfg.arrivals {
            Arrivals::Constant => gap_s * t as f64 / threads as f64,
            Arrivals::Poisson => -gap_s * dist::uniform(&mut rng).ln(),
        };
        let mut first = sh.start + Duration::from_secs_f64(first);
        let mut arrivals_done = nconns == 0;
        if cfg.stream_times.is_some() {
            match stream_time(cfg, sh.start, t) {
                Some(at) => first = at,
                None => arrivals_done = true,
            }
        }
        Ok(Worker {
            cfg,
            next_arrival: first,
            stream_next: t,
            stream_step: threads,
            origin: sh.start,
            sh,
            poll: Poll::new()?,
            conns,
            st: Stats::new(cfg.workload.classes.len()),
            rng,
            rr: t,
            timers: BinaryHeap::new(),
            open: cfg.open_loop(),
            gap_s,
            arrivals_done,
            pending: VecDeque::new(),
            free: Vec::new(),
            spread: cfg.spread_source,
            src_next: 0,
            src_base: 1 + (t % 250) as u8,
            checksums: cfg.workload.targets.iter().map(|t| t.expect_sum).collect(),
            script_pos: vec![0; nconns],
            scripts,
            last_timeout_scan: now,
            armed: None,
            timerfd: rustix::time::timerfd_create(
                rustix::time::TimerfdClockId::Monotonic,
                rustix::time::TimerfdFlags::NONBLOCK | rustix::time::TimerfdFlags::CLOEXEC,
            )?,
            tick: (cfg.timeout / 20).clamp(Duration::from_millis(1), Duration::from_millis(50)),
        })
    }

    fn run(mut self) -> io::Result<Stats> {
        let mut events = Events::with_capacity(1024);
        {
            use std::os::fd::AsRawFd;
            let raw = self.timerfd.as_raw_fd();
            self.poll.registry().register(&mut mio::unix::SourceFd(&raw), TIMER_TOKEN, Interest::READABLE)?;
        }
        let now = Instant::now();
        // The schedule starts when this loop does: arrivals due while the
        // thread was being created would otherwise count as its lateness.
        let shift = now.saturating_duration_since(self.sh.start);
        self.next_arrival += shift;
        self.origin += shift;
        let cpu_before = thread_cpu();
        let mut waiting = Duration::ZERO;
        for ci in 0..self.conns.len() {
            if self.open {
                if !self.cfg.close {
                    self.connect(ci, now);
                }
                self.make_free(ci);
            } else {
                self.user_next(ci, now);
            }
        }
        loop {
            let now = Instant::now();
            if self.sh.stop.load(Ordering::Relaxed) || self.sh.end.is_some_and(|e| now >= e) {
                self.abandon();
                break;
            }
            self.fire_timers(now);
            if self.open {
                self.arrive(now);
                self.dispatch(now);
            }
            if now.duration_since(self.last_timeout_scan) >= self.tick {
                self.last_timeout_scan = now;
                self.scan_timeouts(now);
            }
            if self.finished() {
                break;
            }
            let mut wake = now + self.tick;
            let mut precise = None;
            if let Some(std::cmp::Reverse((t, _))) = self.timers.peek() {
                precise = Some(*t);
            }
            if self.open && !self.arrivals_done {
                precise = Some(precise.map_or(self.next_arrival, |p: Instant| p.min(self.next_arrival)));
            }
            if let Some(e) = self.sh.end {
                wake = wake.min(e);
            }
            if let Some(p) = precise.filter(|&p| p < wake) {
                wake = p;
                self.arm(p, now)?;
            }
            // epoll waits in whole milliseconds: round up (the timerfd,
            // when armed, wakes us earlier), never spin.
            let timeout = wake.saturating_duration_since(now);
            let timeout = Duration::from_millis(timeout.as_micros().div_ceil(1000) as u64);
            let before = Instant::now();
            let polled = self.poll.poll(&mut events, Some(timeout));
            waiting += before.elapsed();
            match polled {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in events.iter() {
                if ev.token() == TIMER_TOKEN {
                    let mut b = [0u8; 8];
                    let _ = rustix::io::read(&self.timerfd, &mut b);
                    self.armed = None;
                    continue;
                }
                let ci = ev.token().0;
                if ci >= self.conns.len() || self.conns[ci].sock.is_none() {
                    continue;
                }
                if !self.conns[ci].connected && (ev.is_writable() || ev.is_error() || ev.is_write_closed()) {
                    self.check_connected(ci);
                }
                if self.conns[ci].connected && ev.is_writable() {
                    self.flush(ci);
                }
                if self.conns[ci].connected && (ev.is_readable() || ev.is_read_closed() || ev.is_error()) {
                    self.read(ci, ev.is_read_closed() || ev.is_error());
                }
            }
        }
        let wall = now.elapsed().as_secs_f64().max(1e-9);
        self.st.loops.push(LoopUsage {
            busy: (1.0 - waiting.as_secs_f64() / wall).clamp(0.0, 1.0),
            cpu: (thread_cpu() - cpu_before).as_secs_f64() / wall,
        });
        Ok(self.st)
    }

    /// Arms the timerfd for `at` (relative to `now`), unless already armed
    /// for it.
    fn arm(&mut self, at: Instant, now: Instant) -> io::Result<()> {
        if self.armed == Some(at) {
            return Ok(());
        }
        let d = at.saturating_duration_since(now).max(Duration::from_micros(1));
        let spec = rustix::time::Itimerspec {
            it_interval: rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: rustix::time::Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ },
        };
        rustix::time::timerfd_settime(&self.timerfd, rustix::time::TimerfdTimerFlags::empty(), &spec)?;
        self.armed = Some(at);
        Ok(())
    }

    fn finished(&self) -> bool {
        let idle = self.conns.iter().all(|c| c.inflight.is_empty());
        if self.open {
            self.arrivals_done && self.pending.is_empty() && idle
        } else {
            idle && self.conns.iter().all(|c| c.done)
        }
    }

    /// Takes a request ticket; `None` when `-n` is used up or time is over.
    fn ticket(&mut self, intended: Instant) -> Option<bool> {
        if self.sh.end.is_some_and(|e| intended >= e) {
            return None;
        }
        let measured = intended >= self.sh.measure_start;
        if measured && self.cfg.requests.is_some() {
            self.sh.tickets.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1)).ok()?;
        }
        Some(measured)
    }

    /// The next target for connection `ci` (closed loop) or for the next
    /// arrival (open loop, `ci` None), and the think time the workload asks
    /// before it; `None` when a replayed stream has ended.
    fn choose(&mut self, ci: Option<usize>) -> Option<(u32, u64)> {
        let n = self.cfg.workload.targets.len();
        match &self.cfg.workload.chooser {
            Chooser::RoundRobin => {
                self.rr = (self.rr + 1) % n;
                Some((self.rr as u32, 0))
            }
            Chooser::Weighted(cum) => {
                let u = dist::uniform(&mut self.rng);
                Some(((cum.partition_point(|&c| c < u)).min(n - 1) as u32, 0))
            }
            Chooser::Stream(seq) => {
                let (list, i) = match ci {
                    Some(ci) => {
                        let i = self.script_pos[ci];
                        self.script_pos[ci] += 1;
                        (&self.scripts[ci], i)
                    }
                    None => (seq, self.sh.cursor.fetch_add(1, Ordering::Relaxed)),
                };
                if list.is_empty() || (i >= list.len() && !self.cfg.repeat_stream) {
                    return None;
                }
                let r = list[i % list.len()];
                Some((r.target, r.off_us))
            }
        }
    }

    // ---- closed loop ------------------------------------------------------

    /// The user on `ci` is ready: think, or send (up to the pipeline depth).
    fn user_next(&mut self, ci: usize, now: Instant) {
        while !self.conns[ci].done
            && !self.conns[ci].waiting
            && self.conns[ci].inflight.len() < self.cfg.pipeline
        {
            let Some((target, stream_off)) = self.choose(Some(ci)) else {
                self.conns[ci].done = true;
                if self.conns[ci].inflight.is_empty() {
                    self.close(ci);
                }
                return;
            };
            let mut think = self.cfg.think.map(|d| d.sample(&mut self.rng)).unwrap_or_default();
            if self.cfg.stream_think {
                think += Duration::from_micros(stream_off);
            }
            if !think.is_zero() && !self.conns[ci].inflight.is_empty() {
                // Thinking users wait for their previous answer first; the
                // entry is chosen again then, so a replayed stream loses none.
                if let Chooser::Stream(_) = self.cfg.workload.chooser {
                    self.script_pos[ci] -= 1;
                }
                return;
            }
            let intended = now + think;
            let Some(measured) = self.ticket(intended) else {
                self.conns[ci].done = true;
                if self.conns[ci].inflight.is_empty() {
                    self.close(ci);
                }
                return;
            };
            if think.is_zero() {
                self.issue(
                    ci,
                    Req { intended, actual: now, first_byte: None, target, measured, retried: false },
                    now,
                );
            } else {
                // Sent when the timer fires; the ticket is already taken.
                self.conns[ci].waiting = true;
                self.conns[ci].deferred = Some((intended, target, measured));
                self.timers.push(std::cmp::Reverse((intended, ci)));
                return;
            }
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(&std::cmp::Reverse((t, ci))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            self.conns[ci].waiting = false;
            self.note_lateness(now, t);
            if self.open {
                self.make_free(ci);
            } else if let Some((intended, target, measured)) = self.conns[ci].deferred.take() {
                self.issue(
                    ci,
                    Req { intended, actual: now, first_byte: None, target, measured, retried: false },
                    now,
                );
                self.user_next(ci, now);
            } else {
                self.user_next(ci, now);
            }
        }
    }

    /// The loop sleeps on a timerfd set for the next arrival or think-time
    /// end, whatever the connections are doing, so noticing one late is
    /// the generator's own delay (busy or starved of CPU), never the
    /// server's: count it even when no connection is free.
    fn note_lateness(&mut self, now: Instant, due: Instant) {
        let late = now.saturating_duration_since(due);
        if late > self.cfg.lag_threshold {
            self.st.generator_late += 1;
            self.st.generator_max_lag_us = self.st.generator_max_lag_us.max(late.as_micros() as u64);
        }
    }

    // ---- open loop --------------------------------------------------------

    fn arrive(&mut self, now: Instant) {
        while !self.arrivals_done && self.next_arrival <= now {
            let intended = self.next_arrival;
            if intended >= self.sh.measure_start {
                self.note_lateness(now, intended);
            }
            let mut timed_target = None;
            if let (Some(_), Chooser::Stream(seq)) = (self.cfg.stream_times, &self.cfg.workload.chooser) {
                timed_target = Some(seq[self.stream_next].target);
                self.stream_next += self.stream_step;
                match stream_time(self.cfg, self.origin, self.stream_next) {
                    Some(at) => self.next_arrival = at,
                    // This one is the thread's last.
                    None => self.arrivals_done = true,
                }
            } else {
                let gap = match self.cfg.arrivals {
                    Arrivals::Constant => self.gap_s,
                    Arrivals::Poisson => -self.gap_s * dist::uniform(&mut self.rng).ln(),
                };
                self.next_arrival += Duration::from_secs_f64(gap);
            }
            let Some(measured) = self.ticket(intended) else {
                self.arrivals_done = true;
                break;
            };
            if self.free.is_empty() && measured {
                self.st.queued += 1;
            }
            if self.pending.len() >= self.cfg.max_queue {
                if measured {
                    // Never sent: an error of the run, not a missing sample.
                    self.st.dropped += 1;
                    self.st.error(ErrorKind::Dropped);
                    let ms = self.sh.measure_start;
                    self.st.second(us_between(ms, intended)).errors += 1;
                    self.sh.progress.errors.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let Some(target) = timed_target.or_else(|| self.choose(None).map(|c| c.0)) else {
                self.arrivals_done = true;
                break;
            };
            self.pending.push_back((intended, target, measured));
        }
    }

    fn make_free(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        if !c.listed && !c.waiting && c.inflight.len() < self.cfg.pipeline {
            c.listed = true;
            self.free.push(ci);
        }
    }

    fn dispatch(&mut self, now: Instant) {
        while !self.pending.is_empty() {
            let Some(ci) = self.free.pop() else { break };
            self.conns[ci].listed = false;
            if self.conns[ci].waiting || self.conns[ci].inflight.len() >= self.cfg.pipeline {
                continue;
            }
            let (intended, target, measured) = self.pending.pop_front().expect("non-empty");
            self.issue(
                ci,
                Req { intended, actual: now, first_byte: None, target, measured, retried: false },
                now,
            );
            self.make_free(ci);
        }
    }

    // ---- connections ------------------------------------------------------

    fn source_addr(&mut self) -> Option<SocketAddr> {
        if !self.spread || !matches!(self.cfg.addr.ip(), IpAddr::V4(v4) if v4.is_loopback()) {
            return None;
        }
        self.src_next = self.src_next % 65_000 + 1;
        let ip = Ipv4Addr::new(127, self.src_base, (self.src_next >> 8) as u8, (self.src_next & 0xff) as u8);
        Some(SocketAddr::new(IpAddr::V4(ip), 0))
    }

    fn open_socket(&mut self) -> io::Result<TcpStream> {
        let addr = self.cfg.addr;
        for _ in 0..2 {
            let result = match self.source_addr() {
                None => TcpStream::connect(addr),
                Some(src) => {
                    let s = socket2::Socket::new(
                        socket2::Domain::for_address(addr),
                        socket2::Type::STREAM,
                        None,
                    )?;
                    s.set_nonblocking(true)?;
                    s.bind(&src.into())?;
                    match s.connect(&addr.into()) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(115) || e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    Ok(TcpStream::from_std(s.into()))
                }
            };
            match result {
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable && !self.spread => {
                    // Out of ephemeral ports (TIME_WAIT): spread over 127.x.y.z.
                    self.spread = true;
                }
                r => return r,
            }
        }
        Err(io::Error::from(io::ErrorKind::AddrNotAvailable))
    }

    fn connect(&mut self, ci: usize, now: Instant) {
        match self.open_socket() {
            Ok(mut s) => {
                if let Err(_e) =
                    self.poll.registry().register(&mut s, Token(ci), Interest::READABLE | Interest::WRITABLE)
                {
                    self.fail_all(ci, ErrorKind::Connect, now);
                    return;
                }
                let _ = s.set_nodelay(true);
                let c = &mut self.conns[ci];
                c.sock = Some(s);
                c.connected = false;
                c.want_write = true;
                c.since = now;
            }
            Err(e) => {
                self.note_connect_failure(&e);
                self.fail_all(ci, ErrorKind::Connect, now)
            }
        }
    }

    fn note_connect_failure(&mut self, e: &io::Error) {
        *self.st.connect_failures.entry(crate::stats::connect_failure(e)).or_default() += 1;
    }

    fn check_connected(&mut self, ci: usize) {
        let now = Instant::now();
        let c = &mut self.conns[ci];
        let Some(s) = c.sock.as_ref() else { return };
        match s.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => {
                self.note_connect_failure(&e);
                return self.fail_all(ci, ErrorKind::Connect, now);
            }
        }
        match s.peer_addr() {
            Ok(_) => {
                c.connected = true;
                c.served = 0;
                self.st.connects += 1;
                if now >= self.sh.measure_start {
                    let us = us_between(self.sh.measure_start, now);
                    self.st.second(us).connects += 1;
                }
                self.flush(ci);
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
            Err(e) => {
                self.note_connect_failure(&e);
                self.fail_all(ci, ErrorKind::Connect, now)
            }
        }
    }

    fn close(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        if let Some(mut s) = c.sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        c.connected = false;
        c.generation += 1;
        c.wbuf.clear();
        c.wpos = 0;
        c.rpos = 0;
        c.rlen = 0;
        c.parser.reset();
    }

    /// Sends `req` on `ci` (connecting first if needed).
    fn issue(&mut self, ci: usize, req: Req, now: Instant) {
        let lag = req.actual.saturating_duration_since(req.intended);
        if req.measured {
            let _ = self.st.send_lag.record((lag.as_micros() as u64).max(1));
            if lag > self.cfg.lag_threshold {
                self.st.late_sends += 1;
            }
        }
        let bytes = &self.sh.requests[req.target as usize];
        let c = &mut self.conns[ci];
        c.wbuf.extend_from_slice(bytes);
        c.inflight.push_back(req);
        if c.sock.is_none() {
            self.connect(ci, now);
        } else if c.connected {
            self.flush(ci);
        }
    }

    fn flush(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        let Some(s) = c.sock.as_mut() else { return };
        while c.wpos < c.wbuf.len() {
            match s.write(&c.wbuf[c.wpos..]) {
                Ok(0) => return self.fail_all(ci, ErrorKind::Reset, Instant::now()),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !c.want_write {
                        c.want_write = true;
                        let interest = Interest::READABLE | Interest::WRITABLE;
                        if self.poll.registry().reregister(s, Token(ci), interest).is_err() {
                            return self.fail_all(ci, ErrorKind::Reset, Instant::now());
                        }
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail_all(ci, io_kind(&e), Instant::now()),
            }
        }
        c.wbuf.clear();
        c.wpos = 0;
        if c.want_write {
            c.want_write = false;
            if self.poll.registry().reregister(s, Token(ci), Interest::READABLE).is_err() {
                self.fail_all(ci, ErrorKind::Reset, Instant::now());
            }
        }
    }

    /// Reads what the socket has. `hup`: the peer's FIN (or an error) is
    /// already known, so read to the end even after a short read.
    fn read(&mut self, ci: usize, hup: bool) {
        let generation = self.conns[ci].generation;
        loop {
            let c = &mut self.conns[ci];
            if c.generation != generation {
                return;
            }
            let Some(s) = c.sock.as_mut() else { return };
            if c.rpos == c.rlen {
                c.rpos = 0;
                c.rlen = 0;
            } else if c.rlen == c.rbuf.len() {
                c.rbuf.copy_within(c.rpos..c.rlen, 0);
                c.rlen -= c.rpos;
                c.rpos = 0;
                if c.rlen == c.rbuf.len() {
                    return self.fail_all(ci, ErrorKind::Parse, Instant::now());
                }
            }
            let room = c.rbuf.len() - c.rlen;
            match s.read(&mut c.rbuf[c.rlen..]) {
                Ok(0) => return self.eof(ci),
                Ok(n) => {
                    c.rlen += n;
                    let now = Instant::now();
                    if !self.consume(ci, now) || (n < room && !hup) {
                        // A short read drained the socket: skip the read
                        // that would only say EAGAIN (one syscall per
                        // response saved); new data or a FIN arriving
                        // after the reported edge brings a new edge.
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail_all(ci, io_kind(&e), Instant::now()),
            }
        }
    }

    /// Parses buffered bytes; false if the connection was closed.
    fn consume(&mut self, ci: usize, now: Instant) -> bool {
        loop {
            let c = &mut self.conns[ci];
            if c.rpos == c.rlen {
                return true;
            }
            let Some(front) = c.inflight.front_mut() else {
                // Bytes nobody asked for.
                self.st.error(ErrorKind::Parse);
                self.close(ci);
                self.after_close(ci, now);
                return false;
            };
            front.first_byte.get_or_insert(now);
            let head = self.cfg.method.eq_ignore_ascii_case("HEAD");
            match c.parser.feed(&c.rbuf[c.rpos..c.rlen], head) {
                Ok(p) => {
                    c.rpos += p.consumed;
                    if !p.done {
                        return true;
                    }
                    let resp = c.parser.response();
                    c.parser.reset();
                    c.served += 1;
                    let req = c.inflight.pop_front().expect("front");
                    self.complete(req, Ok(resp), now);
                    if !resp.keep_alive {
                        self.requeue_rest(ci);
                        self.after_close(ci, now);
                        return false;
                    }
                    self.after_response(ci, now);
                }
                Err(e) => {
                    let kind = match e {
                        ParseError::Parse => ErrorKind::Parse,
                        ParseError::ShortBody => ErrorKind::ShortBody,
                        ParseError::Closed => ErrorKind::Closed,
                    };
                    self.fail_all(ci, kind, now);
                    return false;
                }
            }
        }
    }

    fn eof(&mut self, ci: usize) {
        let now = Instant::now();
        let c = &mut self.conns[ci];
        if c.inflight.is_empty() {
            // An idle kept-alive connection closed by the server.
            self.close(ci);
            return self.after_close(ci, now);
        }
        let started = c.parser.started();
        match c.parser.eof() {
            Ok(resp) => {
                let req = c.inflight.pop_front().expect("front");
                self.complete(req, Ok(resp), now);
                self.requeue_rest(ci);
                self.after_close(ci, now);
            }
            Err(ParseError::Closed) if !started && c.served > 0 && !c.inflight[0].retried => {
                // The server closed a kept-alive connection as we reused it:
                // send again on a fresh one (as browsers do for GET).
                self.requeue_rest(ci);
                self.after_close(ci, now);
            }
            Err(e) => {
                let kind = if e == ParseError::ShortBody { ErrorKind::ShortBody } else { ErrorKind::Closed };
                self.fail_all(ci, kind, now);
            }
        }
    }

    /// Unanswered requests of a connection that closed go out again on a
    /// new connection, keeping their intended times.
    fn requeue_rest(&mut self, ci: usize) {
        let reqs: Vec<Req> = self.conns[ci].inflight.drain(..).collect();
        self.close(ci);
        let now = Instant::now();
        for mut r in reqs {
            self.st.retries += 1;
            r.retried = true;
            r.first_byte = None;
            self.issue(ci, r, now);
        }
    }

    /// Fails every request in flight on `ci` with `kind` and closes it.
    fn fail_all(&mut self, ci: usize, kind: ErrorKind, now: Instant) {
        let reqs: Vec<Req> = self.conns[ci].inflight.drain(..).collect();
        self.close(ci);
        for r in reqs {
            self.complete(r, Err(kind), now);
        }
        if kind == ErrorKind::Connect && !self.conns[ci].done {
            // Back off a little so a refused port does not spin the loop.
            self.conns[ci].waiting = true;
            self.timers.push(std::cmp::Reverse((now + Duration::from_millis(10), ci)));
            return;
        }
        self.after_close(ci, now);
    }

    fn after_close(&mut self, ci: usize, now: Instant) {
        if self.conns[ci].waiting {
            return;
        }
        if self.open {
            self.make_free(ci);
        } else if self.conns[ci].inflight.is_empty() || self.conns[ci].sock.is_none() {
            self.user_next(ci, now);
        }
    }

    fn after_response(&mut self, ci: usize, now: Instant) {
        if self.cfg.close && self.conns[ci].inflight.is_empty() {
            self.close(ci);
        }
        if self.open {
            self.make_free(ci);
            self.dispatch(now);
        } else {
            self.user_next(ci, now);
            if self.conns[ci].done && self.conns[ci].inflight.is_empty() {
                self.close(ci);
            }
        }
    }

    fn scan_timeouts(&mut self, now: Instant) {
        for ci in 0..self.conns.len() {
            let c = &self.conns[ci];
            let Some(front) = c.inflight.front() else { continue };
            if now.saturating_duration_since(front.actual) >= self.cfg.timeout {
                let kind = if c.connected { ErrorKind::Timeout } else { ErrorKind::Connect };
                if kind == ErrorKind::Connect {
                    self.note_connect_failure(&io::ErrorKind::TimedOut.into());
                }
                self.fail_all(ci, kind, now);
            }
        }
    }

    /// The run ended: whatever is still in flight or queued is unfinished.
    fn abandon(&mut self) {
        let mut n = self.pending.iter().filter(|p| p.2).count() as u64;
        for c in &self.conns {
            n += c.inflight.iter().filter(|r| r.measured).count() as u64;
        }
        self.st.unfinished += n;
    }

    /// Records the outcome of one request.
    fn complete(&mut self, req: Req, result: Result<Response, ErrorKind>, now: Instant) {
        let ms = self.sh.measure_start;
        if !req.measured {
            self.st.warmup_requests += 1;
            return;
        }
        let target = &self.cfg.workload.targets[req.target as usize];
        let mut error = None;
        let (status, bytes) = match result {
            Ok(r) => {
                if r.status >= 500 {
                    error = Some(ErrorKind::Status5xx);
                } else if r.status >= 400 {
                    error = Some(ErrorKind::Status4xx);
                } else if target.expect_len.is_some_and(|l| l != r.body_bytes) && r.status == 200 {
                    error = Some(ErrorKind::Size);
                } else if let Some(sum) = r.checksum.filter(|_| r.status == 200) {
                    // Against the file on disk (--workload) or the first body.
                    let want = self.checksums[req.target as usize].get_or_insert(sum);
                    if *want != sum {
                        error = Some(ErrorKind::Checksum);
                    }
                }
                (r.status, r.wire_bytes)
            }
            Err(kind) => {
                error = Some(kind);
                (0, 0)
            }
        };
        let latency = us_between(req.intended, now).max(1);
        let end_us = us_between(ms, now);
        self.st.last_end_us = self.st.last_end_us.max(end_us);
        let sec = self.st.second(end_us);
        sec.bytes += bytes;
        if status != 0 {
            sec.requests += 1;
            let _ = sec.latency.record(latency);
        }
        if error.is_some() {
            sec.errors += 1;
        }
        let class = &mut self.st.classes[target.class];
        class.bytes += bytes;
        if error.is_some() {
            class.errors += 1;
        }
        if status != 0 {
            let _ = class.latency.record(latency);
            self.st.requests += 1;
            self.st.bytes += bytes;
            if let Ok(r) = result {
                self.st.body_bytes += r.body_bytes;
            }
            *self.st.status.entry(status).or_default() += 1;
            let _ = self.st.latency.record(latency);
            let _ = self.st.service.record(us_between(req.actual, now).max(1));
            if let Some(fb) = req.first_byte {
                let _ = self.st.ttfb.record(us_between(req.actual, fb).max(1));
            }
            self.sh.progress.requests.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(kind) = error {
            self.st.error(kind);
            self.sh.progress.errors.fetch_add(1, Ordering::Relaxed);
        }
        if self.cfg.timeline {
            let start = self.sh.start;
            self.st.timeline.push(Row {
                intended_us: us_between(start, req.intended),
                actual_us: us_between(start, req.actual),
                first_byte_us: req.first_byte.map_or(0, |f| us_between(start, f)),
                end_us: us_between(start, now),
                status,
                bytes,
                target: req.target,
                error,
            });
        }
    }
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
