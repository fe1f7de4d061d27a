//! What a single-threaded loop's turn keeps that names no connection, the
//! same in the models' loops (`models/src/loop_core.rs`: `event`, `amped`,
//! `uring`) and the director's: how long the wait may last, the end of a
//! turn, a pause of accepting and its end, and the stop with its graceful
//! finish.
//!
//! ```text
//!   wait ≤ the nearer of the next timer and the next wake-up  ◀── wait_timeout
//!   … the loop's events …
//!   deadlines passed, earliest first ─▶ the loop's expire     ◀── Turn::end_turn
//!   stale timer entries pruned
//!   accept again once the pause is over ─▶ watch_listener     ◀── AcceptPause::resume_if_over
//!   stopped, and drained or out of grace: the loop ends       ◀── Finish::over
//! ```

use std::time::{Duration, Instant};

use crate::deadlines::{Deadlines, Timed};

/// How long a loop may wait: until its next timer or `wake_at` — the end
/// of its accept pause, or its next periodic tick (`None`: until something
/// happens). As of the turn's `now`: a turn's work makes timers fire that
/// much late.
pub fn wait_timeout(timers: &Deadlines, now: Instant, wake_at: Option<Instant>) -> Option<Duration> {
    let wake = wake_at.map(|at| at.saturating_duration_since(now));
    match (timers.next_in(now), wake) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The loop's state the end of a turn works on, borrowed for one step.
pub struct TurnParts<'a, P> {
    /// Its peers by token, as its timer set looks them up.
    pub peers: P,
    /// Its timer set.
    pub timers: &'a mut Deadlines,
    /// Its accepting's pause.
    pub accept_pause: &'a mut AcceptPause,
    /// The clock the turn's deadlines are judged by, read once.
    pub now: Instant,
}

/// A single-threaded loop, as the end of its turn sees it: peers with
/// deadlines under tokens, a listener that may be paused. Generic, so each
/// call into the loop is a direct one.
pub trait Turn {
    /// Its peers by token (a slab, or the director's kinds of peer).
    type Peers<'a>: Timed
    where
        Self: 'a;

    /// Its state the end of a turn works on.
    fn turn_parts(&mut self) -> TurnParts<'_, Self::Peers<'_>>;
    /// The deadline of the peer under `token` passed (its timer is disarmed).
    fn expire(&mut self, token: u64);
    /// Accepts exactly while the loop may: called at every turn's end, so
    /// a pause that ended or a slot that freed lets it accept again.
    fn watch_listener(&mut self);

    /// The end of every turn: peers past their deadline, earliest first,
    /// then the listener.
    fn end_turn(&mut self) {
        // Each borrow of the parts ends (the peers dropped) before the loop is called.
        while let Some(token) = {
            let TurnParts { mut peers, timers, now, .. } = self.turn_parts();
            timers.expired(now, &mut peers)
        } {
            self.expire(token);
        }
        {
            let TurnParts { mut peers, timers, accept_pause, now } = self.turn_parts();
            timers.prune(&mut peers);
            accept_pause.resume_if_over(now);
        }
        self.watch_listener();
    }
}

/// Accepting paused after an accept failed for want of descriptors or
/// memory (`accept::Failed::Pause`): the listener stays readable, and a
/// loop that kept watching it would spin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcceptPause {
    until: Option<Instant>,
}

impl AcceptPause {
    /// Pauses accepting until `until` (a later call moves it).
    pub fn pause(&mut self, until: Instant) {
        self.until = Some(until);
    }

    /// Whether accepting is paused.
    pub fn is_paused(&self) -> bool {
        self.until.is_some()
    }

    /// When the pause ends, if accepting is paused: the loop's wait ends then.
    pub fn until(&self) -> Option<Instant> {
        self.until
    }

    /// Ends the pause now (the stop: the listener is gone anyway).
    pub fn lift(&mut self) {
        self.until = None;
    }

    /// Ends a pause that is over by `now`; whether one did, so that the
    /// loop watches its listeners again.
    pub fn resume_if_over(&mut self, now: Instant) -> bool {
        if self.until.is_some_and(|at| at <= now) {
            self.until = None;
            return true;
        }
        false
    }
}

