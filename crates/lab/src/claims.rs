//! Claims: comparisons over the results that the report turns into
//! verdicts, checked at every point of the sweep.
//!
//! ```text
//! claim := side OP side              OP := >= | <= | > | <
//! side  := [NUMBER *] METRIC(server=NAME[, AXIS=VALUE]...)  |  NUMBER
//! ```
//!
//! e.g. `throughput(server=event) >= 0.8 * throughput(server=pool)`, or
//! `throughput(server=pool, cpus=0-1) >= 1.5 * throughput(server=pool, cpus=0)`.
//! The claim is checked at every measured point of the sweep; an
//! `AXIS=VALUE` fixes that coordinate of its side.
//!
//! # Verdicts that know the noise
//!
//! A point's repeats are paired by their repeat number: the rounds are
//! interleaved (`run::schedule`), so repeat *r* of both sides ran in the
//! same round, under the same conditions of the machine. For each pair the
//! ratio *left_r ÷ right_r* is taken, the claim's factors applied (a number
//! side is the same in every pair; a side with fixed coordinates uses that
//! point's repeat *r*), so the claim wants it ≥ 1 (or ≤ 1). The point's
//! **interval** is the lowest and the highest of those ratios (min–max of
//! the paired repeats, [`interval`]); its middle is the ratio of the means.
//! The point
//!
//! * **holds** when every paired repeat clears the threshold — the whole
//!   interval is on the claim's side of it;
//! * **does not hold** when every paired repeat misses it;
//! * is **within noise** otherwise: the repeats disagree.
//!
//! For `>` and `<`, equality misses. With one repeat the interval is the
//! point: one repeat cannot tell noise, and the verdict says so.
//!
//! A point where either side was **under load** — the load generator fell
//! behind (`fell_behind`), the point held less than 90 % of the load it
//! names (`held_load`; closed loop only: in the open loop a server past
//! saturation serves less than it is offered, which is its answer, not a
//! load not applied), or it measured nothing (`failed`) — in any of its
//! repeats is never counted, either way: its numbers are not the server's
//! at the load the claim names. (Results written before those columns
//! existed read them as NaN: measured normally.)
//!
//! The claim: **holds** when every counted point holds, **does not hold**
//! when no counted point holds and at least one misses (the others within
//! noise: a clear miss anywhere is enough to refute a claim made of every
//! point), is **within noise** when every counted point is, **holds
//! partly** when some hold and others miss or are within noise, is **not at the load it names**
//! when no point was counted, and has **no data** when no point measured
//! both sides.
//!
//! # A reason for every verdict
//!
//! From each side's own measurements at the points that decide the verdict
//! ([`Verdict::reason`]): which resource was saturated — the server's CPU
//! (`server_cpu_pct` ≥ 85 % of its CPUs), the load generator
//! (`load_cpu_pct` ≥ 85 %, or it fell behind), the disk (`disk_util_pct` ≥
//! 60 %, with the bytes read per request), the link (`link_util_pct` ≥
//! 85 %) — or that nothing was, and how busy the server was.

use std::collections::BTreeMap;

use anyhow::{bail, Result};

use crate::columns::{metric_names, AXES, METRICS};
use crate::results::{Coords, Table};

/// Per point: every paired repeat clears the threshold.
pub const HOLDS: &str = "holds";
/// Per point: every paired repeat misses it.
pub const DOES_NOT_HOLD: &str = "does not hold";
/// Per point: the repeats disagree; per claim: every counted point did.
pub const WITHIN_NOISE: &str = "within noise";
/// Per point: a side's generator fell behind, it held less than 90 % of
/// its load, or it failed; never counted.
pub const UNDER_LOAD: &str = "under load";
/// Per claim: some counted points hold, others not.
pub const HOLDS_PARTLY: &str = "holds partly";
/// Per claim: no point was counted (each was under load).
pub const NOT_AT_THE_LOAD: &str = "not at the load it names";
/// Per claim: no point measured both sides.
pub const NO_DATA: &str = "no data";

