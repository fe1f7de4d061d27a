//! `event` — the papers' SPED (single-process event-driven; nginx, Zeus):
//! one epoll loop per `--workers` thread, each multiplexing many
//! non-blocking connections, every one a `pipeline::Connection` state
//! machine that says what it waits for.
//!
//! * **Accept**: every loop watches the one shared listener with
//!   `EPOLLEXCLUSIVE`, so a new connection wakes one loop rather than all
//!   (no thundering herd), and accepts a bounded batch until `EAGAIN`.
//! * **Readiness**: a connection is registered once, edge-triggered, for
//!   input and output (no `epoll_ctl` per request, as nginx does); the
//!   connection's last [`Want`] says which readiness it is waiting for, and
//!   the loop remembers readiness that arrived while it waited for the other.
//!   It passes every readable event on (`Connection::readable`), so a read
//!   that came back short can end the reading without the `recv` that would
//!   only say EAGAIN (`Connection::set_edge_triggered`; nginx does the same).
//! * **Timers**: a min-heap of (deadline, token), lazily invalidated, with at
//!   most one live entry per connection (`transport::deadlines`); the wait's timeout
//!   is the time to the next one. The clock is read once per wakeup, and
//!   that reading serves the turn's timers and connection deadlines
//!   (`Connection::set_now`), as nginx's cached time does.
//! * **Connection cap** (`--max-connections`, nginx's
//!   `worker_connections`): the server-wide cap is split between the loops
//!   (loop `i` of `w` gets `N / w`, plus one for the first `N % w`), since a
//!   loop can only stop its own accepting without asking the others. At its
//!   share a loop takes the listener out of its epoll set — newcomers wait
//!   in the kernel's backlog, or go to a loop with room — and puts it back
//!   when a connection closes. A full loop never spins on the
//!   always-readable listener. (nginx additionally closes idle keep-alive
//!   connections to make room; `Connection` does not say when it is idle
//!   between requests, so here they keep their slot until they time out.)
//! * **Stop**: the loop drops the listener (new connections are refused),
//!   drives every connection with `stopping` (an idle keep-alive one
//!   waits a second for the next request it may have sent, answers it with
//!   `Connection: close`, and closes then or at the end of that grace;
//!   in-flight ones finish) and returns when none is left.
//!
//! **Known weakness (paper 004, and the reason `amped` exists):** the
//! pipeline runs inline in the loop, so a request whose file is not in the
//! page cache blocks the whole loop — every other connection of that loop
//! waits for that one disk read. More workers only dilute the stall.
//!
//! **CGI** never blocks the loop. Starting a script (a `stat` per path
//! segment, then `posix_spawn`, which waits for the `exec`) is the one
//! piece of a CGI request that can: the loop hands it, with the request,
//! to a spawner thread (one per loop, the same [`HelperPool`] machinery as
//! `amped`'s helpers: a queue out, a mailbox and an eventfd waker back),
//! and leaves the socket alone meanwhile. The spawner's reply carries the
//! running script; its pipes (and its pidfd) then join the loop's epoll
//! set, edge-triggered, under the connection's token
//! (`Connection::new_sources`); any event for that token drives the
//! connection, which moves whatever can move without blocking
//! (`Want::Source`). The spawners exist only when CGI is on.
//!
//! `amped` reuses this loop: with [`Helpers`] and [`SendAway::All`] it
//! drives connections in split mode and sends every parsed request it
//! cannot answer from memory away instead of running it.
//!
//! [`HelperPool`]: crate::helpers::HelperPool

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pipeline::schedule::{self, Due, Schedule};
use pipeline::{refuse_at_capacity, ConnInfo, Connection, IpSlot, Mode, Pipeline, Want};
use transport::accept::{self, Failed};
use transport::deadlines::{Deadlines, HasTimer, Timer};
use transport::poller::{Event, Events, Interest, Poller, Trigger, Waker};
use transport::slab::{self, Slab};
use transport::turn::{self, AcceptPause, Finish};
use transport::{Shutdown, Stream};

use crate::helpers::{HelperPool, Helpers, SendAway};
use crate::loop_core::{self, Core, LoopConn, Parts, Waits};
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "event",
    paper_name: "SPED",
    summary: "one epoll loop per --workers thread; the pipeline runs inline (nginx), CGI starts on a spawner",
    caps: Caps {
        forks: false,
        event_driven: true,
        staged: false,
        srpt_loop: true,
        sendfile: Sendfile::Always,
        pipeline_on_loop: true,
        holds_connection: false,
    },
    knobs: &[Knob::Workers, Knob::MaxConnections],
    run,
};

