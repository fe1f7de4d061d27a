//! What `modus workload from-log` found: the manifest it writes, and
//! `modus workload stats` of such a directory, beside SURGE's parameters.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::fit;
use crate::fromlog::{Counts, Doc, FromLogParams, REORDER_S, SESSION_GAP_S};
use crate::surge;

/// Most buckets of the rate over time kept in the manifest.
const RATE_BUCKETS: usize = 48;

/// The manifest of a workload made from a log.
pub(crate) fn manifest(
    p: &FromLogParams,
    docs: &[Doc],
    users: usize,
    c: &Counts,
    read_s: (f64, f64),
) -> Value {
    let mut sizes: Vec<u64> = docs.iter().filter(|d| !d.cgi).map(|d| d.size).collect();
    let counts: Vec<u64> = docs.iter().filter(|d| !d.cgi).map(|d| d.requests).collect();
    let sf = fit::size_mixture(&sizes, 133_000.0);
    sizes.sort_unstable();
    let total: u64 = sizes.iter().sum();
    let span_s = c.first.map_or(0, |f| c.last - f + 1).max(1);
    // The rate over time, in at most RATE_BUCKETS buckets.
    let per = c.rate.counts.len().div_ceil(RATE_BUCKETS).max(1);
    let width = per as u64 * c.rate.width_s;
    let rates: Vec<f64> = c
        .rate
        .counts
        .chunks(per)
        .map(|b| b.iter().sum::<u64>() as f64 / width as f64)
        .map(|r| (r * 1000.0).round() / 1000.0)
        .collect();
    let q = |h: &hdrhistogram::Histogram<u64>, q: f64| {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q) as f64 / 1e3
        }
    };
    json!({
        "schema": 1,
        "generator": "modus workload from-log",
        "reference": "fitted to the models of Barford & Crovella, Generating Representative Web Workloads for Network and Server Performance Evaluation, SIGMETRICS 1998 (SURGE), Table 2",
        "parameters": {
            "inputs": p.inputs.iter().map(|i| i.display().to_string()).collect::<Vec<_>>(),
            "anonymize": p.anonymize, "speed": p.speed,
            "window": [p.window.0, p.window.1], "cgi_ms": p.cgi_ms, "seed": p.seed,
            "session_gap_s": SESSION_GAP_S, "reorder_s": REORDER_S,
            "size_tail_k": sf.k,
        },
        "realised": {
            "lines": c.lines,
            "requests": c.requests,
            "users": users,
            "sessions": c.sessions,
            "documents": sizes.len(),
            "cgi_targets": docs.iter().filter(|d| d.cgi).count(),
            "cgi_requests": c.cgi_requests,
            "cgi_share": if c.requests > 0 { c.cgi_requests as f64 / c.requests as f64 } else { 0.0 },
            "span_s": span_s,
            "mean_rate_rps": c.requests as f64 / span_s as f64,
            "peak_second_rps": c.peak_second,
            "zipf_exponent_mle": fit::zipf_mle(&counts),
            "zipf_slope_ls": ls_slope(&counts),
            "size_body_mu": sf.mu, "size_body_sigma": sf.sigma,
            "size_tail_alpha": sf.alpha, "size_tail_fraction": sf.tail_fraction,
            "size_censored_at_max": sf.censored,
            "size_min": sizes.first().copied().unwrap_or(0),
            "size_median": sizes.get(sizes.len() / 2).copied().unwrap_or(0),
            "size_mean": if sizes.is_empty() { 0.0 } else { total as f64 / sizes.len() as f64 },
            "size_max": sizes.last().copied().unwrap_or(0),
            "total_bytes": total,
            "think_median_s": q(&c.think_ms, 0.5),
            "think_p90_s": q(&c.think_ms, 0.9),
            "think_gaps": c.think_ms.len(),
            "read_s": read_s.0,
            "read_cpu_s": read_s.1,
            "lines_per_cpu_s": c.lines as f64 / read_s.1.max(1e-9),
        },
        "skipped": c.skipped,
        "rate": {"bucket_s": width, "rps": rates},
    })
}

