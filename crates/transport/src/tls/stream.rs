//! A TLS session over an accepted socket, as a [`Wire`].
//!
//! The socket may be blocking (with the [`BLOCKING_TICK`]-style timeouts
//! the thread models set) or non-blocking (the event loops): every call
//! moves what it can and answers with the socket's conventions, so the
//! connection state machine drives a TLS connection exactly as a plain one.
//! The handshake needs no state of its own there: it runs inside the first
//! reads, and until it is done a read delivers no plaintext ("not now").
//!
//! The session runs over a [`Carrier`]: the accepted [`TcpStream`] in every
//! model that reads and writes its sockets itself, or the completion-driven
//! socket of `uring`, whose bytes arrive in and leave through io_uring
//! buffers — one TLS code path, whoever moves the ciphertext.
//!
//! [`BLOCKING_TICK`]: ../../pipeline/constant.BLOCKING_TICK.html

use std::cell::RefCell;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;

use rustix::net::{RecvFlags, SendFlags};
use rustls::{ServerConfig, ServerConnection};

use crate::{Outbound, Progress, Wire};

/// Plaintext encrypted per round of [`Wire::send`]: four full records, so a
/// head and a small body become one `writev` of records, and a large file
/// is read and encrypted in pieces that stay in the cache.
const SEND_ROUND: usize = 64 << 10;

/// What a client that speaks plain HTTP to the TLS port is told, in plain
/// text, before the connection closes (nginx answers its own 400, "The
/// plain HTTP request was sent to HTTPS port").
const PLAIN_ON_TLS_PORT: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
    Content-Type: text/plain; charset=utf-8\r\n\
    Content-Length: 57\r\n\
    Connection: close\r\n\r\n\
    This port speaks HTTPS: use https:// in the URL instead.\n";

/// The byte stream a TLS session runs over, with the socket's conventions
/// (`WouldBlock`: not now; a read of 0: the end).
pub trait Carrier {
    /// Reads what has arrived into `buf`; waits (as the socket is set to) only if `wait`.
    fn recv(&self, buf: &mut [u8], wait: bool) -> io::Result<usize>;
    /// Copies what has arrived into `buf` without taking it.
    fn peek(&self, buf: &mut [u8], wait: bool) -> io::Result<usize>;
    /// Writes what it can of `bufs`, in order.
    fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    /// Ends our direction (a FIN), once what was written has left.
    fn shutdown_write(&self);
    /// `SO_PRIORITY`, as [`Wire::set_priority`].
    fn set_priority(&self, priority: u32) -> io::Result<()>;
    /// `TCP_NOTSENT_LOWAT`, as [`Wire::set_unsent_limit`].
    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()>;
    /// The address the connection came in on.
    fn local_addr(&self) -> Option<SocketAddr>;
}

impl Carrier for TcpStream {
    fn recv(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        if wait {
            (&mut &*self).read(buf)
        } else {
            Ok(rustix::net::recv(self, buf, RecvFlags::DONTWAIT)?.0)
        }
    }

    fn peek(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        let flags = if wait { RecvFlags::PEEK } else { RecvFlags::PEEK | RecvFlags::DONTWAIT };
        Ok(rustix::net::recv(self, buf, flags)?.0)
    }

    fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match bufs {
            [one] => Ok(rustix::net::send(self, one, SendFlags::NOSIGNAL)?),
            _ => (&mut &*self).write_vectored(bufs),
        }
    }

    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }

    fn set_priority(&self, priority: u32) -> io::Result<()> {
        Wire::set_priority(self, priority)
    }

    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()> {
        Wire::set_unsent_limit(self, bytes)
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        TcpStream::local_addr(self).ok()
    }
}

/// A server-side TLS session on a TCP socket (or another [`Carrier`]).
#[derive(Debug)]
pub struct TlsStream<C: Carrier = TcpStream> {
    sock: C,
    session: RefCell<Session>,
}

