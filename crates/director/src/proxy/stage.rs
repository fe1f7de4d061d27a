//! What one exchange is and holds: where it is ([`Stage`], each stage
//! carrying its own data), what its request has left to send ([`Upload`]),
//! and what becomes of the client connection after it ([`After`]). No
//! combination of them says two things at once: a request that may be
//! resent has no body, a `100 Continue` is owed only for a body, the
//! connection's fate only ever goes from keep-alive to close.

use std::time::Instant;

use h1::ParseError;

use super::queue::Target;
use crate::relay::{RequestBody, ResponseBody};

/// One request/response exchange.
#[derive(Debug)]
pub(super) struct Exchange {
    /// The request as it goes to a backend (empty for the status page).
    pub(super) fwd_head: Vec<u8>,
    /// The request's target, for what the pending queue learns of its
    /// answer's size; `None` for a HEAD (no body to expect) and with
    /// `--queue-order fifo` (nothing is learned).
    pub(super) target: Option<Target>,
    /// The client's version: how its answer is written.
    pub(super) version: h1::Version,
    /// Whether its answer has a body.
    pub(super) answer: Answer,
    /// What the client connection does once this exchange is over.
    pub(super) after: After,
    /// The request body still to go to the backend.
    pub(super) upload: Upload,
    pub(super) attempts: u32,
    /// Where it is: parsed, queued, attached, relaying, done.
    pub(super) stage: Stage,
    /// The request was parsed (REQUEST done).
    pub(super) started: Instant,
    /// The status answered (relayed or local).
    pub(super) status: u16,
}

/// What the client's answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// A head and a body.
    Full,
    /// The head alone: the request was a HEAD.
    HeadOnly,
}

impl Answer {
    pub(super) fn head_only(self) -> bool {
        self == Answer::HeadOnly
    }
}

/// What becomes of the client connection once the exchange is over. It
/// goes from `KeepAlive` to `Close` (the client, a backend or the
/// director's own answer said so), never back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum After {
    KeepAlive,
    Close,
}

impl After {
    /// Keep-alive unless `keep` is false.
    pub(super) fn close_unless(&mut self, keep: bool) {
        if !keep {
            *self = After::Close;
        }
    }

    pub(super) fn keeps_alive(self) -> bool {
        self == After::KeepAlive
    }
}

/// The request body, as the exchange sends it to a backend.
#[derive(Debug)]
pub(super) enum Upload {
    /// The request has none, so it may be sent again after a reused
    /// backend connection failed before any response byte (the backend
    /// closing it as idle while the request came).
    Bodiless,
    /// Its body, still to go (`RequestBody::Done` once all went): it is
    /// never sent twice. With [`Expect::Continue`], the client waits for a
    /// `100 Continue` before it sends it.
    Body(RequestBody, Expect),
}

/// What the client waits for before sending its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// Nothing (no `Expect: 100-continue`, or the director answered it
    /// already while reading the body itself).
    Nothing,
    /// `100 Continue`, sent when a backend takes the request.
    Continue,
}

impl Upload {
    pub(super) fn new(body: RequestBody, expect: Expect) -> Upload {
        if body.is_done() {
            Upload::Bodiless
        } else {
            Upload::Body(body, expect)
        }
    }

    /// Nothing (more) to send.
    pub(super) fn is_done(&self) -> bool {
        match self {
            Upload::Bodiless => true,
            Upload::Body(body, _) => body.is_done(),
        }
    }

    /// The request may go to a backend again after a failed attempt.
    pub(super) fn resendable(&self) -> bool {
        matches!(self, Upload::Bodiless)
    }

    /// A `100 Continue` is owed when a backend takes the request.
    pub(super) fn owes_continue(&self) -> bool {
        matches!(self, Upload::Body(body, Expect::Continue) if !body.is_done())
    }

