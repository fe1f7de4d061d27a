//! The byte stream a connection is driven over.
//!
//! The connection state machine (`pipeline::Connection`) does no I/O of its
//! own: every byte it reads or writes goes through a [`Wire`]. In production
//! that is the client's [`TcpStream`]; in unit tests it is an in-memory
//! stream fed with byte slices, so the state machine's every phase and error
//! path can be exercised without sockets, timing or threads — the way the
//! `h1` codec is tested. A TLS session would be a third kind of wire.

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
    /// Writes what it can of `bytes` without ever waiting, whatever the mode.
    fn write_now(&self, bytes: &[u8]) -> io::Result<usize>;
    /// Writes as much of `out` as the wire takes.
    fn send(&self, out: &mut Outbound) -> io::Result<Progress>;
    /// Ends our direction of the stream (a FIN), leaving the other open.
    fn shutdown_write(&self);
    /// The address the connection came in on, if the wire has one.
    fn local_addr(&self) -> Option<SocketAddr>;
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

    fn send(&self, out: &mut Outbound) -> io::Result<Progress> {
        out.write_to(self)
    }

    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        TcpStream::local_addr(self).ok()
    }
}
