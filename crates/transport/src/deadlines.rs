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
//!
//! A loop keeps a [`Timer`] in each connection and finds its connections by
//! token through [`Timed`]; then [`Deadlines::set`], [`Deadlines::expired`]
//! and [`Deadlines::prune`] are the whole timer set: `event`, `uring`, the
//! gate of the blocking models, `staged`'s parking thread and the director
//! share it (the director moving a deadline during a step and arming it
//! after: [`Timer::set_unarmed`], [`Deadlines::arm_timer`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::slab::Slab;

/// One connection's place in a [`Deadlines`] set: the deadline of what it
/// waits for now (none while nothing it waits for has one) and the time
/// of its live entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timer {
    deadline: Option<Instant>,
    armed: Option<Instant>,
}

impl Timer {
    /// The deadline of the current wait, if it has one.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// No deadline until the next [`Deadlines::set`]: the entry it may have
    /// fires and is skipped, so cancelling costs no heap operation.
    pub fn cancel(&mut self) {
        self.deadline = None;
    }

    /// Moves the deadline without arming it, for a loop that may move it
    /// several times in a step and arms it once after
    /// ([`Deadlines::arm_timer`]; the director's).
    pub fn set_unarmed(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }
}

/// A connection that has a [`Timer`].
pub trait HasTimer {
    /// Its timer.
    fn timer(&mut self) -> &mut Timer;
}

/// A loop's connections by token, as the timer set looks them up.
pub trait Timed {
    /// The timer of the connection under `token`, if it is still there.
    fn timer_of(&mut self, token: u64) -> Option<&mut Timer>;
    /// How many connections there are (each has at most one live entry).
    fn count(&self) -> usize;
}

impl<T: HasTimer> Timed for Slab<T> {
    fn timer_of(&mut self, token: u64) -> Option<&mut Timer> {
        self.get_mut(token).map(HasTimer::timer)
    }

    fn count(&self) -> usize {
        self.len()
    }
}

/// Borrowed peers, as a loop's [`Turn`](crate::turn::Turn) hands them out.
impl<T: Timed + ?Sized> Timed for &mut T {
    fn timer_of(&mut self, token: u64) -> Option<&mut Timer> {
        (**self).timer_of(token)
    }

    fn count(&self) -> usize {
        (**self).count()
    }
}

/// Connections keyed by their socket's descriptor, which is their token.
impl<T: HasTimer> Timed for HashMap<RawFd, T> {
    fn timer_of(&mut self, token: u64) -> Option<&mut Timer> {
        self.get_mut(&(token as RawFd)).map(HasTimer::timer)
    }

    fn count(&self) -> usize {
        self.len()
    }
}

/// The heap. The `armed` times live with the connections (`Option<Instant>`
/// each), so a connection that closes leaves only orphans behind.
#[derive(Debug, Default)]
pub struct Deadlines {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl Deadlines {
    /// Sets (or moves) the deadline of the connection under `token`.
    pub fn set(&mut self, timer: &mut Timer, token: u64, deadline: Instant) {
        timer.deadline = Some(deadline);
        self.arm(&mut timer.armed, token, deadline);
    }

    /// The next connection whose deadline passed by `now`, earliest first;
    /// its timer is left disarmed. Entries of connections that are gone,
    /// orphans, and cancelled timers are dropped on the way; a connection
    /// whose deadline moved later is re-armed for it.
    pub fn expired(&mut self, now: Instant, conns: &mut impl Timed) -> Option<u64> {
        while let Some((when, token)) = self.pop_due(now) {
            let Some(timer) = conns.timer_of(token) else { continue };
            if !fired(&mut timer.armed, when) {
                continue;
            }
            match timer.deadline {
                None => {}
                Some(deadline) if deadline > now => self.arm(&mut timer.armed, token, deadline),
                Some(_) => return Some(token),
            }
        }
        None
    }

    /// Makes sure the timer's deadline, if it has one, wakes the loop:
    /// [`set`](Self::set) for a deadline moved with [`Timer::set_unarmed`].
    pub fn arm_timer(&mut self, timer: &mut Timer, token: u64) {
        if let Some(deadline) = timer.deadline {
            self.arm(&mut timer.armed, token, deadline);
        }
    }

    /// Drops the stale entries once they far outnumber the live ones: they
    /// pile up only where deadlines keep moving earlier or connections
    /// leave before theirs.
    pub fn prune(&mut self, conns: &mut impl Timed) {
        if self.heap.len() > 2 * conns.count() + 1024 {
            self.heap.retain(|Reverse((when, token))| {
                conns.timer_of(*token).is_some_and(|timer| timer.armed == Some(*when))
            });
        }
    }

