//! What the two single-threaded loops share: `event` (readiness from
//! epoll; `amped` is `event` with helpers) and `uring` (completions from an
//! io_uring). Each loop turns what its kernel interface reports into
//! `drive`s of its connections; [`Core`] is the rest of a turn, the same in
//! both:
//!
//! ```text
//!   wait (until the next timer, or the accept pause's end)   ◀── transport::turn::wait_timeout
//!   read the clock once: the turn's `now`
//!   changed files first                                       ◀── files_first
//!   readiness / completions ─▶ drive(token) ─▶ Want ─▶ timer, waits  ◀── settle
//!   helpers' replies ─▶ deliver ─▶ drive                      ◀── collect_replies
//!   the stop ─▶ every connection driven as stopping           ◀── drive_all_stopping
//!   deadlines passed ─▶ timed_out ─▶ drive or close           ◀── end_turn (transport::turn::Turn)
//!   accept again if the pause is over, or a slot freed
//! ```
//!
//! The loop supplies its connections, timers and helpers ([`Parts`]),
//! `drive`, `close` and `watch_listener`, and its registration primitives
//! for what a connection wants (`come_back`, `watch_sources`); the core is
//! generic over the loop, so every call from it to the loop is a direct one.
//! What names no connection is `transport::turn`'s, which the director's
//! loop runs too: the wait's timeout, the accept pause, the stop, and the
//! end of a turn (`Turn::end_turn`: deadlines passed, earliest first, to
//! the loop's `expire`, stale entries pruned, the pause ended, the
//! listener watched), which a `Core` loop runs through [`AsTurn`].

use std::time::Instant;

use pipeline::{Connection, Pipeline, Request, Want};
use transport::deadlines::{Deadlines, HasTimer};
use transport::slab::Slab;
use transport::turn::{AcceptPause, Turn, TurnParts};

use crate::helpers::Helpers;

/// What a loop's connection is waiting for between its drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waits {
    Read,
    Write,
    /// Its request is with a helper; its socket is left alone meanwhile
    /// (further pipelined requests wait in its buffer, in order).
    Helper,
    /// A responder's pipes are open: any event on them or the socket drives it.
    Pipes,
}

/// A loop's connection as the core sees it.
pub(crate) trait LoopConn: HasTimer {
    fn conn(&mut self) -> &mut Connection;
    /// Its request is with a helper: a reply is due, and neither its
    /// deadline nor the stop drives it meanwhile.
    fn awaits_helper(&self) -> bool;
    /// It now waits for `waits`.
    fn wait(&mut self, waits: Waits);
    /// It read or wrote until its socket had no more (`Read`, `Write`): a
    /// readiness loop forgets the readiness it saw, as the next edge will
    /// be a fresh one.
    fn wait_drained(&mut self, waits: Waits) {
        self.wait(waits);
    }
}

/// Whether a connection lives on after [`Core::settle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    Open,
    Closed,
}

/// The loop's state the core works on, borrowed for one step.
pub(crate) struct Parts<'a, C> {
    pub(crate) conns: &'a mut Slab<C>,
    pub(crate) timers: &'a mut Deadlines,
    pub(crate) helpers: &'a mut Option<Box<dyn Helpers>>,
    pub(crate) pipeline: &'a Pipeline,
    /// Accepting is paused (out of descriptors).
    pub(crate) accept_pause: &'a mut AcceptPause,
    /// The turn's clock, read once when the wait returned.
    pub(crate) now: Instant,
}

/// A turn of a loop, but for how readiness or completions arrive.
pub(crate) trait Core {
    type Conn: LoopConn;
    /// Its helpers read a response's next pages ahead (`amped`'s warm-ahead).
    const WARMS_AHEAD: bool;
    /// Said when no helper is left to take a request.
    const NO_HELPER_LEFT: &'static str;

    fn parts(&mut self) -> Parts<'_, Self::Conn>;
    /// Runs the connection's state machine as far as its socket allows,
    /// and waits for what it says it wants.
    fn drive(&mut self, token: u64);
    /// Ends the connection (at once, or once the kernel gives back what it lent).
    fn close(&mut self, token: u64);
    /// Accepts exactly while the loop may (not paused, under its cap, not stopping).
    fn watch_listener(&mut self);
    /// The connection yielded while its socket still takes bytes: no
    /// readiness will come for it, so the loop comes back to it itself.
    fn come_back(&mut self, token: u64);
    /// Watches the connection's responder's sources (its pipes) with the
    /// loop's kernel interface.
    fn watch_sources(&mut self, token: u64);

