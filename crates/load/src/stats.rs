//! Per-thread recording (HdrHistograms, counters, a per-second series, the
//! optional per-request timeline), merged after the run.

use std::collections::{BTreeMap, BTreeSet};

use hdrhistogram::Histogram;

/// Largest latency recorded exactly (µs): one hour. Longer ones saturate.
pub const MAX_US: u64 = 3_600_000_000;

/// Kinds of failed requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// connect() failed or timed out.
    Connect,
    /// No complete response within `--timeout`.
    Timeout,
    /// ECONNRESET / EPIPE.
    Reset,
    /// The server closed the connection before a complete response head.
    Closed,
    /// A complete response with status 400–499.
    Status4xx,
    /// A complete response with status 500–599.
    Status5xx,
    /// The connection closed before Content-Length (or the last chunk) was read.
    ShortBody,
    /// An unparsable response, or bytes nobody asked for.
    Parse,
    /// The body length differs from the size the workload says the file has.
    Size,
    /// `--checksum`: the body differs from the file on disk (`--workload`)
    /// or from an earlier body of the same URL.
    Checksum,
    /// Open loop: the arrival found the send queue full and was never sent.
    Dropped,
}

impl ErrorKind {
    /// All kinds, in report order.
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Closed,
        ErrorKind::Status4xx,
        ErrorKind::Status5xx,
        ErrorKind::ShortBody,
        ErrorKind::Parse,
        ErrorKind::Size,
        ErrorKind::Checksum,
        ErrorKind::Dropped,
    ];

    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Closed => "closed",
            ErrorKind::Status4xx => "status_4xx",
            ErrorKind::Status5xx => "status_5xx",
            ErrorKind::ShortBody => "short_body",
            ErrorKind::Parse => "parse",
            ErrorKind::Size => "size_mismatch",
            ErrorKind::Checksum => "checksum_mismatch",
            ErrorKind::Dropped => "dropped",
        }
    }

    /// What it means, in the words of the text report.
    pub fn describe(self) -> &'static str {
        match self {
            ErrorKind::Connect => "could not connect",
            ErrorKind::Timeout => "no response within --timeout",
            ErrorKind::Reset => "connection reset",
            ErrorKind::Closed => "closed before a response",
            ErrorKind::Status4xx => "4xx responses",
            ErrorKind::Status5xx => "5xx responses",
            ErrorKind::ShortBody => "body cut short",
            ErrorKind::Parse => "malformed response",
            ErrorKind::Size => "body size differs from the workload's",
            ErrorKind::Checksum => "body differs (--checksum)",
            ErrorKind::Dropped => "dropped arrivals (--max-queue full)",
        }
    }

    /// Did the request get a complete (if unwelcome) response?
    pub fn has_response(self) -> bool {
        matches!(self, ErrorKind::Status4xx | ErrorKind::Status5xx | ErrorKind::Size | ErrorKind::Checksum)
    }
}

/// Why a connection could not be opened, as a person would say it.
pub fn connect_failure(e: &std::io::Error) -> String {
    use std::io::ErrorKind as Io;
    match e.kind() {
        Io::ConnectionRefused => "connection refused (is the server running on that port?)".into(),
        Io::AddrNotAvailable => "address not available (out of local ports: see --spread-source)".into(),
        Io::TimedOut => "connection timed out".into(),
        Io::ConnectionReset => "connection reset by peer".into(),
        Io::PermissionDenied => "permission denied (a firewall rule?)".into(),
        _ => {
            // std's message ends with " (os error N)": the words are enough.
            let text = e.to_string();
            let words = text.split(" (os error").next().unwrap_or(&text);
            words.to_lowercase()
        }
    }
}

/// A latency histogram in µs (3 significant digits, 1 µs to 1 h).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds")
}

fn histogram_coarse() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 2).expect("valid histogram bounds")
}

/// One second of the run.
#[derive(Clone, Debug)]
pub struct Second {
    /// Responses completed in this second.
    pub requests: u64,
    /// Failed requests in this second.
    pub errors: u64,
    /// Bytes read in this second.
    pub bytes: u64,
    /// Connections established in this second.
    pub connects: u64,
    /// Latency (from intended start) of the responses completed in it.
    pub latency: Histogram<u64>,
}

