//! The admin listener: `/status.json` and `/metrics` against known traffic
//! and refusals.

use super::*;

#[test]
fn admin_status_json_and_metrics_count_a_known_sequence() {
    let backend = TestBackend::start(|head, _| {
        if head.contains("/boom") {
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 4\r\n\r\nboom".to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
        }
    });
    let d = director(&[backend.addr], &["--admin", "127.0.0.1:0", "--max-fails", "0"]);
    let admin = d.announced("admin");
    let mut c = d.client();
    for _ in 0..3 {
        c.request("GET", "/", &[]).assert_status(200);
    }
    c.request("GET", "/boom", &[]).assert_status(502);
    let mut bad = d.client();
    bad.send("GET / HTTP/1.1\r\n\r\n");
    bad.read_response("GET").assert_status(400);
    let mut v = admin_json(admin);
    for _ in 0..200 {
        if v["requests_total"] == 5 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        v = admin_json(admin);
    }
    assert_eq!(v["model"], "direct");
    assert_eq!(v["requests_total"], 5, "{v:#}");
    assert_eq!(v["responses"]["200"], 3, "{v:#}");
    assert_eq!(v["responses"]["502"], 1, "{v:#}");
    assert_eq!(v["responses"]["400"], 1, "{v:#}");
    assert_eq!(v["admission"]["refused"]["bad_request"], 1, "{v:#}");
    assert_eq!(v["admission"]["in_flight"], 0, "{v:#}");
    assert_eq!(v["admission"]["queued"], 0, "{v:#}");
    assert!(v["uptime_s"].is_u64() && v["connections_open"].as_u64().unwrap() >= 1, "{v:#}");
    for state in ["REQUEST", "PEEK", "RECEIVE", "RESPONSE"] {
        assert!(v["connections"][state].is_u64(), "{state}: {v:#}");
    }
    assert_eq!(v["latency_us"]["count"], 5, "{v:#}");
    assert!(v["latency_us"]["p50"].as_u64().unwrap() <= v["latency_us"]["p99"].as_u64().unwrap());
    assert_eq!(v["phases_us"]["backend"]["count"], 4, "{v:#}");
    let b = &v["backends"][0];
    assert_eq!(b["health"], "up");
    assert_eq!(b["monitor"], "off");
    assert_eq!(b["served"], 4);
    assert_eq!(b["server_errors"], 1);
    assert_eq!(b["limit"], 64);
    assert_eq!(b["adaptive_limit"], 64);

    let (status, ctype, body) = get_once(admin, "/metrics");
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .unwrap_or_else(|| panic!("{name} {label:?} in\n{body}"));
        match &sample.value {
            prometheus_parse::Value::Counter(x)
            | prometheus_parse::Value::Gauge(x)
            | prometheus_parse::Value::Untyped(x) => *x,
            prometheus_parse::Value::Histogram(buckets) => {
                buckets.iter().find(|b| b.less_than.is_infinite()).expect("+Inf bucket").count
            }
            other => panic!("{name}: {other:?}"),
        }
    };
    assert_eq!(value("modus_director_requests_total", Some(("status", "200"))), 3.0);
    assert_eq!(value("modus_director_requests_total", Some(("status", "502"))), 1.0);
    assert_eq!(value("modus_director_requests_total", Some(("status", "400"))), 1.0);
    assert_eq!(value("modus_director_request_duration_seconds", None), 5.0);
    assert_eq!(value("modus_director_backend_response_seconds", None), 4.0);
    assert_eq!(value("modus_director_backend_failures_total", Some(("kind", "gateway_error"))), 1.0);
    assert_eq!(value("modus_director_backend_up", None), 1.0);
    assert_eq!(value("modus_director_backend_limit", Some(("kind", "effective"))), 64.0);
    assert_eq!(value("modus_director_queue_length", None), 0.0);
    assert!(value("modus_director_connections", Some(("state", "REQUEST"))) >= 1.0);

    let (status, ctype, page) = get_once(admin, "/status");
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(page.contains("http-equiv=\"refresh\"") && page.contains("name=\"viewport\""));
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"), "no external assets");
    for needle in ["director", "REQUEST", "PEEK", "RECEIVE", "RESPONSE", &backend.addr.to_string()] {
        assert!(page.contains(needle), "{needle} missing from the page");
    }
    assert_eq!(get_once(admin, "/nope").0, 404);
}

#[test]
fn refusals_are_counted_alike_in_status_json_and_metrics() {
    let backend = TestBackend::ok();
    backend.close_gate();
    let d = director(
        &[backend.addr],
        &["--admin", "127.0.0.1:0", "--max-conns-per-ip", "2", "--max-backend-conns", "1", "--queue", "0"],
    );
    let admin = d.announced("admin");
    // The only slot is held; the next request gets the busy page.
    let mut slow = d.client();
    slow.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    backend.wait_requests(1);
    let mut busy = d.client();
    busy.request("GET", "/", &[]).assert_status(503);
    // A third connection from 127.0.0.1: refused at accept.
    let mut over = d.client();
    over.read_response("GET").assert_status(429);
    let v = admin_json(admin);
    assert_eq!(v["responses"]["429"], 1, "{v:#}");
    assert_eq!(v["responses"]["503"], 1, "{v:#}");
    assert_eq!(v["admission"]["refused"]["per_ip"], 1, "{v:#}");
    assert_eq!(v["admission"]["refused"]["queue_full"], 1, "{v:#}");
    let (_, _, body) = get_once(admin, "/metrics");
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let value = |name: &str, (k, v): (&str, &str)| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get(k) == Some(v))
            .unwrap_or_else(|| panic!("{name} {k}={v} in\n{body}"));
        match &sample.value {
            prometheus_parse::Value::Counter(x) | prometheus_parse::Value::Untyped(x) => *x,
            other => panic!("{name}: {other:?}"),
        }
    };
    assert_eq!(value("modus_director_refused_total", ("reason", "per_ip")), 1.0);
    assert_eq!(value("modus_director_refused_total", ("reason", "queue_full")), 1.0);
    assert_eq!(value("modus_director_requests_total", ("status", "429")), 1.0);
    assert_eq!(value("modus_director_requests_total", ("status", "503")), 1.0);
    backend.open_gate();
    slow.read_response("GET").assert_status(200);
}
