//! Active health checks (`--health-path`).

use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use transport::poller::{Interest, Trigger};

use super::*;
use crate::response::{parse_response, HeadParse, MAX_RESPONSE_HEAD};

impl Director {
    /// Starts a `--health-path` check of backend `b`: a fresh connection
    /// (a pooled one could hide a backend that no longer accepts), a GET,
    /// and `--health-timeout` for the status line.
    pub(super) fn start_probe(&mut self, b: usize) {
        let addr = self.backends[b].addr;
        let path = self.cfg.health_path.as_deref().unwrap_or("/");
        let socket = match socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking().cloexec(),
            Some(socket2::Protocol::TCP),
        ) {
            Ok(s) => s,
            Err(_) => return,
        };
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
            Err(_) => return self.probe_result(b, false),
        }
        let stream: TcpStream = socket.into();
        let host = match addr {
            SocketAddr::V4(a) => a.to_string(),
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
        };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: modus-director-health-check\r\n\
             Connection: close\r\n\r\n"
        );
        let probe = Probe {
            stream,
            backend: b,
            link: Link::Connecting,
            io: Buffered::sending(request.into_bytes()),
            timer: Timer::default(),
        };
        let Some(token) = self.probes.insert(probe) else { return };
        let Some(p) = self.probes.get_mut(token) else { return };
        if self.poller.add(&p.stream, token, Interest::BOTH, Trigger::Edge).is_err() {
            self.probes.remove(token);
            return;
        }
        self.timers.set(&mut p.timer, token, Instant::now() + self.cfg.health_timeout);
        self.probing[b] = Some(token);
    }

    pub(super) fn probe_event(&mut self, token: u64, gone: bool) {
        let Some(p) = self.probes.get_mut(token) else { return };
        if !p.link.connected() {
            if gone || !matches!(p.stream.take_error(), Ok(None)) {
                return self.end_probe(token, false);
            }
            p.link = Link::Fresh;
        }
        if p.io.flush(&p.stream).is_err() {
            return self.end_probe(token, false);
        }
        loop {
            match parse_response(&p.io.inbuf, false) {
                Ok(HeadParse::Complete(head, len)) if head.is_interim() => {
                    p.io.inbuf.drain(..len);
                    continue;
                }
                Ok(HeadParse::Complete(head, _)) => {
                    let ok = (200..400).contains(&head.status);
                    return self.end_probe(token, ok);
                }
                Err(_) => return self.end_probe(token, false),
                Ok(HeadParse::Partial) => {}
            }
            match p.io.fill(&p.stream, MAX_RESPONSE_HEAD + 1) {
                Io::Data => {}
                Io::Blocked => return,
                Io::Eof | Io::Failed => return self.end_probe(token, false),
            }
        }
    }

    pub(super) fn end_probe(&mut self, token: u64, ok: bool) {
        if let Some(p) = self.probes.remove(token) {
            let _ = self.poller.delete(&p.stream);
            self.probing[p.backend] = None;
            self.probe_result(p.backend, ok);
        }
    }

    /// [`HEALTH_FALL`] checks failing in a row take the backend out (the
    /// check has a sub-second deadline, so a hung backend is out within
    /// about two intervals plus the timeout); [`HEALTH_RISE`] passing in a
    /// row bring it back.
    pub(super) fn probe_result(&mut self, b: usize, ok: bool) {
        let backend = &mut self.backends[b];
        if ok {
            backend.probe_successes += 1;
            backend.probe_failures_in_row = 0;
            if !backend.up && backend.probe_successes >= HEALTH_RISE {
                self.mark_up(b);
            }
        } else {
            backend.probe_failures += 1;
            backend.probe_successes = 0;
            backend.probe_failures_in_row += 1;
            self.count_failure(b, "health_check");
            if self.backends[b].up && self.backends[b].probe_failures_in_row >= HEALTH_FALL {
                self.mark_down(b, "health check failed");
                self.dispatch_queue();
            }
        }
    }
}