    /// [`RequestBody::forward`].
    pub(super) fn forward(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ParseError> {
        match self {
            Upload::Bodiless => Ok(0),
            Upload::Body(body, _) => body.forward(input, out),
        }
    }

    /// Drops a `Content-Length` body whose bytes are all among the
    /// `buffered` ones, so the connection can stay open after an answer of
    /// the director's own: `Some(n)`, drop the first `n` buffered bytes (0
    /// when no body is left); `None`, the body is not all here.
    pub(super) fn discard(&mut self, buffered: usize) -> Option<usize> {
        match self {
            Upload::Bodiless => Some(0),
            Upload::Body(body, _) => match *body {
                RequestBody::Done => Some(0),
                RequestBody::Length(n) if (buffered as u64) >= n => {
                    *body = RequestBody::Done;
                    Some(n as usize)
                }
                _ => None,
            },
        }
    }
}

/// Where an exchange is, paper 002's REQUEST → PEEK → RECEIVE → RESPONSE as
/// the exchange sees it. The client connection's `ClientState` says what
/// its socket waits for; this says what the exchange holds.
#[derive(Debug)]
pub(super) enum Stage {
    /// Parsed; PEEK decides where it goes (again, after a failed attempt).
    Parsed,
    /// In the pending queue since then: no backend had room.
    Queued(Instant),
    /// On a backend connection: the request goes out, the response head
    /// is awaited (RECEIVE).
    Attached(Attachment),
    /// The response head went to the client, the body follows (RESPONSE);
    /// a failure from here on can only abort the connection.
    Relaying(Attachment, ResponseBody),
    /// Answered, by a backend or by the director: over once the client's
    /// output is flushed.
    Done,
}

/// An exchange's hold on a backend connection.
#[derive(Debug)]
pub(super) struct Attachment {
    /// The backend, and the token of its connection.
    pub(super) backend: (usize, u64),
    /// The backend's requests in flight when this one was attached.
    pub(super) inflight: usize,
    /// When the whole request (head and body) had been written to the
    /// backend: the limiter's latency clock starts there, so a client's
    /// slow upload is not the backend's latency. `None` before (an early
    /// answer or a failure during the upload gives no latency sample).
    pub(super) sent: Option<Instant>,
}

impl Exchange {
    /// The exchange of an answer the director gives before (or without)
    /// reading a request: the connection closes after it.
    pub(super) fn local(status: u16) -> Exchange {
        Exchange {
            fwd_head: Vec::new(),
            target: None,
            version: h1::Version::Http11,
            answer: Answer::Full,
            after: After::Close,
            upload: Upload::Body(RequestBody::Done, Expect::Nothing),
            attempts: 0,
            stage: Stage::Done,
            started: Instant::now(),
            status,
        }
    }

    pub(super) fn is_queued(&self) -> bool {
        matches!(self.stage, Stage::Queued(_))
    }

