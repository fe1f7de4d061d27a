//! What people read instead of the raw names: round tick labels (`40k`),
//! axis names for what varies (`CGI share (%)`, `file size`), readable
//! values (`mix:cgi-10` → `10 %`, `/500b.bin` → `500 B`), phase names,
//! ISO 8601 times, and the rule that a plot shows at most
//! [`MAX_SERIES`] series (faceted, or the top ones by peak).

/// The most series one plot (or facet) shows.
pub const MAX_SERIES: usize = 8;

/// A tick or value label, round: `40000` → `40k`, `1500` → `1.5k`,
/// `2500000` → `2.5M`, `10` → `10`, `0.5` → `0.5`, `0.0012` → `0.0012`;
/// at most 3 significant digits, no trailing zeros, no `.0`.
pub fn tick(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    // Three significant digits, then trimmed.
    let digits = scaled.abs().log10().floor() as i32;
    let decimals = (2 - digits).clamp(0, 6) as usize;
    let mut s = format!("{scaled:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if s == "-0" {
        s = "0".into();
    }
    format!("{s}{suffix}")
}

/// The share of CGI requests a mix's name gives (`cgi-10` → 10), if it is
/// named so.
fn cgi_share(value: &str) -> Option<f64> {
    value.strip_prefix("mix:").unwrap_or(value).strip_prefix("cgi-")?.parse().ok()
}

/// The size a file's path names (`/500b.bin` → 500 B, `/50k.bin` →
/// 50 KB, `/1m.bin` → 1 MB), if it is named so.
fn file_size(path: &str) -> Option<String> {
    let name = path.rsplit('/').next()?;
    let stem = name.split('.').next()?;
    let digits: String = stem.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    let unit = match stem[digits.len()..].to_ascii_lowercase().as_str() {
        "b" => "B",
        "k" | "kb" | "kib" => "KB",
        "m" | "mb" | "mib" => "MB",
        _ => return None,
    };
    Some(format!("{digits} {unit}"))
}

/// How many CPUs a `taskset -c` list names (`0-1,3` → 3).
fn cpu_count(list: &str) -> Option<usize> {
    list.split(',')
        .map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            b.checked_sub(a).map(|n| n + 1)
        })
        .sum()
}

/// The name of an axis for what varies along it, given the values
/// measured there: `CGI share (%)` for mixes named `cgi-N`, `file size`
/// for paths naming sizes, `clients`, `offered load (requests/s)`, `server
/// CPUs`.
pub fn axis_label(axis: &str, values: &[String]) -> String {
    let all = |f: &dyn Fn(&str) -> bool| !values.is_empty() && values.iter().all(|v| f(v));
    match axis {
        "clients" => "clients".into(),
        "rate" => "offered load (requests/s)".into(),
        "cpus" if all(&|v| cpu_count(v).is_some()) => "server CPUs".into(),
        "cpus" => "server CPUs (taskset list)".into(),
        "memory" => "the server's memory limit".into(),
        "connection" => "connection (keep-alive, or one per request)".into(),
        "path" if all(&|v| cgi_share(v).is_some()) => "CGI share (%)".into(),
        "path" if all(&|v| file_size(v).is_some()) => "file size".into(),
        "path" if all(&|v| v.starts_with("mix:")) => "request mix".into(),
        "path" => "path requested".into(),
        other => other.into(),
    }
}

/// A value on `axis` as people read it: `mix:cgi-10` → `10 %`,
/// `/500b.bin` → `500 B`, CPU list `0-1` → `2`; as written otherwise.
pub fn axis_value(axis: &str, value: &str) -> String {
    match axis {
        "path" => {
            if let Some(share) = cgi_share(value) {
                format!("{} %", tick(share))
            } else if let Some(size) = file_size(value) {
                size
            } else {
                value.strip_prefix("mix:").unwrap_or(value).to_string()
            }
        }
        "cpus" => cpu_count(value).map_or_else(|| value.to_string(), |n| n.to_string()),
        "clients" | "rate" => value.parse::<f64>().map_or_else(|_| value.to_string(), tick),
        "memory" if value.is_empty() => "none".into(),
        "connection" if value.is_empty() => "keep-alive".into(),
        _ => value.to_string(),
    }
}

