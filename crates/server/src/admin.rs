//! `--admin ADDR`: a small listener serving `/status` (HTML, refreshes
//! itself), `/status.json` and `/metrics` (OpenMetrics text, which
//! Prometheus scrapes, written by the `prometheus-client` crate).
//!
//! It is not run by the model, so it answers even when the model is
//! saturated: a thread of its own for the thread and event models (reading
//! the one process's stats), the *admin child* for the process models
//! (reading every child's stats from shared memory; `models::Admin`). Either
//! way it gets a function returning the whole server's [`Snapshot`].
//!
//! Requests are parsed with the server's own `h1` parser, one at a time,
//! each on a fresh connection that is closed after the response.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use pipeline::stats::{ConnState, Hist, Phase, Snapshot, BUCKETS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info as InfoMetric;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use serde_json::{json, Map, Value};
use statuspage::{esc, fmt_us, Resource};
use transport::accept::{self, Failed};
use transport::{Shutdown, Wake};

/// What the admin pages show about the server besides its stats.
#[derive(Clone, Debug)]
pub struct Info {
    pub model: &'static str,
    pub paper_name: &'static str,
    /// The server's (the master's) process id.
    pub pid: u32,
    /// Per-phase timing is on (no `--no-timing`).
    pub timing: bool,
    /// Settings worth showing, in order.
    pub settings: Vec<(&'static str, String)>,
}

/// Rates are computed over this many one-second samples.
const WINDOW: usize = 5;

/// Serves until `stop` fires; `source` reads the server's numbers.
pub fn run(listener: TcpListener, source: &dyn Fn() -> Snapshot, info: &Info, stop: &Shutdown) {
    let mut samples: VecDeque<(Instant, u64, u64)> = VecDeque::with_capacity(WINDOW + 1);
    let mut next_sample = Instant::now();
    let _ = listener.set_nonblocking(true);
    loop {
        let now = Instant::now();
        if now >= next_sample {
            let snap = source();
            samples.push_back((now, snap.requests(), snap.bytes));
            if samples.len() > WINDOW + 1 {
                samples.pop_front();
            }
            next_sample = now + Duration::from_secs(1);
        }
        match stop.wait_readable(&listener, Some(next_sample.saturating_duration_since(Instant::now()))) {
            Ok(Wake::Stop) | Err(_) => return,
            Ok(Wake::Timeout) => continue,
            Ok(Wake::Ready) => {}
        }
        loop {
            match accept::accept(&listener, accept::Mode::Blocking) {
                Ok((stream, _)) => answer(stream, source, info, rates(&samples)),
                Err((Failed::Retry, _)) => {}
                Err((Failed::Empty, _)) => break,
                // The listener stays readable: wait instead of spinning.
                Err((Failed::Pause, _)) => {
                    std::thread::sleep(accept::PAUSE);
                    break;
                }
                Err((Failed::Gone, _)) => return,
            }
        }
    }
}

/// (requests/s, bytes/s) over the sampled window. A total that went down
/// (a board region read stale, a child's last publication lost) shows as
/// no traffic rather than wrapping to ~1.8e19/s.
fn rates(samples: &VecDeque<(Instant, u64, u64)>) -> (f64, f64) {
    match (samples.front(), samples.back()) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            let dt = (b.0 - a.0).as_secs_f64();
            (b.1.saturating_sub(a.1) as f64 / dt, b.2.saturating_sub(a.2) as f64 / dt)
        }
        _ => (0.0, 0.0),
    }
}

fn answer(stream: TcpStream, source: &dyn Fn() -> Snapshot, info: &Info, rates: (f64, f64)) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    let head = loop {
        match (&stream).read(&mut buf[len..]) {
            Ok(0) => return,
            Ok(n) => len += n,
            // A socket with a receive timeout is not restarted after a
            // signal, even one nobody handles: the SIGCHLD of a CGI script
            // that exited while the thread that started it had every
            // signal blocked (inside `posix_spawn`) comes here as EINTR.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        match h1::parse_request(&buf[..len], &h1::Limits::default()) {
            Ok(h1::Parsed::Complete { head, .. }) => break head,
            Ok(h1::Parsed::Partial) if len < buf.len() => continue,
            _ => {
                return send(&stream, &statuspage::response(400, "text/plain", b"bad request\n", false, None))
            }
        }
    };
    let snap = source();
    let out = statuspage::answer(&head.method, head.path(), None, |resource| match resource {
        Resource::Page => html(info, &snap, rates).into_bytes(),
        Resource::Json => serde_json::to_vec_pretty(&json_status(info, &snap, rates)).expect("json"),
        Resource::Metrics => metrics(info, &snap).into_bytes(),
    });
    send(&stream, &out);
}

