//! The log-linear histogram layout every duration is counted in, and a
//! histogram read out of the counters.

use std::time::Duration;

/// Sub-buckets per power of two (3 significant bits).
const SUB: usize = 8;
/// Values are clamped below `2^MAX_EXP` ns (~73 minutes).
const MAX_EXP: u32 = 42;
/// Buckets per histogram.
pub const BUCKETS: usize = (MAX_EXP as usize - 3 + 1) * SUB;

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
