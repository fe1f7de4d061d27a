//! The access log: Combined Log Format, buffered, safe against log injection.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One finished request, as the log needs it.
#[derive(Debug, Clone)]
pub struct LogRecord {
    /// Client address.
    pub peer: IpAddr,
    /// The user a `Basic` Authorization names (`%u`), as sent.
    pub user: Option<Vec<u8>>,
    /// The request line as received, bytes as they came (escaped when
    /// written), or `None` if not even that could be read (logged as `-`).
    pub request_line: Option<Vec<u8>>,
    /// Status sent.
    pub status: u16,
    /// Body bytes actually sent (not the head; nginx's `$body_bytes_sent`).
    pub body_bytes: u64,
    /// `Referer` request header, as sent.
    pub referer: Option<Vec<u8>>,
    /// `User-Agent` request header, as sent (a Latin-1 one too).
    pub user_agent: Option<Vec<u8>>,
}

/// Where log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// Nowhere.
    Off,
    /// Standard output.
    Stdout,
    /// A file, opened for appending.
    File(PathBuf),
}

impl LogTarget {
    /// Parses `off`, `-` or a path.
    pub fn parse(spec: &str) -> LogTarget {
        match spec {
            "off" => LogTarget::Off,
            "-" => LogTarget::Stdout,
            path => LogTarget::File(PathBuf::from(path)),
        }
    }
}

/// Flush once this much is buffered, even before the periodic flush.
const FLUSH_AT: usize = 32 << 10;

/// A buffered access log shared by all threads of a process.
///
/// Lines are appended to a memory buffer under a mutex and written with one
/// `write` of whole lines to an `O_APPEND` descriptor, so lines from several
/// processes sharing the file never interleave. The server calls
/// [`AccessLog::flush`] at least once a second and at shutdown.
#[derive(Debug)]
pub struct AccessLog {
    target: LogTarget,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    file: Option<File>,
    buf: Vec<u8>,
    /// The end of a line whose start a short write left in the file and
    /// could not take back: written before anything else, so the line is
    /// finished, not glued to the next.
    tail: Vec<u8>,
    lost_lines: u64,
    /// Why the last failed write failed.
    last_error: Option<String>,
    /// `lost_lines` when the error log was last told, and when.
    reported: u64,
    reported_at: Option<std::time::Instant>,
}

impl Inner {
    fn new(file: Option<File>, capacity: usize) -> Inner {
        Inner {
            file,
            buf: Vec::with_capacity(capacity),
            tail: Vec::new(),
            lost_lines: 0,
            last_error: None,
            reported: 0,
            reported_at: None,
        }
    }
}

impl AccessLog {
    /// Opens the log (creating the file if needed).
    pub fn open(target: LogTarget) -> io::Result<AccessLog> {
        let file = match &target {
            LogTarget::File(path) => Some(open_append(path)?),
            _ => None,
        };
        Ok(AccessLog { target, inner: Mutex::new(Inner::new(file, FLUSH_AT * 2)) })
    }

    /// A log that writes nothing.
    pub fn off() -> AccessLog {
        AccessLog { target: LogTarget::Off, inner: Mutex::new(Inner::new(None, 0)) }
    }

    /// False when logging is off, so callers can skip building records.
    pub fn is_enabled(&self) -> bool {
        self.target != LogTarget::Off
    }

    /// Appends one line.
    pub fn record(&self, rec: &LogRecord) {
        if !self.is_enabled() {
            return;
        }
        let now = h1::http_date_now();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let buf = &mut inner.buf;
        push_ip(buf, rec.peer);
        buf.extend_from_slice(b" - ");
        escape_into(buf, rec.user.as_deref(), Field::Bare);
        buf.extend_from_slice(b" [");
        clf_time(buf, &now);
        buf.extend_from_slice(b"] \"");
        escape_into(buf, rec.request_line.as_deref(), Field::Quoted);
        let mut digits = itoa::Buffer::new();
        buf.extend_from_slice(b"\" ");
        buf.extend_from_slice(digits.format(rec.status).as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(digits.format(rec.body_bytes).as_bytes());
        buf.extend_from_slice(b" \"");
        escape_into(buf, rec.referer.as_deref(), Field::Quoted);
        buf.extend_from_slice(b"\" \"");
        escape_into(buf, rec.user_agent.as_deref(), Field::Quoted);
        buf.extend_from_slice(b"\"\n");
        if inner.buf.len() >= FLUSH_AT {
            inner.flush(&self.target);
        }
    }

    /// Writes buffered lines out.
    pub fn flush(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).flush(&self.target);
    }