#[derive(Debug)]
struct Session {
    tls: ServerConnection,
    /// The plaintext of the current send round.
    scratch: Vec<u8>,
    /// The peer closed its side of the TCP connection.
    eof: bool,
    /// Whether the first bytes have been looked at (a TLS record, or a
    /// plain HTTP request to turn away).
    checked: bool,
    /// When the handshake ended (the request's timing splits at it).
    shook: Option<std::time::Instant>,
    /// The peer's plaintext ended (close_notify, or the TCP stream's end)
    /// while a read returned its last bytes: the next read returns 0.
    ended: bool,
}

impl TlsStream {
    /// The socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        &self.sock
    }
}

impl<C: Carrier> TlsStream<C> {
    pub(super) fn new(sock: C, config: &Arc<ServerConfig>) -> io::Result<TlsStream<C>> {
        let tls = ServerConnection::new(config.clone()).map_err(io::Error::other)?;
        let session =
            Session { tls, scratch: Vec::new(), eof: false, checked: false, shook: None, ended: false };
        Ok(TlsStream { sock, session: RefCell::new(session) })
    }

    /// The carrier underneath.
    pub fn carrier(&self) -> &C {
        &self.sock
    }

    /// Ends the session (nothing more is sent) and gives the carrier back.
    pub fn into_carrier(self) -> C {
        self.sock
    }

    /// Whether the handshake is still under way.
    pub fn handshaking(&self) -> bool {
        self.session.borrow().tls.is_handshaking()
    }

    fn read_with(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        let mut s = self.session.borrow_mut();
        if !s.checked {
            self.check_first_bytes(&mut s, wait)?;
        }
        if s.ended {
            return Ok(0);
        }
        let mut n = 0;
        loop {
            if n == buf.len() {
                return Ok(n);
            }
            match s.tls.reader().read(&mut buf[n..]) {
                // The peer's close_notify: its plaintext has ended.
                Ok(0) => return Ok(s.end_after(n)),
                Ok(k) => {
                    n += k;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: for HTTP, whose
                // messages carry their own framing, an end like any other.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(s.end_after(n)),
                Err(e) => return Err(e),
            }
            // Handshake messages, alerts and tickets go out as soon as they exist.
            let _ = flush(&self.sock, &mut s.tls);
            if s.eof {
                return Ok(s.end_after(n));
            }
            // Once plaintext is in hand, take only what has already arrived:
            // the caller gets it now, and an edge-triggered loop learns the
            // socket is drained only when it is.
            match s.tls.read_tls(&mut SocketIn { sock: &self.sock, wait: wait && n == 0 }) {
                Ok(0) => s.eof = true,
                Ok(_) => {}
                Err(e) if n > 0 && crate::not_now(&e) => return Ok(n),
                Err(e) => return Err(e),
            }
            if let Err(e) = s.tls.process_new_packets() {
                // Tell the peer why (an alert), then give the connection up.
                let _ = flush(&self.sock, &mut s.tls);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            if s.shook.is_none() && !s.tls.is_handshaking() {
                s.shook = Some(std::time::Instant::now());
            }
        }
    }

    /// Looks at the first bytes before the handshake: a plain HTTP request
    /// (a letter where a TLS record starts with 22) gets a 400 in plain
    /// text and the connection ends, rather than a TLS alert the client
    /// cannot show or a wait for a handshake that never comes.
    fn check_first_bytes(&self, s: &mut Session, wait: bool) -> io::Result<()> {
        let mut first = [0u8; 1];
        let n = self.sock.peek(&mut first, wait)?;
        s.checked = true;
        if n == 1 && first[0].is_ascii_alphabetic() {
            let _ = self.sock.send(&[IoSlice::new(PLAIN_ON_TLS_PORT)]);
            self.sock.shutdown_write();
            // Drain what the request sent, so the close is not a reset.
            let mut drain = [0u8; 4096];
            while let Ok(1..) = self.sock.recv(&mut drain, false) {}
            return Err(io::Error::new(io::ErrorKind::InvalidData, "plain HTTP on the TLS port"));
        }
        Ok(())
    }
}

impl Session {
    /// The stream ended after `n` bytes of this read: with bytes, the end
    /// is kept for the next read (which the caller must be told to make,
    /// [`Wire::holds_more`]); without, it is the end now.
    fn end_after(&mut self, n: usize) -> usize {
        self.ended = n > 0;
        n
    }
}

/// Writes out what the session has encrypted, as far as the socket takes it.
fn flush(sock: &impl Carrier, tls: &mut ServerConnection) -> io::Result<Progress> {
    while tls.wants_write() {
        match tls.write_tls(&mut SocketOut(sock)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if crate::not_now(&e) => return Ok(Progress::Blocked),
            Err(e) => return Err(e),
        }
    }
    Ok(Progress::Done)
}

/// The carrier as rustls reads it: waiting as the socket does, or never.
struct SocketIn<'a, C> {
    sock: &'a C,
    wait: bool,
}

impl<C: Carrier> Read for SocketIn<'_, C> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.recv(buf, self.wait)
    }
}

