//! A worker's connections: connect (spreading source addresses when ports
//! run out), write, read, parse, fail.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Token};

use crate::http::ParseError;
use crate::stats::ErrorKind;

use super::conn::Req;
use super::worker::Worker;
use super::*;

impl Worker<'_> {
    pub(super) fn source_addr(&mut self) -> Option<SocketAddr> {
        if !self.spread || !matches!(self.cfg.addr.ip(), IpAddr::V4(v4) if v4.is_loopback()) {
            return None;
        }
        self.src_next = self.src_next % 65_000 + 1;
        let ip = Ipv4Addr::new(127, self.src_base, (self.src_next >> 8) as u8, (self.src_next & 0xff) as u8);
        Some(SocketAddr::new(IpAddr::V4(ip), 0))
    }

    pub(super) fn open_socket(&mut self) -> io::Result<TcpStream> {
        let addr = self.cfg.addr;
        for _ in 0..2 {
            let result = match self.source_addr() {
                None => TcpStream::connect(addr),
                Some(src) => {
                    let s = socket2::Socket::new(
                        socket2::Domain::for_address(addr),
                        socket2::Type::STREAM,
                        None,
                    )?;
                    s.set_nonblocking(true)?;
                    s.bind(&src.into())?;
                    match s.connect(&addr.into()) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(115) || e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    Ok(TcpStream::from_std(s.into()))
                }
            };
            match result {
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable && !self.spread => {
                    // Out of ephemeral ports (TIME_WAIT): spread over 127.x.y.z.
                    self.spread = true;
                }
                r => return r,
            }
        }
        Err(io::Error::from(io::ErrorKind::AddrNotAvailable))
    }

    pub(super) fn connect(&mut self, ci: usize, now: Instant) {
        match self.open_socket() {
            Ok(mut s) => {
                if let Err(_e) =
                    self.poll.registry().register(&mut s, Token(ci), Interest::READABLE | Interest::WRITABLE)
                {
                    self.fail_all(ci, ErrorKind::Connect, now);
                    return;
                }
                let _ = s.set_nodelay(true);
                let tls = match &self.cfg.tls {
                    None => None,
                    Some(t) => match rustls::ClientConnection::new(t.config.clone(), t.name.clone()) {
                        Ok(session) => Some(session),
                        Err(e) => {
                            self.note_connect_failure(&io::Error::other(e));
                            return self.fail_all(ci, ErrorKind::Connect, now);
                        }
                    },
                };
                let c = &mut self.conns[ci];
                c.tls = tls;
                c.handshaken = false;
                c.sock = Some(s);
                c.connected = false;
                c.since = now;
            }
            Err(e) => {
                self.note_connect_failure(&e);
                self.fail_all(ci, ErrorKind::Connect, now)
            }
        }
    }

    pub(super) fn note_connect_failure(&mut self, e: &io::Error) {
        *self.st.connect_failures.entry(crate::stats::connect_failure(e)).or_default() += 1;
    }

    /// The first event of a connecting socket: on Linux a connect that
    /// ended raises `EPOLLOUT`, with `EPOLLERR` if it failed — so success
    /// costs no system call (mio's portable `take_error` + `peer_addr`
    /// check would cost two per connection), and only a failure asks the
    /// socket why.
    pub(super) fn check_connected(&mut self, ci: usize, failed: bool) {
        let now = Instant::now();
        let c = &mut self.conns[ci];
        let Some(s) = c.sock.as_ref() else { return };
        if failed {
            let e = match s.take_error() {
                Ok(Some(e)) | Err(e) => e,
                Ok(None) => io::Error::from(io::ErrorKind::ConnectionReset),
            };
            self.note_connect_failure(&e);
            return self.fail_all(ci, ErrorKind::Connect, now);
        }
        c.connected = true;
        c.served = 0;
        self.st.connects += 1;
        if now >= self.sh.measure_start {
            let us = us_between(self.sh.measure_start, now);
            self.st.second(us).connects += 1;
        }
        self.flush(ci);
    }

    pub(super) fn close(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        // Closing the descriptor takes it out of the epoll set: no
        // EPOLL_CTL_DEL (a system call per connection with --close).
        drop(c.sock.take());
        c.connected = false;
        c.tls = None;
        c.generation += 1;
        c.wbuf.clear();
        c.wpos = 0;
        c.rpos = 0;
        c.rlen = 0;
        c.parser.reset();
    }

    /// Sends `req` on `ci` (connecting first if needed).
    pub(super) fn issue(&mut self, ci: usize, req: Req, now: Instant) {
        let lag = req.actual.saturating_duration_since(req.intended);
        if req.measured && !req.retried {
            // Sent in the measured window (a retry is the same request again).
            self.st.users_active.insert(req.user);
            self.st.think_count += 1;
        }
        if req.measured {
            let _ = self.st.send_lag.record((lag.as_micros() as u64).max(1));
            if lag > self.cfg.lag_threshold {
                self.st.late_sends += 1;
            }
        }
        let bytes = &self.sh.requests[req.target as usize];
        let c = &mut self.conns[ci];
        c.wbuf.extend_from_slice(bytes);
        c.inflight.push_back(req);
        if c.sock.is_none() {
            self.connect(ci, now);
        } else if c.connected {
            self.flush(ci);
        }
    }

    pub(super) fn flush(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        let Some(s) = c.sock.as_mut() else { return };
        if let Some(tls) = c.tls.as_mut() {
            // The requests become records (queued by rustls until the
            // handshake is done), and the records go out.
            if c.wpos < c.wbuf.len() {
                if let Err(e) = tls.writer().write_all(&c.wbuf[c.wpos..]) {
                    return self.fail_all(ci, io_kind(&e), Instant::now());
                }
                c.wpos = c.wbuf.len();
            }
            let blocked = loop {
                if !tls.wants_write() {
                    break false;
                }
                match tls.write_tls(s) {
                    Ok(0) => return self.fail_all(ci, ErrorKind::Reset, Instant::now()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return self.fail_all(ci, io_kind(&e), Instant::now()),
                }
            };
            if blocked {
                // The next writable edge calls this again.
                return;
            }
        }
        while c.wpos < c.wbuf.len() {
            match send(s, &c.wbuf[c.wpos..]) {
                Ok(0) => return self.fail_all(ci, ErrorKind::Reset, Instant::now()),
                Ok(n) => c.wpos += n,
                // The next writable edge calls this again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.broken(ci, &e),
            }
        }
        c.wbuf.clear();
        c.wpos = 0;
    }

    /// Reads what the socket has. `hup`: the peer's FIN (or an error) is
    /// already known, so read to the end even after a short read.
    pub(super) fn read(&mut self, ci: usize, hup: bool) {
        let generation = self.conns[ci].generation;
        loop {
            let c = &mut self.conns[ci];
            if c.generation != generation {
                return;
            }
            let Some(s) = c.sock.as_mut() else { return };
            if c.rpos == c.rlen {
                c.rpos = 0;
                c.rlen = 0;
            } else if c.rlen == c.rbuf.len() {
                c.rbuf.copy_within(c.rpos..c.rlen, 0);
                c.rlen -= c.rpos;
                c.rpos = 0;
                if c.rlen == c.rbuf.len() {
                    return self.fail_all(ci, ErrorKind::Parse, Instant::now());
                }
            }
            let room = c.rbuf.len() - c.rlen;
            if c.tls.is_some() {
                match self.read_tls(ci) {
                    Some(true) => continue,
                    Some(false) => return,
                    None => return self.eof(ci),
                }
            }
            match recv(s, &mut c.rbuf[c.rlen..]) {
                Ok(0) => return self.eof(ci),
                Ok(n) => {
                    c.rlen += n;
                    let now = Instant::now();
                    if !self.consume(ci, now) || (n < room && !hup) {
                        // A short read drained the socket: skip the read
                        // that would only say EAGAIN (one syscall per
                        // response saved); new data or a FIN arriving
                        // after the reported edge brings a new edge.
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.broken(ci, &e),
            }
        }
    }

    /// The connection broke (reset, broken pipe). If it was a kept-alive
    /// one reused for a request nothing of whose answer came yet, the
    /// server closed it as we sent (an idle connection closed by a
    /// graceful stop or a reload, with our request unread — which the
    /// kernel answers with a reset): the request goes again on a fresh
    /// connection, once, as for a plain close (RFC 9112 §9.3.1; browsers
    /// retry a reset reused connection the same way).
    fn broken(&mut self, ci: usize, e: &io::Error) {
        let c = &self.conns[ci];
        let reused_unanswered = c.served > 0
            && !c.parser.started()
            && c.inflight.front().is_some_and(|r| !r.retried)
            && matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe);
        if reused_unanswered {
            self.requeue_rest(ci);
            self.after_close(ci, Instant::now());
        } else {
            self.fail_all(ci, io_kind(e), Instant::now());
        }
    }

    /// One round of reading an `https://` connection: plaintext the session
    /// holds goes into the read buffer and is parsed, else records are read
    /// from the socket and opened. `Some(true)`: call again; `Some(false)`:
    /// nothing more now (or the connection failed and is gone); `None`:
    /// the stream ended.
    fn read_tls(&mut self, ci: usize) -> Option<bool> {
        let c = &mut self.conns[ci];
        let (Some(s), Some(tls)) = (c.sock.as_mut(), c.tls.as_mut()) else { return Some(false) };
        match tls.reader().read(&mut c.rbuf[c.rlen..]) {
            Ok(0) => return None,
            Ok(n) => {
                c.rlen += n;
                return Some(self.consume(ci, Instant::now()));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // The server closed without close_notify: HTTP frames its own end.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return None,
            Err(e) => {
                self.fail_all(ci, io_kind(&e), Instant::now());
                return Some(false);
            }
        }
        match tls.read_tls(s) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Some(true),
            Err(e) => {
                self.fail_all(ci, io_kind(&e), Instant::now());
                return Some(false);
            }
        }
        if let Err(e) = tls.process_new_packets() {
            // A certificate not trusted, an alert from the server: the
            // connection never carried a request.
            let why = match &e {
                rustls::Error::InvalidCertificate(_) => {
                    format!("TLS: {e} (a self-signed server? --insecure, or --cacert FILE)")
                }
                _ => format!("TLS: {e}"),
            };
            // As said, not through `connect_failure`'s lower-casing: the
            // advice names flags (`--cacert FILE`).
            *self.st.connect_failures.entry(why).or_default() += 1;
            self.fail_all(ci, ErrorKind::Connect, Instant::now());
            return Some(false);
        }
        if !c.handshaken && !tls.is_handshaking() {
            c.handshaken = true;
            self.st.handshakes += 1;
        }
        // Handshake messages, and requests held back until it finished.
        if self.conns[ci].tls.as_ref().is_some_and(|t| t.wants_write()) {
            self.flush(ci);
        }
        Some(true)
    }

    /// Parses buffered bytes; false if the connection was closed.
    pub(super) fn consume(&mut self, ci: usize, now: Instant) -> bool {
        loop {
            let c = &mut self.conns[ci];
            if c.rpos == c.rlen {
                return true;
            }
            let Some(front) = c.inflight.front_mut() else {
                // Bytes nobody asked for.
                self.st.error(ErrorKind::Parse);
                self.close(ci);
                self.after_close(ci, now);
                return false;
            };
            front.first_byte.get_or_insert(now);
            let head = self.cfg.method.eq_ignore_ascii_case("HEAD");
            match c.parser.feed(&c.rbuf[c.rpos..c.rlen], head) {
                Ok(p) => {
                    c.rpos += p.consumed;
                    if !p.done {
                        return true;
                    }
                    let resp = c.parser.response();
                    c.parser.reset();
                    c.served += 1;
                    let req = c.inflight.pop_front().expect("front");
                    self.complete(req, Ok(resp), now);
                    if !resp.keep_alive {
                        self.requeue_rest(ci);
                        self.after_close(ci, now);
                        return false;
                    }
                    self.after_response(ci, now);
                }
                Err(e) => {
                    let kind = match e {
                        ParseError::Parse => ErrorKind::Parse,
                        ParseError::ShortBody => ErrorKind::ShortBody,
                        ParseError::Closed => ErrorKind::Closed,
                    };
                    self.fail_all(ci, kind, now);
                    return false;
                }
            }
        }
    }

    pub(super) fn eof(&mut self, ci: usize) {
        let now = Instant::now();
        let c = &mut self.conns[ci];
        if c.inflight.is_empty() {
            // An idle kept-alive connection closed by the server.
            self.close(ci);
            return self.after_close(ci, now);
        }
        let started = c.parser.started();
        match c.parser.eof() {
            Ok(resp) => {
                let req = c.inflight.pop_front().expect("front");
                self.complete(req, Ok(resp), now);
                self.requeue_rest(ci);
                self.after_close(ci, now);
            }
            Err(ParseError::Closed) if !started && c.served > 0 && !c.inflight[0].retried => {
                // The server closed a kept-alive connection as we reused it:
                // send again on a fresh one (as browsers do for GET).
                self.requeue_rest(ci);
                self.after_close(ci, now);
            }
            Err(e) => {
                let kind = if e == ParseError::ShortBody { ErrorKind::ShortBody } else { ErrorKind::Closed };
                self.fail_all(ci, kind, now);
            }
        }
    }

    /// Unanswered requests of a connection that closed go out again on a
    /// new connection, keeping their intended times.
    pub(super) fn requeue_rest(&mut self, ci: usize) {
        let reqs: Vec<Req> = self.conns[ci].inflight.drain(..).collect();
        self.close(ci);
        let now = Instant::now();
        for mut r in reqs {
            self.st.retries += 1;
            r.retried = true;
            r.first_byte = None;
            self.issue(ci, r, now);
        }
    }

    /// Fails every request in flight on `ci` with `kind` and closes it.
    pub(super) fn fail_all(&mut self, ci: usize, kind: ErrorKind, now: Instant) {
        let reqs: Vec<Req> = self.conns[ci].inflight.drain(..).collect();
        self.close(ci);
        for r in reqs {
            self.complete(r, Err(kind), now);
        }
        if kind == ErrorKind::Connect && !self.conns[ci].done {
            // Back off a little so a refused port does not spin the loop.
            self.conns[ci].waiting = true;
            self.conns[ci].backing_off = true;
            self.timers.push(std::cmp::Reverse((now + Duration::from_millis(10), ci)));
            return;
        }
        self.after_close(ci, now);
    }

    pub(super) fn after_close(&mut self, ci: usize, now: Instant) {
        if self.conns[ci].waiting {
            return;
        }
        if self.open {
            self.make_free(ci);
        } else if self.conns[ci].inflight.is_empty() || self.conns[ci].sock.is_none() {
            self.user_next(ci, now);
        }
    }

    pub(super) fn after_response(&mut self, ci: usize, now: Instant) {
        if self.cfg.close && self.conns[ci].inflight.is_empty() {
            self.close(ci);
        }
        if self.open {
            self.make_free(ci);
            self.dispatch(now);
        } else {
            self.user_next(ci, now);
            if self.conns[ci].done && self.conns[ci].inflight.is_empty() {
                self.close(ci);
            }
        }
    }

    pub(super) fn scan_timeouts(&mut self, now: Instant) {
        for ci in 0..self.conns.len() {
            let c = &self.conns[ci];
            let Some(front) = c.inflight.front() else { continue };
            if now.saturating_duration_since(front.actual) >= self.cfg.timeout {
                let kind = if c.connected { ErrorKind::Timeout } else { ErrorKind::Connect };
                if kind == ErrorKind::Connect {
                    self.note_connect_failure(&io::ErrorKind::TimedOut.into());
                }
                self.fail_all(ci, kind, now);
            }
        }
    }
}

/// `send(2)` straight to the kernel (rustix's raw syscall): libc's wrapper,
/// which `Write for TcpStream` goes through, also marks a thread
/// cancellation point on every call — 1.6 % of the generator's CPU in a
/// keep-alive profile, for nothing here.
fn send(s: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    rustix::net::send(s, buf, rustix::net::SendFlags::NOSIGNAL).map_err(io::Error::from)
}

/// `recv(2)` straight to the kernel (see [`send`]).
fn recv(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    rustix::net::recv(s, buf, rustix::net::RecvFlags::empty()).map(|(n, _)| n).map_err(io::Error::from)
}
