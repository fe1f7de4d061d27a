// CGI/1.1 (RFC 3875): meta-variables, bodies both ways, response heads,
// faults and limits. Scripts are small `#!/bin/sh` programs written into a
// temporary cgi directory, plus the bundled programs (`cgi-echo`,
// `cgi-env`, `cgi-spin`, binaries of this package) linked into it.
// (Included once per model.)

use super::MODEL;
use crate::common::*;
use std::collections::HashMap;
use std::path::Path;

struct Cgi {
    _root: Docroot,
    dir: tempfile::TempDir,
    srv: Server,
}

const SCRIPTS: &[(&str, &str)] = &[
    ("hello", "printf 'Content-Type: text/plain\\n\\n'\necho \"hello $QUERY_STRING\"\n"),
    ("cat", "printf 'Content-Type: application/octet-stream\\n\\n'\nexec cat\n"),
    (
        "status",
        "printf 'Status: 404 Gone Fishing\\r\\nContent-Type: text/plain\\r\\nX-Custom: yes\\r\\n\\r\\nnope\\n'\n",
    ),
    ("redirect", "printf 'Location: http://example.org/elsewhere\\n\\n'\n"),
    ("local", "printf 'Location: /hello.txt\\n\\n'\n"),
    ("local-cgi", "printf 'Location: /cgi-bin/hello?from=local\\n\\n'\n"),
    ("loop", "printf 'Location: /cgi-bin/loop\\n\\n'\n"),
    ("badhead", "echo 'oops: this is not' >&2\necho 'not a header line'\necho\necho LEAKED-BODY\n"),
    ("noct", "printf 'X-Only: 1\\n\\nLEAKED-BODY\\n'\n"),
    ("fail", "echo 'fail: about to exit 3' >&2\nexit 3\n"),
    ("silent", "exit 0\n"),
    ("sleepy", "echo $$ > \"$PIDFILE_DIR/sleepy.pid\"\nexec sleep 30\n"),
    (
        "background",
        "sleep 30 &\necho $! > \"$PIDFILE_DIR/background.tmp\"\nmv \"$PIDFILE_DIR/background.tmp\" \"$PIDFILE_DIR/background.pid\"\nexec sleep 30\n",
    ),
    ("chatty", "while :; do echo tick >&2; sleep 0.2; done\n"),
    ("flood", "exec yes noise >&2\n"),
    (
        "moved",
        "printf 'Status: 302 Found\\nLocation: http://example.org/new\\nContent-Type: text/html\\n\\n<a href=\"http://example.org/new\">moved</a>\\n'\n",
    ),
    ("stall", "printf 'Content-Type: text/plain\\n\\nstart\\n'\nexec sleep 30\n"),
    ("big", "printf 'Content-Type: application/octet-stream\\n\\n'\nyes 0123456789abcde | head -c 3145728\n"),
    ("mark", "touch \"$PIDFILE_DIR/mark.ran\"\nprintf 'Content-Type: text/plain\\n\\nran\\n'\nexec cat >/dev/null\n"),
    ("eager", "printf 'Content-Type: text/plain\\n\\n'\nhead -c 200000 /dev/zero | tr '\\0' x\nexec cat >/dev/null\n"),
    ("lingering", "printf 'Content-Type: text/plain\\n\\nbefore\\n'\nsleep 20 &\necho $! > \"$PIDFILE_DIR/lingering.pid\"\nexit 0\n"),
    (
        "signals",
        "printf 'Content-Type: text/plain\\n\\n'\ngrep -E '^Sig(Blk|Ign):' /proc/self/status\nsleep 30 &\nkill -TERM $!\nwait $!\necho \"rc=$?\"\n",
    ),
];