    /// After a drive: sets the connection up to wait for what it wants
    /// (its timer, the loop's registrations, a helper), or closes it.
    /// `parked`: the request the loop took to hand to a helper, if it did.
    /// Lent, not moved: a `Request` by value is copied on every settle,
    /// though only the helpers' arm takes it (52 instructions a request
    /// on `event`, by callgrind).
    #[inline]
    fn settle(&mut self, token: u64, want: Want, parked: &mut Option<Request>) -> Settled {
        let Parts { conns, timers, helpers, pipeline, now, .. } = self.parts();
        let Some(c) = conns.get_mut(token) else { return Settled::Closed };
        match want {
            Want::Read(deadline) => {
                c.wait_drained(Waits::Read);
                timers.set(c.timer(), token, deadline);
            }
            Want::Write(deadline) => {
                c.wait_drained(Waits::Write);
                timers.set(c.timer(), token, deadline);
            }
            Want::Again => {
                c.wait(Waits::Write);
                // It made progress: the send timeout counts from now.
                timers.set(c.timer(), token, now + pipeline.settings.send_timeout);
                self.come_back(token);
            }
            Want::Source(deadline) => {
                c.wait(Waits::Pipes);
                timers.set(c.timer(), token, deadline);
                self.watch_sources(token);
            }
            Want::Close => {
                self.close(token);
                return Settled::Closed;
            }
            Want::Warm => {
                assert!(Self::WARMS_AHEAD, "only a loop whose helpers warm ahead is asked to");
                c.wait(Waits::Helper);
                // No deadline while a helper reads.
                c.timer().cancel();
                let submitted = match (c.conn().take_cold_pages(), helpers.as_mut()) {
                    (Some(pages), Some(helpers)) => helpers.warm(token, pages),
                    _ => false,
                };
                if !submitted {
                    pipeline.error_log.error(format_args!("no helper left to read ahead"));
                    self.close(token);
                    return Settled::Closed;
                }
            }
            Want::Process => {
                // Only a loop with helpers is asked this.
                c.wait(Waits::Helper);
                // No deadline while the pipeline runs; set again after.
                c.timer().cancel();
                let request = parked.take().or_else(|| c.conn().take_request());
                let submitted = match (request, helpers.as_mut()) {
                    (Some(request), Some(helpers)) => helpers.submit(token, request),
                    _ => false,
                };
                if !submitted {
                    pipeline.error_log.error(format_args!("{}", Self::NO_HELPER_LEFT));
                    self.close(token);
                    return Settled::Closed;
                }
            }
        }
        Settled::Open
    }

    /// The deadline of the connection under `token` passed.
    fn expire(&mut self, token: u64) {
        self.time_out(token);
    }

    /// The connection under `token` waited too long for its client.
    fn time_out(&mut self, token: u64) {
        let Parts { conns, pipeline, now, .. } = self.parts();
        let Some(c) = conns.get_mut(token) else { return };
        // The connection decides: a 408 to send, or a silent close.
        let conn = c.conn();
        conn.set_now(now);
        if conn.timed_out(pipeline) {
            self.drive(token);
        } else {
            self.close(token);
        }
    }

    /// The end of every turn: the one every loop shares
    /// (`transport::turn::Turn::end_turn`), with this loop's `expire`
    /// and `watch_listener`.
    fn end_turn(&mut self)
    where
        Self: Sized,
    {
        Turn::end_turn(&mut AsTurn(self));
    }

    /// Replies back from the helpers: each goes to its connection, if it
    /// still waits for one, which is then driven; else the connection closes.
    fn collect_replies(&mut self) {
        let Parts { helpers: Some(helpers), .. } = self.parts() else { return };
        // Reset before looking, so a reply sent meanwhile wakes us again.
        helpers.waker().reset();
        loop {
            let Parts { conns, helpers, pipeline, now, .. } = self.parts();
            let Some((token, reply)) = helpers.as_mut().and_then(|h| h.finished()) else { break };
            // None: the client left while the helper worked; dropping the
            // reply closes any file it held.
            let Some(c) = conns.get_mut(token) else { continue };
            match reply {
                Some(reply) if c.awaits_helper() => {
                    let conn = c.conn();
                    conn.set_now(now);
                    conn.deliver(reply, pipeline);
                    if Self::WARMS_AHEAD {
                        // The helper read in the reply's first window.
                        conn.pages_warmed();
                    }
                    self.drive(token);
                }
                _ => self.close(token),
            }
        }
        if !Self::WARMS_AHEAD {
            return;
        }
        loop {
            let Parts { conns, helpers, .. } = self.parts();
            let Some(token) = helpers.as_mut().and_then(|h| h.warmed()) else { break };
            // None: the client left while the helper read.
            let Some(c) = conns.get_mut(token).filter(|c| c.awaits_helper()) else { continue };
            c.conn().pages_warmed();
            self.drive(token);
        }
    }

    /// At the stop, once the loop no longer accepts: every connection is
    /// driven as stopping (an idle one closes, in-flight ones finish),
    /// except those whose request a helper has.
    fn drive_all_stopping(&mut self) {
        let Parts { conns, .. } = self.parts();
        for token in conns.tokens() {
            let Parts { conns, .. } = self.parts();
            if conns.get(token).is_some_and(|c| !c.awaits_helper()) {
                self.drive(token);
            }
        }
    }
}

/// A [`Core`] loop as `transport::turn` sees it: a wrapper (the trait is
/// `transport`'s, the loops are ours), each call a direct one.
struct AsTurn<'a, L>(&'a mut L);

impl<L: Core> Turn for AsTurn<'_, L> {
    type Peers<'b>
        = &'b mut Slab<L::Conn>
    where
        Self: 'b;

    fn turn_parts(&mut self) -> TurnParts<'_, &mut Slab<L::Conn>> {
        let Parts { conns, timers, accept_pause, now, .. } = self.0.parts();
        TurnParts { peers: conns, timers, accept_pause, now }
    }

    fn expire(&mut self, token: u64) {
        self.0.expire(token);
    }

    fn watch_listener(&mut self) {
        self.0.watch_listener();
    }
}

/// Changed files first: a request read in this turn may have been sent
/// after the change, and a cache hit costs no `stat` (see
/// `Pipeline::watch_files`).
pub(crate) fn files_first(pipeline: &Pipeline, changed: bool) {
    if changed {
        pipeline.files_changed();
    } else {
        pipeline.files_settled();
    }
}
