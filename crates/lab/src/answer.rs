//! `modus lab compare`'s answer in words: who wins at peak throughput and
//! by how much over the repeats, who is within noise of whom, the best
//! p99 under a load every server held, and a warning first when the
//! spread of the repeats or failed points make the ranking unreliable.

use std::fmt::Write as _;

use crate::readable::tick;
use crate::results::{Coords, Table};
use crate::spec::Spec;

/// Repeats whose max over min exceed this at a server's peak make the
/// ranking unreliable.
pub const SPREAD_LIMIT: f64 = 1.15;

/// A server's peak: where its mean throughput is highest, the mean and
/// the min–max over the repeats there.
#[derive(Clone, Debug)]
struct Peak {
    server: String,
    at: Coords,
    mean: f64,
    lo: f64,
    hi: f64,
}

/// Whether every repeat of `server` at `at` held its load
/// ([`results::under_load`](crate::results::under_load)).
fn held(table: &Table, server: &str, at: &Coords) -> bool {
    let mut points = table.points.iter().filter(|p| p.server == server && p.at == *at).peekable();
    points.peek().is_some() && points.all(|p| !crate::results::under_load(p))
}

fn peaks(spec: &Spec, table: &Table) -> Vec<Peak> {
    let mut peaks: Vec<Peak> = spec
        .servers
        .iter()
        .filter_map(|s| {
            let (at, mean) = table
                .coords()
                .into_iter()
                .filter_map(|c| table.mean(&s.name, &c, "throughput").map(|t| (c, t)))
                .filter(|(_, t)| *t > 0.0)
                .max_by(|a, b| a.1.total_cmp(&b.1))?;
            let (lo, hi) = table.spread(&s.name, &at, "throughput")?;
            Some(Peak { server: s.name.clone(), at, mean, lo, hi })
        })
        .collect();
    peaks.sort_by(|a, b| b.mean.total_cmp(&a.mean));
    peaks
}

fn req_s(v: f64) -> String {
    format!("{} req/s", tick(v))
}

