//! A CGI request's phases on a connection: the body streamed or collected,
//! the `100 Continue` probe, the script's output framed, local redirects,
//! failures and the timeout. The client is bytes in memory; the scripts
//! are real processes (`/bin/sh -c`), whose pipes the tests wait on.

use std::ffi::OsString;
use std::path::PathBuf;

use rustix::event::{PollFd, PollFlags, Timespec};

use super::*;
use crate::conn::stream::CLIENT_CLOSED;
use crate::{CgiSettings, Program, Scripts};

/// A harness whose `/cgi-bin/NAME` runs each `(NAME, shell script)`.
fn with_scripts(scripts: &[(&str, &str)], f: impl FnOnce(&mut Settings)) -> Harness {
    with_scripts_in(Mode::Inline, scripts, f)
}

/// [`with_scripts`] for a connection whose requests run as `mode` says.
fn with_scripts_in(mode: Mode, scripts: &[(&str, &str)], f: impl FnOnce(&mut Settings)) -> Harness {
    let programs = scripts
        .iter()
        .map(|(name, script)| Program {
            name: name.to_string(),
            command: PathBuf::from("/bin/sh"),
            args: vec![OsString::from("-c"), OsString::from(script)],
        })
        .collect();
    let mut settings =
        Settings { cgi: Some(CgiSettings::new(Scripts::Programs(programs))), ..Settings::default() };
    f(&mut settings);
    Harness::with(settings, mode)
}

