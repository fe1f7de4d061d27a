// Access log: Combined Log Format, escaping, rejected requests, reopen on
// SIGUSR1, flush on graceful stop. (Included once per model.)

use super::MODEL;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One parsed Combined Log Format line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogLine {
    host: String,
    request: String,
    status: u16,
    bytes: String,
    referer: String,
    user_agent: String,
}

/// Parses `HOST - USER [TIME] "REQUEST" STATUS BYTES "REFERER" "UA"`
/// strictly (USER `-` without a Basic Authorization); quoted fields are
/// returned with their escapes intact.
fn parse_line(line: &str) -> Result<LogLine, String> {
    let err = |what: &str| format!("{what} in access-log line {line:?}");
    let (host, rest) = line.split_once(" - ").ok_or_else(|| err("no ` - `"))?;
    let (user, rest) = rest.split_once(" [").ok_or_else(|| err("no ` [`"))?;
    if user.is_empty() || user.contains(' ') {
        return Err(err("bad user field"));
    }
    let (time, rest) = rest.split_once("] ").ok_or_else(|| err("no `] `"))?;
    check_time(time).map_err(|e| err(&e))?;
    let (request, rest) = quoted(rest).ok_or_else(|| err("bad request field"))?;
    let rest = rest.strip_prefix(' ').ok_or_else(|| err("no space after request"))?;
    let (status, rest) = rest.split_once(' ').ok_or_else(|| err("no status"))?;
    let status: u16 = status.parse().map_err(|_| err("bad status"))?;
    let (bytes, rest) = rest.split_once(' ').ok_or_else(|| err("no bytes"))?;
    if bytes != "-" && bytes.parse::<u64>().is_err() {
        return Err(err("bad bytes field"));
    }
    let (referer, rest) = quoted(rest).ok_or_else(|| err("bad referer field"))?;
    let rest = rest.strip_prefix(' ').ok_or_else(|| err("no space after referer"))?;
    let (user_agent, rest) = quoted(rest).ok_or_else(|| err("bad user-agent field"))?;
    if !rest.is_empty() {
        return Err(err("trailing text"));
    }
    Ok(LogLine { host: host.to_string(), request, status, bytes: bytes.to_string(), referer, user_agent })
}

/// Splits a leading `"..."` (with `\` escapes) off `s`.
fn quoted(s: &str) -> Option<(String, &str)> {
    let s = s.strip_prefix('"')?;
    let mut escaped = false;
    for (i, ch) in s.char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some((s[..i].to_string(), &s[i + 1..])),
            _ => {}
        }
    }
    None
}

/// `dd/Mon/yyyy:HH:MM:SS +0000`.
fn check_time(t: &str) -> Result<(), String> {
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let ok = b.len() == 26
        && digits(0..2)
        && b[2] == b'/'
        && MONTHS.contains(&&t[3..6])
        && b[6] == b'/'
        && digits(7..11)
        && b[11] == b':'
        && digits(12..14)
        && b[14] == b':'
        && digits(15..17)
        && b[17] == b':'
        && digits(18..20)
        && &t[20..] == " +0000";
    if ok {
        Ok(())
    } else {
        Err(format!("bad time {t:?}"))
    }
}

fn log_path(root: &Docroot) -> PathBuf {
    root.base().join("access.log")
}

fn read_lines(path: &Path) -> Vec<String> {
    match std::fs::read(path) {
        Ok(b) => String::from_utf8_lossy(&b).lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read {}: {e}", path.display()),
    }
}

#[track_caller]
fn parse_all(lines: &[String]) -> Vec<LogLine> {
    lines.iter().map(|l| parse_line(l).unwrap_or_else(|e| panic!("{e}"))).collect()
}

/// Starts a server logging to BASE/access.log.
fn logging_server(extra: &[&str]) -> (Docroot, Server, PathBuf) {
    let root = Docroot::standard();
    let path = log_path(&root);
    let mut args = vec!["--access-log", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let srv = serve(MODEL, &root, &args);
    (root, srv, path)
}

#[track_caller]
fn stop(srv: &mut Server) {
    srv.signal(Signal::Term);
    let status = srv.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "exit status after SIGTERM: {status:?}\n{}", srv.stderr());
}

