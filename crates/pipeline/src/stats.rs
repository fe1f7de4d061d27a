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
//! with a plain load and store. An uncontended `lock xadd` costs about
//! 5 ns here (2026-11-24, `fetch_add` in a loop: 5.5 ns against 0.3 ns for
//! load + store), and a timed request makes some 20 of them — a tenth of
//! `event`'s whole user time per request. Threads beyond those (a
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

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

/// Writer shards in all.
pub const SHARDS: usize = 16;
/// Shards a thread may own alone: more than the busy threads of the event
/// models, the processes' children and a small pool.
pub const OWNED_SHARDS: usize = 12;

/// Sub-buckets per power of two (3 significant bits).
const SUB: usize = 8;
/// Values are clamped below `2^MAX_EXP` ns (~73 minutes).
const MAX_EXP: u32 = 42;
/// Buckets per histogram.
pub const BUCKETS: usize = (MAX_EXP as usize - 3 + 1) * SUB;

/// Where a request's time goes (paper 003's breakdown, plus queueing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Phase {
    /// Accept (or the previous response's end) → the request's first byte.
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
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 11] = [
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

/// Bucket of a value in nanoseconds.
pub fn bucket_of(ns: u64) -> usize {
    let v = ns.min((1u64 << MAX_EXP) - 1);
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // ≥ 3
    ((e - 3 + 1) as usize) * SUB + ((v >> (e - 3)) as usize & (SUB - 1))
}

/// The bucket's range `[low, high)` in nanoseconds.
pub fn bucket_range(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, i as u64 + 1);
    }
    let e = (i / SUB - 1 + 3) as u32;
    let width = 1u64 << (e - 3);
    let low = (SUB as u64 + (i % SUB) as u64) << (e - 3);
    (low, low + width)
}

/// Status codes counted one by one (100..=599).
const CODES: usize = 500;