impl Default for Second {
    fn default() -> Self {
        Second { requests: 0, errors: 0, bytes: 0, connects: 0, latency: histogram_coarse() }
    }
}

/// One request of the timeline (µs since the run started).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// When the schedule (or the user) wanted it sent.
    pub intended_us: u64,
    /// When it was written (or its connection started, with `--close`).
    pub actual_us: u64,
    /// First response byte (0 if none).
    pub first_byte_us: u64,
    /// Completion or failure.
    pub end_us: u64,
    /// Status, or 0 on a failure without a response.
    pub status: u16,
    /// Wire bytes read for it.
    pub bytes: u64,
    /// Target index.
    pub target: u32,
    /// The error, if it failed.
    pub error: Option<ErrorKind>,
}

/// Per-class recording.
#[derive(Clone, Debug)]
pub struct ClassStats {
    /// Latency from intended start.
    pub latency: Histogram<u64>,
    /// Bytes read.
    pub bytes: u64,
    /// Failed requests.
    pub errors: u64,
}

/// What one thread (and, merged, the run) recorded.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Latency from the *intended* send time (coordinated-omission corrected).
    pub latency: Histogram<u64>,
    /// Latency from the actual send time (what an uncorrected tool reports).
    pub service: Histogram<u64>,
    /// [`latency`](Self::latency) of the 2xx answers only: a front's fast
    /// busy page (503) or an error page would flatter the percentiles of
    /// the requests actually served.
    pub latency_2xx: Histogram<u64>,
    /// Time to first byte, from the actual send.
    pub ttfb: Histogram<u64>,
    /// Send lag: actual minus intended send time.
    pub send_lag: Histogram<u64>,
    /// Per class.
    pub classes: Vec<ClassStats>,
    /// The time series.
    pub per_second: Vec<Second>,
    /// Complete responses (any status).
    pub requests: u64,
    /// Bytes read (heads and bodies as on the wire).
    pub bytes: u64,
    /// Body bytes (after removing chunked coding).
    pub body_bytes: u64,
    /// Connections established.
    pub connects: u64,
    /// TLS handshakes completed (`https://`): full ones unless `--tls-resume`.
    pub handshakes: u64,
    /// Responses by status code.
    pub status: BTreeMap<u16, u64>,
    /// Errors by kind (index as [`ErrorKind::ALL`]).
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Open loop: arrivals dropped because the send queue was full.
    pub dropped: u64,
    /// Open loop: arrivals that found every connection busy and waited.
    pub queued: u64,
    /// Sends later than the lag threshold.
    pub late_sends: u64,
    /// Arrivals (and think-time ends) the generator itself noticed later
    /// than the threshold: its own delay, not the server's.
    pub generator_late: u64,
    /// Largest such lateness (µs).
    pub generator_max_lag_us: u64,
    /// Requests re-sent after a kept-alive connection closed before answering.
    pub retries: u64,
    /// Requests still in flight or queued when the duration ended.
    pub unfinished: u64,
    /// Requests completed during the warm-up (not recorded).
    pub warmup_requests: u64,
    /// µs (since measurement start) of the last completion.
    pub last_end_us: u64,
    /// Per request, with `--timeline`.
    pub timeline: Vec<Row>,
    /// Why connections could not be opened, in plain words, with counts.
    pub connect_failures: BTreeMap<String, u64>,
    /// Per event-loop thread, in thread order.
    pub loops: Vec<LoopUsage>,
    /// Who sent at least one request in the measured window: the SURGE
    /// users of a replayed stream's closed loop, else the connections (by
    /// their index in the run).
    pub users_active: BTreeSet<u32>,
    /// Think (OFF) time spent inside the measured window (µs; a think
    /// that began before it or runs on past its end, for its time inside),
    /// and the requests sent in the window.
    pub think_us_sum: u64,
    pub think_count: u64,
    /// Time requests spent waiting for their answer inside the measured
    /// window (µs; from the send, or the window's start for one sent in
    /// the warm-up, to the answer, or the window's end for one still
    /// unanswered): the integral of the requests outstanding, so a request
    /// the server never answers counts for all its time, not only the
    /// answered ones as throughput × mean latency would.
    pub outstanding_us_sum: u64,
    /// Requests still unanswered when the run ended, and of those, the
    /// ones sent before the measured window began: they waited through all
    /// of it (a client the server starved).
    pub waiting_at_end: u64,
    pub starved: u64,
}

