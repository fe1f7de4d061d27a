//! The loop a blocking thread runs around a connection: the only code in
//! the connection that waits.

use std::net::{Shutdown as Direction, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use transport::poller::Interest;
use transport::Shutdown;

use super::respond::first_line;
use super::*;
use crate::response;
use crate::{LogRecord, Pipeline};

impl Connection {
    /// For blocking threads after [`Want::Pipes`]: waits until the socket
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
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(waiting.pipes.len() + 1);
        if let Some(interest) = waiting.socket {
            fds.push(PollFd::new(sock, flags(interest)));
        }
        for (fd, interest) in &waiting.pipes {
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
    serve_blocking_from(stream, p, stop, None);
}

/// [`serve_blocking`] for a connection that waited `queued` in the model's
/// handoff queue since it was accepted: the wait counts in its first
/// request (queue phase, total).
pub fn serve_blocking_queued(stream: TcpStream, p: &Pipeline, stop: &Shutdown, queued: Duration) {
    serve_blocking_from(stream, p, stop, Some(queued));
}

pub(super) fn serve_blocking_from(
    stream: TcpStream,
    p: &Pipeline,
    stop: &Shutdown,
    queued: Option<Duration>,
) {
    let Ok(peer) = stream.peer_addr() else { return };
    let Ok(stream) = transport::Stream::accepted(stream, p.tls.as_ref()) else { return };
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), p, Mode::Inline);
    if let Some(queued) = queued {
        conn.queued_before(queued);
    }
    loop {
        let deadline = match conn.drive(&stream, p, stop.is_triggered()) {
            Want::Close => return,
            Want::Read(deadline) | Want::Write(deadline) => deadline,
            Want::Pipes(deadline) => {
                // A script runs: wait for it or the client, a tick at most.
                conn.wait_blocking(&stream, deadline.min(Instant::now() + BLOCKING_TICK));
                deadline
            }
            Want::Process => unreachable!("drive runs the pipeline inline"),
            Want::Again => unreachable!("a blocking thread's connection does not yield"),
        };
        if Instant::now() >= deadline && !conn.timed_out(p) {
            return;
        }
    }
}

/// Turns a connection away because the server is at capacity: a `503`
/// with `Retry-After`, written without blocking and without a thread, then
/// closed. Whatever request bytes already arrived are drained first, so
/// the close does not become a reset that destroys the response.
///
/// Over TLS the connection is only closed: a 503 would cost a handshake,
/// the work the server has no room for (the client sees the close at once,
/// rather than a wait in the backlog).
pub fn refuse_overloaded(stream: TcpStream, p: &Pipeline) {
    if p.tls.is_some() {
        return;
    }
    let Ok(peer) = stream.peer_addr() else { return };
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut drain = [0u8; 4096];
    let mut first = Vec::new();
    while let Ok(n @ 1..) = stream.read_now(&mut drain) {
        if first.is_empty() {
            first.extend_from_slice(&drain[..n]);
        }
    }
    let mut reply =
        response::error_page(&p.settings, 503, h1::Version::Http11, false, false, &[("Retry-After", "1")]);
    let _ = stream.send(&mut reply.out, u64::MAX);
    let _ = stream.shutdown(Direction::Write);
    if p.access_log.is_enabled() {
        p.access_log.record(&LogRecord {
            peer: peer.ip(),
            request_line: first_line(&first),
            status: 503,
            body_bytes: reply.out.bytes_sent().saturating_sub(reply.head_len),
            referer: None,
            user_agent: None,
        });
    }
}
