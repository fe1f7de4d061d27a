//! The graceful stop of an idle keep-alive connection (SIGTERM, or the old
//! generation of a reload).

use std::time::{Duration, Instant};

use super::*;

/// How long a stopping server still waits for an idle keep-alive
/// connection's next request. Closing the moment the stop arrives races
/// with a request the client has already sent (on the network, or in its
/// own send): the request is lost and the client reads a reset — 40–50 cut
/// requests per reload under `wrk -c50`. Waiting a moment lets a busy
/// client's next request arrive; it is answered with `Connection: close`,
/// and the client opens its next connection to the new generation. An
/// idle client's connection closes at the end of the grace, as it would
/// have at once before.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(1);

impl Connection {
    /// Stopping, with nothing read between requests: the deadline to wait
    /// for the next request until, or `None` to close now. A connection
    /// that has served nothing was accepted before the stop and has been
    /// silent since: it closes at once, as before.
    pub(super) fn stop_wait(&mut self) -> Option<Instant> {
        if self.served == 0 {
            return None;
        }
        let now = self.now.read();
        // Only ever moved earlier, so the grace counts from the first look
        // after the stop; a request answered since closes the connection.
        self.idle_deadline = self.idle_deadline.min(now + STOP_GRACE);
        (now < self.idle_deadline).then_some(self.idle_deadline)
    }

    /// The idle deadline (the keep-alive timeout, or a stop's grace) passed
    /// between requests: drive the connection once more, so a read — not
    /// the timer — decides. A request that arrived just before the
    /// deadline, its readiness not yet seen by the loop when the timer
    /// fired, is answered rather than closed under (the `FIONREAD` look the
    /// `uring` stop takes, made with the read itself); finding nothing, the
    /// drive closes, the deadline being past.
    pub(super) fn last_look(&mut self) -> bool {
        self.drained = false;
        true
    }
}