    /// Flushes, then reopens the file at its path (after log rotation moved it).
    pub fn reopen(&self) -> io::Result<()> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.flush(&self.target);
        if let LogTarget::File(path) = &self.target {
            inner.file = Some(open_append(path)?);
            // The end of a line begun in the old file would be a fragment in the new one.
            if !inner.tail.is_empty() {
                inner.tail.clear();
                inner.lost_lines += 1;
            }
        }
        Ok(())
    }

    /// Lines dropped since the error log was last told, and why, when it
    /// should be told now: at once the first time, then at most once a
    /// minute (a full disk fails every flush).
    pub fn dropped_report(&self) -> Option<(u64, String)> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let new = inner.lost_lines - inner.reported;
        let due = inner.reported_at.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(60));
        if new == 0 || !due {
            return None;
        }
        inner.reported = inner.lost_lines;
        inner.reported_at = Some(std::time::Instant::now());
        Some((new, inner.last_error.clone().unwrap_or_default()))
    }

    /// Lines that could not be written (disk full, closed stdout...).
    pub fn lost_lines(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).lost_lines
    }
}

impl Inner {
    fn flush(&mut self, target: &LogTarget) {
        if self.buf.is_empty() && self.tail.is_empty() {
            return;
        }
        let (lost, error) = match (target, &mut self.file) {
            (LogTarget::File(_), Some(file)) => write_lines(file, &mut self.tail, &self.buf),
            (LogTarget::Stdout, _) => {
                let mut out = io::stdout().lock();
                // Stdout may be a pipe shared by several processes; only
                // writes of at most PIPE_BUF bytes are atomic there, so
                // lines go out in batches that fit.
                let mut sent = 0;
                let result = pipe_batches(&self.buf)
                    .try_for_each(|batch| {
                        out.write_all(batch)?;
                        sent += lines(batch);
                        Ok(())
                    })
                    .and_then(|()| out.flush());
                (lines(&self.buf) - sent, result.err())
            }
            _ => (0, None),
        };
        // Serving goes on when the log cannot be written; the count tells.
        // The lines are dropped, not kept (a log that cannot be written must
        // not grow the server's memory); the next flush tries again, so
        // logging resumes by itself once writes succeed (a disk freed).
        self.lost_lines += lost;
        if let Some(e) = error {
            self.last_error = Some(e.to_string());
        }
        self.buf.clear();
    }
}

/// Where [`write_lines`] writes: the log file, or a test's stand-in.
trait Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize>;
    /// Takes back the last `n` bytes written, if nothing was written after
    /// them; false if it cannot.
    fn unwrite(&mut self, n: usize) -> bool;
}

impl Sink for File {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        Write::write(self, bytes)
    }

    fn unwrite(&mut self, n: usize) -> bool {
        // O_APPEND leaves the offset at the end of what this descriptor
        // wrote; if the file ends there too, no one (another child of a
        // process model) appended since, and the bytes are ours to cut.
        let Ok(end) = self.stream_position() else { return false };
        let n = n as u64;
        match self.metadata() {
            Ok(meta) if meta.len() == end && end >= n => self.set_len(end - n).is_ok(),
            _ => false,
        }
    }
}

