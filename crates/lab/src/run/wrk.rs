//! wrk as a point's load generator (`generator = "wrk"`): the client the
//! peers' own benchmarks use, beside `modus load`.
//!
//! Why a second client: a server's CPU per request on loopback is not its
//! own alone. The kernel runs much of the receiving side's TCP work —
//! queueing the segments, waking the reader — in the sender's context, so
//! how a client reads (how often it sleeps, how much it takes a call)
//! moves the *server's* figure. On this project's 2-vCPU guest, 1 MB with
//! keep-alive cost modus `event` about 4 times more CPU per request under
//! `modus load` than under wrk, while lighttpd moved the other way: a
//! ranking that holds for one client only is a finding about the pair,
//! and the lab says which client measured it.
//!
//! wrk is closed loop only (its connections back to back), reports no
//! histogram, and has no warm-up of its own: the warm-up is a run of its
//! own before the measured one, outside the CPU window.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The command of one wrk run against `url`.
pub(super) fn command(
    cpus: Option<&str>,
    ns: Option<&str>,
    url: &str,
    clients: usize,
    seconds: Duration,
    close: bool,
    timeout: Option<Duration>,
) -> Command {
    let mut wrk = super::process::pinned(Path::new("wrk"), cpus, ns);
    // One thread, as `modus load` runs on the generator's one CPU.
    wrk.args(["-t1", "-c", &clients.to_string(), "-d", &whole_seconds(seconds), "--latency"]);
    if close {
        // wrk opens a new connection for each response that closes one.
        wrk.args(["-H", "Connection: close"]);
    }
    if let Some(t) = timeout {
        wrk.args(["--timeout", &whole_seconds(t)]);
    }
    wrk.arg(url);
    wrk
}

/// wrk takes whole seconds (`-d 3s`); a fraction rounds up, at least 1.
fn whole_seconds(d: Duration) -> String {
    format!("{}s", d.as_secs_f64().ceil().max(1.0) as u64)
}

