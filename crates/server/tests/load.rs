//! `modus load` and `modus workload`, end to end: against the real server
//! (exact counts and bytes, mixes, SURGE replay, open-loop rate) and against
//! small in-test servers on 127.0.0.1:0 that misbehave on purpose (error
//! classification, coordinated omission). Every run is bounded by -n or a
//! short -d, and timing assertions are count-based and generous.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{run, Docroot, Server};

const BIN: &str = env!("CARGO_BIN_EXE_modus");
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `modus load ARGS --json` and returns the report.
fn load_json(args: &[&str]) -> Value {
    let mut all: Vec<&str> = vec!["load"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = run(BIN, &all, LIMIT);
    let r: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!("modus {all:?}: not one JSON object ({e}): {}\n{}", out.stdout, out.stderr)
    });
    // 0, or 1 when requests got no response (a run of errors on purpose):
    // the report says which, and why.
    assert!(matches!(out.status.code(), Some(0 | 1)), "modus {all:?}: {:?} {}", out.status, out.stderr);
    assert_eq!(out.status.code().map(i64::from), r["exit_status"].as_i64(), "{r}");
    assert_eq!(out.status.code() == Some(1), !r["failure"].is_null(), "{r}");
    r
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn err(r: &Value, kind: &str) -> u64 {
    r["errors_by_kind"][kind].as_u64().unwrap_or(0)
}

fn server_500b() -> (Docroot, Server) {
    let root = Docroot::new();
    root.file("500b.bin", testkit::pseudo_random_bytes(500, 5));
    root.file("5k.bin", testkit::pseudo_random_bytes(5000, 6));
    let srv = Server::start(BIN, "pool", root.path(), &[]);
    (root, srv)
}

#[test]
fn counts_and_bytes_are_exact_with_n() {
    let (_root, srv) = server_500b();
    let url = format!("http://{}/500b.bin", srv.addr());
    for extra in [&["-c", "8", "-t", "2"][..], &["-c", "3", "--pipeline", "4"], &["-c", "4", "--close"]] {
        let mut args = vec![url.as_str(), "-n", "600"];
        args.extend_from_slice(extra);
        let r = load_json(&args);
        assert_eq!(u(&r["requests"]), 600, "{extra:?}: {r}");
        assert_eq!(u(&r["errors"]), 0, "{extra:?}: {r}");
        assert_eq!(u(&r["status"]["200"]), 600);
        assert_eq!(u(&r["body_bytes"]), 600 * 500, "{extra:?}");
        // Every response has the same head, so the wire total is a multiple.
        assert_eq!(u(&r["bytes"]) % 600, 0, "{extra:?}: {}", r["bytes"]);
        assert!(u(&r["bytes"]) > 600 * 500);
        assert_eq!(u(&r["per_class"]["/500b.bin"]["requests"]), 600);
        let per_second: u64 = r["per_second"].as_array().unwrap().iter().map(|s| u(&s["requests"])).sum();
        assert_eq!(per_second, 600);
        if extra.contains(&"--close") {
            assert_eq!(u(&r["connections_opened"]), 600, "one connection per request");
        } else {
            assert!(
                u(&r["connections_opened"]) <= 8,
                "keep-alive reuses connections: {}",
                r["connections_opened"]
            );
        }
        assert_eq!(r["params"]["connections"], Value::from(extra[1].parse::<u64>().unwrap()));
    }
}