pub use crate::results::HELD_LOAD_MIN;
/// Saturation thresholds (%): the server's CPU, the generator's, the
/// disk's busy time and the link's rate.
pub const SERVER_CPU_SATURATED: f64 = 85.0;
pub const LOAD_CPU_SATURATED: f64 = 85.0;
pub const DISK_SATURATED: f64 = 60.0;
pub const LINK_SATURATED: f64 = 85.0;
/// Above this share of the machine (%) used by processes outside the
/// experiment, a point's machine was busy.
pub const OTHER_CPU_BUSY: f64 = 10.0;

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub enum Side {
    Number(f64),
    Metric { factor: f64, metric: String, server: String, fixed: Vec<(String, String)> },
}

/// A parsed claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub left: Side,
    pub op: Op,
    pub right: Side,
}

/// The comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Ge,
    Le,
    Gt,
    Lt,
}

impl Op {
    /// Whether `l OP r` (equality misses `>` and `<`).
    pub fn test(self, l: f64, r: f64) -> bool {
        match self {
            Op::Ge => l >= r,
            Op::Le => l <= r,
            Op::Gt => l > r,
            Op::Lt => l < r,
        }
    }

    /// As written.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Ge => "≥",
            Op::Le => "≤",
            Op::Gt => ">",
            Op::Lt => "<",
        }
    }
}

/// What the results say of a claim at one point.
#[derive(Clone, Debug, PartialEq)]
pub struct PointVerdict {
    /// Where, as people read it (where the left side was measured).
    pub at: String,
    /// The left and the right side's means over the paired repeats, as
    /// measured (the claim's factor not applied; a number side: the number).
    /// NaN when nothing was paired (a failed point).
    pub left: f64,
    pub right: f64,
    /// The ratio left ÷ right, the claim's factors applied (the claim
    /// wants it ≥ 1, or ≤ 1): the lowest and the highest over the paired
    /// repeats, and the ratio of the means. NaN where a right side is 0.
    pub lo: f64,
    pub mid: f64,
    pub hi: f64,
    /// The repeats paired.
    pub repeats: usize,
    /// `holds`, `does not hold`, `within noise` or `under load`.
    pub word: &'static str,
    /// What limited the point, from its sides' own measurements (or why
    /// it is under load).
    pub reason: String,
    /// The sides' servers' use of the machine here, for the claim's reason.
    pub usage: Vec<Usage>,
}

impl PointVerdict {
    /// Counted in the claim's verdict: not under load.
    pub fn counted(&self) -> bool {
        self.word != UNDER_LOAD
    }
}

/// What the results say of a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// `holds`, `does not hold`, `within noise`, `holds partly`, `not at
    /// the load it names` or `no data`.
    pub word: &'static str,
    /// Per point measured.
    pub points: Vec<PointVerdict>,
    /// Why, from the measurements at the points that decide the verdict:
    /// what was saturated there, or that nothing was.
    pub reason: String,
}

impl Verdict {
    /// How many counted points got each word: (holds, within noise, does
    /// not hold, under load).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let n = |w: &str| self.points.iter().filter(|p| p.word == w).count();
        (n(HOLDS), n(WITHIN_NOISE), n(DOES_NOT_HOLD), n(UNDER_LOAD))
    }

    /// The most repeats any point paired (1: no noise could be told).
    pub fn repeats(&self) -> usize {
        self.points.iter().map(|p| p.repeats).max().unwrap_or(0)
    }
}

/// How the verdicts are reached, in words, for the reports.
pub const METHOD: &str = "Each claim is a ratio of its two sides, checked at every point. A point's ratio is shown \
as mid (lo–hi): mid is the ratio of the means over the repeats; lo–hi is the lowest and the highest ratio of the \
repeats paired by round (rounds are interleaved, so repeat r of both sides ran in the same round). A point holds \
only when the whole interval clears the claim's threshold, does not hold when all of it misses, and is within \
noise when the repeats disagree (for > and <, equality misses). A point where the load generator fell behind, \
that held less than 90 % of the load it names, or that failed is under load (†) and not counted either way. A claim \
holds when every counted point holds, does not hold when none holds and at least one misses, is within noise when \
every one is, and holds partly when some hold and others do not or are within noise. The load held is the time \
the clients spent waiting for an answer or thinking inside the window, over its length: a client the server \
leaves unanswered counts as load applied, and is named as starved.";

