//! Backends taken out by their errors and by failed health checks.

use super::*;

#[test]
fn a_burst_of_gateway_errors_takes_a_backend_out() {
    let backend = TestBackend::start(|head, _| {
        if head.contains("/boom") {
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 4\r\n\r\nboom".to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
        }
    });
    let d = director(
        &[backend.addr],
        &[
            "--max-fails",
            "3",
            "--fail-window",
            "1m",
            "--health-interval",
            "1h",
            "--adaptive",
            "off",
            "--status-path",
            "/.director",
        ],
    );
    let mut c = d.client();
    c.request("GET", "/", &[]).assert_status(200);
    // Two are not a burst.
    c.request("GET", "/boom", &[]).assert_status(502);
    c.request("GET", "/boom", &[]).assert_status(502);
    c.request("GET", "/", &[]).assert_status(200);
    assert!(status(&d).contains("health=up"));
    c.request("GET", "/boom", &[]).assert_status(502);
    let st = status(&d);
    assert!(st.contains("health=down"), "{st}");
    // Out of rotation: answered at once by the director, not the backend.
    let r = d.client().request("GET", "/", &[]);
    r.assert_status(502);
    assert_eq!(backend.requests().len(), 5);
}

#[test]
fn a_steady_share_of_errors_does_not_take_a_backend_out() {
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let backend = TestBackend::start(move |_, _| match seen.fetch_add(1, Ordering::SeqCst) % 20 {
        0 => b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 4\r\n\r\nboom".to_vec(),
        10 => b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom".to_vec(),
        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
    });
    let d = director(
        &[backend.addr],
        &[
            "--max-fails",
            "3",
            "--fail-window",
            "1m",
            "--health-interval",
            "1h",
            "--status-path",
            "/.director",
        ],
    );
    let mut c = d.client();
    let mut answered = [0usize; 3];
    for _ in 0..200 {
        match c.request("GET", "/", &[]).status {
            200 => answered[0] += 1,
            500 => answered[1] += 1,
            502 => answered[2] += 1,
            other => panic!("status {other}"),
        }
    }
    // One in ten failed (half of them gateway errors), well over --max-fails
    // in the window, but never half of the exchanges: the backend answered
    // all of them.
    assert_eq!(answered, [180, 10, 10]);
    assert_eq!(n.load(Ordering::SeqCst), 200);
    assert!(status(&d).contains("health=up"));
}

#[test]
fn a_hung_backend_fails_its_health_checks_and_returns_when_it_answers() {
    // Health checks go to `/slow/health`, which the backend holds while its
    // gate is closed: it accepts, reads, never answers.
    let backend = TestBackend::ok();
    let d = director(
        &[backend.addr],
        &[
            "--health-path",
            "/slow/health",
            "--health-interval",
            "100ms",
            "--health-timeout",
            "1s",
            "--status-path",
            "/.director",
        ],
    );
    wait_status(&d, "health checks passing", |s| s.contains("health=up"));
    d.client().request("GET", "/", &[]).assert_status(200);
    backend.close_gate();
    wait_status(&d, "the hung backend out", |s| s.contains("health=down"));
    d.client().request("GET", "/", &[]).assert_status(502);
    backend.open_gate();
    wait_status(&d, "the backend back", |s| s.contains("health=up"));
    d.client().request("GET", "/", &[]).assert_status(200);
    assert!(
        backend.requests().iter().any(|r| r.starts_with("GET /slow/health HTTP/1.1\r\n")),
        "the checks are HTTP requests"
    );
}

#[test]
fn one_failed_health_check_in_a_row_does_not_take_a_backend_out() {
    let checks = Arc::new(AtomicUsize::new(0));
    let broken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (seen, dead) = (checks.clone(), broken.clone());
    let backend = TestBackend::start(move |head, _| {
        if head.contains("/health") {
            // Every other check fails, then (once `dead`) all of them.
            let n = seen.fetch_add(1, Ordering::SeqCst);
            if dead.load(Ordering::SeqCst) || n % 2 == 1 {
                return b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nsick".to_vec();
            }
        }
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    });
    let d = director(
        &[backend.addr],
        &["--health-path", "/health", "--health-interval", "20ms", "--status-path", "/.director"],
    );
    eventually("20 health checks", || checks.load(Ordering::SeqCst) >= 20);
    let st = status(&d);
    assert!(st.contains("health=up"), "alternate failures are never two in a row:\n{st}");
    d.client().request("GET", "/", &[]).assert_status(200);
    broken.store(true, Ordering::SeqCst);
    wait_status(&d, "health=down", |s| s.contains("health=down"));
}
