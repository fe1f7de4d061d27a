//! `modus direct --admin ADDR`: the director's `/status` (a self-refreshing
//! HTML page), `/status.json` and `/metrics` (Prometheus text, written by
//! `prometheus-client`).
//!
//! The event loop serves admin connections itself, like client ones
//! (non-blocking, a bounded request, one response, close), so nothing here
//! may block. Everything shown comes from one JSON value built by the loop
//! ([`crate::proxy::Director`]'s `status_json`); the page and the gauges
//! are rendered from it, so the three views cannot disagree. Counters and
//! histograms that must not lose events between scrapes ([`Metrics`]) are
//! updated as exchanges complete.

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use serde_json::Value;
use statuspage::{esc, fmt_us, Resource};

/// Label pairs.
pub type Labels = Vec<(String, String)>;

type Hist = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs … ~3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// The metrics the loop updates as it goes, and the gauges filled in at
/// each scrape.
pub struct Metrics {
    registry: Registry,
    /// Responses to clients, by status (relayed and local).
    pub responses: Family<Labels, Counter>,
    /// Requests or connections refused, by reason.
    pub refused: Family<Labels, Counter>,
    /// Request parsed → response handed to the client's socket.
    pub request_duration: Histogram,
    /// Time in the pending queue of the requests that waited.
    pub queue_wait: Histogram,
    /// Request sent → response head, per backend.
    pub backend_response: Hist,
    /// Backend failures, by backend and kind.
    pub backend_failures: Family<Labels, Counter>,
    /// Responses that went partly through a temp file.
    pub buffered_to_file: Counter,
    /// Request bodies read partly into a temp file before admission.
    pub requests_to_file: Counter,
    uptime: Gauge<f64, AtomicU64>,
    connections: Family<Labels, Gauge>,
    queue_length: Gauge,
    requests_per_second: Gauge<f64, AtomicU64>,
    backend_up: Family<Labels, Gauge>,
    backend_inflight: Family<Labels, Gauge>,
    backend_limit: Family<Labels, Gauge>,
    backend_monitor: Family<Labels, Gauge>,
    backend_pool: Family<Labels, Gauge>,
}

