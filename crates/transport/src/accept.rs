//! Taking a connection off a listener, and what a failed accept means.
//!
//! Every accepting loop — the thread models' acceptor, the gate, a process
//! model's child, the event loops, `uring`'s multishot accept and the
//! director — goes through [`classify`], so they agree on which errors end
//! a listener. accept(2) (NOTES) says Linux passes network errors already
//! pending on the new socket to the accept call, and that a server should
//! retry on them as on `EAGAIN`: before this was shared, one `EPROTO` ended
//! the thread models' listener.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::SocketFlags;

/// What a failed accept asks of the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// Accept again at once: interrupted, the peer gave up between SYN and
    /// accept, or a network error was pending on that one connection.
    Retry,
    /// Nothing is queued now (`EAGAIN`; for a blocking accept, the
    /// listener's `SO_RCVTIMEO` passed).
    Empty,
    /// Out of descriptors or memory, or an error accept(2) does not name:
    /// the listener stays readable, so stop accepting for [`PAUSE`] rather
    /// than spin, and log it (once: [`PAUSE_HINT`]).
    Pause,
    /// The listener is shut down or not a listener any more: accept no more.
    Gone,
}

/// How long accepting pauses on [`Failed::Pause`] (nginx disables its
/// accept events for a while in the same case).
pub const PAUSE: Duration = Duration::from_millis(100);

/// Said with the error when accepting pauses.
pub const PAUSE_HINT: &str = "out of descriptors or memory: new connections wait in the backlog \
    (raise the open-file limit, ulimit -n, or lower --max-connections)";

/// The one classification of accept(2)'s errors. `errno` is positive (an
/// io_uring completion's result is its negation).
pub fn classify(errno: i32) -> Failed {
    match Errno::from_raw_os_error(errno) {
        Errno::INTR
        | Errno::CONNABORTED
        // Linux: network errors pending on the new socket (accept(2), NOTES).
        | Errno::NETDOWN
        | Errno::PROTO
        | Errno::NOPROTOOPT
        | Errno::HOSTDOWN
        | Errno::NONET
        | Errno::HOSTUNREACH
        | Errno::OPNOTSUPP
        | Errno::NETUNREACH => Failed::Retry,
        // EWOULDBLOCK is EAGAIN on Linux.
        Errno::AGAIN => Failed::Empty,
        Errno::BADF | Errno::INVAL | Errno::NOTSOCK => Failed::Gone,
        // EMFILE, ENFILE, ENOBUFS, ENOMEM — and anything unexpected: neither
        // spinning nor giving up the listener is right for an unknown error.
        _ => Failed::Pause,
    }
}

/// The classification of an accept's [`io::Error`] (one from std's
/// `TcpListener::accept`, say); one that carries no errno is [`Failed::Pause`].
pub fn classify_io(e: &io::Error) -> Failed {
    e.raw_os_error().map_or(Failed::Pause, classify)
}

/// Whether an accepted socket is non-blocking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// For the event loops and the director: `accept4` sets `O_NONBLOCK`.
    NonBlocking,
    /// For the thread models (Linux does not pass the listener's
    /// `O_NONBLOCK` on to accepted sockets).
    Blocking,
}

