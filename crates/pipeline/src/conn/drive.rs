//! The connection's I/O, done for it: [`Connection::step`] runs the state
//! machine until it needs the outside world and says what ([`Io`]); the
//! driver here performs that over a [`Wire`] and reports back, so the
//! models keep calling [`Connection::drive`] (`uring` performs the steps
//! itself) while the core itself is fed bytes and results (the unit tests
//! in `tests/push.rs` feed it slices).

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use transport::{not_now, Progress, Wire};

use super::*;

/// What the connection needs done before it can go on.
#[derive(Debug, PartialEq, Eq)]
pub enum Io {
    /// Read into [`Connection::read_room`] and report with [`Connection::received`].
    Read,
    /// Send [`Connection::outbound`], at most `limit` bytes of it, and report
    /// with [`Connection::sent`].
    Send {
        /// The most to send now.
        limit: u64,
    },
    /// SRPT moved the response to another class: give the socket this
    /// priority and, the first time, this limit of unsent bytes. Best
    /// effort: a socket that refuses keeps its order.
    Prioritize {
        /// `SO_PRIORITY`.
        priority: u32,
        /// `TCP_NOTSENT_LOWAT`.
        unsent_limit: Option<u32>,
    },
    /// Shut our sending side (the FIN after a response when the client may
    /// still be sending: lingering).
    ShutdownWrite,
    /// Nothing more now: what the driver waits for.
    Wait(Want),
}

/// What the transport knows that the connection needs only now and then,
/// asked when needed: asking eagerly would cost a call per request (or a
/// `getsockname`).
pub trait Facts {
    /// The transport buffers decrypted bytes the socket no longer shows
    /// (TLS): a short read does not mean the input is drained.
    fn holds_more(&self) -> bool;
    /// A TLS handshake is still under way.
    fn handshaking(&self) -> bool;
    /// When the TLS handshake completed.
    fn handshake_ended(&self) -> Option<Instant>;
    /// The connection's local address (a script's `SERVER_ADDR`).
    fn local_addr(&self) -> Option<SocketAddr>;
}

/// A [`Wire`]'s answers as [`Facts`].
pub(super) struct WireFacts<'a>(pub &'a dyn Wire);

impl Facts for WireFacts<'_> {
    #[inline]
    fn holds_more(&self) -> bool {
        self.0.holds_more()
    }
    fn handshaking(&self) -> bool {
        self.0.handshaking()
    }
    fn handshake_ended(&self) -> Option<Instant> {
        self.0.handshake_ended()
    }
    fn local_addr(&self) -> Option<SocketAddr> {
        self.0.local_addr()
    }
}

/// The result of the last [`Io::Read`] or [`Io::Send`], until the step
/// that asked for it takes it. One byte: the core only tells these apart.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Nothing,
    /// A read into a spare buffer lent for it is under way: the buffer goes
    /// back unless bytes came.
    Lent,
    /// Bytes arrived.
    Bytes,
    /// Bytes arrived into an empty buffer: a head (or a body) begins.
    Began,
    Eof,
    /// Nothing now (`EAGAIN`, a blocking socket's timeout).
    NotNow,
    Failed,
    Sent(Progress),
}

impl Connection {
    /// Makes as much progress as `wire` allows: reads, parses, runs the
    /// pipeline for the requests its [`Mode`] runs inline (stopping with
    /// [`Want::Process`] at the others), writes. `stopping` asks to close at
    /// the next request boundary (graceful shutdown).
    ///
    /// The wire is a trait object, not a type parameter: generic, the state
    /// machine was compiled in each model's crate, with inlining that cost
    /// more than the three indirect calls a request now makes
    /// (BENCHMARKS.md, "Why the code is as it is").
    pub fn drive(&mut self, wire: &dyn Wire, p: &Pipeline, stopping: bool) -> Want {
        let facts = WireFacts(wire);
        let want = loop {
            match self.step(&facts, p, stopping) {
                Io::Read => {
                    let read = wire.read(self.read_room());
                    self.received(read);
                }
                Io::Send { limit } => {
                    let sent = wire.send(self.outbound(), limit);
                    self.sent(sent);
                }
                Io::Prioritize { priority, unsent_limit } => {
                    if let Some(bytes) = unsent_limit {
                        let _ = wire.set_unsent_limit(bytes);
                    }
                    let _ = wire.set_priority(priority);
                }
                Io::ShutdownWrite => wire.shutdown_write(),
                Io::Wait(want) => break want,
            }
        };
        self.set_gauge(&want);
        want
    }

    /// What is being sent, for [`Io::Send`]: a response, the `100
    /// Continue` before a body, or what a streamed responder made so far.
    pub fn outbound(&mut self) -> &mut transport::Outbound {
        match &mut self.state {
            State::Write(pending) => &mut pending.reply.out,
            State::Collect(collect) => &mut collect.interim,
            State::Stream(streaming) => streaming.out.queue(),
            _ => panic!("Io::Send is asked only while a response is written"),
        }
    }

    /// Reports the result of [`Io::Send`].
    #[inline]
    pub fn sent(&mut self, result: io::Result<Progress>) {
        self.outcome = match result {
            Ok(progress) => Outcome::Sent(progress),
            Err(_) => Outcome::Failed,
        };
    }

    /// Reports the result of [`Io::Read`] into [`read_room`](Self::read_room).
    #[inline]
    pub fn received(&mut self, result: io::Result<usize>) {
        let (result, short, began) = self.take_in(result);
        self.outcome = match result {
            Ok(0) => Outcome::Eof,
            Ok(_) => {
                // Until `take_read` asks whether the transport holds more.
                self.drained = self.edge_triggered && !self.eof_pending && short;
                if began {
                    Outcome::Began
                } else {
                    Outcome::Bytes
                }
            }
            Err(e) if not_now(&e) => Outcome::NotNow,
            Err(_) => Outcome::Failed,
        };
    }

    /// The read the step asked for, if it was reported. A driver told of
    /// every new byte skips the read a short one showed would find nothing.
    pub(super) fn take_read(&mut self, facts: &impl Facts) -> Option<Outcome> {
        match std::mem::replace(&mut self.outcome, Outcome::Nothing) {
            read @ (Outcome::Bytes | Outcome::Began) => {
                if self.drained && facts.holds_more() {
                    self.drained = false;
                }
                Some(read)
            }
            Outcome::Eof => Some(Outcome::Eof),
            Outcome::NotNow => Some(Outcome::NotNow),
            Outcome::Failed => Some(Outcome::Failed),
            Outcome::Nothing | Outcome::Lent | Outcome::Sent(_) => None,
        }
    }

    /// The step's read, when it needs no I/O: input already found drained.
    pub(super) fn read_at_once(&self) -> Option<Outcome> {
        self.drained.then_some(Outcome::NotNow)
    }
}