const ECHO: (&str, &str) = ("echo", r#"printf 'Content-Type: text/plain\r\n\r\n'; cat"#);
const LENGTH: (&str, &str) =
    ("length", r#"printf 'Content-Type: text/plain\r\n\r\nlength=%s' "$CONTENT_LENGTH""#);

impl Harness {
    /// Drives until the script's run ends, waiting on its pipes between drives.
    fn run_script(&mut self) -> Want {
        for _ in 0..1000 {
            match self.drive() {
                Want::Source(_) => {
                    let waiting = self.conn.waiting();
                    let mut fds: Vec<PollFd<'_>> = waiting
                        .sources
                        .iter()
                        .map(|(fd, _)| PollFd::from_borrowed_fd(*fd, PollFlags::IN | PollFlags::OUT))
                        .collect();
                    let tick = Timespec { tv_sec: 0, tv_nsec: 10_000_000 };
                    let _ = rustix::event::poll(&mut fds, Some(&tick));
                }
                other => return other,
            }
        }
        panic!("the script never finished");
    }
}

#[test]
fn a_script_answers_and_the_connection_stays_open() {
    let mut h =
        with_scripts(&[("hi", r#"printf 'Content-Type: text/plain\r\n\r\nhi %s' "$QUERY_STRING""#)], |_| {});
    h.wire.arrive(b"GET /cgi-bin/hi?there HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(h.run_script(), Want::Read(_)));
    let r = h.response();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hi there"[..]));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "no length from the script: chunked");
    assert_eq!(h.statuses(), [(200, h.records[0].body_bytes)]);
    // The next request on the same connection.
    h.send(GET);
    assert_eq!(h.response().status, 200);
}

/// A script's `Content-Length` body is received whole before the script
/// starts, in every mode — nothing a script runs on (a thread, a process,
/// a stage) waits for the client, and every model gives a script the same
/// input for the same bytes (issue 34, items 1 and 9) —, past the spool
/// threshold into a temp file, and the request behind it is left alone.
#[test]
fn a_body_with_a_length_is_received_whole_before_the_script_starts() {
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for mode in [Mode::Inline, Mode::HandOut, Mode::HandOutStreamed] {
        let mut h = with_scripts_in(mode, &[ECHO], |_| {});
        let head =
            format!("POST /cgi-bin/echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len());
        h.wire.arrive(head.as_bytes());
        for piece in body.chunks(7_001) {
            let want = h.drive();
            assert!(matches!(want, Want::Read(_)), "{mode:?}: {want:?} before the whole body");
            assert_eq!(h.wire.written_len(), 0, "{mode:?}");
            h.wire.arrive(piece);
        }
        // The rest of the body comes with the next request behind it.
        h.wire.arrive(GET);
        if mode != Mode::Inline {
            assert_eq!(h.drive(), Want::Process, "{mode:?}: handed out once the body is in");
            let request = h.conn.take_request().expect("the script's request");
            assert_eq!(request.head.framing, BodyFraming::Length(body.len() as u64));
            let reply = h.p.answer(&request);
            h.conn.deliver(reply, &h.p);
        }
        h.run_script();
        if mode == Mode::HandOut {
            let request = h.conn.take_request().expect("the pipelined request");
            h.conn.deliver(h.p.answer(&request), &h.p);
        }
        h.drive();
        let responses = h.responses();
        assert_eq!(responses.len(), 2, "{mode:?}");
        assert!(responses[0].body == body, "{mode:?}: the script got another body");
        assert_eq!(responses[1].body, b"hello", "{mode:?}: the pipelined request was not fed to the script");
    }
}

/// The body's deadline moves with progress, as a head's would not, but
/// never past what `--min-rate` allows; when it passes no script has run.
#[test]
fn a_body_that_stops_coming_gets_408_and_no_script() {
    let mut h = with_scripts(&[ECHO], |s| s.header_timeout = Duration::from_secs(10));
    let Want::Read(due) =
        h.send(b"POST /cgi-bin/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhello")
    else {
        panic!("waits for the body")
    };
    assert_eq!(due, h.now + Duration::from_secs(10));
    h.now += Duration::from_secs(4);
    let Want::Read(later) = h.send(b" more") else { panic!("waits for the body") };
    assert_eq!(later, h.now + Duration::from_secs(10), "progress moves the deadline");
    assert!(h.time_out_at(later), "a 408 is to be sent");
    h.drive();
    let r = h.response();
    assert_eq!(r.status, 408);
    assert!(r.closes());
    assert_eq!(h.statuses(), [(408, r.body.len() as u64)]);

    // 100 B/s after a 1 s grace: 10 bytes earn 0.1 s, however recent they are.
    let mut h = with_scripts(&[ECHO], |s| {
        s.header_timeout = Duration::from_secs(30);
        s.min_rate = 100;
        s.min_rate_grace = Duration::from_secs(1);
    });
    let start = h.now;
    h.send(b"POST /cgi-bin/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
    h.now += Duration::from_millis(800);
    let Want::Read(due) = h.send(b"0123456789") else { panic!("waits for the body") };
    assert_eq!(due, start + Duration::from_millis(1100));
    assert!(h.time_out_at(due));
    h.drive();
    assert_eq!(h.response().status, 408);
}

/// A body cut short by the client starts no script and gets no answer (the
/// client cannot read one): logged as nginx logs it, 499.
#[test]
fn a_body_cut_short_starts_no_script() {
    let mut h = with_scripts(&[("early", r#"printf 'Content-Type: text/plain\r\n\r\nearly'"#)], |_| {});
    h.wire.arrive(b"POST /cgi-bin/early HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nhello");
    h.wire.client_closes();
    assert_eq!(h.drive(), Want::Close);
    assert!(h.wire.take_written().is_empty(), "the script's early answer went out");
    assert_eq!(h.statuses(), [(CLIENT_CLOSED, 0)]);
}

/// With `Expect: 100-continue` and a length, as with a chunked body: the
/// script is looked for, `100 Continue` sent, the body received, and only
/// then the script started.
#[test]
fn continue_for_a_body_with_a_length_comes_before_it_and_the_script_after_it() {
    let mut h = with_scripts(&[LENGTH], |_| {});
    let want = h.send(
        b"POST /cgi-bin/length HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    );
    assert!(matches!(want, Want::Read(_)), "{want:?}");
    assert_eq!(h.wire.take_written(), b"HTTP/1.1 100 Continue\r\n\r\n");
    h.wire.arrive(b"hel");
    assert!(matches!(h.drive(), Want::Read(_)), "no script before the whole body");
    h.wire.arrive(b"lo");
    h.run_script();
    assert_eq!(h.response().body, b"length=5");
}

#[test]
fn a_chunked_body_is_collected_and_given_with_its_length() {
    let mut h = with_scripts(&[LENGTH], |_| {});
    h.wire.arrive(
        b"POST /cgi-bin/length HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    );
    assert!(matches!(h.drive(), Want::Read(_)), "still collecting");
    h.wire.arrive(b"4\r\ndefg\r\n0\r\n\r\n");
    h.run_script();
    assert_eq!(h.response().body, b"length=7");
}

#[test]
fn a_bad_chunked_body_gets_400_before_any_script_runs() {
    let mut h = with_scripts(&[LENGTH], |_| {});
    h.send(b"POST /cgi-bin/length HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    let r = h.response();
    assert_eq!(r.status, 400);
    assert!(r.closes());
}

#[test]
fn a_body_over_the_limit_gets_413_without_running_the_script() {
    let mut h = with_scripts(&[LENGTH], |s| s.max_body = 10);
    h.send(b"POST /cgi-bin/length HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n");
    let r = h.response();
    assert_eq!(r.status, 413);
    assert!(r.closes());

    let mut h = with_scripts(&[LENGTH], |s| s.max_body = 10);
    h.send(
        b"POST /cgi-bin/length HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n",
    );
    assert_eq!(h.response().status, 413);
}

/// `100 Continue` is a promise to read the body: it is sent only once the
/// script is known to exist (RFC 9110 §10.1.1).
#[test]
fn continue_is_sent_only_for_a_script_that_exists() {
    let head = |path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
        )
    };
    let mut h = with_scripts(&[LENGTH], |_| {});
    h.send(head("/cgi-bin/length").as_bytes());
    assert_eq!(h.wire.take_written(), b"HTTP/1.1 100 Continue\r\n\r\n");
    h.wire.arrive(b"2\r\nhi\r\n0\r\n\r\n");
    h.run_script();
    assert_eq!(h.response().body, b"length=2");

    let mut h = with_scripts(&[LENGTH], |_| {});
    h.send(head("/cgi-bin/nothere").as_bytes());
    let r = h.response();
    assert_eq!(r.status, 404, "no 100 Continue for a script that is not there");
    assert!(r.closes(), "the unread chunked body cannot be skipped");
}

#[test]
fn a_local_redirect_serves_the_path_the_script_names() {
    let mut h = with_scripts(&[("go", r#"printf 'Location: /a.txt\r\n\r\n'"#)], |_| {});
    h.wire.arrive(b"GET /cgi-bin/go HTTP/1.1\r\nHost: x\r\n\r\n");
    h.run_script();
    let r = h.response();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
}

#[test]
fn local_redirects_in_a_loop_end_in_500() {
    let mut h = with_scripts(&[("loop", r#"printf 'Location: /cgi-bin/loop\r\n\r\n'"#)], |_| {});
    h.wire.arrive(b"GET /cgi-bin/loop HTTP/1.1\r\nHost: x\r\n\r\n");
    h.run_script();
    assert_eq!(h.response().status, 500);
}

#[test]
fn a_script_without_a_head_gets_502_and_one_that_fails_500() {
    for (script, status) in [("exit 0", 502), ("exit 3", 500), ("printf 'no head'", 502)] {
        let mut h = with_scripts(&[("s", script)], |_| {});
        h.wire.arrive(b"GET /cgi-bin/s HTTP/1.1\r\nHost: x\r\n\r\n");
        h.run_script();
        let r = h.response();
        assert_eq!(r.status, status, "{script}");
        assert!(r.closes(), "{script}");
        assert_eq!(h.statuses(), [(status, r.body.len() as u64)]);
    }
}

#[test]
fn a_script_that_says_nothing_in_time_is_killed_with_504() {
    let mut h = with_scripts(&[("sleepy", "sleep 30")], |_| {});
    let Want::Source(deadline) = h.send(b"GET /cgi-bin/sleepy HTTP/1.1\r\nHost: x\r\n\r\n") else { panic!() };
    assert!(h.time_out_at(deadline), "a 504 is to be sent");
    h.drive();
    let r = h.response();
    assert_eq!(r.status, 504);
    assert_eq!(h.statuses(), [(504, r.body.len() as u64)]);
}

#[test]
fn a_script_cut_off_mid_output_closes_the_connection() {
    let mut h =
        with_scripts(&[("half", r#"printf 'Content-Type: text/plain\r\n\r\nsome'; sleep 30"#)], |_| {});
    h.wire.arrive(b"GET /cgi-bin/half HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut deadline = None;
    for _ in 0..1000 {
        let Want::Source(d) = h.drive() else { panic!("the script runs for 30 s") };
        if h.wire.written_len() > 0 {
            deadline = Some(d);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let deadline = deadline.expect("the script's first bytes went out");
    assert!(!h.time_out_at(deadline), "output had begun: only a close can tell the client");
    assert_eq!(h.records.len(), 1);
    assert_eq!(h.records[0].status, 200);
}