/// One label.
pub fn label(name: &str, value: impl ToString) -> Labels {
    vec![(name.to_string(), value.to_string())]
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers everything under `modus_director_`.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("modus_director");
        let m = Metrics {
            responses: Family::default(),
            refused: Family::default(),
            request_duration: latency_histogram(),
            queue_wait: latency_histogram(),
            backend_response: Family::new_with_constructor(latency_histogram),
            backend_failures: Family::default(),
            buffered_to_file: Counter::default(),
            requests_to_file: Counter::default(),
            uptime: Gauge::default(),
            connections: Family::default(),
            queue_length: Gauge::default(),
            requests_per_second: Gauge::default(),
            backend_up: Family::default(),
            backend_inflight: Family::default(),
            backend_limit: Family::default(),
            backend_monitor: Family::default(),
            backend_pool: Family::default(),
            registry: Registry::default(),
        };
        registry.register("requests", "Responses sent to clients, by status.", m.responses.clone());
        registry.register("refused", "Requests and connections refused, by reason.", m.refused.clone());
        registry.register_with_unit(
            "request_duration",
            "Request parsed to response handed to the client.",
            Unit::Seconds,
            m.request_duration.clone(),
        );
        registry.register_with_unit(
            "queue_wait",
            "Wait in the pending queue (requests that waited).",
            Unit::Seconds,
            m.queue_wait.clone(),
        );
        registry.register_with_unit(
            "backend_response",
            "Request sent to a backend to its response head.",
            Unit::Seconds,
            m.backend_response.clone(),
        );
        registry.register(
            "backend_failures",
            "Backend failures by kind (5xx, timeout, connect, broken).",
            m.backend_failures.clone(),
        );
        registry.register(
            "responses_buffered_to_file",
            "Responses read faster than their client took them, partly kept in a temp file.",
            m.buffered_to_file.clone(),
        );
        registry.register(
            "requests_buffered_to_file",
            "Request bodies read before admission, past 64 KiB in a temp file.",
            m.requests_to_file.clone(),
        );
        registry.register_with_unit("uptime", "Time since start.", Unit::Seconds, m.uptime.clone());
        registry.register(
            "connections",
            "Open client connections by state (REQUEST, PEEK, RECEIVE, RESPONSE, LINGER).",
            m.connections.clone(),
        );
        registry.register("queue_length", "Requests waiting in the pending queue.", m.queue_length.clone());
        registry.register(
            "requests_per_second",
            "Requests per second over the last few seconds.",
            m.requests_per_second.clone(),
        );
        registry.register("backend_up", "1 if the backend is in rotation.", m.backend_up.clone());
        registry.register("backend_inflight", "Requests in flight per backend.", m.backend_inflight.clone());
        registry.register(
            "backend_limit",
            "Concurrency limits per backend: effective, adaptive, monitor.",
            m.backend_limit.clone(),
        );
        registry.register(
            "backend_monitor",
            "1 for the backend monitor's current state (off, unknown, ok, overloaded).",
            m.backend_monitor.clone(),
        );
        registry.register(
            "backend_pool",
            "Backend connections: idle (pooled) and open.",
            m.backend_pool.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The Prometheus text, gauges taken from `status`.
    pub fn render(&self, status: &Value) -> String {
        self.uptime.set(status["uptime_s"].as_f64().unwrap_or(0.0));
        if let Some(states) = status["connections"].as_object() {
            for (state, n) in states {
                self.connections.get_or_create(&label("state", state)).set(n.as_i64().unwrap_or(0));
            }
        }
        self.queue_length.set(status["admission"]["queued"].as_i64().unwrap_or(0));
        self.requests_per_second.set(status["requests_per_s"].as_f64().unwrap_or(0.0));
        for b in status["backends"].as_array().into_iter().flatten() {
            let name = b["name"].as_str().unwrap_or("");
            let one = label("backend", name);
            self.backend_up.get_or_create(&one).set(i64::from(b["health"] == "up"));
            self.backend_inflight.get_or_create(&one).set(b["inflight"].as_i64().unwrap_or(0));
            for (kind, key) in
                [("effective", "limit"), ("adaptive", "adaptive_limit"), ("monitor", "monitor_limit")]
            {
                let labels =
                    vec![("backend".to_string(), name.to_string()), ("kind".to_string(), kind.to_string())];
                self.backend_limit.get_or_create(&labels).set(b[key].as_i64().unwrap_or(0));
            }
            for state in ["off", "unknown", "ok", "overloaded"] {
                let labels =
                    vec![("backend".to_string(), name.to_string()), ("state".to_string(), state.to_string())];
                self.backend_monitor.get_or_create(&labels).set(i64::from(b["monitor"] == state));
            }
            for (kind, key) in [("idle", "idle"), ("open", "conns")] {
                let labels =
                    vec![("backend".to_string(), name.to_string()), ("kind".to_string(), kind.to_string())];
                self.backend_pool.get_or_create(&labels).set(b[key].as_i64().unwrap_or(0));
            }
        }
        let mut out = String::with_capacity(8 << 10);
        encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// The response to one admin request (always closes).
pub fn answer(method: &h1::Method, path: &str, status: impl FnOnce() -> Value, metrics: &Metrics) -> Vec<u8> {
    statuspage::answer(method, path, Some("modus-director"), |resource| match resource {
        Resource::Page => html(&status()).into_bytes(),
        Resource::Json => serde_json::to_vec_pretty(&status()).expect("serialising a Value"),
        Resource::Metrics => metrics.render(&status()).into_bytes(),
    })
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => "–".into(),
        other => esc(&other.to_string()),
    }
}

/// The status page: rendered on the server (no JavaScript, no external
/// assets), refreshed every 2 s, one column on a phone.
pub fn html(j: &Value) -> String {
    let mut h = String::with_capacity(12 << 10);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta http-equiv=\"refresh\" content=\"2\"><title>modus director</title><style>\
body{{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:80em;padding:.8em;color:#222}}\
h1{{font-size:1.4em;margin:.2em 0}}h2{{font-size:1.1em;margin:1.2em 0 .4em}}\
.cards{{display:grid;grid-template-columns:repeat(auto-fit,minmax(9em,1fr));gap:.5em}}\
.card{{background:#f3f5f8;border-radius:.4em;padding:.5em .7em}}.card b{{display:block;font-size:1.3em}}\
table{{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}}\
td,th{{text-align:right;padding:.2em .5em;border-bottom:1px solid #e3e3e3;white-space:nowrap}}\
th{{white-space:normal;vertical-align:bottom}}td small{{display:block;white-space:normal}}\
td:first-child,th:first-child{{text-align:left}}.wrap{{overflow-x:auto}}\
.up{{color:#2e7d32}}.down{{color:#c62828}}small{{color:#666}}\
</style></head><body><h1>modus — <span id=\"model\">director</span></h1>\
<small>pid {pid} · up {up} s · limiter {adaptive} · max {max} per backend · refreshes every 2 s</small>",
        pid = j["pid"],
        up = j["uptime_s"],
        adaptive = text(&j["adaptive"]),
        max = j["max_backend_conns"],
    );
    let adm = &j["admission"];
    let cards = [
        ("requests", j["requests_total"].to_string()),
        ("requests/s", format!("{:.1}", j["requests_per_s"].as_f64().unwrap_or(0.0))),
        ("p50", fmt_us(&j["latency_us"]["p50"])),
        ("p99", fmt_us(&j["latency_us"]["p99"])),
        ("backend p99", fmt_us(&j["phases_us"]["backend"]["p99"])),
        ("connections", j["connections_open"].to_string()),
        ("in flight", adm["in_flight"].to_string()),
        ("queued", adm["queued"].to_string()),
    ];
    h.push_str("<div class=\"cards\">");
    for (k, v) in cards {
        let _ = write!(h, "<div class=\"card\">{k}<b id=\"{}\">{v}</b></div>", k.replace(['/', ' '], "_"));
    }
    h.push_str("</div><h2>Connections by state</h2><div class=\"cards\">");
    for (state, n) in j["connections"].as_object().into_iter().flatten() {
        let _ = write!(h, "<div class=\"card\">{}<b>{n}</b></div>", esc(state));
    }
    h.push_str(
        "</div><h2>Admission</h2><div class=\"wrap\"><table><tr><th>refused because</th><th>count</th></tr>",
    );
    for (reason, n) in adm["refused"].as_object().into_iter().flatten() {
        let _ = write!(h, "<tr><td>{}</td><td>{n}</td></tr>", esc(&reason.replace('_', " ")));
    }
    let _ = write!(
        h,
        "<tr><td>queued (total, all outcomes)</td><td>{}</td></tr></table></div>",
        adm["queued_total"]
    );
    h.push_str(
        "<h2>Backends</h2><div class=\"wrap\"><table id=\"backends\"><tr><th>backend</th><th>health</th><th>monitor</th>\
<th>in flight</th><th>limit</th><th>adaptive</th><th>latency</th><th>pool idle/open</th><th>served</th>\
<th>5xx</th><th>errors</th><th>connect fails</th><th>check fails</th></tr>",
    );
    for b in j["backends"].as_array().into_iter().flatten() {
        let up = b["health"] == "up";
        // The reason on a line of its own: the table must fit a 1,280 px screen.
        let health =
            if up { "up".to_string() } else { format!("down<small>{}</small>", text(&b["down_reason"])) };
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"{}\">{health}</td><td title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
<td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            text(&b["name"]),
            if up { "up" } else { "down" },
            text(&b["monitor_detail"]),
            text(&b["monitor"]),
            b["inflight"],
            b["limit"],
            b["adaptive_limit"],
            fmt_us(&b["latency_us"]),
            b["idle"],
            b["conns"],
            b["served"],
            b["server_errors"],
            b["errors"],
            b["connect_failures"],
            b["health_check_failures"],
        );
    }
    h.push_str("</table></div><h2>Latency</h2><div class=\"wrap\"><table><tr><th></th><th>count</th><th>mean</th><th>p50</th><th>p99</th></tr>");
    for (name, v) in [
        ("request (director)", &j["latency_us"]),
        ("pending queue", &j["phases_us"]["queue"]),
        ("backend (sent → head)", &j["phases_us"]["backend"]),
    ] {
        let _ = write!(
            h,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            v["count"],
            fmt_us(&v["mean"]),
            fmt_us(&v["p50"]),
            fmt_us(&v["p99"])
        );
    }
    h.push_str(
        "</table></div><h2>Responses</h2><div class=\"wrap\"><table><tr><th>status</th><th>count</th></tr>",
    );
    for (code, n) in j["responses"].as_object().into_iter().flatten() {
        let reason = code.parse().map(h1::reason_phrase).unwrap_or("");
        let _ = write!(h, "<tr><td>{} {reason}</td><td>{n}</td></tr>", esc(code));
    }
    h.push_str(
        "</table></div><p><small><a href=\"/status.json\">/status.json</a> · <a href=\"/metrics\">/metrics</a></small></p></body></html>\n",
    );
    h
}
