//! The loop a blocking thread runs around a connection: the only code in
//! the connection that waits.

use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use transport::poller::Interest;
use transport::Shutdown;

use super::*;
use crate::admission::IpSlot;
use crate::Pipeline;

impl Connection {
    /// For blocking threads after [`Want::Source`]: waits until the socket
    /// or a pipe is ready as [`waiting`](Self::waiting) says, or `until`.
    pub fn wait_blocking(&self, sock: &impl AsFd, until: Instant) {
        let waiting = self.waiting();
        let flags = |i: Interest| {
            let mut f = PollFlags::empty();
            if i.is_readable() {
                f |= PollFlags::IN;
            }
            if i.is_writable() {
                f |= PollFlags::OUT;
            }
            f
        };
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(waiting.sources.len() + 1);
        if let Some(interest) = waiting.socket {
            fds.push(PollFd::new(sock, flags(interest)));
        }
        for (fd, interest) in &waiting.sources {
            fds.push(PollFd::from_borrowed_fd(*fd, flags(*interest)));
        }
        let left = until.saturating_duration_since(Instant::now());
        let timeout = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos().into() };
        // EINTR or an error: the caller drives again and finds out.
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }
}

/// How often a blocking thread wakes to check its deadlines and the stop
/// flag: the read and write timeout [`serve_blocking`] expects its sockets to
/// have (set once on the listener with
/// `transport::listener::set_accepted_defaults`, inherited by every accepted socket).
pub const BLOCKING_TICK: Duration = Duration::from_millis(250);

/// Serves one connection on the calling thread with blocking I/O — the
/// loop every thread- and process-based model runs.
///
/// The socket's [`BLOCKING_TICK`] timeouts turn blocking reads and writes
/// into periodic checks of the connection's deadlines and of `stop`, at no
/// cost while data flows.
pub fn serve_blocking(stream: TcpStream, p: &Pipeline, stop: &Shutdown) {
    let Ok(peer) = stream.peer_addr() else { return };
    let Ok(stream) = transport::Stream::accepted(stream, p.tls.as_ref()) else { return };
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), p, Mode::Inline);
    conn.set_clock(Instant::now);
    loop {
        let deadline = match conn.drive(&stream, p, stop.is_triggered()) {
            Want::Close => return,
            Want::Read(deadline) | Want::Write(deadline) => deadline,
            Want::Source(deadline) => {
                // A script runs: wait for it or the client, a tick at most.
                conn.wait_blocking(&stream, deadline.min(Instant::now() + BLOCKING_TICK));
                deadline
            }
            Want::Process => unreachable!("drive runs the pipeline inline"),
            Want::Again => unreachable!("a blocking thread's connection does not yield"),
            Want::Warm => unreachable!("a blocking thread's connection does not warm ahead"),
        };
        if Instant::now() >= deadline && !conn.timed_out(p) {
            return;
        }
    }
}

/// How long a thread waits for a client to take more of a response
/// before it hands the connection to the gate ([`Client`]) to finish the
/// write: long enough for a reader on a healthy link to drain a socket
/// buffer, short enough that slow readers cannot collect the threads.
pub const WRITE_PATIENCE: Duration = Duration::from_millis(20);

/// How long a thread waits for a keep-alive client's next request before
/// it gives the connection back to the gate.
pub const KEEPALIVE_PATIENCE: Duration = Duration::from_millis(2);

/// A client connection of a *gated* blocking model: its request heads are
/// read by a gate (an epoll loop on the accepting side, non-blocking, no
/// thread per connection), and a thread takes it only once a whole head
/// has arrived ([`serve_ready`]), giving it back when it waits for the
/// client again — for its next head (idle keep-alive), the rest of a body
/// it drops, or a slow reader's window. So a client that sends slowly, or
/// not at all, holds no thread: Apache's event MPM keeps idle keep-alive
/// connections off its workers the same way.
#[derive(Debug)]
pub struct Client {
    stream: transport::Stream,
    conn: Connection,
    /// When a head was last found complete: its wait for a thread begins.
    ready_since: Option<Instant>,
    /// Its place under `--max-conns-per-ip`, freed when the client goes.
    _slot: Option<IpSlot>,
}

/// What a gated client waits for ([`Client::drive_head`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Gated {
    /// A whole head arrived: give the client to a thread ([`serve_ready`]).
    Ready,
    /// Drive again when readable, or call [`Client::timed_out`] at the deadline.
    Read(Instant),
    /// Drive again when writable, or call [`Client::timed_out`] at the deadline.
    Write(Instant),
    /// Drop it.
    Close,
}

