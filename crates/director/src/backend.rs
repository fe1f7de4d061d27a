//! What the director knows about each backend: health (passive and
//! active), monitor verdict, the adaptive concurrency limit, requests in
//! flight, its pool of idle keep-alive connections; and the balancing
//! choice (least outstanding requests).
//!
//! # The adaptive concurrency limit
//!
//! Beyond the paper (whose only overload signal is the monitor), the
//! director measures each backend itself: every exchange yields a sample,
//! the time from the whole request (head and body) being written to the
//! backend to its response head (a slow upload is not backend latency), and
//! whether it failed (a 500/502/503/504, a timeout, a broken connection).
//! A [`Limiter`] turns the samples into a limit on requests in flight,
//! always within `[1, --max-backend-conns]`; admission uses the smaller of
//! it and the monitor's limit ([`Backend::limit`]). Samples are judged in
//! windows ([`WINDOW_SAMPLES`] for `gradient`, [`AIMD_WINDOW_SAMPLES`] for
//! `aimd`) so that one slow request moves nothing.
//!
//! * `aimd` (the default): additive increase, multiplicative decrease
//!   against a baseline, the 10th percentile of the window means of the
//!   last [`AIMD_HISTORY`] windows: a window whose mean exceeds
//!   `AIMD_TOLERANCE ·` the baseline multiplies the limit by [`BACKOFF`],
//!   else the limit grows by one (if at least half of it was in use). Both
//!   sides are means of whole windows (like with like), the windows are
//!   long enough that a request mix (half 10 ms CGI, half static files)
//!   varies their mean by about ±15 %, and a low percentile instead of the
//!   minimum keeps one lucky window from setting an unreachable baseline:
//!   with 16-sample windows and the minimum, such a mix looked "twice
//!   slower" in ~40 % of the windows and held an idle backend near 3. It is the default because it keeps holding the
//!   latency near the backend's unloaded one under *sustained* overload,
//!   the paper's case: measured with `bench/direct.sh` (now `lab/direct.toml`; before the windows
//!   grew from 16 to 64 exchanges; not re-measured yet) (modus prefork, one
//!   core, 50 % CGI, 200 clients) it settled at 2–4 requests in flight with
//!   the same throughput as 16, and a quarter of the backend latency.
//!   Judging window means rather than single requests keeps a mix of cheap
//!   static files and CPU-heavy CGI from setting an unreachable baseline.
//! * `gradient`, after Netflix's concurrency-limits Gradient2: a long-term
//!   exponential average of the latency (`long`, over about [`LONG_WINDOW`]
//!   windows) is the baseline; each window's mean latency (`short`) gives
//!   `gradient = clamp(TOLERANCE · long / short, 0.5, 1)`, and `new = limit ·
//!   gradient + √limit` (the square root is headroom for a queue at the
//!   backend, so the limit keeps probing upwards while the latency holds),
//!   smoothed as `limit = 0.8 · limit + 0.2 · new`. The limit does not grow
//!   while fewer than half of it are in use. If `long` exceeds twice `short`
//!   the baseline decays (5 % per window) so that it follows a backend that
//!   got faster. It reacts to latency *changes* (a backend slowing down);
//!   under overload that lasts, the baseline catches up with the overloaded
//!   latency and the limit climbs back to the maximum.
//! * `off`: the limit is `--max-backend-conns` (the paper's director).
//!
//! In every mode a window in which more than [`FAILURE_SHARE`] of the
//! exchanges failed multiplies the limit by [`BACKOFF`] (5xx and timeouts
//! are what an overloaded server produces; the share keeps an application
//! that fails one request in a hundred from wearing the limit down).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Samples per gradient limiter decision.
pub const WINDOW_SAMPLES: u32 = 16;
/// Samples per AIMD limiter decision.
pub const AIMD_WINDOW_SAMPLES: u32 = 64;
/// Windows in the gradient limiter's long-term average.
pub const LONG_WINDOW: f64 = 40.0;
/// How much slower than the baseline a window may be before the gradient
/// limiter shrinks the limit.
pub const TOLERANCE: f64 = 1.5;
/// The AIMD limiter's latency threshold, as a multiple of the minimum.
pub const AIMD_TOLERANCE: f64 = 2.0;
/// Window means the AIMD baseline is taken from (older ones are forgotten,
/// so a backend whose unloaded latency moved is measured afresh).
pub const AIMD_HISTORY: usize = 64;
/// The multiplicative decrease.
pub const BACKOFF: f64 = 0.9;
/// Share of failed exchanges in a window above which the limit backs off.
pub const FAILURE_SHARE: f64 = 0.1;
/// Weight of a new estimate in the gradient limiter.
const SMOOTHING: f64 = 0.2;

