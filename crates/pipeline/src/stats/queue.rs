//! A model's queues: length, items through, waits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::histogram::{bucket_of, Hist, BUCKETS};
use super::Stats;

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

impl Stats {
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
