//! Measurements every model exposes: per-phase timing, request counters,
//! connection states, queues, a scoreboard, and a sampled request trace.
//!
//! # Aggregation: sharded log-linear histograms of atomics
//!
//! Every duration goes into a fixed log-linear histogram (HdrHistogram's
//! layout with 3 significant bits: 8 sub-buckets per power of two, so a
//! bucket is at most 12.5% wide; nanoseconds from 0 to ~73 minutes in 320
//! buckets: 8 exact ones below 8 ns, then 8 per octave up to 2^42 ns).
//! Recording adds one to the bucket and the duration to the phase's sum: no
//! lock, no allocation, no system call. Readers (the admin page, once a
//! second) add the shards up.
//!
//! # Owned shards: no locked instructions on the hot path
//!
//! The first [`OWNED_SHARDS`] threads to record each own a shard alone (a
//! claim they give back when they exit), and, being its only writer, add
//! with a plain load and store. An uncontended `lock xadd` costs some
//! twenty times a load and a store, and a timed request makes some 20 of
//! them — a tenth of `event`'s whole user time per request (BENCHMARKS.md,
//! "Why the code is as it is"). Threads beyond those (a
//! thread-per-connection server under load) share the other
//! [`SHARDS`]` - OWNED_SHARDS`, round robin, with `fetch_add`.
//!
//! Why not `hdrhistogram` per thread: recording would then need the thread
//! to own its histogram (a thread-local registry merged under a lock on
//! read, with care for threads that exit), and the precision it adds over
//! 3 bits is not needed for a breakdown of where time goes. Fixed buckets
//! also make the Prometheus histogram exact: its `le` bounds are octave
//! boundaries, which are bucket boundaries.
//!
//! # Process models
//!
//! A forked child counts into its own copy of these atomics. To show the
//! whole server, a [`Snapshot`] has a fixed-layout wire form
//! ([`Snapshot::encode`], [`Snapshot::decode`]) and adds up
//! ([`Snapshot::merge`]): each child publishes its snapshot into a shared
//! memory file (see `models::board`) and the admin listener adds them up.
//! The stats' `epoch` is copied by `fork`, so every process measures from
//! the same monotonic origin and scoreboard times are comparable.
//!
//! A request's timestamps are [`now_ns`]: `CLOCK_MONOTONIC` (the clock of
//! `Instant`, a vDSO call) as plain nanoseconds, so a phase is one integer
//! subtraction, not `Instant`'s `Duration` arithmetic, which costs more
//! than the clock read itself. Where one phase ends the next begins on the
//! same timestamp, and a request's phases reach the shards in one
//! [`Stats::record_request`]. With timing off (`--no-timing`) the
//! connection takes no timestamps at all; counters (status, bytes,
//! connection states) stay on, as they cost one atomic add.
//!
//! # Where each part lives
//!
//! This file: [`Stats`] (recording and [`Stats::snapshot`]), [`Phase`],
//! [`PhaseTimes`], [`ConnState`]. `histogram.rs`: the bucket layout and
//! [`Hist`]. `shard.rs`: writer shards and their claims. `queue.rs`:
//! [`QueueStat`]. `scoreboard.rs`: [`Worker`] slots. `trace.rs`: the
//! sampled CSV trace. `snapshot.rs`: [`Snapshot`] and how snapshots add up.
//! `wire.rs`: the snapshot's wire form for the process models.

mod histogram;
mod queue;
mod scoreboard;
mod shard;
mod snapshot;
#[cfg(test)]
mod tests;
mod trace;
mod wire;

pub use histogram::{bucket_of, bucket_range, Hist, BUCKETS};
pub use queue::{QueueSnap, QueueStat};
pub use scoreboard::{Slot, Worker, WorkerSnap, WorkerState};
pub use shard::{OWNED_SHARDS, SHARDS};
pub use snapshot::{CacheSnap, Snapshot};
pub use trace::{TraceRow, TRACE_HEADER};
pub use wire::{MAX_WIRE_QUEUES, WIRE_NAME};

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use shard::{add, shard_claim, Shard};
use trace::Trace;

