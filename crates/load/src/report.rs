//! Reports: wrk2/hey-like text, one JSON object, the per-request CSV.

use std::fmt::Write as _;
use std::io::{BufWriter, Write as _};
use std::path::Path;

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::engine::{Config, Outcome, BUSY_LIMIT};
use crate::stats::{ErrorKind, Stats};
use crate::LoadArgs;

fn pct(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!({"p50": 0, "p90": 0, "p99": 0, "p999": 0, "p9999": 0, "max": 0, "min": 0, "mean": 0.0, "stdev": 0.0});
    }
    json!({
        "p50": h.value_at_quantile(0.5), "p90": h.value_at_quantile(0.9), "p99": h.value_at_quantile(0.99),
        "p999": h.value_at_quantile(0.999), "p9999": h.value_at_quantile(0.9999),
        "max": h.max(), "min": h.min(), "mean": h.mean(), "stdev": h.stdev(),
    })
}

fn errors_map(s: &Stats) -> Map<String, Value> {
    ErrorKind::ALL
        .iter()
        .zip(s.errors)
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| (k.name().to_string(), json!(n)))
        .collect()
}

/// Did the generator fall behind (late arrivals or think-time ends), or
/// was one of its loops too busy to be trusted?
fn fell_behind(s: &Stats) -> bool {
    s.generator_late > 0 || saturated(s)
}

fn saturated(s: &Stats) -> bool {
    s.loops.iter().any(|l| l.busy > BUSY_LIMIT)
}

fn mode(cfg: &Config) -> String {
    match (cfg.rate, cfg.stream_times) {
        (Some(r), _) => format!("open loop, {r} req/s {:?} arrivals", cfg.arrivals).to_lowercase(),
        (None, Some(s)) => format!("open loop at the stream's times, sped up {s}x"),
        (None, None) => "closed loop".into(),
    }
}

/// The JSON report: one object, input parameters echoed.
pub fn json(a: &LoadArgs, cfg: &Config, o: &Outcome) -> Value {
    let s = &o.stats;
    let d = o.duration_s.max(1e-9);
    let per_class: Map<String, Value> = cfg
        .workload
        .classes
        .iter()
        .zip(&s.classes)
        .map(|(name, c)| {
            (
                name.clone(),
                json!({"requests": c.latency.len(), "errors": c.errors, "bytes": c.bytes, "latency_us": pct(&c.latency)}),
            )
        })
        .collect();
    let per_second: Vec<Value> = s
        .per_second
        .iter()
        .enumerate()
        .map(|(i, sec)| {
            let q = |p| if sec.latency.is_empty() { 0 } else { sec.latency.value_at_quantile(p) };
            json!({"t": i, "requests": sec.requests, "errors": sec.errors, "bytes": sec.bytes, "connects": sec.connects,
                   "p50_us": q(0.5), "p99_us": q(0.99), "max_us": sec.latency.max()})
        })
        .collect();
    let status: Map<String, Value> = s.status.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({
        "schema": 1,
        "tool": "modus load",
        "version": env!("CARGO_PKG_VERSION"),
        "params": {
            "urls": a.urls, "target": cfg.addr.to_string(), "mode": if cfg.open_loop() { "open" } else { "closed" }, "stream_times": cfg.stream_times,
            "connections": cfg.connections, "threads": o.threads, "threads_requested": cfg.threads, "pipeline": cfg.pipeline, "close": cfg.close,
            "rate": cfg.rate, "arrivals": cfg.arrivals, "think_time": a.think_time.map(|t| format!("{:?}", t.dist)),
            "duration_s": cfg.duration.map(|d| d.as_secs_f64()), "requests": cfg.requests,
            "warmup_s": cfg.warmup.as_secs_f64(), "timeout_s": cfg.timeout.as_secs_f64(),
            "method": cfg.method, "headers": cfg.headers, "workload": cfg.workload.describe,
            "mix": a.mix, "workload_dir": a.workload, "stream_think": cfg.stream_think, "repeat_stream": cfg.repeat_stream, "seed": cfg.seed, "checksum": cfg.checksum,
            "max_queue": cfg.max_queue, "lag_threshold_us": cfg.lag_threshold.as_micros() as u64,
        },
        "duration_s": o.duration_s,
        "requests": s.requests,
        "errors": s.total_errors(),
        "errors_by_kind": errors_map(s),
        "status": status,
        "bytes": s.bytes,
        "body_bytes": s.body_bytes,
        "throughput_rps": s.requests as f64 / d,
        "bytes_per_s": s.bytes as f64 / d,
        "connections_opened": s.connects,
        "connections_per_s": s.connects as f64 / d,
        "latency_us": pct(&s.latency),
        "service_us": pct(&s.service),
        "ttfb_us": pct(&s.ttfb),
        "send_lag_us": pct(&s.send_lag),
        "open_loop": {
            "queued": s.queued, "dropped": s.dropped, "late_sends": s.late_sends,
            "generator_late": s.generator_late, "generator_max_lag_us": s.generator_max_lag_us,
        },
        "generator_busy": s.loops.iter().map(|l| l.busy).collect::<Vec<_>>(),
        "generator_cpu": s.loops.iter().map(|l| l.cpu).collect::<Vec<_>>(),
        "generator_saturated": saturated(s),
        "generator_fell_behind": fell_behind(s),
        "dropped": s.dropped,
        "retries": s.retries,
        "unfinished": s.unfinished,
        "warmup_requests": s.warmup_requests,
        "per_class": per_class,
        "per_second": per_second,
    })
}

