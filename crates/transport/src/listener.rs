//! Listening sockets.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Backlog asked for: the kernel clamps it to `net.core.somaxconn` (4096
/// here). A deep backlog is what lets a thread pool or a prefork server ride
/// out bursts without refusing connections (the queue the papers' TPW and
/// DPP models wait in).
pub const BACKLOG: i32 = 4096;

/// Binds a listening TCP socket. `SO_REUSEADDR` lets a restarted server
/// bind while old connections sit in TIME_WAIT; `reuse_port` gives each
/// worker its own accept queue (nginx's `listen ... reuseport`).
pub fn bind(addr: SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Sets, on the listener, the options blocking workers want on every
/// connection: Linux copies socket options to accepted sockets, so this
/// saves three `setsockopt` calls per connection. `tick` becomes the read
/// and write timeout — how often a blocked thread wakes to check its
/// deadlines; harmless on non-blocking sockets — and `TCP_NODELAY` stops Nagle's algorithm from holding back
/// the tail of a response while the client delays its ACK.
pub fn set_accepted_defaults(listener: &TcpListener, tick: std::time::Duration) -> io::Result<()> {
    let socket = socket2::SockRef::from(listener);
    socket.set_read_timeout(Some(tick))?;
    socket.set_write_timeout(Some(tick))?;
    socket.set_tcp_nodelay(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn accepted_sockets_inherit_the_defaults() {
        let listener = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        set_accepted_defaults(&listener, Duration::from_millis(250)).unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let read = accepted.read_timeout().unwrap().unwrap();
        assert!(read >= Duration::from_millis(250) && read < Duration::from_millis(300), "{read:?}");
        assert!(accepted.write_timeout().unwrap().is_some());
        assert!(accepted.nodelay().unwrap());
    }
}