/// Where a request's time goes (paper 003's breakdown, plus queueing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Phase {
    /// Accept (or the previous response's end) → the request's first byte;
    /// over TLS, for a connection's first request, from the handshake's end.
    Wait,
    /// First byte → the head is complete.
    Read,
    /// Parsing the complete head.
    Parse,
    /// Resolve + data from memory (cache hit, embedded file).
    DataHit,
    /// Resolve + data from the disk (cache miss, error pages, listings).
    DataMiss,
    /// Starting a CGI script (`stat`, `fork`/`exec`).
    CgiSpawn,
    /// A CGI script's run, its output streamed to the client.
    CgiRun,
    /// Writing the response.
    Write,
    /// Writing the access-log line.
    Log,
    /// Waiting in a model's queue (accept queue, stage or helper queues).
    Queue,
    /// The whole request: first byte → logged.
    Total,
    /// (TLS, a connection's first request) accept → the handshake's end.
    Handshake,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 12] = [
        Phase::Wait,
        Phase::Read,
        Phase::Parse,
        Phase::DataHit,
        Phase::DataMiss,
        Phase::CgiSpawn,
        Phase::CgiRun,
        Phase::Write,
        Phase::Log,
        Phase::Queue,
        Phase::Total,
        Phase::Handshake,
    ];

    /// Its name in JSON, Prometheus labels and the trace header.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Wait => "wait",
            Phase::Read => "read",
            Phase::Parse => "parse",
            Phase::DataHit => "data_hit",
            Phase::DataMiss => "data_miss",
            Phase::CgiSpawn => "cgi_spawn",
            Phase::CgiRun => "cgi_run",
            Phase::Write => "write",
            Phase::Log => "log",
            Phase::Queue => "queue",
            Phase::Total => "total",
            Phase::Handshake => "tls_handshake",
        }
    }
}

const PHASES: usize = Phase::ALL.len();

/// `CLOCK_MONOTONIC` now, in nanoseconds: the timestamps of [`PhaseTimes`]
/// and [`TraceRow`].
pub fn now_ns() -> u64 {
    // It cannot fail for this clock (EINVAL would mean no monotonic clock).
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// One request's phase durations in nanoseconds, with which phases were
/// measured (a request has only some: a CGI run or a queue, a hit or a miss).
#[derive(Clone, Copy, Debug, Default)]
pub struct PhaseTimes {
    ns: [u64; PHASES],
    /// Bit `phase as usize` is set for each phase measured.
    measured: u16,
}

impl PhaseTimes {
    /// Sets a phase's duration.
    pub fn set(&mut self, phase: Phase, ns: u64) {
        self.ns[phase as usize] = ns;
        self.measured |= 1 << phase as usize;
    }

    /// A phase's duration, if it was measured.
    pub fn get(&self, phase: Phase) -> Option<u64> {
        (self.measured & 1 << phase as usize != 0).then(|| self.ns[phase as usize])
    }

    /// Forgets every phase (for the next request; the durations stay
    /// behind, unread).
    pub fn clear(&mut self) {
        self.measured = 0;
    }
}

/// What a connection is doing, for the `connections` gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum ConnState {
    /// Not counted (before the first `drive`, or closed).
    None,
    /// Reading a request head (or body).
    Reading,
    /// Running the request or writing its response (CGI included).
    Writing,
    /// Idle between requests.
    KeepAlive,
}

impl ConnState {
    /// The counted states.
    pub const COUNTED: [ConnState; 3] = [ConnState::Reading, ConnState::Writing, ConnState::KeepAlive];

    /// Its name in JSON and Prometheus labels.
    pub fn name(self) -> &'static str {
        match self {
            ConnState::None => "none",
            ConnState::Reading => "reading",
            ConnState::Writing => "writing",
            ConnState::KeepAlive => "keepalive",
        }
    }
}

/// Status codes counted one by one (100..=599).
const CODES: usize = 500;

