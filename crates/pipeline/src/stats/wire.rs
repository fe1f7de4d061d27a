//! A snapshot's fixed-layout wire form: how a process model's children
//! publish their numbers for the admin listener to add up.

use std::time::Duration;

use super::histogram::{Hist, BUCKETS};
use super::queue::QueueSnap;
use super::scoreboard::WorkerSnap;
use super::snapshot::{CacheSnap, Snapshot};
use super::{CODES, PHASES};

impl Snapshot {
    /// Bytes [`encode`](Self::encode) writes at most, with up to
    /// `workers` scoreboard lines and [`MAX_WIRE_QUEUES`] queues.
    pub fn wire_len(workers: usize) -> usize {
        let hist = (BUCKETS + 1) * 8;
        8 + PHASES * hist
            + CODES * 8
            + 8
            + 4 * 8
            + 7 * 8
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
        let cache = self.cache;
        for v in [cache.hits, cache.misses, cache.bytes, cache.memory, cache.open_files] {
            put(out, v);
        }
        for v in [self.cgi_running, self.log_lines_dropped] {
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
    /// [`Stats::uptime`](super::Stats::uptime): the same epoch in every process of a server).
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
        snap.cache = CacheSnap {
            hits: r.u64()?,
            misses: r.u64()?,
            bytes: r.u64()?,
            memory: r.u64()?,
            open_files: r.u64()?,
        };
        snap.cgi_running = r.u64()?;
        snap.log_lines_dropped = r.u64()?;
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