/// One `accept4(…, SOCK_CLOEXEC[|SOCK_NONBLOCK])`: the connection and its
/// peer, or what the failure asks of the loop (the error, for the log).
/// A connection whose peer address cannot be had left already: that is a
/// [`Failed::Retry`].
pub fn accept(listener: &TcpListener, mode: Mode) -> Result<(TcpStream, SocketAddr), (Failed, io::Error)> {
    let flags = match mode {
        Mode::NonBlocking => SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        Mode::Blocking => SocketFlags::CLOEXEC,
    };
    match rustix::net::acceptfrom_with(listener, flags) {
        Ok((fd, peer)) => {
            let stream = TcpStream::from(fd);
            match peer.and_then(|a| SocketAddr::try_from(a).ok()).or_else(|| stream.peer_addr().ok()) {
                Some(peer) => Ok((stream, peer)),
                None => Err((Failed::Retry, io::Error::from(Errno::NOTCONN))),
            }
        }
        Err(e) => Err((classify(e.raw_os_error()), e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn every_errno_of_accept_2_has_its_class() {
        let cases = [
            (libc::EINTR, Failed::Retry),
            (libc::ECONNABORTED, Failed::Retry),
            (libc::ENETDOWN, Failed::Retry),
            (libc::EPROTO, Failed::Retry),
            (libc::ENOPROTOOPT, Failed::Retry),
            (libc::EHOSTDOWN, Failed::Retry),
            (libc::ENONET, Failed::Retry),
            (libc::EHOSTUNREACH, Failed::Retry),
            (libc::EOPNOTSUPP, Failed::Retry),
            (libc::ENETUNREACH, Failed::Retry),
            (libc::EAGAIN, Failed::Empty),
            (libc::EWOULDBLOCK, Failed::Empty),
            (libc::EMFILE, Failed::Pause),
            (libc::ENFILE, Failed::Pause),
            (libc::ENOBUFS, Failed::Pause),
            (libc::ENOMEM, Failed::Pause),
            (libc::EBADF, Failed::Gone),
            (libc::EINVAL, Failed::Gone),
            (libc::ENOTSOCK, Failed::Gone),
            // Not accept(2)'s: pause, neither spin nor stop.
            (libc::EIO, Failed::Pause),
        ];
        for (errno, class) in cases {
            assert_eq!(classify(errno), class, "{}", io::Error::from_raw_os_error(errno));
            assert_eq!(classify_io(&io::Error::from_raw_os_error(errno)), class);
        }
        assert_eq!(classify_io(&io::Error::other("no errno")), Failed::Pause);
    }

    fn listener() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").unwrap()
    }

    #[test]
    fn a_queued_connection_comes_with_its_peer_and_the_mode_asked_for() {
        let l = listener();
        for mode in [Mode::NonBlocking, Mode::Blocking] {
            let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (stream, peer) = accept(&l, mode).unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            let flags = rustix::fs::fcntl_getfl(stream.as_fd()).unwrap();
            assert_eq!(flags.contains(rustix::fs::OFlags::NONBLOCK), mode == Mode::NonBlocking);
            let fd_flags = rustix::io::fcntl_getfd(stream.as_fd()).unwrap();
            assert!(fd_flags.contains(rustix::io::FdFlags::CLOEXEC));
        }
    }

    #[test]
    fn an_empty_listener_is_empty_not_an_error() {
        let l = listener();
        l.set_nonblocking(true).unwrap();
        let (class, e) = accept(&l, Mode::NonBlocking).unwrap_err();
        assert_eq!(class, Failed::Empty, "{e}");
        // A blocking accept whose SO_RCVTIMEO passed says the same.
        l.set_nonblocking(false).unwrap();
        socket2::SockRef::from(&l).set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        assert_eq!(accept(&l, Mode::Blocking).unwrap_err().0, Failed::Empty);
    }

    #[test]
    fn a_shut_listener_is_gone() {
        // What a process model's master does to stop its children accepting.
        let l = listener();
        rustix::net::shutdown(&l, rustix::net::Shutdown::Read).unwrap();
        let (class, e) = accept(&l, Mode::Blocking).unwrap_err();
        assert_eq!(class, Failed::Gone, "{e}");
        // A descriptor that is not a socket at all.
        let file = tempfile::tempfile().unwrap();
        let not_a_socket = TcpListener::from(std::os::fd::OwnedFd::from(file));
        assert_eq!(accept(&not_a_socket, Mode::NonBlocking).unwrap_err().0, Failed::Gone);
    }

    /// Run by [`out_of_descriptors_pauses`] in a process of its own: it
    /// lowers the descriptor limit, which would break tests running beside it.
    #[test]
    #[ignore = "run in its own process by out_of_descriptors_pauses"]
    fn out_of_descriptors_child() {
        if std::env::var_os("TRANSPORT_ACCEPT_EMFILE").is_none() {
            return;
        }
        let l = listener();
        let _client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // The lowest free descriptor is the first the accept would take.
        let probe = std::fs::File::open("/dev/null").unwrap();
        let lowest = std::os::fd::AsRawFd::as_raw_fd(&probe) as u64;
        drop(probe);
        let limit = rustix::process::Rlimit { current: Some(lowest), maximum: None };
        let old = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit { maximum: old.maximum, ..limit },
        )
        .unwrap();
        let (class, e) = accept(&l, Mode::NonBlocking).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
        assert_eq!(class, Failed::Pause);
        rustix::process::setrlimit(rustix::process::Resource::Nofile, old).unwrap();
        // The connection waited in the backlog.
        assert!(accept(&l, Mode::NonBlocking).is_ok());
        println!("EMFILE paused");
    }

    #[test]
    fn out_of_descriptors_pauses() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "accept::tests::out_of_descriptors_child", "--ignored", "--nocapture"])
            .env("TRANSPORT_ACCEPT_EMFILE", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("EMFILE paused"), "{text}");
    }
}
