//! Issue 7: per-phase statistics, the admin listener (`/status`,
//! `/status.json`, `/metrics`) and the request trace, checked against the
//! real binary after a known sequence of requests.
//!
//! The admin listener runs in the server process, so it covers the thread
//! and event models (instantiated below for each); process models refuse
//! `--admin` (their children's statistics do not reach the master yet), and
//! their trace is tested on `prefork`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{Client, Docroot, Server, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// The admin address from `listening on ... admin=ADDR`.
fn admin_addr(srv: &Server) -> SocketAddr {
    let line = srv.first_line();
    let addr =
        line.split_whitespace().find_map(|w| w.strip_prefix("admin=")).expect("admin= in the first line");
    addr.parse().expect("admin address")
}

/// One GET on a fresh connection: (status, content-type, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head[9..12].parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: ").or_else(|| l.strip_prefix("content-type: ")))
        .unwrap_or_default()
        .to_string();
    (status, ctype, body.to_string())
}

/// `/status.json` once `requests_total` reached `n` (a response reaches
/// the client a moment before the server counts it).
fn status_after(addr: SocketAddr, n: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, ctype, body) = get(addr, "/status.json");
        assert_eq!(status, 200);
        assert_eq!(ctype, "application/json");
        let v: Value = serde_json::from_str(&body).expect("valid JSON");
        if v["requests_total"].as_u64() == Some(n) || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The known sequence: 3 × 200 (a cache miss, then hits), 2 × 404, 1 × 405 (a hit),
/// all on one keep-alive connection, returned still open.
fn known_requests(srv: &Server) -> Client {
    let mut c: Client = srv.client();
    for _ in 0..3 {
        c.request("GET", "/hello.txt", &[]).assert_status(200);
    }
    for _ in 0..2 {
        c.request("GET", "/missing.txt", &[]).assert_status(404);
    }
    c.request("DELETE", "/hello.txt", &[]).assert_status(405);
    c
}

fn start(model: &str, root: &Docroot, extra: &[&str]) -> Server {
    let mut args = vec!["--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    Server::start(BIN, model, root.path(), &args)
}

fn json_counts_after_known_requests(model: &str) {
    let root = Docroot::standard();
    let srv = start(model, &root, &[]);
    let admin = admin_addr(&srv);
    let _client = known_requests(&srv);
    let v = status_after(admin, 6);
    assert_eq!(v["model"], model);
    assert_eq!(v["requests_total"], 6, "{v:#}");
    assert_eq!(v["requests_by_status"]["200"], 3);
    assert_eq!(v["requests_by_status"]["404"], 2);
    assert_eq!(v["requests_by_status"]["405"], 1);
    assert!(v["bytes_total"].as_u64().unwrap() > 3 * 14, "{v:#}");
    assert!(v["uptime_s"].as_f64().unwrap() > 0.0);
    // Every request went through these phases once.
    for phase in ["wait", "read", "parse", "write", "total"] {
        assert_eq!(v["phases_us"][phase]["count"], 6, "phase {phase}: {v:#}");
        for q in ["p50", "p99", "mean"] {
            assert!(v["phases_us"][phase][q].is_number(), "{phase}.{q}");
        }
    }
    let hits = v["phases_us"]["data_hit"]["count"].as_u64().unwrap();
    let misses = v["phases_us"]["data_miss"]["count"].as_u64().unwrap();
    assert_eq!(hits + misses, 6, "{v:#}");
    // hello.txt: a miss, then two hits; DELETE finds it in the cache too (405).
    assert_eq!(hits, 3, "{v:#}");
    assert_eq!(v["phases_us"]["cgi_run"]["count"], 0);
    assert_eq!(v["latency_us"]["count"], 6);
    let (p50, p99) = (v["latency_us"]["p50"].as_f64().unwrap(), v["latency_us"]["p99"].as_f64().unwrap());
    assert!(p50 > 0.0 && p99 >= p50, "{v:#}");
    assert_eq!(v["cache"]["hits"], 3);
    assert!(v["cache"]["misses"].as_u64().unwrap() >= 1);
    assert!(v["cache"]["bytes"].as_u64().unwrap() >= 14);
    // The client's connection is still open, idle between requests.
    assert_eq!(v["connections_open"], 1, "{v:#}");
    assert_eq!(v["connections"]["keepalive"], 1, "{v:#}");
    assert!(v["queues"].is_object());
    let (busy, idle) = (v["workers"]["busy"].as_u64().unwrap(), v["workers"]["idle"].as_u64().unwrap());
    assert!(busy + idle >= 1, "{v:#}");
    assert!(v["workers"]["scoreboard"].as_array().unwrap().len() as u64 == busy + idle);
}

fn metrics_parse(model: &str) {
    let root = Docroot::standard();
    let srv = start(model, &root, &[]);
    let admin = admin_addr(&srv);
    let _client = known_requests(&srv);
    status_after(admin, 6);
    let (status, ctype, body) = get(admin, "/metrics");
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text parses");
    let value = |name: &str, label: Option<(&str, &str)>| -> Option<prometheus_parse::Value> {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| s.value.clone())
    };
    let counter = |name, label| match value(name, label) {
        Some(prometheus_parse::Value::Counter(c)) => c,
        Some(prometheus_parse::Value::Untyped(c)) | Some(prometheus_parse::Value::Gauge(c)) => c,
        other => panic!("{name} {label:?}: {other:?}"),
    };
    assert_eq!(counter("modus_requests_total", Some(("status", "200"))), 3.0);
    assert_eq!(counter("modus_requests_total", Some(("status", "404"))), 2.0);
    assert_eq!(counter("modus_cache_hits_total", None), 3.0);
    assert_eq!(counter("modus_connections", Some(("state", "keepalive"))), 1.0);
    match value("modus_request_duration_seconds", None) {
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            let inf = buckets.iter().find(|b| b.less_than.is_infinite()).expect("+Inf bucket");
            assert_eq!(inf.count, 6.0);
            // Cumulative.
            assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count));
        }
        other => panic!("request duration histogram: {other:?}"),
    }
    match value("modus_phase_duration_seconds", Some(("phase", "parse"))) {
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            assert_eq!(buckets.iter().find(|b| b.less_than.is_infinite()).unwrap().count, 6.0);
        }
        other => panic!("parse phase histogram: {other:?}"),
    }
    assert!(body.contains("modus_phase_duration_seconds_count{phase=\"write\"} 6"), "{body}");
}