fn us(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2}ms", v / 1e3)
    } else {
        format!("{v:.0}us")
    }
}

fn bytes(v: f64) -> String {
    const U: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = v;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2}{}", U[i])
}

/// The human-readable report (wrk2/hey-like).
pub fn text(a: &LoadArgs, cfg: &Config, o: &Outcome) -> String {
    let s = &o.stats;
    let d = o.duration_s.max(1e-9);
    let mut t = String::new();
    let bound = match (cfg.duration, cfg.requests) {
        (Some(dur), Some(n)) => format!("{} or {n} requests", humantime::format_duration(dur)),
        (Some(dur), None) => humantime::format_duration(dur).to_string(),
        (None, Some(n)) => format!("{n} requests"),
        (None, None) => String::new(),
    };
    let _ = writeln!(t, "Running {bound} test @ {} ({})", a.urls[0], cfg.workload.describe);
    let _ = writeln!(
        t,
        "  {}, {} threads and {} connections, {}{}{}",
        mode(cfg),
        o.threads,
        cfg.connections,
        if cfg.close { "a connection per request" } else { "keep-alive" },
        if cfg.pipeline > 1 { format!(", pipeline {}", cfg.pipeline) } else { String::new() },
        if cfg.warmup.is_zero() {
            String::new()
        } else {
            format!(", {} warm-up", humantime::format_duration(cfg.warmup))
        },
    );
    let h = &s.latency;
    let _ = writeln!(
        t,
        "  Latency{}   avg {}  stdev {}  max {}",
        if cfg.open_loop() { " (from intended send)" } else { "" },
        us(h.mean()),
        us(h.stdev()),
        us(h.max() as f64)
    );
    if cfg.open_loop() {
        let v = &s.service;
        let _ = writeln!(
            t,
            "  Service time (from actual send)   avg {}  max {}",
            us(v.mean()),
            us(v.max() as f64)
        );
    }
    let _ = writeln!(
        t,
        "  Latency Distribution (HdrHistogram{})",
        if cfg.open_loop() { " - corrected" } else { "" }
    );
    for q in [0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1.0] {
        let v = if h.is_empty() { 0 } else { h.value_at_quantile(q) };
        let _ = writeln!(t, "  {:>8.3}%  {:>10}", q * 100.0, us(v as f64));
    }
    let _ = writeln!(
        t,
        "  {} requests in {:.2}s, {} read, {} errors",
        s.requests,
        o.duration_s,
        bytes(s.bytes as f64),
        s.total_errors()
    );
    let _ = writeln!(t, "Requests/sec: {:>12.2}", s.requests as f64 / d);
    let _ = writeln!(t, "Transfer/sec: {:>12}", bytes(s.bytes as f64 / d));
    let _ = writeln!(t, "Connects/sec: {:>12.2}  ({} connections)", s.connects as f64 / d, s.connects);
    let codes: Vec<String> = s.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(t, "Status codes: {}", if codes.is_empty() { "none".into() } else { codes.join(", ") });
    let errs: Vec<String> = errors_map(s).iter().map(|(k, v)| format!("{k}: {v}")).collect();
    if !errs.is_empty() {
        let _ = writeln!(t, "Errors:       {}", errs.join(", "));
    }
    if cfg.open_loop() {
        let _ = writeln!(
            t,
            "Open loop:    {} arrivals waited for a connection, {} sent later than {}",
            s.queued,
            s.late_sends,
            humantime::format_duration(cfg.lag_threshold)
        );
    }
    if s.dropped > 0 {
        let _ = writeln!(
            t,
            "WARNING: {} arrivals were DROPPED (the send queue held --max-queue {}); they are counted as \
             errors and are missing from the latency figures",
            s.dropped, cfg.max_queue
        );
    }
    let busy: Vec<String> = s.loops.iter().map(|l| format!("{:.0}%", l.busy * 100.0)).collect();
    let cpu: Vec<String> = s.loops.iter().map(|l| format!("{:.0}%", l.cpu * 100.0)).collect();
    let _ = writeln!(t, "Generator:    loops busy {} (CPU {})", busy.join(" "), cpu.join(" "));
    if s.generator_late > 0 {
        let _ = writeln!(
            t,
            "WARNING: the generator fell behind: it noticed {} arrivals or think-time ends later than {} \
             (max {}); its own delays are in the latency figures (use more --threads or a lower --rate)",
            s.generator_late,
            humantime::format_duration(cfg.lag_threshold),
            us(s.generator_max_lag_us as f64)
        );
    }
    if saturated(s) {
        let _ = writeln!(
            t,
            "WARNING: the generator fell behind: a loop was more than {:.0}% busy; {} \
             (use more --threads, or give the generator its own core)",
            BUSY_LIMIT * 100.0,
            if cfg.open_loop() {
                "sends may be late for the generator's own reasons and be booked as server queueing"
            } else {
                "the throughput may be the generator's limit, not the server's"
            }
        );
    }
    if s.unfinished > 0 || s.retries > 0 {
        let _ = writeln!(
            t,
            "Unfinished at the end: {}; re-sent after a keep-alive close: {}",
            s.unfinished, s.retries
        );
    }
    if cfg.workload.classes.len() > 1 {
        let _ = writeln!(
            t,
            "Per class:        requests  errors       mean        p50        p90        p99      p99.9        max"
        );
        for (name, c) in cfg.workload.classes.iter().zip(&s.classes) {
            let q = |p| us(if c.latency.is_empty() { 0 } else { c.latency.value_at_quantile(p) } as f64);
            let _ = writeln!(
                t,
                "  {name:<16}{:>8}  {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
                c.latency.len(),
                c.errors,
                us(c.latency.mean()),
                q(0.5),
                q(0.9),
                q(0.99),
                q(0.999),
                us(c.latency.max() as f64)
            );
        }
    }
    if s.per_second.len() > 1 {
        let _ = writeln!(t, "Per second:   req/s  errors       p50       p99");
        for (i, sec) in s.per_second.iter().enumerate().take(120) {
            let q = |p| if sec.latency.is_empty() { 0 } else { sec.latency.value_at_quantile(p) };
            let _ = writeln!(
                t,
                "  {i:>4}s {:>9} {:>7} {:>9} {:>9}",
                sec.requests,
                sec.errors,
                us(q(0.5) as f64),
                us(q(0.99) as f64)
            );
        }
    }
    t
}

/// The per-request timeline: `intended_us,actual_us,first_byte_us,end_us,status,bytes,error,url`.
pub fn write_timeline(path: &Path, cfg: &Config, s: &Stats) -> std::io::Result<()> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    writeln!(w, "intended_us,actual_us,first_byte_us,end_us,status,bytes,error,url")?;
    for r in &s.timeline {
        let url = &cfg.workload.targets[r.target as usize].path;
        let url =
            if url.contains([',', '"']) { format!("\"{}\"", url.replace('"', "\"\"")) } else { url.clone() };
        writeln!(
            w,
            "{},{},{},{},{},{},{},{url}",
            r.intended_us,
            r.actual_us,
            r.first_byte_us,
            r.end_us,
            r.status,
            r.bytes,
            r.error.map_or("", |e| e.name())
        )?;
    }
    w.flush()
}