/// How hard one event-loop thread worked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoopUsage {
    /// Fraction of its wall time spent outside the epoll wait (running, or
    /// runnable but without a CPU): near 1, it could not keep up.
    pub busy: f64,
    /// Its CPU time over its wall time.
    pub cpu: f64,
}

impl Stats {
    /// Empty, with `classes` classes.
    pub fn new(classes: usize) -> Stats {
        Stats {
            latency: histogram(),
            service: histogram(),
            latency_2xx: histogram(),
            ttfb: histogram(),
            send_lag: histogram(),
            classes: (0..classes).map(|_| ClassStats { latency: histogram(), bytes: 0, errors: 0 }).collect(),
            per_second: Vec::new(),
            requests: 0,
            bytes: 0,
            body_bytes: 0,
            connects: 0,
            handshakes: 0,
            status: BTreeMap::new(),
            errors: [0; ErrorKind::ALL.len()],
            dropped: 0,
            queued: 0,
            late_sends: 0,
            generator_late: 0,
            generator_max_lag_us: 0,
            retries: 0,
            unfinished: 0,
            warmup_requests: 0,
            last_end_us: 0,
            timeline: Vec::new(),
            connect_failures: BTreeMap::new(),
            loops: Vec::new(),
            users_active: BTreeSet::new(),
            think_us_sum: 0,
            think_count: 0,
            outstanding_us_sum: 0,
            waiting_at_end: 0,
            starved: 0,
        }
    }

    /// The bucket for `us` µs after measurement start.
    pub fn second(&mut self, us: u64) -> &mut Second {
        let i = (us / 1_000_000) as usize;
        if self.per_second.len() <= i {
            self.per_second.resize_with(i + 1, Second::default);
        }
        &mut self.per_second[i]
    }

    /// Counts an error.
    pub fn error(&mut self, kind: ErrorKind) {
        let i = ErrorKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.errors[i] += 1;
    }

