//! The results of a run: one row per measured point in `points.csv` — the
//! server, the point's coordinates on the sweep's axes (clients, path,
//! server CPUs, open-loop rate, memory limit, connection), the repeat, and the metrics of
//! [`METRICS`]. Columns are read by name, so results written before an
//! axis or a metric existed still read (a closed loop; NaN).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::columns::{AXES, METRICS};

/// Where a point lies on the sweep's axes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Coords {
    pub clients: usize,
    pub path: String,
    /// The server's CPUs (a `taskset -c` list); empty: not pinned.
    pub cpus: String,
    /// Open loop: requests per second offered; 0: closed loop.
    pub rate: u64,
    /// The servers' memory limit on the sweep's `memory` axis (`64MiB`);
    /// empty: none.
    pub memory: String,
    /// `keep-alive` or `close` (a connection per request) on the sweep's
    /// `connection` axis; empty: keep-alive, the axis not swept.
    pub connection: String,
}

impl Coords {
    /// The value on `axis`, as text.
    pub fn get(&self, axis: &str) -> String {
        match axis {
            "clients" => self.clients.to_string(),
            "rate" => self.rate.to_string(),
            "path" => self.path.clone(),
            "memory" => self.memory.clone(),
            "connection" => self.connection.clone(),
            _ => self.cpus.clone(),
        }
    }

    /// With `axis` set to `value` (a claim's fixed coordinate).
    pub fn with(&self, axis: &str, value: &str) -> Option<Coords> {
        let mut c = self.clone();
        match axis {
            "clients" => c.clients = value.parse().ok()?,
            "rate" => c.rate = value.parse().ok()?,
            "path" => c.path = value.to_string(),
            "cpus" => c.cpus = value.to_string(),
            // As written in the spec or as shown: the same size.
            "memory" => c.memory = value.parse::<units::Size>().ok()?.to_string(),
            "connection" => c.connection = value.to_string(),
            _ => return None,
        }
        Some(c)
    }

    /// As people read it: the axes that vary in `table`, `name=value`.
    pub fn label(&self, table: &Table) -> String {
        let parts: Vec<String> = AXES
            .iter()
            .filter(|a| table.axis_values(a).len() > 1)
            .map(|a| format!("{a}={}", self.get(a)))
            .collect();
        if parts.is_empty() {
            format!("clients={}", self.clients)
        } else {
            parts.join(" ")
        }
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub server: String,
    pub at: Coords,
    pub repeat: u32,
    /// Values of [`METRICS`], in order.
    pub values: Vec<f64>,
}

impl Point {
    /// A metric's value.
    pub fn get(&self, metric: &str) -> Option<f64> {
        METRICS.iter().position(|(m, _)| *m == metric).map(|i| self.values[i])
    }
}

/// A point below this share of the load it names is under load.
pub const HELD_LOAD_MIN: f64 = 0.9;

/// Whether `point` measured nothing: `failed` = 1 (the generator sent
/// nothing, or the server could not start; its other metrics are NaN).
/// Results written before the `failed` column: no throughput at all. A
/// measured zero (a server that answered nothing in the window while its
/// clients waited) is a measurement, not a failure.
pub fn failed(point: &Point) -> bool {
    match point.get("failed") {
        Some(f) if !f.is_nan() => f >= 1.0,
        _ => !point.get("throughput").is_some_and(|t| t > 0.0),
    }
}

/// The share of the load it names that `point` held, where that share
/// says whether the load was applied: the closed loop's users engaged.
/// NaN in the open loop — a server past saturation serves less than it is
/// offered, which is its answer, not a load not applied (the generator's
/// own lateness is `fell_behind`) — and where it was not recorded.
pub fn held_share(point: &Point) -> f64 {
    if point.at.rate > 0 {
        return f64::NAN;
    }
    point.get("held_load").unwrap_or(f64::NAN)
}

/// Whether the generator fell behind the load it was asked for.
pub fn fell_behind(point: &Point) -> bool {
    point.get("fell_behind").is_some_and(|v| v >= 1.0)
}

/// Whether `point` is not the server's at the load it names: it measured
/// nothing, the generator fell behind, or it held less than
/// [`HELD_LOAD_MIN`] of its users ([`held_share`]). NaN-tolerant: a point
/// written before these columns existed counts as held. The one rule the
/// claims, the ranking and `compare`'s answer all apply.
pub fn under_load(point: &Point) -> bool {
    failed(point) || fell_behind(point) || held_share(point) < HELD_LOAD_MIN
}

/// Every point of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub points: Vec<Point>,
}