/// `--adaptive`: how the director limits concurrency from its own
/// measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adaptive {
    /// `--max-backend-conns` only.
    Off,
    /// Additive increase, multiplicative decrease on latency and errors.
    Aimd,
    /// Gradient2: latency trend against a long-term baseline.
    Gradient,
}

impl FromStr for Adaptive {
    type Err = String;
    fn from_str(s: &str) -> Result<Adaptive, String> {
        match s {
            "off" => Ok(Adaptive::Off),
            "aimd" => Ok(Adaptive::Aimd),
            "gradient" => Ok(Adaptive::Gradient),
            _ => Err(format!("unknown limiter {s:?} (off, aimd, gradient)")),
        }
    }
}

impl Adaptive {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Adaptive::Off => "off",
            Adaptive::Aimd => "aimd",
            Adaptive::Gradient => "gradient",
        }
    }
}

/// An adaptive concurrency limit fed with per-exchange samples.
#[derive(Clone, Debug)]
pub struct Limiter {
    mode: Adaptive,
    max: f64,
    limit: f64,
    /// Current window: samples, their latency sum, failures, and the most
    /// requests in flight seen.
    samples: u32,
    sum: Duration,
    failures: u32,
    busiest: usize,
    /// Gradient: the long-term baseline (seconds); `None` before the first
    /// window.
    long: Option<f64>,
    /// AIMD: the last window means (seconds), oldest first.
    history: VecDeque<f64>,
    /// The last window's mean latency (for the status page).
    last_rtt: Option<Duration>,
}

impl Limiter {
    /// A limiter starting at `max` (the first windows only ever lower it).
    pub fn new(mode: Adaptive, max: usize) -> Limiter {
        let max = max.max(1) as f64;
        Limiter {
            mode,
            max,
            limit: max,
            samples: 0,
            sum: Duration::ZERO,
            failures: 0,
            busiest: 0,
            long: None,
            history: VecDeque::with_capacity(AIMD_HISTORY),
            last_rtt: None,
        }
    }

    /// The limit now, an integer in `[1, max]`.
    pub fn limit(&self) -> usize {
        (self.limit.floor() as usize).clamp(1, self.max as usize)
    }

    /// The mode.
    pub fn mode(&self) -> Adaptive {
        self.mode
    }

    /// The last window's mean latency.
    pub fn last_rtt(&self) -> Option<Duration> {
        self.last_rtt
    }

    /// One exchange: its latency (sent → response head; for a failure, the
    /// time until it failed) and whether it failed; `inflight` is the
    /// backend's requests in flight when it was sent.
    pub fn sample(&mut self, latency: Duration, failed: bool, inflight: usize) {
        if self.mode == Adaptive::Off {
            return;
        }
        self.samples += 1;
        self.sum += latency;
        self.failures += u32::from(failed);
        self.busiest = self.busiest.max(inflight);
        let window = if self.mode == Adaptive::Aimd { AIMD_WINDOW_SAMPLES } else { WINDOW_SAMPLES };
        if self.samples >= window {
            self.decide();
        }
    }

    fn decide(&mut self) {
        let rtt = self.sum.as_secs_f64() / f64::from(self.samples);
        let failed = f64::from(self.failures) > FAILURE_SHARE * f64::from(self.samples);
        let used = self.busiest as f64 * 2.0 >= self.limit;
        self.last_rtt = Some(Duration::from_secs_f64(rtt));
        self.samples = 0;
        self.sum = Duration::ZERO;
        self.failures = 0;
        self.busiest = 0;
        let next = match self.mode {
            Adaptive::Off => self.limit,
            Adaptive::Gradient => {
                let long = match self.long {
                    None => rtt,
                    Some(long) => {
                        let mut long = long + (rtt - long) / LONG_WINDOW;
                        if long > 2.0 * rtt {
                            long *= 0.95;
                        }
                        long
                    }
                };
                self.long = Some(long);
                if failed {
                    self.limit * BACKOFF
                } else {
                    let gradient = if rtt > 0.0 { (TOLERANCE * long / rtt).clamp(0.5, 1.0) } else { 1.0 };
                    let estimate = self.limit * gradient + self.limit.sqrt();
                    let smoothed = self.limit * (1.0 - SMOOTHING) + estimate * SMOOTHING;
                    if smoothed > self.limit && !used {
                        self.limit
                    } else {
                        smoothed
                    }
                }
            }
            Adaptive::Aimd => {
                if self.history.len() == AIMD_HISTORY {
                    self.history.pop_front();
                }
                self.history.push_back(rtt);
                let mut means: Vec<f64> = self.history.iter().copied().collect();
                means.sort_by(f64::total_cmp);
                let baseline = means[means.len() / 10];
                if failed || rtt > AIMD_TOLERANCE * baseline {
                    self.limit * BACKOFF
                } else if used {
                    self.limit + 1.0
                } else {
                    self.limit
                }
            }
        };
        self.limit = next.clamp(1.0, self.max);
    }
}

