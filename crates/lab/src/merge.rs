//! Several load generators, one measurement: their `modus load --json`
//! reports summed — requests, errors, statuses, throughput, the users
//! held — and their latency HdrHistograms (`--histogram-out`) merged with
//! `Histogram::add`, so the percentiles are those of every request of
//! every generator, exactly as one generator recording them all would
//! give them, not an average of percentiles.

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

/// One generator's run: its report and its histograms (every answer's,
/// the 2xx answers').
pub struct Generated {
    pub host: String,
    pub report: Value,
    pub histograms: [Histogram<u64>; 2],
}

/// `a` and `b` merged: every value recorded in either, counted once.
pub fn merge_histograms(a: &Histogram<u64>, b: &Histogram<u64>) -> Result<Histogram<u64>> {
    let mut merged = a.clone();
    // Auto-resize: a generator's histogram of other bounds still merges.
    merged.auto(true);
    merged.add(b).map_err(|e| anyhow!("merging histograms: {e:?}"))?;
    Ok(merged)
}

const SUMMED: [&str; 16] = [
    "requests",
    "errors",
    "resent",
    "connect_failures",
    "bytes",
    "body_bytes",
    "throughput_rps",
    "bytes_per_s",
    "connections_opened",
    "connections_per_s",
    "warmup_requests",
    "users_active",
    "held_users",
    "in_flight_mean",
    "waiting_at_end",
    "starved",
];

