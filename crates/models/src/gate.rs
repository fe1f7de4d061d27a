//! The gate of the blocking models (`per-request`, `pool`, `worker`,
//! `perchild`): the accepting thread keeps every connection that is not
//! ready for a thread in one epoll set — a new one until its first request
//! head is complete, an idle keep-alive one until its next, one whose
//! response a slow reader takes in its own time — and hands a connection
//! to the model's threads only with a whole request parsed
//! ([`pipeline::Client`]). A slowloris client, or a thousand, holds no
//! thread: Apache's event MPM keeps keep-alive connections off its workers
//! the same way, and `staged` parks its connections likewise.
//!
//! ```text
//!   listener ─▶ gate (epoll: heads, idle keep-alive, slow writes) ─▶ dispatch ─▶ thread
//!                 ▲                                                                │
//!                 └──────────── Returns::give_back (waits for the client) ◀───────┘
//! ```
//!
//! The gate only drives connections with `Client::drive_head`, which never
//! runs a request: reading, parsing, error answers (400, 408, 431...),
//! dropping a body nobody wants and finishing a blocked write are quick
//! and never wait. Deadlines are the connection's own (the head's counts
//! from the accept), kept in the event loops' timer set
//! (`transport::deadlines`); the epoll wait lasts at most
//! a [`BLOCKING_TICK`], so a model can look at its retirement orders.
//! Registrations are one-shot: a connection is reported once and then
//! belongs to whoever drives it until it is parked again.

use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use pipeline::{refuse_at_capacity, Client, Gated, Pipeline, BLOCKING_TICK};
use rustix::io::Errno;
use transport::accept::{self, Failed};
use transport::deadlines::{Deadlines, HasTimer, Timer};
use transport::poller::{Events, Interest, Poller, Trigger, Waker};
use transport::Shutdown;

const LISTENER: u64 = u64::MAX;
const WAKER: u64 = u64::MAX - 1;
const STOP: u64 = u64::MAX - 2;
/// Connections accepted per readiness of the listener before the parked
/// ones get a turn.
const ACCEPT_BATCH: usize = 64;

/// Where threads give connections back to the gate.
#[derive(Debug)]
pub(crate) struct Returns {
    waker: Waker,
    clients: Mutex<Vec<Client>>,
}

impl Returns {
    /// The connection waits for its client again (its next head, a body
    /// to drop, a slow reader): the gate watches it from now on.
    pub(crate) fn give_back(&self, client: Client) {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner).push(client);
        self.waker.wake();
    }

    /// Wakes the gate to look at its `room` again (a thread became free).
    pub(crate) fn nudge(&self) {
        self.waker.wake();
    }
}

struct Parked {
    client: Client,
    timer: Timer,
}

impl HasTimer for Parked {
    fn timer(&mut self) -> &mut Timer {
        &mut self.timer
    }
}

/// The gate's epoll set, its parked connections and their deadlines. Owned
/// by the thread that runs it.
pub(crate) struct Gate {
    poller: Poller,
    returns: Arc<Returns>,
    parked: HashMap<RawFd, Parked>,
    /// By descriptor; a connection handed on leaves a stale entry behind.
    deadlines: Deadlines,
    events: Events,
}

impl Gate {
    pub(crate) fn new() -> io::Result<Gate> {
        let poller = Poller::new()?;
        let returns = Arc::new(Returns { waker: Waker::new()?, clients: Mutex::new(Vec::new()) });
        poller.add(&returns.waker, WAKER, Interest::READABLE, Trigger::Level)?;
        Ok(Gate {
            poller,
            returns,
            parked: HashMap::new(),
            deadlines: Deadlines::default(),
            events: Events::with_capacity(256),
        })
    }

    /// For the threads: where to give connections back.
    pub(crate) fn returns(&self) -> Arc<Returns> {
        self.returns.clone()
    }

