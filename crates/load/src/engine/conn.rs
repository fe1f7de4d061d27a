//! One connection of a worker: connect (spreading source addresses when
//! ports run out), write, read, parse, fail.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Token};

use crate::http::{ParseError, ResponseParser};
use crate::stats::ErrorKind;

use super::worker::Worker;
use super::*;

#[derive(Debug)]
pub(super) struct Req {
    pub(super) intended: Instant,
    pub(super) actual: Instant,
    pub(super) first_byte: Option<Instant>,
    pub(super) target: u32,
    pub(super) measured: bool,
    pub(super) retried: bool,
}

pub(super) struct Conn {
    pub(super) sock: Option<TcpStream>,
    pub(super) connected: bool,
    pub(super) since: Instant,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    pub(super) rbuf: Vec<u8>,
    pub(super) rpos: usize,
    pub(super) rlen: usize,
    pub(super) inflight: VecDeque<Req>,
    pub(super) parser: ResponseParser,
    pub(super) served: u64,
    /// Closed loop: the user has no more requests to send.
    pub(super) done: bool,
    /// Open loop: in the free list.
    pub(super) listed: bool,
    /// Waiting for a timer (think time or reconnect back-off).
    pub(super) waiting: bool,
    /// Closed loop: the request to send when the think time ends.
    pub(super) deferred: Option<(Instant, u32, bool)>,
    /// Bumped on every close, so a read loop notices a replaced socket.
    pub(super) generation: u64,
    /// Registered for WRITABLE too (connecting, or a write would block).
    /// Otherwise READABLE only: with edge triggering every ACK that frees
    /// send-buffer space would wake the loop (wrk likewise watches
    /// writability only while it has something to write).
    pub(super) want_write: bool,
}

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
                let c = &mut self.conns[ci];
                c.sock = Some(s);
                c.connected = false;
                c.want_write = true;
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

    pub(super) fn check_connected(&mut self, ci: usize) {
        let now = Instant::now();
        let c = &mut self.conns[ci];
        let Some(s) = c.sock.as_ref() else { return };
        match s.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => {
                self.note_connect_failure(&e);
                return self.fail_all(ci, ErrorKind::Connect, now);
            }
        }
        match s.peer_addr() {
            Ok(_) => {
                c.connected = true;
                c.served = 0;
                self.st.connects += 1;
                if now >= self.sh.measure_start {
                    let us = us_between(self.sh.measure_start, now);
                    self.st.second(us).connects += 1;
                }
                self.flush(ci);
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
            Err(e) => {
                self.note_connect_failure(&e);
                self.fail_all(ci, ErrorKind::Connect, now)
            }
        }
    }

    pub(super) fn close(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        if let Some(mut s) = c.sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        c.connected = false;
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
        while c.wpos < c.wbuf.len() {
            match s.write(&c.wbuf[c.wpos..]) {
                Ok(0) => return self.fail_all(ci, ErrorKind::Reset, Instant::now()),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !c.want_write {
                        c.want_write = true;
                        let interest = Interest::READABLE | Interest::WRITABLE;
                        if self.poll.registry().reregister(s, Token(ci), interest).is_err() {
                            return self.fail_all(ci, ErrorKind::Reset, Instant::now());
                        }
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail_all(ci, io_kind(&e), Instant::now()),
            }
        }
        c.wbuf.clear();
        c.wpos = 0;
        if c.want_write {
            c.want_write = false;
            if self.poll.registry().reregister(s, Token(ci), Interest::READABLE).is_err() {
                self.fail_all(ci, ErrorKind::Reset, Instant::now());
            }
        }
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
            match s.read(&mut c.rbuf[c.rlen..]) {
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
                Err(e) => return self.fail_all(ci, io_kind(&e), Instant::now()),
            }
        }
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