/// Everything measured in one process. The pipeline holds it in an `Arc`.
pub struct Stats {
    /// Per-request timestamps are taken (off: `--no-timing`).
    pub timing: bool,
    /// Where the timestamps come from: [`now_ns`], or a test's clock
    /// ([`with_clock`](Self::with_clock)), so that a connection's phases,
    /// which lie inside one step of its state machine, are measured by a
    /// clock it is given rather than one it reads.
    clock: fn() -> u64,
    shards: Box<[Shard]>,
    epoch: Instant,
    /// `epoch` as [`now_ns`] read it: the trace's time zero.
    epoch_ns: u64,
    started: SystemTime,
    next_conn: AtomicU64,
    queues: Mutex<Vec<Arc<QueueStat>>>,
    slots: Mutex<Vec<Weak<Slot>>>,
    trace: Option<Trace>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").field("timing", &self.timing).finish_non_exhaustive()
    }
}

impl Default for Stats {
    fn default() -> Stats {
        Stats::new(true)
    }
}

impl Stats {
    /// Empty stats; `timing` turns per-phase timestamps on.
    pub fn new(timing: bool) -> Stats {
        Stats {
            timing,
            clock: now_ns,
            shards: (0..SHARDS).map(|_| Shard::new()).collect(),
            epoch: Instant::now(),
            epoch_ns: now_ns(),
            started: SystemTime::now(),
            next_conn: AtomicU64::new(0),
            queues: Mutex::new(Vec::new()),
            slots: Mutex::new(Vec::new()),
            trace: None,
        }
    }

    /// Timestamps from `clock` (a test's): the time zero is its reading now.
    #[must_use]
    pub fn with_clock(mut self, clock: fn() -> u64) -> Stats {
        self.clock = clock;
        self.epoch_ns = clock();
        self
    }

    /// A timestamp, in nanoseconds, from the stats' clock.
    #[inline]
    pub fn now(&self) -> u64 {
        (self.clock)()
    }