fn run(env: ModelEnv) -> io::Result<()> {
    if env.pipeline.settings.cgi.is_none() {
        return serve(env, SendAway::Cgi, |_| Ok(None));
    }
    let loops = env.tuning.workers.max(1);
    let mut spawners = HelperPool::start(&env.pipeline, loops, loops, "cgi-spawner", "cgi-spawners")?;
    let result = serve(env, SendAway::Cgi, |worker| Ok(spawners.take(worker)));
    spawners.join();
    result
}

/// Runs `tuning.workers` loops on the shared listener until the stop, each
/// with the helpers `helpers(i)` returns, to which it sends what `send_away` says.
pub(crate) fn serve(
    env: ModelEnv,
    send_away: SendAway,
    mut helpers: impl FnMut(usize) -> io::Result<Option<Box<dyn Helpers>>>,
) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, .. } = env;
    listener.set_nonblocking(true)?;
    // Inherited by every accepted socket: one setsockopt instead of one per
    // connection. Nagle would hold back a response's last segment while the
    // client delays its ACK. (No SO_*TIMEO: those are for blocking threads.)
    rustix::net::sockopt::set_tcp_nodelay(&listener, true)?;
    let workers = tuning.workers.max(1);
    let listeners = listeners(listener, workers, tuning.reuseport, &pipeline);
    // Every loop is set up before any runs, so a failure leaves nothing behind.
    let mut loops = Vec::new();
    let nudges: Arc<[Waker]> = (0..workers).map(|_| Waker::new()).collect::<io::Result<Vec<_>>>()?.into();
    for i in 0..workers {
        let helpers = helpers(i)?.map(|h| (send_away, h));
        let cap = loop_share(tuning.max_connections, workers, i);
        let listener = listeners[i % listeners.len()].clone();
        let mut lp = Loop::new(listener, pipeline.clone(), shutdown.clone(), helpers, cap)?;
        lp.join_siblings(i, nudges.clone())?;
        loops.push(lp);
    }
    // Only the loops hold the listeners now: when they drop them, they close.
    drop(listeners);
    let mut result = Ok(());
    let mut threads = Vec::new();
    for (i, mut lp) in loops.into_iter().enumerate() {
        let stop = StopOnPanic(shutdown.clone());
        let spawned = thread::Builder::new().name(format!("event-{i}")).spawn(move || {
            let result = lp.run();
            if let Err(e) = &result {
                lp.pipeline.error_log.error(format_args!("event loop: {e}"));
                // A dead loop is a partial outage: stop the whole server.
                stop.0.trigger();
            }
            result
        });
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(e) => {
                // Stop the loops already running, then report.
                shutdown.trigger();
                result = Err(e);
                break;
            }
        }
    }
    for thread in threads {
        let outcome = thread.join().unwrap_or_else(|_| Err(io::Error::other("an event loop panicked")));
        result = result.and(outcome);
    }
    result
}

/// The listener of each loop: the one shared socket, or (`--reuseport`)
/// one per loop in its `SO_REUSEPORT` group, the kernel choosing a loop
/// for each connection by a hash of its addresses — no shared queue and no
/// wake-up of a loop that finds nothing, but no moving a connection to a
/// loop with room either (`accept`'s nudge only makes the others look in
/// their own queues). A socket handed in by systemd has no group: shared.
/// The siblings are in `listener`'s blocking mode.
pub(crate) fn listeners(
    listener: TcpListener,
    workers: usize,
    reuseport: bool,
    pipeline: &Pipeline,
) -> Vec<Arc<TcpListener>> {
    let nonblocking =
        rustix::fs::fcntl_getfl(&listener).is_ok_and(|f| f.contains(rustix::fs::OFlags::NONBLOCK));
    let mut listeners = Vec::new();
    if reuseport {
        for _ in 1..workers {
            match transport::listener::sibling(&listener).and_then(|l| {
                l.set_nonblocking(nonblocking)?;
                Ok(l)
            }) {
                Ok(sibling) => listeners.push(Arc::new(sibling)),
                Err(e) => {
                    pipeline.error_log.warn(format_args!(
                        "--reuseport: no listener of its own for every loop ({e}): the loops share one"
                    ));
                    listeners.clear();
                    break;
                }
            }
        }
    }
    listeners.insert(0, Arc::new(listener));
    listeners
}

