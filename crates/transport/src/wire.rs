//! The byte stream a connection is driven over.
//!
//! The connection state machine (`pipeline::Connection`) does no I/O of its
//! own: every byte it reads or writes goes through a [`Wire`]. In production
//! that is the client's [`TcpStream`] or a TLS session over it ([`crate::tls::TlsStream`], both
//! behind [`crate::Stream`]); in unit tests it is an in-memory
//! stream fed with byte slices, so the state machine's every phase and error
//! path can be exercised without sockets, timing or threads — the way the
//! `h1` codec is tested.

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpStream};

use rustix::net::{RecvFlags, SendFlags};

use crate::{Outbound, Progress};

/// A connection's transport, as the state machine uses it.
///
/// Reads and writes follow the socket conventions: `WouldBlock` (or, on a
/// blocking socket with timeouts, `TimedOut`) means "nothing now, ask again
/// when ready", `Ok(0)` from a read is the end of the stream.
pub trait Wire {
    /// Reads what has arrived into `buf`; waits only if the wire is in
    /// blocking mode (and then at most its read timeout).
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Reads what has arrived without ever waiting, whatever the mode.
    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes what it can of `bytes` without ever waiting, whatever the
    /// mode: for a relay that holds its own buffer (the director's proxy).
    /// A connection's responses, streamed ones included, go through
    /// [`send`](Self::send).
    fn write_now(&self, bytes: &[u8]) -> io::Result<usize>;
    /// Writes as much of `out` as the wire takes, and at most `limit` bytes
    /// ([`Progress::Paused`] when that stopped it).
    fn send(&self, out: &mut Outbound, limit: u64) -> io::Result<Progress>;
    /// Sets the priority of the packets it sends from now on (Linux
    /// `SO_PRIORITY`: a qdisc such as `htb` may classify by it).
    fn set_priority(&self, priority: u32) -> io::Result<()>;
    /// Keeps at most about `bytes` unsent in the kernel (Linux
    /// `TCP_NOTSENT_LOWAT`), so what is queued next goes out at the
    /// priority set then, not behind a deep buffer of older bytes.
    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()>;
    /// Ends our direction of the stream (a FIN), leaving the other open.
    fn shutdown_write(&self);
    /// The address the connection came in on, if the wire has one.
    fn local_addr(&self) -> Option<SocketAddr>;
    /// Writes out what an earlier [`write_now`](Self::write_now) accepted
    /// but could not send yet (a TLS session's records): `Ok(true)` once
    /// nothing is left; `Ok(false)`: call again when the wire is writable.
    fn flush_pending(&self) -> io::Result<bool> {
        Ok(true)
    }
    /// Whether the wire holds input it took from the socket but has not
    /// handed out yet — the end of the stream, seen by a TLS session while
    /// it returned the last plaintext: the next read answers at once, and
    /// an edge-triggered reader must not wait for the socket's readiness.
    fn holds_more(&self) -> bool {
        false
    }
    /// Whether a handshake (TLS) must finish before a request can arrive.
    fn handshaking(&self) -> bool {
        false
    }
    /// When the wire's handshake (TLS) ended, if it had one and it did.
    fn handshake_ended(&self) -> Option<std::time::Instant> {
        None
    }
}

/// Whether an error of a [`Wire`] call means only "not now" (nothing to
/// read or no room yet, a blocking socket's timeout, an interruption): ask
/// again when the wire is ready, rather than give the connection up.
pub fn not_now(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

impl Wire for TcpStream {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match (&mut &*self).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                result => return result,
            }
        }
    }

    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::net::recv(self, buf, RecvFlags::DONTWAIT)?.0)
    }

    fn write_now(&self, bytes: &[u8]) -> io::Result<usize> {
        Ok(rustix::net::send(self, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)?)
    }

    fn send(&self, out: &mut Outbound, limit: u64) -> io::Result<Progress> {
        match limit {
            u64::MAX => out.write_to(self),
            limit => out.write_to_at_most(self, limit),
        }
    }

    fn set_priority(&self, priority: u32) -> io::Result<()> {
        socket2::SockRef::from(self).set_priority(priority)
    }

    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()> {
        socket2::SockRef::from(self).set_tcp_notsent_lowat(bytes)
    }

    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        TcpStream::local_addr(self).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chunk, Data};
    use std::io::Read;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// What SRPT sets is what the kernel holds (read back with `getsockopt`).
    #[test]
    fn priority_and_unsent_limit_reach_the_socket() {
        let (_client, server) = pair();
        let sock = socket2::SockRef::from(&server);
        assert_eq!(sock.priority().unwrap(), 0);
        Wire::set_priority(&server, 0x10003).unwrap();
        assert_eq!(sock.priority().unwrap(), 0x10003);
        Wire::set_priority(&server, 0x10001).unwrap();
        assert_eq!(sock.priority().unwrap(), 0x10001);
        Wire::set_unsent_limit(&server, 16 << 10).unwrap();
        assert_eq!(sock.tcp_notsent_lowat().unwrap(), 16 << 10);
    }

    #[test]
    fn a_bounded_send_pauses_at_its_limit() {
        let (mut client, server) = pair();
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Owned(vec![b'a'; 3000])));
        out.push(Chunk::Bytes(Data::Owned(vec![b'b'; 3000])));
        assert_eq!(Wire::send(&server, &mut out, 4000).unwrap(), Progress::Paused);
        assert_eq!((out.bytes_sent(), out.remaining()), (4000, 2000));
        assert_eq!(Wire::send(&server, &mut out, 4000).unwrap(), Progress::Done);
        let mut got = vec![0; 6000];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got[2990..3010], [[b'a'; 10], [b'b'; 10]].concat());
    }
}