/// `--histogram-out`: the latency histograms in HdrHistogram's V2
/// serialization, every answer in them, read back to the report's figures
/// (what `modus lab` merges from several generators).
#[test]
fn the_latency_histograms_are_written_for_an_exact_merge() {
    let (_root, srv) = server_500b();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("latency.hist");
    let url = format!("http://{}/500b.bin", srv.addr());
    let r = load_json(&[&url, "-n", "300", "-c", "3", "--histogram-out", file.to_str().unwrap()]);
    let [all, ok] = load::report::read_histograms(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(all.len(), u(&r["requests"]), "{r}");
    assert_eq!(ok.len(), u(&r["status"]["200"]), "{r}");
    for q in ["max", "p50", "p99"] {
        let value =
            if q == "max" { all.max() } else { all.value_at_quantile(if q == "p50" { 0.5 } else { 0.99 }) };
        assert_eq!(value, u(&r["latency_us"][q]), "{q}: {r}");
    }
}

#[test]
fn mix_file_weights_urls_and_reports_per_class() {
    let (root, srv) = server_500b();
    let mix = root.base().join("mix.txt");
    std::fs::write(&mix, "# weight url\n30 5k.bin\n70 /500b.bin\n").unwrap();
    let url = format!("http://{}/", srv.addr());
    let r = load_json(&[&url, "--mix", mix.to_str().unwrap(), "-n", "2000", "-c", "4"]);
    assert_eq!(u(&r["errors"]), 0, "{r}");
    let small = u(&r["per_class"]["/500b.bin"]["requests"]);
    let big = u(&r["per_class"]["/5k.bin"]["requests"]);
    assert_eq!(small + big, 2000);
    assert!((500..=700).contains(&big), "30% of 2000 expected, got {big}");
    assert_eq!(u(&r["body_bytes"]), small * 500 + big * 5000);
}

#[test]
fn several_urls_round_robin_and_text_report() {
    let (_root, srv) = server_500b();
    let a = format!("http://{}/500b.bin", srv.addr());
    let b = format!("http://{}/5k.bin", srv.addr());
    let out = run(BIN, ["load", &a, &b, "-n", "100", "-c", "1"], LIMIT);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("100 requests in"), "{}", out.stdout);
    assert!(out.stdout.contains("Requests/sec:"), "{}", out.stdout);
    assert!(out.stdout.contains("Status codes: 200: 100"), "{}", out.stdout);
    assert!(out.stdout.contains("99.900%"), "{}", out.stdout);
    // One connection, strictly alternating: exactly half each.
    let r = load_json(&[&a, &b, "-n", "100", "-c", "1"]);
    assert_eq!(u(&r["per_class"]["/500b.bin"]["requests"]), 50);
    assert_eq!(u(&r["per_class"]["/5k.bin"]["requests"]), 50);
    // The progress line goes to a TTY only: none here.
    assert!(!out.stderr.contains("responses,"), "{}", out.stderr);
}

#[test]
fn surge_workload_is_generated_served_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("surge");
    let gen = run(
        BIN,
        [
            "workload",
            "surge",
            "--out",
            out.to_str().unwrap(),
            "--files",
            "60",
            "--requests",
            "600",
            "--seed",
            "7",
        ],
        LIMIT,
    );
    assert!(gen.status.success(), "{}", gen.stderr);
    assert!(gen.stdout.contains("body_ln_mean"), "{}", gen.stdout);
    let stats = run(BIN, ["workload", "stats", out.to_str().unwrap()], LIMIT);
    assert!(stats.status.success(), "{}", stats.stderr);
    assert!(stats.stdout.contains("600 requests") && stats.stdout.contains("0 missing"), "{}", stats.stdout);

    let srv = Server::start(BIN, "event", &out.join("docs"), &[]);
    let url = format!("http://{}/", srv.addr());
    let r = load_json(&[&url, "--workload", out.to_str().unwrap(), "-n", "600", "-c", "4", "--checksum"]);
    // Every body's length is checked against the file size in the stream.
    assert_eq!(u(&r["requests"]), 600, "{r}");
    assert_eq!(u(&r["errors"]), 0, "{r}");
    let stream = std::fs::read_to_string(out.join("stream.txt")).unwrap();
    let want: u64 = stream
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(' ').nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(u(&r["body_bytes"]), want, "the whole stream, once");
    assert!(r["per_class"].as_object().unwrap().len() >= 2, "size classes: {}", r["per_class"]);

    let fixed = dir.path().join("fixed");
    let f = run(BIN, ["workload", "fixed", "--out", fixed.to_str().unwrap()], LIMIT);
    assert!(f.status.success(), "{}", f.stderr);
    for (name, size) in [("500b.bin", 500), ("50k.bin", 51200), ("115k.bin", 117760), ("1m.bin", 1048576)] {
        assert_eq!(std::fs::metadata(fixed.join(name)).unwrap().len(), size);
    }
}

#[test]
fn open_loop_rate_is_accurate() {
    let (_root, srv) = server_500b();
    let url = format!("http://{}/500b.bin", srv.addr());
    for arrivals in ["constant", "poisson"] {
        let r = load_json(&[&url, "-R", "200", "-d", "2s", "-c", "4", "-t", "2", "--arrivals", arrivals]);
        let n = u(&r["requests"]);
        // 400 expected; Poisson's sd is 20.
        assert!((330..=470).contains(&n), "{arrivals}: {n} requests at 200/s for 2 s");
        assert_eq!(u(&r["errors"]), 0);
        assert_eq!(r["params"]["mode"], "open");
        assert!(r["open_loop"]["dropped"] == 0, "{r}");
    }
}

#[test]
fn closed_loop_think_time_and_warmup() {
    let (_root, srv) = server_500b();
    let url = format!("http://{}/500b.bin", srv.addr());
    let r = load_json(&[&url, "-c", "2", "-d", "1s", "--think-time", "fixed:100ms", "--warmup", "300ms"]);
    let n = u(&r["requests"]);
    // Two users, one request per ~100 ms each: about 20.
    assert!((8..=24).contains(&n), "{n}");
    assert!(u(&r["warmup_requests"]) >= 2, "{r}");
    assert!(u(&r["latency_us"]["p50"]) < 100_000, "think time is not latency: {}", r["latency_us"]);
}

