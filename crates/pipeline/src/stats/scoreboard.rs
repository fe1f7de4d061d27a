//! The scoreboard: what each worker is doing, mod_status style.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Stats;

/// What a worker is doing, mod_status style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    /// Waiting for work.
    Idle = 0,
    /// Serving a connection or a request.
    Busy = 1,
    /// Gone.
    Dead = 2,
}

/// One worker's line on the scoreboard.
#[derive(Debug)]
pub struct Slot {
    /// Thread (or loop) name.
    pub name: String,
    pub(super) state: AtomicU8,
    /// Connections or requests taken.
    pub served: AtomicU64,
    /// When the state last changed, ns since the stats' start.
    pub(super) since_ns: AtomicU64,
    pub(super) epoch: Instant,
}

impl Slot {
    /// Sets the state (one store and a clock read).
    pub fn set(&self, state: WorkerState) {
        self.set_at(state, Instant::now());
    }

    /// Sets the state as of `now`, a clock reading the caller already has.
    pub fn set_at(&self, state: WorkerState, now: Instant) {
        if state == WorkerState::Busy {
            self.served.fetch_add(1, Ordering::Relaxed);
        }
        self.state.store(state as u8, Ordering::Relaxed);
        let since = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.since_ns.store(since, Ordering::Relaxed);
    }

    /// The state now.
    pub fn state(&self) -> WorkerState {
        match self.state.load(Ordering::Relaxed) {
            0 => WorkerState::Idle,
            1 => WorkerState::Busy,
            _ => WorkerState::Dead,
        }
    }

    /// How long it has been in that state.
    pub fn for_how_long(&self) -> Duration {
        let now = self.epoch.elapsed().as_nanos() as u64;
        Duration::from_nanos(now.saturating_sub(self.since_ns.load(Ordering::Relaxed)))
    }
}

/// A registered worker; its slot leaves the scoreboard when this is dropped.
#[derive(Debug)]
pub struct Worker(Arc<Slot>);

impl Worker {
    /// Marks the worker busy.
    pub fn busy(&self) {
        self.0.set(WorkerState::Busy);
    }

    /// Marks the worker idle.
    pub fn idle(&self) {
        self.0.set(WorkerState::Idle);
    }

    /// [`busy`](Self::busy) as of `now`, a reading the caller already has
    /// (an event loop's, once per wakeup).
    pub fn busy_at(&self, now: Instant) {
        self.0.set_at(WorkerState::Busy, now);
    }

    /// [`idle`](Self::idle) as of `now`.
    pub fn idle_at(&self, now: Instant) {
        self.0.set_at(WorkerState::Idle, now);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.set(WorkerState::Dead);
    }
}

impl Stats {
    /// Registers a worker on the scoreboard, idle.
    pub fn worker(&self, name: String) -> Worker {
        let slot = Arc::new(Slot {
            name,
            state: AtomicU8::new(WorkerState::Idle as u8),
            served: AtomicU64::new(0),
            since_ns: AtomicU64::new(self.epoch.elapsed().as_nanos() as u64),
            epoch: self.epoch,
        });
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        slots.push(Arc::downgrade(&slot));
        Worker(slot)
    }
}

/// A worker's line.
#[derive(Clone, Debug)]
pub struct WorkerSnap {
    /// Thread or loop name (`pid/name` in the process models).
    pub name: String,
    /// Busy (else idle).
    pub busy: bool,
    /// Connections or requests taken.
    pub served: u64,
    /// When it entered the current state, since the stats' epoch.
    pub since: Duration,
    /// Time in the current state.
    pub for_how_long: Duration,
}
