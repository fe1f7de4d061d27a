//! One connection of a worker, and one request on it: what they hold.
//! What a worker does with them is in `wire.rs`.

use std::collections::VecDeque;
use std::time::Instant;

use mio::net::TcpStream;

use crate::http::ResponseParser;

#[derive(Debug)]
pub(super) struct Req {
    pub(super) intended: Instant,
    pub(super) actual: Instant,
    pub(super) first_byte: Option<Instant>,
    pub(super) target: u32,
    pub(super) measured: bool,
    pub(super) retried: bool,
    /// Who sends it: the SURGE user of a replayed stream's closed loop,
    /// else the connection (its index in the run).
    pub(super) user: u32,
}

pub(super) struct Conn {
    pub(super) sock: Option<TcpStream>,
    pub(super) connected: bool,
    pub(super) since: Instant,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    pub(super) rbuf: Vec<u8>,
    pub(super) rpos: usize,
    pub(super) rlen: usize,
    pub(super) inflight: VecDeque<Req>,
    pub(super) parser: ResponseParser,
    pub(super) served: u64,
    /// Closed loop: the user has no more requests to send.
    pub(super) done: bool,
    /// Open loop: in the free list.
    pub(super) listed: bool,
    /// Waiting for a timer (think time or reconnect back-off).
    pub(super) waiting: bool,
    /// The timer waited for is a reconnect back-off: no arrival or think
    /// time ends with it, so its lateness is not the generator's.
    pub(super) backing_off: bool,
    /// Closed loop: the request to send when the think time ends.
    pub(super) deferred: Option<Req>,
    /// Bumped on every close, so a read loop notices a replaced socket.
    pub(super) generation: u64,
    /// `https://`: the session over `sock` (requests are written into it,
    /// responses read out of it).
    pub(super) tls: Option<rustls::ClientConnection>,
    /// The session's handshake completed (counted once).
    pub(super) handshaken: bool,
}