#[test]
fn timeline_has_a_row_per_request_in_order() {
    let (root, srv) = server_500b();
    let csv = root.base().join("t.csv");
    let url = format!("http://{}/500b.bin", srv.addr());
    load_json(&[&url, "-n", "50", "-c", "2", "--timeline", csv.to_str().unwrap()]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next().unwrap(), "intended_us,actual_us,first_byte_us,end_us,status,bytes,error,url");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 50);
    for r in rows {
        let t: Vec<u64> = r[..4].iter().map(|x| x.parse().unwrap()).collect();
        assert!(t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3], "{r:?}");
        assert_eq!((r[4], r[6], r[7]), ("200", "", "/500b.bin"));
    }
}

#[test]
fn refuses_remote_targets() {
    let out = run(BIN, ["load", "http://10.255.255.1:9/", "-n", "1"], LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stderr.contains("--allow-remote"), "{}", out.stderr);
}

// ---- in-test servers --------------------------------------------------------

/// Serves each connection with `handle` on its own thread.
fn tiny_server(handle: impl Fn(TcpStream, usize) + Send + Sync + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for (i, s) in l.incoming().enumerate() {
            let Ok(s) = s else { return };
            let h = Arc::clone(&handle);
            std::thread::spawn(move || h(s, i));
        }
    });
    addr
}

/// Reads one request head; false at EOF.
fn read_head(s: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => buf.push(b[0]),
            _ => return false,
        }
    }
    true
}

#[test]
fn errors_are_classified() {
    // Resets: closing with the request unread sends RST.
    let reset = tiny_server(|s, _| {
        std::thread::sleep(Duration::from_millis(50));
        drop(s);
    });
    let r = load_json(&[&format!("http://{reset}/"), "-n", "5", "-c", "1"]);
    assert_eq!(err(&r, "reset"), 5, "{r}");
    assert_eq!(r["exit_status"], 1, "no request got a response: {r}");

    // Never answers: timeouts.
    let silent = tiny_server(|mut s, _| while read_head(&mut s) {});
    let r = load_json(&[&format!("http://{silent}/"), "-n", "4", "-c", "2", "--timeout", "300ms"]);
    assert_eq!(err(&r, "timeout"), 4, "{r}");
    assert_eq!(u(&r["requests"]), 0);

    // Short body: promises 100 bytes, sends 3, closes.
    let short = tiny_server(|mut s, _| {
        if read_head(&mut s) {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
        }
    });
    let r = load_json(&[&format!("http://{short}/"), "-n", "3", "-c", "1"]);
    assert_eq!(err(&r, "short_body"), 3, "{r}");

    // Statuses: 404 then 503 alternately on keep-alive connections.
    let status = tiny_server(|mut s, _| {
        let mut n = 0;
        while read_head(&mut s) {
            let line = if n % 2 == 0 { "404 Not Found" } else { "503 Service Unavailable" };
            n += 1;
            if s.write_all(format!("HTTP/1.1 {line}\r\nContent-Length: 2\r\n\r\nno").as_bytes()).is_err() {
                return;
            }
        }
    });
    let r = load_json(&[&format!("http://{status}/"), "-n", "10", "-c", "1"]);
    assert_eq!((err(&r, "status_4xx"), err(&r, "status_5xx")), (5, 5), "{r}");
    assert_eq!(u(&r["requests"]), 10, "complete responses are still responses");
    assert_eq!(r["exit_status"], 0, "4xx and 5xx are the server's answers, not failures: {r}");
    assert_eq!(r["no_success"], true, "{r}");

    // Garbage instead of a response.
    let garbage = tiny_server(|mut s, _| {
        if read_head(&mut s) {
            let _ = s.write_all(b"SMTP ready\r\n\r\n");
        }
    });
    let r = load_json(&[&format!("http://{garbage}/"), "-n", "2", "-c", "1"]);
    assert_eq!(err(&r, "parse"), 2, "{r}");

    // Nothing listening: connect errors.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let r = load_json(&[&format!("http://{closed}/"), "-n", "3", "-c", "1"]);
    assert_eq!(err(&r, "connect"), 3, "{r}");
    assert_eq!(r["connect_failures"]["connection refused (is the server running on that port?)"], 3, "{r}");
}