fn cgi_server(args: &[&str]) -> Cgi {
    let root = Docroot::standard();
    let dir = tempfile::Builder::new().prefix("modus-cgi-").tempdir().unwrap();
    let cgi_dir = dir.path().to_str().unwrap().to_string();
    // Scripts that leave evidence write it to PIDFILE_DIR: nothing of ours
    // leaks into their environment, so the path is written into the script.
    for (name, body) in SCRIPTS {
        let text = format!("#!/bin/sh\n{body}").replace("$PIDFILE_DIR", &cgi_dir);
        write_script(dir.path(), name, &text, 0o755);
    }
    write_script(dir.path(), "source.sh", "#!/bin/sh\necho SOURCE-MUST-NOT-LEAK\n", 0o644);
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    write_script(
        dir.path(),
        "sub/deeper",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\nenv\n",
        0o755,
    );
    for bin in ["env", "echo", "spin"] {
        let exe = match bin {
            "env" => env!("CARGO_BIN_EXE_cgi-env"),
            "echo" => env!("CARGO_BIN_EXE_cgi-echo"),
            _ => env!("CARGO_BIN_EXE_cgi-spin"),
        };
        std::os::unix::fs::symlink(exe, dir.path().join(bin)).unwrap();
    }
    let mut all = vec!["--cgi-dir", cgi_dir.as_str()];
    all.extend_from_slice(args);
    let srv = serve(MODEL, &root, &all);
    Cgi { _root: root, dir, srv }
}

fn write_script(dir: &Path, name: &str, text: &str, mode: u32) {
    testkit::write_executable(&dir.join(name), text, mode);
}

/// The `NAME=value` lines of `cgi-env`'s output.
fn env_map(r: &Response) -> HashMap<String, String> {
    r.body_str()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[track_caller]
fn check_cgi(r: &Response) {
    assert_eq!(r.version, "HTTP/1.1", "{}", r.describe());
    assert!(r.header("date").is_some() && r.header("server").is_some(), "{}", r.describe());
}

/// A script that exits while a background child keeps its output open
/// (`sleep 20 &`) is answered in full a moment after its exit — what it
/// wrote, properly ended (the last chunk, keep-alive kept) — not when
/// `--cgi-timeout` cuts a truncated body; the child is stopped and the
/// error log says why.
#[test]
fn a_background_child_holding_the_output_does_not_hold_the_response() {
    let t = cgi_server(&["--cgi-timeout", "30s"]);
    let mut c = t.srv.client();
    let r = c.request("GET", "/cgi-bin/lingering", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), "before\n", "{}", r.describe());
    // The connection is still good for the next request.
    c.request("GET", "/cgi-bin/hello", &[]).assert_status(200);
    assert!(
        poll_until(|| t.srv.stderr().contains("exited, but its output stayed open")),
        "{}",
        t.srv.stderr()
    );
    let pid: i32 =
        std::fs::read_to_string(t.dir.path().join("lingering.pid")).unwrap().trim().parse().unwrap();
    assert!(
        poll_until(|| !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))),
        "the background child is stopped"
    );
}

