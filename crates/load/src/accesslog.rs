//! Reading access logs: Common and Combined Log Format lines as nginx,
//! Apache httpd and `modus serve` write them, one line at a time, without
//! allocating for a well-formed line.
//!
//! `HOST IDENT USER [DD/Mon/YYYY:hh:mm:ss ±hhmm] "REQUEST" STATUS SIZE
//! ["REFERER" "USER-AGENT" [TIME]]`. Quoted fields may carry escapes:
//! nginx's and modus's `\xHH` (`"` is `\x22`), Apache's `\"` and `\\`. A
//! trailing request time is read as seconds when it has a decimal point
//! (nginx `$request_time`, `0.012`) and as microseconds when it does not
//! (Apache `%D`). Anything else on a line is a reason to skip it, named by
//! [`Skip`], never an error.

use std::borrow::Cow;

/// Why a line was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// Empty line.
    Empty,
    /// It ends before the status (a cut-off last line, a crash).
    Truncated,
    /// The `[time]` field does not read.
    BadTime,
    /// The status is not three digits.
    BadStatus,
    /// The size is neither digits nor `-`.
    BadSize,
    /// Quotes that do not close, or fields out of place.
    Malformed,
    /// The request line is not `METHOD TARGET PROTOCOL` (`-`, garbage,
    /// TLS bytes sent to a plain port).
    BadRequestLine,
}

impl Skip {
    /// The reason in words, for `workload stats`.
    pub fn describe(self) -> &'static str {
        match self {
            Skip::Empty => "empty line",
            Skip::Truncated => "truncated line",
            Skip::BadTime => "unreadable [time]",
            Skip::BadStatus => "unreadable status",
            Skip::BadSize => "unreadable size",
            Skip::Malformed => "malformed quoting or fields",
            Skip::BadRequestLine => "request line not METHOD TARGET PROTOCOL",
        }
    }
}

/// One parsed line, borrowing from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// Client address, as written (IPv4, IPv6, or a host name).
    pub client: &'a [u8],
    /// Seconds since the Unix epoch (UTC).
    pub time: i64,
    /// The request method.
    pub method: Cow<'a, [u8]>,
    /// The request target, escapes undone.
    pub target: Cow<'a, [u8]>,
    /// The status sent.
    pub status: u16,
    /// Body bytes (`-` reads as 0, as Apache's `%b` means it).
    pub size: u64,
    /// The `User-Agent` field, escapes left in (it only names a user).
    pub user_agent: &'a [u8],
    /// Time taken, when the line has a trailing request time (µs).
    pub duration_us: Option<u64>,
}

/// A cursor over one line.
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn spaces(&mut self) {
        while self.s.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }

    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    /// A field up to the next space (or the end).
    fn word(&mut self) -> Option<&'a [u8]> {
        self.spaces();
        let start = self.i;
        let len = memchr_space(&self.s[start..]);
        self.i = start + len;
        (len > 0).then(|| &self.s[start..start + len])
    }

    /// `[…]`.
    fn bracketed(&mut self) -> Result<&'a [u8], Skip> {
        self.spaces();
        match self.s.get(self.i) {
            Some(b'[') => {}
            None => return Err(Skip::Truncated),
            Some(_) => return Err(Skip::Malformed),
        }
        let start = self.i + 1;
        let end = self.s[start..].iter().position(|&b| b == b']').ok_or(Skip::Truncated)? + start;
        self.i = end + 1;
        Ok(&self.s[start..end])
    }

    /// `"…"`, the raw bytes between the quotes (escapes not undone); a
    /// backslash always takes the next byte with it, so `\"` does not end it.
    fn quoted(&mut self) -> Result<&'a [u8], Skip> {
        self.spaces();
        match self.s.get(self.i) {
            Some(b'"') => {}
            None => return Err(Skip::Truncated),
            Some(_) => return Err(Skip::Malformed),
        }
        let start = self.i + 1;
        let mut j = start;
        loop {
            match self.s.get(j) {
                None => return Err(Skip::Truncated),
                Some(b'"') => break,
                Some(b'\\') => j += 2,
                Some(_) => j += 1,
            }
        }
        self.i = j + 1;
        if !matches!(self.s.get(self.i), None | Some(b' ')) {
            return Err(Skip::Malformed);
        }
        Ok(&self.s[start..j])
    }
}

fn memchr_space(s: &[u8]) -> usize {
    s.iter().position(|&b| b == b' ').unwrap_or(s.len())
}

