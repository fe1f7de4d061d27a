//! Every phase of a static request's connection, and every way out of it.

use super::*;

const GET_B: &[u8] = b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n";

fn limits(f: impl FnOnce(&mut Settings)) -> Harness {
    let mut settings = Settings::default();
    f(&mut settings);
    Harness::with(settings, Mode::Inline)
}

#[test]
fn a_request_is_answered_and_the_connection_waits_idle() {
    let mut h = Harness::new();
    let want = h.send(GET);
    assert_eq!(want, Want::Read(h.now + h.p.settings.keepalive_timeout));
    let r = h.response();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    assert_eq!(r.header("content-length"), Some("5"));
    assert!(!r.closes());
    assert_eq!(h.conn.served(), 1);
    assert_eq!(h.statuses(), [(200, 5)]);
    // Idle: no buffer held between requests.
    assert!(h.conn.buf.is_empty());
}

#[test]
fn pipelined_requests_are_answered_in_order_in_one_drive() {
    let mut h = Harness::new();
    h.send(&[GET, GET_B, GET].concat());
    let statuses: Vec<u16> = h.responses().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 404, 200]);
    assert_eq!(h.conn.served(), 3);
}

/// What was written, without its `Date` and `Last-Modified` lines: the
/// parts of an answer that depend on when it was given and on when each
/// harness wrote its files (the wall clock may tick between two runs of
/// the same input).
fn undated(written: Vec<u8>) -> String {
    let text = String::from_utf8(written).expect("these answers are text");
    text.split_inclusive("\r\n")
        .filter(|line| !line.starts_with("Date: ") && !line.starts_with("Last-Modified: "))
        .collect()
}

/// However the bytes are cut into reads, the answer is the same.
#[test]
fn every_split_of_the_input_gets_the_same_answer() {
    let input = [GET, b"HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n", GET_B].concat();
    let mut reference = Harness::new();
    reference.send(&input);
    let expected = undated(reference.wire.take_written());
    assert_eq!(reference.conn.served(), 3);
    assert_eq!(expected.matches("HTTP/1.1 ").count(), 3, "{expected}");
    for cut in 1..input.len() {
        let mut h = Harness::new();
        h.send(&input[..cut]);
        h.send(&input[cut..]);
        assert_eq!(undated(h.wire.take_written()), expected, "input cut at {cut}");
    }
    // A byte per read.
    let mut h = Harness::new();
    h.wire.segments_of(1);
    h.send(&input);
    assert_eq!(undated(h.wire.take_written()), expected);
}

