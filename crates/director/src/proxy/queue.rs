//! The pending queue: requests waiting for a backend with room.
//!
//! `--queue-order fifo` serves them as they came. `srpt` (the default)
//! serves first the request expected to answer the fewest bytes, by what
//! its target answered last time: paper 004's shortest-remaining-first,
//! applied where the director decides. Under overload a flood of large
//! downloads then waits behind the small requests instead of in front of
//! them, and each backend slot is turned over as fast as it can be. A target
//! never answered yet counts as small; ties go in arrival order; the queue
//! timeout bounds every wait either way.

use crate::backend::LARGE;
use crate::options::QueueOrder;
use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

/// A request target as the queue knows it: a 64-bit hash of its text, so
/// an exchange carries no copy of its target (two targets that collide
/// share a remembered size: an order slightly off, nothing worse).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Target(u64);

impl Target {
    pub(super) fn of(target: &str) -> Target {
        let mut h = DefaultHasher::new();
        target.hash(&mut h);
        Target(h.finish())
    }
}

/// The request to serve next ([`PendingQueue::next`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Next {
    at: usize,
    /// Its client.
    pub token: u64,
    /// Expected to answer [`LARGE`] bytes or more.
    pub large: bool,
}

/// Targets whose last response length is remembered; past it the oldest
/// half is forgotten (they are learned again on their next response).
const SIZES_KEPT: usize = 4096;

/// The waiting requests, and what each target answered last.
#[derive(Debug)]
pub(super) struct PendingQueue {
    order: QueueOrder,
    /// (expected response bytes, client token), in arrival order.
    waiting: VecDeque<(u64, u64)>,
    /// Last response length per target, and when it was learned (a count).
    sizes: HashMap<Target, (u64, u64)>,
    learned: u64,
}

impl PendingQueue {
    pub(super) fn new(order: QueueOrder) -> PendingQueue {
        PendingQueue { order, waiting: VecDeque::new(), sizes: HashMap::new(), learned: 0 }
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The body bytes `target` answered last time; 0 if not known (`None`:
    /// nothing to expect, e.g. a HEAD, which answers no body).
    pub(super) fn expected(&self, target: Option<Target>) -> u64 {
        target.and_then(|t| self.sizes.get(&t)).map_or(0, |&(bytes, _)| bytes)
    }

    /// Queues the client `token`, whose request is [`expected`](Self::expected)
    /// to answer `expected` bytes.
    pub(super) fn push(&mut self, token: u64, expected: u64) {
        self.waiting.push_back((expected, token));
    }

    /// Takes `token` out (its client left, or its wait timed out).
    pub(super) fn remove(&mut self, token: u64) {
        self.waiting.retain(|&(_, t)| t != token);
    }

    /// The request to serve next, without taking it ([`take`](Self::take)).
    pub(super) fn next(&self) -> Option<Next> {
        let at = match self.order {
            QueueOrder::Fifo => (!self.waiting.is_empty()).then_some(0),
            // The first of the smallest: `min_by_key` keeps the first minimum.
            QueueOrder::Srpt => {
                self.waiting.iter().enumerate().min_by_key(|&(_, &(expected, _))| expected).map(|(i, _)| i)
            }
        }?;
        let (expected, token) = self.waiting[at];
        Some(Next { at, token, large: expected >= LARGE })
    }

    /// Takes the request [`next`](Self::next) named, the queue unchanged since.
    pub(super) fn take(&mut self, next: Next) {
        self.waiting.remove(next.at);
    }

    /// `target` answered a body of `bytes`.
    pub(super) fn learn(&mut self, target: Target, bytes: u64) {
        self.learned += 1;
        if let Some(entry) = self.sizes.get_mut(&target) {
            *entry = (bytes, self.learned);
            return;
        }
        if self.sizes.len() >= SIZES_KEPT {
            let mut ages: Vec<u64> = self.sizes.values().map(|&(_, at)| at).collect();
            let (_, &mut median, _) = ages.select_nth_unstable(SIZES_KEPT / 2);
            self.sizes.retain(|_, &mut (_, at)| at > median);
        }
        self.sizes.insert(target, (bytes, self.learned));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut PendingQueue) -> Vec<u64> {
        let mut served = Vec::new();
        while let Some(next) = q.next() {
            q.take(next);
            served.push(next.token);
        }
        served
    }

    fn learn(q: &mut PendingQueue, target: &str, bytes: u64) {
        q.learn(Target::of(target), bytes);
    }

    fn push(q: &mut PendingQueue, token: u64, target: Option<&str>) {
        let expected = q.expected(target.map(Target::of));
        q.push(token, expected);
    }

    #[test]
    fn fifo_serves_in_arrival_order_whatever_was_learned() {
        let mut q = PendingQueue::new(QueueOrder::Fifo);
        learn(&mut q, "/big", 10 << 20);
        push(&mut q, 1, Some("/big"));
        push(&mut q, 2, Some("/small"));
        push(&mut q, 3, Some("/big"));
        assert_eq!(q.next().map(|n| n.token), Some(1));
        assert_eq!(drain(&mut q), [1, 2, 3]);
    }

    #[test]
    fn srpt_serves_the_smallest_expected_answer_first_ties_in_arrival_order() {
        let mut q = PendingQueue::new(QueueOrder::Srpt);
        learn(&mut q, "/big", 10 << 20);
        learn(&mut q, "/mid", 50_000);
        learn(&mut q, "/small", 500);
        for (token, target) in
            [(1, "/big"), (2, "/mid"), (3, "/big"), (4, "/small"), (5, "/new"), (6, "/small")]
        {
            push(&mut q, token, Some(target));
        }
        push(&mut q, 7, None);
        // Never answered and HEAD count as nothing to send.
        assert_eq!(q.next().map(|n| n.token), Some(5));
        assert_eq!(drain(&mut q), [5, 7, 4, 6, 2, 1, 3]);
    }

    #[test]
    fn what_was_learned_last_counts() {
        let mut q = PendingQueue::new(QueueOrder::Srpt);
        learn(&mut q, "/page", 500);
        learn(&mut q, "/other", 1_000);
        learn(&mut q, "/page", 2_000);
        push(&mut q, 1, Some("/page"));
        push(&mut q, 2, Some("/other"));
        assert_eq!(drain(&mut q), [2, 1]);
    }

    #[test]
    fn a_request_taken_out_is_not_served() {
        let mut q = PendingQueue::new(QueueOrder::Srpt);
        for token in 1..=3 {
            push(&mut q, token, Some("/x"));
        }
        q.remove(2);
        assert_eq!(q.len(), 2);
        assert_eq!(drain(&mut q), [1, 3]);
        assert!(q.next().is_none());
    }

    #[test]
    fn the_sizes_kept_are_bounded_and_the_recent_ones_stay() {
        let mut q = PendingQueue::new(QueueOrder::Srpt);
        for i in 0..SIZES_KEPT as u64 * 3 {
            learn(&mut q, &format!("/f{i}"), i);
        }
        assert!(q.sizes.len() <= SIZES_KEPT, "{}", q.sizes.len());
        let last = SIZES_KEPT as u64 * 3 - 1;
        assert_eq!(q.sizes.get(&Target::of(&format!("/f{last}"))), Some(&(last, last + 1)));
        assert!(!q.sizes.contains_key(&Target::of("/f0")), "the oldest are forgotten");
    }
}
