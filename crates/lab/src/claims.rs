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
//! `AXIS=VALUE` fixes that coordinate of its side. A metric at a point is
//! the mean over the repeats. The verdict: *holds* at every point, *holds
//! partly*, or *does not hold* at any.

use anyhow::{bail, Result};

use crate::columns::{metric_names, AXES, METRICS};
use crate::results::Table;

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

/// What the results say of a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// `holds`, `holds partly` or `does not hold` (`no data` before a run).
    pub word: &'static str,
    /// Per point: where, left, right, whether it held.
    pub points: Vec<(String, f64, f64, bool)>,
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

    /// The verdict on `table`.
    pub fn judge(&self, table: &Table) -> Verdict {
        let mut points = Vec::new();
        let mut seen = Vec::new();
        for at in table.coords() {
            let value = |side: &Side| match side {
                Side::Number(n) => Some(*n),
                Side::Metric { factor, metric, server, fixed } => {
                    let mut here = at.clone();
                    for (axis, v) in fixed {
                        here = here.with(axis, v)?;
                    }
                    table.mean(server, &here, metric).map(|v| factor * v)
                }
            };
            if let (Some(l), Some(r)) = (value(&self.left), value(&self.right)) {
                let held = match self.op {
                    Op::Ge => l >= r,
                    Op::Le => l <= r,
                    Op::Gt => l > r,
                    Op::Lt => l < r,
                };
                // Points the claim's fixed coordinates make alike are one
                // comparison, named by where its left side was measured.
                if !seen.contains(&(l.to_bits(), r.to_bits())) {
                    seen.push((l.to_bits(), r.to_bits()));
                    let mut here = at.clone();
                    if let Side::Metric { fixed, .. } = &self.left {
                        for (axis, v) in fixed {
                            here = here.with(axis, v).unwrap_or(here);
                        }
                    }
                    points.push((here.label(table), l, r, held));
                }
            }
        }
        let held = points.iter().filter(|p| p.3).count();
        let word = match (held, points.len()) {
            (_, 0) => "no data",
            (h, n) if h == n => "holds",
            (0, _) => "does not hold",
            _ => "holds partly",
        };
        Verdict { word, points }
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
mod tests {
    use super::*;

    /// The servers of the built-in `tiny` experiment.
    const SERVERS: &[&str] = &["pool", "event"];
    use crate::results::{at, Point};

    fn point(server: &str, clients: usize, repeat: u32, throughput: f64) -> Point {
        Point {
            server: server.into(),
            at: at(clients),
            repeat,
            values: crate::results::values(&[throughput, 1.5, 1.0, 2.0, 0.0, 10.0, 100.0, 0.0, 1.0, 0.0]),
        }
    }

    #[test]
    fn claims_parse_and_judge_every_point() {
        let claim =
            Claim::parse("throughput(server=event) >= 0.5 * throughput(server=pool)", SERVERS).unwrap();
        assert_eq!(claim.op, Op::Ge);
        assert_eq!(
            claim.right,
            Side::Metric {
                factor: 0.5,
                metric: "throughput".into(),
                server: "pool".into(),
                fixed: Vec::new()
            }
        );
        let table = Table {
            points: vec![
                point("pool", 1, 1, 100.0),
                point("pool", 1, 2, 300.0),
                point("event", 1, 1, 120.0),
                point("pool", 8, 1, 1000.0),
                point("event", 8, 1, 400.0),
            ],
        };
        let v = claim.judge(&table);
        assert_eq!(
            v.points,
            vec![("clients=1".into(), 120.0, 100.0, true), ("clients=8".into(), 400.0, 500.0, false)],
            "means over repeats"
        );
        assert_eq!(v.word, "holds partly");
        // A fixed coordinate: pool at 8 clients against twice event's at each point.
        let fixed =
            Claim::parse("throughput(server=pool, clients=8) > 2 * throughput(server=event)", SERVERS)
                .unwrap();
        let v = fixed.judge(&table);
        assert_eq!(
            v.points.iter().map(|p| (p.1, p.2)).collect::<Vec<_>>(),
            [(1000.0, 240.0), (1000.0, 800.0)]
        );
        assert_eq!(v.word, "holds");
        let all = Claim::parse("p99(server=pool) < 5", SERVERS).unwrap().judge(&table);
        assert_eq!(all.word, "holds");
        let none = Claim::parse("errors(server=pool) > 0", SERVERS).unwrap().judge(&table);
        assert_eq!(none.word, "does not hold");
        assert_eq!(
            Claim::parse("p50(server=pool) > 1", SERVERS).unwrap().judge(&Table::default()).word,
            "no data"
        );
    }

    #[test]
    fn bad_claims_say_why() {
        let e = |expr: &str| format!("{:#}", Claim::parse(expr, SERVERS).unwrap_err());
        assert!(e("throughput(server=pool)").contains("no comparison"));
        assert!(e("speed(server=pool) > 1").contains("\"speed\" is not a metric"));
        assert!(e("throughput(server=nginx) > 1").contains("no server \"nginx\""));
        assert!(e("throughput(pool) > 1").contains("want throughput(server=NAME"));
        assert!(e("throughput(server=pool, size=1) > 1").contains("\"size\" is neither `server` nor an axis"));
        assert!(e("1 > 2").contains("compares two numbers"));
        assert!(e("x * throughput(server=pool) > 1").contains("is not a number"));
    }
}