/// Loop `i`'s share of `max_connections` among `workers` loops: the shares
/// add up to the cap, and every loop may hold at least one connection.
pub(crate) fn loop_share(max_connections: usize, workers: usize, i: usize) -> usize {
    let share = max_connections / workers + usize::from(i < max_connections % workers);
    share.max(1)
}

/// Stops the server if a loop thread panics, instead of leaving it half up.
pub(crate) struct StopOnPanic(pub(crate) Shutdown);

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.trigger();
        }
    }
}

/// Tokens of the loop's own descriptors: above the slab's slots
/// ([`slab::MAX_SLOTS`]), so they never collide with a connection's.
const LISTENER: u64 = u32::MAX as u64;
const STOP: u64 = u32::MAX as u64 - 1;
const WAKER: u64 = u32::MAX as u64 - 2;
const NUDGE: u64 = u32::MAX as u64 - 3;
/// The cache's inotify descriptor (`Pipeline::watch_files`).
const FILES: u64 = u32::MAX as u64 - 4;
/// Set in the token of a CGI pipe registered for a connection, so that its
/// events never pass for the socket's (a pipe's hang-up is not the client's).
const PIPE: u64 = slab::FLAG;

/// Connections accepted per listener event: the rest wait for the next
/// round, so a connection storm cannot starve the open connections.
const ACCEPT_BATCH: usize = 64;
/// Events taken per wait.
const EVENTS: usize = 256;

#[derive(Debug)]
struct Conn {
    stream: Stream,
    conn: Connection,
    waits: Waits,
    /// Edge-triggered readiness seen but not yet used up (an `EAGAIN` clears it).
    readable: bool,
    writable: bool,
    /// The deadline of the current wait; none while a helper has its request.
    timer: Timer,
    /// Its place under `--max-conns-per-ip`, freed when it closes.
    _slot: Option<IpSlot>,
}

impl HasTimer for Conn {
    fn timer(&mut self) -> &mut Timer {
        &mut self.timer
    }
}

impl LoopConn for Conn {
    fn conn(&mut self) -> &mut Connection {
        &mut self.conn
    }

    fn awaits_helper(&self) -> bool {
        self.waits == Waits::Helper
    }

    fn wait(&mut self, waits: Waits) {
        self.waits = waits;
    }

    /// Either comes only after the socket said EAGAIN or a read came back
    /// short, so the next edge will be a fresh one.
    fn wait_drained(&mut self, waits: Waits) {
        self.waits = waits;
        match waits {
            Waits::Read => self.readable = false,
            Waits::Write => self.writable = false,
            Waits::Helper | Waits::Pipes => {}
        }
    }
}

/// One event loop and everything it owns.
struct Loop {
    poller: Poller,
    /// Cache hits are trusted to the inotify watch (`Pipeline::watch_files`).
    watching: bool,
    listener: Option<Arc<TcpListener>>,
    /// The listener is in the epoll set.
    listening: bool,
    /// Accepting is paused (out of descriptors).
    accept_pause: AcceptPause,
    /// Most connections this loop holds (its share of `--max-connections`).
    max_conns: usize,
    /// Every loop's nudge (this loop's is `nudges[me]`): a loop that stops
    /// accepting at its cap with connections possibly left in the backlog
    /// wakes the others, since `EPOLLEXCLUSIVE` may have woken only it.
    nudges: Arc<[Waker]>,
    me: usize,
    shutdown: Shutdown,
    finish: Finish,
    pipeline: Arc<Pipeline>,
    helpers: Option<Box<dyn Helpers>>,
    /// Where its connections' requests run: inline, or some sent to the helpers.
    mode: Mode,
    /// `--schedule srpt`: each turn's ready connections are served shortest
    /// remaining response first, a quantum each (else in readiness order).
    srpt: bool,
    /// This turn's connections due a drive (SRPT only).
    turn: Vec<u64>,
    /// The turn in SRPT's order (`schedule::order_turn`); kept to reuse its allocation.
    order: Vec<Due>,
    /// Connections that yielded after a quantum, for the next turn.
    again: Vec<u64>,
    conns: Slab<Conn>,
    timers: Deadlines,
    /// The clock as read once when the last wait returned: the time of
    /// everything this turn of the loop does, except per-request timing,
    /// which is read exactly (nginx's `ngx_time_update`).
    now: Instant,
}