    /// Accepts from `listener` and keeps connections until their head is
    /// complete, then `dispatch`es them; until `stop` fires, `dispatch`
    /// says `false` (nobody left to serve), or `quiet` — asked after a
    /// wait in which nothing happened — says `false` (a child retires).
    /// `door.shared`: other processes accept on the same listener, so only
    /// one gate is woken per connection (`EPOLLEXCLUSIVE`); `door.room`,
    /// asked before each wait, says whether to accept at all (a `worker`
    /// child with no free thread leaves new connections to the others, and
    /// [`Returns::nudge`]s its gate when one frees up).
    pub(crate) fn run(
        &mut self,
        listener: &TcpListener,
        door: Door<'_>,
        stop: &Shutdown,
        p: &Pipeline,
        mut dispatch: impl FnMut(Client) -> bool,
        mut quiet: impl FnMut() -> bool,
    ) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        self.poller.add(stop.wake_fd(), STOP, Interest::READABLE, Trigger::Level)?;
        let result = self.serve(listener, &door, stop, p, &mut dispatch, &mut quiet);
        // Fail only if not registered, which is what we want.
        let _ = self.poller.delete(listener);
        let _ = self.poller.delete(stop.wake_fd());
        result
    }

    fn serve(
        &mut self,
        listener: &TcpListener,
        door: &Door<'_>,
        stop: &Shutdown,
        p: &Pipeline,
        dispatch: &mut dyn FnMut(Client) -> bool,
        quiet: &mut dyn FnMut() -> bool,
    ) -> io::Result<()> {
        let trigger = if door.shared { Trigger::Exclusive } else { Trigger::Level };
        let mut pause_accept: Option<Instant> = None;
        let mut listening = false;
        loop {
            if stop.is_triggered() {
                return Ok(());
            }
            if !self.take_returns(p, false, dispatch) || !self.expire(p, dispatch) {
                return Ok(());
            }
            let now = Instant::now();
            if pause_accept.is_some_and(|until| until <= now) {
                pause_accept = None;
            }
            // Watched exactly while this gate may accept: a level-triggered
            // listener nobody accepts from would report itself on every wait.
            let wanted = pause_accept.is_none() && (door.room)();
            if wanted != listening {
                if wanted {
                    self.poller.add(listener, LISTENER, Interest::READABLE, trigger)?;
                } else {
                    // Fails only if it is not registered, which is what we want.
                    let _ = self.poller.delete(listener);
                }
                listening = wanted;
            }
            let next = self.deadlines.next_in(now);
            let timeout = next.map_or(BLOCKING_TICK, |t| t.min(BLOCKING_TICK));
            if self.poller.wait(&mut self.events, Some(timeout))? == 0 {
                if !quiet() {
                    return Ok(());
                }
                continue;
            }
            let tokens: Vec<u64> = self.events.iter().map(|e| e.token()).collect();
            for token in tokens {
                match token {
                    STOP => return Ok(()),
                    WAKER => self.returns.waker.reset(),
                    LISTENER => match self.accept(listener, door.room, p, dispatch) {
                        Accepting::Go => {}
                        Accepting::Done => return Ok(()),
                        Accepting::Pause => {
                            // Out of descriptors: the listener stays
                            // readable; stop watching it for a while rather
                            // than spin (the event loops do the same).
                            pause_accept = Some(Instant::now() + accept::PAUSE);
                        }
                    },
                    fd => {
                        let Some(parked) = self.unpark(fd as RawFd) else { continue };
                        if !self.handle(parked.client, p, false, dispatch) {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// After [`run`](Self::run), once the threads are done: lets the
    /// connections still here finish what they were sending, answers on
    /// this thread (with `Connection: close`) a request that arrives on an
    /// idle one within the stop's grace rather than cutting it, closes the
    /// rest, and returns when none is left.
    pub(crate) fn finish(&mut self, p: &Pipeline, stop: &Shutdown) {
        let returns = self.returns();
        let mut drop_ready = |client: Client| {
            if let Some(client) = pipeline::serve_ready(client, p, stop) {
                returns.give_back(client);
            }
            true
        };
        loop {
            self.take_returns(p, true, &mut drop_ready);
            for fd in self.parked.keys().copied().collect::<Vec<_>>() {
                if let Some(parked) = self.unpark(fd) {
                    self.handle(parked.client, p, true, &mut drop_ready);
                }
            }
            // What is left waits to write: until done, or its deadline.
            self.expire(p, &mut drop_ready);
            if self.parked.is_empty() {
                return;
            }
            let now = Instant::now();
            let next = self.deadlines.next_in(now);
            if self
                .poller
                .wait(&mut self.events, Some(next.unwrap_or(BLOCKING_TICK).min(BLOCKING_TICK)))
                .is_err()
            {
                return;
            }
        }
    }

    /// Accepts what the listener holds, up to a batch.
    fn accept(
        &mut self,
        listener: &TcpListener,
        room: &dyn Fn() -> bool,
        p: &Pipeline,
        dispatch: &mut dyn FnMut(Client) -> bool,
    ) -> Accepting {
        for _ in 0..ACCEPT_BATCH {
            if !room() {
                return Accepting::Go;
            }
            let (stream, peer) = match accept::accept(listener, accept::Mode::NonBlocking) {
                Ok(pair) => pair,
                Err((Failed::Retry, _)) => continue,
                Err((Failed::Empty, _)) => return Accepting::Go,
                Err((Failed::Pause, e)) => {
                    p.error_log.accept_paused(&e);
                    return Accepting::Pause;
                }
                // A process model's master shut the listener down.
                Err((Failed::Gone, _)) => return Accepting::Done,
            };
            let slot = match p.admit(peer.ip()) {
                Ok(slot) => slot,
                Err(_over_cap) => {
                    refuse_at_capacity(stream, p, 429);
                    continue;
                }
            };
            let Some(client) = Client::accepted(stream, p, slot) else { continue };
            // A request usually arrives with the connection (and with
            // TCP_DEFER_ACCEPT always does): read it now.
            if !self.handle(client, p, false, dispatch) {
                return Accepting::Done;
            }
        }
        Accepting::Go
    }

    /// Drives a connection as far as the gate may, then parks it, hands it
    /// on, or drops it; `false` if nobody takes ready connections any more.
    fn handle(
        &mut self,
        mut client: Client,
        p: &Pipeline,
        stopping: bool,
        dispatch: &mut dyn FnMut(Client) -> bool,
    ) -> bool {
        match client.drive_head(p, stopping) {
            Gated::Ready => return dispatch(client),
            Gated::Read(deadline) => self.park(client, Interest::READABLE, deadline, p),
            Gated::Write(deadline) => self.park(client, Interest::WRITABLE, deadline, p),
            Gated::Close => {}
        }
        true
    }

    fn park(&mut self, client: Client, interest: Interest, deadline: Instant, p: &Pipeline) {
        let fd = client.socket().as_raw_fd();
        let token = fd as u64;
        // A connection back from a thread is still registered (disarmed);
        // a new one, or one whose descriptor number was reused, is not.
        let armed = match self.poller.modify(client.socket(), token, interest, Trigger::Oneshot) {
            Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => {
                self.poller.add(client.socket(), token, interest, Trigger::Oneshot)
            }
            other => other,
        };
        match armed {
            Ok(()) => {
                let mut timer = Timer::default();
                self.deadlines.set(&mut timer, token, deadline);
                self.parked.insert(fd, Parked { client, timer });
            }
            Err(e) => p.error_log.error(format_args!("gate: cannot watch a connection: {e}")),
        }
    }

    fn unpark(&mut self, fd: RawFd) -> Option<Parked> {
        self.parked.remove(&fd)
    }

    /// Connections the threads gave back.
    fn take_returns(
        &mut self,
        p: &Pipeline,
        stopping: bool,
        dispatch: &mut dyn FnMut(Client) -> bool,
    ) -> bool {
        let returned =
            std::mem::take(&mut *self.returns.clients.lock().unwrap_or_else(PoisonError::into_inner));
        let mut going = true;
        for client in returned {
            going = going && self.handle(client, p, stopping, dispatch);
        }
        going
    }

    /// Connections whose deadline passed: a 408 to send, or a close.
    fn expire(&mut self, p: &Pipeline, dispatch: &mut dyn FnMut(Client) -> bool) -> bool {
        let now = Instant::now();
        while let Some(fd) = self.deadlines.expired(now, &mut self.parked) {
            let Some(Parked { mut client, .. }) = self.unpark(fd as RawFd) else { continue };
            if client.timed_out(p) && !self.handle(client, p, false, dispatch) {
                return false;
            }
        }
        self.deadlines.prune(&mut self.parked);
        true
    }
}

/// How a gate takes connections from its listener.
pub(crate) struct Door<'a> {
    /// Other processes accept on the same listener.
    pub(crate) shared: bool,
    /// Whether to accept now.
    pub(crate) room: &'a dyn Fn() -> bool,
}

impl Door<'_> {
    /// The listener is this process's alone, and it always accepts.
    pub(crate) const OWN: Door<'static> = Door { shared: false, room: &|| true };
}

enum Accepting {
    Go,
    /// Out of descriptors or memory: pause accepting.
    Pause,
    /// The listener is shut, or nobody takes connections any more.
    Done,
}
