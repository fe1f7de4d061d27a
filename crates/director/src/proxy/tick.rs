//! Timers, the end of a turn, and the periodic tick.

use std::net::TcpListener;

use transport::poller::{Interest, Trigger};

use super::*;
use crate::backend::MonitorState;
use transport::deadlines::{Timed, Timer};
use transport::slab::Slab;
use transport::turn::TurnParts;

/// The director's peers by token, as its timer set looks them up.
pub struct Peers<'a> {
    clients: &'a mut Slab<Client>,
    bconns: &'a mut Slab<BConn>,
    admins: &'a mut Slab<AdminConn>,
    probes: &'a mut Slab<Probe>,
}

impl Timed for Peers<'_> {
    fn timer_of(&mut self, token: u64) -> Option<&mut Timer> {
        match Slab::<()>::kind_of(token) {
            CLIENT => self.clients.get_mut(token).map(|c| &mut c.timer),
            BCONN => self.bconns.get_mut(token).map(|bc| &mut bc.timer),
            ADMIN => self.admins.get_mut(token).map(|a| &mut a.timer),
            PROBE => self.probes.get_mut(token).map(|p| &mut p.timer),
            _ => None,
        }
    }

    fn count(&self) -> usize {
        self.clients.len() + self.bconns.len() + self.admins.len() + self.probes.len()
    }
}

/// The end of the director's turn is every loop's (`transport::turn`):
/// its peers' deadlines through the timer set every loop shares, then its
/// paused listeners.
impl Turn for Director {
    type Peers<'a> = Peers<'a>;

    fn turn_parts(&mut self) -> TurnParts<'_, Peers<'_>> {
        TurnParts {
            peers: Peers {
                clients: &mut self.clients,
                bconns: &mut self.bconns,
                admins: &mut self.admins,
                probes: &mut self.probes,
            },
            timers: &mut self.timers,
            accept_pause: &mut self.accept_pause,
            now: self.now,
        }
    }

    fn expire(&mut self, token: u64) {
        match Slab::<()>::kind_of(token) {
            CLIENT => self.client_timeout(token),
            // Connected, it has no deadline (`connected` cancels it).
            BCONN if self.bconns.get(token).is_some_and(|bc| !bc.link.connected()) => {
                let why = format!("timed out after {}", humantime::format_duration(self.cfg.connect_timeout));
                self.connect_failed(token, &why)
            }
            // One deadline each, never moved: when it passes, time is up.
            ADMIN => self.close_admin(token),
            PROBE => self.end_probe(token, false),
            _ => {}
        }
    }

    /// The listeners an accept pause took out of the poller go back once
    /// it is over (it ends at the tick it was paused until, before the
    /// tick accepts).
    fn watch_listener(&mut self) {
        if self.accept_pause.is_paused() {
            return;
        }
        for token in std::mem::take(&mut self.paused_listeners) {
            if let Some(l) = self.listener_of(token) {
                let _ = self.poller.add(l, token, Interest::READABLE, Trigger::Level);
            }
        }
    }
}

impl Director {
    pub(super) fn arm_client(&mut self, token: u64) {
        if let Some(c) = self.clients.get_mut(token) {
            self.timers.arm_timer(&mut c.timer, token);
        }
    }

    pub(super) fn arm_bconn(&mut self, token: u64) {
        if let Some(bc) = self.bconns.get_mut(token) {
            self.timers.arm_timer(&mut bc.timer, token);
        }
    }

