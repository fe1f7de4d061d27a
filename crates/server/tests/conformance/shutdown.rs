// Graceful shutdown on SIGTERM/SIGINT/SIGQUIT; SIGHUP and SIGUSR2 are never
// fatal. (Included once per model.)

use super::MODEL;
use crate::common::*;
use std::time::{Duration, Instant};

#[track_caller]
fn assert_refused(srv: &Server) {
    let addr = srv.addr();
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "{addr} still accepts connections after the server stopped"
    );
}

#[track_caller]
fn stops_on(sig: Signal) {
    let (_root, mut srv) = standard(MODEL, &[]);
    assert_serves(&srv);
    srv.signal(sig);
    let status = srv.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "{sig:?} → {status:?}\n{}", srv.stderr());
    assert_refused(&srv);
}

#[test]
fn sigterm_exits_zero() {
    stops_on(Signal::Term);
}

#[test]
fn sigint_exits_zero() {
    stops_on(Signal::Int);
}

#[test]
fn sigquit_exits_zero() {
    stops_on(Signal::Quit);
}

/// HUP (an nginx user's reload, or a closing terminal) and USR2 leave the
/// server serving, and the error log says what they did.
#[test]
fn sighup_and_sigusr2_keep_it_serving() {
    let (_root, mut srv) = standard(MODEL, &[]);
    assert_serves(&srv);
    srv.signal(Signal::Hup);
    assert!(poll_until(|| srv.stderr().contains("SIGHUP: configuration reloaded")), "{}", srv.stderr());
    srv.signal(Signal::Usr2);
    assert!(poll_until(|| srv.stderr().contains("SIGUSR2 ignored")), "{}", srv.stderr());
    assert_serves(&srv);
    srv.signal(Signal::Term);
    let status = srv.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "{status:?}\n{}", srv.stderr());
}

#[test]
fn in_flight_response_completes_and_new_connections_are_refused() {
    let root = Docroot::standard();
    // Far more than loopback socket buffers hold, so the response is still
    // being written when the signal arrives.
    let data = pseudo_random_bytes(24 << 20, 3);
    root.file("big.bin", &data);
    // A long shutdown timeout: the server must finish on its own, not by
    // running out the clock (so idle connections must not hold it up).
    let mut srv = serve(MODEL, &root, &["--shutdown-timeout", "60s"]);
    let mut c = srv.client();
    c.send("GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n");
    c.wait_for_bytes(1);
    srv.signal(Signal::Term);

    // While the response is unfinished, the listener goes away. (Bounded
    // probe: the signal is handled asynchronously.)
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match std::net::TcpStream::connect_timeout(&srv.addr(), Duration::from_secs(1)) {
            Err(_) => break,
            Ok(_) => {
                assert!(Instant::now() < deadline, "new connections still accepted during graceful stop");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    assert!(!srv.has_exited(), "server exited before finishing the in-flight response");

    let r = c.read_response("GET");
    r.assert_status(200);
    assert_bytes_eq(&r.body, &data, "in-flight body");
    // Once stopping, the connection is closed after its response (also
    // when another connection slipped in before the listener closed).
    let rest = c.read_to_end_expect_closed();
    assert!(rest.is_empty());
    let status = srv.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "{status:?}\n{}", srv.stderr());
}

#[test]
fn idle_keepalive_connection_does_not_block_shutdown() {
    let (_root, mut srv) = standard(MODEL, &["--keepalive-timeout", "60s"]);
    let mut c = srv.client();
    c.request("GET", "/hello.txt", &[]).assert_status(200);
    srv.signal(Signal::Term);
    let status = srv.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "{status:?}\n{}", srv.stderr());
    let rest = c.read_to_end_expect_closed();
    assert!(rest.is_empty(), "bytes on idle connection: {:?}", String::from_utf8_lossy(&rest));
}

#[test]
fn shutdown_timeout_bounds_a_stuck_client() {
    // A client that never reads must not keep the server alive beyond
    // --shutdown-timeout.
    let root = Docroot::standard();
    root.file("big.bin", pseudo_random_bytes(24 << 20, 4));
    let mut srv = serve(MODEL, &root, &["--shutdown-timeout", "1s"]);
    let mut c = srv.client();
    c.send("GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n");
    c.wait_for_bytes(1);
    srv.signal(Signal::Term);
    let status = srv.wait_exit(EXIT_TIMEOUT);
    // Abandoning a client at the deadline is the documented way to stop, not a failure.
    assert!(status.success(), "{status:?}\n{}", srv.stderr());
    drop(c);
}