/// The header of `points.csv`.
pub fn header() -> String {
    let metrics: Vec<&str> = METRICS.iter().map(|(m, _)| *m).collect();
    format!("server,clients,path,cpus,rate,memory,connection,repeat,{}", metrics.join(","))
}

impl Table {
    /// The CSV form. Paths and CPU lists are written as given: the spec
    /// refuses commas in paths, and a CPU list's commas are written as `+`.
    /// A metric the server does not have (NaN) is an empty cell.
    pub fn to_csv(&self) -> String {
        let mut out = header();
        out.push('\n');
        for p in &self.points {
            let values: Vec<String> =
                p.values.iter().map(|v| if v.is_nan() { String::new() } else { format!("{v}") }).collect();
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{}\n",
                p.server,
                p.at.clients,
                p.at.path,
                p.at.cpus.replace(',', "+"),
                p.at.rate,
                p.at.memory,
                p.at.connection,
                p.repeat,
                values.join(",")
            ));
        }
        out
    }

    /// Reads `points.csv`, its columns by name: `server`, `clients` and
    /// `repeat` are needed; an axis missing is at its default, a metric
    /// missing is NaN.
    pub fn read(path: &Path) -> Result<Table> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut lines = text.lines();
        let names: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
        let column = |name: &str| names.iter().position(|n| *n == name);
        let (Some(server), Some(clients), Some(repeat)) =
            (column("server"), column("clients"), column("repeat"))
        else {
            bail!("{}: not a points table (no server, clients and repeat columns)", path.display());
        };
        let (at_path, cpus, rate, memory, connection) =
            (column("path"), column("cpus"), column("rate"), column("memory"), column("connection"));
        let metrics: Vec<Option<usize>> = METRICS.iter().map(|(m, _)| column(m)).collect();
        let mut points = Vec::new();
        for (i, line) in lines.enumerate() {
            let bad = || anyhow::anyhow!("{} line {}: {line:?}", path.display(), i + 2);
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() != names.len() {
                return Err(bad());
            }
            let text_at = |c: Option<usize>| c.map_or(String::new(), |c| fields[c].to_string());
            let values = metrics
                .iter()
                .map(|c| match c.map(|c| fields[c]) {
                    None | Some("") => Ok(f64::NAN),
                    Some(v) => v.parse::<f64>(),
                })
                .collect::<Result<Vec<_>, _>>();
            points.push(Point {
                server: fields[server].to_string(),
                at: Coords {
                    clients: fields[clients].parse().map_err(|_| bad())?,
                    path: text_at(at_path),
                    cpus: text_at(cpus).replace('+', ","),
                    rate: rate.map_or(Ok(0), |c| fields[c].parse()).map_err(|_| bad())?,
                    memory: text_at(memory),
                    connection: text_at(connection),
                },
                repeat: fields[repeat].parse().map_err(|_| bad())?,
                values: values.map_err(|_| bad())?,
            });
        }
        Ok(Table { points })
    }

    /// The coordinates measured, in order.
    pub fn coords(&self) -> Vec<Coords> {
        self.points.iter().map(|p| p.at.clone()).collect::<BTreeSet<_>>().into_iter().collect()
    }

    /// The values measured on `axis`, in order (clients numerically).
    pub fn axis_values(&self, axis: &str) -> Vec<String> {
        let mut coords = self.coords();
        coords.sort_by(|a, b| match axis {
            "clients" => a.clients.cmp(&b.clients),
            "rate" => a.rate.cmp(&b.rate),
            "memory" => memory_bytes(&a.memory).cmp(&memory_bytes(&b.memory)),
            _ => a.get(axis).cmp(&b.get(axis)),
        });
        let mut seen = Vec::new();
        for c in coords {
            let v = c.get(axis);
            if !seen.contains(&v) {
                seen.push(v);
            }
        }
        seen
    }

    fn values<'a>(
        &'a self,
        server: &'a str,
        at: &'a Coords,
        metric: &'a str,
    ) -> impl Iterator<Item = f64> + 'a {
        self.points
            .iter()
            .filter(move |p| p.server == server && p.at == *at)
            .filter_map(move |p| p.get(metric))
            .filter(|v| !v.is_nan())
    }

    /// The mean over the repeats of a point.
    pub fn mean(&self, server: &str, at: &Coords, metric: &str) -> Option<f64> {
        let v: Vec<f64> = self.values(server, at, metric).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// The median over the repeats of a point (of an even count, the mean
    /// of the middle two): one noisy repeat does not move it.
    pub fn median(&self, server: &str, at: &Coords, metric: &str) -> Option<f64> {
        let mut v: Vec<f64> = self.values(server, at, metric).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (n > 0).then(|| if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
    }

    /// The spread over the repeats of a point: (min, max).
    pub fn spread(&self, server: &str, at: &Coords, metric: &str) -> Option<(f64, f64)> {
        self.values(server, at, metric).fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
    }
}

/// A memory limit as bytes, for ordering (none: the most).
fn memory_bytes(limit: &str) -> u64 {
    limit.parse::<units::Size>().map_or(u64::MAX, |s| s.0)
}

#[cfg(test)]
pub(crate) fn at(clients: usize) -> Coords {
    Coords {
        clients,
        path: "/500b.bin".into(),
        cpus: String::new(),
        rate: 0,
        memory: String::new(),
        connection: String::new(),
    }
}

/// A point's values for tests: the first metrics given, the rest NaN.
#[cfg(test)]
pub(crate) fn values(first: &[f64]) -> Vec<f64> {
    let mut v = first.to_vec();
    v.resize(METRICS.len(), f64::NAN);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_round_trip_through_csv() {
        let pinned = Coords {
            clients: 4,
            path: "/50k.bin".into(),
            cpus: "0,1".into(),
            rate: 0,
            memory: "64MiB".into(),
            connection: "close".into(),
        };
        let table = Table {
            points: vec![
                Point {
                    server: "pool".into(),
                    at: at(4),
                    repeat: 1,
                    values: values(&[1.5, 2.5, 2.0, 3.0, 0.0, 4.25, 5.0, 0.0, 1.0, 0.0]),
                },
                Point {
                    server: "pool".into(),
                    at: at(4),
                    repeat: 2,
                    values: values(&[2.5, 2.5, 2.0, 3.0, 0.0, 4.25, 5.0, 1.0, 1.0, 0.0]),
                },
                Point {
                    server: "pool".into(),
                    at: pinned.clone(),
                    repeat: 1,
                    values: vec![9.0; METRICS.len()],
                },
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("points.csv");
        let csv = table.to_csv();
        assert!(
            csv.lines().nth(1).unwrap().ends_with(&format!(",1,0{}", ",".repeat(METRICS.len() - 10))),
            "NaN: empty cells: {csv}"
        );
        std::fs::write(&path, csv).unwrap();
        let back = Table::read(&path).unwrap();
        // NaN is not equal to itself: compare the CSV forms.
        assert_eq!(back.to_csv(), table.to_csv());
        assert!(back.points[0].get("phase_read_us").unwrap().is_nan());
        assert_eq!(back.mean("pool", &at(4), "throughput"), Some(2.0));
        assert_eq!(back.spread("pool", &at(4), "throughput"), Some((1.5, 2.5)));
        assert_eq!(back.median("pool", &at(4), "throughput"), Some(2.0), "of two: their mean");
        assert_eq!(back.mean("event", &at(4), "throughput"), None);
        assert_eq!(back.axis_values("path"), ["/500b.bin", "/50k.bin"]);
        assert_eq!(back.axis_values("cpus"), ["", "0,1"]);
        assert_eq!(pinned.label(&back), "path=/50k.bin cpus=0,1 memory=64MiB connection=close");
        assert_eq!(back.axis_values("connection"), ["", "close"]);
        assert_eq!(back.axis_values("memory"), ["64MiB", ""], "sizes in order, no limit the most");
        assert_eq!(pinned.with("memory", "65536k").unwrap(), pinned, "a size as written or shown");
        std::fs::write(&path, "server,path\n").unwrap();
        assert!(Table::read(&path).unwrap_err().to_string().contains("not a points table"));
    }

    #[test]
    fn failed_and_under_load_points_are_told_apart() {
        let point = |pairs: &[(&str, f64)]| {
            let mut values = values(&[]);
            for (m, v) in pairs {
                values[METRICS.iter().position(|(n, _)| n == m).unwrap()] = *v;
            }
            Point { server: "pool".into(), at: at(4), repeat: 1, values }
        };
        let held =
            point(&[("throughput", 100.0), ("held_load", 0.97), ("fell_behind", 0.0), ("failed", 0.0)]);
        assert!(!failed(&held) && !under_load(&held));
        let short = point(&[("held_load", 0.6), ("fell_behind", 0.0), ("failed", 0.0)]);
        assert!(under_load(&short) && !failed(&short));
        assert!(under_load(&point(&[("held_load", 1.0), ("fell_behind", 1.0)])), "the generator's mark");
        let nothing = point(&[("failed", 1.0)]);
        assert!(failed(&nothing) && nothing.get("throughput").unwrap().is_nan(), "never a measured zero");
        assert!(!under_load(&point(&[("throughput", 90.0)])), "older results (NaN) count as held");
        assert!(failed(&point(&[("throughput", 0.0)])), "older results: no throughput, nothing measured");
        let zero = point(&[("throughput", 0.0), ("held_load", 1.0), ("fell_behind", 0.0), ("failed", 0.0)]);
        assert!(!failed(&zero) && !under_load(&zero), "a measured zero is the server's answer");
        // Open loop: serving less than offered is the answer, not a load
        // not applied; the generator's lateness still marks the point.
        let mut open =
            point(&[("throughput", 50.0), ("held_load", 0.5), ("fell_behind", 0.0), ("failed", 0.0)]);
        open.at.rate = 100;
        assert!(held_share(&open).is_nan() && !under_load(&open));
        open.values[METRICS.iter().position(|(n, _)| *n == "fell_behind").unwrap()] = 1.0;
        assert!(under_load(&open));
    }

    /// `points.csv` of an earlier version (no rate, fewer metrics) still
    /// reads: a closed loop, the missing metrics NaN, left out of means.
    #[test]
    fn an_earlier_points_table_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("points.csv");
        std::fs::write(
            &path,
            "server,clients,path,cpus,repeat,throughput,mean,p50,p99,errors,cpu_per_request,pss,fell_behind\n\
             pool,4,/500b.bin,0+1,1,100,1,1,2,0,10,900,0\n",
        )
        .unwrap();
        let t = Table::read(&path).unwrap();
        let p = &t.points[0];
        assert_eq!((p.at.rate, p.at.cpus.as_str(), p.get("throughput")), (0, "0,1", Some(100.0)));
        assert!(p.get("goodput").unwrap().is_nan());
        assert_eq!(t.mean("pool", &p.at, "goodput"), None);
    }
}