/// The generators' reports as one: the first's shape, counts and rates
/// summed, the latencies from the merged histograms, the longest
/// duration, "fell behind" if any did, a failure only if none answered;
/// and `generators`, each one's host, requests and histogram count.
pub fn merge_reports(runs: &[Generated]) -> Result<Value> {
    let first = runs.first().ok_or_else(|| anyhow!("no generator ran"))?;
    let mut merged = first.report.clone();
    let [mut all, mut ok] = first.histograms.clone();
    for run in &runs[1..] {
        all = merge_histograms(&all, &run.histograms[0])?;
        ok = merge_histograms(&ok, &run.histograms[1])?;
    }
    for key in SUMMED {
        let values: Vec<f64> = runs.iter().filter_map(|r| r.report[key].as_f64()).collect();
        if values.len() == runs.len() {
            let sum: f64 = values.iter().sum();
            merged[key] =
                if runs.iter().all(|r| r.report[key].is_u64()) { json!(sum as u64) } else { json!(sum) };
        }
    }
    let mut status = Map::new();
    for r in runs {
        for (code, n) in r.report["status"].as_object().into_iter().flatten() {
            let sum = status.get(code).and_then(Value::as_u64).unwrap_or(0) + n.as_u64().unwrap_or(0);
            status.insert(code.clone(), json!(sum));
        }
    }
    merged["status"] = Value::Object(status);
    merged["duration_s"] =
        json!(runs.iter().filter_map(|r| r.report["duration_s"].as_f64()).fold(0.0, f64::max));
    let any = |key: &str| runs.iter().any(|r| r.report[key] == true);
    merged["generator_fell_behind"] = json!(any("generator_fell_behind"));
    merged["generator_saturated"] = json!(any("generator_saturated"));
    merged["generator_shares_cpus"] = json!(any("generator_shares_cpus"));
    merged["latency_us"] = load::report::pct(&all);
    merged["latency_2xx_us"] = load::report::pct(&ok);
    merged["histogram_count"] = json!(all.len());
    let requests = merged["requests"].as_u64().unwrap_or(0);
    merged["failure"] = if requests == 0 {
        runs.iter()
            .find_map(|r| r.report["failure"].as_str().map(|f| json!(format!("{}: {f}", r.host))))
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    // The per-second series are each generator's own clock: not summed.
    merged.as_object_mut().map(|m| m.remove("per_second"));
    merged["generators"] = runs
        .iter()
        .map(|r| {
            json!({"host": r.host, "requests": r.report["requests"], "throughput_rps": r.report["throughput_rps"],
                   "histogram_count": r.histograms[0].len(), "latency_us": r.report["latency_us"],
                   "failure": r.report["failure"], "generator_fell_behind": r.report["generator_fell_behind"]})
        })
        .collect();
    Ok(merged)
}

/// `total` split over `n` generators as evenly as whole numbers allow
/// (the first ones take one more).
pub fn split(total: usize, n: usize) -> Vec<usize> {
    (0..n).map(|i| total / n + usize::from(i < total % n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = load::stats::histogram();
        for v in values {
            h.record(v).unwrap();
        }
        h
    }

    /// Merged, two generators' histograms are the histogram of all their
    /// values: the same count, the same percentiles, to the bucket.
    #[test]
    fn merged_histograms_are_exactly_the_histogram_of_all_values() {
        let a: Vec<u64> = (1..=5000).map(|i| i * 7 % 3001 + 100).collect();
        let b: Vec<u64> = (1..=3000).map(|i| i * 13 % 90_001 + 5000).collect();
        let merged = merge_histograms(&histogram(a.clone()), &histogram(b.clone())).unwrap();
        let all = histogram(a.iter().chain(&b).copied());
        assert_eq!(merged.len(), 8000);
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(merged.value_at_quantile(q), all.value_at_quantile(q), "q {q}");
        }
        assert_eq!(merged, all);
        // Averaging the two p99s would say something else entirely.
        let averaged = (histogram(a).value_at_quantile(0.99) + histogram(b).value_at_quantile(0.99)) / 2;
        assert_ne!(averaged, all.value_at_quantile(0.99));
    }

    /// What `--histogram-out` writes reads back to the same histograms.
    #[test]
    fn the_v2_serialization_round_trips() {
        use hdrhistogram::serialization::{Serializer as _, V2Serializer};
        let (h1, h2) = (histogram([10, 20, 30_000]), histogram([10, 20]));
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&h1, &mut bytes).unwrap();
        V2Serializer::new().serialize(&h2, &mut bytes).unwrap();
        let [r1, r2] = load::report::read_histograms(&bytes).unwrap();
        assert_eq!((r1, r2), (h1, h2));
        assert!(load::report::read_histograms(b"garbage").is_err());
    }

    #[test]
    fn reports_sum_counts_and_take_percentiles_from_the_merge() {
        let run = |host: &str, requests: u64, values: &[u64]| Generated {
            host: host.into(),
            report: json!({"requests": requests, "errors": 1, "throughput_rps": requests as f64 / 2.0,
                           "status": {"200": requests, "503": 1}, "duration_s": 2.0, "generator_fell_behind": host == "b",
                           "failure": null, "per_second": []}),
            histograms: [histogram(values.iter().copied()), histogram(values.iter().copied())],
        };
        let merged = merge_reports(&[run("a", 3, &[100, 200, 300]), run("b", 2, &[1000, 2000])]).unwrap();
        assert_eq!(merged["requests"], 5);
        assert_eq!(merged["errors"], 2);
        assert_eq!(merged["status"]["200"], 5);
        assert_eq!(merged["status"]["503"], 2);
        assert_eq!(merged["throughput_rps"], 2.5);
        assert_eq!(merged["histogram_count"], 5);
        assert_eq!(merged["generator_fell_behind"], true);
        assert_eq!(merged["latency_us"]["max"].as_u64().unwrap(), histogram([2000]).max());
        assert_eq!(merged["generators"].as_array().unwrap().len(), 2);
        assert!(merged.get("per_second").is_none());
        assert!(merged["failure"].is_null());
    }

    #[test]
    fn users_and_rates_split_evenly() {
        assert_eq!(split(5, 2), vec![3, 2]);
        assert_eq!(split(4, 2), vec![2, 2]);
        assert_eq!(split(1, 2), vec![1, 0]);
    }
}
