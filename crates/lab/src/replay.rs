//! `modus lab compare --workload DIR --speeds …`: a recorded workload (a
//! `modus workload from-log` or `surge` directory) replayed open loop at
//! its own arrival times, sped up, against every server — and the answer
//! for that workload in words: the lowest p99 at the recorded rate, the
//! headroom of the recorded peak on each server, and where each falls over.

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::readable::tick;
use crate::results::{Coords, Table};
use crate::spec::Spec;

/// What the lab needs to know of a stream: its rate, its peak, its CGI.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub requests: u64,
    /// From the first request to the last (s).
    pub span_s: f64,
    /// Requests over the span.
    pub mean_rps: f64,
    /// The busiest second's requests.
    pub peak_rps: f64,
    /// Whether some requests are CGI (size `-`): the lab must serve `/cgi-bin/`.
    pub cgi: bool,
}

/// Reads `DIR/stream.txt` once.
pub fn shape(dir: &Path) -> Result<Shape> {
    let path = dir.join(load::surge::STREAM_FILE);
    let file = std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
    let (mut requests, mut first, mut last, mut cgi) = (0u64, None, 0u64, false);
    let (mut second, mut in_second, mut peak) = (0u64, 0u64, 0u64);
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let e = load::surge::StreamEntry::parse(&line)
            .with_context(|| format!("{}: {line:?}", path.display()))?;
        requests += 1;
        first.get_or_insert(e.time_us);
        last = last.max(e.time_us);
        cgi |= e.size.is_none();
        if e.time_us / 1_000_000 != second {
            (second, in_second) = (e.time_us / 1_000_000, 0);
        }
        in_second += 1;
        peak = peak.max(in_second);
    }
    let Some(first) = first else { bail!("{} holds no requests", path.display()) };
    // n arrivals span n − 1 gaps: the rate counts the last one's too (a
    // log's second of 40 requests is 40 req/s, not 40/0.975).
    let gaps = (last - first) as f64 / 1e6;
    let span_s = if requests > 1 { gaps * requests as f64 / (requests - 1) as f64 } else { 0.0 }.max(1.0);
    Ok(Shape { requests, span_s, mean_rps: requests as f64 / span_s, peak_rps: peak as f64, cgi })
}

/// The open-loop rates of `speeds` times the recorded mean rate.
pub fn rates(shape: &Shape, speeds: &[f64]) -> Vec<u64> {
    let mut r: Vec<u64> = speeds.iter().map(|s| (s * shape.mean_rps).round().max(1.0) as u64).collect();
    r.sort_unstable();
    r.dedup();
    r
}

/// How a server did at one speed, over its repeats.
struct AtSpeed {
    speed: f64,
    at: Coords,
    throughput: f64,
    p99: (f64, f64, f64),
    /// Why it fell over here, if it did.
    over: Option<String>,
    /// The load generator fell behind in some repeat: it, not the server, may be the limit.
    behind: bool,
}

fn at_speeds(spec: &Spec, table: &Table, server: &str, recorded: f64, bound: f64) -> Vec<AtSpeed> {
    let mut out: Vec<AtSpeed> = table
        .coords()
        .into_iter()
        .filter(|c| c.rate > 0)
        .filter_map(|at| {
            let points: Vec<_> = table.points.iter().filter(|p| p.server == server && p.at == at).collect();
            if points.is_empty() {
                return None;
            }
            let throughput = table.mean(server, &at, "throughput").unwrap_or(0.0);
            let p99 = table.mean(server, &at, "p99").unwrap_or(f64::NAN);
            let (lo, hi) = table.spread(server, &at, "p99").unwrap_or((p99, p99));
            let errors: f64 = points.iter().filter_map(|p| p.get("errors")).sum();
            let failed = points.iter().filter(|p| crate::results::failed(p)).count();
            let behind = points.iter().filter(|p| crate::results::fell_behind(p)).count();
            // Latency counts from each request's intended send time, so a
            // server that serves less than it is offered shows as a p99 that
            // grows with the queue: the bound catches it (the offered rate
            // of a window of the log is not its mean, so throughput/rate
            // would not).
            let over = if failed > 0 {
                Some(format!("{failed} of {} runs measured nothing", points.len()))
            } else if errors > 0.0 {
                Some(format!("{errors:.0} errors"))
            } else if p99 > bound {
                Some(format!("p99 {} ms over the {} ms bound", tick(p99), tick(bound)))
            } else {
                None
            };
            let behind = behind > 0;
            Some(AtSpeed {
                speed: at.rate as f64 / recorded,
                at,
                throughput,
                p99: (p99, lo, hi),
                over,
                behind,
            })
        })
        .collect();
    out.sort_by(|a, b| a.speed.total_cmp(&b.speed));
    let _ = spec;
    out
}

