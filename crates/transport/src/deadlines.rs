//! Deadlines of an event loop's connections, as a min-heap of
//! `(when, token)` with lazy invalidation.
//!
//! A connection's deadline moves on every request, so removing and
//! re-inserting it each time would cost a heap operation per request.
//! Instead a connection keeps at most one live entry (its `armed` time): a
//! later deadline leaves the entry alone, and when it fires early the
//! connection is re-armed for its real deadline; only an *earlier*
//! deadline pushes a new entry, orphaning the old one, which is skipped
//! when it surfaces (its time no longer matches the connection's `armed`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// The heap. The `armed` times live with the connections (`Option<Instant>`
/// each), so a connection that closes leaves only orphans behind.
#[derive(Debug, Default)]
pub struct Deadlines {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl Deadlines {
    /// Makes sure `token` is woken by `deadline`: pushes an entry unless
    /// its live one (`armed`) fires no later.
    pub fn arm(&mut self, armed: &mut Option<Instant>, token: u64, deadline: Instant) {
        if armed.is_none_or(|armed| armed > deadline) {
            self.heap.push(Reverse((deadline, token)));
            *armed = Some(deadline);
        }
    }

    /// Pushes an entry that nothing re-arms (a one-shot timeout).
    pub fn once(&mut self, token: u64, deadline: Instant) {
        self.heap.push(Reverse((deadline, token)));
    }

    /// Time from `now` until the earliest entry (possibly an orphan: a spare wake-up).
    pub fn next_in(&self, now: Instant) -> Option<Duration> {
        self.heap.peek().map(|Reverse((when, _))| when.saturating_duration_since(now))
    }

    /// The earliest entry due at `now`, removed. The caller checks it
    /// against the connection's `armed` time ([`fired`]) to skip orphans.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, u64)> {
        match self.heap.peek() {
            Some(&Reverse((when, token))) if when <= now => {
                self.heap.pop();
                Some((when, token))
            }
            _ => None,
        }
    }

    /// Entries, live and orphaned.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Drops every entry `live` says is not a connection's live one; for a
    /// loop whose orphans pile up because deadlines keep moving earlier.
    pub fn retain(&mut self, mut live: impl FnMut(Instant, u64) -> bool) {
        self.heap.retain(|Reverse((when, token))| live(*when, *token));
    }
}

/// Whether a popped entry fired at `when` is the live one of a connection
/// armed at `armed`; if so the connection is disarmed (it has no entry left).
pub fn fired(armed: &mut Option<Instant>, when: Instant) -> bool {
    if *armed == Some(when) {
        *armed = None;
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_deadlines_reuse_the_entry_and_earlier_ones_orphan_it() {
        let t0 = Instant::now();
        let (mut d, mut armed) = (Deadlines::default(), None);
        d.arm(&mut armed, 1, t0 + Duration::from_secs(5));
        d.arm(&mut armed, 1, t0 + Duration::from_secs(9));
        assert_eq!(d.len(), 1, "a later deadline pushes nothing");
        d.arm(&mut armed, 1, t0 + Duration::from_secs(2));
        assert_eq!(d.len(), 2, "an earlier one does");
        assert_eq!(d.next_in(t0), Some(Duration::from_secs(2)));
        assert_eq!(d.pop_due(t0 + Duration::from_secs(1)), None, "nothing due yet");
        let (when, token) = d.pop_due(t0 + Duration::from_secs(10)).unwrap();
        assert_eq!((when, token), (t0 + Duration::from_secs(2), 1));
        assert!(fired(&mut armed, when));
        assert_eq!(armed, None);
        let (when, _) = d.pop_due(t0 + Duration::from_secs(10)).unwrap();
        assert!(!fired(&mut armed, when), "the 5 s entry is an orphan");
        assert!(d.is_empty());
    }

    #[test]
    fn retain_drops_orphans_only() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        let mut armed = [None, None];
        d.arm(&mut armed[0], 0, t0 + Duration::from_secs(3));
        d.arm(&mut armed[0], 0, t0 + Duration::from_secs(1));
        d.arm(&mut armed[1], 1, t0 + Duration::from_secs(2));
        d.once(9, t0);
        d.retain(|when, token| token == 9 || armed[token as usize] == Some(when));
        assert_eq!(d.len(), 3);
        let order: Vec<u64> =
            std::iter::from_fn(|| d.pop_due(t0 + Duration::from_secs(9)).map(|e| e.1)).collect();
        assert_eq!(order, vec![9, 0, 1]);
    }
}