/// A script starts as a program started from a clean shell would: no
/// signal blocked, none ignored (a process model's master blocks the ones
/// it reads; a server started in the background has INT and QUIT ignored),
/// so what it starts dies of SIGTERM at once (143), not 30 s later.
#[test]
fn a_script_starts_with_default_signals() {
    let t = cgi_server(&[]);
    // Started as a shell starts a background job: INT and QUIT ignored.
    let serve = Server::builder(BIN)
        .model(MODEL)
        .root(t._root.path())
        .args(["--cgi-dir", t.dir.path().to_str().unwrap()])
        .command_args();
    let srv = Server::builder("sh")
        .subcommand("-c")
        .no_defaults()
        .args(["trap '' INT QUIT; exec \"$0\" \"$@\"", BIN])
        .args(serve)
        .start();
    let r = srv.client().request("GET", "/cgi-bin/signals", &[]);
    r.assert_status(200);
    let body = r.body_str();
    let mask = |name: &str| {
        let line =
            body.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_else(|| panic!("{name} in {body}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    // The standard signals, 1 to 31 (the real-time ones are the C library's).
    let standard = (1u64 << 31) - 1;
    assert_eq!(mask("SigBlk:") & standard, 0, "{body}");
    assert_eq!(mask("SigIgn:") & standard, 0, "{body}");
    assert!(body.contains("rc=143"), "the background sleep died of SIGTERM: {body}");
}

#[test]
fn meta_variables() {
    let t = cgi_server(&[]);
    let mut c = t.srv.client();
    let r = c.request(
        "GET",
        "/cgi-bin/env/a%20b/c%C3%A9/?x=1&y=%41",
        &["X-Custom: one", "X-Custom: two", "Accept: text/plain", "User-Agent: cgi-test"],
    );
    r.assert_status(200);
    check_cgi(&r);
    let env = env_map(&r);
    let want = [
        ("GATEWAY_INTERFACE", "CGI/1.1"),
        ("SERVER_SOFTWARE", concat!("modus/", env!("CARGO_PKG_VERSION"))),
        ("SERVER_PROTOCOL", "HTTP/1.1"),
        ("SERVER_NAME", "localhost"),
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", "/cgi-bin/env"),
        ("PATH_INFO", "/a b/cé/"),
        ("QUERY_STRING", "x=1&y=%41"),
        ("REMOTE_ADDR", "127.0.0.1"),
        ("REMOTE_HOST", "127.0.0.1"),
        ("REQUEST_URI", "/cgi-bin/env/a%20b/c%C3%A9/?x=1&y=%41"),
        ("HTTP_HOST", "localhost"),
        ("HTTP_X_CUSTOM", "one, two"),
        ("HTTP_ACCEPT", "text/plain"),
        ("HTTP_USER_AGENT", "cgi-test"),
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ];
    for (name, value) in want {
        assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}\n{}", r.body_str());
    }
    assert_eq!(env["SERVER_PORT"], t.srv.addr().port().to_string());
    assert!(env["REMOTE_PORT"].parse::<u16>().is_ok());
    assert!(env["PATH_TRANSLATED"].ends_with("/root/a b/cé/"), "{}", env["PATH_TRANSLATED"]);
    assert!(!env.contains_key("CONTENT_LENGTH") && !env.contains_key("CONTENT_TYPE"), "no body");
    // A clean environment: nothing of the server's own leaks in.
    for leaked in ["HOME", "USER", "CARGO", "RUST_BACKTRACE", "MODUS_LISTEN"] {
        assert!(!env.contains_key(leaked), "{leaked} leaked into the script's environment");
    }
    // Keep-alive continues after a CGI response.
    let r = c.request("GET", "/cgi-bin/env", &[]);
    r.assert_status(200);
    let env = env_map(&r);
    assert_eq!(env["SCRIPT_NAME"], "/cgi-bin/env");
    assert!(!env.contains_key("PATH_INFO") && !env.contains_key("PATH_TRANSLATED"), "{}", r.body_str());
    assert_eq!(env["QUERY_STRING"], "", "QUERY_STRING is set even when empty (§4.1.7)");
}

#[test]
fn script_in_a_subdirectory_and_script_name_split() {
    let t = cgi_server(&[]);
    let r = t.srv.client().request("GET", "/cgi-bin/sub/deeper/more/path", &[]);
    r.assert_status(200);
    let env = env_map(&r);
    assert_eq!(env["SCRIPT_NAME"], "/cgi-bin/sub/deeper");
    assert_eq!(env["PATH_INFO"], "/more/path");
    // `..` is applied before the split (and can never leave the cgi dir).
    let r = t.srv.client().request("GET", "/cgi-bin/sub/../env/x", &[]);
    r.assert_status(200);
    assert_eq!(env_map(&r)["SCRIPT_NAME"], "/cgi-bin/env");
    // Percent-encoding is decoded before the split, in both parts (§4.1.13, §4.1.5).
    let r = t.srv.client().request("GET", "/cgi-bin/%65nv/p%41th", &[]);
    r.assert_status(200);
    let env = env_map(&r);
    assert_eq!(env["SCRIPT_NAME"], "/cgi-bin/env", "{}", r.body_str());
    assert_eq!(env["PATH_INFO"], "/pAth");
    assert_eq!(env["REQUEST_URI"], "/cgi-bin/%65nv/p%41th", "as received");
}

#[test]
fn httpoxy_underscores_and_credentials_are_not_exported() {
    let t = cgi_server(&[]);
    let r = t.srv.client().request(
        "GET",
        "/cgi-bin/env",
        &[
            "Proxy: http://evil.example:3128",
            "X_Real_Ip: 6.6.6.6",
            "X-Real-Ip: 127.0.0.1",
            "Authorization: Basic dXNlcjpwYXNz",
            "Proxy-Authorization: Basic dXNlcjpwYXNz",
        ],
    );
    r.assert_status(200);
    let env = env_map(&r);
    assert!(!env.contains_key("HTTP_PROXY"), "httpoxy: {}", r.body_str());
    assert_eq!(env["HTTP_X_REAL_IP"], "127.0.0.1", "a `_` name cannot spoof a `-` one");
    assert!(!env.contains_key("HTTP_AUTHORIZATION") && !env.contains_key("HTTP_PROXY_AUTHORIZATION"));
}

#[test]
fn post_with_content_length_streams_both_ways() {
    let t = cgi_server(&[]);
    let body = pseudo_random_bytes(150_000, 4);
    let mut c = t.srv.client();
    let mut req = format!(
        "POST /cgi-bin/echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    c.send(&req);
    let r = c.read_response("POST");
    r.assert_status(200);
    check_cgi(&r);
    assert_eq!(r.header_one("content-type"), "application/x-test");
    assert_bytes_eq(&r.body, &body, "echoed body");
    // The environment of a POST.
    c.send("POST /cgi-bin/env HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.read_response("POST");
    let env = env_map(&r);
    assert_eq!(env["CONTENT_LENGTH"], "5");
    assert_eq!(env["CONTENT_TYPE"], "text/plain");
    assert!(!env.contains_key("HTTP_CONTENT_LENGTH"));
    // A declared empty body is still declared (§4.1.2).
    c.send("POST /cgi-bin/env HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
    let r = c.read_response("POST");
    assert_eq!(env_map(&r).get("CONTENT_LENGTH").map(String::as_str), Some("0"), "{}", r.body_str());
    // The script never read its input: it is dropped, and the connection goes on.
    let r = c.request("GET", "/hello.txt", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
}

#[test]
fn post_with_a_chunked_body_is_dechunked_with_content_length() {
    let t = cgi_server(&[]);
    let body = pseudo_random_bytes(120_000, 9);
    let mut req =
        b"POST /cgi-bin/echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in body.chunks(7_000) {
        req.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
        req.extend_from_slice(piece);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    let mut c = t.srv.client();
    c.send(&req);
    let r = c.read_response("POST");
    r.assert_status(200);
    // cgi-echo answers with CONTENT_LENGTH as its Content-Length.
    assert_eq!(r.content_length(), Some(body.len() as u64), "{}", r.describe());
    assert_bytes_eq(&r.body, &body, "echoed chunked body");
    let r = c.request("GET", "/cgi-bin/hello", &[]);
    r.assert_status(200);
}

#[test]
fn a_body_over_max_body_is_413_and_the_script_never_runs() {
    let t = cgi_server(&["--max-body", "1000"]);
    let ran = t.dir.path().join("mark.ran");
    // Declared too large: refused before anything is read or started.
    let mut c = t.srv.client();
    c.send("POST /cgi-bin/mark HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1001\r\n\r\n");
    let r = c.read_response("POST");
    r.assert_status(413);
    check_common(&r, "POST");
    assert!(r.connection_has("close"), "the unread body ends the connection\n{}", r.describe());
    assert!(c.is_closed());
    // The error log says which limit and how to raise it.
    let said = "413 to 127.0.0.1: a body of 1001 bytes for /cgi-bin/mark over --max-body (1000 bytes)";
    assert!(poll_until(|| t.srv.stderr().contains(said)), "{}", t.srv.stderr());
    // Chunked, discovered too large only while reading it.
    let mut req =
        b"POST /cgi-bin/mark HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        req.extend_from_slice(b"190\r\n");
        req.extend_from_slice(&[b'z'; 400]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let mut c = t.srv.client();
    let _ = c.try_send(&req);
    let r = c.read_response("POST");
    r.assert_status(413);
    assert!(r.connection_has("close"), "{}", r.describe());
    assert!(!ran.exists(), "the script ran for a refused body");
    // Exactly at the limit is fine.
    let mut c = t.srv.client();
    let mut req = b"POST /cgi-bin/mark HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n".to_vec();
    req.extend_from_slice(&[b'z'; 1000]);
    c.send(&req);
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.body_str(), "ran\n");
    assert!(ran.exists());
}

#[test]
fn expect_100_continue_is_answered() {
    let t = cgi_server(&[]);
    let mut c = t.srv.client();
    c.send(
        "POST /cgi-bin/cat HTTP/1.1\r\nHost: localhost\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n",
    );
    let interim = c.read_response("POST");
    assert_eq!(interim.status, 100, "{}", interim.describe());
    c.send("hello world");
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.body_str(), "hello world");
    // Chunked: the body is collected (de-chunked) for the script after the 100.
    c.send(
        "POST /cgi-bin/cat HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
    );
    let interim = c.read_response("POST");
    assert_eq!(interim.status, 100, "{}", interim.describe());
    c.send("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.body_str(), "hello world");
    // No script: the final answer comes without a 100, and a client that
    // sends its body anyway keeps its connection.
    c.send("POST /cgi-bin/missing HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    let r = c.read_response("POST");
    r.assert_status(404);
    c.send("hello");
    let r = c.request("GET", "/cgi-bin/hello", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), "hello \n");
    // Chunked to no script: no 100 either, and the connection closes, as
    // the body's end could only be found by reading it.
    let mut c = t.srv.client();
    c.send(
        "POST /cgi-bin/missing HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
    );
    let r = c.read_response("POST");
    r.assert_status(404);
    assert!(r.connection_has("close"), "{}", r.describe());
    let _ = c.try_send("5\r\nhello\r\n0\r\n\r\n");
    assert!(c.read_to_end_expect_closed().is_empty());
}

#[test]
fn a_script_that_prints_before_reading_does_not_deadlock() {
    // 200 KB out before it reads 300 KB in: both pipes must move at once (K11).
    let t = cgi_server(&[]);
    let body = vec![b'y'; 300_000];
    let mut req =
        format!("POST /cgi-bin/eager HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n", body.len())
            .into_bytes();
    req.extend_from_slice(&body);
    let mut c = t.srv.client();
    c.send_reading(&req).expect("the request is read while the response is written");
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.body.len(), 200_000);
}

#[test]
fn status_location_and_custom_headers() {
    let t = cgi_server(&[]);
    let r = t.srv.client().request("GET", "/cgi-bin/status", &[]);
    r.assert_status(404);
    assert_eq!(r.reason, "Gone Fishing", "the script's reason phrase is kept");
    assert_eq!(r.header_one("x-custom"), "yes");
    assert_eq!(r.body_str(), "nope\n");
    let r = t.srv.client().request("GET", "/cgi-bin/redirect", &[]);
    r.assert_status(302);
    assert_eq!(r.header_one("location"), "http://example.org/elsewhere");
    // A client redirect with a document (§6.2.4): status, Location and body all go through.
    let r = t.srv.client().request("GET", "/cgi-bin/moved", &[]);
    r.assert_status(302);
    assert_eq!(r.header_one("location"), "http://example.org/new");
    assert_eq!(r.header_one("content-type"), "text/html");
    assert_eq!(r.body_str(), "<a href=\"http://example.org/new\">moved</a>\n");
    // A local redirect is answered inside the server (§6.2.2).
    let mut c = t.srv.client();
    let r = c.request("GET", "/cgi-bin/local", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
    assert!(r.header("location").is_none());
    let r = c.request("GET", "/cgi-bin/local-cgi", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), "hello from=local\n");
    // A redirect loop ends after 10 hops.
    let r = c.request("GET", "/cgi-bin/loop", &[]);
    r.assert_status(500);
}

#[test]
fn invalid_header_block_is_502_and_stderr_is_logged() {
    let t = cgi_server(&[]);
    for script in ["badhead", "noct"] {
        let r = t.srv.client().request("GET", &format!("/cgi-bin/{script}"), &[]);
        r.assert_status(502);
        check_common(&r, "GET");
        assert!(!r.body_str().contains("LEAKED-BODY"), "script output must not leak: {}", r.describe());
    }
    // Each stderr line is logged on a line of its own, with the script's name.
    let logged = |script: &str, text: &str| {
        t.srv.stderr().lines().any(|l| l.contains(&format!("cgi {script}: ")) && l.contains(text))
    };
    assert!(poll_until(|| logged("/cgi-bin/badhead", "oops: this is not")), "{}", t.srv.stderr());
    t.srv.client().request("GET", "/cgi-bin/fail", &[]).assert_status(500);
    assert!(poll_until(|| logged("/cgi-bin/fail", "fail: about to exit 3")), "{}", t.srv.stderr());
}

/// A process's state letter and parent, from `/proc/PID/stat`; `None` once it is gone.
fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields follow the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn read_pid(path: &Path) -> u32 {
    assert!(poll_until(|| path.exists()), "{} never written", path.display());
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

#[test]
fn exit_without_output() {
    let t = cgi_server(&[]);
    let r = t.srv.client().request("GET", "/cgi-bin/fail", &[]);
    r.assert_status(500);
    check_common(&r, "GET");
    let r = t.srv.client().request("GET", "/cgi-bin/silent", &[]);
    r.assert_status(502);
}

#[test]
fn only_executable_files_run_and_nothing_is_served_as_source() {
    let t = cgi_server(&[]);
    for (target, status) in [
        ("/cgi-bin/source.sh", 403),
        ("/cgi-bin/sub/", 403),
        ("/cgi-bin/sub", 403),
        ("/cgi-bin/", 403),
        ("/cgi-bin", 403),
        ("/cgi-bin/missing", 404),
        ("/cgi-bin/..%2fsecret", 400),
        ("/cgi-bin/%2e%2e/%2e%2e/secret", 400),
    ] {
        let r = t.srv.client().request("GET", target, &[]);
        assert_eq!(r.status, status, "{target}\n{}", r.describe());
        assert!(!r.body_str().contains("SOURCE-MUST-NOT-LEAK") && !r.body_str().contains(SECRET), "{target}");
    }
    assert!(t.dir.path().join("source.sh").exists());
}

#[test]
fn timeout_kills_the_script() {
    let t = cgi_server(&["--cgi-timeout", "1s"]);
    let r = t.srv.client().request("GET", "/cgi-bin/sleepy", &[]);
    r.assert_status(504);
    check_common(&r, "GET");
    let pid = read_pid(&t.dir.path().join("sleepy.pid"));
    // Killed and reaped, with no other request to prompt it: an idle
    // server keeps no zombie.
    assert!(poll_until(|| proc_state(pid).is_none()), "script {pid} left behind: {:?}", proc_state(pid));
    // Output already sent: the connection is closed instead.
    let mut c = t.srv.client();
    c.send("GET /cgi-bin/stall HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let rest = c.read_to_end_expect_closed();
    let text = String::from_utf8_lossy(&rest);
    assert!(text.starts_with("HTTP/1.1 200 ") && text.contains("start"), "{text}");
    assert!(!text.ends_with("0\r\n\r\n"), "a cut response must not look complete: {text}");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    let t = cgi_server(&["--cgi-timeout", "1s"]);
    let r = t.srv.client().request("GET", "/cgi-bin/background", &[]);
    r.assert_status(504);
    // `sleep 30 &`: a child of the script, not of the server, in the
    // script's process group. It is killed with the script; its new parent
    // (init or a subreaper) reaps it, so here it may linger as a zombie.
    let pid = read_pid(&t.dir.path().join("background.pid"));
    assert!(
        poll_until(|| proc_state(pid).is_none_or(|(state, _)| state == 'Z')),
        "background child {pid} survived the timeout: {:?}",
        proc_state(pid)
    );
}

#[test]
fn stderr_output_is_not_progress() {
    // A script that only ever logs still times out.
    let t = cgi_server(&["--cgi-timeout", "1s"]);
    let r = t.srv.client().request("GET", "/cgi-bin/chatty", &[]);
    r.assert_status(504);
    assert!(t.srv.stderr().lines().any(|l| l.contains("cgi /cgi-bin/chatty: tick")), "{}", t.srv.stderr());
}

#[test]
fn a_script_flooding_stderr_times_out_without_stalling_the_server() {
    let t = cgi_server(&["--cgi-timeout", "1s"]);
    let mut flood = t.srv.client();
    flood.send("GET /cgi-bin/flood HTTP/1.1\r\nHost: localhost\r\n\r\n");
    // Served while the script floods: the loop (or worker) driving it
    // must not be stuck draining stderr.
    assert!(poll_until(|| t.srv.stderr().contains("cgi /cgi-bin/flood: noise")), "{}", t.srv.stderr());
    for _ in 0..5 {
        let r = t.srv.client().request("GET", "/hello.txt", &[]);
        r.assert_status(200);
        assert_eq!(r.body_str(), HELLO);
    }
    let r = flood.read_response("GET");
    r.assert_status(504);
    // The log holds a bounded number of its lines, then says it dropped the rest.
    let log = t.srv.stderr();
    let noise = log.lines().filter(|l| l.contains("cgi /cgi-bin/flood: noise")).count();
    assert!((1..=1000).contains(&noise), "{noise} stderr lines logged");
    assert!(log.contains("cgi /cgi-bin/flood: stderr truncated"), "no truncation line");
}

#[test]
fn head_answers_have_no_body_and_keep_alive_stays_in_step() {
    let t = cgi_server(&[]);
    let mut c = t.srv.client();
    for (target, status, length) in [
        ("/cgi-bin/missing", 404, None),
        ("/cgi-bin/source.sh", 403, None),
        ("/cgi-bin/hello", 200, None),
        ("/cgi-bin/status", 404, None),
        // A local redirect answers as the GET of its target would, still without a body.
        ("/cgi-bin/local", 200, Some(HELLO.len())),
        ("/cgi-bin/local-cgi", 200, None),
    ] {
        let r = c.request("HEAD", target, &[]);
        assert_eq!(r.status, status, "HEAD {target}\n{}", r.describe());
        if let Some(length) = length {
            assert_eq!(r.content_length(), Some(length as u64), "HEAD {target}\n{}", r.describe());
        }
        // A body sent after the HEAD answer would be read here as the next response.
        let r = c.request("GET", "/hello.txt", &[]);
        assert_eq!(r.status, 200, "after HEAD {target}\n{}", r.describe());
        assert_eq!(r.body_str(), HELLO, "after HEAD {target}");
    }
    // A script that fails: the error closes the connection, and has no body either.
    let r = c.request("HEAD", "/cgi-bin/fail", &[]);
    r.assert_status(500);
    assert!(r.connection_has("close"), "{}", r.describe());
    let rest = c.read_to_end_expect_closed();
    assert!(rest.is_empty(), "a body after a HEAD answer: {:?}", String::from_utf8_lossy(&rest));
}

#[test]
fn three_megabytes_streamed_chunked_and_close_delimited() {
    let t = cgi_server(&[]);
    let want: Vec<u8> = b"0123456789abcde\n".iter().copied().cycle().take(3 << 20).collect();
    let mut c = t.srv.client();
    let r = c.request("GET", "/cgi-bin/big", &[]);
    r.assert_status(200);
    assert_eq!(r.header_one("transfer-encoding"), "chunked");
    assert_bytes_eq(&r.body, &want, "3 MB chunked");
    // Still open afterwards.
    c.request("GET", "/cgi-bin/hello", &[]).assert_status(200);
    // HTTP/1.0: no chunked; the close delimits the body.
    let mut c = t.srv.client();
    c.send("GET /cgi-bin/big HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let r = c.read_response("GET");
    r.assert_status(200);
    assert!(r.header("transfer-encoding").is_none() && r.header("content-length").is_none());
    assert_bytes_eq(&r.body, &want, "3 MB close-delimited");
}

#[test]
fn keep_alive_and_head_after_cgi() {
    let t = cgi_server(&[]);
    let mut c = t.srv.client();
    for i in 0..3 {
        let r = c.request("GET", &format!("/cgi-bin/hello?n={i}"), &[]);
        r.assert_status(200);
        assert_eq!(r.body_str(), format!("hello n={i}\n"));
        assert!(!r.connection_has("close"));
        let r = c.request("HEAD", "/cgi-bin/hello", &[]);
        r.assert_status(200);
        assert!(r.body.is_empty());
        c.request("GET", "/hello.txt", &[]).assert_status(200);
    }
    // Pipelined: a CGI request and a static one in one write.
    c.send("GET /cgi-bin/hello?a HTTP/1.1\r\nHost: localhost\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(c.read_response("GET").body_str(), "hello a\n");
    assert_eq!(c.read_response("GET").body_str(), HELLO);
}

#[test]
fn concurrent_cgi_requests() {
    let t = cgi_server(&[]);
    let addr = t.srv.addr();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for j in 0..4 {
                    let r = c.request("GET", &format!("/cgi-bin/spin?ms=5&i={i}-{j}"), &[]);
                    assert_eq!(r.status, 200, "{}", r.describe());
                    assert!(r.body_str().starts_with("spun 5 ms"), "{}", r.describe());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn demo_site_bundles_the_programs() {
    let srv = Server::builder(BIN).model(MODEL).start();
    let r = srv.client().request("GET", "/cgi-bin/spin?ms=1", &[]);
    r.assert_status(200);
    assert!(r.body_str().starts_with("spun 1 ms"), "{}", r.describe());
    let r = srv.client().request("GET", "/cgi-bin/env", &[]);
    assert_eq!(env_map(&r)["GATEWAY_INTERFACE"], "CGI/1.1");
    // Only the bundled programs: not the server binary next to them.
    srv.client().request("GET", "/cgi-bin/modus", &[]).assert_status(404);
}

#[test]
fn a_cgi_dir_inside_the_root_is_warned_about() {
    let root = Docroot::standard();
    std::fs::create_dir_all(root.join("scripts")).unwrap();
    testkit::write_executable(
        &root.join("scripts/run"),
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nran\\n'\n",
        0o755,
    );
    let srv = serve(MODEL, &root, &["--cgi-dir", root.join("scripts").to_str().unwrap()]);
    let r = srv.client().request("GET", "/cgi-bin/run", &[]);
    r.assert_status(200);
    assert!(poll_until(|| srv.stderr().contains("lies inside ROOT")), "{}", srv.stderr());
}

/// One answer whatever the model: a method the server does not know goes
/// to the script, which owns its URL space (as Apache does; the route is
/// decided once, when the head is parsed). Off the prefix it stays 501.
#[test]
fn an_unknown_method_reaches_the_script() {
    let t = cgi_server(&[]);
    let r = t.srv.client().request("FOO", "/cgi-bin/env", &[]);
    r.assert_status(200);
    assert_eq!(env_map(&r)["REQUEST_METHOD"], "FOO");
    let r = t.srv.client().request("FOO", "/", &[]);
    r.assert_status(501);
}