    /// Makes sure `token` is woken by `deadline`: pushes an entry unless
    /// its live one (`armed`) fires no later.
    pub fn arm(&mut self, armed: &mut Option<Instant>, token: u64, deadline: Instant) {
        if armed.is_none_or(|armed| armed > deadline) {
            self.heap.push(Reverse((deadline, token)));
            *armed = Some(deadline);
        }
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

    #[derive(Default)]
    struct Conn(Timer);

    impl HasTimer for Conn {
        fn timer(&mut self) -> &mut Timer {
            &mut self.0
        }
    }

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    fn all_expired(d: &mut Deadlines, now: Instant, conns: &mut impl Timed) -> Vec<u64> {
        std::iter::from_fn(|| d.expired(now, conns)).collect()
    }

    #[test]
    fn connections_expire_in_deadline_order_and_only_once_due() {
        let t0 = Instant::now();
        let (mut d, mut conns) = (Deadlines::default(), Slab::<Conn>::new(0));
        let tokens: Vec<u64> = (0..3).map(|_| conns.insert(Conn::default()).unwrap()).collect();
        for (&token, s) in tokens.iter().zip([7, 3, 5]) {
            d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, s));
        }
        assert_eq!(all_expired(&mut d, secs(t0, 2), &mut conns), Vec::<u64>::new());
        assert_eq!(all_expired(&mut d, secs(t0, 5), &mut conns), vec![tokens[1], tokens[2]]);
        assert_eq!(all_expired(&mut d, secs(t0, 9), &mut conns), vec![tokens[0]]);
        assert_eq!(all_expired(&mut d, secs(t0, 99), &mut conns), Vec::<u64>::new(), "each once");
        assert_eq!(d.next_in(t0), None);
    }

    #[test]
    fn a_rescheduled_connection_expires_at_its_new_deadline_only() {
        let t0 = Instant::now();
        let (mut d, mut conns) = (Deadlines::default(), Slab::<Conn>::new(0));
        let token = conns.insert(Conn::default()).unwrap();
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 2));
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 6));
        assert_eq!(d.next_in(t0), Some(Duration::from_secs(2)), "a later deadline keeps the entry");
        assert_eq!(all_expired(&mut d, secs(t0, 3), &mut conns), Vec::<u64>::new(), "moved later: re-armed");
        assert_eq!(d.next_in(t0), Some(Duration::from_secs(6)));
        assert_eq!(all_expired(&mut d, secs(t0, 6), &mut conns), vec![token]);
        assert_eq!(conns.get(token).unwrap().0.deadline(), Some(secs(t0, 6)));
        // Earlier: a second entry, the first one an orphan when it surfaces.
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 20));
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 10));
        assert_eq!(all_expired(&mut d, secs(t0, 15), &mut conns), vec![token]);
        assert_eq!(all_expired(&mut d, secs(t0, 30), &mut conns), Vec::<u64>::new(), "the orphan is skipped");
    }

    #[test]
    fn a_cancelled_timer_never_expires_until_set_again() {
        let t0 = Instant::now();
        let (mut d, mut conns) = (Deadlines::default(), Slab::<Conn>::new(0));
        let token = conns.insert(Conn::default()).unwrap();
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 1));
        conns.get_mut(token).unwrap().0.cancel();
        assert_eq!(all_expired(&mut d, secs(t0, 5), &mut conns), Vec::<u64>::new());
        assert!(d.is_empty(), "its entry was used up");
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 8));
        assert_eq!(all_expired(&mut d, secs(t0, 8), &mut conns), vec![token]);
        // Cancelled and set again before the entry fires: it fires early and re-arms.
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 10));
        conns.get_mut(token).unwrap().0.cancel();
        d.set(&mut conns.get_mut(token).unwrap().0, token, secs(t0, 12));
        assert_eq!(all_expired(&mut d, secs(t0, 11), &mut conns), Vec::<u64>::new());
        assert_eq!(all_expired(&mut d, secs(t0, 12), &mut conns), vec![token]);
    }

    #[test]
    fn entries_of_gone_or_parked_again_connections_are_stale() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        let mut parked: HashMap<RawFd, Conn> = HashMap::new();
        let park = |d: &mut Deadlines, parked: &mut HashMap<RawFd, Conn>, fd: RawFd, s| {
            let mut conn = Conn::default();
            d.set(&mut conn.0, fd as u64, secs(t0, s));
            parked.insert(fd, conn);
        };
        park(&mut d, &mut parked, 5, 1);
        park(&mut d, &mut parked, 6, 2);
        parked.remove(&5); // handed on before its deadline
        parked.remove(&6);
        park(&mut d, &mut parked, 6, 4); // the same descriptor, parked again
        assert_eq!(all_expired(&mut d, secs(t0, 3), &mut parked), Vec::<u64>::new());
        assert_eq!(all_expired(&mut d, secs(t0, 4), &mut parked), vec![6]);
    }

    #[test]
    fn prune_drops_stale_entries_and_keeps_live_ones() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        let mut parked: HashMap<RawFd, Conn> = HashMap::new();
        for fd in 0..3000 {
            let mut conn = Conn::default();
            d.set(&mut conn.0, fd as u64, secs(t0, 100 + fd as u64));
            if fd % 1000 == 0 {
                parked.insert(fd, conn);
            }
        }
        d.prune(&mut parked);
        assert_eq!(d.len(), 3);
        assert_eq!(all_expired(&mut d, secs(t0, 9999), &mut parked), vec![0, 1000, 2000]);
        // Under the bound nothing is scanned away.
        let mut conn = Conn::default();
        d.set(&mut conn.0, 7, secs(t0, 1));
        d.prune(&mut parked);
        assert_eq!(d.len(), 1);
    }

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
        d.arm(&mut None, 9, t0);
        d.retain(|when, token| token == 9 || armed[token as usize] == Some(when));
        assert_eq!(d.len(), 3);
        let order: Vec<u64> =
            std::iter::from_fn(|| d.pop_due(t0 + Duration::from_secs(9)).map(|e| e.1)).collect();
        assert_eq!(order, vec![9, 0, 1]);
    }
}
