//! Reports: wrk2/hey-like text, one JSON object, the per-request CSV.

use std::fmt::Write as _;
use std::io::{BufWriter, Write as _};
use std::path::Path;

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::engine::{Config, Outcome, BUSY_LIMIT};
use crate::stats::{ErrorKind, Stats};
use crate::LoadArgs;

/// A latency histogram's percentiles, as the JSON report gives them.
pub fn pct(h: &Histogram<u64>) -> Value {
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

/// The share of sends the generator may make late (later than
/// `--lag-threshold`, by its own delay) before the run says it fell
/// behind: one late send of 400 (a scheduler hiccup of 19 ms on an open
/// loop at 35 requests/s) is in that request's latency, not in the run's.
const LATE_SHARE_LIMIT: f64 = 0.01;

/// Did the generator fall behind (more than [`LATE_SHARE_LIMIT`] of its
/// arrivals or think-time ends late), or was one of its loops too busy to
/// be trusted?
fn fell_behind(cfg: &Config, s: &Stats) -> bool {
    too_often_late(s) || saturated(cfg.open_loop(), s)
}

/// More than [`LATE_SHARE_LIMIT`] of the sends were late.
fn too_often_late(s: &Stats) -> bool {
    let sent = (s.requests + s.unfinished).max(1) as f64;
    s.generator_late as f64 > LATE_SHARE_LIMIT * sent
}

/// Was a loop the limit? In the open loop, any time a loop was not
/// waiting for events — running, or runnable but without a CPU — may
/// delay a send, which would be booked as the server's queueing: its wall
/// time outside the wait (`busy`) counts. In the closed loop a late send
/// delays only the next request of a user who is waiting anyway, and
/// shows in the latency as it should; the generator limits the run only
/// if it needs a whole CPU itself, so its CPU time counts. (On a machine
/// where the server takes the other cores too, a closed-loop generator is
/// runnable-but-waiting much of the time: see [`shares_cpus`].)
fn saturated(open_loop: bool, s: &Stats) -> bool {
    if open_loop {
        s.loops.iter().any(|l| l.busy > BUSY_LIMIT)
    } else {
        s.loops.iter().any(|l| l.cpu > BUSY_LIMIT)
    }
}

/// Loops were ready to run but had no CPU for a good share of the run:
/// the generator and the server compete for the same cores.
fn shares_cpus(s: &Stats) -> bool {
    s.loops.iter().any(|l| l.busy - l.cpu > 0.15)
}

/// How a run ended, beyond its numbers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ending {
    /// The signal that stopped it early (`SIGINT`, `SIGTERM`), if one did.
    pub interrupted_by: Option<&'static str>,
}

/// Exit status of a run: 130/143 if a signal (SIGINT/SIGTERM) stopped it;
/// 1 if no request got a response, or if more than half of the attempts
/// failed without one (refused, reset, timed out, cut short, dropped);
/// otherwise 0. Responses with any status count as responses (as in wrk):
/// 4xx and 5xx are reported, and warned about when nothing succeeded, but
/// they are the server's answer, not the generator's failure.
pub fn exit_status(s: &Stats, ending: Ending) -> u8 {
    match ending.interrupted_by {
        Some("SIGTERM") => return 143,
        Some(_) => return 130,
        None => {}
    }
    match failure(s) {
        Some(_) => 1,
        None => 0,
    }
}

/// Why the run counts as failed, if it does (see [`exit_status`]).
pub fn failure(s: &Stats) -> Option<String> {
    let failed = s.transport_errors();
    if s.requests == 0 {
        return Some(if failed == 0 {
            "no request was sent".into()
        } else {
            "no request got a response".into()
        });
    }
    let attempts = s.requests + failed;
    (failed * 2 > attempts).then(|| format!("{failed} of {attempts} requests got no response"))
}

/// The warning for runs in which nothing succeeded: every response was
/// 4xx or 5xx (a mistyped URL looks exactly like this).
fn no_success(s: &Stats) -> Option<String> {
    let ok: u64 = s.status.iter().filter(|(code, _)| (200..400).contains(*code)).map(|(_, n)| n).sum();
    if s.requests == 0 || ok > 0 {
        return None;
    }
    Some(match s.status.iter().collect::<Vec<_>>().as_slice() {
        [(code, n)] => format!(
            "no response was a success: all {n} were {code}{} — is the URL right?",
            reason(**code).map(|r| format!(" {r}")).unwrap_or_default()
        ),
        codes => {
            let codes: Vec<String> = codes.iter().map(|(code, n)| format!("{code}: {n}")).collect();
            format!("no response was a success ({})", codes.join(", "))
        }
    })
}

