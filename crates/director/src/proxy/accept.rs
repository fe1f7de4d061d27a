//! Accepting client connections under the caps (in all: 503; per address: 429).

use std::io::Write;
use std::time::Instant;

use transport::accept::{self, Failed};
use transport::poller::{Interest, Trigger};

use super::*;
use crate::admin::label;

impl Director {
    pub(super) fn accept(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let Some(listener) = &self.listener else { return };
            let (mut stream, peer) = match accept::accept(listener, accept::Mode::NonBlocking) {
                Ok(pair) => pair,
                Err((Failed::Retry, _)) => continue,
                Err((Failed::Empty, _)) => return,
                // Out of descriptors or memory (or the listener gone, which
                // only the stop does, having taken it out first): the tick
                // puts it back rather than the loop spinning on it.
                Err((Failed::Pause | Failed::Gone, e)) => {
                    self.pause_listener(LISTENER, &e);
                    return;
                }
            };
            self.stats.accepted += 1;
            let ip = peer.ip();
            let per_ip = self.per_ip.get(&ip).copied().unwrap_or(0);
            if self.clients.len() >= self.cfg.max_conns {
                self.stats.refused_total += 1;
                *self.stats.responses.entry(503).or_default() += 1;
                self.metrics.responses.get_or_create(&label("status", 503)).inc();
                self.metrics.refused.get_or_create(&label("reason", "max_conns")).inc();
                let body = error_page(503, "too many connections");
                let extra = [("Retry-After", self.cfg.retry_after.to_string())];
                // Over TLS only the close: a page would cost a handshake.
                if self.cfg.tls.is_none() {
                    let _ = stream.write(&local_bytes(503, "text/plain", &body, &extra, true, false, false));
                }
                continue;
            }
            if self.cfg.max_conns_per_ip > 0 && per_ip >= self.cfg.max_conns_per_ip {
                self.stats.refused_per_ip += 1;
                *self.stats.responses.entry(429).or_default() += 1;
                self.metrics.responses.get_or_create(&label("status", 429)).inc();
                self.metrics.refused.get_or_create(&label("reason", "per_ip")).inc();
                let body = error_page(429, "too many connections from your address");
                let extra = [("Retry-After", self.cfg.retry_after.to_string())];
                if self.cfg.tls.is_none() {
                    let _ = stream.write(&local_bytes(429, "text/plain", &body, &extra, true, false, false));
                }
                continue;
            }
            let Ok(stream) = transport::Stream::accepted(stream, self.cfg.tls.as_ref()) else { continue };
            let now = Instant::now();
            let mut client = Client {
                stream,
                peer,
                io: Buffered::new(),
                state: ClientState::Request,
                timer: Timer::default(),
                head_started: Some(now),
                spill: Spill::Unused,
                intake: Intake::new(),
                ex: None,
            };
            client.timer.set_unarmed(now + self.cfg.header_timeout);
            let Some(token) = self.clients.insert(client) else { continue };
            let Some(c) = self.clients.get(token) else { continue };
            if self.poller.add(&c.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
                self.clients.remove(token);
                continue;
            }
            *self.per_ip.entry(ip).or_default() += 1;
            self.arm_client(token);
        }
    }
}