    /// The monotonic origin of every timestamp (the trace's time zero).
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// The `Instant` of a [`now_ns`] timestamp (both are `CLOCK_MONOTONIC`;
    /// off by the few nanoseconds between the two reads of the epoch), for
    /// deadlines from a timestamp already taken.
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(ns.saturating_sub(self.epoch_ns))
    }

    /// The [`now_ns`] timestamp of an `Instant` (the inverse of
    /// [`instant_at`](Self::instant_at)).
    pub fn ns_at(&self, t: Instant) -> u64 {
        let since = t.saturating_duration_since(self.epoch);
        self.epoch_ns + u64::try_from(since.as_nanos()).unwrap_or(u64::MAX - self.epoch_ns)
    }

    /// Time since the stats were made.
    pub fn uptime(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Wall-clock time the stats were made.
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// This thread's shard, and whether it owns it (see [`add`]).
    fn shard(&self) -> (&Shard, bool) {
        let (index, owned) = shard_claim();
        (&self.shards[index], owned)
    }

    /// Records one duration.
    pub fn record(&self, phase: Phase, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let (s, owned) = self.shard();
        s.phases[phase as usize].record(ns, owned);
    }

    /// Counts a response and its bytes on the wire (head and body).
    pub fn count_response(&self, status: u16, bytes: u64) {
        let (s, owned) = self.shard();
        Self::count_into(s, owned, status, bytes);
    }

    /// The status count is the request's publication: it is added last,
    /// with `Release`, and [`snapshot`](Self::snapshot) reads the counts
    /// first, with `Acquire`, so a request a reader counts has its bytes and
    /// the phases [`record_request`](Self::record_request) took in the same
    /// snapshot (a phase may show a request not yet counted, never the other
    /// way round). Phases recorded later on their own (`staged`'s `log`
    /// stage) may still be missing.
    fn count_into(s: &Shard, owned: bool, status: u16, bytes: u64) {
        let i = (status as usize).clamp(100, 599) - 100;
        add(&s.bytes, bytes, owned);
        let count = &s.status[i];
        if owned {
            count.store(count.load(Ordering::Relaxed) + 1, Ordering::Release);
        } else {
            count.fetch_add(1, Ordering::Release);
        }
    }

    /// [`count_response`](Self::count_response) and [`record`](Self::record)
    /// of every phase measured, for one request: the shard is looked up once.
    pub fn record_request(&self, status: u16, bytes: u64, phases: &PhaseTimes) {
        let (s, owned) = self.shard();
        // One branch on `owned` for the whole request, not one per counter.
        if owned {
            Self::record_phases::<true>(s, phases);
        } else {
            Self::record_phases::<false>(s, phases);
        }
        Self::count_into(s, owned, status, bytes);
    }

    /// Visits only the phases measured (a request has four or five of
    /// them), one set bit at a time: a loop over every phase costs what it
    /// costs only while the compiler chooses to unroll it.
    #[inline(always)]
    fn record_phases<const OWNED: bool>(s: &Shard, phases: &PhaseTimes) {
        let mut measured = phases.measured;
        while measured != 0 {
            let i = measured.trailing_zeros() as usize;
            s.phases[i].record(phases.ns[i], OWNED);
            measured &= measured - 1;
        }
    }

    /// Moves a connection between states of the `connections` gauge.
    pub fn move_conn(&self, from: ConnState, to: ConnState) {
        if from == to {
            return;
        }
        let (s, owned) = self.shard();
        // A connection may leave a state on another thread's shard than the
        // one it entered it on: a shard's gauge can go below zero, their
        // sum cannot.
        let add = |gauge: &AtomicI64, delta: i64| {
            if owned {
                gauge.store(gauge.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
            } else {
                gauge.fetch_add(delta, Ordering::Relaxed);
            }
        };
        if from != ConnState::None {
            add(&s.conns[from as usize], -1);
        }
        if to != ConnState::None {
            add(&s.conns[to as usize], 1);
        }
    }

    /// A new connection number (for the trace).
    pub fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// Numbers this process's connections from `base` on: a forked child
    /// calls it with a base of its own, so trace rows from different
    /// processes never share a connection number.
    pub fn number_conns_from(&self, base: u64) {
        self.next_conn.store(base, Ordering::Relaxed);
    }

    /// Adds the shards up.
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::empty(self.uptime());
        // Counts before phases and bytes: see `count_into`.
        for s in self.shards.iter() {
            for (i, c) in snap.status.iter_mut().enumerate() {
                *c += s.status[i].load(Ordering::Acquire);
            }
        }
        for s in self.shards.iter() {
            for (h, ph) in snap.phases.iter_mut().zip(s.phases.iter()) {
                for (c, b) in h.counts.iter_mut().zip(&ph.buckets) {
                    *c += b.load(Ordering::Relaxed);
                }
                h.sum_ns += ph.sum_ns.load(Ordering::Relaxed);
            }
            snap.bytes += s.bytes.load(Ordering::Relaxed);
            for (i, c) in snap.conns.iter_mut().enumerate() {
                *c += s.conns[i].load(Ordering::Relaxed);
            }
        }
        for q in self.queues.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            snap.queues.push(QueueSnap {
                name: q.name.to_string(),
                threads: q.threads,
                len: q.len(),
                items: q.dequeued.load(Ordering::Relaxed),
                max_wait: Duration::from_nanos(q.max_wait_ns.load(Ordering::Relaxed)),
                waits: q.waits(),
            });
        }
        for w in self.slots.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if let Some(slot) = w.upgrade() {
                if slot.state() != WorkerState::Dead {
                    snap.workers.push(WorkerSnap {
                        name: slot.name.clone(),
                        busy: slot.state() == WorkerState::Busy,
                        served: slot.served.load(Ordering::Relaxed),
                        since: Duration::from_nanos(slot.since_ns.load(Ordering::Relaxed)),
                        for_how_long: slot.for_how_long(),
                    });
                }
            }
        }
        snap
    }

    /// [`snapshot`](Self::snapshot) plus what the pipeline around the stats
    /// knows: its cache and its running CGI scripts.
    pub fn of_pipeline(p: &crate::Pipeline) -> Snapshot {
        let mut snap = p.stats.snapshot();
        snap.cache = p.cache.stats();
        snap.cgi_running = p.cgi_running() as u64;
        snap.log_lines_dropped = p.access_log.lost_lines();
        snap
    }
}