#[track_caller]
fn find<'a>(lines: &'a [LogLine], request: &str) -> &'a LogLine {
    lines
        .iter()
        .find(|l| l.request == request)
        .unwrap_or_else(|| panic!("no log line for {request:?} in {lines:#?}"))
}

#[test]
fn combined_format() {
    let (_root, mut srv, path) = logging_server(&[]);
    let a = request(
        &srv,
        "GET",
        "/hello.txt?q=1",
        &["Referer: http://example.com/ref", "User-Agent: test-agent/1.0"],
    );
    a.assert_status(200);
    let b = get(&srv, "/nope.txt");
    b.assert_status(404);
    request(&srv, "HEAD", "/hello.txt", &[]).assert_status(200);
    stop(&mut srv);

    let raw = read_lines(&path);
    assert_eq!(raw.len(), 3, "want 3 lines, got {raw:#?}");
    let lines = parse_all(&raw);
    for l in &lines {
        assert_eq!(l.host, "127.0.0.1", "{l:?}");
    }
    let la = find(&lines, "GET /hello.txt?q=1 HTTP/1.1");
    assert_eq!((la.status, la.bytes.as_str()), (200, "14"), "{la:?}");
    assert_eq!(la.referer, "http://example.com/ref");
    assert_eq!(la.user_agent, "test-agent/1.0");
    let lb = find(&lines, "GET /nope.txt HTTP/1.1");
    assert_eq!(lb.status, 404);
    assert_eq!(lb.bytes, b.body.len().to_string(), "{lb:?}");
    assert_eq!((lb.referer.as_str(), lb.user_agent.as_str()), ("-", "-"));
    let lc = find(&lines, "HEAD /hello.txt HTTP/1.1");
    assert_eq!(lc.status, 200);
    assert!(lc.bytes == "0" || lc.bytes == "-", "HEAD sent no body bytes: {lc:?}");
}

/// Requests on one keep-alive connection log only their own fields: the
/// strings of a record are reused for the next one, and a Referer or a
/// longer User-Agent must not carry over.
#[test]
fn keep_alive_requests_log_only_their_own_fields() {
    let (_root, mut srv, path) = logging_server(&[]);
    let mut c = srv.client();
    c.request(
        "GET",
        "/hello.txt?first",
        &["Referer: http://example.com/first", "User-Agent: a-rather-long-agent/1.0 (first)"],
    )
    .assert_status(200);
    c.request("GET", "/hello.txt?second", &[]).assert_status(200);
    c.request("GET", "/alphabet.txt", &["User-Agent: short"]).assert_status(200);
    drop(c);
    stop(&mut srv);
    let lines = parse_all(&read_lines(&path));
    assert_eq!(lines.len(), 3, "{lines:#?}");
    let first = find(&lines, "GET /hello.txt?first HTTP/1.1");
    assert_eq!(
        (first.referer.as_str(), first.user_agent.as_str()),
        ("http://example.com/first", "a-rather-long-agent/1.0 (first)")
    );
    let second = find(&lines, "GET /hello.txt?second HTTP/1.1");
    assert_eq!(
        (second.referer.as_str(), second.user_agent.as_str(), second.bytes.as_str()),
        ("-", "-", "14")
    );
    let third = find(&lines, "GET /alphabet.txt HTTP/1.1");
    assert_eq!(
        (third.referer.as_str(), third.user_agent.as_str(), third.bytes.as_str()),
        ("-", "short", "26")
    );
}