/// The carrier as rustls writes to it (`writev` of its records).
struct SocketOut<'a, C>(&'a C);

impl<C: Carrier> Write for SocketOut<'_, C> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.send(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.send(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<C: Carrier> Wire for TlsStream<C> {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_with(buf, true)
    }

    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_with(buf, false)
    }

    fn write_now(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut s = self.session.borrow_mut();
        // Records still waiting for the socket go first; while they wait,
        // new plaintext is refused rather than piled up behind them.
        if flush(&self.sock, &mut s.tls)? == Progress::Blocked {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = s.tls.writer().write(bytes)?;
        flush(&self.sock, &mut s.tls)?;
        if n == 0 && !bytes.is_empty() {
            // The session's buffer is full: "not now", never a 0 that a
            // caller would count as progress.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Encrypts the response a round at a time and writes the records out;
    /// [`Progress::Done`] only once the last record has left, so a close
    /// that follows loses nothing. A file is read (`pread`) and encrypted:
    /// `sendfile` cannot encrypt.
    fn send(&self, out: &mut Outbound, limit: u64) -> io::Result<Progress> {
        let mut guard = self.session.borrow_mut();
        let s = &mut *guard;
        let mut allowed = limit;
        loop {
            if flush(&self.sock, &mut s.tls)? == Progress::Blocked {
                return Ok(Progress::Blocked);
            }
            if out.is_empty() {
                return Ok(Progress::Done);
            }
            if allowed == 0 {
                return Ok(Progress::Paused);
            }
            s.scratch.clear();
            let round = SEND_ROUND.min(usize::try_from(allowed).unwrap_or(usize::MAX));
            let n = out.copy_into(&mut s.scratch, round)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a file shrank while it was sent"));
            }
            allowed = allowed.saturating_sub(n as u64);
            s.tls.writer().write_all(&s.scratch)?;
        }
    }

    fn set_priority(&self, priority: u32) -> io::Result<()> {
        self.sock.set_priority(priority)
    }

    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()> {
        self.sock.set_unsent_limit(bytes)
    }

    fn shutdown_write(&self) {
        let mut s = self.session.borrow_mut();
        s.tls.send_close_notify();
        let _ = flush(&self.sock, &mut s.tls);
        self.sock.shutdown_write();
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr()
    }

    fn holds_more(&self) -> bool {
        self.session.borrow().ended
    }

    fn flush_pending(&self) -> io::Result<bool> {
        Ok(flush(&self.sock, &mut self.session.borrow_mut().tls)? == Progress::Done)
    }

    fn handshaking(&self) -> bool {
        TlsStream::handshaking(self)
    }

    fn handshake_ended(&self) -> Option<std::time::Instant> {
        self.session.borrow().shook
    }
}