    pub(super) fn client_timeout(&mut self, token: u64) {
        let Some(c) = self.clients.get_mut(token) else { return };
        c.timer.cancel();
        match c.state {
            ClientState::Request => {
                if c.io.inbuf.is_empty() {
                    // Idle keep-alive, or connected and never sent a byte:
                    // close quietly.
                    self.close_client(token);
                    return;
                }
                let page = if c.intake.file.pending() > 0 {
                    self.stats.body_timeouts += 1;
                    error_page(408, "request body not received in time")
                } else {
                    self.stats.bad_requests += 1;
                    error_page(408, "request head not received in time")
                };
                respond_local(c, 408, "text/plain", &page, &[], After::Close);
            }
            ClientState::Peek => {
                // The queue wait is over: the busy page.
                if let Some(ex) = c.ex.as_mut() {
                    ex.stage = Stage::Parsed;
                }
                self.queue.remove(token);
                self.busy_page(token, "queue_timeout");
            }
            ClientState::Receive => {
                let ex = c.ex.as_ref();
                let body_pending = ex.is_some_and(|ex| !ex.upload.is_done());
                let backend = ex.and_then(Exchange::backend);
                let backend_reading = backend
                    .and_then(|(_, bt)| self.bconns.get(bt))
                    .is_some_and(|bc| bc.link.connected() && bc.io.flushed());
                if body_pending && backend_reading {
                    // The client stopped sending its body: its fault, and
                    // the backend slot is freed now.
                    self.stats.body_timeouts += 1;
                    self.fail(token, 408, "request body not received in time", After::Close);
                } else {
                    self.stats.gateway_timeout += 1;
                    if let Some((b, _)) = backend {
                        self.backends[b].errors += 1;
                        let attachment = ex.and_then(Exchange::attachment);
                        if let Some((sent, inflight)) = attachment.and_then(|a| Some((a.sent?, a.inflight))) {
                            self.backends[b].limiter.sample(sent.elapsed(), true, inflight);
                        }
                        self.passive_failure(b, "timeout");
                    }
                    self.fail(token, 504, "backend did not respond in time", After::Close);
                }
            }
            ClientState::Response | ClientState::Linger => {
                self.abort(token);
                self.close_client(token);
                return;
            }
        }
        self.ready.push_back(token);
    }

    /// Health checks, monitor staleness, pool upkeep, rate samples;
    /// accepting again (an accept pause ended with the turn, before).
    pub(super) fn tick(&mut self) {
        // The turn's reading, which found the tick due.
        let now = self.now;
        self.next_tick = now + self.cfg.health_interval;
        self.rate_samples.push_back((now, self.answered()));
        while self.rate_samples.len() > 2
            && self.rate_samples.front().is_some_and(|&(t, _)| now.duration_since(t) > RATE_WINDOW)
        {
            self.rate_samples.pop_front();
        }
        if self.cfg.health_path.is_some() && !self.finish.is_stopping() {
            for b in 0..self.backends.len() {
                if self.probing[b].is_none() {
                    self.start_probe(b);
                }
            }
        }
        let mut changed = false;
        for b in 0..self.backends.len() {
            let backend = &mut self.backends[b];
            if matches!(backend.monitor, MonitorState::Serviceable | MonitorState::Overloaded)
                && backend.monitor_seen.is_none_or(|seen| now.duration_since(seen) > backend.monitor_valid)
            {
                backend.monitor = MonitorState::Unknown;
                changed = true;
            }
            // Without --health-path, the active check is a connection
            // attempt to a down backend every health interval; when it
            // succeeds the backend is back.
            if !backend.up
                && backend.connecting == 0
                && !self.finish.is_stopping()
                && self.cfg.health_path.is_none()
            {
                let _ = self.open_conn(b);
            } else {
                self.replenish(b);
            }
        }
        if changed {
            self.dispatch_queue();
        }
        if self.listener.is_some() {
            self.accept();
        }
    }

    pub(super) fn listener_of(&self, token: u64) -> Option<&TcpListener> {
        match token {
            LISTENER => self.listener.as_ref(),
            MONITOR_LISTENER => self.monitor_listener.as_ref(),
            ADMIN_LISTENER => self.admin_listener.as_ref(),
            _ => None,
        }
    }

    /// An accept failed other than for want of connections (out of
    /// descriptors, typically): stop polling that listener until the next
    /// tick instead of spinning on it.
    pub(super) fn pause_listener(&mut self, token: u64, e: &std::io::Error) {
        self.watch.accept_paused(e);
        self.accept_pause.pause(self.next_tick);
        if self.paused_listeners.contains(&token) {
            return;
        }
        if let Some(l) = self.listener_of(token) {
            if self.poller.delete(l).is_ok() {
                self.paused_listeners.push(token);
            }
        }
    }
}
