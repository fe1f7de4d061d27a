//! Backend connections: opening, pooling, passive health.

use std::net::TcpStream;
use std::time::Instant;

use transport::poller::{Interest, Trigger};

use super::*;

impl Director {
    /// Opens a connection to backend `b` (non-blocking connect).
    pub(super) fn open_conn(&mut self, b: usize) -> Option<u64> {
        let addr = self.backends[b].addr;
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking().cloexec(),
            Some(socket2::Protocol::TCP),
        )
        .ok()?;
        let _ = socket.set_tcp_nodelay(true);
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
            Err(_) => {
                self.backends[b].connect_failures += 1;
                self.count_failure(b, "connect");
                self.mark_down(b, "connect failed");
                return None;
            }
        }
        let stream: TcpStream = socket.into();
        let token = self.bconns.insert(BConn {
            stream,
            backend: b,
            link: Link::Connecting,
            client: None,
            io: Buffered::new(),
            timer: Timer::default(),
        })?;
        let bc = self.bconns.get_mut(token)?;
        bc.timer.set_unarmed(Instant::now() + self.cfg.connect_timeout);
        if self.poller.add(&bc.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
            self.bconns.remove(token);
            return None;
        }
        self.arm_bconn(token);
        self.backends[b].conns += 1;
        self.backends[b].connecting += 1;
        Some(token)
    }

    pub(super) fn backend_event(&mut self, token: u64, gone: bool) {
        let Some(bc) = self.bconns.get_mut(token) else { return };
        if !bc.link.connected() {
            if !(bc.io.writable || gone) {
                return;
            }
            let failure = match bc.stream.take_error() {
                Ok(Some(e)) | Err(e) => Some(describe_io(&e)),
                Ok(None) if gone => Some("the connection closed at once".to_string()),
                Ok(None) => None,
            };
            if let Some(why) = failure {
                self.connect_failed(token, &why);
            } else {
                self.connected(token);
            }
            return;
        }
        match bc.client {
            Some(client) => self.drive(client),
            None => {
                // An idle pooled connection has nothing to say: EOF (the
                // backend closed it), an error, or stray bytes all end it.
                if bc.io.readable {
                    let one_more = bc.io.inbuf.len() + 1;
                    match bc.io.fill(&bc.stream, one_more) {
                        Io::Blocked => {}
                        _ => {
                            let b = bc.backend;
                            self.close_bconn(token);
                            self.replenish(b);
                        }
                    }
                }
            }
        }
    }

    pub(super) fn connected(&mut self, token: u64) {
        let Some(bc) = self.bconns.get_mut(token) else { return };
        bc.link = Link::Fresh;
        bc.timer.cancel();
        let b = bc.backend;
        let client = bc.client;
        let backend = &mut self.backends[b];
        backend.connecting -= 1;
        if !backend.up && self.cfg.health_path.is_some() && client.is_none() {
            // Out by a failed check or passive health: only passing checks
            // bring it back, an open port is not enough. (A connection
            // opened for a request before the backend went out still
            // carries it.)
            self.close_bconn(token);
            return;
        }
        let recovered = !backend.up && self.cfg.health_path.is_none();
        if recovered {
            backend.up = true;
            backend.down_reason = "";
            backend.failures.clear();
        }
        match client {
            Some(client) => self.drive(client),
            None => {
                let target = self.cfg.backend_conns.max(1);
                if backend.idle.len() >= target && recovered {
                    // A health probe of a backend that had enough idle
                    // connections already (none can be left after going
                    // down, so this is rare).
                    self.close_bconn(token);
                } else {
                    backend.idle.push(token);
                }
                if recovered {
                    self.replenish(b);
                }
                self.dispatch_queue();
            }
        }
    }

    pub(super) fn connect_failed(&mut self, token: u64, why: &str) {
        let Some(bc) = self.bconns.get(token) else { return };
        let (b, client) = (bc.backend, bc.client);
        self.watch.connect_failed(&self.backends[b], why);
        self.backends[b].connect_failures += 1;
        self.count_failure(b, "connect");
        self.close_bconn(token);
        self.mark_down(b, "connect failed");
        if let Some(client) = client {
            // Passive health: the request goes back to PEEK and may be
            // served by another backend (or get a quick 502).
            if let Some(c) = self.clients.get_mut(client) {
                if let Some(ex) = c.ex.as_mut() {
                    ex.detach();
                    ex.attempts += 1;
                    self.backends[b].inflight -= 1;
                    c.state = ClientState::Peek;
                    self.ready.push_back(client);
                }
            }
        }
        self.dispatch_queue();
    }

    pub(super) fn count_failure(&mut self, b: usize, kind: &str) {
        let labels =
            vec![("backend".to_string(), self.backends[b].name.clone()), ("kind".to_string(), kind.into())];
        self.metrics.backend_failures.get_or_create(&labels).inc();
    }

    /// Passive health: a failed exchange; too many in the window take the
    /// backend out until a health check (or, without `--health-path`, a
    /// connection attempt) passes.
    pub(super) fn passive_failure(&mut self, b: usize, kind: &str) {
        self.count_failure(b, kind);
        let (window, threshold) = (self.cfg.fail_window, self.cfg.max_fails);
        if self.backends[b].failures.record(Instant::now(), true, window, threshold) && self.backends[b].up {
            self.mark_down(b, "too many failures");
            self.dispatch_queue();
        }
    }

    /// Passive health: an exchange that got a response head (the failure
    /// share needs the successes too).
    pub(super) fn passive_success(&mut self, b: usize) {
        let window = self.cfg.fail_window;
        self.backends[b].failures.record(Instant::now(), false, window, 0);
    }

    /// Brings a backend back into rotation.
    pub(super) fn mark_up(&mut self, b: usize) {
        let backend = &mut self.backends[b];
        backend.up = true;
        backend.down_reason = "";
        backend.failures.clear();
        self.replenish(b);
        self.dispatch_queue();
    }

    pub(super) fn mark_down(&mut self, b: usize, reason: &'static str) {
        let backend = &mut self.backends[b];
        if !backend.up {
            return;
        }
        backend.up = false;
        backend.down_reason = reason;
        backend.probe_successes = 0;
        for t in std::mem::take(&mut backend.idle) {
            self.close_bconn(t);
        }
    }

    pub(super) fn close_bconn(&mut self, token: u64) {
        if let Some(bc) = self.bconns.remove(token) {
            let backend = &mut self.backends[bc.backend];
            backend.conns -= 1;
            if !bc.link.connected() {
                backend.connecting -= 1;
            }
            backend.idle.retain(|&t| t != token);
        }
    }

    /// Keeps `--backend-conns` connections open to an up backend.
    pub(super) fn replenish(&mut self, b: usize) {
        while self.backends[b].up
            && !self.finish.is_stopping()
            && self.backends[b].conns < self.cfg.backend_conns
        {
            if self.open_conn(b).is_none() {
                return;
            }
        }
    }
}
