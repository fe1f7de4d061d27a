//! TLS for the test clients: a client of a server started with HTTPS
//! speaks TLS to it, trusting whatever certificate it presents (the
//! servers under test make their own, self-signed).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// Addresses of the servers this test process started with HTTPS, each
/// with the process id of the server that speaks it there.
fn https_addrs() -> &'static Mutex<HashMap<SocketAddr, u32>> {
    static ADDRS: OnceLock<Mutex<HashMap<SocketAddr, u32>>> = OnceLock::new();
    ADDRS.get_or_init(Mutex::default)
}

/// Notes whether the server `pid` that now listens on `addr` speaks HTTPS:
/// it holds the port, so whatever was said of an earlier server there is
/// replaced.
pub(crate) fn set_https(addr: SocketAddr, https: bool, pid: u32) {
    let mut addrs = https_addrs().lock().unwrap_or_else(|e| e.into_inner());
    if https {
        addrs.insert(addr, pid);
    } else {
        addrs.remove(&addr);
    }
}

/// Server `pid` is gone: its port may serve plain HTTP next. Only what was
/// said of `pid` itself is forgotten — a server that exited before its
/// `Server` was dropped freed its port then, and another test's HTTPS
/// server may have been given it since (a busy machine makes that gap
/// long): that one still speaks HTTPS.
pub(crate) fn forget(addr: SocketAddr, pid: u32) {
    let mut addrs = https_addrs().lock().unwrap_or_else(|e| e.into_inner());
    if addrs.get(&addr) == Some(&pid) {
        addrs.remove(&addr);
    }
}

/// Whether the server on `addr` speaks HTTPS (a server this process started).
pub fn is_https(addr: SocketAddr) -> bool {
    https_addrs().lock().unwrap_or_else(|e| e.into_inner()).contains_key(&addr)
}

/// The one client configuration (it keeps resumption tickets, as a
/// browser would, and accepts any certificate: the servers under test are
/// self-signed; what these tests check is HTTP over the session).
pub fn client_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| load::tls::client_config(&load::tls::Verify::Anything, true).expect("a TLS client"))
        .clone()
}

/// A client's byte stream: plain, or a TLS session over the socket.
#[derive(Debug)]
pub(crate) enum ClientStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl ClientStream {
    /// TLS if the server on the socket's peer address speaks HTTPS.
    pub(crate) fn over(sock: TcpStream) -> io::Result<ClientStream> {
        if !is_https(sock.peer_addr()?) {
            return Ok(ClientStream::Plain(sock));
        }
        let name = ServerName::try_from("localhost").expect("a name");
        let conn = ClientConnection::new(client_config(), name).map_err(io::Error::other)?;
        Ok(ClientStream::Tls(Box::new(StreamOwned::new(conn, sock))))
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(s) => s,
            ClientStream::Tls(s) => s.get_ref(),
        }
    }

    /// Ends our direction: over TLS a close_notify first, then the FIN.
    pub(crate) fn shutdown_write(&mut self) {
        if let ClientStream::Tls(s) = self {
            s.conn.send_close_notify();
            let _ = s.flush();
        }
        let _ = self.tcp().shutdown(Shutdown::Write);
    }
}

impl Read for ClientStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.read(buf),
            // Not `StreamOwned::read`, which first writes out what is
            // pending: after a write failed (the server closed), the
            // response already received must still be readable, as over TCP.
            ClientStream::Tls(s) => loop {
                if s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock)?;
                }
                match s.conn.reader().read(buf) {
                    // A server that closes without close_notify (as most do
                    // after `Connection: close`) ends the stream, as over TCP.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    other => return other,
                }
                if s.conn.read_tls(&mut s.sock)? == 0 {
                    s.conn.process_new_packets().map_err(io::Error::other)?;
                    continue;
                }
                s.conn.process_new_packets().map_err(io::Error::other)?;
            },
        }
    }
}

impl Write for ClientStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.write(buf),
            ClientStream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.flush(),
            ClientStream::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that exited early (its port freed) is dropped after another
    /// test's HTTPS server was given that port: clients of the new one
    /// must still speak TLS to it.
    #[test]
    fn a_server_dropped_late_forgets_only_its_own_port() {
        let addr: SocketAddr = "127.0.0.254:9".parse().unwrap();
        set_https(addr, false, 100);
        set_https(addr, true, 200);
        forget(addr, 100);
        assert!(is_https(addr), "the port's new HTTPS server was forgotten");
        forget(addr, 200);
        assert!(!is_https(addr));
    }
}
