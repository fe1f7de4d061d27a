//! Writer shards: where a thread's counts go, and which thread owns which.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

use super::histogram::{bucket_of, BUCKETS};
use super::{CODES, PHASES};

/// Writer shards in all.
pub const SHARDS: usize = 16;
/// Shards a thread may own alone: more than the busy threads of the event
/// models, the processes' children and a small pool.
pub const OWNED_SHARDS: usize = 12;

/// One phase's histogram in a shard.
pub(super) struct PhaseHist {
    pub(super) sum_ns: AtomicU64,
    pub(super) buckets: [AtomicU64; BUCKETS],
}

impl PhaseHist {
    #[inline(always)]
    pub(super) fn record(&self, ns: u64, owned: bool) {
        add(&self.buckets[bucket_of(ns)], 1, owned);
        add(&self.sum_ns, ns, owned);
    }
}

/// Adds `n` to a shard's counter: its owner alone writes it, with a plain
/// load and store; sharers need the locked `fetch_add`.
#[inline]
pub(super) fn add(counter: &AtomicU64, n: u64, owned: bool) {
    if owned {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    } else {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// One writer shard.
pub(super) struct Shard {
    /// A fixed-size array, so recording a request's phases unrolls into
    /// constant offsets without bounds checks.
    pub(super) phases: Box<[PhaseHist; PHASES]>,
    pub(super) status: Box<[AtomicU64]>, // CODES
    pub(super) bytes: AtomicU64,
    pub(super) conns: [AtomicI64; 4],
}

impl Shard {
    pub(super) fn new() -> Shard {
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
}

/// Which owned shards are taken, process-wide: an index is owned in every
/// `Stats` at once, so one claim serves them all.
pub(super) static CLAIMED: [AtomicBool; OWNED_SHARDS] = [const { AtomicBool::new(false) }; OWNED_SHARDS];
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
pub(super) fn shard_claim() -> (usize, bool) {
    SHARD.try_with(|c| (c.index, c.owned)).unwrap_or((OWNED_SHARDS, false))
}
