//! The head being received: parsed as its bytes arrive, each looked at once
//! ([`h1::HeadScan`]), so a head dribbled a byte at a time costs linear work
//! and a byte that breaks a rule is answered as it arrives, not at the end
//! of its line; its deadline; and the plan made from a parsed head.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::Instant;

use h1::{BodyFraming, ParseError, Parsed, RequestHead};

use super::{Connection, Plan, Request, SPARE_HEADS};
use crate::{spares, Pipeline};

impl Connection {
    /// The verdict on the head in the buffer so far: the same as a fresh
    /// `h1::parse_request` of it, looking only at the bytes not seen before.
    #[inline]
    pub(super) fn parse_head(&mut self, limits: &h1::Limits) -> Result<Parsed, ParseError> {
        let mut spare = spares::take(&SPARE_HEADS);
        let parsed = self.head_scan.parse(&self.buf[self.start..self.end], limits, &mut spare);
        if let Some(spare) = spare {
            spares::give_back(&SPARE_HEADS, spare);
        }
        parsed
    }

    /// Decides, before the pipeline runs, what happens to the connection
    /// after this request.
    pub(super) fn plan(
        &self,
        head: RequestHead,
        local: impl FnOnce() -> Option<SocketAddr>,
        p: &Pipeline,
        stopping: bool,
    ) -> (Request, Plan) {
        let settings = &p.settings;
        let (route, normal) = p.route(&head);
        let normal_path = match normal {
            Some(Cow::Owned(path)) => Some(path.into_boxed_str()),
            _ => None,
        };
        if route.reads_body() {
            return self.plan_streamed(head, route, normal_path, local(), p, stopping);
        }
        // A body no handler wants is read and dropped to find the next
        // request (RFC 9112 §6.3). One too large, chunked, or whose sender
        // waits for 100-continue is not worth it: answer and close instead
        // (RFC 9110 §10.1.1 allows either).
        let discard = match head.framing {
            BodyFraming::None | BodyFraming::Length(0) => Some(0),
            BodyFraming::Length(n) if n <= settings.max_body && !head.expect_continue => Some(n),
            _ => None,
        };
        let keep_alive = head.keep_alive
            && discard.is_some()
            && !stopping
            && self.served + 1 < settings.max_keepalive_requests;
        let log = self.log_record(&head, p);
        let unread = self.start < self.end || head.framing != BodyFraming::None || head.keep_alive;
        let head_only = head.method == h1::Method::Head;
        let plan = Plan { log, discard: discard.unwrap_or(0), unread, head_only, body: None };
        let peer = self.info.peer;
        let request = Request { head, keep_alive, peer, local: None, redirects: 0, route, normal_path };
        (request, plan)
    }

    /// When the head being received must be complete: its total deadline,
    /// or earlier if it arrives slower than `--min-rate` after the grace
    /// period (counted from the head's start, the accept for a first one).
    pub(super) fn head_due(&self, p: &Pipeline) -> Instant {
        let started = self.head_deadline - p.settings.header_timeout;
        let bytes = (self.end - self.start) as u64;
        match p.settings.rate_deadline(started, bytes) {
            Some(due) => due.min(self.head_deadline),
            None => self.head_deadline,
        }
    }
}
