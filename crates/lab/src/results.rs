//! The results of a run: one row per measured point in `points.csv`, the
//! columns being the point (server, clients, repeat) and the metrics of
//! [`METRICS`], in that order.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::spec::METRICS;

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub server: String,
    pub clients: usize,
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

/// Every point of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub points: Vec<Point>,
}

/// The header of `points.csv`.
pub fn header() -> String {
    let metrics: Vec<&str> = METRICS.iter().map(|(m, _)| *m).collect();
    format!("server,clients,repeat,{}", metrics.join(","))
}

impl Table {
    /// The CSV form.
    pub fn to_csv(&self) -> String {
        let mut out = header();
        out.push('\n');
        for p in &self.points {
            let values: Vec<String> = p.values.iter().map(|v| format!("{v}")).collect();
            out.push_str(&format!("{},{},{},{}\n", p.server, p.clients, p.repeat, values.join(",")));
        }
        out
    }

    /// Reads `points.csv`.
    pub fn read(path: &Path) -> Result<Table> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut lines = text.lines();
        if lines.next() != Some(header().as_str()) {
            bail!("{}: not a points table of this version (header differs)", path.display());
        }
        let mut points = Vec::new();
        for (i, line) in lines.enumerate() {
            let bad = || anyhow::anyhow!("{} line {}: {line:?}", path.display(), i + 2);
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() != 3 + METRICS.len() {
                return Err(bad());
            }
            let values = fields[3..].iter().map(|f| f.parse::<f64>()).collect::<Result<Vec<_>, _>>();
            points.push(Point {
                server: fields[0].to_string(),
                clients: fields[1].parse().map_err(|_| bad())?,
                repeat: fields[2].parse().map_err(|_| bad())?,
                values: values.map_err(|_| bad())?,
            });
        }
        Ok(Table { points })
    }

    /// The sweep's points that were measured, in order.
    pub fn clients(&self) -> Vec<usize> {
        self.points.iter().map(|p| p.clients).collect::<BTreeSet<_>>().into_iter().collect()
    }

    fn values<'a>(
        &'a self,
        server: &'a str,
        clients: usize,
        metric: &'a str,
    ) -> impl Iterator<Item = f64> + 'a {
        self.points
            .iter()
            .filter(move |p| p.server == server && p.clients == clients)
            .filter_map(move |p| p.get(metric))
    }

    /// The mean over the repeats of a point.
    pub fn mean(&self, server: &str, clients: usize, metric: &str) -> Option<f64> {
        let v: Vec<f64> = self.values(server, clients, metric).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// The spread over the repeats of a point: (min, max).
    pub fn spread(&self, server: &str, clients: usize, metric: &str) -> Option<(f64, f64)> {
        self.values(server, clients, metric).fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_round_trip_through_csv() {
        let table = Table {
            points: vec![
                Point {
                    server: "pool".into(),
                    clients: 4,
                    repeat: 1,
                    values: vec![1.5, 2.0, 3.0, 0.0, 4.25, 5.0, 0.0],
                },
                Point {
                    server: "pool".into(),
                    clients: 4,
                    repeat: 2,
                    values: vec![2.5, 2.0, 3.0, 0.0, 4.25, 5.0, 1.0],
                },
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("points.csv");
        std::fs::write(&path, table.to_csv()).unwrap();
        let back = Table::read(&path).unwrap();
        assert_eq!(back, table);
        assert_eq!(back.mean("pool", 4, "throughput"), Some(2.0));
        assert_eq!(back.spread("pool", 4, "throughput"), Some((1.5, 2.5)));
        assert_eq!(back.mean("event", 4, "throughput"), None);
        std::fs::write(&path, "server,clients\n").unwrap();
        assert!(Table::read(&path).unwrap_err().to_string().contains("header differs"));
    }
}
