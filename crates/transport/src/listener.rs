//! Listening sockets.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::time::Duration;

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

/// Another listener on `listener`'s address, in its `SO_REUSEPORT` group
/// (so `listener` must have been bound with `reuse_port`), carrying the
/// options accepted sockets inherit from `listener` — timeouts,
/// `TCP_NODELAY`, `TCP_DEFER_ACCEPT` — so an event loop can have an accept
/// queue of its own that behaves like the shared one.
pub fn sibling(listener: &TcpListener) -> io::Result<TcpListener> {
    let new = bind(listener.local_addr()?, true)?;
    let (from, to) = (socket2::SockRef::from(listener), socket2::SockRef::from(&new));
    to.set_read_timeout(from.read_timeout()?)?;
    to.set_write_timeout(from.write_timeout()?)?;
    to.set_tcp_nodelay(from.tcp_nodelay()?)?;
    set_defer_accept(&new, defer_accept(listener)?)?;
    Ok(new)
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

/// Asks the kernel to hold a new connection until its first bytes arrive,
/// for up to `wait` (Linux `TCP_DEFER_ACCEPT`; h2o sets 1 s, Apache's
/// `AcceptFilter http data` 30 s; zero turns it off, nginx's default).
///
/// Why: without it the handshake's last ACK wakes the server, which accepts,
/// finds nothing to read and sleeps again until the request arrives — a
/// second wake-up per connection. On loopback that wake-up is paid on the
/// client's core (the ACK is processed in its `connect`), and it made wrk
/// measurably slower against modus than against h2o on `Connection: close`
/// (BENCHMARKS.md, "Why the code is as it is").
/// A client that stays silent is accepted anyway once `wait` has passed (the
/// kernel re-sends the SYN-ACK and takes the next ACK), so the header
/// timeout still answers it, only later by up to `wait`.
#[allow(unsafe_code)] // no safe binding (socket2, rustix, nix) has TCP_DEFER_ACCEPT
pub fn set_defer_accept(listener: &TcpListener, wait: Duration) -> io::Result<()> {
    // Whole seconds, rounded up: the kernel counts in SYN-ACK retransmissions.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is the listener's, open for the whole call; the
    // value points at a live `c_int` and its exact size is passed, which is
    // what TCP_DEFER_ACCEPT reads (tests below read it back).
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&secs).cast(),
            socklen_of::<libc::c_int>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The wait set by [`set_defer_accept`], as the kernel reports it (rounded
/// to its retransmission schedule).
#[allow(unsafe_code)]
pub fn defer_accept(listener: &TcpListener) -> io::Result<Duration> {
    let mut secs: libc::c_int = 0;
    let mut len = socklen_of::<libc::c_int>();
    // SAFETY: as in `set_defer_accept`; `len` tells the kernel how much it may
    // write at `secs`, and both live across the call.
    let rc = unsafe {
        libc::getsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_mut(&mut secs).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

fn socklen_of<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).expect("a socket option fits socklen_t")
}

/// Why a listener could not be bound, with what to do about the usual
/// causes: a port below 1024 without the privilege, a port already taken,
/// an address that is not this machine's. `flag` names the option.
pub fn bind_failure(flag: &str, addr: SocketAddr, e: &io::Error) -> String {
    let hint = match e.kind() {
        io::ErrorKind::PermissionDenied if addr.port() < 1024 => format!(
            "ports below 1024 need privileges: use a higher port ({flag} {}:8080), run as root, or let \
             the binary bind low ports: sudo setcap 'cap_net_bind_service=+ep' \"$(command -v modus)\"",
            addr.ip()
        ),
        io::ErrorKind::AddrInUse => format!(
            "something is already listening on {addr} (see `ss -ltnp 'sport = :{}'`); pick another port, \
             or {flag} 127.0.0.1:0 for a free one",
            addr.port()
        ),
        io::ErrorKind::AddrNotAvailable => format!("{} is not an address of this machine", addr.ip()),
        _ => return format!("{flag}: cannot listen on {addr}: {e}"),
    };
    format!("{flag}: cannot listen on {addr}: {e}\n  hint: {hint}")
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

    #[test]
    fn a_sibling_shares_the_port_and_the_accepted_defaults() {
        let first = bind("127.0.0.1:0".parse().unwrap(), true).unwrap();
        set_accepted_defaults(&first, Duration::from_millis(250)).unwrap();
        set_defer_accept(&first, Duration::from_secs(1)).unwrap();
        let second = sibling(&first).unwrap();
        assert_eq!(second.local_addr().unwrap(), first.local_addr().unwrap());
        assert!(defer_accept(&second).unwrap() >= Duration::from_secs(1));
        // The kernel spreads connections over the group by their address
        // hash: with enough of them, both queues get some.
        first.set_nonblocking(true).unwrap();
        second.set_nonblocking(true).unwrap();
        let clients: Vec<_> = (0..64)
            .map(|_| {
                let mut c = std::net::TcpStream::connect(first.local_addr().unwrap()).unwrap();
                std::io::Write::write_all(&mut c, b"x").unwrap();
                c
            })
            .collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while a.len() + b.len() < clients.len() && std::time::Instant::now() < deadline {
            let before = a.len() + b.len();
            a.extend(first.accept().ok().map(|(s, _)| s));
            b.extend(second.accept().ok().map(|(s, _)| s));
            if a.len() + b.len() == before {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert!(!a.is_empty() && !b.is_empty(), "{} and {} of {}", a.len(), b.len(), clients.len());
        assert!(b[0].read_timeout().unwrap().is_some() && b[0].nodelay().unwrap());
        // A listener bound without SO_REUSEPORT has no group to join.
        let plain = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        assert!(sibling(&plain).is_err());
    }

    #[test]
    fn defer_accept_is_set_read_back_and_cleared() {
        let listener = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        assert_eq!(defer_accept(&listener).unwrap(), Duration::ZERO);
        set_defer_accept(&listener, Duration::from_millis(300)).unwrap();
        assert!(defer_accept(&listener).unwrap() >= Duration::from_secs(1), "rounded up to a second");
        set_defer_accept(&listener, Duration::from_secs(30)).unwrap();
        assert!(defer_accept(&listener).unwrap() >= Duration::from_secs(30));
        set_defer_accept(&listener, Duration::ZERO).unwrap();
        assert_eq!(defer_accept(&listener).unwrap(), Duration::ZERO);
    }

    #[test]
    fn deferred_listener_accepts_a_connection_that_sends_at_once() {
        use std::io::{Read, Write};
        let listener = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        set_defer_accept(&listener, Duration::from_secs(1)).unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(b"ping").unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        let mut got = [0; 4];
        accepted.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
    }
}
