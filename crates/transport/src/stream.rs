//! An accepted client connection: a plain TCP socket, or a TLS session on
//! one — the one type every model holds and drives as a [`Wire`].

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};

use crate::tls::{ServerTls, TlsStream};
use crate::{Outbound, Progress, Wire};

/// A client connection as the server drives it.
#[derive(Debug)]
pub enum Stream {
    /// HTTP over TCP.
    Plain(TcpStream),
    /// HTTP over TLS over TCP.
    Tls(Box<TlsStream>),
}

impl Stream {
    /// Wraps an accepted socket: in a TLS session when the server speaks TLS.
    pub fn accepted(sock: TcpStream, tls: Option<&ServerTls>) -> io::Result<Stream> {
        Ok(match tls {
            None => Stream::Plain(sock),
            Some(tls) => Stream::Tls(Box::new(tls.accept(sock)?)),
        })
    }

    /// The socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.tcp(),
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}

impl Wire for Stream {
    #[inline]
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => Wire::read(s, buf),
            Stream::Tls(s) => s.read(buf),
        }
    }

    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read_now(buf),
            Stream::Tls(s) => s.read_now(buf),
        }
    }

    fn write_now(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_now(bytes),
            Stream::Tls(s) => s.write_now(bytes),
        }
    }

    #[inline]
    fn send(&self, out: &mut Outbound, limit: u64) -> io::Result<Progress> {
        match self {
            Stream::Plain(s) => s.send(out, limit),
            Stream::Tls(s) => s.send(out, limit),
        }
    }

    fn set_priority(&self, priority: u32) -> io::Result<()> {
        self.tcp().set_priority(priority)
    }

    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()> {
        self.tcp().set_unsent_limit(bytes)
    }

    fn shutdown_write(&self) {
        match self {
            Stream::Plain(s) => s.shutdown_write(),
            Stream::Tls(s) => s.shutdown_write(),
        }
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Wire::local_addr(self.tcp())
    }

    fn flush_pending(&self) -> io::Result<bool> {
        match self {
            Stream::Plain(_) => Ok(true),
            Stream::Tls(s) => s.flush_pending(),
        }
    }

    fn holds_more(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(s) => s.holds_more(),
        }
    }

    fn handshaking(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(s) => s.handshaking(),
        }
    }

    fn handshake_ended(&self) -> Option<std::time::Instant> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(s) => s.handshake_ended(),
        }
    }
}
