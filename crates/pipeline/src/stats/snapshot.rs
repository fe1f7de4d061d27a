//! Everything measured, added up at one moment (and over processes).

use std::time::Duration;

use super::histogram::Hist;
use super::queue::QueueSnap;
use super::scoreboard::WorkerSnap;
use super::{ConnState, Phase, CODES, PHASES};

/// The file cache's numbers (per process; added up over the children).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheSnap {
    /// Lookups served from memory.
    pub hits: u64,
    /// Lookups that went to the disk.
    pub misses: u64,
    /// Bytes of files held (the budget `--cache-size` bounds): in memory
    /// or behind an open descriptor.
    pub bytes: u64,
    /// Bytes held in memory: small files' contents and every compressed
    /// variant.
    pub memory: u64,
    /// Files held as open descriptors (they count against `ulimit -n`).
    pub open_files: u64,
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
    /// The file cache (zero unless taken with [`Stats::of_pipeline`](super::Stats::of_pipeline)).
    pub cache: CacheSnap,
    /// CGI scripts running (as for `cache`).
    pub cgi_running: u64,
    /// Access-log lines that could not be written (as for `cache`).
    pub log_lines_dropped: u64,
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
            log_lines_dropped: 0,
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
        self.cache.memory += other.cache.memory;
        self.cache.open_files += other.cache.open_files;
        self.cgi_running += other.cgi_running;
        self.log_lines_dropped += other.log_lines_dropped;
    }
}