/// A phase's column (`phase_data_hit_us`) as people read it (`data (hit)`).
pub fn phase_name(metric: &str) -> String {
    let phase = metric.strip_prefix("phase_").and_then(|m| m.strip_suffix("_us")).unwrap_or(metric);
    match phase {
        "data_hit" => "data (hit)".into(),
        "data_miss" => "data (miss)".into(),
        "cgi_spawn" => "CGI spawn".into(),
        "cgi_run" => "CGI run".into(),
        other => other.replace('_', " "),
    }
}

/// `meta.json`'s `started` as an ISO 8601 UTC time (`2026-11-18T04:26:40Z`):
/// RFC 3339 as written now, or the `SystemTime { tv_sec: … }` text of
/// results written before; as written when it is neither.
pub fn iso_time(text: &str) -> String {
    if let Ok(t) = humantime::parse_rfc3339_weak(text.trim()) {
        return humantime::format_rfc3339_seconds(t).to_string();
    }
    let secs = text
        .split("tv_sec: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok());
    match secs {
        Some(secs) => {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            humantime::format_rfc3339_seconds(t).to_string()
        }
        None => text.to_string(),
    }
}

/// Now, as `meta.json`'s `started` is written (RFC 3339, UTC, seconds).
pub fn now_iso() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// How the series of a plot are shown: facets of at most [`MAX_SERIES`]
/// each. `series` gives each one's group (modus models, peers) and peak;
/// when they all fit, one facet. Otherwise a facet per group, and a group
/// of more than [`MAX_SERIES`] keeps its top ones by peak, the rest named
/// in the facet's `left_out`.
#[derive(Clone, Debug, PartialEq)]
pub struct Facet {
    /// Empty for the only facet; else the group's name.
    pub title: String,
    /// Indices into the series given, in their order.
    pub shown: Vec<usize>,
    /// Indices of the series left out (by peak).
    pub left_out: Vec<usize>,
}

/// See [`Facet`]: `series` as (group, peak).
pub fn facets(series: &[(&str, f64)]) -> Vec<Facet> {
    let top = |members: Vec<usize>| -> (Vec<usize>, Vec<usize>) {
        if members.len() <= MAX_SERIES {
            return (members, Vec::new());
        }
        let mut by_peak = members.clone();
        by_peak.sort_by(|a, b| series[*b].1.total_cmp(&series[*a].1));
        let keep: Vec<usize> = by_peak[..MAX_SERIES].to_vec();
        let shown = members.iter().copied().filter(|i| keep.contains(i)).collect();
        let left = by_peak[MAX_SERIES..].to_vec();
        (shown, left)
    };
    if series.len() <= MAX_SERIES {
        return vec![Facet {
            title: String::new(),
            shown: (0..series.len()).collect(),
            left_out: Vec::new(),
        }];
    }
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in series {
        if !groups.contains(g) {
            groups.push(g);
        }
    }
    groups
        .into_iter()
        .map(|g| {
            let members = (0..series.len()).filter(|i| series[*i].0 == g).collect();
            let (shown, left_out) = top(members);
            Facet { title: g.to_string(), shown, left_out }
        })
        .collect()
}

/// A measured value as a table shows it: whole above 100, two decimals
/// above 1, three below.
pub(crate) fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick(40000.0), "40k");
        assert_eq!(tick(10.0), "10");
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(1500.0), "1.5k");
        assert_eq!(tick(1000.0), "1k");
        assert_eq!(tick(250.0), "250");
        assert_eq!(tick(78984.0), "79k");
        assert_eq!(tick(2_500_000.0), "2.5M");
        assert_eq!(tick(0.0012), "0.0012");
        assert_eq!(tick(1.25), "1.25");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(-20000.0), "-20k");
        for v in [40000.0, 0.5, 10.0, 123456.0] {
            assert!(!tick(v).ends_with(".0"), "{v}: {}", tick(v));
        }
    }

    #[test]
    fn axes_are_named_for_what_varies() {
        let cgi: Vec<String> = ["mix:cgi-0", "mix:cgi-10", "mix:cgi-50"].map(String::from).to_vec();
        assert_eq!(axis_label("path", &cgi), "CGI share (%)");
        assert_eq!(axis_value("path", "mix:cgi-10"), "10 %");
        assert_eq!(axis_value("path", "mix:cgi-0"), "0 %");
        let sizes: Vec<String> = ["/500b.bin", "/50k.bin", "/115k.bin"].map(String::from).to_vec();
        assert_eq!(axis_label("path", &sizes), "file size");
        assert_eq!(axis_value("path", "/500b.bin"), "500 B");
        assert_eq!(axis_value("path", "/115k.bin"), "115 KB");
        assert_eq!(axis_label("path", &["/index.html".to_string()]), "path requested");
        assert_eq!(axis_value("path", "/index.html"), "/index.html");
        assert_eq!(axis_label("path", &["mix:small".to_string()]), "request mix");
        assert_eq!(axis_label("clients", &[]), "clients");
        assert_eq!(axis_label("rate", &[]), "offered load (requests/s)");
        assert_eq!(axis_label("cpus", &["0".into(), "0-1".into()]), "server CPUs");
        assert_eq!(axis_value("cpus", "0-1"), "2");
        assert_eq!(axis_value("cpus", "0,2-3"), "3");
        assert_eq!(axis_value("clients", "40000"), "40k");
        assert_eq!(phase_name("phase_data_hit_us"), "data (hit)");
        assert_eq!(phase_name("phase_read_us"), "read");
        assert_eq!(phase_name("phase_cgi_spawn_us"), "CGI spawn");
    }

    #[test]
    fn times_are_iso_8601_utc() {
        assert_eq!(iso_time("SystemTime { tv_sec: 1795713191, tv_nsec: 686835872 }"), "2026-11-26T17:13:11Z");
        assert_eq!(iso_time("2026-11-26T17:13:11Z"), "2026-11-26T17:13:11Z");
        assert_eq!(iso_time("2026-11-26T17:13:11.5Z"), "2026-11-26T17:13:11Z");
        assert_eq!(iso_time("yesterday"), "yesterday");
        let now = now_iso();
        assert!(now.ends_with('Z') && now.contains('T') && now.len() == 20, "{now}");
        assert_eq!(iso_time(&now), now);
    }

    #[test]
    fn a_plot_shows_at_most_eight_series() {
        // 5 models and 3 peers: one facet.
        let few: Vec<(&str, f64)> =
            (0..8).map(|i| (if i < 5 { "modus" } else { "peers" }, i as f64)).collect();
        let f = facets(&few);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].shown.len(), 8);
        // 9 models and 7 peers (compare's 16): faceted, each ≤ 8.
        let many: Vec<(&str, f64)> =
            (0..16).map(|i| (if i < 9 { "modus models" } else { "peers" }, (i * 7 % 16) as f64)).collect();
        let f = facets(&many);
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|f| f.shown.len() <= MAX_SERIES), "{f:?}");
        assert_eq!(f[0].title, "modus models");
        assert_eq!(f[0].shown.len() + f[0].left_out.len(), 9);
        assert_eq!(f[1].shown.len(), 7);
        // The one left out is the lowest peak among the models.
        let lowest = (0..9).min_by(|a, b| many[*a].1.total_cmp(&many[*b].1)).unwrap();
        assert_eq!(f[0].left_out, [lowest]);
        // One group of 12: its top 8.
        let one: Vec<(&str, f64)> = (0..12).map(|i| ("x", i as f64)).collect();
        let f = facets(&one);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].shown, (4..12).collect::<Vec<_>>());
        assert_eq!(f[0].left_out, [3, 2, 1, 0]);
    }
}