impl Loop {
    fn new(
        listener: Arc<TcpListener>,
        pipeline: Arc<Pipeline>,
        shutdown: Shutdown,
        helpers: Option<(SendAway, Box<dyn Helpers>)>,
        max_conns: usize,
    ) -> io::Result<Loop> {
        let (mode, helpers) = match helpers {
            Some((SendAway::All, helpers)) => (Mode::HandOut, Some(helpers)),
            Some((SendAway::Cgi, helpers)) => (Mode::HandOutStreamed, Some(helpers)),
            None => (Mode::Inline, None),
        };
        let srpt = matches!(pipeline.settings.schedule, Schedule::Srpt(_));
        let poller = Poller::new()?;
        poller.add(&*listener, LISTENER, Interest::READABLE, Trigger::Exclusive)?;
        // Level-triggered: it stays readable once the stop is requested, and
        // is deleted as soon as it has been seen.
        poller.add(shutdown.wake_fd(), STOP, Interest::READABLE, Trigger::Level)?;
        if let Some(helpers) = &helpers {
            poller.add(helpers.waker(), WAKER, Interest::READABLE, Trigger::Level)?;
        }
        // Level-triggered, in every loop: each loop reads the changes before
        // serving a turn that saw them, whichever loop's read emptied the queue.
        let files = pipeline.watch_files();
        if let Some(files) = &files {
            poller.add(files, FILES, Interest::READABLE, Trigger::Level)?;
        }
        let watching = files.is_some();
        Ok(Loop {
            watching,
            poller,
            listener: Some(listener),
            listening: true,
            accept_pause: AcceptPause::default(),
            max_conns: max_conns.max(1),
            nudges: Arc::from(Vec::new()),
            me: 0,
            shutdown,
            finish: Finish::default(),
            pipeline,
            srpt,
            order: Vec::new(),
            helpers,
            mode,
            turn: Vec::new(),
            again: Vec::new(),
            conns: Slab::new(0),
            timers: Deadlines::default(),
            now: Instant::now(),
        })
    }