/// Undoes `\xHH`, `\"` and `\\` (and passes other backslashes through).
pub fn unescape(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.contains(&b'\\') {
        return Cow::Borrowed(s);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match (s[i], s.get(i + 1)) {
            (b'\\', Some(b'x')) => {
                match (s.get(i + 2).and_then(|&b| hex(b)), s.get(i + 3).and_then(|&b| hex(b))) {
                    (Some(h), Some(l)) => {
                        out.push(h << 4 | l);
                        i += 4;
                    }
                    _ => {
                        out.push(b'\\');
                        i += 1;
                    }
                }
            }
            (b'\\', Some(&c @ (b'"' | b'\\'))) => {
                out.push(c);
                i += 2;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `DD/Mon/YYYY:hh:mm:ss ±hhmm` as Unix seconds (UTC).
pub fn parse_clf_time(t: &[u8]) -> Option<i64> {
    if t.len() != 26 || t[2] != b'/' || t[6] != b'/' || t[11] != b':' || t[14] != b':' || t[17] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        t[r].iter().try_fold(0i64, |a, &b| b.is_ascii_digit().then(|| a * 10 + i64::from(b - b'0')))
    };
    const MONTHS: [&[u8; 3]; 12] =
        [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];
    let month = MONTHS.iter().position(|m| m[..] == t[3..6])? as i64 + 1;
    let (day, year) = (num(0..2)?, num(7..11)?);
    let (h, mi, s) = (num(12..14)?, num(15..17)?, num(18..20)?);
    if !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 || t[20] != b' ' {
        return None;
    }
    let sign = match t[21] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let offset = sign * (num(22..24)? * 3600 + num(24..26)? * 60);
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

/// Reads a request time: `0.012` (seconds) or `12000` (µs).
fn parse_duration(w: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(w).ok()?;
    if s.contains('.') {
        let secs: f64 = s.parse().ok()?;
        (secs.is_finite() && secs >= 0.0).then(|| (secs * 1e6).round() as u64)
    } else {
        s.parse().ok()
    }
}

/// A one-entry cache of the last `[time]` read: a busy log repeats each
/// second's stamp many times, so most lines skip the date arithmetic.
#[derive(Default)]
pub struct TimeCache {
    text: [u8; 26],
    value: Option<i64>,
}

impl TimeCache {
    fn get(&mut self, t: &[u8]) -> Option<i64> {
        if self.value.is_some() && t == self.text {
            return self.value;
        }
        let v = parse_clf_time(t)?;
        self.text.copy_from_slice(t);
        self.value = Some(v);
        Some(v)
    }
}

/// Parses one line (without its `\n`; a trailing `\r` is ignored).
pub fn parse_line<'a>(line: &'a [u8], times: &mut TimeCache) -> Result<Line<'a>, Skip> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(Skip::Empty);
    }
    let mut c = Cursor { s: line, i: 0 };
    let client = c.word().ok_or(Skip::Malformed)?;
    c.word().ok_or(Skip::Truncated)?; // ident
    c.word().ok_or(Skip::Truncated)?; // user (modus and nginx escape its spaces)
    let time = times.get(c.bracketed()?).ok_or(Skip::BadTime)?;
    let request = c.quoted()?;
    let status = c.word().ok_or(Skip::Truncated)?;
    if status.len() != 3 || !status.iter().all(u8::is_ascii_digit) {
        return Err(Skip::BadStatus);
    }
    let status = status.iter().fold(0u16, |a, &b| a * 10 + u16::from(b - b'0'));
    let size = match c.word().ok_or(Skip::Truncated)? {
        b"-" => 0,
        w if w.len() <= 19 && w.iter().all(u8::is_ascii_digit) => {
            w.iter().fold(0u64, |a, &b| a * 10 + u64::from(b - b'0'))
        }
        _ => return Err(Skip::BadSize),
    };
    // Common Log Format ends here; Combined goes on.
    let (mut user_agent, mut duration_us) = (&b"-"[..], None);
    c.spaces();
    if !c.at_end() {
        c.quoted()?; // referer
        user_agent = c.quoted()?;
        if let Some(w) = c.word() {
            duration_us = parse_duration(w);
        }
    }
    let mut parts = request.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(proto), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Skip::BadRequestLine);
    };
    if method.is_empty() || target.is_empty() || !proto.starts_with(b"HTTP/") {
        return Err(Skip::BadRequestLine);
    }
    Ok(Line {
        client,
        time,
        method: unescape(method),
        target: unescape(target),
        status,
        size,
        user_agent,
        duration_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Line<'_>, Skip> {
        parse_line(s.as_bytes(), &mut TimeCache::default())
    }

    #[test]
    fn combined_as_nginx_and_apache_write_it() {
        let l = parse(
            r#"203.0.113.9 - alice [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#,
        )
        .unwrap();
        assert_eq!(l.client, b"203.0.113.9");
        assert_eq!(l.time, 971_211_336, "13:55:36 -0700 is 20:55:36 UTC");
        assert_eq!(
            (&*l.method, &*l.target, l.status, l.size),
            (&b"GET"[..], &b"/apache_pb.gif"[..], 200, 2326)
        );
        assert_eq!(l.user_agent, b"Mozilla/4.08 [en] (Win98; I ;Nav)");
        assert_eq!(l.duration_us, None);
    }

    #[test]
    fn common_log_format_and_dash_size() {
        let l = parse(r#"::1 - - [01/Jan/2024:00:00:00 +0000] "HEAD / HTTP/1.1" 304 -"#).unwrap();
        assert_eq!((l.client, l.time, l.size, l.status), (&b"::1"[..], 1_704_067_200, 0, 304));
        assert_eq!(l.user_agent, b"-");
    }

    #[test]
    fn ipv6_and_time_zones() {
        let a =
            parse(r#"2001:db8::7 - - [28/Feb/2024:23:30:00 +0530] "GET /a HTTP/1.1" 200 1 "-" "x""#).unwrap();
        let b =
            parse(r#"2001:db8::7 - - [28/Feb/2024:18:00:00 +0000] "GET /a HTTP/1.1" 200 1 "-" "x""#).unwrap();
        let c = parse(r#"[2001:db8::7] - - [28/Feb/2024:08:00:00 -1000] "GET /a HTTP/1.1" 200 1"#).unwrap();
        assert_eq!(a.client, b"2001:db8::7");
        assert_eq!(c.client, b"[2001:db8::7]");
        assert_eq!((a.time, c.time), (b.time, b.time));
        // Leap day, and the year boundary.
        assert_eq!(parse_clf_time(b"29/Feb/2024:00:00:00 +0000"), Some(1_709_164_800));
        assert_eq!(parse_clf_time(b"31/Dec/1999:23:59:59 +0000"), Some(946_684_799));
        assert_eq!(parse_clf_time(b"31/Dec/1999:23:59:59 0000"), None);
        assert_eq!(parse_clf_time(b"31/Foo/1999:23:59:59 +0000"), None);
    }

    #[test]
    fn escapes_in_the_request_line_and_user_agent() {
        // nginx / modus: `"` as \x22, bytes past ASCII as \xHH.
        let l = parse(
            r#"10.0.0.1 - - [01/Jan/2024:00:00:00 +0000] "GET /a\x22b/caf\xC3\xA9?q=\x5C HTTP/1.1" 200 5 "-" "say \x22hi\x22""#,
        )
        .unwrap();
        assert_eq!(&*l.target, "/a\"b/café?q=\\".as_bytes());
        assert_eq!(l.user_agent, br#"say \x22hi\x22"#);
        // Apache: \" and \\ inside the quotes.
        let l = parse(
            r#"10.0.0.1 - - [01/Jan/2024:00:00:00 +0000] "GET /x\"y\\ HTTP/1.1" 200 5 "-" "A \"quoted\" agent\\""#,
        )
        .unwrap();
        assert_eq!(&*l.target, br#"/x"y\"#);
        assert_eq!(l.user_agent, br#"A \"quoted\" agent\\"#);
        // A space in the target (Apache logs it raw) is not three words.
        let bad = r#"10.0.0.1 - - [01/Jan/2024:00:00:00 +0000] "GET /a b HTTP/1.1" 400 5 "-" "x""#;
        assert_eq!(parse(bad), Err(Skip::BadRequestLine));
    }

    #[test]
    fn request_times() {
        let nginx =
            r#"1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /x.php?a=1 HTTP/1.1" 200 5 "-" "ua" 0.012"#;
        assert_eq!(parse(nginx).unwrap().duration_us, Some(12_000));
        let apache = r#"1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /x.php HTTP/1.1" 200 5 "-" "ua" 4500"#;
        assert_eq!(parse(apache).unwrap().duration_us, Some(4_500));
    }

    #[test]
    fn bad_lines_say_why() {
        let full = r#"1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /x HTTP/1.1" 200 5 "-" "ua""#;
        assert!(parse(full).is_ok());
        // Every prefix of a good line is skipped, none panics, and those
        // cut before the status or inside a quote count as truncated.
        for cut in 1..full.len() {
            if let Err(why) = parse(&full[..cut]) {
                assert!(
                    matches!(why, Skip::Truncated | Skip::Malformed | Skip::BadTime | Skip::BadStatus),
                    "{cut}: {why:?}"
                );
            }
        }
        assert_eq!(parse(&full[..40]), Err(Skip::Truncated));
        assert_eq!(parse(&full[..full.len() - 3]), Err(Skip::Truncated));
        assert_eq!(parse(""), Err(Skip::Empty));
        assert_eq!(
            parse(r#"1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "-" 400 0 "-" "-""#),
            Err(Skip::BadRequestLine)
        );
        assert_eq!(parse(r#"1.2.3.4 - - [yesterday] "GET / HTTP/1.1" 200 5"#), Err(Skip::BadTime));
        assert_eq!(
            parse(r#"1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 20x 5"#),
            Err(Skip::BadStatus)
        );
        assert_eq!(
            parse(r#"1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 5k"#),
            Err(Skip::BadSize)
        );
        assert_eq!(
            parse(r#"1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1"x 200 5"#),
            Err(Skip::Malformed)
        );
        assert!(parse("\u{0}\u{ff}garbage").is_err());
    }
}