/// Writes a whole response, then closes our side and drains what the
/// client still sends, so the close is not a reset.
fn send(mut stream: &TcpStream, out: &[u8]) {
    let _ = stream.write_all(out);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink) {
            Ok(1..) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
}

fn us(d: Duration) -> f64 {
    (d.as_nanos() as f64 / 1e3 * 10.0).round() / 10.0
}

/// The JSON document (also the data behind the HTML page).
pub fn json_status(info: &Info, snap: &Snapshot, rates: (f64, f64)) -> Value {
    let total = snap.phase(Phase::Total);
    let mut phases = Map::new();
    for phase in Phase::ALL {
        let h = snap.phase(phase);
        phases.insert(
            phase.name().into(),
            json!({
                "count": h.count(),
                "p50": us(h.quantile(0.5)),
                "p99": us(h.quantile(0.99)),
                "mean": us(h.mean()),
                "sum": us(Duration::from_nanos(h.sum_ns)),
            }),
        );
    }
    let mut queues = Map::new();
    for q in &snap.queues {
        queues.insert(
            q.name.clone(),
            json!({
                "length": q.len,
                "threads": q.threads,
                "items": q.items,
                "mean_wait_us": us(q.mean_wait()),
                "p50_wait_us": us(q.waits.quantile(0.5)),
                "p99_wait_us": us(q.waits.quantile(0.99)),
                "max_wait_us": us(q.max_wait),
            }),
        );
    }
    let busy = snap.workers.iter().filter(|w| w.busy).count();
    let scoreboard: Vec<Value> = snap
        .workers
        .iter()
        .map(|w| {
            json!({
                "name": w.name,
                "state": if w.busy { "busy" } else { "idle" },
                "served": w.served,
                "since_s": w.since.as_secs_f64(),
                "for_ms": w.for_how_long.as_millis() as u64,
            })
        })
        .collect();
    let mut by_status = Map::new();
    for (code, n) in snap.by_status() {
        by_status.insert(code.to_string(), n.into());
    }
    let mut connections = Map::new();
    for s in ConnState::COUNTED {
        connections.insert(s.name().into(), snap.conns(s).into());
    }
    let settings: Map<String, Value> =
        info.settings.iter().map(|(k, v)| ((*k).to_string(), Value::String(v.clone()))).collect();
    json!({
        "model": info.model,
        "paper_name": info.paper_name,
        "pid": info.pid,
        // The process answering (the admin child in the process models).
        "admin_pid": std::process::id(),
        "settings": settings,
        "timing": info.timing,
        "uptime_s": snap.uptime.as_secs_f64(),
        "requests_total": snap.requests(),
        "requests_by_status": by_status,
        "bytes_total": snap.bytes,
        "rate": { "requests_per_s": rates.0, "bytes_per_s": rates.1 },
        "connections_open": snap.conns_open(),
        "connections": connections,
        "latency_us": {
            "count": total.count(),
            "p50": us(total.quantile(0.5)),
            "p90": us(total.quantile(0.9)),
            "p99": us(total.quantile(0.99)),
            "p999": us(total.quantile(0.999)),
            "mean": us(total.mean()),
        },
        "phases_us": phases,
        "queues": queues,
        "workers": { "busy": busy, "idle": snap.workers.len() - busy, "scoreboard": scoreboard },
        "cache": {
            "hits": snap.cache.hits,
            "misses": snap.cache.misses,
            "bytes": snap.cache.bytes,
            "memory_bytes": snap.cache.memory,
            "open_files": snap.cache.open_files,
        },
        "cgi": { "running": snap.cgi_running },
        "log_lines_dropped": snap.log_lines_dropped,
    })
}

/// The exposition (OpenMetrics text, `# EOF` included), written by
/// `prometheus-client` from one snapshot. Histogram buckets are octave
/// boundaries (2^k ns), which are exact boundaries of the stats' buckets.
pub fn metrics(info: &Info, snap: &Snapshot) -> String {
    let mut registry = Registry::with_prefix("modus");
    registry.register_collector(Box::new(Exposition { info: info.clone(), snap: snap.clone() }));
    let mut out = String::with_capacity(32 << 10);
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("writing to a String");
    out
}

