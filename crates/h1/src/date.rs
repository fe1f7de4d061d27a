//! HTTP dates (RFC 9110 §5.6.7).

use std::cell::Cell;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use httpdate::HttpDate;

/// The length of an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`.
const IMF_FIXDATE_LEN: usize = 29;

thread_local! {
    /// The second last formatted on this thread, and its IMF-fixdate.
    static NOW: Cell<Option<(u64, [u8; IMF_FIXDATE_LEN])>> = const { Cell::new(None) };
    /// The monotonic reading [`with_now`] lends to this thread's calls.
    static LENT: Cell<Option<Instant>> = const { Cell::new(None) };
    /// When the second of `NOW` ends on the monotonic clock, as of the
    /// last wall-clock read made for a lent reading.
    static SECOND_ENDS: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with `now`, a monotonic reading the caller took and has not
/// waited since, standing in for the clock in this thread's
/// [`http_date_now`] calls: a `Date` then costs a wall-clock read once a
/// second instead of once a response (nginx's cached time, scoped).
///
/// A `Date` may lag by as long as `now` is stale; a reading lent while a
/// caller blocks would make it wrong, so lend only fresh ones.
pub fn with_now<R>(now: Instant, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            // During thread exit the cell may already be gone.
            let _ = LENT.try_with(|lent| lent.set(self.0));
        }
    }
    let _restore = Restore(LENT.with(|lent| lent.replace(Some(now))));
    f()
}

/// The current time as an IMF-fixdate, for the `Date` field (RFC 9110 §6.6.1).
///
/// Formatting happens at most once per second per thread; other calls only
/// read the clock and copy 29 bytes. A thread-local cache needs no
/// synchronisation, and `Date` has a resolution of one second anyway.
pub fn http_date_now() -> [u8; IMF_FIXDATE_LEN] {
    let lent = LENT.with(Cell::get);
    if let (Some(now), Some(ends), Some((_, date))) = (lent, SECOND_ENDS.with(Cell::get), NOW.with(Cell::get))
    {
        if now < ends {
            return date;
        }
    }
    let wall = SystemTime::now();
    let since_epoch = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
    if let Some(now) = lent {
        // Early by however stale `now` is: the next second's first
        // responses read the wall clock once more rather than keep an old date.
        let left = Duration::from_secs(1) - Duration::from_nanos(since_epoch.subsec_nanos().into());
        SECOND_ENDS.with(|ends| ends.set(Some(now + left)));
    }
    let second = since_epoch.as_secs();
    NOW.with(|cache| match cache.get() {
        Some((cached, date)) if cached == second => date,
        _ => {
            let date = imf_fixdate(wall);
            cache.set(Some((second, date)));
            date
        }
    })
}

/// Formats `t` as an IMF-fixdate, the only format a sender may generate
/// (RFC 9110 §5.6.7).
///
/// Times outside the years 1970–9999, which the format cannot express, are
/// clamped to that range; file times can be anything.
pub fn format_http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(clamp(t))
}

/// Parses an HTTP date in any of the three formats RFC 9110 §5.6.7 requires
/// recipients to accept: IMF-fixdate, the obsolete RFC 850 format and
/// asctime. `None` if `s` is none of them, which for conditional requests
/// means the field is ignored (RFC 9110 §13.1.3).
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s).ok()
}

fn imf_fixdate(t: SystemTime) -> [u8; IMF_FIXDATE_LEN] {
    let mut date = [0; IMF_FIXDATE_LEN];
    let mut cursor = &mut date[..];
    write!(cursor, "{}", HttpDate::from(clamp(t))).expect("an IMF-fixdate is 29 bytes");
    date
}

/// `t` limited to what httpdate can format without panicking.
fn clamp(t: SystemTime) -> SystemTime {
    // 9999-12-31T23:59:59Z
    const LATEST: Duration = Duration::from_secs(253_402_300_799);
    match t.duration_since(UNIX_EPOCH) {
        Err(_) => UNIX_EPOCH,
        Ok(since_epoch) if since_epoch > LATEST => UNIX_EPOCH + LATEST,
        Ok(_) => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_EXAMPLE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn formats_imf_fixdate() {
        assert_eq!(format_http_date(at(784_111_777)), RFC_EXAMPLE);
        assert_eq!(format_http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            format_http_date(at(784_111_777) + Duration::from_millis(999)),
            RFC_EXAMPLE,
            "sub-second part is truncated"
        );
        assert_eq!(&imf_fixdate(at(784_111_777)), RFC_EXAMPLE.as_bytes());
    }

    #[test]
    fn clamps_unrepresentable_times() {
        assert_eq!(format_http_date(UNIX_EPOCH - Duration::from_secs(1)), "Thu, 01 Jan 1970 00:00:00 GMT");
        let latest = "Fri, 31 Dec 9999 23:59:59 GMT";
        assert_eq!(format_http_date(at(253_402_300_799)), latest);
        assert_eq!(format_http_date(at(253_402_300_800)), latest);
        assert_eq!(format_http_date(at(u64::MAX / 2)), latest);
    }

    #[test]
    fn parses_the_three_formats() {
        let expected = Some(at(784_111_777));
        assert_eq!(parse_http_date(RFC_EXAMPLE), expected);
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), expected);
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), expected);
    }

    #[test]
    fn rejects_other_text() {
        for text in [
            "",
            "yesterday",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "1994-11-06T08:49:37Z",
            "784111777",
        ] {
            assert_eq!(parse_http_date(text), None, "{text:?}");
        }
    }

    #[test]
    fn round_trips() {
        for seconds in [0, 1, 951_782_400, 1_700_000_000, 253_402_300_799] {
            assert_eq!(parse_http_date(&format_http_date(at(seconds))), Some(at(seconds)));
        }
    }

    #[test]
    fn now_is_current_and_cached() {
        let before = SystemTime::now() - Duration::from_secs(1);
        let first = http_date_now();
        let second = http_date_now();
        let after = SystemTime::now();
        for date in [first, second] {
            let parsed = parse_http_date(std::str::from_utf8(&date).unwrap()).unwrap();
            assert!(before <= parsed && parsed <= after, "{parsed:?}");
        }
        let (cached_second, cached) = NOW.with(Cell::get).unwrap();
        assert_eq!(cached, second);
        assert_eq!(at(cached_second), parse_http_date(std::str::from_utf8(&second).unwrap()).unwrap());
    }

    #[test]
    fn a_lent_reading_reads_the_wall_clock_once_a_second() {
        let now = Instant::now();
        let before = SystemTime::now() - Duration::from_secs(1);
        let first = with_now(now, http_date_now);
        let parsed = parse_http_date(std::str::from_utf8(&first).unwrap()).unwrap();
        assert!(before <= parsed && parsed <= SystemTime::now(), "{parsed:?}");
        let ends = SECOND_ENDS.with(Cell::get).unwrap();
        assert!(ends > now && ends <= now + Duration::from_secs(1));
        // Within the second, the cached date is used whatever the wall clock
        // says: plant a different one to see that it is not read.
        let planted = *b"Sun, 06 Nov 1994 08:49:37 GMT";
        NOW.with(|cache| cache.set(Some((0, planted))));
        assert_eq!(with_now(now, http_date_now), planted);
        // Past the second's end the wall clock is read again.
        assert_ne!(with_now(ends, http_date_now), planted);
        assert_eq!(LENT.with(Cell::get), None, "the reading is lent only for the call");
        // Without a lent reading, every call reads the wall clock.
        NOW.with(|cache| cache.set(Some((0, planted))));
        assert_ne!(http_date_now(), planted);
    }
}
