//! The columns of a result: the sweep's axes and the metrics measured at
//! each point, as specs, claims, tables and plots name them.

/// The sweep's axes, as named in plots and claims.
pub const AXES: [&str; 4] = ["clients", "rate", "path", "cpus"];

/// The metrics a point has, with units (columns of `points.csv`). Results
/// written before a metric existed read it as NaN (shown as –).
pub const METRICS: [(&str, &str); 10] = [
    ("throughput", "requests/s"),
    ("mean", "ms"),
    ("p50", "ms"),
    ("p99", "ms"),
    ("errors", "requests"),
    ("cpu_per_request", "µs"),
    ("pss", "KiB"),
    ("fell_behind", "0/1"),
    // Answers by kind: 2xx, and the busy page (503) a front or an
    // overloaded server sends instead of serving.
    ("goodput", "2xx/s"),
    ("busy", "503/s"),
];

/// The metric names, for error messages.
pub fn metric_names() -> String {
    METRICS.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
}