#[test]
fn head_gets_the_fields_of_get_and_no_body() {
    let mut h = Harness::new();
    h.send(b"HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let written = h.wire.take_written();
    let r = &parse_bodiless(&written)[0];
    assert_eq!((r.status, r.header("content-length")), (200, Some("5")));
    assert!(written.ends_with(b"\r\n\r\n"), "no body after the head");
    assert_eq!(h.statuses(), [(200, 0)]);
}

#[test]
fn connection_close_is_answered_then_the_connection_closes() {
    let mut h = Harness::new();
    let want = h.send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(want, Want::Close);
    let r = h.response();
    assert!(r.closes());
    assert_eq!(r.body, b"hello");
}

#[test]
fn http_1_0_closes_unless_it_asks_for_keep_alive() {
    let mut h = Harness::new();
    assert_eq!(h.send(b"GET /a.txt HTTP/1.0\r\n\r\n"), Want::Close);
    assert_eq!(h.response().status, 200);

    let mut h = Harness::new();
    let want = h.send(b"GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(matches!(want, Want::Read(_)), "{want:?}");
    let r = h.response();
    assert_eq!(r.header("connection"), Some("keep-alive"));
}

#[test]
fn the_last_request_a_connection_may_make_is_told_so() {
    let mut h = limits(|s| s.max_keepalive_requests = 2);
    h.send(GET);
    assert!(!h.response().closes());
    // The client asked to keep the connection and may have sent its next
    // request: our side is shut and its bytes read until it closes, since
    // closing under them would reset the connection and cut the response.
    assert_eq!(h.send(GET), Want::Read(h.now + h.p.settings.linger_timeout));
    assert!(h.response().closes());
    assert!(h.wire.shut_write());
    h.wire.arrive(GET);
    assert_eq!(h.drive(), Want::Read(h.now + h.p.settings.linger_timeout));
    assert!(h.wire.take_written().is_empty(), "a request after the last is not answered");
    h.wire.client_closes();
    assert_eq!(h.drive(), Want::Close);
}

#[test]
fn bad_input_gets_400_then_the_connection_lingers_and_closes() {
    let mut h = Harness::new();
    let want = h.send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nBad Field: y\r\n\r\n");
    // Our side is shut; what the client still sends is read and dropped for
    // a while, so it reads the 400 instead of a reset (RFC 9112 §9.6).
    assert_eq!(want, Want::Read(h.now + h.p.settings.linger_timeout));
    assert!(h.wire.shut_write());
    let r = h.response();
    assert_eq!(r.status, 400);
    assert!(r.closes());
    assert_eq!(h.send(b"more garbage"), Want::Read(h.now + h.p.settings.linger_timeout));
    assert_eq!(h.wire.unread(), 0, "lingering drains the input");
    assert!(h.wire.take_written().is_empty());
    h.wire.client_closes();
    assert_eq!(h.drive(), Want::Close);
    assert_eq!(h.records.len(), 1);
    assert_eq!(h.records[0].status, 400);
    assert_eq!(h.records[0].request_line.as_deref(), Some(&b"GET /a.txt HTTP/1.1"[..]));
}

#[test]
fn lingering_ends_at_its_deadline() {
    let mut h = Harness::new();
    let Want::Read(deadline) = h.send(b"\x00\x01\x02\r\n\r\n") else { panic!() };
    assert_eq!(h.response().status, 400);
    assert!(!h.time_out_at(deadline), "nothing more to send: close");
}

#[test]
fn a_request_line_over_the_limit_gets_414() {
    let mut h = limits(|s| s.limits.max_request_line = 64);
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(100));
    h.send(long.as_bytes());
    let r = h.response();
    assert_eq!(r.status, 414);
    assert!(r.closes());
}

#[test]
fn a_head_over_the_limit_gets_431() {
    let mut h = limits(|s| s.limits.max_header_bytes = 256);
    let big = format!("GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "v".repeat(300));
    h.send(big.as_bytes());
    assert_eq!(h.response().status, 431);
}

#[test]
fn a_body_nobody_reads_is_dropped_to_find_the_next_request() {
    let mut h = Harness::new();
    let post = b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123";
    h.send(post);
    assert_eq!(h.response().status, 200);
    // The rest of the body arrives with the next request behind it.
    h.send(&[b"456789", GET_B].concat());
    assert_eq!(h.response().status, 404);
    assert_eq!(h.conn.served(), 2);
}

#[test]
fn a_body_too_large_to_drop_is_answered_and_the_connection_closed() {
    let mut h = Harness::new();
    let head = format!("GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", 2 << 20);
    let want = h.send(head.as_bytes());
    let r = h.response();
    assert_eq!(r.status, 200);
    assert!(r.closes());
    // The body may still be arriving: linger rather than reset it.
    assert_eq!(want, Want::Read(h.now + h.p.settings.linger_timeout));
}

#[test]
fn a_chunked_body_for_a_file_closes_after_the_answer() {
    let mut h = Harness::new();
    h.send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    let r = h.response();
    assert_eq!(r.status, 200);
    assert!(r.closes());
}

#[test]
fn a_client_waiting_for_100_continue_gets_the_answer_and_a_close() {
    let mut h = Harness::new();
    h.send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    let r = h.response();
    assert_eq!(r.status, 200, "no 100: the body is not wanted");
    assert!(r.closes());
}

#[test]
fn a_silent_client_times_out_quietly_but_a_started_head_gets_408() {
    // Idle keep-alive: closed without a word, as nginx does.
    let mut h = Harness::new();
    let Want::Read(idle) = h.send(GET) else { panic!() };
    h.wire.take_written();
    assert!(h.time_out_at(idle), "one more read decides");
    assert_eq!(h.drive(), Want::Close);
    assert!(h.wire.take_written().is_empty());

    // A request there when the idle deadline's timer fires is answered.
    let mut h = Harness::new();
    let Want::Read(idle) = h.send(GET) else { panic!() };
    h.wire.take_written();
    h.wire.arrive(GET);
    assert!(h.time_out_at(idle));
    h.drive();
    assert_eq!(h.response().status, 200, "a request that came with the deadline is answered");

    // A head begun and not finished: 408, then close.
    let mut h = Harness::new();
    let Want::Read(deadline) = h.send(b"GET /a.txt HTTP/1.1\r\nHo") else { panic!() };
    assert_eq!(deadline, h.now + h.p.settings.header_timeout);
    assert!(h.time_out_at(deadline), "a 408 is to be sent");
    h.drive();
    let r = h.response();
    assert_eq!(r.status, 408);
    assert!(r.closes());
}

/// The head deadline is total: dribbling does not extend it (slowloris).
#[test]
fn a_dribbling_client_is_cut_off_at_the_head_deadline() {
    let mut h = Harness::new();
    let Want::Read(deadline) = h.send(b"GET /a.txt HTTP/1.1\r\n") else { panic!() };
    h.now += h.p.settings.header_timeout / 2;
    assert_eq!(h.send(b"X-A: 1\r\n"), Want::Read(deadline));
    h.now = deadline;
    h.send(b"X-B: 2\r\n");
    assert_eq!(h.response().status, 408);
}

#[test]
fn a_slow_reader_gets_the_response_as_it_makes_room() {
    let mut h = Harness::new();
    h.wire.send_room(1000);
    let want = h.send(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(want, Want::Write(h.now + h.p.settings.send_timeout));
    let mut got = h.wire.take_written();
    assert_eq!(got.len(), 1000);
    // Progress moves the send deadline; none leaves it.
    h.now += Duration::from_secs(30);
    assert_eq!(h.drive(), Want::Write(h.now - Duration::from_secs(30) + h.p.settings.send_timeout));
    h.wire.send_room(50_000);
    assert_eq!(h.drive(), Want::Write(h.now + h.p.settings.send_timeout));
    h.wire.unlimited_room();
    assert!(matches!(h.drive(), Want::Read(_)));
    got.extend(h.wire.take_written());
    let r = &parse_responses(&got)[0];
    assert_eq!((r.status, r.body.len()), (200, BIG.len()));
    assert_eq!(h.statuses(), [(200, BIG.len() as u64)]);
}

#[test]
fn a_reader_that_stops_is_logged_with_what_it_got() {
    let mut h = Harness::new();
    h.wire.send_room(20_000);
    let Want::Write(deadline) = h.send(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n") else { panic!() };
    let head_len = h.wire.take_written().windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(!h.time_out_at(deadline));
    assert_eq!(h.statuses(), [(200, 20_000 - head_len as u64)]);
}

#[test]
fn a_reset_mid_response_closes_and_logs_what_was_sent() {
    let mut h = Harness::new();
    h.wire.send_room(10_000);
    h.send(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    let head_len = h.wire.take_written().windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    h.wire.reset();
    assert_eq!(h.drive(), Want::Close);
    assert_eq!(h.statuses(), [(200, 10_000 - head_len as u64)]);
}

#[test]
fn a_client_that_leaves_mid_head_is_closed_without_an_answer() {
    let mut h = Harness::new();
    h.wire.arrive(b"GET /a.txt HT");
    h.wire.client_closes();
    assert_eq!(h.drive(), Want::Close);
    assert!(h.wire.take_written().is_empty());
    // Logged as nginx logs it: 400, nothing sent, what the line was.
    assert_eq!(h.statuses(), [(400, 0)]);
    assert_eq!(h.records[0].request_line.as_deref(), Some(&b"GET /a.txt HT"[..]));
}

#[test]
fn a_graceful_stop_ends_idle_connections_and_closes_after_the_current_request() {
    // Idle after a request: the next one may be on its way, so the stop
    // waits for it a moment (closing under it would reset it), and answers
    // it with `Connection: close`.
    let mut h = Harness::new();
    h.send(GET);
    h.wire.take_written();
    let grace = h.now + super::super::stop::STOP_GRACE;
    assert_eq!(h.drive_stopping(true), Want::Read(grace), "idle after a request: a grace");
    h.now += Duration::from_millis(300);
    assert_eq!(h.drive_stopping(true), Want::Read(grace), "the grace counts from the stop");
    h.wire.arrive(GET);
    // Answered, then the close lingers: the client asked to keep it.
    assert_eq!(h.drive_stopping(true), Want::Read(h.now + h.p.settings.linger_timeout));
    let r = h.response();
    assert_eq!(r.status, 200, "a request that arrives within the grace is answered");
    assert!(r.closes());

    // Nothing came: at the end of the grace one more read finds nothing,
    // and the connection closes silently.
    let mut h = Harness::new();
    h.send(GET);
    h.wire.take_written();
    let grace = h.now + super::super::stop::STOP_GRACE;
    assert_eq!(h.drive_stopping(true), Want::Read(grace));
    assert!(h.time_out_at(grace), "one more read decides");
    assert_eq!(h.drive_stopping(true), Want::Close);
    assert!(h.wire.take_written().is_empty());

    // A request in the kernel when the grace's timer fires (its readiness
    // not yet seen): answered, not closed under.
    let mut h = Harness::new();
    h.send(GET);
    h.wire.take_written();
    let grace = h.now + super::super::stop::STOP_GRACE;
    assert_eq!(h.drive_stopping(true), Want::Read(grace));
    h.wire.arrive(GET);
    assert!(h.time_out_at(grace));
    assert_eq!(h.drive_stopping(true), Want::Read(h.now + h.p.settings.linger_timeout));
    let r = h.response();
    assert_eq!(r.status, 200, "a request that came at the end of the grace is answered");
    assert!(r.closes());

    // Accepted before the stop and silent since: nothing is on its way.
    let mut h = Harness::new();
    assert_eq!(h.drive_stopping(true), Want::Close);

    let mut h = Harness::new();
    h.wire.arrive(GET);
    assert_eq!(h.drive_stopping(true), Want::Read(h.now + h.p.settings.linger_timeout));
    let r = h.response();
    assert_eq!(r.status, 200, "a request that arrived before the stop is answered");
    assert!(r.closes());
    // Closed then by the client (or the linger deadline), not under a
    // request it may have sent meanwhile.
    h.wire.client_closes();
    assert_eq!(h.drive_stopping(true), Want::Close);
}

/// Edge-triggered drivers are told of every new byte, so after a short read
/// the connection does not ask again (the `recv` that would say EAGAIN).
#[test]
fn edge_triggered_reading_skips_the_read_that_would_find_nothing() {
    let mut h = Harness::new();
    h.conn.set_edge_triggered();
    h.send(GET);
    assert_eq!(h.wire.reads.get(), 1, "one read: it came back short");
    assert!(matches!(h.drive(), Want::Read(_)));
    assert_eq!(h.wire.reads.get(), 1, "no readiness reported: no read");
    h.conn.readable();
    h.wire.arrive(GET);
    h.drive();
    assert_eq!(h.wire.reads.get(), 2);
    assert_eq!(h.conn.served(), 2);

    // Level-triggered: reads until the wire says there is nothing.
    let mut h = Harness::new();
    h.send(GET);
    assert_eq!(h.wire.reads.get(), 2);
}

/// A FIN that came with the last bytes raises no edge of its own: once
/// the half-close is reported, a short read no longer ends the reading, so
/// a body cut short by the client's close is not left waiting for the
/// timeout (the 408 an edge-triggered loop once answered instead).
#[test]
fn edge_triggered_reading_finds_a_half_close_that_came_with_the_bytes() {
    let mut h = Harness::new();
    h.conn.set_edge_triggered();
    h.wire.arrive(b"GET /a.txt HTTP/1.1\r\nHost");
    h.wire.client_closes();
    h.conn.readable();
    h.conn.read_closed();
    assert_eq!(h.drive(), Want::Close, "the end of stream behind the short read is read");
    assert!(h.wire.take_written().is_empty(), "an unfinished head closed by the client gets no answer");

    // Without the half-close reported the short read ends the reading.
    let mut h = Harness::new();
    h.conn.set_edge_triggered();
    h.wire.arrive(b"GET /a.txt HTTP/1.1\r\nHost");
    h.wire.client_closes();
    assert!(matches!(h.drive(), Want::Read(_)));
}

#[test]
fn handed_out_requests_wait_for_their_reply() {
    let mut h = Harness::with(Settings::default(), Mode::HandOut);
    assert_eq!(h.send(&[GET, GET_B].concat()), Want::Process);
    let request = h.conn.take_request().expect("a request is ready");
    assert_eq!(request.path(), "/a.txt");
    assert!(request.keep_alive);
    assert!(h.conn.take_request().is_none(), "one at a time");
    assert_eq!(h.drive(), Want::Process, "still out");
    let reply = h.p.answer(&request);
    h.conn.deliver(reply, &h.p);
    // Sent, then the pipelined one is ready.
    assert_eq!(h.drive(), Want::Process);
    assert_eq!(h.response().status, 200);
    let request = h.conn.take_request().unwrap();
    assert_eq!(request.path(), "/b");
    h.conn.deliver(h.p.answer(&request), &h.p);
    assert!(matches!(h.drive(), Want::Read(_)));
    assert_eq!(h.response().status, 404);
}

#[test]
fn handing_out_scripts_only_runs_files_inline() {
    let mut h = Harness::with(Settings::default(), Mode::HandOutStreamed);
    assert!(matches!(h.send(GET), Want::Read(_)));
    assert_eq!(h.response().status, 200);
    assert!(h.conn.take_request().is_none());
}

#[test]
fn the_route_is_decided_once_and_carried_with_the_request() {
    let mut h = Harness::with(Settings::default(), Mode::HandOut);
    h.send(b"GET /x/../a.txt?q=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    let request = h.conn.take_request().unwrap();
    assert_eq!(request.route, Route::Site);
    assert_eq!(request.path(), "/a.txt", "normalised once");
    assert_eq!(request.head.path(), "/x/../a.txt");
}

#[test]
fn an_unknown_method_gets_501_and_the_connection_stays() {
    let mut h = Harness::new();
    let want = h.send(b"BREW /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(want, Want::Read(_)), "{want:?}");
    assert_eq!(h.response().status, 501);
    h.send(GET);
    assert_eq!(h.response().status, 200);
}

/// The access log's `%u`: the user of a Basic Authorization, bytes as sent.
#[test]
fn the_basic_user_is_read_for_the_log() {
    use super::super::respond::basic_user;
    // "alice:secret", "bob" (no colon), "é:x" in UTF-8, and others.
    assert_eq!(basic_user(b"Basic YWxpY2U6c2VjcmV0"), Some(b"alice".to_vec()));
    assert_eq!(basic_user(b"basic   Ym9i"), Some(b"bob".to_vec()));
    assert_eq!(basic_user(b"Basic w6k6eA=="), Some("é".as_bytes().to_vec()));
    assert_eq!(basic_user(b"Bearer YWxpY2U6c2VjcmV0"), None, "not Basic");
    assert_eq!(basic_user(b"Basic !!!"), None, "not base64");
    assert_eq!(basic_user(b"Basic OnBhc3M="), None, "no user (':pass')");
    assert_eq!(basic_user(b"Basic"), None);
}