    /// Registers this loop's nudge among `nudges` (one per loop).
    fn join_siblings(&mut self, me: usize, nudges: Arc<[Waker]>) -> io::Result<()> {
        self.poller.add(&nudges[me], NUDGE, Interest::READABLE, Trigger::Level)?;
        self.me = me;
        self.nudges = nudges;
        Ok(())
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS);
        let name = thread::current().name().unwrap_or("event").to_string();
        let me = self.pipeline.stats.worker(name);
        // A stop that fired before the registration is still seen: the pipe
        // stays readable.
        while !self.finish.over(self.now, self.conns.is_empty()) {
            // As of the wakeup: the scoreboard's idle time starts that much early.
            let now = self.now;
            let timeout = if self.again.is_empty() {
                turn::wait_timeout(&self.timers, now, self.accept_pause.until())
            } else {
                // Yielded connections still have bytes to send: look, don't wait.
                Some(Duration::ZERO)
            };
            me.idle_at(now);
            self.poller.wait(&mut events, timeout)?;
            self.now = Instant::now();
            me.busy_at(self.now);
            loop_core::files_first(&self.pipeline, events.iter().any(|e| e.token() == FILES));
            for event in events.iter() {
                match event.token() {
                    FILES => {}
                    LISTENER => self.accept(),
                    STOP => self.begin_stop(),
                    WAKER => self.collect_replies(),
                    NUDGE => {
                        // Reset before accepting, so a later nudge is not lost.
                        self.nudges[self.me].reset();
                        if self.listening {
                            self.accept();
                        }
                    }
                    token => self.ready(token, event),
                }
            }
            if self.srpt {
                self.serve_turn();
            }
            self.end_turn();
        }
        Ok(())
    }

    fn accept(&mut self) {
        let Some(listener) = self.listener.clone() else { return };
        for n in 0..ACCEPT_BATCH {
            if self.conns.len() >= self.max_conns {
                // Full: `watch_listener` takes the listener out before the
                // next wait, and puts it back once a connection closes.
                // The backlog may still hold connections that a loop with
                // room was not woken for: wake the others to look.
                for (i, nudge) in self.nudges.iter().enumerate() {
                    if i != self.me {
                        nudge.wake();
                    }
                }
                return;
            }
            match accept::accept(&listener, accept::Mode::NonBlocking) {
                // The wait reported the first; the others may have come,
                // request and all, after a file changed that it did not yet
                // report: they wait for their edge.
                Ok((stream, peer)) => self.open(stream, peer, n == 0 || !self.watching),
                Err((Failed::Retry, _)) => {}
                Err((Failed::Empty, _)) => return,
                Err((Failed::Pause, e)) => {
                    // The listener stays readable: stop watching it for a
                    // while instead of spinning; open connections carry on.
                    self.pipeline.error_log.accept_paused(&e);
                    self.accept_pause.pause(Instant::now() + accept::PAUSE);
                    return;
                }
                // Only the loop's own stop closes its listener.
                Err((Failed::Gone, e)) => {
                    self.pipeline.error_log.error_once("accept", format_args!("accept: {e}"));
                    self.accept_pause.pause(Instant::now() + accept::PAUSE);
                    return;
                }
            }
        }
    }

    /// Keeps the listener in the epoll set exactly while this loop may
    /// accept: not while accepting is paused, nor at the connection cap
    /// (it stays readable then, and a level-triggered wait would spin).
    /// Called before every wait, so a slot freed by any close or timeout
    /// reopens accepting, and connections in the backlog are reported at
    /// once when it is re-added.
    fn watch_listener(&mut self) {
        let Some(listener) = &self.listener else { return };
        let wanted = !self.accept_pause.is_paused() && self.conns.len() < self.max_conns;
        if wanted == self.listening {
            return;
        }
        if wanted {
            match self.poller.add(&**listener, LISTENER, Interest::READABLE, Trigger::Exclusive) {
                Ok(()) => self.listening = true,
                Err(e) => {
                    self.pipeline.error_log.error(format_args!("accept: re-registering the listener: {e}"));
                    self.accept_pause.pause(Instant::now() + accept::PAUSE);
                }
            }
        } else {
            // Fails only if it is not registered, which is what we want.
            let _ = self.poller.delete(&**listener);
            self.listening = false;
        }
    }

    fn open(&mut self, stream: TcpStream, peer: SocketAddr, read_now: bool) {
        let Ok(slot) = self.pipeline.admit(peer.ip()) else {
            return refuse_at_capacity(stream, &self.pipeline, 429);
        };
        let Ok(stream) = Stream::accepted(stream, self.pipeline.tls.as_ref()) else { return };
        let now = self.now;
        let mut conn = Connection::new(ConnInfo { peer }, now, &self.pipeline, self.mode);
        conn.set_edge_triggered();
        if self.srpt {
            conn.set_yielding();
        }
        if let Some(helpers) = &self.helpers {
            conn.set_warm_ahead(helpers.warm_window());
        }
        if !read_now {
            conn.await_readable();
        }
        let conn = Conn {
            stream,
            conn,
            waits: Waits::Read,
            readable: true,
            writable: true,
            timer: Timer::default(),
            _slot: slot,
        };
        // Full slab: dropping the stream refuses the connection.
        let Some(token) = self.conns.insert(conn) else { return };
        let Some(c) = self.conns.get_mut(token) else { return };
        // Once, for both directions, edge-triggered: from now on the
        // connection costs no epoll_ctl, whatever it does.
        if let Err(e) = self.poller.add(&c.stream, token, Interest::BOTH, Trigger::Edge) {
            self.pipeline.error_log.error(format_args!("epoll: {e}"));
            self.conns.remove(token);
            return;
        }
        // Clients usually send their request right after connecting: try to
        // read it now rather than after another round through epoll (or,
        // not `read_now`, only arm its deadline).
        self.drive(token);
    }

    fn ready(&mut self, token: u64, event: Event) {
        if token & PIPE != 0 {
            // A script's pipe: it matters only while a script runs (events
            // of an earlier script's pipes may still be queued).
            if self.conns.get(token & !PIPE).is_some_and(|c| c.waits == Waits::Pipes) {
                self.due(token & !PIPE);
            }
            return;
        }
        // None: the connection closed earlier in this batch.
        let Some(c) = self.conns.get_mut(token) else { return };
        if event.is_readable() {
            c.readable = true;
            c.conn.readable();
        }
        if event.is_read_closed() {
            c.conn.read_closed();
        }
        c.writable |= event.is_writable();
        match c.waits {
            // The client is gone while a helper works for it: close now;
            // the reply will find no connection under this token.
            Waits::Helper if event.is_gone() => {
                self.conns.remove(token);
            }
            Waits::Helper => {}
            Waits::Pipes => self.due(token),
            Waits::Read if c.readable => self.due(token),
            Waits::Write if c.writable => self.due(token),
            Waits::Read | Waits::Write => {}
        }
    }

    /// A connection can make progress: drive it now, or (SRPT) in this
    /// turn's order.
    fn due(&mut self, token: u64) {
        if self.srpt {
            self.turn.push(token);
        } else {
            self.drive(token);
        }
    }

    /// SRPT on the loop's CPU: the turn's ready connections, and those that
    /// yielded last turn, each driven once, fewest bytes left first (ties
    /// in token order), so small responses are not stuck behind a large
    /// one's writes; a large one moves a quantum per turn. `srpt-group`
    /// drives the connections sending one file back to back.
    fn serve_turn(&mut self) {
        let pipeline = self.pipeline.clone();
        let Schedule::Srpt(srpt) = &pipeline.settings.schedule else { return };
        let mut order = std::mem::take(&mut self.order);
        let now = self.now;
        for token in self.turn.drain(..).chain(self.again.drain(..)) {
            if let Some(c) = self.conns.get(token) {
                order.push(Due::new(c.conn.remaining(srpt, now), c.conn.document(), token));
            }
        }
        schedule::order_turn(&mut order, srpt.group);
        for &Due { token, .. } in &order {
            // An earlier drive this turn may have closed or moved it on.
            let still_due = self.conns.get(token).is_some_and(|c| match c.waits {
                Waits::Pipes => true,
                Waits::Read => c.readable,
                Waits::Write => c.writable,
                Waits::Helper => false,
            });
            if still_due {
                self.drive(token);
            }
        }
        order.clear();
        self.order = order;
    }

    /// Runs the connection's state machine as far as its socket allows.
    fn drive(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(token) else { return };
        // A connection whose request the kernel holds is not silent, though
        // its readiness has not been seen yet (edge-triggered, this turn): a
        // stop must answer it, not close it under its request (a reset for
        // a client that raced the reload), as `uring`'s stop does.
        let stopping =
            self.finish.is_stopping() && !rustix::io::ioctl_fionread(&c.stream).is_ok_and(|n| n > 0);
        let (p, now) = (&*self.pipeline, self.now);
        c.conn.set_now(now);
        let drive = |c: &mut Conn| c.conn.drive(&c.stream, p, stopping);
        let mut want = drive(c);
        // Helpers are for what may block; a request the loop can answer from
        // memory (a validated cache hit) never leaves it, as in Flash.
        let mut parked = None;
        while want == Want::Process {
            let Some(request) = c.conn.take_request() else { break };
            match p.handle_in_memory(&request) {
                Some(reply) => {
                    c.conn.set_now(now);
                    c.conn.deliver(reply, p);
                    want = drive(c);
                }
                None => {
                    parked = Some(request);
                    break;
                }
            }
        }
        self.settle(token, want, &mut parked);
    }

    /// The graceful stop: refuse new connections, close idle ones, let
    /// in-flight requests finish.
    fn begin_stop(&mut self) {
        // No deadline of its own: the runtime bounds the graceful finish.
        if !self.finish.begin(None) {
            return;
        }
        // The stop pipe stays readable: a level-triggered loop would spin on it.
        let _ = self.poller.delete(self.shutdown.wake_fd());
        if let Some(listener) = self.listener.take() {
            // Dropping the last reference closes the listener, so new
            // connections are refused rather than left in the backlog.
            if self.listening {
                let _ = self.poller.delete(&*listener);
            }
            self.listening = false;
        }
        self.accept_pause.lift();
        self.drive_all_stopping();
    }
}