    /// Total errors (every kind, dropped open-loop arrivals included).
    pub fn total_errors(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Errors without a complete response (transport failures).
    pub fn transport_errors(&self) -> u64 {
        ErrorKind::ALL.iter().zip(self.errors).filter(|(k, _)| !k.has_response()).map(|(_, n)| n).sum()
    }

    /// Adds another thread's recording.
    pub fn merge(&mut self, o: Stats) {
        self.latency.add(&o.latency).expect("same bounds");
        self.service.add(&o.service).expect("same bounds");
        self.latency_2xx.add(&o.latency_2xx).expect("same bounds");
        self.ttfb.add(&o.ttfb).expect("same bounds");
        self.send_lag.add(&o.send_lag).expect("same bounds");
        for (a, b) in self.classes.iter_mut().zip(o.classes) {
            a.latency.add(&b.latency).expect("same bounds");
            a.bytes += b.bytes;
            a.errors += b.errors;
        }
        if self.per_second.len() < o.per_second.len() {
            self.per_second.resize_with(o.per_second.len(), Second::default);
        }
        for (a, b) in self.per_second.iter_mut().zip(o.per_second) {
            a.requests += b.requests;
            a.errors += b.errors;
            a.bytes += b.bytes;
            a.connects += b.connects;
            a.latency.add(&b.latency).expect("same bounds");
        }
        self.requests += o.requests;
        self.bytes += o.bytes;
        self.body_bytes += o.body_bytes;
        self.connects += o.connects;
        self.handshakes += o.handshakes;
        for (s, n) in o.status {
            *self.status.entry(s).or_default() += n;
        }
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        for (why, n) in o.connect_failures {
            *self.connect_failures.entry(why).or_default() += n;
        }
        self.dropped += o.dropped;
        self.queued += o.queued;
        self.late_sends += o.late_sends;
        self.generator_late += o.generator_late;
        self.generator_max_lag_us = self.generator_max_lag_us.max(o.generator_max_lag_us);
        self.retries += o.retries;
        self.unfinished += o.unfinished;
        self.warmup_requests += o.warmup_requests;
        self.last_end_us = self.last_end_us.max(o.last_end_us);
        self.timeline.extend(o.timeline);
        self.loops.extend(o.loops);
        self.users_active.extend(o.users_active);
        self.think_us_sum += o.think_us_sum;
        self.think_count += o.think_count;
        self.outstanding_us_sum += o.outstanding_us_sum;
        self.waiting_at_end += o.waiting_at_end;
        self.starved += o.starved;
    }

    /// The think (OFF) time (µs) applied in the measured window per
    /// request sent in it: its mean think time, with the thinks cut at the
    /// window's ends (a short window of long OFF times would otherwise
    /// count only the short ones that ended in it, and Little's law would
    /// under-read the users held); 0 without think times.
    pub fn think_mean_us(&self) -> f64 {
        if self.think_count == 0 {
            0.0
        } else {
            self.think_us_sum as f64 / self.think_count as f64
        }
    }

    /// Little's law over `duration_s` measured seconds, from the time
    /// integrals themselves: the requests outstanding on average (the time
    /// requests waited inside the window over its length) and, for a closed
    /// loop, the users held (that plus the think time inside the window,
    /// over its length: every user is either waiting for an answer or
    /// thinking, unless the generator failed to send) — in an open loop
    /// there are no users to hold. A client the server leaves unanswered
    /// counts as held: the load was applied; `starved` says it went unserved.
    pub fn held(&self, duration_s: f64, open_loop: bool) -> (f64, Option<f64>) {
        let window_us = duration_s.max(1e-9) * 1e6;
        let in_flight = self.outstanding_us_sum as f64 / window_us;
        let users = (!open_loop).then(|| in_flight + self.think_us_sum as f64 / window_us);
        (in_flight, users)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_everything() {
        let mut a = Stats::new(2);
        let mut b = Stats::new(2);
        a.latency.record(100).unwrap();
        b.latency.record(300).unwrap();
        b.latency_2xx.record(300).unwrap();
        b.classes[1].latency.record(7).unwrap();
        a.second(500_000).requests += 1;
        b.second(2_500_000).requests += 2;
        b.error(ErrorKind::Timeout);
        *b.status.entry(200).or_default() += 3;
        a.merge(b);
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.latency_2xx.len(), 1);
        assert_eq!(a.classes[1].latency.len(), 1);
        assert_eq!(a.per_second.iter().map(|s| s.requests).collect::<Vec<_>>(), [1, 0, 2]);
        assert_eq!(a.total_errors(), 1);
        assert_eq!(a.transport_errors(), 1);
        assert_eq!(a.status[&200], 3);
    }

    /// Little's law from a synthetic run: 2 s measured, 1,000 responses
    /// each outstanding 4 ms and each after a 16 ms think: 2 requests in
    /// flight, 10 users held; then a starved client, unanswered through the
    /// whole window, adds one to each; three users of the two threads sent
    /// something.
    #[test]
    fn users_think_and_littles_law() {
        let mut a = Stats::new(1);
        let mut b = Stats::new(1);
        for (s, n) in [(&mut a, 600), (&mut b, 400)] {
            for _ in 0..n {
                s.latency.record(4000).unwrap();
                s.requests += 1;
                s.outstanding_us_sum += 4000;
                s.think_us_sum += 16_000;
                s.think_count += 1;
            }
        }
        a.users_active.extend([0, 7]);
        b.users_active.extend([7, 9]);
        a.merge(b);
        assert_eq!(a.users_active.len(), 3, "a user counts once");
        assert_eq!(a.think_mean_us(), 16_000.0);
        let (in_flight, held) = a.held(2.0, false);
        assert!((in_flight - 2.0).abs() < 0.01, "{in_flight}");
        assert!((held.unwrap() - 10.0).abs() < 0.05, "{held:?}");
        assert_eq!(a.held(2.0, true).1, None, "an open loop holds no users");
        // Nothing sent: nothing held, no think time.
        let none = Stats::new(1);
        assert_eq!((none.think_mean_us(), none.held(1.0, false)), (0.0, (0.0, Some(0.0))));
        // One client left unanswered from before the window to its end.
        b = Stats::new(1);
        b.outstanding_us_sum = 2_000_000;
        b.waiting_at_end = 1;
        b.starved = 1;
        a.merge(b);
        let (in_flight, held) = a.held(2.0, false);
        assert!(
            (in_flight - 3.0).abs() < 0.01 && (held.unwrap() - 11.0).abs() < 0.05,
            "{in_flight} {held:?}"
        );
        assert_eq!((a.waiting_at_end, a.starved), (1, 1));
    }
}