#[test]
fn escapes_quotes_and_control_bytes() {
    let (_root, mut srv, path) = logging_server(&[]);
    let mut statuses = Vec::new();
    for req in [
        &b"GET /a\"b HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"[..],
        b"GET /x\x1b[31mred HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nUser-Agent: say \"hi\"\r\n\
          Referer: http://e/\"q\r\nConnection: close\r\n\r\n",
    ] {
        let mut c = srv.client();
        c.send(req);
        statuses.push(c.read_response("GET").status);
    }
    stop(&mut srv);

    let bytes = std::fs::read(&path).expect("access log");
    assert!(
        !bytes.iter().any(|&b| (b < 0x20 && b != b'\n') || b == 0x7f),
        "raw control byte in the access log: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let raw = read_lines(&path);
    assert_eq!(raw.len(), 3, "{raw:#?}");
    let lines = parse_all(&raw);
    assert_eq!(find(&lines, r"GET /a\x22b HTTP/1.1").status, statuses[0]);
    assert_eq!(find(&lines, r"GET /x\x1B[31mred HTTP/1.1").status, statuses[1]);
    let ua = find(&lines, "GET /hello.txt HTTP/1.1");
    assert_eq!(ua.user_agent, r"say \x22hi\x22");
    assert_eq!(ua.referer, r"http://e/\x22q");
}

/// A log of hostile requests, read by the regular expression log tools
/// use for the combined format (a field is `"[^"]*"`): every line matches,
/// and the fields give back the bytes sent — a Latin-1 User-Agent, quotes,
/// backslashes, control bytes, a Basic user with a space — as nginx's
/// `escape=default` writes them (`\xHH`).
#[test]
fn a_log_tool_reads_every_line_with_the_bytes_intact() {
    if std::process::Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: needs python3");
        return;
    }
    let (_root, mut srv, path) = logging_server(&[]);
    // "al ice:pw" in base64.
    // A head cut off by its client: logged `400 0` as nginx logs it (over
    // plain TCP: a TLS client dropped at once may not have sent its bytes).
    let plain = !MODEL.contains("--tls");
    if plain {
        let mut c = std::net::TcpStream::connect(srv.addr()).unwrap();
        std::io::Write::write_all(&mut c, b"GET /cut-off HTTP/1.1\r\nHost: loc").unwrap();
    }
    let requests: [&[u8]; 4] = [
        b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nUser-Agent: caf\xe9 \"q\" \\\r\nConnection: close\r\n\r\n",
        b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic YWwgaWNlOnB3\r\nConnection: close\r\n\r\n",
        b"GET /a\"b\\c HTTP/1.1\r\nHost: localhost\r\nReferer: x\"\r\nConnection: close\r\n\r\n",
        b"BAD\x7f\r\n\r\n",
    ];
    for req in requests {
        let mut c = srv.client();
        c.send(req);
        let _ = c.read_response("GET");
    }
    stop(&mut srv);
    let script = r#"
import re, sys, json
combined = re.compile(r'^(\S+) \S+ (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"$')
unescape = lambda s: re.sub(rb'\\x([0-9A-F]{2})', lambda m: bytes([int(m.group(1), 16)]), s.encode('latin-1')).decode('latin-1')
out = []
for line in open(sys.argv[1], encoding='latin-1').read().splitlines():
    m = combined.match(line)
    out.append(None if m is None else [unescape(g) for g in m.groups()])
print(json.dumps(out))
"#;
    let out = std::process::Command::new("python3").args(["-c", script]).arg(&path).output().unwrap();
    let parsed: Vec<Option<Vec<String>>> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(parsed.len(), 4 + usize::from(plain), "{parsed:?}");
    let lines: Vec<Vec<String>> =
        parsed.into_iter().map(|l| l.expect("every line matches the combined regex")).collect();
    let field = |request: &str, i: usize| {
        lines.iter().find(|l| l[3] == request).unwrap_or_else(|| panic!("{request} in {lines:?}"))[i].clone()
    };
    assert!(lines.iter().any(|l| l[7] == "caf\u{e9} \"q\" \\"), "the Latin-1 User-Agent, whole: {lines:?}");
    assert!(lines.iter().any(|l| l[1] == "al ice"), "the Basic user: {lines:?}");
    assert_eq!(field("GET /a\"b\\c HTTP/1.1", 6), "x\"");
    assert_eq!(field("BAD\u{7f}", 4), "400", "a refused head is logged as nginx logs it");
    if plain {
        let cut_off = "GET /cut-off HTTP/1.1";
        assert_eq!((field(cut_off, 4), field(cut_off, 5)), ("400".into(), "0".into()));
    }
}

