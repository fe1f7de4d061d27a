//! A response the connection streams instead of writing it from a queue.
//!
//! Most answers are an [`Outbound`](transport::Outbound) built at once.
//! Some are produced while they are sent, by something that runs beside
//! the connection — a CGI script today, given the request's body whole.
//! The pipeline answers such a request with a [`Start`]: made by the
//! handler the request's route names (`cgi_stream.rs` for a script), on
//! whatever thread ran the pipeline, carried to the connection in a
//! [`Reply::Stream`](crate::Reply::Stream). The connection gives it the
//! request's body and gets the [`Responder`], which reads its source and
//! hands what it makes of it to the connection's [`Output`]; the
//! connection sends that (as it sends any response: `Io::Send`), drives
//! the responder, waits for what it says, logs it and goes on with what it
//! leaves.
//! The connection knows nothing of what a responder runs: a handler's
//! lookup, start, body feeding, `100 Continue` check and kill live in its
//! own module.
//!
//! Files, cached entries, error and admin pages are not responders: they
//! are [`Response`](crate::Response)s, a queue written at once, and stay a
//! plain enum variant of [`Reply`](crate::Reply). Making them trait objects
//! would cost an allocation and an indirect call per request on the static
//! path, where `bench/callgrind.sh` holds `event` to its instructions per
//! 500 B keep-alive request within 2 %; a streamed response costs a
//! process or a socket, beside which a box is nothing.

use std::fmt;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use h1::RequestHead;
use transport::poller::Interest;
use transport::{Chunk, Data, Outbound, Progress};

use crate::stats::Phase;
use crate::Pipeline;

/// A streamed responder on its way from the pipeline (which may run on a
/// helper thread) to the connection. Opaque outside the pipeline: models
/// only carry it, inside a [`Reply`](crate::Reply).
#[derive(Debug)]
pub struct Start(pub(crate) Box<dyn Starter>);

/// What a handler that streams hands the connection: a responder ready to
/// start once the request's body is there, or — asked before the body
/// came (`Expect: 100-continue`) — word that its handler exists, so the
/// connection may ask for the body (RFC 9110 §10.1.1).
pub(crate) trait Starter: fmt::Debug + Send {
    /// Where its start is counted (timing on): the phase and the trace's
    /// data column, the names users see; `None` when nothing was started
    /// (the check before a `100 Continue`), whose time then counts as queue.
    fn timed(&self) -> Option<(Phase, &'static str)>;

    /// The responder, given the request's body. `Err`: the status to
    /// answer with instead, nothing having started.
    fn start(self: Box<Self>, body: BodyStart, p: &Pipeline) -> Result<Box<dyn Responder>, u16>;
}

/// How the request's body reaches a responder as it starts.
#[derive(Debug)]
pub(crate) struct BodyStart {
    /// The connection may stay open after the response.
    pub keep_alive: bool,
    /// The body, received in full before the responder starts (de-chunked).
    pub buffered: Vec<u8>,
    /// A body too large for memory, received in full.
    pub spooled: Option<crate::spool::Spool>,
}

/// What [`Responder::pump`] reached.
#[derive(Debug)]
pub(crate) enum Streamed {
    /// Pump again when a descriptor of [`Responder::waiting`] is ready, or
    /// at this deadline.
    Wait(Instant),
    /// The deadline passed without progress: [`Responder::stop`] it.
    TimedOut,
    /// The response is out.
    Done {
        /// The connection must close after it.
        close: bool,
    },
    /// Nothing was sent: answer with this status and close.
    Failed(u16),
    /// Answer this request instead, nothing having been sent (a CGI local
    /// redirect, RFC 3875 §6.2.2); it carries no body.
    Instead {
        /// The request to answer.
        head: Box<RequestHead>,
        /// Where the connection came in.
        local: Option<SocketAddr>,
        /// Internal redirects taken, this one included.
        redirects: u8,
    },
    /// The client is gone or the response cannot be completed: close.
    Abort,
}

/// A streamed response's bytes on their way to the client: the responder
/// adds them, the connection sends them. What is unsent is the
/// responder's to bound (it stops reading its source): a slow client must
/// not make the server hold a script's whole output.
#[derive(Debug, Default)]
pub(crate) struct Output {
    /// Bytes handed to the connection to send.
    queue: Outbound,
    /// Bytes added since the last [`seal`](Self::seal).
    filling: Vec<u8>,
    /// The last send left bytes behind: in the queue, or in a TLS
    /// session's records when the queue is empty.
    blocked: bool,
}

impl Output {
    /// Adds bytes to send.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.filling.extend_from_slice(bytes);
    }

    /// Bytes added and not yet sent.
    pub(crate) fn unsent(&self) -> u64 {
        self.queue.remaining() + self.filling.len() as u64
    }

    /// Whether anything is still to reach the socket.
    pub(crate) fn pending(&self) -> bool {
        self.blocked || !self.filling.is_empty() || !self.queue.is_empty()
    }

    /// Queues what was added since the last call, for the connection to
    /// send. A queue sent whole gives its buffer back for the next bytes:
    /// a long response reuses two buffers.
    pub(crate) fn seal(&mut self) {
        if self.filling.is_empty() {
            return;
        }
        let next = if self.queue.is_empty() { self.queue.recycle() } else { Vec::new() };
        let bytes = std::mem::replace(&mut self.filling, next);
        self.queue.push(Chunk::Bytes(Data::Owned(bytes)));
    }

    /// What the connection sends.
    pub(crate) fn queue(&mut self) -> &mut Outbound {
        &mut self.queue
    }

    /// Counts in what the last send achieved.
    pub(crate) fn sent(&mut self, progress: &Progress) {
        self.blocked = *progress == Progress::Blocked;
    }
}

/// A response produced while it is sent; see the module documentation.
pub(crate) trait Responder: fmt::Debug + Send {
    /// Moves every byte that can move now between the responder and its
    /// sources, adding what it makes for the client to `out`, which the
    /// connection sends (once `out` is empty and nothing is
    /// [`pending`](Output::pending), a response is out). It never waits.
    fn pump(&mut self, out: &mut Output, p: &Pipeline) -> Streamed;

    /// The descriptors the last `pump` waits for, each with its readiness,
    /// exactly (for level-triggered waits), given what is left in `out`;
    /// the client's socket is the connection's business.
    fn waiting(&self, out: &Output) -> Vec<(BorrowedFd<'_>, Interest)>;

    /// Every descriptor it may wait on, with every readiness it can
    /// report: for pollers that register descriptors once.
    fn descriptors(&self) -> Vec<(BorrowedFd<'_>, Interest)>;

    /// The deadline that passed was a timer of its own, not a timeout (a
    /// grace it keeps): it wants `pump` again rather than a stop. It reads
    /// its own clock, as `pump` does: it runs beside the connection.
    fn woken(&self) -> bool {
        false
    }

    /// Its deadline passed: stop it for good. The status of the error page
    /// that can still answer the request if nothing was sent (504 for a
    /// handler too slow, 408 for a client whose body came too slowly);
    /// `None` once output began, when only a close can tell the client.
    fn stop(&mut self, p: &Pipeline) -> Option<u16>;

    /// The status sent (or to be sent), for the log.
    fn status(&self) -> u16;

    /// Body bytes sent (or queued) to the client, for the log.
    fn body_bytes(&self) -> u64;

    /// The phase its run is counted in (timing on), by the name users see.
    fn phase(&self) -> Phase;
}
