//! Each modus server against the best peer, row by row (a spec's
//! `best-peer = "METRIC"`): at every point, the peer with the best mean of
//! the metric (the lowest, or for throughput and goodput the highest), and
//! per modus server its median with the min–max of its repeats, the ratio
//! to that peer with its interval, and a verdict on "at least as good as
//! the best peer".
//!
//! The interval and the verdict follow the claims' rules (`claims.rs`):
//! the repeats are paired by number — repeat *r* of both ran in the same
//! interleaved round —, the interval is the lowest and the highest of the
//! paired ratios and its middle the ratio of the means; the row **holds**
//! when every paired ratio is on the good side of 1.0, **does not hold**
//! when every one is on the other, and is **within noise** when they
//! disagree (an interval that crosses 1.0 is not yet a lead). A row where
//! either side was under load in some repeat is marked and not judged.

use std::fmt::Write as _;

use crate::claims::{DOES_NOT_HOLD, HOLDS, UNDER_LOAD, WITHIN_NOISE};
use crate::results::{under_load, Coords, Table};
use crate::spec::Spec;

/// A row of one repeat: its side of 1.0, with no interval to judge noise by.
pub const ONE_REPEAT_HOLDS: &str = "holds (one repeat: noise unknown)";
pub const ONE_REPEAT_MISSES: &str = "does not hold (one repeat: noise unknown)";

/// Whether more of `metric` is better (requests per second) rather than less.
pub fn higher_is_better(metric: &str) -> bool {
    matches!(metric, "throughput" | "goodput")
}

/// One modus server at one point against the best peer there.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub at: Coords,
    pub server: String,
    /// The server's median over its repeats, and their min–max.
    pub value: (f64, f64, f64),
    pub peer: String,
    /// The best peer's median and min–max.
    pub peer_value: (f64, f64, f64),
    /// server ÷ peer: the lowest paired ratio, the ratio of the means, the highest.
    pub ratio: (f64, f64, f64),
    /// `holds`, `does not hold`, `within noise` or `under load`.
    pub verdict: &'static str,
}

/// (median, min, max) of a server's metric at a point.
fn summary(table: &Table, server: &str, at: &Coords, metric: &str) -> Option<(f64, f64, f64)> {
    let median = table.median(server, at, metric)?;
    let (lo, hi) = table.spread(server, at, metric)?;
    Some((median, lo, hi))
}

/// The values of `server`'s repeats at `at`, by repeat number, and whether
/// any repeat was under load.
fn repeats(table: &Table, server: &str, at: &Coords, metric: &str) -> (Vec<(u32, f64)>, bool) {
    let points: Vec<_> = table.points.iter().filter(|p| p.server == server && p.at == *at).collect();
    let loaded = points.iter().any(|p| under_load(p));
    let values =
        points.iter().filter_map(|p| p.get(metric).filter(|v| !v.is_nan()).map(|v| (p.repeat, v))).collect();
    (values, loaded)
}

/// The rows: per point of the table, per modus server of the spec.
pub fn rows(spec: &Spec, table: &Table, metric: &str) -> Vec<Row> {
    let up = higher_is_better(metric);
    let peers: Vec<&str> =
        spec.servers.iter().filter(|s| s.peer.is_some()).map(|s| s.name.as_str()).collect();
    let ours: Vec<&str> = spec.servers.iter().filter(|s| s.peer.is_none()).map(|s| s.name.as_str()).collect();
    let mut rows = Vec::new();
    // In the spec's order of the axes' values (file sizes grow), not the text's.
    let (paths, connections) = (spec.paths(), spec.connections());
    let place = |list: &[String], v: &str| list.iter().position(|l| l == v).unwrap_or(usize::MAX);
    let mut coords = table.coords();
    coords.sort_by_key(|c| (place(&paths, &c.path), place(&connections, &c.connection), c.clone()));
    for at in coords {
        let best = peers.iter().filter_map(|p| table.mean(p, &at, metric).map(|m| (*p, m))).max_by(|a, b| {
            if up {
                a.1.total_cmp(&b.1)
            } else {
                b.1.total_cmp(&a.1)
            }
        });
        let Some((peer, _)) = best else { continue };
        let Some(peer_value) = summary(table, peer, &at, metric) else { continue };
        let (theirs, peer_loaded) = repeats(table, peer, &at, metric);
        for server in &ours {
            let Some(value) = summary(table, server, &at, metric) else { continue };
            let (mine, loaded) = repeats(table, server, &at, metric);
            let pairs: Vec<(f64, f64)> = mine
                .iter()
                .filter_map(|(r, v)| theirs.iter().find(|(q, _)| q == r).map(|(_, w)| (*v, *w)))
                .filter(|(_, w)| *w != 0.0)
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let each: Vec<f64> = pairs.iter().map(|(v, w)| v / w).collect();
            let n = pairs.len() as f64;
            let mid =
                (pairs.iter().map(|p| p.0).sum::<f64>() / n) / (pairs.iter().map(|p| p.1).sum::<f64>() / n);
            let lo = each.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = each.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            // Good: as little as the peer spends, or as much as it serves.
            let good = |r: f64| if up { r >= 1.0 } else { r <= 1.0 };
            let verdict = if loaded || peer_loaded {
                UNDER_LOAD
            } else if each.len() == 1 {
                // One repeat cannot tell noise: say so, as the claims do.
                if good(each[0]) {
                    ONE_REPEAT_HOLDS
                } else {
                    ONE_REPEAT_MISSES
                }
            } else if each.iter().all(|r| good(*r)) {
                HOLDS
            } else if each.iter().all(|r| !good(*r)) {
                DOES_NOT_HOLD
            } else {
                WITHIN_NOISE
            };
            rows.push(Row {
                at: at.clone(),
                server: server.to_string(),
                value,
                peer: peer.to_string(),
                peer_value,
                ratio: (lo, mid, hi),
                verdict,
            });
        }
    }
    rows
}

