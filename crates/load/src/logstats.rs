//! `modus workload stats DIR`, of a directory of either origin: the files
//! checked against the stream, then SURGE's parameters, or what
//! `modus workload from-log` found beside SURGE's.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

use serde_json::Value;

use crate::fromlog::{self, SESSION_GAP_S};
use crate::surge;

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

/// `modus workload stats DIR`: the manifest's parameters and realised
/// distributions, after checking the files on disk against the stream.
pub fn stats(dir: &Path) -> Result<String> {
    let text = fs::read_to_string(dir.join(surge::MANIFEST_FILE)).with_context(|| {
        format!("{}: not a workload directory (no {})", dir.display(), surge::MANIFEST_FILE)
    })?;
    let m: Value = serde_json::from_str(&text).context("parsing the manifest")?;
    let stream =
        std::io::BufReader::new(fs::File::open(dir.join(surge::STREAM_FILE)).context("reading the stream")?);
    let mut checked = std::collections::HashSet::new();
    let mut bad = 0;
    let mut n = 0;
    for line in std::io::BufRead::lines(stream) {
        let line = line?;
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let e = surge::StreamEntry::parse(&line)?;
        n += 1;
        let Some(size) = e.size else { continue };
        if checked.insert(e.path.clone()) {
            let file = fromlog::file_of(e.path.as_bytes()).unwrap_or_default();
            let meta = fs::metadata(dir.join(surge::DOCS_DIR).join(file));
            if meta.map(|m| m.len()).ok() != Some(size) {
                bad += 1;
            }
        }
    }
    let mut out = String::new();
    if m["generator"] == "modus workload from-log" {
        out = describe(dir, &m);
    } else {
        let _ = writeln!(out, "workload {}", dir.display());
        let _ = writeln!(out, "  {}", m["reference"].as_str().unwrap_or(""));
        surge_parameters(&mut out, &m);
    }
    let _ = writeln!(
        out,
        "checked: {n} requests, {} distinct files on disk, {bad} missing or of the wrong size",
        checked.len()
    );
    if bad > 0 {
        bail!("{out}{bad} files are missing or of the wrong size");
    }
    Ok(out)
}

fn surge_parameters(out: &mut String, m: &Value) {
    let _ = writeln!(out, "parameters:");
    if let Some(o) = m["parameters"].as_object() {
        for (k, v) in o {
            let _ = writeln!(out, "  {k:<20} {v}");
        }
    }
    let _ = writeln!(out, "realised:");
    if let Some(o) = m["realised"].as_object() {
        for (k, v) in o {
            let v = match v.as_f64() {
                Some(f) if f.fract() != 0.0 => format!("{f:.4}"),
                _ => v.to_string(),
            };
            let _ = writeln!(out, "  {k:<24} {v}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fromlog::{from_log, FromLogParams};

    /// A directory of either origin is checked file by file against its
    /// stream and described as what made it; a file gone is said.
    #[test]
    fn stats_checks_and_describes_a_surge_or_a_log_directory() {
        let dir = tempfile::tempdir().unwrap();
        let surge_dir = dir.path().join("surge");
        let p = surge::SurgeParams { files: 50, requests: 500, users: 5, seed: 2, max_size: 4096 };
        surge::generate(&p, &surge_dir).unwrap();
        let text = stats(&surge_dir).unwrap();
        assert!(text.contains("0 missing") && text.contains("parameters:"), "{text}");

        let log = dir.path().join("access.log");
        let line = |t: &str, path: &str, size: u32| {
            format!("10.0.0.1 - - [01/Jan/2024:00:00:0{t} +0000] \"GET {path} HTTP/1.1\" 200 {size} \"-\" \"ua\"\n")
        };
        fs::write(
            &log,
            [line("0", "/a.html", 10), line("1", "/b.png", 20), line("2", "/a.html", 12)].concat(),
        )
        .unwrap();
        let from = dir.path().join("from");
        let p = FromLogParams {
            inputs: vec![log],
            anonymize: false,
            speed: 1.0,
            window: (None, None),
            cgi_ms: None,
            seed: 1,
        };
        from_log(&p, &from).unwrap();
        let text = stats(&from).unwrap();
        assert!(text.contains("(modus workload from-log)") && text.contains("0 missing"), "{text}");
        fs::remove_file(from.join(surge::DOCS_DIR).join("b.png")).unwrap();
        let e = format!("{:#}", stats(&from).unwrap_err());
        assert!(e.contains("1 files are missing or of the wrong size"), "{e}");
    }
}