/// Passive health: exchange outcomes in a sliding window, in buckets of a
/// sixteenth of it (memory stays bounded whatever the request rate). A
/// failure is a connect error, a timeout, a broken response or a 502/504
/// (nginx's default `proxy_next_upstream error timeout`, plus gateway
/// errors); a 500 or 503 is the application's answer, not a sick backend.
/// A backend is taken out when at least `threshold` failures fell in the
/// window *and* they are at least half of its exchanges, so a busy backend
/// that fails one request in ten stays in.
#[derive(Clone, Debug, Default)]
pub struct FailureWindow {
    /// (bucket start, exchanges, failures), oldest first.
    buckets: VecDeque<(Instant, u32, u32)>,
}

impl FailureWindow {
    /// Records an exchange at `now`; true if it failed and the window now
    /// holds at least `threshold` (> 0) failures making up at least half
    /// of its exchanges.
    pub fn record(&mut self, now: Instant, failed: bool, window: Duration, threshold: usize) -> bool {
        self.expire(now, window);
        match self.buckets.back_mut() {
            Some((start, total, failures)) if now.duration_since(*start) < window / 16 => {
                *total += 1;
                *failures += u32::from(failed);
            }
            _ => self.buckets.push_back((now, 1, u32::from(failed))),
        }
        let (total, failures) = self.counts();
        failed && threshold > 0 && failures as usize >= threshold && failures * 2 >= total
    }

    fn expire(&mut self, now: Instant, window: Duration) {
        while self.buckets.front().is_some_and(|&(t, _, _)| now.duration_since(t) > window) {
            self.buckets.pop_front();
        }
    }

    fn counts(&self) -> (u32, u32) {
        self.buckets.iter().fold((0, 0), |(t, f), &(_, total, failures)| (t + total, f + failures))
    }

    /// Forgets the outcomes (the backend came back).
    pub fn clear(&mut self) {
        self.buckets.clear();
    }

    /// Failures within `window` of `now`.
    pub fn recent(&self, now: Instant, window: Duration) -> usize {
        self.buckets
            .iter()
            .filter(|&&(t, _, _)| now.duration_since(t) <= window)
            .map(|&(_, _, f)| f as usize)
            .sum()
    }
}

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
    /// In rotation: reachable, not taken out by passive or active health.
    pub up: bool,
    /// Why it was last taken out (for the status page).
    pub down_reason: &'static str,
    /// Recent failures (passive health).
    pub failures: FailureWindow,
    /// Active checks: consecutive successes since the last failure.
    pub probe_successes: u32,
    /// Active checks that failed.
    pub probe_failures: u64,
    /// Active checks: consecutive failures since the last success.
    pub probe_failures_in_row: u32,
    /// The adaptive concurrency limit.
    pub limiter: Limiter,
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
    /// Responses with status 500, 502, 503 or 504.
    pub server_errors: u64,
}

impl Backend {
    /// A backend not yet known to be up: the first connection decides.
    pub fn new(name: String, addr: SocketAddr, monitored: bool, limiter: Limiter) -> Backend {
        Backend {
            name,
            addr,
            up: true,
            down_reason: "",
            failures: FailureWindow::default(),
            probe_successes: 0,
            probe_failures: 0,
            probe_failures_in_row: 0,
            limiter,
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
            server_errors: 0,
        }
    }

    /// The monitor's limit on requests in flight, given the configured
    /// maximum.
    pub fn monitor_limit(&self, max: usize) -> usize {
        match self.monitor {
            MonitorState::Off | MonitorState::Serviceable => max,
            MonitorState::Unknown => max.div_ceil(2),
            MonitorState::Overloaded => 0,
        }
    }

    /// Most requests in flight allowed now: the smaller of the monitor's
    /// and the adaptive limit.
    pub fn limit(&self, max: usize) -> usize {
        self.monitor_limit(max).min(self.limiter.limit())
    }

    /// Whether a new request may be sent here now. A `large` one (its
    /// target answered [`LARGE`] bytes or more last time) leaves a quarter of
    /// the slots to the others: a flood of large downloads then cannot hold
    /// every slot, which would make each small request wait for one of them
    /// to end (they share the backend, so they all end late together).
    pub fn has_room(&self, max: usize, large: bool) -> bool {
        let limit = self.limit(max);
        let kept_for_small = if large { limit / 4 } else { 0 };
        self.up && self.inflight + kept_for_small < limit
    }
}