fn cell(v: (f64, f64, f64)) -> String {
    if v.2 > v.1 {
        format!("{} ({}–{})", crate::readable::fmt(v.0), crate::readable::fmt(v.1), crate::readable::fmt(v.2))
    } else {
        crate::readable::fmt(v.0)
    }
}

/// The Markdown table (empty without a peer or a modus server measured).
pub fn markdown(spec: &Spec, table: &Table, metric: &str) -> String {
    let rows = rows(spec, table, metric);
    if rows.is_empty() {
        return String::new();
    }
    let unit = crate::columns::METRICS.iter().find(|(m, _)| *m == metric).map_or("", |(_, u)| *u);
    let mut m = String::new();
    let _ = writeln!(
        m,
        "Against the best peer, `{metric}` ({unit}; {} is better): at each point the peer with the best mean, \
         and each modus server's ratio to it — the ratio of the means, and in brackets the lowest and the \
         highest ratio of the repeats paired by round. The verdict is on \"{} the best peer\": it holds when \
         every paired ratio is on that side of 1.0, does not hold when none is, and is within noise when the \
         repeats disagree; under load marks a row where a generator fell behind or a point held less than its \
         load.\n",
        if higher_is_better(metric) { "more" } else { "less" },
        if higher_is_better(metric) { "at least as much as" } else { "no more than" },
    );
    let _ = writeln!(m, "| at | server | {metric} | best peer | its {metric} | ratio | verdict |");
    m.push_str("|---|---|---:|---|---:|---:|---|\n");
    for r in rows {
        let (lo, mid, hi) = r.ratio;
        let ratio = if hi > lo { format!("{mid:.2}× ({lo:.2}–{hi:.2})") } else { format!("{mid:.2}×") };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {ratio} | {} |",
            r.at.label(table),
            r.server,
            cell(r.value),
            r.peer,
            cell(r.peer_value),
            r.verdict
        );
    }
    m.push('\n');
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::METRICS;
    use crate::results::{at, Point};

    fn point(server: &str, path: &str, repeat: u32, cpu: f64) -> Point {
        let mut values = vec![f64::NAN; METRICS.len()];
        let set = |values: &mut Vec<f64>, name: &str, v: f64| {
            values[METRICS.iter().position(|(m, _)| *m == name).unwrap()] = v;
        };
        set(&mut values, "throughput", 1000.0);
        set(&mut values, "cpu_per_request", cpu);
        set(&mut values, "failed", 0.0);
        set(&mut values, "fell_behind", 0.0);
        Point { server: server.into(), at: Coords { path: path.into(), ..at(50) }, repeat, values }
    }

    fn spec() -> Spec {
        Spec::parse(
            "name = \"x\"\ndescription = \"d\"\nbest-peer = \"cpu_per_request\"\n[sweep]\nclients = [50]\n\
             [[server]]\nmodel = \"event\"\n[[server]]\npeer = \"nginx\"\n[[server]]\npeer = \"lighttpd\"\n",
            "t.toml",
        )
        .unwrap()
    }

    /// The best peer is chosen per point; the ratio's interval pairs the
    /// repeats by round, and the verdict reads it as the claims do.
    #[test]
    fn each_row_is_judged_against_the_best_peer_there() {
        let mut points = Vec::new();
        // 500 B: lighttpd is best (10); event 9, 9.5, 11 against 10, 10, 10: within noise.
        for (r, (e, n, l)) in
            [(9.0, 12.0, 10.0), (9.5, 12.0, 10.0), (11.0, 12.0, 10.0)].into_iter().enumerate()
        {
            points.push(point("event", "/500b.bin", r as u32 + 1, e));
            points.push(point("nginx", "/500b.bin", r as u32 + 1, n));
            points.push(point("lighttpd", "/500b.bin", r as u32 + 1, l));
        }
        // 50 KB: nginx is best (20, 22, 21); event 24, 25, 26: does not hold.
        for (r, (e, n, l)) in
            [(24.0, 20.0, 30.0), (25.0, 22.0, 30.0), (26.0, 21.0, 30.0)].into_iter().enumerate()
        {
            points.push(point("event", "/50k.bin", r as u32 + 1, e));
            points.push(point("nginx", "/50k.bin", r as u32 + 1, n));
            points.push(point("lighttpd", "/50k.bin", r as u32 + 1, l));
        }
        // 115 KB: event below lighttpd in every round: holds.
        for r in 1..=3 {
            points.push(point("event", "/115k.bin", r, 30.0));
            points.push(point("nginx", "/115k.bin", r, 40.0));
            points.push(point("lighttpd", "/115k.bin", r, 35.0 + r as f64));
        }
        let table = Table { points };
        let rows = rows(&spec(), &table, "cpu_per_request");
        let by_path = |p: &str| rows.iter().find(|r| r.at.path == p).unwrap();
        let small = by_path("/500b.bin");
        assert_eq!((small.peer.as_str(), small.verdict), ("lighttpd", WITHIN_NOISE));
        assert_eq!(small.value, (9.5, 9.0, 11.0));
        assert!(
            (small.ratio.0 - 0.9).abs() < 1e-9 && (small.ratio.2 - 1.1).abs() < 1e-9,
            "{:?}",
            small.ratio
        );
        let mid = by_path("/50k.bin");
        assert_eq!((mid.peer.as_str(), mid.verdict), ("nginx", DOES_NOT_HOLD));
        assert!((mid.ratio.1 - 25.0 / 21.0).abs() < 1e-9, "ratio of the means: {:?}", mid.ratio);
        // Paired by round: 24/20, 25/22, 26/21 — not min over max.
        assert!((mid.ratio.0 - 25.0 / 22.0).abs() < 1e-9 && (mid.ratio.2 - 26.0 / 21.0).abs() < 1e-9);
        let mut ordered = spec();
        ordered.sweep.paths = vec!["/500b.bin".into(), "/50k.bin".into(), "/115k.bin".into()];
        let order: Vec<String> =
            super::rows(&ordered, &table, "cpu_per_request").into_iter().map(|r| r.at.path).collect();
        assert_eq!(order, ["/500b.bin", "/50k.bin", "/115k.bin"], "file sizes grow");
        let large = by_path("/115k.bin");
        assert_eq!((large.peer.as_str(), large.verdict), ("lighttpd", HOLDS));
        let md = markdown(&spec(), &table, "cpu_per_request");
        assert!(md.contains("| event | 25.00 (24.00–26.00) | nginx | 21.00 (20.00–22.00) | 1.19× (1.14–1.24) | does not hold |"), "{md}");
        assert!(md.contains("less is better"), "{md}");
    }

    /// A row where either side was under load is not judged; for
    /// throughput more is better and the best peer is the fastest.
    #[test]
    fn under_load_rows_are_not_judged_and_throughput_wants_more() {
        let mut points = Vec::new();
        for r in 1..=2 {
            let mut e = point("event", "/500b.bin", r, 10.0);
            let mut n = point("nginx", "/500b.bin", r, 10.0);
            let l = point("lighttpd", "/500b.bin", r, 10.0);
            let tp = METRICS.iter().position(|(m, _)| *m == "throughput").unwrap();
            e.values[tp] = 1200.0;
            n.values[tp] = 1100.0;
            points.extend([e, n, l]);
        }
        let mut table = Table { points };
        let rows = rows(&spec(), &table, "throughput");
        assert_eq!((rows[0].peer.as_str(), rows[0].verdict), ("nginx", HOLDS), "{rows:?}");
        // One repeat: a side of 1.0, but no verdict on the noise.
        let first: Vec<Point> = table.points.iter().filter(|p| p.repeat == 1).cloned().collect();
        let one = super::rows(&spec(), &Table { points: first }, "cpu_per_request");
        assert_eq!(one[0].verdict, ONE_REPEAT_HOLDS, "{one:?}");
        let behind = METRICS.iter().position(|(m, _)| *m == "fell_behind").unwrap();
        table.points[0].values[behind] = 1.0;
        let rows = super::rows(&spec(), &table, "cpu_per_request");
        assert_eq!(rows[0].verdict, UNDER_LOAD);
        // No peer measured: no table.
        table.points.retain(|p| p.server == "event");
        assert_eq!(markdown(&spec(), &table, "cpu_per_request"), "");
    }
}
