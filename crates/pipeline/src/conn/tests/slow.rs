//! `--min-rate`: a head or a response slower than the rate after the grace
//! period is due earlier than its own timeout.

use super::*;

fn min_rate(bytes_per_s: u64) -> Harness {
    let settings = Settings {
        header_timeout: Duration::from_secs(30),
        min_rate: bytes_per_s,
        min_rate_grace: Duration::from_secs(1),
        ..Settings::default()
    };
    Harness::with(settings, Mode::Inline)
}

#[test]
fn a_head_slower_than_the_rate_is_due_after_the_grace_and_what_it_earned() {
    let mut h = min_rate(100);
    let start = h.now;
    // 10 bytes earn 0.1 s at 100 B/s, after the 1 s grace: far before 30 s.
    let Want::Read(due) = h.send(b"GET /a.txt") else { panic!() };
    assert_eq!(due, start + Duration::from_millis(1100));
    // More bytes earn more time.
    h.now += Duration::from_millis(500);
    let Want::Read(later) = h.send(b" HTTP/1.1\r\n") else { panic!() };
    assert_eq!(later, start + Duration::from_millis(1210));
    assert!(h.time_out_at(later), "a 408 is to be sent");
    h.drive();
    assert_eq!(h.response().status, 408);
}

#[test]
fn without_a_rate_the_head_deadline_is_the_header_timeout() {
    let mut h = Harness::new();
    let start = h.now;
    let Want::Read(due) = h.send(b"GET /a.txt") else { panic!() };
    assert_eq!(due, start + h.p.settings.header_timeout);
}

#[test]
fn a_reader_slower_than_the_rate_is_cut_and_logged_with_what_it_got() {
    let mut h = min_rate(1000);
    h.wire.send_room(20_000);
    let start = h.now;
    // 20,000 bytes out earn 20 s at 1,000 B/s, after the 1 s grace.
    let want = h.send(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(want, Want::Write(start + Duration::from_secs(21)));
    let head_len = h.wire.take_written().windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    // Nothing more taken by then: cut at once, even before the send timeout.
    h.now = start + Duration::from_secs(21);
    assert_eq!(h.drive(), Want::Close);
    assert_eq!(h.statuses(), [(200, 20_000 - head_len as u64)]);
}