/// Said where a point had one repeat.
pub const ONE_REPEAT: &str =
    "With one repeat the interval is the point itself: one repeat cannot tell noise.";

/// A ratio with two decimals, or two significant digits when it is small
/// (a CGI-bound rate against a static one is a thousandth).
pub fn figure(x: f64) -> String {
    if x.is_nan() {
        "—".into()
    } else if x == 0.0 || x.abs() >= 0.1 || x.is_infinite() {
        format!("{x:.2}")
    } else {
        let decimals = (-x.abs().log10().floor()) as usize + 1;
        format!("{x:.decimals$}")
    }
}

/// A side as the text names it: `event's throughput`, or its number.
pub fn side_name(s: &Side) -> String {
    match s {
        Side::Number(n) => format!("{n}"),
        Side::Metric { metric, server, fixed, .. } => {
            let at: Vec<String> = fixed.iter().map(|(a, v)| format!("{a}={v}")).collect();
            let at = if at.is_empty() { String::new() } else { format!(" at {}", at.join(" ")) };
            format!("{server}'s {metric}{at}")
        }
    }
}

impl PointVerdict {
    /// The ratio of the sides as measured (the claim's factors taken out:
    /// `bound` is [`Claim::bound`]): `mid× (lo–hi)`, `mid×` when the
    /// interval is a point, `—` without one.
    pub fn ratio(&self, bound: f64) -> String {
        let (lo, mid, hi) = (self.lo * bound, self.mid * bound, self.hi * bound);
        if mid.is_nan() {
            "—".into()
        } else if lo.is_nan() || figure(lo) == figure(hi) {
            format!("{}×", figure(mid))
        } else {
            format!("{}× ({}–{})", figure(mid), figure(lo), figure(hi))
        }
    }
}

/// A side resolved at a point: a number, or a server's metric at
/// coordinates.
#[derive(Clone, Debug, PartialEq)]
enum At<'a> {
    Number(f64),
    Metric { factor: f64, metric: &'a str, server: &'a str, at: Coords },
}

fn resolve<'a>(side: &'a Side, at: &Coords) -> Option<At<'a>> {
    match side {
        Side::Number(n) => Some(At::Number(*n)),
        Side::Metric { factor, metric, server, fixed } => {
            let mut here = at.clone();
            for (axis, v) in fixed {
                here = here.with(axis, v)?;
            }
            Some(At::Metric { factor: *factor, metric, server, at: here })
        }
    }
}

/// A metric's value in each repeat of a point (NaN left out).
fn by_repeat(table: &Table, server: &str, at: &Coords, metric: &str) -> BTreeMap<u32, f64> {
    table
        .points
        .iter()
        .filter(|p| p.server == server && p.at == *at)
        .filter_map(|p| Some((p.repeat, p.get(metric).filter(|v| !v.is_nan())?)))
        .collect()
}

/// The paired repeats of two resolved sides: (left, right) per repeat,
/// as measured (no factor).
fn pairs(table: &Table, left: &At, right: &At) -> Vec<(f64, f64)> {
    let values = |side: &At| match side {
        At::Number(_) => None,
        At::Metric { metric, server, at, .. } => Some(by_repeat(table, server, at, metric)),
    };
    let constant = |side: &At| if let At::Number(n) = side { *n } else { f64::NAN };
    match (values(left), values(right)) {
        (Some(l), Some(r)) => l.iter().filter_map(|(k, lv)| Some((*lv, *r.get(k)?))).collect(),
        (Some(l), None) => l.values().map(|v| (*v, constant(right))).collect(),
        (None, Some(r)) => r.values().map(|v| (constant(left), *v)).collect(),
        (None, None) => Vec::new(),
    }
}

fn factor(side: &At) -> f64 {
    match side {
        At::Number(_) => 1.0,
        At::Metric { factor, .. } => *factor,
    }
}