#[test]
fn rejected_request_is_logged() {
    let (_root, mut srv, path) = logging_server(&[]);
    let mut c = srv.client();
    c.send("GET /hello.txt HTTP/1.1\r\n\r\n");
    let r = c.read_response("GET");
    r.assert_status(400);
    stop(&mut srv);
    let lines = parse_all(&read_lines(&path));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let l = find(&lines, "GET /hello.txt HTTP/1.1");
    assert_eq!(l.status, 400);
    assert_eq!(l.bytes, r.body.len().to_string(), "{l:?}");
}

#[test]
fn sigusr1_reopens_the_log() {
    let (root, mut srv, path) = logging_server(&[]);
    get(&srv, "/hello.txt?before").assert_status(200);
    // The line is logged once the response has left, maybe after the
    // client read it: wait (bounded) until it is on disk, so it belongs to
    // the file about to be rotated.
    let mut waits = 0;
    while !read_lines(&path).iter().any(|l| l.contains("?before")) {
        assert!(waits < 100, "the first line never reached the log");
        waits += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let rotated = root.base().join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    srv.signal(Signal::Usr1);
    // The reopen is asynchronous: probe (bounded) until a line lands in the
    // new file, then log the request that must go there.
    let mut probes = 0;
    while read_lines(&path).is_empty() {
        assert!(probes < 100, "no new access.log after SIGUSR1\n{}", srv.stderr());
        get(&srv, &format!("/hello.txt?probe{probes}")).assert_status(200);
        probes += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    get(&srv, "/hello.txt?after").assert_status(200);
    stop(&mut srv);

    let old = parse_all(&read_lines(&rotated));
    let new = parse_all(&read_lines(&path));
    find(&old, "GET /hello.txt?before HTTP/1.1");
    find(&new, "GET /hello.txt?after HTTP/1.1");
    assert!(!old.iter().any(|l| l.request.contains("?after")), "line after the reopen went to the old file");
    assert_eq!(old.len() + new.len(), 2 + probes, "lines lost or duplicated");
}

#[test]
fn shutdown_flushes_every_line() {
    let (_root, mut srv, path) = logging_server(&[]);
    let mut n = 0;
    for conn in 0..4 {
        let mut c = srv.client();
        for i in 0..10 {
            let r = c.request("GET", &format!("/alphabet.txt?c={conn}&i={i}"), &[]);
            r.assert_status(200);
            n += 1;
        }
    }
    stop(&mut srv);
    let lines = parse_all(&read_lines(&path));
    assert_eq!(lines.len(), n, "want {n} lines");
    for conn in 0..4 {
        for i in 0..10 {
            let l = find(&lines, &format!("GET /alphabet.txt?c={conn}&i={i} HTTP/1.1"));
            assert_eq!((l.status, l.bytes.as_str()), (200, "26"));
        }
    }
}

#[test]
fn stdout_log() {
    let root = Docroot::standard();
    let mut srv = serve(MODEL, &root, &["--access-log", "-"]);
    get(&srv, "/hello.txt?stdout").assert_status(200);
    stop(&mut srv);
    let lines = parse_all(&srv.stdout_lines());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let l = find(&lines, "GET /hello.txt?stdout HTTP/1.1");
    assert_eq!((l.status, l.bytes.as_str()), (200, "14"));
}

/// A log that cannot be written (here /dev/full: every write fails with
/// ENOSPC) does not stop the serving, and the error log says lines were
/// dropped and why.
#[test]
fn a_full_disk_drops_lines_and_says_so() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full");
        return;
    }
    let root = Docroot::standard();
    let srv = serve(MODEL, &root, &["--access-log", "/dev/full"]);
    for _ in 0..3 {
        get(&srv, "/hello.txt").assert_status(200);
    }
    let said = "access log: ";
    assert!(
        poll_until(|| srv.stderr().contains(said) && srv.stderr().contains("No space left on device")),
        "{}",
        srv.stderr()
    );
    assert!(srv.stderr().contains("line(s) dropped, writing failed"), "{}", srv.stderr());
    get(&srv, "/hello.txt").assert_status(200);
}