/// Runs wrk for the warm-up, its output dropped.
pub(super) fn warm_up(command: Command) -> Result<()> {
    let mut command = command;
    let out = command.output().context("running wrk (apt-get install wrk)")?;
    if !out.status.success() {
        bail!("wrk failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// A `modus load --json` report made of wrk's text output, with the
/// fields the lab reads; `cpu_ns` is wrk's own CPU time over the run, for
/// whether the generator was the limit (as `modus load` says it: a loop
/// busy more than 90 % of a CPU); `close`: a connection per request.
pub(super) fn report(text: &str, clients: usize, cpu_ns: u64, close: bool) -> Result<Value> {
    let mut requests = None;
    let mut seconds = None;
    let mut bytes = 0.0;
    let mut mean_us = None;
    let mut quantiles = serde_json::Map::new();
    let mut socket_errors = 0.0;
    let mut non_2xx_3xx = 0.0;
    let mut in_distribution = false;
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", "Distribution", ..] => in_distribution = true,
            ["Latency", avg, ..] if mean_us.is_none() => mean_us = micros(avg),
            [q, value] if in_distribution && q.ends_with('%') => {
                let name = match *q {
                    "50%" => "p50",
                    "75%" => "p75",
                    "90%" => "p90",
                    "99%" => "p99",
                    _ => continue,
                };
                if let Some(us) = micros(value) {
                    quantiles.insert(name.into(), json!(us));
                }
            }
            [n, "requests", "in", took, amount, "read"] => {
                in_distribution = false;
                requests = n.parse::<f64>().ok();
                seconds = took.trim_end_matches(',').strip_suffix('s').and_then(|s| s.parse::<f64>().ok());
                bytes = byte_count(amount).unwrap_or(0.0);
            }
            ["Socket", "errors:", rest @ ..] => {
                socket_errors = rest.iter().filter_map(|w| w.trim_end_matches(',').parse::<f64>().ok()).sum();
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => non_2xx_3xx = n.parse().unwrap_or(0.0),
            _ => {}
        }
    }
    let (Some(requests), Some(seconds)) = (requests, seconds.filter(|s| *s > 0.0)) else {
        bail!("wrk printed no result line (`N requests in Ts, B read`): {}", text.trim());
    };
    let mean = mean_us.unwrap_or(f64::NAN);
    let ok = (requests - non_2xx_3xx).max(0.0);
    let mut latency = quantiles;
    latency.insert("mean".into(), json!(mean));
    // wrk prints no maximum in its distribution; its "Max" column is the
    // thread's, which `Latency`'s third figure is.
    latency.insert("max".into(), json!(max_us(text).unwrap_or(mean)));
    let throughput = requests / seconds;
    let busy = cpu_ns as f64 / 1e9 / seconds;
    Ok(json!({
        "generator": "wrk",
        "requests": requests as u64,
        "warmup_requests": 0,
        "duration_s": seconds,
        "throughput_rps": throughput,
        "bytes": bytes,
        "bytes_per_s": bytes / seconds,
        "errors": (socket_errors + non_2xx_3xx) as u64,
        "status": { "2xx or 3xx": ok as u64, "other": non_2xx_3xx as u64 },
        "latency_us": Value::Object(latency.clone()),
        // wrk does not tell the 2xx answers' latency apart: all of them.
        "latency_2xx_us": Value::Object(latency),
        // Little's law over the measured window, as `modus load` states
        // it — with keep-alive only: wrk times a request from its write,
        // a new connection's connect outside it, so on `close` the law
        // would count connections opening as not held. There, whether the
        // generator was the limit is its CPU's to say.
        "held_users": if close { Value::Null } else { json!(throughput * mean / 1e6) },
        "users_active": clients,
        "generator_busy": [busy],
        "generator_fell_behind": busy > 0.9,
        "waiting_at_end": 0,
    }))
}

/// `Latency`'s maximum, the third figure of its line.
fn max_us(text: &str) -> Option<f64> {
    let line =
        text.lines().map(str::trim).find(|l| l.starts_with("Latency") && !l.contains("Distribution"))?;
    micros(line.split_whitespace().nth(3)?)
}

/// wrk's durations: `812.00us`, `3.75ms`, `1.02s`, `2.00m`.
fn micros(word: &str) -> Option<f64> {
    let (number, scale) = if let Some(n) = word.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = word.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = word.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = word.strip_suffix('m') {
        (n, 60e6)
    } else if let Some(n) = word.strip_suffix('h') {
        (n, 3600e6)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}

/// wrk's byte counts: `11.22GB`, `512.00KB`, `900B` (binary units).
fn byte_count(word: &str) -> Option<f64> {
    let units = [("TB", 1u64 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10), ("B", 1)];
    units.iter().find_map(|(unit, scale)| Some(word.strip_suffix(unit)?.parse::<f64>().ok()? * *scale as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "Running 3s test @ http://127.0.0.1:18081/1m.bin
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    12.74ms    3.37ms  60.32ms   91.80%
    Req/Sec     3.84k   835.28     4.63k    90.00%
  Latency Distribution
     50%   11.90ms
     75%   13.02ms
     90%   15.50ms
     99%  812.00us
  11473 requests in 3.01s, 11.22GB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:   3812.43
Transfer/sec:      3.73GB
";

    #[test]
    fn wrks_output_becomes_the_report_the_lab_reads() {
        let r = report(OUTPUT, 50, 2_000_000_000, false).unwrap();
        assert_eq!(r["requests"], 11473);
        assert_eq!(r["duration_s"], 3.01);
        assert!((r["throughput_rps"].as_f64().unwrap() - 11473.0 / 3.01).abs() < 1e-9);
        assert_eq!(r["latency_us"]["mean"], 12740.0);
        assert_eq!(r["latency_us"]["p50"], 11900.0);
        assert_eq!(r["latency_us"]["p99"], 812.0);
        assert_eq!(r["latency_us"]["max"], 60320.0);
        assert_eq!(r["errors"], 10);
        assert_eq!(r["status"]["2xx or 3xx"], 11466);
        assert!((r["bytes"].as_f64().unwrap() - 11.22 * (1u64 << 30) as f64).abs() < 1.0);
        // 2 s of CPU over 3.01 s: the generator was not the limit.
        assert_eq!(r["generator_fell_behind"], false);
        let held = r["held_users"].as_f64().unwrap();
        assert!((held - 11473.0 / 3.01 * 0.01274).abs() < 1e-6, "{held}");
        assert_eq!(report(OUTPUT, 50, 2_900_000_000, false).unwrap()["generator_fell_behind"], true);
        assert!(report(OUTPUT, 50, 0, true).unwrap()["held_users"].is_null());
    }

    #[test]
    fn an_output_without_its_result_line_is_an_error_not_a_zero() {
        let err = report("unable to connect to 127.0.0.1:1 Connection refused\n", 50, 0, false).unwrap_err();
        assert!(err.to_string().contains("no result line"), "{err}");
    }

    #[test]
    fn wrks_units_read_as_microseconds_and_bytes() {
        assert_eq!(micros("812.00us"), Some(812.0));
        assert_eq!(micros("3.75ms"), Some(3750.0));
        assert_eq!(micros("1.50s"), Some(1.5e6));
        assert_eq!(micros("2.00m"), Some(120e6));
        assert_eq!(micros("12"), None);
        assert_eq!(byte_count("900B"), Some(900.0));
        assert_eq!(byte_count("2.00KB"), Some(2048.0));
        assert_eq!(whole_seconds(Duration::from_millis(2500)), "3s");
        assert_eq!(whole_seconds(Duration::from_millis(10)), "1s");
    }
}