/// Writes `tail`, then the whole lines of `buf`, so that the file only
/// ever holds whole lines: a write cut short by a full disk after part of
/// a line is taken back, or, if it cannot be (someone wrote after it), the
/// rest of that line is kept in `tail` and written first next time. Returns
/// the lines lost — exactly those of `buf` not in the file and not in
/// `tail` — and the error that lost them.
fn write_lines(sink: &mut impl Sink, tail: &mut Vec<u8>, buf: &[u8]) -> (u64, Option<io::Error>) {
    if !tail.is_empty() {
        let (done, error) = write_some(sink, tail);
        tail.drain(..done);
        if let Some(e) = error {
            // Anything written now would be glued to the unfinished line.
            return (lines(buf), Some(e));
        }
    }
    let (written, error) = write_some(sink, buf);
    let Some(e) = error else { return (0, None) };
    let whole = buf[..written].iter().rposition(|&b| b == b'\n').map_or(0, |lf| lf + 1);
    let mut lost_from = whole;
    let partial = written - whole;
    if partial > 0 && !sink.unwrite(partial) {
        let end = buf[written..].iter().position(|&b| b == b'\n').map_or(buf.len(), |lf| written + lf + 1);
        tail.extend_from_slice(&buf[written..end]);
        lost_from = end;
    }
    (lines(&buf[lost_from..]), Some(e))
}

/// Writes as much of `bytes` as the sink takes: how much, and why not all.
fn write_some(sink: &mut impl Sink, bytes: &[u8]) -> (usize, Option<io::Error>) {
    let mut done = 0;
    while done < bytes.len() {
        match sink.write(&bytes[done..]) {
            Ok(0) => return (done, Some(io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

fn lines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// POSIX's minimum PIPE_BUF (Linux's too): writes this size or smaller to a
/// pipe are never interleaved with other writers'.
const PIPE_BUF: usize = 4096;

/// Splits whole lines into batches of at most [`PIPE_BUF`] bytes (a longer
/// line goes alone).
fn pipe_batches(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let window = &rest[..rest.len().min(PIPE_BUF)];
        let cut = match window.iter().rposition(|&b| b == b'\n') {
            Some(i) if rest.len() > PIPE_BUF => i + 1,
            _ if rest.len() <= PIPE_BUF => rest.len(),
            // One line longer than PIPE_BUF: it cannot be atomic anyway.
            _ => rest.iter().position(|&b| b == b'\n').map_or(rest.len(), |i| i + 1),
        };
        let (batch, tail) = rest.split_at(cut);
        rest = tail;
        Some(batch)
    })
}

/// Opens a log file for appending: by the keeper when the server gave up
/// root and it keeps that file (`transport::keeper`), else here.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    if let Some(kept) = transport::keeper::open_append(path) {
        return kept;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// `22/Nov/2026:10:00:00 +0000` from the cached IMF-fixdate
/// `Sun, 22 Nov 2026 10:00:00 GMT`: rearranging is cheaper than formatting.
pub(crate) fn clf_time(buf: &mut Vec<u8>, imf: &[u8; 29]) {
    // Assembled in a fixed array and appended once: one capacity check.
    let mut clf = *b"DD/Mon/YYYY:hh:mm:ss +0000";
    clf[0..2].copy_from_slice(&imf[5..7]);
    clf[3..6].copy_from_slice(&imf[8..11]);
    clf[7..11].copy_from_slice(&imf[12..16]);
    clf[12..20].copy_from_slice(&imf[17..25]);
    buf.extend_from_slice(&clf);
}

/// Where a value goes in the line, which decides whether a space is escaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    /// Inside `"…"`: a space is kept.
    Quoted,
    /// Unquoted (`%u`): a space would split the field, so it is `\x20`.
    Bare,
}

/// Bytes [`escape_into`] rewrites in a quoted field: one table load per
/// byte, where the range test and two comparisons cost several instructions.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [true; 256];
    let mut b = 0x20;
    while b <= 0x7e {
        table[b] = b == b'"' as usize || b == b'\\' as usize;
        b += 1;
    }
    table
};

/// The same in a bare field: the space too.
const NEEDS_ESCAPE_BARE: [bool; 256] = {
    let mut table = NEEDS_ESCAPE;
    table[b' ' as usize] = true;
    table
};

/// Escapes as nginx's `escape=default` does: `"`, `\`, control bytes and
/// bytes past ASCII become `\xHH` (`"` is `\x22`), so no request can forge
/// a line, break a field or send terminal escapes to whoever reads the
/// log (nginx CVE-2009-4487), and a log tool's combined-format regex
/// reads every line; the bytes themselves are kept (`\xC3\xA9` is é).
/// In a [`Field::Bare`] a space is escaped as well.
fn escape_into(buf: &mut Vec<u8>, value: Option<&[u8]>, field: Field) {
    let Some(mut rest) = value else {
        buf.push(b'-');
        return;
    };
    // Runs of plain bytes (nearly every byte of every line) are copied whole.
    loop {
        let i = plain_prefix(rest, field);
        buf.extend_from_slice(&rest[..i]);
        let Some(&b) = rest.get(i) else {
            return;
        };
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        buf.extend_from_slice(&[b'\\', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        rest = &rest[i + 1..];
    }
}

/// How many leading bytes of `bytes` need no escaping: eight at a time
/// while none of a word's does (bit tricks on a `u64`: a byte below 0x20,
/// above 0x7e, or equal to `"` or `\` — or a space in a bare field),
/// then byte by byte.
fn plain_prefix(bytes: &[u8], field: Field) -> usize {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = ONES * 0x80;
    // Nonzero iff a byte of `v` is zero.
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let mut plain = 0;
    for word in bytes.chunks_exact(8) {
        let w = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
        let high = (w.wrapping_add(ONES) | w) & HIGHS;
        let special = has_zero(w ^ (ONES * u64::from(b'"'))) | has_zero(w ^ (ONES * u64::from(b'\\')));
        let space = match field {
            Field::Quoted => 0,
            Field::Bare => has_zero(w ^ (ONES * u64::from(b' '))),
        };
        if control | high | special | space != 0 {
            break;
        }
        plain += 8;
    }
    let tail = &bytes[plain..];
    let table = match field {
        Field::Quoted => &NEEDS_ESCAPE,
        Field::Bare => &NEEDS_ESCAPE_BARE,
    };
    plain + tail.iter().position(|&b| table[b as usize]).unwrap_or(tail.len())
}

/// The client address as `Display` writes it; IPv4 (nearly every line)
/// without the formatter.
fn push_ip(buf: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            // Into a fixed array, then appended once.
            let mut text = [0u8; 15];
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                let digits = [b'0' + octet / 100, b'0' + octet / 10 % 10, b'0' + octet % 10];
                let skip = match octet {
                    100.. => 0,
                    10.. => 1,
                    _ => 2,
                };
                text[len..len + 3 - skip].copy_from_slice(&digits[skip..]);
                len += 3 - skip;
            }
            buf.extend_from_slice(&text[..len]);
        }
        IpAddr::V6(_) => {
            let _ = write!(buf, "{ip}");
        }
    }
}

