//! Paper 000's figures 7–9 from a point's request trace: a modus server
//! run with `--trace FILE --trace-sample FRACTION` (spec key `trace`)
//! writes one CSV row per sampled request (`pipeline::stats::trace`:
//! arrival, service start and service end in µs since the server
//! started). From it, per point, [`metrics`]: `latency_cv` (how uneven
//! the response times are: RBW's) and `queue_slope` (how they grow over
//! the point: TBW's queue building up); and the scatter of
//! `[[plot]] kind = "trace"` (`report.rs`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// One traced request, its times relative to the first arrival traced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    /// When its first byte came (s since the first traced arrival).
    pub arrival_s: f64,
    /// When its response was out (s since the first traced arrival).
    pub end_s: f64,
    /// End minus arrival (ms).
    pub response_ms: f64,
}

/// Where the trace of the point whose raw record is `raw` is kept:
/// `raw/<point>-trace.csv` beside `raw/<point>.json`.
pub fn path_for(raw: &Path) -> PathBuf {
    let stem = raw.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    raw.with_file_name(format!("{stem}-trace.csv"))
}

/// The requests of a trace CSV (its columns by name), in arrival order.
pub fn parse(text: &str) -> Result<Vec<Request>> {
    let mut lines = text.lines();
    let names: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let column = |name: &str| names.iter().position(|n| *n == name);
    let (Some(arrival), Some(end)) = (column("arrival_us"), column("service_end_us")) else {
        bail!("not a request trace (no arrival_us and service_end_us columns)");
    };
    let mut rows: Vec<(f64, f64)> = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        // The path (quoted, may hold commas) comes after the times.
        let fields: Vec<&str> = line.splitn(arrival.max(end) + 2, ',').collect();
        let number = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        match (number(arrival), number(end)) {
            (Some(a), Some(e)) => rows.push((a, e)),
            // A row cut short by a server killed mid-write: left out.
            _ => continue,
        }
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = rows.first().map_or(0.0, |r| r.0);
    Ok(rows
        .into_iter()
        .map(|(a, e)| Request {
            arrival_s: (a - first) / 1e6,
            end_s: (e - first) / 1e6,
            response_ms: (e - a).max(0.0) / 1e3,
        })
        .collect())
}

/// [`parse`] of a file.
pub fn read(path: &Path) -> Result<Vec<Request>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("in {}", path.display()))
}

/// `latency_cv` (the response times' standard deviation over their mean)
/// and `queue_slope` (the least-squares slope of response time against
/// arrival time, ms per s); NaN for fewer than two requests (or all at
/// one instant, for the slope).
pub fn metrics(requests: &[Request]) -> (f64, f64) {
    let n = requests.len() as f64;
    if requests.len() < 2 {
        return (f64::NAN, f64::NAN);
    }
    let mean_y = requests.iter().map(|r| r.response_ms).sum::<f64>() / n;
    let mean_x = requests.iter().map(|r| r.arrival_s).sum::<f64>() / n;
    let var_y = requests.iter().map(|r| (r.response_ms - mean_y).powi(2)).sum::<f64>() / n;
    let cv = if mean_y > 0.0 { var_y.sqrt() / mean_y } else { f64::NAN };
    let sxx: f64 = requests.iter().map(|r| (r.arrival_s - mean_x).powi(2)).sum();
    let sxy: f64 = requests.iter().map(|r| (r.arrival_s - mean_x) * (r.response_ms - mean_y)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { f64::NAN };
    (cv, slope)
}

/// The metrics of the trace at `path`: NaN when there is none (no `trace`
/// in the spec, a peer) or it cannot be read.
pub fn metrics_of(path: Option<&Path>) -> [f64; 2] {
    let Some(requests) = path.and_then(|p| read(p).ok()) else { return [f64::NAN; 2] };
    let (cv, slope) = metrics(&requests);
    [cv, slope]
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "conn,arrival_us,service_start_us,service_end_us,wait_us,read_us,parse_us,\
data_us,data,cgi_us,write_us,log_us,queue_us,status,bytes,path,worker\n";

    fn row(arrival_us: u64, end_us: u64) -> String {
        format!("1,{arrival_us},{arrival_us},{end_us},,,,,hit,,,,,200,500,\"/a,b\",1/w\n")
    }

    /// A queue that grows 20 ms every second: response = 10 ms + 20 ms/s ×
    /// arrival; the slope is 20 ms/s, whatever order the rows came in.
    #[test]
    fn a_growing_queue_has_its_slope() {
        let mut text = HEADER.to_string();
        for i in (0..11u64).rev() {
            let arrival = 5_000_000 + i * 100_000; // every 0.1 s from 5 s
            let response = 10_000 + 20 * i * 100; // 20 ms per s of arrival, in µs
            text.push_str(&row(arrival, arrival + response));
        }
        let requests = parse(&text).unwrap();
        assert_eq!(requests.len(), 11);
        assert_eq!(requests[0].arrival_s, 0.0, "from the first arrival, in order");
        assert!((requests[10].arrival_s - 1.0).abs() < 1e-9);
        assert!((requests[0].response_ms - 10.0).abs() < 1e-9);
        assert!((requests[10].end_s - 1.03).abs() < 1e-9);
        let (_, slope) = metrics(&requests);
        assert!((slope - 20.0).abs() < 1e-6, "{slope}");
    }

    /// Responses of 1 ms and 3 ms, half each: mean 2, standard deviation
    /// 1, CV 0.5, and no trend; even ones: CV 0.
    #[test]
    fn uneven_latency_has_its_cv() {
        let mut text = HEADER.to_string();
        for i in 0..100u64 {
            // 1, 3, 3, 1, …: symmetric in every block of four, so no trend.
            text.push_str(&row(i * 1000, i * 1000 + if i % 4 == 0 || i % 4 == 3 { 1000 } else { 3000 }));
        }
        let (cv, slope) = metrics(&parse(&text).unwrap());
        assert!((cv - 0.5).abs() < 1e-9, "{cv}");
        assert!(slope.abs() < 1e-6, "{slope}");
        let even: String = std::iter::once(HEADER.to_string())
            .chain((0..10u64).map(|i| row(i * 1000, i * 1000 + 2000)))
            .collect();
        let (cv, slope) = metrics(&parse(&even).unwrap());
        assert_eq!(cv, 0.0);
        assert!(slope.abs() < 1e-9);
    }

    #[test]
    fn too_little_or_no_trace_is_nan() {
        let one = format!("{HEADER}{}", row(0, 10));
        assert!(metrics(&parse(&one).unwrap()).0.is_nan());
        assert!(parse("a,b\n1,2\n").is_err());
        assert!(metrics_of(None).iter().all(|v| v.is_nan()));
        assert!(metrics_of(Some(Path::new("/nonexistent/t.csv"))).iter().all(|v| v.is_nan()));
        // A row cut short is left out.
        let cut = format!("{HEADER}{}{}1,5", row(0, 10), row(10, 30));
        assert_eq!(parse(&cut).unwrap().len(), 2);
        assert_eq!(
            path_for(Path::new("/r/raw/pool-c4-p0-u0-r1.json")),
            Path::new("/r/raw/pool-c4-p0-u0-r1-trace.csv")
        );
    }
}