fn reason(code: u16) -> Option<&'static str> {
    Some(match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => return None,
    })
}

/// The error counts in words, with why connections failed.
fn errors_in_words(s: &Stats) -> Vec<String> {
    ErrorKind::ALL
        .iter()
        .zip(s.errors)
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| {
            let mut line = format!("{n} {}", kind.describe());
            if *kind == ErrorKind::Connect && !s.connect_failures.is_empty() {
                let why: Vec<String> =
                    s.connect_failures.iter().map(|(why, n)| format!("{why}: {n}")).collect();
                line.push_str(&format!(" [{}]", why.join("; ")));
            }
            line
        })
        .collect()
}

fn mode(cfg: &Config) -> String {
    match (cfg.rate, cfg.stream_times) {
        (Some(r), _) => format!("open loop, {r} req/s {:?} arrivals", cfg.arrivals).to_lowercase(),
        (None, Some(s)) => format!("open loop at the stream's times, sped up {s}x"),
        (None, None) => "closed loop".into(),
    }
}

/// The JSON report: one object, input parameters echoed.
pub fn json(a: &LoadArgs, cfg: &Config, o: &Outcome, ending: Ending) -> Value {
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
    let (in_flight, held_users) = s.held(o.duration_s, cfg.open_loop());
    let mut v = json!({
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
        "interrupted": ending.interrupted_by.is_some(),
        "interrupted_by": ending.interrupted_by,
        "exit_status": exit_status(s, ending),
        "failure": failure(s),
        "no_success": no_success(s).is_some(),
        "requests": s.requests,
        "errors": s.total_errors(),
        // Beside the errors: each a request the server cut (it closed a
        // kept-alive connection under it), which a browser or `wrk` would
        // not have re-sent.
        "resent": s.retries,
        "errors_by_kind": errors_map(s),
        "connect_failures": s.connect_failures,
        "status": status,
        "bytes": s.bytes,
        "body_bytes": s.body_bytes,
        "throughput_rps": s.requests as f64 / d,
        "bytes_per_s": s.bytes as f64 / d,
        "connections_opened": s.connects,
        "connections_per_s": s.connects as f64 / d,
        "tls_handshakes": s.handshakes,
        "tls_handshakes_per_s": s.handshakes as f64 / d,
        "latency_us": pct(&s.latency),
        "latency_2xx_us": pct(&s.latency_2xx),
        "service_us": pct(&s.service),
        "ttfb_us": pct(&s.ttfb),
        "send_lag_us": pct(&s.send_lag),
        "open_loop": {
            "queued": s.queued, "dropped": s.dropped, "late_sends": s.late_sends,
            "generator_late": s.generator_late, "generator_max_lag_us": s.generator_max_lag_us,
        },
        "generator_busy": s.loops.iter().map(|l| l.busy).collect::<Vec<_>>(),
        "generator_cpu": s.loops.iter().map(|l| l.cpu).collect::<Vec<_>>(),
        "generator_saturated": saturated(cfg.open_loop(), s),
        "generator_fell_behind": fell_behind(cfg, s),
        "generator_shares_cpus": shares_cpus(s),
        "dropped": s.dropped,
        "retries": s.retries,
        "unfinished": s.unfinished,
        "warmup_requests": s.warmup_requests,
        "per_class": per_class,
        "per_second": per_second,
    });
    // Who sent, and the load held (Little's law): beside the object (one
    // json! of it all would pass the macro's recursion limit).
    v["users_active"] = json!(s.users_active.len());
    v["think_mean_us"] = json!(s.think_mean_us());
    v["in_flight_mean"] = json!(in_flight);
    v["held_users"] = json!(held_users);
    v["waiting_at_end"] = json!(s.waiting_at_end);
    v["starved"] = json!(s.starved);
    v
}

