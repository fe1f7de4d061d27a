//! TLS sessions over real loopback sockets, a rustls client on the other
//! end: the handshake, both directions of data, files, the plain-HTTP
//! refusal, SNI and reload.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::*;
use crate::{Chunk, Data, Outbound, Progress, Wire};

struct Made {
    dir: tempfile::TempDir,
    files: CertFiles,
    der: CertificateDer<'static>,
}

fn make_cert(names: &[&str]) -> Made {
    let made =
        rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = CertFiles { cert: dir.path().join("cert.pem"), key: dir.path().join("key.pem"), ocsp: None };
    std::fs::write(&files.cert, made.cert.pem()).unwrap();
    std::fs::write(&files.key, made.signing_key.serialize_pem()).unwrap();
    Made { dir, files, der: made.cert.der().clone() }
}

fn client_config(trusted: &[&CertificateDer<'static>]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for der in trusted {
        roots.add((*der).clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// A server-side stream and a connected client socket.
fn pair(tls: &ServerTls) -> (TlsStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    server.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    (tls.accept(server).unwrap(), client)
}

/// Reads through `wire` until `want` bytes of plaintext arrived.
fn read_plain(wire: &dyn Wire, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < want {
        match wire.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if crate::not_now(&e) => {}
            Err(e) => panic!("server read: {e}"),
        }
    }
    got
}

#[test]
fn a_request_and_a_response_with_a_file_cross_the_session() {
    let made = make_cert(&["localhost"]);
    let tls = ServerTls::new(CertSource::Files(vec![made.files.clone()])).unwrap();
    let (server, client) = pair(&tls);
    let config = client_config(&[&made.der]);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let file_path = made.dir.path().join("body.bin");
    std::fs::write(&file_path, &body).unwrap();

    let client_thread = thread::spawn(move || {
        let conn = ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
        let mut tls = StreamOwned::new(conn, client);
        tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut got = Vec::new();
        tls.read_to_end(&mut got).unwrap();
        (got, tls.conn.alpn_protocol().map(|p| p.to_vec()))
    });
    let request = read_plain(&server, 35);
    assert_eq!(request, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert!(!server.handshaking());

    let mut out = Outbound::new();
    out.push(Chunk::Bytes(Data::Static(b"head\r\n\r\n")));
    let file = Arc::new(std::fs::File::open(&file_path).unwrap());
    out.push(Chunk::File { file, offset: 0, len: body.len() as u64 });
    while server.send(&mut out, u64::MAX).unwrap() != Progress::Done {}
    server.shutdown_write();
    let (got, alpn) = client_thread.join().unwrap();
    assert_eq!(&got[..8], b"head\r\n\r\n");
    assert!(got[8..] == body[..], "the file arrives whole and in order");
    // The client offered no ALPN, so none was agreed.
    assert_eq!(alpn, None);
}

#[test]
fn a_bounded_send_pauses_and_resumes() {
    let made = make_cert(&["localhost"]);
    let tls = ServerTls::new(CertSource::Files(vec![made.files.clone()])).unwrap();
    let (server, client) = pair(&tls);
    let config = client_config(&[&made.der]);
    let reader = thread::spawn(move || {
        let conn = ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
        let mut tls = StreamOwned::new(conn, client);
        tls.write_all(b"x").unwrap();
        let mut got = Vec::new();
        tls.read_to_end(&mut got).unwrap();
        got
    });
    assert_eq!(read_plain(&server, 1), b"x");
    let mut out = Outbound::new();
    out.push(Chunk::Bytes(Data::Owned(vec![b'a'; 100_000])));
    assert_eq!(server.send(&mut out, 30_000).unwrap(), Progress::Paused);
    assert_eq!(out.bytes_sent(), 30_000);
    while server.send(&mut out, 30_000).unwrap() != Progress::Done {}
    server.shutdown_write();
    assert_eq!(reader.join().unwrap(), vec![b'a'; 100_000]);
}

#[test]
fn plain_http_on_the_tls_port_gets_a_400_in_plain_text() {
    let tls = ServerTls::new(CertSource::SelfSigned(vec!["localhost".into()])).unwrap();
    let (server, mut client) = pair(&tls);
    client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let err = read_plain_err(&server);
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    assert_eq!(
        body.len().to_string(),
        answer.split("Content-Length: ").nth(1).unwrap().split("\r\n").next().unwrap()
    );
    assert!(body.contains("https://"), "{body}");
}

fn read_plain_err(wire: &dyn Wire) -> std::io::Error {
    let mut buf = [0u8; 1024];
    loop {
        match wire.read(&mut buf) {
            Err(e) if crate::not_now(&e) => {}
            Err(e) => return e,
            Ok(n) => panic!("read {n} bytes"),
        }
    }
}

#[test]
fn garbage_instead_of_a_client_hello_ends_the_session_with_an_error() {
    let tls = ServerTls::new(CertSource::SelfSigned(vec!["localhost".into()])).unwrap();
    let (server, mut client) = pair(&tls);
    // A handshake record header, then nonsense.
    client.write_all(&[22, 3, 1, 0, 8, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).unwrap();
    assert_eq!(read_plain_err(&server).kind(), std::io::ErrorKind::InvalidData);
}

fn handshake_names(tls: &ServerTls, sni: &str, trusted: &[&CertificateDer<'static>]) -> Result<(), String> {
    let (server, client) = pair(tls);
    let config = client_config(trusted);
    let sni = sni.to_string();
    let client_thread = thread::spawn(move || {
        let conn = ClientConnection::new(config, ServerName::try_from(sni).unwrap()).unwrap();
        let mut tls = StreamOwned::new(conn, client);
        tls.write_all(b"ping").map_err(|e| e.to_string())?;
        tls.flush().map_err(|e| e.to_string())?;
        // Read the answer before closing: a close with unread bytes (the
        // server's session tickets) would be a reset, racing its read.
        let mut pong = [0u8; 4];
        tls.read_exact(&mut pong).map_err(|e| e.to_string())
    });
    let mut buf = [0u8; 16];
    let server_side = loop {
        match server.read(&mut buf) {
            Ok(n) => break Ok(n),
            Err(e) if crate::not_now(&e) => {}
            Err(e) => break Err(e),
        }
    };
    if server_side.is_ok() {
        let _ = server.write_now(b"pong").and_then(|_| server.flush_pending());
    }
    let client_side = client_thread.join().unwrap();
    client_side.and(server_side.map(|_| ()).map_err(|e| e.to_string()))
}

#[test]
fn the_certificate_is_chosen_by_the_name_the_client_asks_for() {
    let a = make_cert(&["a.test"]);
    let b = make_cert(&["b.test", "*.b.test"]);
    let tls = ServerTls::new(CertSource::Files(vec![a.files.clone(), b.files.clone()])).unwrap();
    // The client trusts only b's certificate: a handshake succeeds only if b's is sent.
    handshake_names(&tls, "b.test", &[&b.der]).unwrap();
    handshake_names(&tls, "www.b.test", &[&b.der]).unwrap();
    handshake_names(&tls, "a.test", &[&a.der]).unwrap();
    // A name none covers gets the first certificate (the default).
    assert!(handshake_names(&tls, "other.test", &[&b.der]).is_err());
}

#[test]
fn reload_serves_new_certificates_and_keeps_the_old_ones_when_the_new_files_are_bad() {
    let first = make_cert(&["localhost"]);
    let tls = ServerTls::new(CertSource::Files(vec![first.files.clone()])).unwrap();
    assert!(tls.reloadable());
    handshake_names(&tls, "localhost", &[&first.der]).unwrap();

    // A broken key on disk: the reload fails and says which file; the old pair serves on.
    std::fs::write(&first.files.key, "not a key").unwrap();
    let err = tls.reload().unwrap_err();
    assert!(err.contains("key.pem") && err.contains("PRIVATE KEY"), "{err}");
    handshake_names(&tls, "localhost", &[&first.der]).unwrap();

    // A new certificate and key: the next handshakes present it.
    let second = make_cert(&["localhost"]);
    std::fs::copy(&second.files.cert, &first.files.cert).unwrap();
    std::fs::copy(&second.files.key, &first.files.key).unwrap();
    assert_eq!(tls.reload(), Ok(1));
    handshake_names(&tls, "localhost", &[&second.der]).unwrap();
    assert!(handshake_names(&tls, "localhost", &[&first.der]).is_err());
}

#[test]
fn mismatched_or_missing_files_are_refused_with_the_file_named() {
    let a = make_cert(&["a.test"]);
    let b = make_cert(&["b.test"]);
    let crossed = CertFiles { cert: a.files.cert.clone(), key: b.files.key.clone(), ocsp: None };
    let err = ServerTls::new(CertSource::Files(vec![crossed])).unwrap_err();
    assert!(err.contains("does not hold the private key of"), "{err}");
    let missing = CertFiles { cert: a.dir.path().join("nope.pem"), key: a.files.key.clone(), ocsp: None };
    let err = ServerTls::new(CertSource::Files(vec![missing])).unwrap_err();
    assert!(err.contains("nope.pem") && err.contains("No such file"), "{err}");
    let swapped = CertFiles { cert: a.files.key.clone(), key: a.files.cert.clone(), ocsp: None };
    let err = ServerTls::new(CertSource::Files(vec![swapped])).unwrap_err();
    assert!(err.contains("no CERTIFICATE"), "{err}");
}

/// The last bytes and the peer's close arriving together: the read that
/// returns the bytes keeps the end for the next one, and says so — an
/// edge-triggered loop would otherwise wait for a readiness that never comes.
#[test]
fn an_end_read_with_the_last_bytes_is_kept_for_the_next_read() {
    let made = make_cert(&["localhost"]);
    let tls = ServerTls::new(CertSource::Files(vec![made.files.clone()])).unwrap();
    let (server, client) = pair(&tls);
    let config = client_config(&[&made.der]);
    let client_thread = thread::spawn(move || {
        let conn = ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
        let mut tls = StreamOwned::new(conn, client);
        tls.write_all(b"last words").unwrap();
        tls.conn.send_close_notify();
        tls.flush().unwrap();
        tls.sock.shutdown(std::net::Shutdown::Write).unwrap();
        // Keep the socket open until the server has read.
        let mut rest = Vec::new();
        let _ = tls.sock.read_to_end(&mut rest);
    });
    let mut buf = [0u8; 4096];
    // Wait until the bytes (and with them, the close) have all arrived.
    let n = loop {
        match server.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if crate::not_now(&e) => {}
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(&buf[..n], b"last words");
    if server.holds_more() {
        assert_eq!(server.read_now(&mut buf).unwrap(), 0, "the end, at once");
    } else {
        // The close had not arrived with the bytes: it comes as a read of its own.
        assert_eq!(server.read(&mut buf).unwrap(), 0);
    }
    drop(server);
    client_thread.join().unwrap();
}