fn status_page(model: &str) {
    let root = Docroot::standard();
    let srv = start(model, &root, &[]);
    let admin = admin_addr(&srv);
    let _client = known_requests(&srv);
    status_after(admin, 6);
    let (status, ctype, body) = get(admin, "/status");
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/html"));
    assert!(body.contains(&format!("<span id=\"model\">{model}</span>")), "{body}");
    assert!(body.contains("<b id=\"requests\">6</b>"), "{body}");
    assert!(body.contains("http-equiv=\"refresh\""));
    assert!(!body.contains("src=\"http") && !body.contains("href=\"http"), "no external assets");
    assert_eq!(get(admin, "/nothing").0, 404);
}

fn trace_rows(model: &str) {
    let root = Docroot::standard();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    let mut srv =
        Server::start(BIN, model, root.path(), &["--trace", trace.to_str().unwrap(), "--trace-sample", "1"]);
    drop(known_requests(&srv));
    srv.signal(Signal::Term);
    assert!(srv.wait_exit(Duration::from_secs(20)).success());
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header.len(), 17, "{header:?}");
    assert_eq!(header[0], "conn");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6, "one row per request:\n{text}");
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut statuses: Vec<&str> = rows.iter().map(|r| r[col("status")]).collect();
    statuses.sort();
    assert_eq!(statuses, ["200", "200", "200", "404", "404", "405"]);
    for r in &rows {
        assert_eq!(r.len(), 17, "{r:?}");
        let t = |name: &str| r[col(name)].parse::<u64>().unwrap();
        assert!(
            t("arrival_us") <= t("service_start_us") && t("service_start_us") <= t("service_end_us"),
            "{r:?}"
        );
        assert!(r[col("path")].starts_with("\"/"), "{r:?}");
        assert!(["hit", "miss"].contains(&r[col("data")]), "{r:?}");
        for phase in ["read_us", "parse_us", "write_us"] {
            assert!(r[col(phase)].parse::<f64>().is_ok(), "{phase} in {r:?}");
        }
        assert!(r[col("bytes")].parse::<u64>().unwrap() > 0);
        assert!(r[col("worker")].contains('/'), "pid/thread: {r:?}");
    }
    // All on one connection.
    assert!(rows.iter().all(|r| r[0] == rows[0][0]));
}

macro_rules! thread_models {
    ($($module:ident => $name:literal),* $(,)?) => {$(
        mod $module {
            #[test]
            fn json_counts_after_known_requests() { super::json_counts_after_known_requests($name) }
            #[test]
            fn metrics_parse() { super::metrics_parse($name) }
            #[test]
            fn status_page() { super::status_page($name) }
            #[test]
            fn trace_rows() { super::trace_rows($name) }
        }
    )*};
}

thread_models! {
    per_request => "per-request",
    pool => "pool",
    staged => "staged",
    event => "event",
    amped => "amped",
}

#[test]
fn prefork_trace_rows() {
    trace_rows("prefork");
}

#[test]
fn no_timing_keeps_counters() {
    let root = Docroot::standard();
    let srv = start("pool", &root, &["--no-timing"]);
    let admin = admin_addr(&srv);
    let _client = known_requests(&srv);
    let v = status_after(admin, 6);
    assert_eq!(v["timing"], false);
    assert_eq!(v["requests_by_status"]["200"], 3);
    assert_eq!(v["phases_us"]["total"]["count"], 0);
}

#[test]
fn pool_accept_queue_is_measured() {
    let root = Docroot::standard();
    let srv = start("pool", &root, &[]);
    let admin = admin_addr(&srv);
    let _client = known_requests(&srv);
    let v = status_after(admin, 6);
    assert_eq!(v["queues"]["accept"]["items"], 1, "{v:#}");
    assert_eq!(v["phases_us"]["queue"]["count"], 1, "{v:#}");
}

#[test]
fn process_models_refuse_admin() {
    let out = std::process::Command::new(BIN)
        .args(["serve", "--model", "prefork", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--admin"));
}