/// The answer, a few lines of text: a warning line first when the ranking
/// is unreliable, then the winner, who is within noise of whom, and the
/// best p99 under a stated load.
pub fn answer(spec: &Spec, table: &Table) -> String {
    let mut out = String::new();
    let peaks = peaks(spec, table);
    let repeats = table.points.iter().map(|p| p.repeat).max().unwrap_or(0);
    // Why the ranking cannot be trusted, if it cannot.
    let mut doubts = Vec::new();
    let failures = table.points.iter().filter(|p| crate::results::failed(p)).count();
    if failures > 0 {
        let mut who: Vec<&str> =
            table.points.iter().filter(|p| crate::results::failed(p)).map(|p| p.server.as_str()).collect();
        who.dedup();
        who.sort();
        who.dedup();
        doubts.push(format!("{failures} point(s) measured nothing ({})", who.join(", ")));
    }
    let spread: Vec<String> = peaks
        .iter()
        .filter(|p| p.lo > 0.0 && p.hi / p.lo > SPREAD_LIMIT)
        .map(|p| format!("{} {:.2}×", p.server, p.hi / p.lo))
        .collect();
    if !spread.is_empty() {
        doubts.push(format!(
            "the repeats at some peaks differ by more than {:.0} % (max/min: {})",
            (SPREAD_LIMIT - 1.0) * 100.0,
            spread.join(", ")
        ));
    }
    // Other jobs on the machine take CPU from whoever runs while they do.
    if let Some(busy) = crate::busy::warning(table) {
        doubts.push(busy);
    }
    if repeats < 2 && !peaks.is_empty() {
        doubts.push("one repeat per point: the spread is unknown (run with 3 or more)".into());
    }
    if !doubts.is_empty() {
        let _ = writeln!(out, "Unreliable ranking: {}.", doubts.join("; "));
    }
    let Some(winner) = peaks.first() else {
        out.push_str("No answer: no server measured any throughput.\n");
        return out;
    };
    let interval = |p: &Peak| {
        if repeats > 1 {
            format!("{}, {}–{} over {repeats} repeats", req_s(p.mean), tick(p.lo), tick(p.hi))
        } else {
            req_s(p.mean)
        }
    };
    let _ = write!(
        out,
        "Winner at peak throughput: {} — {} at {}",
        winner.server,
        interval(winner),
        winner.at.label(table)
    );
    if let Some(second) = peaks.get(1) {
        // The two peaks may lie at different points, whose repeats are not
        // pairs (claims::interval pairs repeats at one point): the widest
        // ratio the two min–max ranges allow, beside the ratio of the means.
        let (lo, hi) = (winner.lo / second.hi, winner.hi / second.lo);
        let _ = write!(out, "; {:.2}× {} ({}", winner.mean / second.mean, second.server, interval(second));
        if repeats > 1 {
            let _ = write!(out, "; ratio {lo:.2}–{hi:.2}");
        }
        out.push(')');
    }
    out.push_str(".\n");
    // Within noise: peaks whose min–max overlap, in groups of neighbours.
    let overlaps = |a: &Peak, b: &Peak| a.lo <= b.hi && b.lo <= a.hi;
    let mut groups: Vec<Vec<&Peak>> = Vec::new();
    for p in &peaks {
        match groups.last_mut() {
            Some(g) if g.iter().any(|q| overlaps(p, q)) => g.push(p),
            _ => groups.push(vec![p]),
        }
    }
    let noisy: Vec<String> = groups
        .iter()
        .filter(|g| g.len() > 1)
        .map(|g| g.iter().map(|p| p.server.as_str()).collect::<Vec<_>>().join(", "))
        .collect();
    if noisy.is_empty() {
        let _ = writeln!(
            out,
            "Within noise: none — every server's peak min–max is apart from the others'{}.",
            if repeats < 2 { " (one repeat: no spread to overlap)" } else { "" }
        );
    } else {
        let _ = writeln!(
            out,
            "Within noise of one another (their peaks' min–max overlap): {}.",
            noisy.iter().map(|g| format!("{{{g}}}")).collect::<Vec<_>>().join("; ")
        );
        if groups[0].len() > 1 {
            let _ = writeln!(
                out,
                "So the winner is not clear: {} are within noise of {}.",
                groups[0][1..].iter().map(|p| p.server.as_str()).collect::<Vec<_>>().join(", "),
                winner.server
            );
        }
    }
    // The best p99 at the heaviest load every server held.
    let servers: Vec<&str> = peaks.iter().map(|p| p.server.as_str()).collect();
    let common = table
        .coords()
        .into_iter()
        .filter(|c| servers.iter().all(|s| held(table, s, c)))
        .max_by_key(|c| (c.clients, c.rate));
    match common {
        Some(at) => {
            let best = servers
                .iter()
                .filter_map(|s| table.mean(s, &at, "p99").filter(|v| !v.is_nan()).map(|v| (*s, v)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((server, p99)) = best {
                let range = table
                    .spread(server, &at, "p99")
                    .filter(|(lo, hi)| hi > lo)
                    .map(|(lo, hi)| format!(" ({}–{})", tick(lo), tick(hi)))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "Best p99 at {} (the heaviest load every server held): {server}, {} ms{range}.",
                    at.label(table),
                    tick(p99)
                );
            }
        }
        None => {
            let _ = writeln!(out, "Best p99: no load that every server held.");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::METRICS;
    use crate::results::Point;

    fn table(rows: &[(&str, usize, [f64; 3], f64)]) -> Table {
        let mut t = Table::default();
        for (server, clients, repeats, p99) in rows {
            for (i, tput) in repeats.iter().enumerate() {
                t.points.push(Point {
                    server: server.to_string(),
                    at: crate::results::at(*clients),
                    repeat: i as u32 + 1,
                    values: crate::results::values(&[*tput, 1.0, 1.0, *p99 + i as f64 * 0.1]),
                });
            }
        }
        t
    }

    fn spec(names: &[&str]) -> Spec {
        let mut spec = crate::spec::load("tiny").unwrap();
        let template = spec.servers[0].clone();
        spec.servers = names
            .iter()
            .map(|n| crate::spec::ServerSpec {
                name: n.to_string(),
                model: n.to_string(),
                ..template.clone()
            })
            .collect();
        spec
    }

    #[test]
    fn a_clear_winner_is_named_with_its_interval() {
        let spec = spec(&["event", "pool", "prefork"]);
        let t = table(&[
            ("event", 4, [40000.0, 41000.0, 42000.0], 2.0),
            ("event", 64, [60000.0, 61000.0, 62000.0], 5.0),
            ("pool", 4, [20000.0, 20500.0, 21000.0], 1.0),
            ("pool", 64, [30000.0, 30500.0, 31000.0], 3.0),
            ("prefork", 4, [10000.0, 10100.0, 10200.0], 4.0),
            ("prefork", 64, [11000.0, 11100.0, 11200.0], 9.0),
        ]);
        let a = answer(&spec, &t);
        assert!(!a.contains("Unreliable"), "{a}");
        assert!(
            a.starts_with(
                "Winner at peak throughput: event — 61k req/s, 60k–62k over 3 repeats at clients=64"
            ),
            "{a}"
        );
        assert!(a.contains("2.00× pool"), "{a}");
        assert!(a.contains("Within noise: none"), "{a}");
        assert!(
            a.contains("Best p99 at clients=64 (the heaviest load every server held): pool, 3.1 ms (3–3.2)."),
            "{a}"
        );
    }

    #[test]
    fn two_within_noise_are_said_so_and_a_wide_spread_warns() {
        let spec = spec(&["event", "amped", "pool"]);
        let t = table(&[
            ("event", 8, [50000.0, 52000.0, 51000.0], 2.0),
            ("amped", 8, [49000.0, 51500.0, 50000.0], 1.5),
            ("pool", 8, [20000.0, 20100.0, 20200.0], 4.0),
        ]);
        let a = answer(&spec, &t);
        assert!(
            a.contains("Within noise of one another (their peaks' min–max overlap): {event, amped}."),
            "{a}"
        );
        assert!(a.contains("So the winner is not clear: amped are within noise of event."), "{a}");
        assert!(!a.contains("Unreliable"), "{a}");
        assert!(a.contains(": amped, 1.6 ms"), "{a}");
        // A peak whose repeats differ by 1.3×, and a point that measured nothing.
        let t = table(&[
            ("event", 8, [40000.0, 52000.0, 51000.0], 2.0),
            ("amped", 8, [49000.0, 51500.0, 50000.0], 1.5),
            ("pool", 8, [20000.0, 0.0, 20200.0], 4.0),
        ]);
        let a = answer(&spec, &t);
        let first = a.lines().next().unwrap();
        assert!(first.starts_with("Unreliable ranking: 1 point(s) measured nothing (pool)"), "{a}");
        assert!(first.contains("event 1.30×"), "{a}");
        assert!(a.contains("Best p99: no load that every server held."), "{a}");
    }

    /// Other jobs using the machine during a point make the ranking
    /// unreliable, and the answer says so first.
    #[test]
    fn a_busy_machine_makes_the_ranking_unreliable() {
        let spec = spec(&["event", "pool"]);
        let mut t = table(&[("event", 8, [50000.0, 50500.0, 51000.0], 2.0), ("pool", 8, [20000.0; 3], 4.0)]);
        let other = METRICS.iter().position(|(m, _)| *m == "other_cpu_pct").unwrap();
        t.points.iter_mut().for_each(|p| p.values[other] = 2.0);
        assert!(!answer(&spec, &t).contains("Unreliable"), "2 % is quiet");
        t.points[1].values[other] = 40.0;
        let a = answer(&spec, &t);
        assert!(a.starts_with("Unreliable ranking: the machine was busy: at 1 of 6 measured points"), "{a}");
    }
}