/// A server that closes a kept-alive connection under the next request
/// (read, never answered): `modus load` re-sends it on a new connection,
/// and says so beside the errors, in the text and in `--json` — each one a
/// request a browser or `wrk` would have failed.
#[test]
fn requests_resent_after_a_keep_alive_close_are_reported_beside_the_errors() {
    let once = tiny_server(|mut s, _| {
        if read_head(&mut s) && s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_ok() {
            // The next request is read whole, so the close is a FIN, not a reset.
            read_head(&mut s);
        }
    });
    let url = format!("http://{once}/");
    let r = load_json(&[&url, "-n", "4", "-c", "1"]);
    assert_eq!(u(&r["requests"]), 4, "{r}");
    assert_eq!(u(&r["errors"]), 0, "{r}");
    assert_eq!(u(&r["resent"]), 3, "every request after a connection's first was re-sent: {r}");
    let out = run(BIN, ["load", &url, "-n", "4", "-c", "1"], LIMIT);
    let errors =
        out.stdout.lines().find(|l| l.starts_with("Errors:")).unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(errors.contains("3 re-sent after the server closed a keep-alive connection"), "{}", out.stdout);
}

/// `latency_2xx_us` leaves the other answers out: here a slow 200 and a
/// fast 503 alternate, and no 2xx percentile is below the 200's delay.
#[test]
fn latency_of_the_2xx_answers_is_reported_apart() {
    let slow_ok = tiny_server(|mut s, _| {
        let mut n = 0;
        while read_head(&mut s) {
            let answer: &[u8] = if n % 2 == 0 {
                std::thread::sleep(Duration::from_millis(40));
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            } else {
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"
            };
            n += 1;
            if s.write_all(answer).is_err() {
                return;
            }
        }
    });
    let r = load_json(&[&format!("http://{slow_ok}/"), "-n", "10", "-c", "1"]);
    assert_eq!((u(&r["status"]["200"]), u(&r["status"]["503"])), (5, 5), "{r}");
    let ok = &r["latency_2xx_us"];
    assert!(u(&ok["min"]) >= 40_000 && u(&ok["p50"]) >= 40_000, "503s left out: {ok}");
    assert!(u(&r["latency_us"]["min"]) <= u(&ok["min"]), "every answer: {r}");
}

/// What a newcomer sees when the server is not running: the reason in
/// words, no table of 0 µs latencies, and a failing exit status.
#[test]
fn nothing_listening_is_said_plainly_and_fails() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = run(BIN, ["load", &format!("http://{closed}/"), "-d", "300ms", "-c", "2"], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("could not connect [connection refused"), "{}", out.stdout);
    assert!(out.stdout.contains("No responses"), "{}", out.stdout);
    assert!(!out.stdout.contains("Latency Distribution"), "{}", out.stdout);
    assert!(out.stderr.contains("no request got a response (exit status 1)"), "{}", out.stderr);
    // Its reconnect back-offs are no arrivals: however late one fires on a
    // busy machine, the generator did not fall behind a load it never sent.
    assert!(!out.stdout.contains("fell behind"), "{}", out.stdout);
}

/// Every response a 404 — a mistyped URL — is warned about in words.
#[test]
fn a_run_of_404s_is_warned_about() {
    let addr = tiny_server(|mut s, _| {
        while read_head(&mut s) {
            if s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno").is_err() {
                return;
            }
        }
    });
    let out = run(BIN, ["load", &format!("http://{addr}/typo"), "-n", "20", "-c", "2"], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("WARNING: no response was a success: all 20 were 404 Not Found — is the URL right?"),
        "{}",
        out.stdout
    );
}

/// Ctrl-C ends the run and still reports what ran, as wrk does; the exit
/// status says it was interrupted.
#[test]
fn ctrl_c_reports_what_ran() {
    for (json, signal, code) in
        [(false, rustix::process::Signal::INT, 130), (true, rustix::process::Signal::TERM, 143)]
    {
        let (answered, first_answers) = std::sync::mpsc::channel();
        let answered = Mutex::new(answered);
        // Counted as requests arrive: a connection's next request proves
        // the generator read the answer before it (an answer written is not
        // yet an answer read when the signal lands).
        let addr = tiny_server(move |mut s, _| {
            while read_head(&mut s) {
                let _ = answered.lock().unwrap().send(());
                if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                    return;
                }
            }
        });
        let mut command = std::process::Command::new(BIN);
        command.args(["load", &format!("http://{addr}/"), "-c", "2", "-d", "120s"]);
        if json {
            command.arg("--json");
        }
        let child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // 7 requests on 2 connections: at least 5 answers were read.
        for _ in 0..7 {
            first_answers.recv_timeout(LIMIT).expect("the generator sends");
        }
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(code), "{stdout}");
        if json {
            let r: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(r["interrupted_by"], "SIGTERM", "{r}");
            assert!(u(&r["requests"]) >= 5, "{r}");
            assert_eq!(r["exit_status"], 143, "{r}");
        } else {
            assert!(stdout.contains("Interrupted by SIGINT after"), "{stdout}");
            assert!(stdout.contains(" requests in "), "{stdout}");
            assert!(stdout.contains("Latency Distribution"), "{stdout}");
        }
    }
}

