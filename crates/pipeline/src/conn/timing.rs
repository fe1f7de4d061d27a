//! A connection's clock: timestamps, phase durations, deadlines, the gauge.

use std::time::Instant;

use super::*;
use crate::stats::{ConnState, Phase, PhaseTimes, TraceRow};

/// One request's timestamps ([`Stats::now`]) and phase durations.
#[derive(Debug, Default)]
pub(super) struct Timing {
    /// Connection start or the previous response's end: the wait begins.
    pub(super) idle_since: Mark,
    /// The request's first byte was seen.
    pub(super) first: Mark,
    /// The head was parsed; the pipeline may start.
    pub(super) service_start: Mark,
    /// A request is out with the pipeline: `deliver` records its phases.
    pub(super) taken: bool,
    /// When the model took the request out of the loop (`drive_split`, or
    /// a streamed one under `Mode::HandOutStreamed`): its queue starts.
    pub(super) handed_out: Mark,
    /// The response began to be written.
    pub(super) write_start: Mark,
    /// The responder (a script) started.
    pub(super) stream_start: Mark,
    pub(super) phases: PhaseTimes,
    pub(super) data: &'static str,
    /// Sampled for the trace: the path is kept.
    pub(super) trace_path: Option<Box<str>>,
}

/// A [`Stats::now`] timestamp, or none, in 8 bytes where `Option<u64>` takes
/// 16: [`Timing`] lives in every connection, idle ones too, and idle
/// memory is what an event server is judged by (nginx: 0.5 KiB each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Mark(Option<std::num::NonZeroU64>);

impl Mark {
    pub(super) const NONE: Mark = Mark(None);

    /// The clock counts from boot, so 0 never comes; were it to, it would
    /// read as 1 ns rather than as no timestamp.
    pub(super) fn at(ns: u64) -> Mark {
        Mark(std::num::NonZeroU64::new(ns.max(1)))
    }

    pub(super) fn get(self) -> Option<u64> {
        self.0.map(std::num::NonZeroU64::get)
    }

    pub(super) fn take(&mut self) -> Option<u64> {
        std::mem::take(self).get()
    }
}

impl From<Option<u64>> for Mark {
    fn from(ns: Option<u64>) -> Mark {
        ns.map_or(Mark::NONE, Mark::at)
    }
}

/// Where a connection takes the time its deadlines count from: always
/// from its driver — the connection reads no clock of its own, so its
/// unit tests set the time and a loop reads the clock once per wakeup.
#[derive(Clone, Copy, Debug)]
pub(super) enum Now {
    /// The driver's reading ([`Connection::set_now`]): an event loop's,
    /// once per wakeup, as nginx caches its time; a connection's accept
    /// time until its driver says otherwise.
    Given(Instant),
    /// The driver's clock ([`Connection::set_clock`]), read at each
    /// deadline: for a driver whose `drive` waits (a blocking socket, a
    /// pipeline run inline), so no reading it gave could stay current.
    Clock(fn() -> Instant),
}

impl Now {
    /// The driver's time: its reading, or its clock read now.
    pub(super) fn read(self) -> Instant {
        match self {
            Now::Given(now) => now,
            Now::Clock(read) => read(),
        }
    }
}

impl Connection {
    /// The caller read the clock at `now` and has not waited since — an
    /// event loop, once per wakeup, as nginx caches its time: deadlines set
    /// until the next `set_now` count from `now` and so may be as stale as
    /// `now` is; call it before every `drive`, `deliver` and `timed_out`.
    /// State timestamps (timing on) are always read exactly. A blocking
    /// thread, whose `drive` waits, gives its clock instead
    /// ([`set_clock`](Self::set_clock)).
    pub fn set_now(&mut self, now: Instant) {
        self.now = Now::Given(now);
    }

    /// Deadlines count from `clock`, read each time one is set: for a
    /// driver whose `drive` waits (blocking sockets), where no single
    /// reading would stay current. Until this or [`set_now`](Self::set_now)
    /// is called, they count from the accept time given to `new`.
    pub fn set_clock(&mut self, clock: fn() -> Instant) {
        self.now = Now::Clock(clock);
    }

