//! HTTP beside HTTPS: with `--listen` and `--tls-listen` both, the plain
//! listener answers every request with `308 Permanent Redirect` to the same
//! target over HTTPS, as every HTTPS site needs for the `http://` links and
//! typed addresses that still arrive. It runs as a process of its own — the
//! binary again, as [`ARG`], the plain socket on its standard input — so it
//! is the same for every model (a process model's master must not start
//! threads) and a flood on the plain port takes nothing from the HTTPS one.
//! It ends with the server (`PR_SET_PDEATHSIG`).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::accept::{self, Failed};

/// The first argument that runs it: `modus https-redirect TLS_PORT`.
pub const ARG: &str = "https-redirect";

/// Connections answered at once; more wait in the backlog.
const MAX_AT_ONCE: usize = 256;
/// A request head must arrive whole within this (a slow client is cut).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The redirector's side, when this binary was started as [`ARG`]; `args`
/// are those after it.
pub fn serve(args: &[OsString]) -> ExitCode {
    let Some(port) = args.first().and_then(|p| p.to_str()?.parse::<u16>().ok()) else {
        eprintln!("modus {ARG}: want the HTTPS port");
        return ExitCode::from(2);
    };
    // Gone with the server that started it, whatever way it ends.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
    let listener = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => TcpListener::from(fd),
        Err(e) => {
            eprintln!("modus {ARG}: no listening socket on standard input: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _ = listener.set_nonblocking(false);
    let busy = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match accept::accept(&listener, accept::Mode::Blocking) {
            Ok((stream, _)) => stream,
            Err((Failed::Retry | Failed::Empty, _)) => continue,
            Err((Failed::Pause, _)) => {
                std::thread::sleep(accept::PAUSE);
                continue;
            }
            Err((Failed::Gone, e)) => {
                eprintln!("modus {ARG}: accept: {e}");
                return ExitCode::FAILURE;
            }
        };
        if busy.load(Ordering::Relaxed) >= MAX_AT_ONCE {
            // Closed at once: the client retries, the redirector stays up.
            continue;
        }
        busy.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::clone(&busy);
        let spawned = std::thread::Builder::new().name("redirect".into()).spawn(move || {
            let _ = answer(stream, port);
            slot.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            // The thread never ran (its stream is closed): its slot is free.
            busy.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Reads one request head and answers it: 308 to the HTTPS address, or
/// 400 for what does not parse; then closes.
fn answer(mut stream: TcpStream, port: u16) -> std::io::Result<()> {
    let started = Instant::now();
    stream.set_write_timeout(Some(HEAD_TIMEOUT))?;
    let limits = h1::Limits::default();
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let response = loop {
        let left = HEAD_TIMEOUT.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        match h1::parse_request(&buf, &limits) {
            Ok(h1::Parsed::Partial) => continue,
            Ok(h1::Parsed::Complete { head, .. }) => break redirect(&head, stream.local_addr()?, port),
            Err(e) => break plain(e.status(), &[]),
        }
    };
    stream.write_all(&response)?;
    // Our side first, then what the client still sends is drained briefly,
    // so it reads the answer rather than a reset.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = std::io::copy(&mut stream.take(64 << 10), &mut std::io::sink());
    Ok(())
}

/// The 308 for `head`: the same host (without its port) and target, on
/// the HTTPS port (left out when it is 443).
fn redirect(head: &h1::RequestHead, local: std::net::SocketAddr, port: u16) -> Vec<u8> {
    let host = head.host().map(host_without_port).unwrap_or_default();
    let host = if host.is_empty() {
        match local.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        }
    } else {
        host.to_string()
    };
    // Origin-form; an absolute-form target's path and query (RFC 9112 §3.2.2).
    let target = match head.query() {
        Some(q) => format!("{}?{q}", head.path()),
        None => head.path().to_string(),
    };
    let target = if target.starts_with('/') { target } else { "/".to_string() };
    let location = match port {
        443 => format!("https://{host}{target}"),
        port => format!("https://{host}:{port}{target}"),
    };
    plain(308, &[("Location", &location)])
}

/// `Host`'s name without its port: `example.org:80` → `example.org`,
/// `[::1]:80` → `[::1]`.
fn host_without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// A response with no body, that closes the connection.
fn plain(status: u16, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} {}\r\n", h1::reason_phrase(status)).into_bytes();
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(&h1::http_date_now());
    out.extend_from_slice(b"\r\nServer: modus\r\nContent-Length: 0\r\nConnection: close\r\n");
    for (name, value) in fields {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_location_keeps_host_and_target() {
        let parse = |req: &[u8]| match h1::parse_request(req, &h1::Limits::default()).unwrap() {
            h1::Parsed::Complete { head, .. } => head,
            h1::Parsed::Partial => panic!("partial"),
        };
        let local = "127.0.0.1:80".parse().unwrap();
        let location = |req: &[u8], port| {
            let out = String::from_utf8(redirect(&parse(req), local, port)).unwrap();
            assert!(out.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"), "{out}");
            out.lines().find_map(|l| l.strip_prefix("Location: ")).unwrap().to_string()
        };
        assert_eq!(
            location(b"GET /a?b=1 HTTP/1.1\r\nHost: example.org:80\r\n\r\n", 443),
            "https://example.org/a?b=1"
        );
        assert_eq!(location(b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 8443), "https://[::1]:8443/");
        assert_eq!(location(b"GET /x HTTP/1.0\r\n\r\n", 8443), "https://127.0.0.1:8443/x");
        assert_eq!(
            location(b"GET http://h.example/p?q HTTP/1.1\r\nHost: other\r\n\r\n", 443),
            "https://h.example/p?q"
        );
        assert_eq!(host_without_port("example.org"), "example.org");
    }
}
