//! A response the connection streams instead of writing it from a queue.
//!
//! Most answers are an [`Outbound`](transport::Outbound) built at once.
//! Some are produced while they are sent, by something that runs beside
//! the connection — a CGI script today, given the request's body whole.
//! The pipeline answers such a request with a [`Start`]: made by the
//! handler the request's route names (`cgi_stream.rs` for a script), on
//! whatever thread ran the pipeline, carried to the connection in a
//! [`Reply::Stream`](crate::Reply::Stream). The connection gives it the
//! request's body and gets the [`Responder`], which moves its own bytes
//! from its source to the client's [`Wire`]; the connection only drives
//! it, waits for what it says, logs it and goes on with what it leaves.
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
use transport::Wire;

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

/// A response produced while it is sent; see the module documentation.
pub(crate) trait Responder: fmt::Debug + Send {
    /// Moves every byte that can move now, in both directions.
    fn pump(&mut self, wire: &dyn Wire, p: &Pipeline) -> Streamed;

    /// What the last `pump` waits for, exactly (for level-triggered
    /// waits): the client's readiness, and each descriptor's.
    fn waiting(&self) -> (Option<Interest>, Vec<(BorrowedFd<'_>, Interest)>);

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
