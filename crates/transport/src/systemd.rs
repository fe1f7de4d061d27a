//! What a server under systemd is handed and tells back: a listening socket
//! passed in by socket activation (`LISTEN_FDS`/`LISTEN_PID`, sd_listen_fds(3)),
//! and its state sent to `$NOTIFY_SOCKET` (`READY=1`, `STOPPING=1`,
//! sd_notify(3)). Both speak the documented protocol directly: no libsystemd.

use std::io;
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

/// The listening TCP socket systemd passed to this process, if it passed
/// one: the first of `LISTEN_FDS` when `LISTEN_PID` is this process. Call
/// it before this process opens any file, so that descriptor 3 can only be
/// what was passed in. The variables are removed either way, so that
/// processes started later (CGI scripts) do not take the socket for theirs.
pub fn activated_listener() -> io::Result<Option<TcpListener>> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    let ours = pid.and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = fds.and_then(|n| n.parse::<i32>().ok()).unwrap_or(0);
    if !ours || count < 1 {
        return Ok(None);
    }
    let mut passed: Vec<TcpListener> = (0..count)
        .map(|i| {
            #[allow(unsafe_code)]
            // SAFETY: sd_listen_fds(3): when LISTEN_PID names this process,
            // the service manager opened descriptors 3 .. 3 + LISTEN_FDS for
            // it. The caller runs this before opening any file, so they are
            // those sockets and owned by no one else here; the variables are
            // cleared above, so each is adopted once. The server's tests
            // `a_socket_handed_in_by_systemd_is_served` and
            // `two_sockets_handed_in_are_refused_by_name` pass one and two.
            let fd = unsafe { OwnedFd::from_raw_fd(LISTEN_FDS_START + i) };
            TcpListener::from(fd)
        })
        .collect();
    if passed.len() > 1 {
        // Serving some and leaving the others accepted by the kernel and
        // never answered would be the worst answer: refuse, naming them.
        let names: Vec<String> = passed
            .iter()
            .map(|l| l.local_addr().map_or_else(|_| "a socket that is not TCP".into(), |a| a.to_string()))
            .collect();
        return Err(io::Error::other(format!(
            "{} sockets were passed ({}) and modus serves one listener: give the unit one ListenStream= \
             (for IPv4 and IPv6 both, ListenStream=[::]:PORT with BindIPv6Only=both)",
            names.len(),
            names.join(", ")
        )));
    }
    let listener = passed.remove(0);
    // What was passed must be a listening TCP socket, not any descriptor.
    let sock = socket2::SockRef::from(&listener);
    if !sock.is_listener()? || sock.r#type()? != socket2::Type::STREAM {
        return Err(io::Error::other("the descriptor systemd passed is not a listening stream socket"));
    }
    listener.set_nonblocking(false)?;
    Ok(Some(listener))
}

/// Tells the service manager `state` (`READY=1`, `STOPPING=1`) when it
/// asked to be told (`$NOTIFY_SOCKET`); does nothing otherwise.
pub fn notify(state: &str) -> io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return Ok(()) };
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        socket.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        socket.send_to(state.as_bytes(), &path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_reaches_the_socket_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).unwrap();
        // The only test here that sets the variable; the others do not read it.
        std::env::set_var("NOTIFY_SOCKET", &path);
        notify("READY=1").unwrap();
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        notify("READY=1").unwrap();
    }
}