/// The ratio `left ÷ right` at `at`, the sides' factors applied, over the
/// repeats paired by their number: (the lowest, the ratio of the means,
/// the highest). `None` when no repeat pairs, or a right side is 0.
pub fn interval(table: &Table, left: &Side, right: &Side, at: &Coords) -> Option<(f64, f64, f64)> {
    let (l, r) = (resolve(left, at)?, resolve(right, at)?);
    let pairs = pairs(table, &l, &r);
    let (lo, mid, hi) = ratios(&pairs, factor(&l), factor(&r))?;
    mid.is_finite().then_some((lo, mid, hi))
}

/// (lo, mid, hi) of `pairs`' ratios, factors applied; NaN ratios where a
/// right side is 0; `None` without pairs.
fn ratios(pairs: &[(f64, f64)], fl: f64, fr: f64) -> Option<(f64, f64, f64)> {
    if pairs.is_empty() {
        return None;
    }
    let ratio = |l: f64, r: f64| if r * fr == 0.0 { f64::NAN } else { (l * fl) / (r * fr) };
    let each: Vec<f64> = pairs.iter().map(|(l, r)| ratio(*l, *r)).collect();
    let n = pairs.len() as f64;
    let (ml, mr) = (pairs.iter().map(|p| p.0).sum::<f64>() / n, pairs.iter().map(|p| p.1).sum::<f64>() / n);
    if each.iter().any(|x| x.is_nan()) {
        return Some((f64::NAN, ratio(ml, mr), f64::NAN));
    }
    let lo = each.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = each.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, ratio(ml, mr), hi))
}

/// A server's use of the machine at a point: the means over its repeats
/// of the metrics that say what limited it (NaN: not recorded).
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    /// The server, and where when a claim compares it with itself
    /// elsewhere (`direct at rate=800`).
    pub server: String,
    pub server_cpu_pct: f64,
    pub load_cpu_pct: f64,
    pub other_cpu_pct: f64,
    pub disk_util_pct: f64,
    pub disk_read_per_req: f64,
    pub link_util_pct: f64,
    /// In some repeat the generator fell behind.
    pub fell_behind: bool,
    /// The least share of its load a repeat held (NaN: not recorded).
    pub held_load: f64,
    /// Some repeat measured nothing.
    pub failed: bool,
    /// The most clients a repeat left unanswered through its whole window.
    pub starved: f64,
    /// The clients of the point.
    pub clients: usize,
    /// The connections the server serves at once, each holding a worker
    /// (`ServerSpec::connection_slots`),
    /// when the spec is known.
    pub slots: Option<usize>,
}