/// One scrape's worth of numbers, as a `prometheus-client` collector.
#[derive(Debug)]
struct Exposition {
    info: Info,
    snap: Snapshot,
}

/// Octave bounds from 1 µs (2^10 ns) to ~69 s (2^36 ns).
const LE_EXPONENTS: std::ops::RangeInclusive<u32> = 10..=36;

/// A [`Hist`] as a Prometheus histogram in seconds.
#[derive(Debug)]
struct Seconds<'a>(&'a Hist);

impl EncodeMetric for Seconds<'_> {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> std::fmt::Result {
        debug_assert_eq!(self.0.counts.len(), BUCKETS);
        let mut below = 0;
        let mut buckets: Vec<(f64, u64)> = LE_EXPONENTS
            .map(|k| {
                let cumulative = self.0.count_below(1 << k);
                let in_bucket = cumulative.saturating_sub(below);
                below = cumulative;
                ((1u64 << k) as f64 / 1e9, in_bucket)
            })
            .collect();
        let count = self.0.count();
        buckets.push((f64::INFINITY, count.saturating_sub(below)));
        encoder.encode_histogram::<NoLabelSet>(self.0.sum_ns as f64 / 1e9, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl Collector for Exposition {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let snap = &self.snap;
        let info = InfoMetric::new([("model", self.info.model), ("paper_name", self.info.paper_name)]);
        info.encode(e.encode_descriptor(
            "server",
            "The server's concurrency model.",
            None,
            MetricType::Info,
        )?)?;
        ConstGauge::new(snap.uptime.as_secs_f64()).encode(e.encode_descriptor(
            "uptime",
            "Time since the server started.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?)?;

        let mut m =
            e.encode_descriptor("requests", "Responses sent, by status code.", None, MetricType::Counter)?;
        for (code, n) in snap.by_status() {
            ConstCounter::new(n).encode(m.encode_family(&[("status", code.to_string())])?)?;
        }
        ConstCounter::new(snap.bytes).encode(e.encode_descriptor(
            "sent_bytes",
            "Bytes of responses written (heads and bodies).",
            None,
            MetricType::Counter,
        )?)?;

        Seconds(snap.phase(Phase::Total)).encode(e.encode_descriptor(
            "request_duration",
            "From a request's first byte to its response logged.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?)?;
        let mut m = e.encode_descriptor(
            "phase_duration",
            "Time per request phase.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for phase in Phase::ALL.into_iter().filter(|p| *p != Phase::Total) {
            Seconds(snap.phase(phase)).encode(m.encode_family(&[("phase", phase.name())])?)?;
        }

        let mut m = e.encode_descriptor(
            "queue_length",
            "Items waiting in a model's queue.",
            None,
            MetricType::Gauge,
        )?;
        for q in &snap.queues {
            ConstGauge::new(q.len as i64).encode(m.encode_family(&[("stage", q.name.as_str())])?)?;
        }
        let mut m = e.encode_descriptor(
            "queue_items",
            "Items taken out of a model's queue.",
            None,
            MetricType::Counter,
        )?;
        for q in &snap.queues {
            ConstCounter::new(q.items).encode(m.encode_family(&[("stage", q.name.as_str())])?)?;
        }
        let mut m = e.encode_descriptor(
            "queue_wait",
            "Time items waited in a model's queue.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for q in &snap.queues {
            Seconds(&q.waits).encode(m.encode_family(&[("stage", q.name.as_str())])?)?;
        }

        let mut m = e.encode_descriptor(
            "connections",
            "Open client connections, by state.",
            None,
            MetricType::Gauge,
        )?;
        for s in ConnState::COUNTED {
            ConstGauge::new(snap.conns(s)).encode(m.encode_family(&[("state", s.name())])?)?;
        }
        let busy = snap.workers.iter().filter(|x| x.busy).count() as i64;
        let mut m = e.encode_descriptor(
            "workers",
            "Workers (threads, loops, processes), by state.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(busy).encode(m.encode_family(&[("state", "busy")])?)?;
        ConstGauge::new(snap.workers.len() as i64 - busy).encode(m.encode_family(&[("state", "idle")])?)?;

        let cache = snap.cache;
        ConstCounter::new(cache.hits).encode(e.encode_descriptor(
            "cache_hits",
            "File cache hits.",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(cache.misses).encode(e.encode_descriptor(
            "cache_misses",
            "File cache misses.",
            None,
            MetricType::Counter,
        )?)?;
        ConstGauge::new(cache.bytes as i64).encode(e.encode_descriptor(
            "cache",
            "Bytes of files held by the cache (in memory or as open files).",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(cache.memory as i64).encode(e.encode_descriptor(
            "cache_memory",
            "Bytes the cache holds in memory (small files, compressed variants).",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(cache.open_files as i64).encode(e.encode_descriptor(
            "cache_open_files",
            "Files the cache holds open.",
            None,
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(snap.cgi_running as i64).encode(e.encode_descriptor(
            "cgi_running",
            "CGI scripts running.",
            None,
            MetricType::Gauge,
        )?)?;
        ConstCounter::new(snap.log_lines_dropped).encode(e.encode_descriptor(
            "log_lines_dropped",
            "Access-log lines that could not be written (a full disk, a closed pipe).",
            None,
            MetricType::Counter,
        )?)?;
        Ok(())
    }
}

fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut b = b;
    let mut i = 0;
    while b >= 1000.0 && i < UNITS.len() - 1 {
        b /= 1000.0;
        i += 1;
    }
    format!("{b:.1} {}", UNITS[i])
}

/// Colours of the phases in the stacked bar.
const COLOURS: [&str; 10] = [
    "#9e9e9e", "#42a5f5", "#7e57c2", "#66bb6a", "#ef6c00", "#ec407a", "#ab47bc", "#26a69a", "#8d6e63",
    "#fdd835",
];

/// The status page: server-rendered (works without JavaScript), refreshed
/// every 2 s by a meta refresh; no external assets.
pub fn html(info: &Info, snap: &Snapshot, rates: (f64, f64)) -> String {
    let j = json_status(info, snap, rates);
    let mut h = String::with_capacity(16 << 10);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta http-equiv=\"refresh\" content=\"2\"><title>modus status: {model}</title><style>\
body{{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:60em;padding:.8em;color:#222}}\
h1{{font-size:1.4em;margin:.2em 0}}h2{{font-size:1.1em;margin:1.2em 0 .4em}}\
.cards{{display:grid;grid-template-columns:repeat(auto-fit,minmax(9em,1fr));gap:.5em}}\
.card{{background:#f3f5f8;border-radius:.4em;padding:.5em .7em}}.card b{{display:block;font-size:1.3em}}\
table{{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}}\
td,th{{text-align:right;padding:.2em .5em;border-bottom:1px solid #e3e3e3}}td:first-child,th:first-child{{text-align:left}}\
.bar{{display:flex;height:1.6em;border-radius:.3em;overflow:hidden;background:#eee}}.bar span{{display:block}}\
.legend span{{display:inline-block;margin:.2em .8em .2em 0}}.legend i{{display:inline-block;width:.8em;height:.8em;margin-right:.3em;border-radius:.2em}}\
.wrap{{overflow-x:auto}}.busy{{color:#c62828}}.idle{{color:#2e7d32}}small{{color:#666}}\
.note{{margin:.4em 0 .8em}}details summary{{cursor:pointer;color:#2e7d32;margin:.4em 0}}\
</style></head><body><h1>modus — <span id=\"model\">{model}</span> <small>({paper})</small></h1>\
<small>pid {pid} · up {up:.0} s · timing {timing} · refreshes every 2 s</small>",
        model = esc(info.model),
        paper = esc(info.paper_name),
        pid = info.pid,
        up = snap.uptime.as_secs_f64(),
        timing = if info.timing { "on" } else { "off (--no-timing)" },
    );
    let lat = &j["latency_us"];
    let cards = [
        ("requests", j["requests_total"].to_string()),
        ("requests/s", format!("{:.1}", rates.0)),
        ("bytes/s", fmt_bytes(rates.1)),
        ("sent", fmt_bytes(snap.bytes as f64)),
        ("p50", fmt_us(&lat["p50"])),
        ("p99", fmt_us(&lat["p99"])),
        ("p99.9", fmt_us(&lat["p999"])),
        ("connections", j["connections_open"].to_string()),
    ];
    h.push_str("<div class=\"cards\">");
    for (k, v) in cards {
        let _ = write!(h, "<div class=\"card\">{k}<b id=\"{}\">{v}</b></div>", k.replace(['/', '.'], "_"));
    }
    h.push_str("</div>");

    // Where the time goes: mean per request of each phase within `total`,
    // stacked. `wait` comes before a request exists (a keep-alive client's
    // think time, or a new connection's silence), so it is not in `total`
    // and not in the bar; it is shown beside it.
    h.push_str("<h2>Where a request's time goes</h2>");
    let requests = snap.phase(Phase::Total).count().max(1) as f64;
    let parts: Vec<(Phase, f64)> = Phase::ALL
        .iter()
        .filter(|ph| !matches!(**ph, Phase::Total | Phase::Wait))
        .map(|ph| (*ph, snap.phase(*ph).sum_ns as f64 / requests))
        .collect();
    let sum: f64 = parts.iter().map(|x| x.1).sum();
    h.push_str("<div class=\"bar\" role=\"img\" aria-label=\"phase breakdown\">");
    for (i, (ph, v)) in parts.iter().enumerate() {
        if sum > 0.0 && *v > 0.0 {
            let _ = write!(
                h,
                "<span style=\"width:{:.2}%;background:{}\" title=\"{} {:.1} µs\"></span>",
                v / sum * 100.0,
                COLOURS[i % COLOURS.len()],
                ph.name(),
                v / 1e3
            );
        }
    }
    h.push_str("</div><div class=\"legend\">");
    for (i, (ph, v)) in parts.iter().enumerate() {
        let _ = write!(
            h,
            "<span><i style=\"background:{}\"></i>{} {:.1} µs</span>",
            COLOURS[i % COLOURS.len()],
            ph.name(),
            v / 1e3
        );
    }
    let _ = write!(
        h,
        "</div><p class=\"note\" id=\"wait-note\"><small><b>total</b> runs from a request's first byte to its \
         access-log line (plus any time its connection queued before a worker took it); the bar splits it into \
         phases. <b>wait</b> — from accept, or the previous response's end, to the first byte: a keep-alive \
         client thinking — is not part of <b>total</b> and not in the bar (mean {:.1} µs).</small></p>",
        snap.phase(Phase::Wait).mean().as_nanos() as f64 / 1e3
    );
    h.push_str("<div class=\"wrap\"><table><tr><th>phase</th><th>count</th><th>mean</th><th>p50</th><th>p99</th></tr>");
    for ph in Phase::ALL {
        let v = &j["phases_us"][ph.name()];
        let name = if ph == Phase::Wait { "wait (not in total)" } else { ph.name() };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            name,
            v["count"],
            fmt_us(&v["mean"]),
            fmt_us(&v["p50"]),
            fmt_us(&v["p99"])
        );
    }
    h.push_str("</table></div>");

    h.push_str("<h2>Responses</h2><div class=\"wrap\"><table><tr><th>status</th><th>count</th></tr>");
    for (code, n) in snap.by_status() {
        let _ = write!(h, "<tr><td>{code} {}</td><td>{n}</td></tr>", h1::reason_phrase(code));
    }
    h.push_str("</table></div>");

    h.push_str("<h2>Connections, cache, CGI</h2><div class=\"cards\">");
    for s in ConnState::COUNTED {
        let _ = write!(h, "<div class=\"card\">{}<b>{}</b></div>", s.name(), snap.conns(s));
    }
    let (hits, misses, bytes) = (snap.cache.hits, snap.cache.misses, snap.cache.bytes);
    let rate = if hits + misses > 0 { hits as f64 * 100.0 / (hits + misses) as f64 } else { 0.0 };
    let _ = write!(
        h,
        "<div class=\"card\">cache hit rate<b>{rate:.1}%</b></div><div class=\"card\">cache hits / misses<b>{hits} / {misses}</b></div>\
<div class=\"card\">cache holds<b>{}</b></div><div class=\"card\">of which in memory<b>{}</b></div>\
<div class=\"card\">cache's open files<b>{}</b></div><div class=\"card\">CGI running<b>{}</b></div></div>",
        fmt_bytes(bytes as f64),
        fmt_bytes(snap.cache.memory as f64),
        snap.cache.open_files,
        snap.cgi_running
    );

    if !snap.queues.is_empty() {
        h.push_str("<h2>Queues</h2><div class=\"wrap\"><table><tr><th>queue</th><th>threads</th><th>length</th><th>items</th><th>mean wait</th><th>p50</th><th>p99</th><th>max wait</th></tr>");
        for q in &snap.queues {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1?}</td><td>{:.1?}</td><td>{:.1?}</td><td>{:.1?}</td></tr>",
                esc(&q.name),
                q.threads,
                q.len,
                q.items,
                q.mean_wait(),
                q.waits.quantile(0.5),
                q.waits.quantile(0.99),
                q.max_wait
            );
        }
        h.push_str("</table></div>");
    }

    let busy = snap.workers.iter().filter(|w| w.busy).count();
    let _ = write!(
        h,
        "<h2>Workers: <span class=\"busy\">{busy} busy</span>, <span class=\"idle\">{} idle</span></h2>",
        snap.workers.len() - busy
    );
    // Busy workers one by one; idle ones (a pool's 128 threads, mostly)
    // folded into one line that opens to the list.
    let row = |h: &mut String, w: &pipeline::stats::WorkerSnap| {
        let (class, state) = if w.busy { ("busy", "busy") } else { ("idle", "idle") };
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"{class}\">{state}</td><td>{}</td><td>{:.1?}</td></tr>",
            esc(&w.name),
            w.served,
            w.for_how_long
        );
    };
    const HEADER: &str = "<tr><th>worker</th><th>state</th><th>taken</th><th>for</th></tr>";
    if busy > 0 {
        let _ = write!(h, "<div class=\"wrap\"><table id=\"busy-workers\">{HEADER}");
        snap.workers.iter().filter(|w| w.busy).for_each(|w| row(&mut h, w));
        h.push_str("</table></div>");
    }
    let idle = snap.workers.len() - busy;
    if idle > 0 {
        let _ = write!(
            h,
            "<details id=\"idle-workers\"><summary>{idle} idle worker{}</summary><div class=\"wrap\"><table>{HEADER}",
            if idle == 1 { "" } else { "s" }
        );
        snap.workers.iter().filter(|w| !w.busy).for_each(|w| row(&mut h, w));
        h.push_str("</table></div></details>");
    }
    h.push_str("<h2>Settings</h2><div class=\"wrap\"><table>");
    for (k, v) in &info.settings {
        let _ = write!(h, "<tr><td>{k}</td><td>{}</td></tr>", esc(v));
    }
    h.push_str("</table></div><p><small><a href=\"/status.json\">/status.json</a> · <a href=\"/metrics\">/metrics</a></small></p></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_workers_fold_into_one_line() {
        let mut snap = Snapshot::empty(Duration::from_secs(1));
        let worker = |name: &str, busy| pipeline::stats::WorkerSnap {
            name: name.into(),
            busy,
            served: 1,
            since: Duration::ZERO,
            for_how_long: Duration::from_millis(5),
        };
        snap.workers = vec![worker("pool-0", false), worker("pool-1", true), worker("pool-2", false)];
        let info = Info { model: "pool", paper_name: "TPW", pid: 1, timing: true, settings: Vec::new() };
        let page = html(&info, &snap, (0.0, 0.0));
        assert!(page.contains("<summary>2 idle workers</summary>"), "{page}");
        let busy = &page[page.find("id=\"busy-workers\"").unwrap()..page.find("<details").unwrap()];
        assert!(busy.contains("pool-1") && !busy.contains("pool-0"), "{busy}");
        assert_eq!(page.matches("<td>pool-").count(), 3, "each worker once");
        snap.workers.retain(|w| w.busy);
        assert!(!html(&info, &snap, (0.0, 0.0)).contains("<details"), "nothing to fold");
    }

    #[test]
    fn rates_of_totals_that_went_down_are_zero_not_wrapped() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        let samples: VecDeque<_> = [(t0, 100, 5_000), (t1, 40, 1_000)].into_iter().collect();
        assert_eq!(rates(&samples), (0.0, 0.0));
        let samples: VecDeque<_> = [(t0, 100, 5_000), (t1, 140, 9_000)].into_iter().collect();
        assert_eq!(rates(&samples), (20.0, 2_000.0));
        let samples: VecDeque<_> = [(t0, 100, 5_000)].into_iter().collect();
        assert_eq!(rates(&samples), (0.0, 0.0));
    }
}