impl Core for Loop {
    type Conn = Conn;
    const WARMS_AHEAD: bool = true;
    const NO_HELPER_LEFT: &'static str = "no helper left to take a request";

    fn parts(&mut self) -> Parts<'_, Conn> {
        Parts {
            conns: &mut self.conns,
            timers: &mut self.timers,
            helpers: &mut self.helpers,
            pipeline: &self.pipeline,
            accept_pause: &mut self.accept_pause,
            now: self.now,
        }
    }

    fn drive(&mut self, token: u64) {
        Loop::drive(self, token);
    }

    /// Closing the descriptor also removes it from epoll; a helper's reply
    /// for it will find no connection under its token.
    fn close(&mut self, token: u64) {
        self.conns.remove(token);
    }

    fn watch_listener(&mut self) {
        Loop::watch_listener(self);
    }

    fn come_back(&mut self, token: u64) {
        self.again.push(token);
    }

    /// Once per script, edge-triggered like the socket; closing a pipe
    /// removes it from the set.
    fn watch_sources(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(token) else { return };
        for (fd, interest) in c.conn.new_sources() {
            if let Err(e) = self.poller.add(fd, token | PIPE, interest, Trigger::Edge) {
                self.pipeline.error_log.error(format_args!("epoll: a CGI pipe: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests;