/// From this many response bytes a request counts as large for
/// [`Backend::has_room`]: ten times SURGE's mean response.
pub const LARGE: u64 = 1 << 20;

/// The backend with room (for a `large` request, room beyond the slots kept
/// for small ones) and the fewest requests in flight; ties go round-robin
/// from `start`.
pub fn pick(backends: &[Backend], max: usize, start: usize, large: bool) -> Option<usize> {
    let n = backends.len();
    (0..n)
        .map(|i| (start + i) % n)
        .filter(|&i| backends[i].has_room(max, large))
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
                let mut b = Backend::new(
                    format!("b{i}"),
                    SocketAddr::from(([127, 0, 0, 1], 8000 + i as u16)),
                    false,
                    Limiter::new(Adaptive::Off, 10),
                );
                b.inflight = n;
                b
            })
            .collect()
    }

    #[test]
    fn least_outstanding_with_round_robin_ties() {
        let bs = backends(&[3, 1, 2]);
        assert_eq!(pick(&bs, 10, 0, false), Some(1));
        let bs = backends(&[1, 1, 1]);
        assert_eq!(pick(&bs, 10, 0, false), Some(0));
        assert_eq!(pick(&bs, 10, 1, false), Some(1));
        assert_eq!(pick(&bs, 10, 5, false), Some(2));
    }

    #[test]
    fn full_down_and_overloaded_backends_are_skipped() {
        let mut bs = backends(&[2, 0, 0]);
        bs[1].up = false;
        bs[2].monitor = MonitorState::Overloaded;
        assert_eq!(pick(&bs, 2, 0, false), None, "b0 full, b1 down, b2 overloaded");
        assert_eq!(pick(&bs, 3, 0, false), Some(0));
        bs[2].monitor = MonitorState::Unknown;
        assert_eq!(bs[2].limit(3), 2, "unknown: half the limit, rounded up");
        assert_eq!(pick(&bs, 3, 0, false), Some(2));
    }

    #[test]
    fn large_requests_leave_a_quarter_of_the_slots_to_small_ones() {
        let bs = backends(&[7, 7]);
        assert_eq!(pick(&bs, 8, 0, true), None, "6 of 8 is as far as a large one goes");
        assert_eq!(pick(&bs, 8, 0, false), Some(0));
        let bs = backends(&[5, 6]);
        assert_eq!(pick(&bs, 8, 0, true), Some(0));
        // One slot is not split: a large request may take it.
        assert_eq!(pick(&backends(&[0]), 1, 0, true), Some(0));
        assert_eq!(pick(&backends(&[2]), 3, 0, true), Some(0), "a quarter of 3 keeps none back");
    }

    fn window(l: &Limiter) -> u32 {
        if l.mode() == Adaptive::Aimd {
            AIMD_WINDOW_SAMPLES
        } else {
            WINDOW_SAMPLES
        }
    }

    fn feed(l: &mut Limiter, windows: u32, latency_ms: u64, failed: bool, inflight: usize) {
        for _ in 0..windows * window(l) {
            l.sample(Duration::from_millis(latency_ms), failed, inflight);
        }
    }

    #[test]
    fn the_effective_limit_is_the_smaller_of_monitor_and_limiter() {
        let mut b = backends(&[0]).remove(0);
        b.limiter = Limiter::new(Adaptive::Gradient, 8);
        assert_eq!(b.limit(8), 8);
        feed(&mut b.limiter, 5, 10, true, 8);
        let adaptive = b.limiter.limit();
        assert!(adaptive < 8, "{adaptive}");
        assert_eq!(b.limit(8), adaptive);
        b.monitor = MonitorState::Overloaded;
        assert_eq!(b.limit(8), 0);
    }

    #[test]
    fn gradient_shrinks_when_latency_rises_and_recovers_when_it_falls() {
        let mut l = Limiter::new(Adaptive::Gradient, 100);
        feed(&mut l, 20, 10, false, 100);
        assert_eq!(l.limit(), 100, "steady latency at full use keeps the maximum");
        feed(&mut l, 10, 60, false, 100);
        let low = l.limit();
        assert!(low < 60, "six times slower: the limit falls ({low})");
        feed(&mut l, 40, 10, false, 100);
        assert!(l.limit() > low, "latency back to normal: the limit grows again ({})", l.limit());
    }

    #[test]
    fn gradient_does_not_grow_while_underused_and_never_leaves_its_bounds() {
        let mut l = Limiter::new(Adaptive::Gradient, 50);
        feed(&mut l, 10, 100, true, 50);
        let low = l.limit();
        assert!(low < 50);
        feed(&mut l, 20, 100, false, 1);
        assert_eq!(l.limit(), low, "one request in flight says nothing about more");
        feed(&mut l, 500, 1000, true, 50);
        assert_eq!(l.limit(), 1, "clamped at one");
        feed(&mut l, 2000, 1, false, 50);
        assert_eq!(l.limit(), 50, "clamped at the maximum");
    }

    #[test]
    fn aimd_backs_off_on_latency_and_errors_and_adds_one_per_good_window() {
        let mut l = Limiter::new(Adaptive::Aimd, 20);
        feed(&mut l, 3, 10, true, 20);
        assert_eq!(l.limit(), 14, "20 · 0.9³ = 14.58");
        feed(&mut l, 1, 10, false, 20);
        assert_eq!(l.limit(), 15, "a good window adds one");
        feed(&mut l, 1, 50, false, 20);
        assert_eq!(l.limit(), 14, "over twice the minimum latency: back off");
        feed(&mut l, 2, 15, false, 3);
        assert_eq!(l.limit(), 14, "underused: no growth");
    }

    #[test]
    fn a_rare_failure_does_not_back_off() {
        let mut l = Limiter::new(Adaptive::Aimd, 20);
        for i in 0..AIMD_WINDOW_SAMPLES * 10 {
            l.sample(Duration::from_millis(10), i % 16 == 0, 20);
        }
        assert_eq!(l.limit(), 20, "one failure in sixteen is under the share");
        for i in 0..AIMD_WINDOW_SAMPLES {
            l.sample(Duration::from_millis(10), i % 4 == 0, 20);
        }
        assert_eq!(l.limit(), 18, "one in four is not");
    }

    /// A 50/50 mix of 10 ms CGI and 0.2 ms static files, in a
    /// pseudo-random order, at a constant concurrency.
    fn feed_mix(l: &mut Limiter, windows: u32, scale: f64, seed: &mut u64) {
        for _ in 0..windows * window(l) {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let ms = if (*seed >> 33) & 1 == 1 { 10.0 } else { 0.2 };
            l.sample(Duration::from_secs_f64(ms * scale / 1000.0), false, l.limit());
        }
    }

    #[test]
    fn aimd_holds_its_limit_under_a_bimodal_request_mix() {
        let mut l = Limiter::new(Adaptive::Aimd, 32);
        let mut seed = 7;
        feed_mix(&mut l, 500, 1.0, &mut seed);
        assert!(l.limit() >= 28, "the mix alone wore the limit down to {}", l.limit());
        // The same mix, but concurrency now makes every request 3× slower.
        feed_mix(&mut l, 10, 3.0, &mut seed);
        assert!(l.limit() < 24, "latency rose: the limit must drop ({})", l.limit());
    }

    #[test]
    fn off_ignores_samples() {
        let mut l = Limiter::new(Adaptive::Off, 7);
        feed(&mut l, 50, 1000, true, 7);
        assert_eq!(l.limit(), 7);
    }

    #[test]
    fn failures_take_a_backend_out_only_in_a_burst_and_as_a_share() {
        let start = Instant::now();
        let window = Duration::from_secs(2);
        let mut w = FailureWindow::default();
        for i in 0..4 {
            assert!(!w.record(start + Duration::from_secs(2 * i), true, window, 3), "spread out: {i}");
        }
        let later = start + Duration::from_secs(10);
        assert!(!w.record(later, true, window, 3));
        assert!(!w.record(later, true, window, 3));
        assert!(w.record(later, true, window, 3), "three within the window");
        assert!(!FailureWindow::default().record(later, true, window, 0), "threshold 0: passive health off");
        // A steady rate with one exchange in ten failing: never out.
        let mut w = FailureWindow::default();
        for i in 0..2000u32 {
            let at = later + Duration::from_millis(u64::from(i));
            assert!(!w.record(at, i % 10 == 0, window, 3), "1 in 10 failed, exchange {i}");
        }
        assert_eq!(w.recent(later + Duration::from_millis(1999), window), 200);
        // Then the backend fails everything: out once failures are half.
        let mut out_after = None;
        for i in 0..4000u32 {
            if w.record(later + Duration::from_millis(2000 + u64::from(i)), true, window, 3) {
                out_after = Some(i);
                break;
            }
        }
        let n = out_after.expect("all failing takes it out");
        assert!(n > 3 && n < 2000, "{n}");
    }
}