impl Client {
    /// A connection just accepted, in the count of its address (`slot`):
    /// its head deadline starts now, not when a thread takes it. `None` if
    /// the socket is already gone or cannot be made non-blocking.
    pub fn accepted(stream: TcpStream, p: &Pipeline, slot: Option<IpSlot>) -> Option<Client> {
        let peer = stream.peer_addr().ok()?;
        stream.set_nonblocking(true).ok()?;
        let stream = transport::Stream::accepted(stream, p.tls.as_ref()).ok()?;
        let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), p, Mode::HandOut);
        // The gate's loop and the thread that serves it both may wait in a drive.
        conn.set_clock(Instant::now);
        Some(Client { stream, conn, ready_since: None, _slot: slot })
    }

    /// The socket, for the gate's poller.
    pub fn socket(&self) -> &TcpStream {
        self.stream.tcp()
    }

    /// Reads and parses (answering errors, sending what a thread left
    /// unsent, dropping unwanted bodies), without ever running a request:
    /// stops at [`Gated::Ready`] once one is parsed.
    pub fn drive_head(&mut self, p: &Pipeline, stopping: bool) -> Gated {
        self.conn.set_mode(Mode::HandOut);
        match self.conn.drive(&self.stream, p, stopping) {
            Want::Process => {
                self.ready_since = Some(Instant::now());
                Gated::Ready
            }
            Want::Read(deadline) => Gated::Read(deadline),
            Want::Write(deadline) => Gated::Write(deadline),
            Want::Close => Gated::Close,
            // Only a running request streams, yields or warms ahead, and none runs here.
            Want::Source(_) | Want::Again | Want::Warm => Gated::Close,
        }
    }

    /// Answers its ready request with 503 and `Retry-After` (the model has
    /// no thread for it); drive it on to send that.
    pub fn refuse_busy(&mut self, p: &Pipeline) {
        self.conn.refuse_ready(503, p);
    }

    /// The deadline of the last [`Gated::Read`] or [`Gated::Write`] passed:
    /// `true` if there is a response to send (a 408): drive it again.
    pub fn timed_out(&mut self, p: &Pipeline) -> bool {
        self.conn.timed_out(p)
    }
}

/// Serves a [`Gated::Ready`] client's requests on the calling thread, as
/// long as it keeps up; returns it when it waits for the client — the
/// gate watches it then — or `None` once it is closed.
pub fn serve_ready(mut client: Client, p: &Pipeline, stop: &Shutdown) -> Option<Client> {
    if let Some(since) = client.ready_since.take() {
        client.conn.waited_for_thread(since.elapsed());
    }
    client.conn.set_mode(Mode::Inline);
    loop {
        let Client { stream, conn, .. } = &mut client;
        let deadline = match conn.drive(stream, p, stop.is_triggered()) {
            Want::Close => return None,
            // Between requests (or dropping a body, or lingering): the
            // client's pace, not the server's, so not a thread's to wait
            // for — but a keep-alive client's next request usually follows
            // its response within a moment, and catching it here saves two
            // trips through the gate (they halved `pool`'s keep-alive
            // throughput). Once per request: a byte of a head arriving
            // ends the connection's idleness, and the next wait gives it back.
            Want::Read(_) if conn.awaits_client() => {
                if !conn.is_idle()
                    || !wait_socket(stream.tcp(), PollFlags::IN, Instant::now() + KEEPALIVE_PATIENCE)
                {
                    return Some(client);
                }
                continue;
            }
            Want::Read(deadline) => {
                wait_socket(stream.tcp(), PollFlags::IN, deadline.min(Instant::now() + BLOCKING_TICK));
                deadline
            }
            Want::Write(deadline) => {
                let patience = deadline.min(Instant::now() + WRITE_PATIENCE);
                if !wait_socket(stream.tcp(), PollFlags::OUT, patience) && Instant::now() < deadline {
                    return Some(client);
                }
                deadline
            }
            Want::Source(deadline) => {
                conn.wait_blocking(stream, deadline.min(Instant::now() + BLOCKING_TICK));
                deadline
            }
            Want::Process | Want::Again | Want::Warm => {
                unreachable!("drive runs the pipeline inline and neither yields nor warms ahead")
            }
        };
        if Instant::now() >= deadline && !conn.timed_out(p) {
            return None;
        }
    }
}

/// Waits until `sock` is ready for `flags` or `until`; true if it is.
fn wait_socket(sock: &TcpStream, flags: PollFlags, until: Instant) -> bool {
    let left = until.saturating_duration_since(Instant::now());
    let timeout = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos().into() };
    let mut fds = [PollFd::new(sock, flags)];
    matches!(rustix::event::poll(&mut fds, Some(&timeout)), Ok(1..))
}
