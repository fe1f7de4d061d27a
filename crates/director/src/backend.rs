//! What the director knows about each backend: health, monitor verdict,
//! requests in flight, its pool of idle keep-alive connections; and the
//! balancing choice (least outstanding requests).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The monitor's word on a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MonitorState {
    /// No `--monitor-listen`: admission ignores monitoring.
    Off,
    /// Monitoring is on but this backend's monitor is silent (never
    /// connected, disconnected, or no report for three intervals). Not
    /// healthy: admission uses half the limit.
    Unknown,
    /// Reported OK.
    Serviceable,
    /// Reported OVER: no new requests are admitted (the paper's PEEK
    /// decision); those in flight finish.
    Overloaded,
}

impl MonitorState {
    /// For the status page.
    pub fn as_str(self) -> &'static str {
        match self {
            MonitorState::Off => "off",
            MonitorState::Unknown => "unknown",
            MonitorState::Serviceable => "ok",
            MonitorState::Overloaded => "overloaded",
        }
    }
}

/// One `--backend`.
#[derive(Debug)]
pub struct Backend {
    /// As given on the command line.
    pub name: String,
    /// Where to connect.
    pub addr: SocketAddr,
    /// Reachable: the last connection attempt succeeded.
    pub up: bool,
    /// The monitor's verdict.
    pub monitor: MonitorState,
    /// When the monitor last reported.
    pub monitor_seen: Option<Instant>,
    /// How long a report stays valid.
    pub monitor_valid: Duration,
    /// The last report's detail.
    pub monitor_detail: String,
    /// Requests attached to a connection of this backend.
    pub inflight: usize,
    /// Connected, unused keep-alive connections (tokens), most recent last.
    pub idle: Vec<u64>,
    /// Open or opening connections, idle or busy.
    pub conns: usize,
    /// Connections still opening.
    pub connecting: usize,
    /// Responses relayed.
    pub served: u64,
    /// Connection failures (connect refused or timed out).
    pub connect_failures: u64,
    /// Responses that failed (malformed, reset, timed out).
    pub errors: u64,
}

impl Backend {
    /// A backend not yet known to be up: the first connection decides.
    pub fn new(name: String, addr: SocketAddr, monitored: bool) -> Backend {
        Backend {
            name,
            addr,
            up: true,
            monitor: if monitored { MonitorState::Unknown } else { MonitorState::Off },
            monitor_seen: None,
            monitor_valid: Duration::from_secs(1),
            monitor_detail: String::new(),
            inflight: 0,
            idle: Vec::new(),
            conns: 0,
            connecting: 0,
            served: 0,
            connect_failures: 0,
            errors: 0,
        }
    }

    /// Most requests in flight allowed now, given the configured maximum.
    pub fn limit(&self, max: usize) -> usize {
        match self.monitor {
            MonitorState::Off | MonitorState::Serviceable => max,
            MonitorState::Unknown => max.div_ceil(2),
            MonitorState::Overloaded => 0,
        }
    }

    /// Whether a new request may be sent here now.
    pub fn has_room(&self, max: usize) -> bool {
        self.up && self.inflight < self.limit(max)
    }
}

/// The backend with room and the fewest requests in flight; ties go
/// round-robin from `start`.
pub fn pick(backends: &[Backend], max: usize, start: usize) -> Option<usize> {
    let n = backends.len();
    (0..n)
        .map(|i| (start + i) % n)
        .filter(|&i| backends[i].has_room(max))
        .min_by_key(|&i| backends[i].inflight)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backends(inflight: &[usize]) -> Vec<Backend> {
        inflight
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let mut b =
                    Backend::new(format!("b{i}"), SocketAddr::from(([127, 0, 0, 1], 8000 + i as u16)), false);
                b.inflight = n;
                b
            })
            .collect()
    }

    #[test]
    fn least_outstanding_with_round_robin_ties() {
        let bs = backends(&[3, 1, 2]);
        assert_eq!(pick(&bs, 10, 0), Some(1));
        let bs = backends(&[1, 1, 1]);
        assert_eq!(pick(&bs, 10, 0), Some(0));
        assert_eq!(pick(&bs, 10, 1), Some(1));
        assert_eq!(pick(&bs, 10, 5), Some(2));
    }

    #[test]
    fn full_down_and_overloaded_backends_are_skipped() {
        let mut bs = backends(&[2, 0, 0]);
        bs[1].up = false;
        bs[2].monitor = MonitorState::Overloaded;
        assert_eq!(pick(&bs, 2, 0), None, "b0 full, b1 down, b2 overloaded");
        assert_eq!(pick(&bs, 3, 0), Some(0));
        bs[2].monitor = MonitorState::Unknown;
        assert_eq!(bs[2].limit(3), 2, "unknown: half the limit, rounded up");
        assert_eq!(pick(&bs, 3, 0), Some(2));
    }
}