impl Usage {
    /// From the table's rows of `server` at `at`; `None` when it has none.
    pub fn of(table: &Table, server: &str, at: &Coords) -> Option<Usage> {
        let rows: Vec<_> = table.points.iter().filter(|p| p.server == server && p.at == *at).collect();
        if rows.is_empty() {
            return None;
        }
        let values =
            |m: &str| -> Vec<f64> { rows.iter().filter_map(|p| p.get(m)).filter(|v| !v.is_nan()).collect() };
        let mean = |m: &str| {
            let v = values(m);
            if v.is_empty() {
                f64::NAN
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        Some(Usage {
            server: server.to_string(),
            server_cpu_pct: mean("server_cpu_pct"),
            load_cpu_pct: mean("load_cpu_pct"),
            other_cpu_pct: values("other_cpu_pct").into_iter().fold(f64::NAN, f64::max),
            disk_util_pct: mean("disk_util_pct"),
            disk_read_per_req: mean("disk_read_per_req"),
            link_util_pct: mean("link_util_pct"),
            fell_behind: rows.iter().any(|p| crate::results::fell_behind(p)),
            held_load: rows
                .iter()
                .map(|p| crate::results::held_share(p))
                .filter(|h| !h.is_nan())
                .fold(f64::NAN, f64::min),
            failed: rows.iter().any(|p| crate::results::failed(p)),
            starved: values("starved").into_iter().fold(f64::NAN, f64::max),
            clients: at.clients,
            slots: None,
        })
    }

    /// Why the point is under load, if it is.
    pub fn under_load(&self) -> Option<String> {
        if self.failed {
            Some(format!("{}: failed (measured nothing)", self.server))
        } else if self.fell_behind {
            Some(format!("{}: the load generator fell behind", self.server))
        } else if self.held_load < HELD_LOAD_MIN {
            Some(format!("{}: held {:.0} % of the load it names", self.server, self.held_load * 100.0))
        } else {
            None
        }
    }

    fn cpu_saturated(&self) -> bool {
        self.server_cpu_pct >= SERVER_CPU_SATURATED
    }
    fn generator_saturated(&self) -> bool {
        self.load_cpu_pct >= LOAD_CPU_SATURATED || self.fell_behind
    }
    fn disk_saturated(&self) -> bool {
        self.disk_util_pct >= DISK_SATURATED
    }
    fn link_saturated(&self) -> bool {
        self.link_util_pct >= LINK_SATURATED
    }
    fn recorded(&self) -> bool {
        !self.server_cpu_pct.is_nan()
    }
    /// Its slots, when fewer than its clients: the rest wait to be
    /// accepted whatever the CPU does.
    fn slot_bound(&self) -> Option<usize> {
        self.slots.filter(|&slots| slots < self.clients)
    }

    /// What was saturated, in words with its number; or that nothing was.
    pub fn limit(&self) -> String {
        if !self.recorded() {
            return format!("{}: not recorded (results from before server_cpu_pct)", self.server);
        }
        let mut parts = Vec::new();
        if self.cpu_saturated() {
            parts.push(format!("server CPU {:.0} %", self.server_cpu_pct));
        }
        if self.generator_saturated() {
            let behind = if self.fell_behind { ", fell behind" } else { "" };
            parts.push(format!("the generator (CPU {:.0} %{behind})", self.load_cpu_pct));
        }
        if self.disk_saturated() {
            parts.push(format!("the disk ({:.0} % busy{})", self.disk_util_pct, read_per_req(self)));
        }
        if self.link_saturated() {
            parts.push(format!("the link ({:.0} % of its rate)", self.link_util_pct));
        }
        if let Some(slots) = self.slot_bound() {
            parts.push(format!("its own {slots} connection slots ({} clients)", self.clients));
        }
        let mut s = if parts.is_empty() {
            format!("{}: nothing saturated, server CPU {:.0} %", self.server, self.server_cpu_pct)
        } else {
            format!("{}: {} saturated", self.server, parts.join(" and "))
        };
        if self.starved >= 1.0 {
            // The load was applied; these clients were not served at all.
            s += &format!("; {:.0} clients unanswered through the whole window (starved)", self.starved);
        }
        if self.other_cpu_pct > OTHER_CPU_BUSY {
            s += &format!(" (machine busy: {:.0} % used by others)", self.other_cpu_pct);
        }
        s
    }
}

fn read_per_req(u: &Usage) -> String {
    if u.disk_read_per_req > 0.0 {
        format!(", {} read per request", bytes(u.disk_read_per_req))
    } else {
        String::new()
    }
}

fn bytes(b: f64) -> String {
    if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.0} KB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

impl Claim {
    /// Parses `expr`, checking its metrics, and its servers against `servers`.
    pub fn parse(expr: &str, servers: &[&str]) -> Result<Claim> {
        let (at, op, len) = [(">=", Op::Ge), ("<=", Op::Le), (">", Op::Gt), ("<", Op::Lt)]
            .iter()
            .find_map(|(text, op)| expr.find(text).map(|at| (at, *op, text.len())))
            .ok_or_else(|| anyhow::anyhow!("no comparison (>=, <=, > or <)"))?;
        let left = side(expr[..at].trim(), servers)?;
        let right = side(expr[at + len..].trim(), servers)?;
        if matches!((&left, &right), (Side::Number(_), Side::Number(_))) {
            bail!("compares two numbers: name a metric of a server");
        }
        Ok(Claim { left, op, right })
    }

    /// The threshold of the ratio of the sides as measured (their factors
    /// taken out): `a >= 0.3 * b` wants a ÷ b ≥ 0.3.
    pub fn bound(&self) -> f64 {
        let f = |s: &Side| match s {
            Side::Metric { factor, .. } => *factor,
            Side::Number(_) => 1.0,
        };
        f(&self.right) / f(&self.left)
    }

    /// What the claim wants, as a ratio of the sides as measured:
    /// `event's throughput ÷ pool's throughput ≥ 0.30×`.
    pub fn wants(&self) -> String {
        format!(
            "{} ÷ {} {} {}×",
            side_name(&self.left),
            side_name(&self.right),
            self.op.symbol(),
            figure(self.bound())
        )
    }

    /// The verdict on `table` (the module's doc says how).
    pub fn judge(&self, table: &Table) -> Verdict {
        self.judge_in(table, &|_| None)
    }

    /// [`judge`](Self::judge), its reasons knowing each server's connection
    /// slots (`Spec::slots_of`).
    pub fn judge_in(&self, table: &Table, slots: &dyn Fn(&str) -> Option<usize>) -> Verdict {
        let mut points = Vec::new();
        let mut seen: Vec<(At, At)> = Vec::new();
        for at in table.coords() {
            let (Some(l), Some(r)) = (resolve(&self.left, &at), resolve(&self.right, &at)) else {
                continue;
            };
            // Points the claim's fixed coordinates make alike are one
            // comparison, named by where its left side was measured.
            if seen.contains(&(l.clone(), r.clone())) {
                continue;
            }
            let usage: Vec<Usage> = [&l, &r]
                .into_iter()
                .filter_map(|s| match s {
                    At::Number(_) => None,
                    At::Metric { server, at, .. } => {
                        Some(Usage::of(table, server, at).map(|u| Usage { slots: slots(server), ..u }))
                    }
                })
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default();
            let measured = usage.len() == [&l, &r].iter().filter(|s| matches!(s, At::Metric { .. })).count();
            if !measured {
                continue; // a side not measured here (a server skipped)
            }
            let mut usage = usage;
            if let (At::Metric { server: a, at: la, .. }, At::Metric { server: b, at: ra, .. }) = (&l, &r) {
                if a == b && la != ra {
                    usage[0].server = format!("{a} at {}", la.label(table));
                    usage[1].server = format!("{b} at {}", ra.label(table));
                }
            }
            let pairs = pairs(table, &l, &r);
            let under: Vec<String> = usage.iter().filter_map(Usage::under_load).collect();
            if pairs.is_empty() && under.is_empty() {
                continue; // a metric the server does not have
            }
            seen.push((l.clone(), r.clone()));
            let (lo, mid, hi) =
                ratios(&pairs, factor(&l), factor(&r)).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            let n = pairs.len() as f64;
            let (left, right) = if pairs.is_empty() {
                (f64::NAN, f64::NAN)
            } else {
                (pairs.iter().map(|p| p.0).sum::<f64>() / n, pairs.iter().map(|p| p.1).sum::<f64>() / n)
            };
            let held = pairs.iter().filter(|(a, b)| self.op.test(a * factor(&l), b * factor(&r))).count();
            let (word, reason) = if !under.is_empty() {
                (UNDER_LOAD, under.join("; "))
            } else {
                let word = match held {
                    h if h == pairs.len() => HOLDS,
                    0 => DOES_NOT_HOLD,
                    _ => WITHIN_NOISE,
                };
                (word, dedup_limits(&usage))
            };
            let mut here = at.clone();
            if let At::Metric { at: left_at, .. } = &l {
                here = left_at.clone();
            }
            points.push(PointVerdict {
                at: here.label(table),
                left,
                right,
                lo,
                mid,
                hi,
                repeats: pairs.len(),
                word,
                reason,
                usage,
            });
        }
        let counted: Vec<&PointVerdict> = points.iter().filter(|p| p.counted()).collect();
        let all = |w: &str| counted.iter().all(|p| p.word == w);
        let word = if points.is_empty() {
            NO_DATA
        } else if counted.is_empty() {
            NOT_AT_THE_LOAD
        } else if all(HOLDS) {
            HOLDS
        } else if all(DOES_NOT_HOLD) {
            DOES_NOT_HOLD
        } else if all(WITHIN_NOISE) {
            WITHIN_NOISE
        } else if !counted.iter().any(|p| p.word == HOLDS) {
            DOES_NOT_HOLD
        } else {
            HOLDS_PARTLY
        };
        let reason = reason(word, &points);
        Verdict { word, points, reason }
    }
}

/// The limits of a point's sides, a server named once.
fn dedup_limits(usage: &[Usage]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for u in usage {
        if !seen.contains(&u.server.as_str()) {
            seen.push(&u.server);
            out.push(u.limit());
        }
    }
    out.join("; ")
}

/// One or two sentences: what was saturated at the points that decide
/// `word` (all counted points; for `holds partly`, those that did not
/// hold; with none counted, why each was under load), per server, with
/// the numbers; and the points left out.
fn reason(word: &str, points: &[PointVerdict]) -> String {
    if points.is_empty() {
        return "No point measured both sides (a server skipped, or the run was cut short).".into();
    }
    let under: Vec<&PointVerdict> = points.iter().filter(|p| !p.counted()).collect();
    let left_out = match under.len() {
        0 => String::new(),
        n => format!(
            " {n} point{} not at the load {} name{}, not counted ({}).",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "they" },
            if n == 1 { "s" } else { "" },
            under.iter().map(|p| format!("{}: {}", p.at, p.reason)).take(3).collect::<Vec<_>>().join("; ")
                + if n > 3 { "; …" } else { "" }
        ),
    };
    if word == NOT_AT_THE_LOAD {
        return left_out.trim_start().to_string();
    }
    let counted: Vec<&PointVerdict> = points.iter().filter(|p| p.counted()).collect();
    let deciding: Vec<&PointVerdict> = if word == HOLDS_PARTLY {
        counted.iter().copied().filter(|p| p.word != HOLDS).collect()
    } else if word == DOES_NOT_HOLD {
        counted.iter().copied().filter(|p| p.word == DOES_NOT_HOLD).collect()
    } else {
        counted.clone()
    };
    let whom = if deciding.len() == counted.len() && counted.len() > 1 {
        format!("at every counted point ({})", deciding.len())
    } else {
        let names: Vec<&str> = deciding.iter().map(|p| p.at.as_str()).collect();
        let more = if names.len() > 4 { ", …" } else { "" };
        format!("at {}{more}", names[..names.len().min(4)].join(", "))
    };
    let mut servers: Vec<&str> = Vec::new();
    for p in &deciding {
        for u in &p.usage {
            if !servers.contains(&u.server.as_str()) {
                servers.push(&u.server);
            }
        }
    }
    let per_server: Vec<String> = servers
        .iter()
        .map(|s| {
            let us: Vec<&Usage> =
                deciding.iter().flat_map(|p| p.usage.iter()).filter(|u| u.server == *s).collect();
            summarize(s, &us)
        })
        .collect();
    let busy = deciding.iter().flat_map(|p| p.usage.iter()).map(|u| u.other_cpu_pct).fold(f64::NAN, f64::max);
    let busy = if busy > OTHER_CPU_BUSY {
        format!(" The machine was busy: processes outside the experiment used up to {busy:.0} % of it.")
    } else {
        String::new()
    };
    format!("Limits {whom}: {}.{busy}{left_out}", per_server.join("; "))
}

/// A server over the deciding points: what was saturated at how many,
/// with the highest number; or nothing, with how busy it was.
fn summarize(server: &str, us: &[&Usage]) -> String {
    let recorded: Vec<&&Usage> = us.iter().filter(|u| u.recorded()).collect();
    if recorded.is_empty() {
        return format!("{server} — not recorded (results from before server_cpu_pct)");
    }
    let n = recorded.len();
    let max = |f: &dyn Fn(&Usage) -> f64| recorded.iter().map(|u| f(u)).fold(f64::NAN, f64::max);
    let at = |k: usize| if n == 1 { String::new() } else { format!(" at {k} of {n}") };
    let mut parts = Vec::new();
    let count = |f: &dyn Fn(&Usage) -> bool| recorded.iter().filter(|u| f(u)).count();
    let cpu = count(&Usage::cpu_saturated);
    if cpu > 0 {
        parts.push(format!("server CPU saturated{} (up to {:.0} %)", at(cpu), max(&|u| u.server_cpu_pct)));
    }
    let gen = count(&Usage::generator_saturated);
    if gen > 0 {
        let behind = if recorded.iter().any(|u| u.fell_behind) { ", fell behind" } else { "" };
        parts.push(format!(
            "the generator saturated{} (CPU up to {:.0} %{behind})",
            at(gen),
            max(&|u| u.load_cpu_pct)
        ));
    }
    let disk = count(&Usage::disk_saturated);
    if disk > 0 {
        let worst = recorded.iter().max_by(|a, b| a.disk_util_pct.total_cmp(&b.disk_util_pct)).unwrap();
        parts.push(format!(
            "the disk saturated{} (up to {:.0} % busy{})",
            at(disk),
            worst.disk_util_pct,
            read_per_req(worst)
        ));
    }
    let link = count(&Usage::link_saturated);
    if link > 0 {
        parts.push(format!("the link saturated{} (up to {:.0} %)", at(link), max(&|u| u.link_util_pct)));
    }
    let bound = count(&|u: &Usage| u.slot_bound().is_some());
    if bound > 0 {
        let worst = recorded.iter().filter(|u| u.slot_bound().is_some()).max_by_key(|u| u.clients).unwrap();
        parts.push(format!(
            "its own connection slots{} ({} for {} clients: the rest wait to be accepted)",
            at(bound),
            worst.slots.unwrap_or(0),
            worst.clients
        ));
    }
    if parts.is_empty() {
        let cpu = max(&|u| u.server_cpu_pct);
        let stress = if cpu < 50.0 { ": this load never stresses the server" } else { "" };
        format!("{server} — nothing saturated, server CPU at most {cpu:.0} %{stress}")
    } else {
        format!("{server} — {}", parts.join(", "))
    }
}

/// The spec's `[context]` as a sentence beside a reason: the paper's
/// machine and how this one differs.
pub fn context(paper: Option<&str>, differences: Option<&str>) -> Option<String> {
    let trim = |s: &str| s.trim().trim_end_matches('.').to_string();
    match (paper, differences) {
        (None, None) => None,
        (Some(p), None) => Some(format!("The paper's machine: {}.", trim(p))),
        (None, Some(d)) => Some(format!("This machine: {}.", trim(d))),
        (Some(p), Some(d)) => Some(format!("The paper's machine: {}; this one: {}.", trim(p), trim(d))),
    }
}

fn side(text: &str, servers: &[&str]) -> Result<Side> {
    if let Ok(n) = text.parse::<f64>() {
        return Ok(Side::Number(n));
    }
    let (factor, call) = match text.split_once('*') {
        Some((n, call)) => {
            let n = n.trim();
            (n.parse::<f64>().map_err(|_| anyhow::anyhow!("{n:?} is not a number"))?, call.trim())
        }
        None => (1.0, text),
    };
    let Some((metric, rest)) = call.split_once('(') else {
        bail!("{text:?}: want METRIC(server=NAME), a number, or NUMBER * METRIC(server=NAME)");
    };
    let metric = metric.trim();
    if !METRICS.iter().any(|(m, _)| *m == metric) {
        bail!("{metric:?} is not a metric ({})", metric_names());
    }
    let args = rest.strip_suffix(')').ok_or_else(|| anyhow::anyhow!("{text:?}: missing ')'"))?;
    let mut server = None;
    let mut fixed = Vec::new();
    for arg in args.split(',') {
        let Some((key, value)) = arg.split_once('=') else {
            bail!("{text:?}: want {metric}(server=NAME[, AXIS=VALUE])");
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "server" => server = Some(value.to_string()),
            axis if AXES.contains(&axis) => fixed.push((axis.to_string(), value.to_string())),
            other => bail!("{text:?}: {other:?} is neither `server` nor an axis ({})", AXES.join(", ")),
        }
    }
    let Some(server) = server else { bail!("{text:?}: want {metric}(server=NAME[, AXIS=VALUE])") };
    if !servers.contains(&server.as_str()) {
        bail!("no server {server:?} in this experiment (they are {})", servers.join(", "));
    }
    Ok(Side::Metric { factor, metric: metric.into(), server, fixed })
}

#[cfg(test)]
mod tests;