    pub(super) fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done)
    }

    /// The response head has gone to the client.
    pub(super) fn head_sent(&self) -> bool {
        matches!(self.stage, Stage::Relaying(..) | Stage::Done)
    }

    pub(super) fn attachment(&self) -> Option<&Attachment> {
        match &self.stage {
            Stage::Attached(a) | Stage::Relaying(a, _) => Some(a),
            _ => None,
        }
    }

    /// The backend and its connection's token, while attached.
    pub(super) fn backend(&self) -> Option<(usize, u64)> {
        self.attachment().map(|a| a.backend)
    }

    /// Lets go of the backend connection: an attached exchange goes back to
    /// PEEK's decision, a relaying one is over.
    pub(super) fn detach(&mut self) -> Option<Attachment> {
        match std::mem::replace(&mut self.stage, Stage::Parsed) {
            Stage::Attached(a) => Some(a),
            Stage::Relaying(a, _) => {
                self.stage = Stage::Done;
                Some(a)
            }
            other => {
                self.stage = other;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{ClientFraming, Framing};

    fn exchange(stage: Stage) -> Exchange {
        Exchange {
            fwd_head: b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            target: Some(Target::of("/")),
            version: h1::Version::Http11,
            answer: Answer::Full,
            after: After::KeepAlive,
            upload: Upload::Bodiless,
            attempts: 0,
            stage,
            started: Instant::now(),
            status: 0,
        }
    }

    fn attachment() -> Attachment {
        Attachment { backend: (1, 42), inflight: 3, sent: None }
    }

    /// Letting go of a backend sends an attached exchange back to PEEK's
    /// decision (a retry, or an answer of the director's own) and ends a
    /// relaying one; a queued or finished exchange holds no backend.
    #[test]
    fn detaching_follows_the_stage() {
        let mut ex = exchange(Stage::Attached(attachment()));
        assert_eq!(ex.backend(), Some((1, 42)));
        assert!(!ex.head_sent());
        assert_eq!(ex.detach().map(|a| a.backend), Some((1, 42)));
        assert!(matches!(ex.stage, Stage::Parsed));
        assert_eq!(ex.backend(), None);

        let body = ResponseBody::new(Framing::Length(5), ClientFraming::Same, false);
        let mut ex = exchange(Stage::Relaying(attachment(), body));
        assert!(ex.head_sent(), "after the head, a failure can only abort");
        assert_eq!(ex.detach().map(|a| a.inflight), Some(3));
        assert!(ex.is_done() && ex.head_sent());

        let mut ex = exchange(Stage::Queued(Instant::now()));
        assert!(ex.is_queued());
        assert!(ex.detach().is_none());
        assert!(ex.is_queued(), "still in the queue, to be taken out of it");

        let mut ex = exchange(Stage::Done);
        assert!(ex.detach().is_none() && ex.is_done());
    }

    /// Only a request without a body may be resent; a body owes its
    /// `100 Continue` until all of it went, and then nothing is left.
    #[test]
    fn an_upload_is_resendable_only_without_a_body() {
        let none = Upload::new(RequestBody::Done, Expect::Continue);
        assert!(none.resendable() && none.is_done());
        assert!(!none.owes_continue(), "no body, no 100 Continue");

        let mut body = Upload::new(RequestBody::Length(5), Expect::Continue);
        assert!(!body.resendable() && !body.is_done() && body.owes_continue());
        let mut out = Vec::new();
        assert_eq!(body.forward(b"hel", &mut out).ok(), Some(3));
        assert!(!body.is_done() && body.owes_continue());
        assert_eq!(body.forward(b"loGET /", &mut out).ok(), Some(2), "the next request is left");
        assert_eq!(out, b"hello");
        assert!(body.is_done() && !body.owes_continue());
        assert!(!body.resendable(), "a body that went is never sent twice");

        let plain = Upload::new(RequestBody::Length(1), Expect::Nothing);
        assert!(!plain.owes_continue());
    }

    /// A local answer can keep the connection only past a body that is
    /// here whole.
    #[test]
    fn a_body_is_discarded_only_when_here_whole() {
        assert_eq!(Upload::Bodiless.discard(0), Some(0));
        let mut body = Upload::new(RequestBody::Length(10), Expect::Nothing);
        assert_eq!(body.discard(9), None);
        assert!(!body.is_done());
        assert_eq!(body.discard(12), Some(10));
        assert!(body.is_done());
        assert_eq!(body.discard(2), Some(0), "dropped once");
        let mut chunked = Upload::new(RequestBody::chunked(100), Expect::Nothing);
        assert_eq!(chunked.discard(1000), None, "a chunked body's end is not known here");
    }

    #[test]
    fn the_connections_fate_goes_only_to_close() {
        let mut after = After::KeepAlive;
        after.close_unless(true);
        assert!(after.keeps_alive());
        after.close_unless(false);
        assert_eq!(after, After::Close);
        after.close_unless(true);
        assert_eq!(after, After::Close, "never back to keep-alive");
    }
}