/// One phase's histogram in a shard.
struct PhaseHist {
    sum_ns: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl PhaseHist {
    #[inline(always)]
    fn record(&self, ns: u64, owned: bool) {
        add(&self.buckets[bucket_of(ns)], 1, owned);
        add(&self.sum_ns, ns, owned);
    }
}

/// Adds `n` to a shard's counter: its owner alone writes it, with a plain
/// load and store; sharers need the locked `fetch_add`.
#[inline]
fn add(counter: &AtomicU64, n: u64, owned: bool) {
    if owned {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    } else {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// One writer shard.
struct Shard {
    /// A fixed-size array, so recording a request's phases unrolls into
    /// constant offsets without bounds checks.
    phases: Box<[PhaseHist; PHASES]>,
    status: Box<[AtomicU64]>, // CODES
    bytes: AtomicU64,
    conns: [AtomicI64; 4],
}

impl Shard {
    fn new() -> Shard {
        Shard {
            // Collected into the heap one phase at a time: the whole array
            // built first (28 KiB) would be copied into the box.
            phases: (0..PHASES)
                .map(|_| PhaseHist {
                    sum_ns: AtomicU64::new(0),
                    buckets: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect::<Box<[_]>>()
                .try_into()
                .unwrap_or_else(|_| unreachable!("PHASES histograms")),
            status: (0..CODES).map(|_| AtomicU64::new(0)).collect(),
            bytes: AtomicU64::new(0),
            conns: Default::default(),
        }
    }
}

thread_local! {
    static SHARD: ShardClaim = ShardClaim::new();
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// Which owned shards are taken, process-wide: an index is owned in every
/// `Stats` at once, so one claim serves them all.
static CLAIMED: [AtomicBool; OWNED_SHARDS] = [const { AtomicBool::new(false) }; OWNED_SHARDS];
static NEXT_SHARED: AtomicUsize = AtomicUsize::new(0);

/// A thread's shard: owned (given back when the thread exits) or shared.
struct ShardClaim {
    index: usize,
    owned: bool,
}

impl ShardClaim {
    fn new() -> ShardClaim {
        // Acquire: the previous owner's last counts, released when it gave
        // the index back, are what this thread's first loads build on.
        match CLAIMED
            .iter()
            .position(|c| c.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok())
        {
            Some(index) => ShardClaim { index, owned: true },
            None => {
                let shared = NEXT_SHARED.fetch_add(1, Ordering::Relaxed) % (SHARDS - OWNED_SHARDS);
                ShardClaim { index: OWNED_SHARDS + shared, owned: false }
            }
        }
    }
}

impl Drop for ShardClaim {
    fn drop(&mut self) {
        if self.owned {
            CLAIMED[self.index].store(false, Ordering::Release);
        }
    }
}

/// This thread's shard index and whether it owns it. During thread exit,
/// after its claim is given back, a thread writes like a sharer.
fn shard_claim() -> (usize, bool) {
    SHARD.try_with(|c| (c.index, c.owned)).unwrap_or((OWNED_SHARDS, false))
}

/// A model's queue: length, items through, waits (staged's stages, pool's
/// accept queue, amped's helper queue).
#[derive(Debug)]
pub struct QueueStat {
    /// Its name (`accept`, `read`, `data`...).
    pub name: &'static str,
    /// Threads taking from it.
    pub threads: usize,
    /// Items ever put in.
    pub enqueued: AtomicU64,
    /// Items ever taken out.
    pub dequeued: AtomicU64,
    /// Total time items waited, in nanoseconds.
    pub wait_ns: AtomicU64,
    /// The longest single wait, in nanoseconds.
    pub max_wait_ns: AtomicU64,
    /// Waits by bucket (see [`bucket_range`]), for percentiles.
    waits: Box<[AtomicU64]>,
}

impl QueueStat {
    /// Items in the queue now.
    pub fn len(&self) -> u64 {
        self.enqueued.load(Ordering::Relaxed).saturating_sub(self.dequeued.load(Ordering::Relaxed))
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mean wait so far.
    pub fn mean_wait(&self) -> Duration {
        let n = self.dequeued.load(Ordering::Relaxed).max(1);
        Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed) / n)
    }

    /// Counts an item put in.
    pub fn push(&self) {
        self.enqueued.fetch_add(1, Ordering::Relaxed);
    }

    /// Undoes [`push`](Self::push) for an item that did not go in.
    pub fn unpush(&self) {
        self.enqueued.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts an item taken out after waiting `waited`.
    pub fn pop(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.dequeued.fetch_add(1, Ordering::Relaxed);
        self.wait_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_wait_ns.fetch_max(ns, Ordering::Relaxed);
        self.waits[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// The waits so far, as a histogram.
    pub fn waits(&self) -> Hist {
        Hist {
            counts: self.waits.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            sum_ns: self.wait_ns.load(Ordering::Relaxed),
        }
    }
}

/// What a worker is doing, mod_status style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    /// Waiting for work.
    Idle = 0,
    /// Serving a connection or a request.
    Busy = 1,
    /// Gone.
    Dead = 2,
}

/// One worker's line on the scoreboard.
#[derive(Debug)]
pub struct Slot {
    /// Thread (or loop) name.
    pub name: String,
    state: AtomicU8,
    /// Connections or requests taken.
    pub served: AtomicU64,
    /// When the state last changed, ns since the stats' start.
    since_ns: AtomicU64,
    epoch: Instant,
}

impl Slot {
    /// Sets the state (one store and a clock read).
    pub fn set(&self, state: WorkerState) {
        self.set_at(state, Instant::now());
    }

    /// Sets the state as of `now`, a clock reading the caller already has.
    pub fn set_at(&self, state: WorkerState, now: Instant) {
        if state == WorkerState::Busy {
            self.served.fetch_add(1, Ordering::Relaxed);
        }
        self.state.store(state as u8, Ordering::Relaxed);
        let since = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.since_ns.store(since, Ordering::Relaxed);
    }

    /// The state now.
    pub fn state(&self) -> WorkerState {
        match self.state.load(Ordering::Relaxed) {
            0 => WorkerState::Idle,
            1 => WorkerState::Busy,
            _ => WorkerState::Dead,
        }
    }

    /// How long it has been in that state.
    pub fn for_how_long(&self) -> Duration {
        let now = self.epoch.elapsed().as_nanos() as u64;
        Duration::from_nanos(now.saturating_sub(self.since_ns.load(Ordering::Relaxed)))
    }
}

/// A registered worker; its slot leaves the scoreboard when this is dropped.
#[derive(Debug)]
pub struct Worker(Arc<Slot>);

impl Worker {
    /// Marks the worker busy.
    pub fn busy(&self) {
        self.0.set(WorkerState::Busy);
    }

    /// Marks the worker idle.
    pub fn idle(&self) {
        self.0.set(WorkerState::Idle);
    }

    /// [`busy`](Self::busy) as of `now`, a reading the caller already has
    /// (an event loop's, once per wakeup).
    pub fn busy_at(&self, now: Instant) {
        self.0.set_at(WorkerState::Busy, now);
    }

    /// [`idle`](Self::idle) as of `now`.
    pub fn idle_at(&self, now: Instant) {
        self.0.set_at(WorkerState::Idle, now);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.set(WorkerState::Dead);
    }
}

/// A sampled request trace (`--trace FILE.csv`).
#[derive(Debug)]
struct Trace {
    file: File,
    buf: Mutex<Vec<u8>>,
    /// Sample when a 64-bit random number is below this.
    threshold: u64,
}

/// The header row of the trace CSV.
pub const TRACE_HEADER: &str = "conn,arrival_us,service_start_us,service_end_us,wait_us,read_us,parse_us,\
data_us,data,cgi_us,write_us,log_us,queue_us,status,bytes,path,worker\n";

/// Everything measured in one process. The pipeline holds it in an `Arc`.
pub struct Stats {
    /// Per-request timestamps are taken (off: `--no-timing`).
    pub timing: bool,
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

    /// Writes a sampled trace of requests to `path` (truncated, with a
    /// header row); `sample` is the fraction of requests traced (0..=1).
    pub fn with_trace(mut self, path: &Path, sample: f64) -> io::Result<Stats> {
        let mut file = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        file.write_all(TRACE_HEADER.as_bytes())?;
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        let sample = sample.clamp(0.0, 1.0);
        let threshold = if sample >= 1.0 { u64::MAX } else { (sample * u64::MAX as f64) as u64 };
        self.trace = Some(Trace { file, buf: Mutex::new(Vec::with_capacity(64 << 10)), threshold });
        Ok(self)
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

    #[inline(always)]
    fn record_phases<const OWNED: bool>(s: &Shard, phases: &PhaseTimes) {
        for (i, (hist, ns)) in s.phases.iter().zip(phases.ns).enumerate() {
            if phases.measured & 1 << i != 0 {
                hist.record(ns, OWNED);
            }
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

    /// Registers a queue for the status page.
    pub fn queue(&self, name: &'static str, threads: usize) -> Arc<QueueStat> {
        let q = Arc::new(QueueStat {
            name,
            threads,
            enqueued: AtomicU64::new(0),
            dequeued: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            max_wait_ns: AtomicU64::new(0),
            waits: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        });
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.retain(|old| old.name != name);
        queues.push(q.clone());
        q
    }

    /// Registers a worker on the scoreboard, idle.
    pub fn worker(&self, name: String) -> Worker {
        let slot = Arc::new(Slot {
            name,
            state: AtomicU8::new(WorkerState::Idle as u8),
            served: AtomicU64::new(0),
            since_ns: AtomicU64::new(self.epoch.elapsed().as_nanos() as u64),
            epoch: self.epoch,
        });
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        slots.push(Arc::downgrade(&slot));
        Worker(slot)
    }

    /// Whether this request should be traced (a cheap thread-local draw).
    pub fn sample(&self) -> bool {
        let Some(trace) = &self.trace else { return false };
        if trace.threshold == u64::MAX {
            return true;
        }
        RNG.with(|r| {
            let mut x = r.get();
            if x == 0 {
                // Seed from the thread's stack address and the clock.
                x = ((&x as *const u64 as u64) ^ self.epoch.elapsed().as_nanos() as u64) | 1;
            }
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            r.set(x);
            x.wrapping_mul(0x2545_f491_4f6c_dd1d) < trace.threshold
        })
    }

    /// Appends a trace row (see [`TRACE_HEADER`]); written in whole rows.
    pub fn trace_row(&self, row: &TraceRow<'_>) {
        let Some(trace) = &self.trace else { return };
        let us = |t: u64| t.saturating_sub(self.epoch_ns) / 1000;
        let d = |p: Phase| row.phases.get(p).map_or(String::new(), |ns| format!("{:.1}", ns as f64 / 1e3));
        let mut path = String::with_capacity(row.path.len() + 2);
        path.push('"');
        for c in row.path.chars() {
            if c == '"' {
                path.push('"');
            }
            if !c.is_control() {
                path.push(c);
            }
        }
        path.push('"');
        let thread = std::thread::current();
        let line = format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}/{}\n",
            row.conn,
            us(row.arrival),
            us(row.service_start),
            us(row.service_end),
            d(Phase::Wait),
            d(Phase::Read),
            d(Phase::Parse),
            [Phase::DataHit, Phase::DataMiss, Phase::CgiSpawn]
                .into_iter()
                .find(|p| row.phases.get(*p).is_some())
                .map_or(String::new(), d),
            row.data,
            d(Phase::CgiRun),
            d(Phase::Write),
            d(Phase::Log),
            d(Phase::Queue),
            row.status,
            row.bytes,
            path,
            std::process::id(),
            thread.name().unwrap_or("main"),
        );
        let mut buf = trace.buf.lock().unwrap_or_else(|e| e.into_inner());
        buf.extend_from_slice(line.as_bytes());
        if buf.len() >= 32 << 10 {
            Self::flush_buf(&trace.file, &mut buf);
        }
    }

    fn flush_buf(mut file: &File, buf: &mut Vec<u8>) {
        // One write of whole rows to an O_APPEND file: rows from several
        // processes do not interleave.
        let _ = file.write_all(buf);
        buf.clear();
    }

    /// Writes buffered trace rows out (the log flusher calls it).
    pub fn flush(&self) {
        if let Some(trace) = &self.trace {
            let mut buf = trace.buf.lock().unwrap_or_else(|e| e.into_inner());
            if !buf.is_empty() {
                Self::flush_buf(&trace.file, &mut buf);
            }
        }
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
        let (hits, misses, bytes) = p.cache.stats();
        snap.cache = CacheSnap { hits, misses, bytes };
        snap.cgi_running = p.cgi_running() as u64;
        snap
    }
}

/// One trace row's data.
#[derive(Debug)]
pub struct TraceRow<'a> {
    /// Connection number (unique in the server: each child of a process
    /// model numbers from its own base, see [`Stats::number_conns_from`]).
    pub conn: u64,
    /// The request's first byte ([`now_ns`]).
    pub arrival: u64,
    /// The pipeline started on it ([`now_ns`]).
    pub service_start: u64,
    /// The response was out and logged ([`now_ns`]).
    pub service_end: u64,
    /// Durations by [`Phase`], where measured.
    pub phases: &'a PhaseTimes,
    /// `hit`, `miss`, `cgi` or empty.
    pub data: &'a str,
    /// Response status.
    pub status: u16,
    /// Bytes on the wire.
    pub bytes: u64,
    /// The request path.
    pub path: &'a str,
}

/// A histogram read out of the shards.
#[derive(Clone, Debug)]
pub struct Hist {
    /// Count per bucket (see [`bucket_range`]).
    pub counts: Vec<u64>,
    /// Sum of the values, in nanoseconds.
    pub sum_ns: u64,
}

impl Hist {
    /// No values.
    pub fn empty() -> Hist {
        Hist { counts: vec![0; BUCKETS], sum_ns: 0 }
    }

    /// Adds another histogram's values to this one.
    pub fn add(&mut self, other: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The mean.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(self.sum_ns.checked_div(self.count()).unwrap_or(0))
    }

    /// The `q` quantile (0..=1): the midpoint of the bucket it falls in
    /// (within 6.25% of the true value).
    pub fn quantile(&self, q: f64) -> Duration {
        let n = self.count();
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bucket_range(i);
                return Duration::from_nanos(lo + (hi - lo) / 2);
            }
        }
        Duration::ZERO
    }

    /// Values below `ns` (exact when `ns` is a bucket boundary, e.g. a power of two).
    pub fn count_below(&self, ns: u64) -> u64 {
        self.counts.iter().enumerate().filter(|(i, _)| bucket_range(*i).1 <= ns).map(|(_, c)| c).sum()
    }
}

/// A queue's numbers.
#[derive(Clone, Debug)]
pub struct QueueSnap {
    /// Its name.
    pub name: String,
    /// Threads taking from it.
    pub threads: usize,
    /// Items in it now.
    pub len: u64,
    /// Items taken so far.
    pub items: u64,
    /// Longest wait.
    pub max_wait: Duration,
    /// The waits of the items taken (sum included).
    pub waits: Hist,
}

impl QueueSnap {
    /// Mean wait.
    pub fn mean_wait(&self) -> Duration {
        self.waits.mean()
    }
}

/// A worker's line.
#[derive(Clone, Debug)]
pub struct WorkerSnap {
    /// Thread or loop name (`pid/name` in the process models).
    pub name: String,
    /// Busy (else idle).
    pub busy: bool,
    /// Connections or requests taken.
    pub served: u64,
    /// When it entered the current state, since the stats' epoch.
    pub since: Duration,
    /// Time in the current state.
    pub for_how_long: Duration,
}

/// The file cache's numbers (per process; added up over the children).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheSnap {
    /// Lookups served from memory.
    pub hits: u64,
    /// Lookups that went to the disk.
    pub misses: u64,
    /// Bytes of files held.
    pub bytes: u64,
}

/// Everything, added up, at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Time since start.
    pub uptime: Duration,
    /// By [`Phase`] (index = `phase as usize`).
    pub phases: Vec<Hist>,
    /// Responses by status code (index = code − 100).
    pub status: Vec<u64>,
    /// Bytes sent.
    pub bytes: u64,
    /// Connections by [`ConnState`] (index = `state as usize`).
    pub conns: [i64; 4],
    /// Queues.
    pub queues: Vec<QueueSnap>,
    /// The scoreboard.
    pub workers: Vec<WorkerSnap>,
    /// The file cache (zero unless taken with [`Stats::of_pipeline`]).
    pub cache: CacheSnap,
    /// CGI scripts running (as for `cache`).
    pub cgi_running: u64,
}

impl Snapshot {
    /// A phase's histogram.
    pub fn phase(&self, p: Phase) -> &Hist {
        &self.phases[p as usize]
    }

    /// Responses so far.
    pub fn requests(&self) -> u64 {
        self.status.iter().sum()
    }

    /// `(code, count)` for every code seen.
    pub fn by_status(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.status.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| (i as u16 + 100, *c))
    }

    /// Connections in a state.
    pub fn conns(&self, s: ConnState) -> i64 {
        self.conns[s as usize].max(0)
    }

    /// Open connections.
    pub fn conns_open(&self) -> i64 {
        ConnState::COUNTED.iter().map(|s| self.conns(*s)).sum()
    }

    /// An empty snapshot taken at `uptime` (what a server with no
    /// children shows).
    pub fn empty(uptime: Duration) -> Snapshot {
        Snapshot {
            uptime,
            phases: (0..PHASES).map(|_| Hist::empty()).collect(),
            status: vec![0; CODES],
            bytes: 0,
            conns: [0; 4],
            queues: Vec::new(),
            workers: Vec::new(),
            cache: CacheSnap::default(),
            cgi_running: 0,
        }
    }

    /// Adds another process's numbers to these: counters, histograms and
    /// gauges add up, queues of the same name merge, scoreboards append.
    /// The uptime stays this one's.
    pub fn merge(&mut self, other: &Snapshot) {
        for (a, b) in self.phases.iter_mut().zip(&other.phases) {
            a.add(b);
        }
        for (a, b) in self.status.iter_mut().zip(&other.status) {
            *a += b;
        }
        self.bytes += other.bytes;
        for (a, b) in self.conns.iter_mut().zip(&other.conns) {
            *a += b;
        }
        for q in &other.queues {
            match self.queues.iter_mut().find(|mine| mine.name == q.name) {
                Some(mine) => {
                    mine.threads += q.threads;
                    mine.len += q.len;
                    mine.items += q.items;
                    mine.max_wait = mine.max_wait.max(q.max_wait);
                    mine.waits.add(&q.waits);
                }
                None => self.queues.push(q.clone()),
            }
        }
        self.workers.extend(other.workers.iter().cloned());
        self.cache.hits += other.cache.hits;
        self.cache.misses += other.cache.misses;
        self.cache.bytes += other.cache.bytes;
        self.cgi_running += other.cgi_running;
    }

    /// Bytes [`encode`](Self::encode) writes at most, with up to
    /// `workers` scoreboard lines and [`MAX_WIRE_QUEUES`] queues.
    pub fn wire_len(workers: usize) -> usize {
        let hist = (BUCKETS + 1) * 8;
        8 + PHASES * hist
            + CODES * 8
            + 8
            + 4 * 8
            + 4 * 8
            + 4
            + MAX_WIRE_QUEUES * (WIRE_NAME + 4 * 8 + hist)
            + 4
            + workers * (WIRE_NAME + 1 + 3 * 8)
    }

    /// The fixed-layout wire form (little-endian), at most
    /// [`wire_len(workers)`](Self::wire_len) bytes: the first `workers`
    /// scoreboard lines and [`MAX_WIRE_QUEUES`] queues are kept, names are
    /// cut to [`WIRE_NAME`] bytes.
    pub fn encode(&self, workers: usize, out: &mut Vec<u8>) {
        let put = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
        let name = |out: &mut Vec<u8>, s: &str| {
            let mut b = [0u8; WIRE_NAME];
            let mut n = s.len().min(WIRE_NAME);
            while !s.is_char_boundary(n) {
                n -= 1;
            }
            b[..n].copy_from_slice(&s.as_bytes()[..n]);
            out.extend_from_slice(&b);
        };
        let hist = |out: &mut Vec<u8>, h: &Hist| {
            put(out, h.sum_ns);
            for c in &h.counts {
                put(out, *c);
            }
        };
        out.clear();
        put(out, u64::try_from(self.uptime.as_nanos()).unwrap_or(u64::MAX));
        for h in &self.phases {
            hist(out, h);
        }
        for c in &self.status {
            put(out, *c);
        }
        put(out, self.bytes);
        for c in self.conns {
            put(out, c as u64);
        }
        for v in [self.cache.hits, self.cache.misses, self.cache.bytes, self.cgi_running] {
            put(out, v);
        }
        let queues = &self.queues[..self.queues.len().min(MAX_WIRE_QUEUES)];
        out.extend_from_slice(&(queues.len() as u32).to_le_bytes());
        for q in queues {
            name(out, &q.name);
            put(out, q.threads as u64);
            put(out, q.len);
            put(out, q.items);
            put(out, u64::try_from(q.max_wait.as_nanos()).unwrap_or(u64::MAX));
            hist(out, &q.waits);
        }
        let lines = &self.workers[..self.workers.len().min(workers)];
        out.extend_from_slice(&(lines.len() as u32).to_le_bytes());
        for w in lines {
            name(out, &w.name);
            out.push(w.busy.into());
            put(out, w.served);
            put(out, u64::try_from(w.since.as_nanos()).unwrap_or(u64::MAX));
            put(out, u64::try_from(w.for_how_long.as_nanos()).unwrap_or(u64::MAX));
        }
    }

    /// Reads what [`encode`](Self::encode) wrote; `None` if `b` is short.
    /// Scoreboard lines get `for_how_long` from `now` (the reader's
    /// [`Stats::uptime`]: the same epoch in every process of a server).
    pub fn decode(b: &[u8], now: Duration) -> Option<Snapshot> {
        let mut r = Reader(b);
        let uptime = Duration::from_nanos(r.u64()?);
        let mut snap = Snapshot::empty(uptime);
        for h in snap.phases.iter_mut() {
            *h = r.hist()?;
        }
        for c in snap.status.iter_mut() {
            *c = r.u64()?;
        }
        snap.bytes = r.u64()?;
        for c in snap.conns.iter_mut() {
            *c = r.u64()? as i64;
        }
        snap.cache = CacheSnap { hits: r.u64()?, misses: r.u64()?, bytes: r.u64()? };
        snap.cgi_running = r.u64()?;
        for _ in 0..r.u32()? {
            snap.queues.push(QueueSnap {
                name: r.name()?,
                threads: r.u64()? as usize,
                len: r.u64()?,
                items: r.u64()?,
                max_wait: Duration::from_nanos(r.u64()?),
                waits: r.hist()?,
            });
        }
        for _ in 0..r.u32()? {
            let name = r.name()?;
            let busy = r.take(1)?[0] != 0;
            let served = r.u64()?;
            let since = Duration::from_nanos(r.u64()?);
            let _for_how_long_when_written = r.u64()?;
            snap.workers.push(WorkerSnap {
                name,
                busy,
                served,
                since,
                for_how_long: now.saturating_sub(since),
            });
        }
        Some(snap)
    }
}

/// Queues a snapshot's wire form carries (a model has at most five).
pub const MAX_WIRE_QUEUES: usize = 8;

/// Bytes of a queue or worker name on the wire.
pub const WIRE_NAME: usize = 32;

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn name(&mut self) -> Option<String> {
        let b = self.take(WIRE_NAME)?;
        let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    }

    fn hist(&mut self) -> Option<Hist> {
        let sum_ns = self.u64()?;
        let mut counts = vec![0; BUCKETS];
        for c in counts.iter_mut() {
            *c = self.u64()?;
        }
        Some(Hist { counts, sum_ns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_narrow() {
        let mut prev_high = 0;
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_range(i);
            assert_eq!(lo, prev_high, "bucket {i}");
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(hi - 1), i);
            if lo >= 8 {
                assert!((hi - lo) * 8 <= lo, "≤ 12.5% wide");
            }
            prev_high = hi;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_and_counts() {
        let s = Stats::new(true);
        for us in 1..=100u64 {
            s.record(Phase::Write, Duration::from_micros(us));
        }
        s.count_response(200, 10);
        s.count_response(404, 5);
        s.move_conn(ConnState::None, ConnState::Reading);
        s.move_conn(ConnState::Reading, ConnState::KeepAlive);
        let snap = s.snapshot();
        let h = snap.phase(Phase::Write);
        assert_eq!(h.count(), 100);
        let p50 = h.quantile(0.5).as_nanos() as f64;
        assert!((p50 - 50_000.0).abs() / 50_000.0 < 0.07, "{p50}");
        assert!((h.mean().as_micros() as i64 - 50).abs() <= 1);
        assert_eq!(h.count_below(1 << 17), 100); // 131 µs
        assert_eq!(snap.requests(), 2);
        assert_eq!(snap.by_status().collect::<Vec<_>>(), vec![(200, 1), (404, 1)]);
        assert_eq!(snap.bytes, 15);
        assert_eq!(snap.conns(ConnState::KeepAlive), 1);
        assert_eq!(snap.conns_open(), 1);
    }

    #[test]
    fn wire_form_round_trips_and_merges() {
        let s = Stats::new(true);
        s.record(Phase::Parse, Duration::from_micros(3));
        s.count_response(200, 100);
        s.count_response(404, 7);
        s.move_conn(ConnState::None, ConnState::KeepAlive);
        let q = s.queue("handoff", 4);
        q.push();
        q.pop(Duration::from_micros(40));
        let w = s.worker("1234/worker-0".into());
        w.busy();
        let snap = s.snapshot();
        let mut wire = Vec::new();
        snap.encode(8, &mut wire);
        assert!(wire.len() <= Snapshot::wire_len(8));
        let back = Snapshot::decode(&wire, snap.uptime).expect("decodes");
        assert_eq!(back.status, snap.status);
        assert_eq!(back.phase(Phase::Parse).counts, snap.phase(Phase::Parse).counts);
        assert_eq!(back.conns(ConnState::KeepAlive), 1);
        assert_eq!(back.queues[0].name, "handoff");
        assert_eq!(back.queues[0].waits.count(), 1);
        assert_eq!(back.workers[0].name, "1234/worker-0");
        assert!(back.workers[0].busy);
        assert!(Snapshot::decode(&wire[..wire.len() - 1], snap.uptime).is_none(), "short input");

        let mut total = back.clone();
        total.merge(&back);
        assert_eq!(total.requests(), 4);
        assert_eq!(total.bytes, 214);
        assert_eq!(total.conns_open(), 2);
        assert_eq!(total.queues.len(), 1, "same name: one queue");
        assert_eq!(total.queues[0].items, 2);
        assert_eq!(total.queues[0].threads, 8);
        assert_eq!(total.workers.len(), 2);
        assert_eq!(total.phase(Phase::Parse).count(), 2);
    }

    #[test]
    fn a_request_records_only_its_measured_phases() {
        let s = Stats::new(true);
        let mut phases = PhaseTimes::default();
        phases.set(Phase::Parse, 3_000);
        phases.set(Phase::Total, 0);
        assert_eq!(phases.get(Phase::Parse), Some(3_000));
        assert_eq!(phases.get(Phase::Total), Some(0), "zero is measured, not absent");
        assert_eq!(phases.get(Phase::Queue), None);
        let mut cleared = phases;
        cleared.clear();
        assert!(Phase::ALL.iter().all(|p| cleared.get(*p).is_none()));
        s.record_request(404, 120, &phases);
        s.record_request(200, 30, &phases);
        let snap = s.snapshot();
        assert_eq!(snap.by_status().collect::<Vec<_>>(), vec![(200, 1), (404, 1)]);
        assert_eq!(snap.bytes, 150);
        assert_eq!(snap.phase(Phase::Parse).count(), 2);
        assert_eq!(snap.phase(Phase::Parse).sum_ns, 6_000);
        assert_eq!(snap.phase(Phase::Parse).counts[bucket_of(3_000)], 2);
        assert_eq!(snap.phase(Phase::Total).counts[0], 2);
        for p in Phase::ALL {
            if p != Phase::Parse && p != Phase::Total {
                assert_eq!(snap.phase(p).count(), 0, "{}", p.name());
            }
        }
    }

    /// A reader racing a writer: every request a snapshot counts has its
    /// phases and bytes in that snapshot (the admin page never shows a
    /// request without its times).
    #[test]
    fn a_counted_request_has_its_phases_in_the_same_snapshot() {
        let s = Arc::new(Stats::new(true));
        let mut phases = PhaseTimes::default();
        phases.set(Phase::CgiSpawn, 276_000);
        phases.set(Phase::Total, 1_500_000);
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..200_000 {
                    s.record_request(200, 10, &phases);
                }
            })
        };
        let mut seen = 0;
        while seen < 200_000 {
            let snap = s.snapshot();
            seen = snap.requests();
            for p in [Phase::CgiSpawn, Phase::Total] {
                assert!(snap.phase(p).count() >= seen, "{}: {} < {seen}", p.name(), snap.phase(p).count());
                assert!(snap.phase(p).sum_ns >= seen * phases.get(p).unwrap(), "{}", p.name());
            }
            assert!(snap.bytes >= seen * 10);
        }
        writer.join().unwrap();
    }

    /// The tests that hold many claims, or count them, one at a time.
    static CLAIM_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// More threads than owned shards, recording at once: owners add with
    /// load and store, sharers with `fetch_add`, and no count is lost (a
    /// sharer writing an owned shard, or two owners of one, would lose some).
    #[test]
    fn owned_and_shared_shards_lose_no_count() {
        let _alone = CLAIM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        const ROUNDS: u64 = 30_000;
        let s = Arc::new(Stats::new(true));
        let threads = 2 * SHARDS;
        let mut phases = PhaseTimes::default();
        phases.set(Phase::Parse, 1_000);
        let owners = Arc::new(AtomicUsize::new(0));
        // All alive at once, so some must share.
        let together = Arc::new(std::sync::Barrier::new(threads));
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (s, owners, together) = (s.clone(), owners.clone(), together.clone());
                std::thread::spawn(move || {
                    if shard_claim().1 {
                        owners.fetch_add(1, Ordering::Relaxed);
                    }
                    together.wait();
                    for _ in 0..ROUNDS {
                        s.record_request(200, 3, &phases);
                        s.move_conn(ConnState::None, ConnState::Reading);
                        s.move_conn(ConnState::Reading, ConnState::None);
                    }
                    together.wait();
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let snap = s.snapshot();
        assert_eq!(snap.requests(), threads as u64 * ROUNDS);
        assert_eq!(snap.phase(Phase::Parse).count(), threads as u64 * ROUNDS);
        assert_eq!(snap.phase(Phase::Parse).sum_ns, threads as u64 * ROUNDS * 1_000);
        assert_eq!(snap.bytes, threads as u64 * ROUNDS * 3);
        assert_eq!(snap.conns, [0; 4]);
        assert!(owners.load(Ordering::Relaxed) <= OWNED_SHARDS);
    }

    /// A thread gives its shard back when it exits, for the next thread.
    #[test]
    fn an_exited_thread_gives_its_shard_back() {
        let _alone = CLAIM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // Other tests' threads may hold some claims meanwhile, briefly.
        let mut given_back = 0;
        for _ in 0..2 * OWNED_SHARDS {
            let (index, owned) = std::thread::spawn(shard_claim).join().unwrap();
            if owned {
                assert!(
                    !CLAIMED[index].load(Ordering::Acquire),
                    "shard {index} still claimed after its thread exited"
                );
                given_back += 1;
            }
        }
        assert!(given_back > 0, "no thread found an owned shard free");
    }

    #[test]
    fn trace_rows_are_in_microseconds_since_the_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.csv");
        let s = Stats::new(true).with_trace(&path, 1.0).unwrap();
        let mut phases = PhaseTimes::default();
        phases.set(Phase::Wait, 1_260);
        phases.set(Phase::DataMiss, 40_000);
        let at = |ns: u64| s.epoch_ns + ns;
        s.trace_row(&TraceRow {
            conn: 7,
            arrival: at(2_999),
            service_start: at(5_000),
            service_end: at(1_000_000),
            phases: &phases,
            data: "miss",
            status: 200,
            bytes: 512,
            path: "/a\"b",
        });
        s.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let row = text.strip_prefix(TRACE_HEADER).unwrap();
        let worker = std::thread::current().name().unwrap_or("main").to_string();
        assert_eq!(
            row,
            format!("7,2,5,1000,1.3,,,40.0,miss,,,,,200,512,\"/a\"\"b\",{}/{worker}\n", std::process::id())
        );
    }

    #[test]
    fn instants_and_timestamps_convert_both_ways() {
        let s = Stats::new(true);
        let t = Instant::now() + Duration::from_millis(1500);
        assert_eq!(s.instant_at(s.ns_at(t)), t);
        let ns = now_ns() + 12_345;
        assert_eq!(s.ns_at(s.instant_at(ns)), ns);
        // Both are CLOCK_MONOTONIC: reading one then the other agrees to
        // well within a second (generous: the machine may be loaded).
        let (a, b) = (now_ns(), s.ns_at(Instant::now()));
        assert!(b.abs_diff(a) < 1_000_000_000, "{a} {b}");
    }

    #[test]
    fn queue_waits_have_percentiles() {
        let s = Stats::new(true);
        let q = s.queue("read", 2);
        for us in 1..=100u64 {
            q.push();
            q.pop(Duration::from_micros(us));
        }
        let snap = s.snapshot();
        let waits = &snap.queues[0].waits;
        assert_eq!(waits.count(), 100);
        let p99 = waits.quantile(0.99).as_nanos() as f64;
        assert!((p99 - 99_000.0).abs() / 99_000.0 < 0.07, "{p99}");
        assert!((snap.queues[0].mean_wait().as_micros() as i64 - 50).abs() <= 1);
    }

    #[test]
    fn scoreboard_forgets_dropped_workers() {
        let s = Stats::new(true);
        let a = s.worker("a".into());
        let b = s.worker("b".into());
        a.busy();
        drop(b);
        let snap = s.snapshot();
        assert_eq!(snap.workers.len(), 1);
        assert!(snap.workers[0].busy);
        assert_eq!(snap.workers[0].served, 1);
    }
}