/// A loop's stop: once asked, it accepts no more and serves what is in
/// flight until it is drained or its grace (if it keeps one) is over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finish {
    stop: Option<Grace>,
}

/// How long a stopped loop may go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grace {
    /// Until it is drained: whoever runs it bounds the wait (a model's
    /// runtime, which stops waiting after `--shutdown-timeout`).
    Drained,
    /// Until it is drained or this deadline passes.
    Until(Instant),
}

impl Finish {
    /// Asks the loop to stop, finishing by `deadline` if one is given.
    /// Whether this was the first ask (a later one changes nothing).
    pub fn begin(&mut self, deadline: Option<Instant>) -> bool {
        if self.stop.is_some() {
            return false;
        }
        self.stop = Some(deadline.map_or(Grace::Drained, Grace::Until));
        true
    }

    /// Whether the stop was asked.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_some()
    }

    /// Whether the loop is done: stopped, and `drained` (nothing in
    /// flight) or past its deadline.
    pub fn over(&self, now: Instant, drained: bool) -> bool {
        match self.stop {
            None => false,
            Some(Grace::Drained) => drained,
            Some(Grace::Until(deadline)) => drained || now >= deadline,
        }
    }

    /// The time left of the grace, if the stop keeps a deadline.
    pub fn left(&self, now: Instant) -> Option<Duration> {
        match self.stop {
            Some(Grace::Until(deadline)) => Some(deadline.saturating_duration_since(now)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadlines::{HasTimer, Timer};
    use crate::slab::Slab;

    /// A loop with nothing but peers that time out: what the end of its
    /// turn did, in order.
    #[derive(Default)]
    struct FakeLoop {
        peers: Slab<Peer>,
        timers: Deadlines,
        pause: AcceptPause,
        now: Option<Instant>,
        did: Vec<Did>,
    }

    #[derive(Default)]
    struct Peer {
        timer: Timer,
        /// Given a new deadline this far ahead when it expires, instead of closing.
        again_in: Option<Duration>,
    }

    impl HasTimer for Peer {
        fn timer(&mut self) -> &mut Timer {
            &mut self.timer
        }
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Did {
        Expired(u64),
        /// `watch_listener`, and whether accepting was paused then.
        Watched {
            paused: bool,
        },
    }

    impl Turn for FakeLoop {
        type Peers<'a> = &'a mut Slab<Peer>;

        fn turn_parts(&mut self) -> TurnParts<'_, &mut Slab<Peer>> {
            TurnParts {
                peers: &mut self.peers,
                timers: &mut self.timers,
                accept_pause: &mut self.pause,
                now: self.now.expect("a turn's clock"),
            }
        }

        fn expire(&mut self, token: u64) {
            self.did.push(Did::Expired(token));
            let now = self.now.unwrap();
            match self.peers.get_mut(token).and_then(|p| p.again_in.take().map(|d| (p, d))) {
                Some((peer, again_in)) => self.timers.set(&mut peer.timer, token, now + again_in),
                None => {
                    self.peers.remove(token);
                }
            }
        }

        fn watch_listener(&mut self) {
            self.did.push(Did::Watched { paused: self.pause.is_paused() });
        }
    }

    impl FakeLoop {
        fn peer(&mut self, deadline: Instant, again_in: Option<Duration>) -> u64 {
            let token = self.peers.insert(Peer { again_in, ..Peer::default() }).unwrap();
            self.timers.set(&mut self.peers.get_mut(token).unwrap().timer, token, deadline);
            token
        }

        fn end_turn_at(&mut self, now: Instant) -> Vec<Did> {
            self.now = Some(now);
            self.end_turn();
            std::mem::take(&mut self.did)
        }
    }

    #[test]
    fn a_turn_ends_with_its_passed_deadlines_earliest_first_then_the_listener() {
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        let mut l = FakeLoop::default();
        let late = l.peer(t0 + secs(9), None);
        let again = l.peer(t0 + secs(2), Some(secs(1)));
        let early = l.peer(t0 + secs(1), None);
        l.pause.pause(t0 + secs(5));

        assert_eq!(l.end_turn_at(t0), vec![Did::Watched { paused: true }], "nothing due yet");
        // Given a new deadline as it expires: within the turn it is not due again.
        assert_eq!(
            l.end_turn_at(t0 + secs(2)),
            vec![Did::Expired(early), Did::Expired(again), Did::Watched { paused: true }]
        );
        assert!(l.peers.get(early).is_none() && l.peers.get(again).is_some());
        // The pause ends in the same turn as the deadline, before the listener is watched.
        assert_eq!(l.end_turn_at(t0 + secs(5)), vec![Did::Expired(again), Did::Watched { paused: false }]);
        assert_eq!(l.end_turn_at(t0 + secs(99)), vec![Did::Expired(late), Did::Watched { paused: false }]);
        assert!(l.peers.is_empty() && l.timers.is_empty(), "each expired once, its entry used up");
    }

    #[test]
    fn a_turn_prunes_the_entries_of_peers_that_left() {
        let t0 = Instant::now();
        let mut l = FakeLoop::default();
        let tokens: Vec<u64> = (0..1100).map(|_| l.peer(t0 + Duration::from_secs(60), None)).collect();
        for &token in &tokens[1..] {
            l.peers.remove(token);
        }
        assert_eq!(l.end_turn_at(t0), vec![Did::Watched { paused: false }]);
        assert_eq!(l.timers.len(), 1, "only the live peer's entry is left");
    }

    #[test]
    fn a_loop_waits_for_the_nearer_of_its_next_timer_and_its_accept_pause() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        let mut timers = Deadlines::default();
        assert_eq!(wait_timeout(&timers, now, None), None, "nothing due: wait for an event");
        assert_eq!(wait_timeout(&timers, now, Some(now + secs(4))), Some(secs(4)));
        timers.set(&mut Timer::default(), 1, now + secs(2));
        assert_eq!(wait_timeout(&timers, now, None), Some(secs(2)));
        assert_eq!(wait_timeout(&timers, now, Some(now + secs(4))), Some(secs(2)));
        assert_eq!(wait_timeout(&timers, now, Some(now + secs(1))), Some(secs(1)));
        assert_eq!(wait_timeout(&timers, now + secs(3), None), Some(Duration::ZERO), "overdue: look at once");
        assert_eq!(wait_timeout(&timers, now + secs(3), Some(now)), Some(Duration::ZERO), "a wake-up passed");
    }

    #[test]
    fn an_accept_pause_ends_once_its_time_is_reached_and_only_then() {
        let now = Instant::now();
        let mut pause = AcceptPause::default();
        assert!(!pause.is_paused());
        assert!(!pause.resume_if_over(now), "nothing to resume");
        pause.pause(now + Duration::from_millis(100));
        assert!(pause.is_paused());
        assert_eq!(pause.until(), Some(now + Duration::from_millis(100)));
        assert!(!pause.resume_if_over(now + Duration::from_millis(99)));
        assert!(pause.is_paused());
        assert!(pause.resume_if_over(now + Duration::from_millis(100)));
        assert!(!pause.is_paused());
        assert!(!pause.resume_if_over(now + Duration::from_secs(1)), "resumed once");
        pause.pause(now);
        pause.lift();
        assert!(!pause.is_paused() && pause.until().is_none());
    }

    #[test]
    fn a_stopped_loop_ends_when_drained_or_out_of_grace() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        let serving = Finish::default();
        assert!(!serving.is_stopping());
        assert!(!serving.over(now, true), "a drained loop that was not stopped serves on");

        let mut bounded = Finish::default();
        assert!(bounded.begin(Some(now + secs(10))));
        assert!(!bounded.begin(Some(now)), "the first stop's deadline holds");
        assert!(bounded.is_stopping());
        assert!(!bounded.over(now, false));
        assert!(bounded.over(now, true));
        assert!(bounded.over(now + secs(10), false), "out of grace");
        assert_eq!(bounded.left(now + secs(4)), Some(secs(6)));
        assert_eq!(bounded.left(now + secs(11)), Some(Duration::ZERO));

        let mut unbounded = Finish::default();
        assert!(unbounded.begin(None));
        assert!(!unbounded.over(now + secs(3600), false), "no deadline of its own");
        assert!(unbounded.over(now, true));
        assert_eq!(unbounded.left(now), None);
    }
}
