//! The columns of a result: the sweep's axes and the metrics measured at
//! each point, as specs, claims, tables and plots name them.

/// The sweep's axes, as named in plots and claims.
pub const AXES: [&str; 6] = ["clients", "rate", "path", "cpus", "memory", "connection"];

/// The metrics a point has, with units (columns of `points.csv`). Results
/// written before a metric existed read it as NaN (shown as –), as do
/// metrics a server does not have (a peer's phases): empty cells.
pub const METRICS: [(&str, &str); 38] = [
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
    // Bytes the server's processes read from the disk (`/proc/PID/io`
    // read_bytes), per request: the page cache's misses.
    ("disk_read_per_req", "bytes"),
    // A modus server's own timing (`/status.json`): the mean per request
    // of its time (first byte → logged), of getting the document (from the
    // cache or the file: paper 003's "data read"), and of each phase.
    ("request_us", "µs"),
    ("data_us", "µs"),
    ("phase_read_us", "µs"),
    ("phase_parse_us", "µs"),
    ("phase_data_hit_us", "µs"),
    ("phase_data_miss_us", "µs"),
    ("phase_cgi_spawn_us", "µs"),
    ("phase_cgi_run_us", "µs"),
    ("phase_write_us", "µs"),
    ("phase_log_us", "µs"),
    ("phase_queue_us", "µs"),
    // The 2xx answers' latency alone (`modus load`'s `latency_2xx_us`): a
    // front's fast busy page, or an error page, left out.
    ("p50_2xx", "ms"),
    ("p99_2xx", "ms"),
    // 5xx answers other than the busy page (503): a director's own 502
    // and 504, a backend's 500s.
    ("other_5xx", "answers"),
    // How evenly a modus server's workers (threads, event loops, processes:
    // its `/status.json` scoreboard's lines) took the work during the
    // point: the most any took over the least (`probe::Scoreboard`), and
    // how many there were.
    ("worker_spread", "max/min"),
    ("workers", "lines"),
    // The load the point really held (`modus load`'s own counts): the
    // distinct users (SURGE users, or connections) that sent a measured
    // request; the load held over the load the point names (closed loop:
    // Little's law, throughput × (mean response time + mean think time) ÷
    // clients, the think time that spent inside the measured window per
    // request sent in it, so users in a long SURGE OFF time count as held;
    // open loop: throughput ÷ rate), below 0.9 the point is
    // under load (`results::under_load`); and 1 for a point that measured
    // nothing (its other metrics NaN, `results::failed`).
    ("users", "users"),
    ("held_load", "fraction"),
    ("failed", "0/1"),
    // How busy the machine was over the point (the load's whole run):
    // the CPU of the server's processes (and its front's) over the CPUs
    // they are pinned to, of the load generator over its CPUs, and of the
    // processes outside the experiment (`/proc/stat` minus the
    // experiment's own) over the whole machine; the busiest block
    // device's busy time (`/proc/diskstats` io_ticks); the bytes a shaped
    // link (`[network] rate`) carried over its rate (NaN without one).
    ("server_cpu_pct", "%"),
    ("load_cpu_pct", "%"),
    ("other_cpu_pct", "%"),
    ("disk_util_pct", "%"),
    ("link_util_pct", "%"),
    // From the point's request trace (the spec's `trace`, `trace.rs`): the
    // response times' standard deviation over their mean, and their
    // least-squares slope against arrival time (a queue building up).
    ("latency_cv", "ratio"),
    ("queue_slope", "ms/s"),
    // Clients whose request went unanswered through the whole measured
    // window (`modus load`'s `starved`: sent before it, still waiting at
    // its end) — the server's unfairness, seen: they count as held load.
    ("starved", "clients"),
];

/// The phases of `/status.json`'s `phases_us` within a request's time, in
/// the order of their `phase_NAME_us` columns.
pub const PHASES: [&str; 9] =
    ["read", "parse", "data_hit", "data_miss", "cgi_spawn", "cgi_run", "write", "log", "queue"];

/// The metric names, for error messages.
pub fn metric_names() -> String {
    METRICS.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
}

/// The metrics `pattern` names: one metric, or those starting with what
/// comes before a final `*` (`phase_*`).
pub fn matching(pattern: &str) -> Vec<&'static str> {
    let all = METRICS.iter().map(|(m, _)| *m);
    match pattern.strip_suffix('*') {
        Some(prefix) => all.filter(|m| m.starts_with(prefix)).collect(),
        None => all.filter(|m| *m == pattern).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_has_its_column_in_order() {
        let columns: Vec<String> = PHASES.iter().map(|p| format!("phase_{p}_us")).collect();
        assert_eq!(matching("phase_*"), columns);
        assert_eq!(matching("p99"), ["p99"]);
        assert!(matching("speed").is_empty() && matching("speed*").is_empty());
    }
}