/// The least-squares log-log slope (negated), SURGE's own check.
fn ls_slope(counts: &[u64]) -> f64 {
    let mut c: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
    c.sort_unstable_by(|a, b| b.cmp(a));
    if c.len() > 1 {
        -surge::zipf_slope(&c)
    } else {
        0.0
    }
}

/// `modus workload stats` of a from-log directory.
pub fn describe(dir: &std::path::Path, m: &Value) -> String {
    let r = &m["realised"];
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let mut out = String::new();
    let _ = writeln!(out, "workload {} (modus workload from-log)", dir.display());
    let inputs: Vec<&str> =
        m["parameters"]["inputs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let _ = writeln!(out, "  from {}", inputs.join(", "));
    let _ = writeln!(
        out,
        "  {} lines: {} requests replayed, {} skipped",
        r["lines"],
        r["requests"],
        m["skipped"].as_object().map_or(0, |o| o.values().filter_map(Value::as_u64).sum::<u64>())
    );
    let _ = writeln!(
        out,
        "  users (address + user agent): {}, sessions (gaps over {} s split them): {}; think time median {:.3} s, p90 {:.3} s",
        r["users"],
        SESSION_GAP_S,
        r["sessions"],
        f("think_median_s"),
        f("think_p90_s")
    );
    let _ = writeln!(
        out,
        "  documents: {} ({} bytes); CGI: {} targets, {} requests ({:.1} %)",
        r["documents"],
        r["total_bytes"],
        r["cgi_targets"],
        r["cgi_requests"],
        f("cgi_share") * 100.0
    );
    let _ = writeln!(
        out,
        "  span {} s, mean {:.2} req/s, busiest second {} requests (replayed at speed {})",
        r["span_s"],
        f("mean_rate_rps"),
        r["peak_second_rps"],
        m["parameters"]["speed"]
    );
    let _ = writeln!(out, "fitted (SURGE beside):");
    let _ = writeln!(
        out,
        "  popularity  Zipf exponent {:.3} (MLE; least squares on log-log {:.3})   SURGE {:.3}",
        f("zipf_exponent_mle"),
        f("zipf_slope_ls"),
        surge::ZIPF_EXPONENT
    );
    let _ = writeln!(
        out,
        "  size body   lognormal μ {:.3} σ {:.3} (ln bytes)                 SURGE μ 9.357 σ 1.318",
        f("size_body_mu"),
        f("size_body_sigma")
    );
    if f("size_tail_fraction") > 0.0005 {
        let _ = writeln!(
            out,
            "  size tail   Pareto k {} α {:.3}, {:.1} % of files ({} censored at the max)   SURGE α 1.1, 7 %",
            m["parameters"]["size_tail_k"],
            f("size_tail_alpha"),
            f("size_tail_fraction") * 100.0,
            r["size_censored_at_max"]
        );
    } else {
        let _ = writeln!(
            out,
            "  size tail   none: no file above k = {} reads as a Pareto tail           SURGE α 1.1, 7 %",
            m["parameters"]["size_tail_k"]
        );
    }
    let _ = writeln!(
        out,
        "  sizes       min {} median {} mean {:.0} max {}",
        r["size_min"],
        r["size_median"],
        f("size_mean"),
        r["size_max"]
    );
    let rates: Vec<f64> =
        m["rate"]["rps"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
    let top = rates.iter().copied().fold(0.0, f64::max);
    let _ = writeln!(out, "request rate over time ({} s buckets):", m["rate"]["bucket_s"]);
    for (i, r) in rates.iter().enumerate() {
        let bar = if top > 0.0 { (r / top * 40.0).round() as usize } else { 0 };
        let at = i as u64 * m["rate"]["bucket_s"].as_u64().unwrap_or(60);
        let _ = writeln!(out, "  +{at:>7} s {r:>10.2} req/s {}", "#".repeat(bar));
    }
    let _ = writeln!(out, "skipped lines:");
    match m["skipped"].as_object() {
        Some(o) if !o.is_empty() => {
            for (why, n) in o {
                let _ = writeln!(out, "  {n:>10}  {why}");
            }
        }
        _ => {
            let _ = writeln!(out, "  none");
        }
    }
    out
}
