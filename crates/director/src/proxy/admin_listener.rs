//! The admin listener (`--admin`): status page, JSON, metrics.

use std::net::Shutdown as NetShutdown;
use std::time::Instant;

use h1::Parsed;
use transport::accept::{self, Failed};
use transport::poller::{Interest, Trigger};

use super::*;

impl Director {
    pub(super) fn accept_admins(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let Some(l) = &self.admin_listener else { return };
            let stream = match accept::accept(l, accept::Mode::NonBlocking) {
                Ok((stream, _)) => stream,
                Err((Failed::Retry, _)) => continue,
                Err((Failed::Empty, _)) => return,
                // Out of descriptors or memory (or the listener gone, which
                // only the stop does, having taken it out first): the tick
                // puts it back rather than the loop spinning on it.
                Err((Failed::Pause | Failed::Gone, e)) => {
                    self.pause_listener(ADMIN_LISTENER, &e);
                    return;
                }
            };
            let admin = AdminConn { stream, io: Buffered::eager(), timer: Timer::default() };
            let Some(token) = self.admins.insert(admin) else { continue };
            let Some(a) = self.admins.get_mut(token) else { continue };
            if self.poller.add(&a.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
                self.admins.remove(token);
                continue;
            }
            self.timers.set(&mut a.timer, token, Instant::now() + ADMIN_TIMEOUT);
            self.admin_event(token);
        }
    }

    pub(super) fn admin_event(&mut self, token: u64) {
        let Some(a) = self.admins.get_mut(token) else { return };
        // An answer is never empty, and the connection closes once it is
        // all written: bytes to send are what says it was answered.
        if a.io.out.is_empty() {
            let limits = &self.cfg.limits;
            let request = loop {
                match h1::parse_request(&a.io.inbuf, limits) {
                    Ok(Parsed::Complete { head, .. }) => break Some(Ok(head)),
                    Ok(Parsed::Partial) => {}
                    Err(e) => break Some(Err(e)),
                }
                match a.io.fill(&a.stream, limits.max_header_bytes) {
                    Io::Data => {}
                    Io::Blocked if a.io.inbuf.len() < limits.max_header_bytes => break None,
                    _ => {
                        self.close_admin(token);
                        return;
                    }
                }
            };
            let Some(request) = request else { return };
            let bytes = match request {
                Ok(head) => {
                    crate::admin::answer(&head.method, head.path(), || self.status_json(), &self.metrics)
                }
                Err(e) => local_bytes(
                    e.status(),
                    "text/plain",
                    &error_page(e.status(), e.reason()),
                    &[],
                    true,
                    false,
                    false,
                ),
            };
            let a = self.admins.get_mut(token).expect("seen above");
            a.io.out = bytes;
        }
        let a = self.admins.get_mut(token).expect("seen above");
        match a.io.flush(&a.stream) {
            Ok(_) if a.io.out.is_empty() => {
                let _ = a.stream.shutdown(NetShutdown::Write);
                self.close_admin(token);
            }
            Ok(_) => {}
            Err(()) => self.close_admin(token),
        }
    }

    pub(super) fn close_admin(&mut self, token: u64) {
        if let Some(a) = self.admins.remove(token) {
            let _ = self.poller.delete(&a.stream);
        }
    }
}
