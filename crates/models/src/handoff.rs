//! The queue between an accepting thread and the threads that serve
//! connections (`pool`, `worker`).
//!
//! Why not a channel crate: crossbeam's receivers spin and then
//! `sched_yield` several times before they sleep, which pays off when a
//! sender is about to run on another core. Here the waiting side is a pool
//! of mostly idle threads on a saturated core: every thread going back to
//! the queue yielded about four times, 5.9 `sched_yield` calls per request
//! for `pool` with `Connection: close` (strace, BENCHMARKS.md). A mutex and
//! a condition variable put a waiter straight to sleep on a futex and wake
//! exactly one when work arrives.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// A bounded FIFO: `push` waits while it is full, `pop` while it is empty.
/// After [`close`](Self::close) nothing more gets in; what is queued is
/// still handed out, then `pop` answers `None`.
pub(crate) struct Handoff<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
}

struct State<T> {
    items: VecDeque<T>,
    capacity: usize,
    closed: bool,
    /// Threads asleep in `pop` and in `push`: a notification costs a futex
    /// system call even when nobody waits, and a busy queue mostly has
    /// nobody waiting on one side or the other.
    popping: usize,
    pushing: usize,
}

impl<T> Handoff<T> {
    /// A queue holding at most `capacity` items (at least one).
    pub(crate) fn new(capacity: usize) -> Handoff<T> {
        let capacity = capacity.max(1);
        Handoff {
            state: Mutex::new(State {
                items: VecDeque::with_capacity(capacity),
                capacity,
                closed: false,
                popping: 0,
                pushing: 0,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
        }
    }

    /// Queues `item`, waiting for room; gives it back if the queue is closed.
    pub(crate) fn push(&self, item: T) -> Result<(), T> {
        let mut state = self.lock();
        while !state.closed && state.items.len() >= state.capacity {
            state.pushing += 1;
            state = self.not_full.wait(state).unwrap_or_else(|e| e.into_inner());
            state.pushing -= 1;
        }
        if state.closed {
            return Err(item);
        }
        state.items.push_back(item);
        let wake = state.popping > 0;
        drop(state);
        if wake {
            self.not_empty.notify_one();
        }
        Ok(())
    }

    /// The oldest item, waiting for one; `None` once closed and empty.
    pub(crate) fn pop(&self) -> Option<T> {
        let mut state = self.lock();
        while !state.closed && state.items.is_empty() {
            state.popping += 1;
            state = self.not_empty.wait(state).unwrap_or_else(|e| e.into_inner());
            state.popping -= 1;
        }
        let item = state.items.pop_front();
        let wake = item.is_some() && state.pushing > 0;
        drop(state);
        if wake {
            self.not_full.notify_one();
        }
        item
    }

    /// [`pop`](Self::pop), waiting at most `wait`: `Err(())` if nothing
    /// came meanwhile (the queue is still open).
    pub(crate) fn pop_within(&self, wait: std::time::Duration) -> Result<Option<T>, ()> {
        let mut state = self.lock();
        if !state.closed && state.items.is_empty() {
            state.popping += 1;
            state = self
                .not_empty
                .wait_timeout_while(state, wait, |s| !s.closed && s.items.is_empty())
                .unwrap_or_else(|e| e.into_inner())
                .0;
            state.popping -= 1;
            if !state.closed && state.items.is_empty() {
                return Err(());
            }
        }
        let item = state.items.pop_front();
        let wake = item.is_some() && state.pushing > 0;
        drop(state);
        if wake {
            self.not_full.notify_one();
        }
        Ok(item)
    }

    /// Refuses further items and wakes every waiter.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panicking holder cannot leave the deque inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread;

    #[test]
    fn first_in_first_out_then_none_after_close() {
        let q = Handoff::new(4);
        for i in 0..4 {
            q.push(i).unwrap();
        }
        q.close();
        assert_eq!(q.push(9), Err(9));
        assert_eq!((0..5).map(|_| q.pop()).collect::<Vec<_>>(), [Some(0), Some(1), Some(2), Some(3), None]);
    }

    #[test]
    fn a_full_queue_holds_the_pusher_until_a_pop() {
        let q = Handoff::new(1);
        q.push(1).unwrap();
        let pushed = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| {
                q.push(2).unwrap();
                pushed.store(true, Ordering::SeqCst);
            });
            // The pusher cannot finish before this pop makes room, however
            // the threads are scheduled.
            assert!(!pushed.load(Ordering::SeqCst));
            assert_eq!(q.pop(), Some(1));
        });
        assert!(pushed.load(Ordering::SeqCst));
        assert_eq!(q.pop(), Some(2));
    }

    #[test]
    fn pop_within_times_out_then_takes_then_ends() {
        let q = Handoff::new(2);
        assert_eq!(q.pop_within(std::time::Duration::from_millis(1)), Err(()));
        q.push(7).unwrap();
        assert_eq!(q.pop_within(std::time::Duration::from_millis(1)), Ok(Some(7)));
        q.close();
        assert_eq!(q.pop_within(std::time::Duration::from_millis(1)), Ok(None));
    }

    #[test]
    fn close_wakes_every_waiting_consumer() {
        let q = Handoff::<u32>::new(2);
        thread::scope(|s| {
            let waiters: Vec<_> = (0..3).map(|_| s.spawn(|| q.pop())).collect();
            q.close();
            for w in waiters {
                assert_eq!(w.join().unwrap(), None);
            }
        });
    }

    #[test]
    fn every_item_reaches_exactly_one_consumer() {
        let q = Handoff::new(8);
        let total: u64 = thread::scope(|s| {
            let consumers: Vec<_> =
                (0..4).map(|_| s.spawn(|| std::iter::from_fn(|| q.pop()).sum::<u64>())).collect();
            for i in 1..=10_000u64 {
                q.push(i).unwrap();
            }
            q.close();
            consumers.into_iter().map(|c| c.join().unwrap()).sum()
        });
        assert_eq!(total, 10_000 * 10_001 / 2);
    }
}
