//! What a single-threaded loop's turn keeps that names no connection, the
//! same in the models' loops (`models/src/loop_core.rs`: `event`, `amped`,
//! `uring`) and the director's: how long the wait may last, a pause of
//! accepting and its end, and the stop with its graceful finish.
//!
//! ```text
//!   wait ≤ the nearer of the next timer and the next wake-up  ◀── wait_timeout
//!   … the loop's events, its connections' deadlines …
//!   accept again once the pause is over                       ◀── AcceptPause::resume_if_over
//!   stopped, and drained or out of grace: the loop ends       ◀── Finish::over
//! ```

use std::time::{Duration, Instant};

use crate::deadlines::Deadlines;

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
    use crate::deadlines::Timer;

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