/// A server that answers at once, except that the request arriving first
/// after 500 ms of its life stalls for one second. One connection, open
/// loop at 50/s: the 50 requests scheduled during the stall wait behind it.
/// Their latency from the *intended* send time shows the stall; their
/// service time (from the actual send, what wrk reports) does not.
#[test]
fn coordinated_omission_is_corrected() {
    let born = Instant::now();
    let stalled = Arc::new(Mutex::new(false));
    let s2 = Arc::clone(&stalled);
    let addr = tiny_server(move |mut s, _| {
        while read_head(&mut s) {
            let stall = {
                let mut st = s2.lock().unwrap();
                let now = born.elapsed() > Duration::from_millis(500) && !*st;
                *st |= now;
                now
            };
            if stall {
                std::thread::sleep(Duration::from_secs(1));
            }
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                return;
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("t.csv");
    let r = load_json(&[
        &format!("http://{addr}/"),
        "-R",
        "50",
        "--arrivals",
        "constant",
        "-d",
        "3s",
        "-c",
        "1",
        "--timeline",
        csv.to_str().unwrap(),
    ]);
    assert!(*stalled.lock().unwrap());
    assert_eq!(u(&r["errors"]), 0, "{r}");
    let lat = &r["latency_us"];
    let svc = &r["service_us"];
    assert!(u(&lat["max"]) >= 900_000, "the stall is in the max: {lat}");
    // ~50 of ~150 requests were scheduled during the stall.
    assert!(u(&lat["p90"]) >= 300_000, "the stall is in the upper percentiles: {lat}");
    assert!(u(&svc["p90"]) < 100_000, "uncorrected service times hide it: {svc}");
    assert!(u(&r["open_loop"]["queued"]) >= 20, "{}", r["open_loop"]);

    // The timeline: requests scheduled during the stall finish only after it.
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<[u64; 4]> = text
        .lines()
        .skip(1)
        .map(|l| {
            let v: Vec<u64> = l.split(',').take(4).map(|x| x.parse().unwrap()).collect();
            [v[0], v[1], v[2], v[3]]
        })
        .collect();
    let stall = rows.iter().max_by_key(|r| r[3] - r[1]).unwrap();
    let (start, end) = (stall[1], stall[3]);
    assert!(end - start >= 900_000, "{stall:?}");
    let during: Vec<&[u64; 4]> = rows.iter().filter(|r| r[0] > start && r[0] + 200_000 < end).collect();
    assert!(during.len() >= 20, "{} requests scheduled during the stall", during.len());
    for r in during {
        assert!(r[3] >= end, "{r:?} finished before the stall ended at {end}");
        assert!(r[3] - r[0] >= 150_000, "{r:?}: corrected latency must include the wait");
    }
}

#[test]
fn close_mode_can_spread_source_addresses() {
    let peers = Arc::new(Mutex::new(Vec::<IpAddr>::new()));
    let p2 = Arc::clone(&peers);
    let addr = tiny_server(move |mut s, _| {
        p2.lock().unwrap().push(s.peer_addr().unwrap().ip());
        if read_head(&mut s) {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let r = load_json(&[&format!("http://{addr}/"), "-n", "20", "-c", "2", "--close", "--spread-source"]);
    assert_eq!(u(&r["requests"]), 20, "{r}");
    assert_eq!(u(&r["connections_opened"]), 20);
    let peers = peers.lock().unwrap();
    let distinct: std::collections::HashSet<_> = peers.iter().collect();
    assert!(distinct.len() >= 10, "{peers:?}");
    assert!(peers.iter().all(|ip| ip.is_loopback() && *ip != IpAddr::from([127, 0, 0, 1])), "{peers:?}");
}

/// Reads one request head; its path, or None at EOF.
fn read_path(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => buf.push(b[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    head.split(' ').nth(1).map(str::to_string)
}

/// `modus load ARGS`, stopped (SIGSTOP) for 300 ms once the server has
/// answered a few of its requests: arrivals fall due while it cannot run,
/// and it notices them late when it goes on — the generator falling
/// behind, made certain rather than left to how busy the machine is.
fn stalled_load(extra: &[&str]) -> std::process::Output {
    let (answered, first_answers) = std::sync::mpsc::channel();
    let answered = Mutex::new(answered);
    let addr = tiny_server(move |mut s, _| {
        while read_head(&mut s) {
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                return;
            }
            let _ = answered.lock().unwrap().send(());
        }
    });
    let url = format!("http://{addr}/");
    let child = std::process::Command::new(BIN)
        .args(["load", url.as_str(), "-R", "500", "-c", "1", "-d", "2s", "--lag-threshold", "5ms"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..5 {
        first_answers.recv_timeout(LIMIT).expect("the generator sends");
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn generator_falling_behind_is_reported() {
    let out = stalled_load(&["--json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(u(&r["requests"]) >= 5, "{r}");
    assert!(u(&r["open_loop"]["generator_late"]) > 0, "{}", r["open_loop"]);
    assert!(u(&r["open_loop"]["generator_max_lag_us"]) > 5_000, "{}", r["open_loop"]);
    assert!(u(&r["open_loop"]["late_sends"]) > 0, "{}", r["open_loop"]);
    assert_eq!(r["generator_fell_behind"], true, "{r}");
    assert_eq!(r["generator_busy"].as_array().map(Vec::len), Some(1), "one loop: {}", r["generator_busy"]);
    let text = String::from_utf8(stalled_load(&[]).stdout).unwrap();
    assert!(text.contains("WARNING: the generator fell behind"), "{text}");
    assert!(text.contains("Generator:    loops busy"), "{text}");
}

/// Open-loop arrivals that find the send queue full are errors, in the
/// JSON and prominently in the text.
#[test]
fn dropped_arrivals_are_errors() {
    let addr = tiny_server(|mut s, _| {
        while read_head(&mut s) {
            std::thread::sleep(Duration::from_millis(100));
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                return;
            }
        }
    });
    let url = format!("http://{addr}/");
    let args =
        [url.as_str(), "-R", "200", "-c", "1", "-d", "1s", "--max-queue", "2", "--arrivals", "constant"];
    let r = load_json(&args);
    let dropped = u(&r["open_loop"]["dropped"]);
    // 200 arrivals, ~10 answered, at most 2 waiting: most are dropped.
    assert!(dropped >= 100, "{r}");
    assert_eq!(err(&r, "dropped"), dropped, "{r}");
    assert_eq!(u(&r["dropped"]), dropped);
    assert!(u(&r["errors"]) >= dropped, "{r}");
    let mut all = vec!["load"];
    all.extend_from_slice(&args);
    let out = run(BIN, &all, LIMIT);
    assert!(out.stdout.contains("arrivals were DROPPED"), "{}", out.stdout);
}

/// `--checksum` without a workload: bodies of one URL must all be alike.
#[test]
fn checksum_mismatch_is_detected() {
    let addr = tiny_server(|mut s, _| {
        let mut n = 0;
        while read_head(&mut s) {
            let body = if n % 2 == 0 { "aaaa" } else { "abab" };
            n += 1;
            let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{body}");
            if s.write_all(resp.as_bytes()).is_err() {
                return;
            }
        }
    });
    let url = format!("http://{addr}/x");
    let r = load_json(&[&url, "-n", "10", "-c", "1", "--checksum"]);
    assert_eq!(u(&r["requests"]), 10, "{r}");
    assert_eq!(err(&r, "checksum_mismatch"), 5, "every second body differs from the first: {r}");
    let r = load_json(&[&url, "-n", "10", "-c", "1"]);
    assert_eq!(u(&r["errors"]), 0, "no --checksum, no check: {r}");
}

fn surge(dir: &std::path::Path, files: &str, requests: &str, users: &str) {
    let out = run(
        BIN,
        [
            "workload",
            "surge",
            "--out",
            dir.to_str().unwrap(),
            "--files",
            files,
            "--requests",
            requests,
            "--users",
            users,
            "--seed",
            "11",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", out.stderr);
}

/// (user, path) of every stream line, in stream order.
fn stream_of(dir: &std::path::Path) -> Vec<(u32, String, u64)> {
    std::fs::read_to_string(dir.join("stream.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[1].parse().unwrap(), f[4].to_string(), f[3].parse().unwrap())
        })
        .collect()
}

/// With `--workload`, sizes are checked against the stream and (with
/// `--checksum`) bodies against the files on disk: a server serving a
/// tampered copy is caught even though it is consistent with itself.
/// Without -n or -d the run is the stream, once.
#[test]
fn workload_bodies_are_checked_against_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let (good, served) = (dir.path().join("good"), dir.path().join("served"));
    surge(&good, "30", "400", "8");
    surge(&served, "30", "400", "8");
    let stream = stream_of(&good);
    let mut counts = std::collections::HashMap::<&str, u64>::new();
    for (_, p, _) in &stream {
        *counts.entry(p.as_str()).or_default() += 1;
    }
    let mut by_count: Vec<(&str, u64)> = counts.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let (longer, flipped) = (by_count[0], by_count[1]);
    let file = |p: &str| served.join("docs").join(p.trim_start_matches('/'));
    let mut bytes = std::fs::read(file(longer.0)).unwrap();
    bytes.push(b'!');
    std::fs::write(file(longer.0), bytes).unwrap();
    let mut bytes = std::fs::read(file(flipped.0)).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(file(flipped.0), bytes).unwrap();

    let srv = Server::start(BIN, "event", &served.join("docs"), &[]);
    let url = format!("http://{}/", srv.addr());
    let r = load_json(&[&url, "--workload", good.to_str().unwrap(), "-c", "8", "--checksum"]);
    assert_eq!(u(&r["requests"]), 400, "the stream, once: {r}");
    assert_eq!(err(&r, "size_mismatch"), longer.1, "{r}");
    assert_eq!(err(&r, "checksum_mismatch"), flipped.1, "{r}");
    assert_eq!(u(&r["errors"]), longer.1 + flipped.1, "{r}");
}

/// Closed-loop replay keeps each SURGE user on one connection, in the
/// user's order; the open loop replays the stream once and stops.
#[test]
fn workload_users_keep_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w");
    surge(&w, "20", "300", "5");
    let stream = stream_of(&w);
    let sizes: std::collections::HashMap<String, u64> =
        stream.iter().map(|(_, p, s)| (p.clone(), *s)).collect();
    let seen = Arc::new(Mutex::new(std::collections::BTreeMap::<usize, Vec<String>>::new()));
    let s2 = Arc::clone(&seen);
    let addr = tiny_server(move |mut s, conn| {
        while let Some(path) = read_path(&mut s) {
            s2.lock().unwrap().entry(conn).or_default().push(path.clone());
            let n = sizes.get(&path).copied().unwrap_or(0);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
            if s.write_all(head.as_bytes()).is_err() || s.write_all(&vec![0u8; n as usize]).is_err() {
                return;
            }
        }
    });
    let url = format!("http://{addr}/");
    let r = load_json(&[&url, "--workload", w.to_str().unwrap(), "-c", "5", "-t", "2"]);
    assert_eq!(u(&r["requests"]), 300, "{r}");
    assert_eq!(u(&r["errors"]), 0, "{r}");
    assert_eq!(u(&r["connections_opened"]), 5, "{r}");
    // Who sent, and what they held: every user, no think time.
    assert_eq!(u(&r["users_active"]), 5, "{r}");
    assert_eq!(r["think_mean_us"].as_f64(), Some(0.0), "{r}");
    let (in_flight, held) = (r["in_flight_mean"].as_f64().unwrap(), r["held_users"].as_f64().unwrap());
    assert!(in_flight > 0.0 && (held - in_flight).abs() < 1e-9, "without think, held = in flight: {r}");
    let mut want: Vec<Vec<String>> =
        (0..5).map(|user| stream.iter().filter(|e| e.0 == user).map(|e| e.1.clone()).collect()).collect();
    let mut got: Vec<Vec<String>> = seen.lock().unwrap().values().cloned().collect();
    want.sort();
    got.sort();
    assert!(got == want, "each connection must carry exactly one user's requests, in order");

    let r = load_json(&[&url, "--workload", w.to_str().unwrap(), "-c", "4", "-R", "2000"]);
    assert_eq!(u(&r["requests"]), 300, "open loop: the stream once: {r}");
    let r = load_json(&[&url, "--workload", w.to_str().unwrap(), "-c", "4", "-n", "700", "--repeat-stream"]);
    assert_eq!(u(&r["requests"]), 700, "--repeat-stream starts over: {r}");

    // At the stream's own times, sped up to last about half a second.
    let text = std::fs::read_to_string(w.join("stream.txt")).unwrap();
    let times: Vec<u64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let span_s = (times[times.len() - 1] - times[0]) as f64 / 1e6;
    let speedup = format!("{}", (span_s / 0.5).max(1.0));
    let csv = dir.path().join("t.csv");
    let r = load_json(&[
        &url,
        "--workload",
        w.to_str().unwrap(),
        "-c",
        "8",
        "--stream-times",
        &speedup,
        "--timeline",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(u(&r["requests"]), 300, "{r}");
    assert_eq!((r["params"]["mode"].as_str(), u(&r["errors"])), (Some("open"), 0), "{r}");
    // Each request was scheduled at its stream time (relative to the first).
    let mut intended: Vec<u64> = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    intended.sort_unstable();
    let speedup: f64 = speedup.parse().unwrap();
    let base = intended[0] as f64;
    let mut want: Vec<f64> = times.iter().map(|t| (t - times[0]) as f64 / speedup).collect();
    want.sort_by(f64::total_cmp);
    for (got, want) in intended.iter().zip(&want) {
        // One thread: one schedule, exact to the µs rounding.
        assert!((*got as f64 - base - want).abs() < 10.0, "intended {got} vs stream {want}");
    }
}

/// `--stream-think` with `--pipeline`: a user waiting for its previous
/// answer before thinking must not skip the entry it was about to send;
/// and users sharing a connection cannot keep their own OFF times, so that
/// is refused rather than replayed at a fraction of the stream's load.
#[test]
fn stream_think_replays_every_entry_and_needs_a_connection_per_user() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w");
    surge(&w, "20", "240", "4");
    // SURGE's OFF times run to seconds: shorten them so the run is brief.
    let stream = w.join("stream.txt");
    let text: String = std::fs::read_to_string(&stream)
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                return format!("{l}\n");
            }
            let mut f: Vec<&str> = l.split(' ').collect();
            f[2] = "200";
            format!("{}\n", f.join(" "))
        })
        .collect();
    std::fs::write(&stream, text).unwrap();
    let srv = Server::start(BIN, "event", &w.join("docs"), &[]);
    let url = format!("http://{}/", srv.addr());
    let ws = w.to_str().unwrap();
    for depth in ["1", "2", "4"] {
        let r = load_json(&[&url, "--workload", ws, "-c", "4", "--pipeline", depth, "--stream-think"]);
        assert_eq!(u(&r["requests"]), 240, "--pipeline {depth}: the whole stream: {r}");
        assert_eq!(u(&r["errors"]), 0, "{r}");
        // Every entry's OFF time (200 µs each, above) was applied before it.
        assert_eq!(r["think_mean_us"].as_f64(), Some(200.0), "{r}");
        assert_eq!(u(&r["users_active"]), 4, "{r}");
    }
    let out = run(BIN, ["load", &url, "--workload", ws, "-c", "2", "--stream-think"], LIMIT);
    assert!(!out.status.success());
    assert!(out.stderr.contains("the stream has 4 users, -c is 2"), "{}", out.stderr);
}

/// In the closed loop every connection is one of a replayed stream's
/// users: more connections than users would claim a load nobody sends
/// (the connections beyond the users would idle), so it is refused; the
/// open loop, which has no users, may use any number.
#[test]
fn more_connections_than_the_streams_users_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w");
    surge(&w, "20", "200", "4");
    let srv = Server::start(BIN, "event", &w.join("docs"), &[]);
    let url = format!("http://{}/", srv.addr());
    let ws = w.to_str().unwrap();
    for extra in [&[][..], &["--stream-think"][..], &["--repeat-stream", "-d", "200ms"][..]] {
        let mut args = vec!["load", &url, "--workload", ws, "-c", "5"];
        args.extend_from_slice(extra);
        let out = run(BIN, &args, LIMIT);
        assert_eq!(out.status.code(), Some(2), "a usage error: {extra:?} {}", out.stderr);
        assert!(out.stderr.contains("the stream has 4 users, -c is 5"), "{}", out.stderr);
        assert!(out.stderr.contains("--users 5"), "how to make one: {}", out.stderr);
    }
    let r = load_json(&[&url, "--workload", ws, "-c", "4"]);
    assert_eq!((u(&r["requests"]), u(&r["users_active"])), (200, 4), "as many as its users: {r}");
    let r = load_json(&[&url, "--workload", ws, "-c", "5", "-R", "2000"]);
    assert_eq!(u(&r["requests"]), 200, "the open loop has no users: {r}");
}

/// Users whose next request is due past the end (their OFF time outlasts
/// the run) are done early, but the measured window is still the whole
/// duration: four requests in half a second are 8 req/s, not the
/// thousands a window cut at the last answer would make of them.
#[test]
fn thinking_past_the_end_keeps_the_runs_duration() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w");
    surge(&w, "20", "200", "4");
    // Every OFF time after a user's first request: 30 s.
    let stream = w.join("stream.txt");
    let mut seen = std::collections::HashSet::new();
    let text: String = std::fs::read_to_string(&stream)
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                return format!("{l}\n");
            }
            let mut f: Vec<&str> = l.split(' ').collect();
            f[2] = if seen.insert(f[1].to_string()) { "0" } else { "30000000" };
            format!("{}\n", f.join(" "))
        })
        .collect();
    std::fs::write(&stream, text).unwrap();
    let srv = Server::start(BIN, "event", &w.join("docs"), &[]);
    let url = format!("http://{}/", srv.addr());
    let ws = w.to_str().unwrap();
    let r =
        load_json(&[&url, "--workload", ws, "-c", "4", "--stream-think", "--repeat-stream", "-d", "500ms"]);
    assert_eq!((u(&r["requests"]), u(&r["users_active"])), (4, 4), "{r}");
    assert_eq!(r["duration_s"].as_f64(), Some(0.5), "{r}");
    assert_eq!(r["throughput_rps"].as_f64(), Some(8.0), "{r}");
}