    /// The time a deadline counts from: `stamp`, a timestamp ([`Stats::now`])
    /// just taken, if there is one; else the driver's time.
    pub(super) fn deadline_base(&self, stamp: Option<u64>) -> Instant {
        match stamp {
            Some(ns) => self.stats.instant_at(ns),
            None => self.now.read(),
        }
    }

    /// A phase boundary's timestamp (timing on): `fresh` if it was just
    /// taken, else a clock read.
    pub(super) fn stamp(&self, fresh: Option<u64>) -> Option<u64> {
        self.stats.timing.then(|| fresh.unwrap_or_else(|| self.stats.now()))
    }

    /// Runs `f` with a reading already at hand (`stamp`, or the caller's)
    /// lent to its `Date` fields, so they need no clock read of their own.
    pub(super) fn lend_now<R>(&self, stamp: Option<u64>, f: impl FnOnce() -> R) -> R {
        let given = match self.now {
            Now::Given(now) => Some(now),
            Now::Clock(_) => None,
        };
        match stamp.map(|ns| self.stats.instant_at(ns)).or(given) {
            Some(now) => h1::with_now(now, f),
            None => f(),
        }
    }

    /// Moves the connection in the `connections` gauge after a `drive`, or
    /// after the [`Io::Wait`](super::Io::Wait) a driver over
    /// [`step`](Self::step) stopped at (`uring`'s).
    pub fn set_gauge(&mut self, want: &Want) {
        let state = match want {
            Want::Close => ConnState::None,
            Want::Read(_)
                if matches!(self.state, State::Head) && self.start == self.end && self.served > 0 =>
            {
                ConnState::KeepAlive
            }
            Want::Read(_) => ConnState::Reading,
            Want::Write(_) | Want::Again | Want::Source(_) | Want::Process | Want::Warm => ConnState::Writing,
        };
        self.set_state(state);
    }

    /// Moves the connection in the gauge as it changes state inside a
    /// `drive` (a blocking thread may stay in one for a long time).
    pub(super) fn set_state(&mut self, state: ConnState) {
        if state != self.gauge {
            self.stats.move_conn(self.gauge, state);
            self.gauge = state;
        }
    }

    /// A request ended (sent, or the connection died under it) at `end`
    /// (timing on; its last phase ended then): counts it, records its
    /// phases and maybe a trace row, and starts the next wait.
    pub(super) fn finish_request(&mut self, status: u16, bytes: u64, end: Option<u64>) {
        let stats = &*self.stats;
        let Some(end) = end else {
            stats.count_response(status, bytes);
            return;
        };
        let tm = &mut self.tm;
        if let Some(first) = tm.first.get() {
            let total = end.saturating_sub(first);
            tm.phases.set(Phase::Total, total);
        }
        stats.record_request(status, bytes, &tm.phases);
        if let Some(path) = tm.trace_path.take() {
            let arrival = tm.first.get().unwrap_or(end);
            stats.trace_row(&TraceRow {
                conn: self.conn_id,
                arrival,
                service_start: tm.service_start.get().unwrap_or(arrival),
                service_end: end,
                phases: &tm.phases,
                data: tm.data,
                status,
                bytes,
                path: &path,
            });
        }
        // Field by field, so the durations array is not zeroed (`trace_path`
        // was taken above).
        tm.idle_since = Mark::at(end);
        tm.first = Mark::NONE;
        tm.service_start = Mark::NONE;
        tm.taken = false;
        tm.handed_out = Mark::NONE;
        tm.write_start = Mark::NONE;
        tm.stream_start = Mark::NONE;
        tm.phases.clear();
        tm.data = "";
    }

    pub(super) fn add_queue(&mut self, ns: u64) {
        let before = self.tm.phases.get(Phase::Queue).unwrap_or(0);
        self.tm.phases.set(Phase::Queue, before.saturating_add(ns));
    }

    /// Records the log phase, which began at `start` (the previous phase's
    /// end) and ends now; returns now.
    pub(super) fn timed_log(&mut self, start: u64) -> u64 {
        let now = self.stats.now();
        self.tm.phases.set(Phase::Log, now.saturating_sub(start));
        now
    }
}