/// The users of a replayed stream (its highest user number + 1).
fn stream_users(cfg: &Config) -> usize {
    match &cfg.workload.chooser {
        crate::target::Chooser::Stream(seq) => seq.iter().map(|r| r.user as usize + 1).max().unwrap_or(0),
        _ => 0,
    }
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
pub fn text(a: &LoadArgs, cfg: &Config, o: &Outcome, ending: Ending) -> String {
    let s = &o.stats;
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
    if let Some(signal) = ending.interrupted_by {
        let _ =
            writeln!(t, "  Interrupted by {signal} after {:.2}s: the report covers what ran", o.duration_s);
    }
    if s.requests == 0 {
        let _ = writeln!(t, "  No responses: no latency to report (see Errors below)");
    } else {
        latency_block(&mut t, cfg, s);
    }
    text_totals(&mut t, cfg, o);
    t
}

fn latency_block(t: &mut String, cfg: &Config, s: &Stats) {
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
}

fn text_totals(t: &mut String, cfg: &Config, o: &Outcome) {
    let s = &o.stats;
    let d = o.duration_s.max(1e-9);
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
    let (in_flight, held_users) = s.held(o.duration_s, cfg.open_loop());
    let _ = writeln!(
        t,
        "Users:        {} of {} sent a measured request; {in_flight:.1} in flight{}{}",
        s.users_active.len(),
        if matches!(cfg.workload.chooser, crate::target::Chooser::Stream(_)) && !cfg.open_loop() {
            format!("{} users", stream_users(cfg))
        } else {
            format!("{} connections", cfg.connections)
        },
        held_users.map(|h| format!(", {h:.1} users held (Little's law)")).unwrap_or_default()
            + &if s.starved > 0 {
                format!(", {} unanswered through the whole measured window (starved)", s.starved)
            } else {
                String::new()
            },
        if s.think_count > 0 && s.think_mean_us() > 0.0 {
            format!(", mean think {}", us(s.think_mean_us()))
        } else {
            String::new()
        },
    );
    if s.handshakes > 0 {
        let _ = writeln!(t, "TLS shakes/s: {:>12.2}  ({} handshakes)", s.handshakes as f64 / d, s.handshakes);
    }
    let codes: Vec<String> = s.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(t, "Status codes: {}", if codes.is_empty() { "none".into() } else { codes.join(", ") });
    let errs = errors_in_words(s);
    if !errs.is_empty() || s.retries > 0 {
        let resent = match s.retries {
            0 => String::new(),
            n => format!(
                "{}{n} re-sent after the server closed a keep-alive connection under them (cut: a browser or wrk would fail them)",
                if errs.is_empty() { "" } else { "; " }
            ),
        };
        let _ = writeln!(t, "Errors:       {}{resent}", errs.join(", "));
    }
    if let Some(warning) = no_success(s) {
        let _ = writeln!(t, "WARNING: {warning}");
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
    if too_often_late(s) {
        let _ = writeln!(
            t,
            "WARNING: the generator fell behind: it noticed {} arrivals or think-time ends later than {} \
             (max {}); its own delays are in the latency figures (use more --threads or a lower --rate)",
            s.generator_late,
            humantime::format_duration(cfg.lag_threshold),
            us(s.generator_max_lag_us as f64)
        );
    } else if s.generator_late > 0 {
        let _ = writeln!(
            t,
            "Generator:    {} of {} sends later than {} (max {}): under {:.0} %, in those requests' latency only",
            s.generator_late,
            s.requests + s.unfinished,
            humantime::format_duration(cfg.lag_threshold),
            us(s.generator_max_lag_us as f64),
            LATE_SHARE_LIMIT * 100.0
        );
    }
    if saturated(cfg.open_loop(), s) {
        let _ = writeln!(
            t,
            "WARNING: the generator fell behind: {} (use more --threads, or give the generator its own core)",
            if cfg.open_loop() {
                format!(
                    "a loop was more than {:.0}% busy; sends may be late for the generator's own reasons and \
                     be booked as server queueing",
                    BUSY_LIMIT * 100.0
                )
            } else {
                format!(
                    "a loop used more than {:.0}% of a CPU; the throughput may be the generator's limit, not \
                     the server's",
                    BUSY_LIMIT * 100.0
                )
            }
        );
    } else if shares_cpus(s) {
        let _ = writeln!(
            t,
            "Note:         the generator was ready to run but waiting for a CPU part of the time (busy above \
             its CPU): it shares cores with the server, so both numbers include that contention; pin them \
             apart (e.g. taskset -c 0 modus serve …, taskset -c 1 modus load …) to measure the server alone"
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
}

/// `--histogram-out`: the latency histograms — every answer's, then the
/// 2xx answers' — one after the other in HdrHistogram's V2 serialization
/// (uncompressed: the file is read back by [`read_histograms`], or by any
/// HdrHistogram library reading V2 one histogram after the other).
pub fn write_histograms(path: &Path, s: &Stats) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    use hdrhistogram::serialization::Serializer as _;
    let mut serializer = hdrhistogram::serialization::V2Serializer::new();
    for h in [&s.latency, &s.latency_2xx] {
        serializer.serialize(h, &mut bytes).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    }
    std::fs::write(path, bytes)
}

/// The histograms [`write_histograms`] wrote: every answer's and the 2xx answers'.
pub fn read_histograms(mut bytes: &[u8]) -> anyhow::Result<[Histogram<u64>; 2]> {
    let mut deserializer = hdrhistogram::serialization::Deserializer::new();
    let mut next = || -> anyhow::Result<Histogram<u64>> {
        deserializer.deserialize(&mut bytes).map_err(|e| anyhow::anyhow!("not a V2 histogram: {e:?}"))
    };
    Ok([next()?, next()?])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One late send in 400 stays in that request's latency; five in
    /// 400 (more than 1 %) mean the generator fell behind.
    #[test]
    fn a_rare_late_send_is_not_falling_behind() {
        let mut s = Stats::new(1);
        s.requests = 395;
        s.unfinished = 5;
        s.generator_late = 1;
        assert!(!too_often_late(&s));
        s.generator_late = 4;
        assert!(!too_often_late(&s), "exactly 1 %");
        s.generator_late = 5;
        assert!(too_often_late(&s));
        assert!(too_often_late(&Stats { generator_late: 1, ..Stats::new(1) }), "late with nothing sent");
    }

    use crate::stats::LoopUsage;

    fn stats(responses: &[(u16, u64)], failures: &[(ErrorKind, u64)]) -> Stats {
        let mut s = Stats::new(1);
        for &(code, n) in responses {
            s.requests += n;
            *s.status.entry(code).or_default() += n;
        }
        for &(kind, n) in failures {
            for _ in 0..n {
                s.error(kind);
            }
        }
        s
    }

    #[test]
    fn the_exit_status_rule() {
        let ok = Ending::default();
        assert_eq!(exit_status(&stats(&[(200, 10)], &[]), ok), 0);
        assert_eq!(exit_status(&stats(&[], &[]), ok), 1, "nothing sent");
        assert_eq!(exit_status(&stats(&[], &[(ErrorKind::Connect, 3)]), ok), 1);
        assert_eq!(
            exit_status(&stats(&[(200, 5)], &[(ErrorKind::Timeout, 5)]), ok),
            0,
            "half is not more than half"
        );
        assert_eq!(exit_status(&stats(&[(200, 4)], &[(ErrorKind::Reset, 5)]), ok), 1);
        let all_404 = stats(&[(404, 9)], &[(ErrorKind::Status4xx, 9)]);
        assert_eq!(exit_status(&all_404, ok), 0, "the server's answer, not a failure");
        assert!(no_success(&all_404).unwrap().contains("all 9 were 404 Not Found"));
        assert_eq!(no_success(&stats(&[(404, 1), (200, 1)], &[])), None);
        let by = |signal| Ending { interrupted_by: Some(signal) };
        assert_eq!(exit_status(&stats(&[(200, 1)], &[]), by("SIGINT")), 130);
        assert_eq!(exit_status(&stats(&[], &[]), by("SIGTERM")), 143);
    }

    #[test]
    fn a_closed_loop_generator_that_waits_for_a_cpu_has_not_fallen_behind() {
        let mut s = stats(&[(200, 1)], &[]);
        // Runnable 97% of the time, on a CPU 70%: it shares cores with the server.
        s.loops = vec![LoopUsage { busy: 0.97, cpu: 0.70 }];
        assert!(!saturated(false, &s));
        assert!(saturated(true, &s), "in the open loop a late send is booked as server queueing");
        assert!(shares_cpus(&s));
        s.loops = vec![LoopUsage { busy: 0.99, cpu: 0.95 }];
        assert!(saturated(false, &s), "a generator using a whole CPU is the limit");
    }
}