/// The answer for a replayed workload; empty unless `spec.stream_rate`.
pub fn answer(spec: &Spec, table: &Table) -> String {
    let Some(recorded) = spec.stream_rate.filter(|r| *r > 0.0) else { return String::new() };
    let peak = spec.stream_peak.unwrap_or(recorded);
    let bound = spec.p99_bound_ms.unwrap_or(100.0);
    let repeats = table.points.iter().map(|p| p.repeat).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The workload: {} req/s recorded on average, {} req/s in its busiest second.",
        tick(recorded),
        tick(peak)
    );
    let per: Vec<(String, Vec<AtSpeed>)> = spec
        .servers
        .iter()
        .map(|s| (s.name.clone(), at_speeds(spec, table, &s.name, recorded, bound)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    // The lowest p99 at the recorded rate, among those that held it.
    let slowest = per.iter().filter_map(|(_, v)| v.first().map(|a| a.speed)).fold(f64::INFINITY, f64::min);
    let mut at_recorded: Vec<(&str, (f64, f64, f64))> = per
        .iter()
        .filter_map(|(name, v)| {
            v.first().filter(|a| a.over.is_none() && a.speed == slowest).map(|a| (name.as_str(), a.p99))
        })
        .collect();
    at_recorded.sort_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
    match at_recorded.first() {
        Some((best, (p99, lo, hi))) => {
            let noise: Vec<&str> =
                at_recorded[1..].iter().filter(|(_, (_, l, _))| *l <= *hi).map(|(n, _)| *n).collect();
            let _ =
                write!(out, "Lowest p99 at {}× the recorded rate: {best}, {} ms", tick(slowest), tick(*p99));
            if repeats > 1 {
                let _ = write!(out, " ({}–{} over {repeats} repeats)", tick(*lo), tick(*hi));
            }
            if noise.is_empty() {
                out.push_str(".\n");
            } else {
                let _ = writeln!(out, "; within noise of it (p99 min–max overlap): {}.", noise.join(", "));
            }
        }
        None => {
            let _ = writeln!(out, "No server served the recorded rate within the bounds.");
        }
    }
    // Each server: the highest speed held, the headroom of the recorded
    // peak, and where it fell over.
    let mut rows: Vec<(f64, String)> = Vec::new();
    for (name, v) in &per {
        let held: Vec<&AtSpeed> = v.iter().take_while(|a| a.over.is_none()).collect();
        let fell = v.iter().find(|a| a.over.is_some());
        let best = held.iter().map(|a| a.throughput).fold(0.0, f64::max);
        let mut line = match held.last() {
            Some(top) => format!(
                "{name}: held up to {}× ({} req/s, p99 {} ms); the recorded peak has {:.1}× headroom",
                tick(top.speed),
                tick(top.throughput),
                tick(top.p99.0),
                best / peak
            ),
            None => format!("{name}: did not hold even {}×", tick(v[0].speed)),
        };
        match fell {
            Some(a) => {
                let _ = write!(
                    line,
                    "; falls over at {}× ({}): {}",
                    tick(a.speed),
                    a.at.label(table),
                    a.over.as_deref().unwrap_or("")
                );
                let later: Vec<String> = v
                    .iter()
                    .filter(|b| b.speed > a.speed && b.over.is_none())
                    .map(|b| format!("{}×", tick(b.speed)))
                    .collect();
                if !later.is_empty() {
                    let _ = write!(line, ", yet held {} (unsteady: repeat it)", later.join(", "));
                }
            }
            None => {
                let _ = write!(
                    line,
                    "; did not fall over up to {}× (try higher --speeds)",
                    tick(v[v.len() - 1].speed)
                );
            }
        }
        let behind: Vec<String> =
            v.iter().filter(|a| a.behind).map(|a| format!("{}×", tick(a.speed))).collect();
        if !behind.is_empty() {
            let _ = write!(
                line,
                " (the load generator fell behind at {}: there it, not the server, may be the limit)",
                behind.join(", ")
            );
        }
        rows.push((best, line));
    }
    // The highest rate held, and who is within noise of it: the open
    // loop serves what it is offered until it cannot, so the peak that
    // counts is the highest held, not the highest served.
    let tops: Vec<(&str, f64)> = per
        .iter()
        .filter_map(|(name, v)| {
            let held = v.iter().take_while(|a| a.over.is_none()).count();
            let top = v.get(held.checked_sub(1)?)?;
            Some((name.as_str(), top.speed))
        })
        .collect();
    if let Some(highest) = tops.iter().map(|t| t.1).max_by(f64::total_cmp) {
        let at_top: Vec<&str> = tops.iter().filter(|t| t.1 == highest).map(|t| t.0).collect();
        let last = per.iter().flat_map(|(_, v)| v.iter().map(|a| a.speed)).fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "Highest peak held: {} at {}× ({} req/s){}.",
            at_top.join(", "),
            tick(highest),
            tick(highest * recorded),
            if highest >= last {
                " — the highest speed asked for: raise --speeds to separate them"
            } else {
                ""
            }
        );
    }
    // A replay faster than span / point ends with the stream, before the
    // point: fewer requests a second than offered, said so.
    if let Some(span) = spec.stream_span_s {
        let point_s = (spec.duration.0 + spec.warmup.0).as_secs_f64();
        let mut short: Vec<f64> = per.iter().flat_map(|(_, v)| v.iter().map(|a| a.speed)).collect();
        short.sort_by(f64::total_cmp);
        short.dedup();
        short.retain(|s| span / s < point_s);
        if !short.is_empty() {
            let list: Vec<String> = short.iter().map(|s| format!("{}×", tick(*s))).collect();
            let _ = writeln!(
                out,
                "At {} the {} s stream ends before the {} s point does: those points served fewer requests a second than offered (a shorter --duration, or a longer log, measures them whole).",
                list.join(", "),
                tick(span),
                tick(point_s)
            );
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, line) in rows {
        let _ = writeln!(out, "  {line}.");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Point;

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
        spec.stream_rate = Some(100.0);
        spec.stream_peak = Some(250.0);
        spec.p99_bound_ms = Some(50.0);
        spec.stream_span_s = Some(100.0);
        spec.duration = units::Dur(std::time::Duration::from_secs(10));
        spec.warmup = units::Dur(std::time::Duration::ZERO);
        spec
    }

    /// (server, rate, [throughput per repeat], p99, errors)
    fn table(rows: &[(&str, u64, [f64; 2], f64, f64)]) -> Table {
        let mut t = Table::default();
        let metric = |m: &str| crate::columns::METRICS.iter().position(|(n, _)| *n == m).unwrap();
        for (server, rate, tputs, p99, errors) in rows {
            for (i, tput) in tputs.iter().enumerate() {
                let mut values = crate::results::values(&[*tput, 1.0, 1.0, *p99 + i as f64]);
                values[metric("errors")] = *errors;
                values[metric("held_load")] = tput / *rate as f64;
                let mut at = crate::results::at(64);
                at.rate = *rate;
                t.points.push(Point { server: server.to_string(), at, repeat: i as u32 + 1, values });
            }
        }
        t
    }

    #[test]
    fn says_who_is_fastest_at_the_recorded_rate_and_where_each_falls_over() {
        let spec = spec(&["event", "pool", "amped"]);
        let t = table(&[
            ("event", 100, [100.0, 100.0], 2.0, 0.0),
            ("event", 400, [400.0, 399.0], 5.0, 0.0),
            ("event", 1600, [900.0, 950.0], 300.0, 0.0),
            ("pool", 100, [100.0, 100.0], 2.5, 0.0),
            ("pool", 400, [400.0, 400.0], 80.0, 0.0),
            ("pool", 1600, [1000.0, 1000.0], 90.0, 12.0),
            ("amped", 100, [100.0, 100.0], 1.0, 3.0),
        ]);
        let mut t = t;
        let behind = crate::columns::METRICS.iter().position(|(n, _)| *n == "fell_behind").unwrap();
        t.points[4].values[behind] = 1.0;
        let a = answer(&spec, &t);
        assert!(
            a.contains("(the load generator fell behind at 16×: there it, not the server, may be the limit)"),
            "{a}"
        );
        assert!(
            a.starts_with("The workload: 100 req/s recorded on average, 250 req/s in its busiest second."),
            "{a}"
        );
        assert!(a.contains("Lowest p99 at 1× the recorded rate: event, 2.5 ms (2–3 over 2 repeats); within noise of it (p99 min–max overlap): pool."), "{a}");
        assert!(a.contains("event: held up to 4× (400 req/s, p99 5.5 ms); the recorded peak has 1.6× headroom; falls over at 16× (rate=1600): p99 300 ms over the 50 ms bound (the load generator"), "{a}");
        assert!(a.contains("pool: held up to 1× (100 req/s, p99 3 ms); the recorded peak has 0.4× headroom; falls over at 4× (rate=400): p99 80.5 ms over the 50 ms bound."), "{a}");
        assert!(a.contains("amped: did not hold even 1×; falls over at 1× (rate=100): 6 errors."), "{a}");
        let no_fall = table(&[("event", 100, [100.0, 100.0], 2.0, 0.0)]);
        assert!(
            answer(&spec, &no_fall).contains("did not fall over up to 1×"),
            "{}",
            answer(&spec, &no_fall)
        );
        assert!(a.contains("Highest peak held: event at 4× (400 req/s)."), "{a}");
        assert!(a.contains("At 16× the 100 s stream ends before the 10 s point does"), "{a}");
        let one = answer(&spec, &no_fall);
        assert!(
            one.contains("Highest peak held: event at 1× (100 req/s) — the highest speed asked for"),
            "{one}"
        );
        let unsteady =
            table(&[("pool", 100, [100.0, 100.0], 90.0, 0.0), ("pool", 400, [400.0, 400.0], 3.0, 0.0)]);
        let u = answer(&spec, &unsteady);
        assert!(
            u.contains("falls over at 1× (rate=100): p99 90.5 ms over the 50 ms bound, yet held 4× (unsteady: repeat it)"),
            "{u}"
        );
    }

    #[test]
    fn shape_of_a_stream() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("stream.txt"),
            "# x\n0 0 0 5 /a\n100000 1 0 - /cgi-bin/spin?ms=1\n200000 0 0 5 /a\n1500000 0 0 5 /a\n4000000 0 0 5 /a\n",
        )
        .unwrap();
        let s = shape(dir.path()).unwrap();
        assert_eq!((s.requests, s.span_s, s.peak_rps, s.cgi), (5, 5.0, 3.0, true));
        assert_eq!(rates(&s, &[1.0, 2.5, 0.1]), [1, 3]);
    }
}