/// The request line of unparseable input, for the log (bounded, lossy).
pub(crate) fn first_line(input: &[u8]) -> Option<Vec<u8>> {
    let input = &input[..input.len().min(1024)];
    let line = input.split(|&b| b == b'\r' || b == b'\n').find(|l| !l.is_empty())?;
    Some(line.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_numbers_and_escapes_match_display() {
        for ip in [
            "10.200.3.255",
            "0.0.0.0",
            "255.255.255.255",
            "1.22.100.9",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:1.2.3.4",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let mut buf = Vec::new();
            push_ip(&mut buf, ip);
            assert_eq!(buf, ip.to_string().as_bytes());
        }
        for octet in 0..=255u8 {
            let ip = IpAddr::from([octet, 255 - octet, octet / 2, 7]);
            let mut buf = Vec::new();
            push_ip(&mut buf, ip);
            assert_eq!(buf, ip.to_string().as_bytes());
        }
        let mut clf = Vec::new();
        clf_time(&mut clf, b"Sun, 22 Nov 2026 10:00:09 GMT");
        assert_eq!(clf, b"22/Nov/2026:10:00:09 +0000");
        let escaped_in = |v: &str, field| {
            let mut buf = Vec::new();
            escape_into(&mut buf, Some(v.as_bytes()), field);
            String::from_utf8(buf).unwrap()
        };
        let escaped = |v: &str| escaped_in(v, Field::Quoted);
        assert_eq!(escaped("al ice"), "al ice");
        assert_eq!(escaped_in("al ice", Field::Bare), "al\\x20ice", "a space would split a bare field");
        assert_eq!(escaped_in("a  long name\t", Field::Bare), "a\\x20\\x20long\\x20name\\x09");
        assert_eq!(escaped(""), "");
        assert_eq!(escaped("plain"), "plain");
        assert_eq!(escaped("\""), "\\x22", "nginx's escape=default");
        assert_eq!(escaped("a\tb\\"), "a\\x09b\\x5C");
        assert_eq!(escaped("é"), "\\xC3\\xA9");
        // Any byte at any place of a run: the word-at-a-time scan stops
        // exactly where the byte-by-byte one would, in both kinds of field.
        for (field, table) in [(Field::Quoted, &NEEDS_ESCAPE), (Field::Bare, &NEEDS_ESCAPE_BARE)] {
            for b in 0..=255u8 {
                for at in 0..20 {
                    let mut run = vec![b'a'; 20];
                    run[at] = b;
                    let expected = if table[b as usize] { at } else { 20 };
                    assert_eq!(plain_prefix(&run, field), expected, "byte {b:#04x} at {at} ({field:?})");
                    run[19] = b'"';
                    let expected = if table[b as usize] && at < 19 { at } else { 19 };
                    assert_eq!(plain_prefix(&run, field), expected, "byte {b:#04x} at {at}, quote last");
                }
            }
        }
        // Every byte: printable ASCII passes except `"` and `\`.
        for b in 0..=255u8 {
            let plain = (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\';
            assert_eq!(NEEDS_ESCAPE[b as usize], !plain, "byte {b:#04x}");
            assert_eq!(NEEDS_ESCAPE_BARE[b as usize], !plain || b == b' ', "byte {b:#04x}");
        }
    }

    #[test]
    fn writes_combined_log_format_with_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = AccessLog::open(LogTarget::File(path.clone())).unwrap();
        log.record(&LogRecord {
            peer: "127.0.0.1".parse().unwrap(),
            user: Some(b"al ice".to_vec()),
            request_line: Some(b"GET /a\"b\x1b[31m HTTP/1.1".to_vec()),
            status: 200,
            body_bytes: 42,
            referer: None,
            // Latin-1, as a browser may send it: kept, escaped.
            user_agent: Some(b"curl\\8 caf\xe9".to_vec()),
        });
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "", "buffered until flushed");
        log.flush();
        let line = std::fs::read_to_string(&path).unwrap();
        let (prefix, rest) = line.split_once(" [").unwrap();
        assert_eq!(prefix, "127.0.0.1 - al\\x20ice");
        let (time, rest) = rest.split_once("] ").unwrap();
        assert_eq!(time.len(), "22/Nov/2026:10:00:00 +0000".len());
        assert!(time.ends_with(" +0000"));
        assert_eq!(rest, "\"GET /a\\x22b\\x1B[31m HTTP/1.1\" 200 42 \"-\" \"curl\\x5C8 caf\\xE9\"\n");
    }

    #[test]
    fn pipe_batches_keep_lines_whole_and_small() {
        let line = |n: usize| format!("{}\n", "x".repeat(n));
        let mut buf = String::new();
        for i in 0..200 {
            buf.push_str(&line(10 + i * 7));
        }
        buf.push_str(&line(9000));
        buf.push_str(&line(5));
        let batches: Vec<&[u8]> = pipe_batches(buf.as_bytes()).collect();
        assert_eq!(batches.concat(), buf.as_bytes());
        for b in &batches {
            assert!(b.ends_with(b"\n"));
            assert!(b.len() <= PIPE_BUF || b.iter().filter(|&&c| c == b'\n').count() == 1);
        }
        assert!(pipe_batches(b"").next().is_none());
    }

    #[test]
    fn reopen_follows_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = AccessLog::open(LogTarget::File(path.clone())).unwrap();
        let rec = LogRecord {
            peer: "::1".parse().unwrap(),
            user: None,
            request_line: None,
            status: 400,
            body_bytes: 0,
            referer: None,
            user_agent: None,
        };
        log.record(&rec);
        std::fs::rename(&path, dir.path().join("access.log.1")).unwrap();
        log.reopen().unwrap();
        log.record(&rec);
        log.flush();
        let old = std::fs::read_to_string(dir.path().join("access.log.1")).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert_eq!(old.lines().count(), 1);
        assert_eq!(new.lines().count(), 1);
        assert!(new.starts_with("::1 - - ["));
        assert!(new.contains("\"-\" 400 0 \"-\" \"-\""));
    }

    /// A disk with `room` bytes free: a write takes what fits (a short
    /// write), then fails with ENOSPC, as a filesystem does. `others`
    /// bytes written by another process after ours stop a take-back.
    struct Disk {
        data: Vec<u8>,
        room: usize,
        others: bool,
    }

    impl Sink for Disk {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from_raw_os_error(28));
            }
            let n = bytes.len().min(self.room);
            self.data.extend_from_slice(&bytes[..n]);
            self.room -= n;
            Ok(n)
        }

        fn unwrite(&mut self, n: usize) -> bool {
            if self.others {
                return false;
            }
            self.data.truncate(self.data.len() - n);
            self.room += n;
            true
        }
    }

    fn numbered_lines(from: usize, to: usize) -> Vec<u8> {
        (from..to).map(|i| format!("line {i} {}\n", "x".repeat(i % 37))).collect::<String>().into_bytes()
    }

    /// Every line in `data` is whole and one of ours, each at most once.
    fn whole_lines(data: &[u8], total: usize) -> usize {
        assert!(data.is_empty() || data.ends_with(b"\n"), "a partial line at the end: {:?}", show(data));
        let mut seen = std::collections::HashSet::new();
        for line in String::from_utf8_lossy(data).lines() {
            let i: usize = line.split(' ').nth(1).and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
            assert!(
                i < total && line == format!("line {i} {}", "x".repeat(i % 37)),
                "glued or cut: {line:?}"
            );
            assert!(seen.insert(i), "line {i} twice");
        }
        seen.len()
    }

    fn show(data: &[u8]) -> String {
        String::from_utf8_lossy(&data[data.len().saturating_sub(80)..]).into_owned()
    }

    /// Issue 34, item 5: a disk that fills at any byte of a flush, then
    /// has room again. The file holds whole lines only, and lines in the
    /// file plus lines counted lost are the lines logged — whether the
    /// partial line can be taken back or must be finished.
    #[test]
    fn a_full_disk_leaves_whole_lines_and_an_exact_count() {
        let first = numbered_lines(0, 40);
        let second = numbered_lines(40, 60);
        for others in [false, true] {
            for room in 0..=first.len() {
                let mut disk = Disk { data: Vec::new(), room, others };
                let mut tail = Vec::new();
                let (lost1, err1) = write_lines(&mut disk, &mut tail, &first);
                assert_eq!(err1.is_some(), room < first.len(), "room {room}");
                if others {
                    // The next writer can only append: what is in the file stays.
                    disk.others = true;
                }
                // Space again.
                disk.room = usize::MAX;
                let (lost2, err2) = write_lines(&mut disk, &mut tail, &second);
                assert!(err2.is_none() && tail.is_empty(), "room {room}");
                let in_file = whole_lines(&disk.data, 60);
                assert_eq!(
                    in_file as u64 + lost1 + lost2,
                    60,
                    "room {room}, others {others}: {}",
                    show(&disk.data)
                );
            }
        }
    }

    /// The disk stays full across flushes while a line is unfinished: new
    /// lines are not glued to it, and it is finished first once there is room.
    #[test]
    fn an_unfinished_line_is_finished_before_any_other() {
        let first = numbered_lines(0, 3);
        let mut disk = Disk { data: Vec::new(), room: 12, others: true };
        let mut tail = Vec::new();
        let (lost, _) = write_lines(&mut disk, &mut tail, &first);
        assert_eq!((lost, tail.is_empty()), (1, false), "line 0 whole, line 1 begun, line 2 lost");
        let (lost, err) = write_lines(&mut disk, &mut tail, &numbered_lines(3, 5));
        assert_eq!((lost, err.is_some()), (2, true), "still full: the new lines are lost, not glued");
        disk.room = 3;
        let (lost, err) = write_lines(&mut disk, &mut tail, &numbered_lines(5, 6));
        assert_eq!((lost, err.is_some(), tail.is_empty()), (1, true, false), "part of the tail written");
        disk.room = usize::MAX;
        let (lost, err) = write_lines(&mut disk, &mut tail, &numbered_lines(6, 8));
        assert_eq!((lost, err.is_none(), tail.is_empty()), (0, true, true));
        assert_eq!(whole_lines(&disk.data, 8), 4, "{}", show(&disk.data));
    }

    /// The same on a real filesystem: a 64 KiB tmpfs filled by another
    /// file, then emptied (needs root to mount; skipped otherwise).
    #[test]
    fn a_full_tmpfs_leaves_whole_lines_and_an_exact_count() {
        let dir = tempfile::tempdir().unwrap();
        let mount = |args: &[&str]| {
            std::process::Command::new(args[0]).args(&args[1..]).status().is_ok_and(|s| s.success())
        };
        let path = dir.path().to_str().unwrap().to_string();
        if !mount(&["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", &path]) {
            eprintln!("skipped: cannot mount a tmpfs (not root?)");
            return;
        }
        struct Unmount(String);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let _unmount = Unmount(path.clone());
        let log_path = dir.path().join("access.log");
        let log = AccessLog::open(LogTarget::File(log_path.clone())).unwrap();
        let filler = dir.path().join("filler");
        let rec = |i: usize| LogRecord {
            peer: "127.0.0.1".parse().unwrap(),
            user: None,
            request_line: Some(format!("GET /{i}/{} HTTP/1.1", "p".repeat(i % 97)).into_bytes()),
            status: 200,
            body_bytes: i as u64,
            referer: None,
            user_agent: Some("test".into()),
        };
        let mut logged = 0;
        for round in 0..6 {
            // Fill the disk but for a few hundred bytes, log past it, then empty it.
            let mut f = std::fs::File::create(&filler).unwrap();
            let chunk = vec![b'f'; 512];
            while f.write_all(&chunk).is_ok() {}
            let _ = f.write_all(&chunk[..100 + round * 37]);
            drop(f);
            std::fs::remove_file(&filler).unwrap();
            let mut f = std::fs::File::create(&filler).unwrap();
            let free = 300 + round * 53;
            let size = 64 * 1024 - std::fs::metadata(&log_path).unwrap().len() as usize;
            let _ = f.write_all(&vec![b'f'; size.saturating_sub(free)]);
            drop(f);
            for _ in 0..40 {
                log.record(&rec(logged));
                logged += 1;
            }
            log.flush();
            std::fs::remove_file(&filler).unwrap();
            for _ in 0..5 {
                log.record(&rec(logged));
                logged += 1;
            }
            log.flush();
        }
        let data = std::fs::read(&log_path).unwrap();
        assert!(data.ends_with(b"\n"), "{}", show(&data));
        let lines = String::from_utf8(data).unwrap();
        for line in lines.lines() {
            assert!(
                line.starts_with("127.0.0.1 - - [") && line.ends_with("\"-\" \"test\""),
                "glued or cut: {line:?}"
            );
            assert_eq!(line.matches("127.0.0.1").count(), 1, "glued: {line:?}");
        }
        let lost = log.lost_lines();
        assert!(lost > 0, "the disk was full");
        assert_eq!(lines.lines().count() as u64 + lost, logged as u64);
    }
}
