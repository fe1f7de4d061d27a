//! From results to what people read: the plots (SVG, with their data as
//! CSV beside them), `report.html` (self-contained: the spec, the machine,
//! the plots, tables with the spread over repeats, the claims' verdicts),
//! and the ranked table printed at the end of a run.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;
use serde_json::Value;

use crate::claims::Claim;
use crate::columns::{matching, AXES, METRICS};
use crate::results::Table;
use crate::spec::{Plot, Spec};

const COLOURS: [RGBColor; 10] = [
    RGBColor(0x0f, 0x6b, 0x5c),
    RGBColor(0xc6, 0x28, 0x28),
    RGBColor(0x15, 0x65, 0xc0),
    RGBColor(0xef, 0x6c, 0x00),
    RGBColor(0x6a, 0x1b, 0x9a),
    RGBColor(0x2e, 0x7d, 0x32),
    RGBColor(0x5d, 0x40, 0x37),
    RGBColor(0x45, 0x5a, 0x64),
    RGBColor(0xf9, 0xa8, 0x25),
    RGBColor(0x00, 0x83, 0x8f),
];

fn unit(metric: &str) -> &'static str {
    METRICS.iter().find(|(m, _)| *m == metric).map_or("", |(_, u)| *u)
}

/// The values of the axis `x` measured, in order: categories as the
/// experiment lists them (file sizes grow, CPU sets widen).
fn x_values(spec: &Spec, table: &Table, x: &str) -> Vec<String> {
    let mut xs = table.axis_values(x);
    let listed = match x {
        "path" => spec.paths(),
        "cpus" => spec.cpu_sets(),
        "connection" => spec.connections(),
        "memory" => {
            spec.memory_limits().iter().map(|m| m.map(|m| m.to_string()).unwrap_or_default()).collect()
        }
        _ => Vec::new(),
    };
    xs.sort_by_key(|v| listed.iter().position(|l| l == v).unwrap_or(usize::MAX));
    xs
}

/// The lines or bars of a plot: one per server, per combination of the
/// other axes that vary, and per metric `y` names (`phase_*`): its label
/// and the point (at each value of `x`) where it is measured.
struct Series<'a> {
    label: String,
    metric: &'static str,
    server: &'a str,
    at: Vec<Option<crate::results::Coords>>,
}

fn series<'a>(spec: &'a Spec, table: &Table, p: &Plot, xs: &[String]) -> Vec<Series<'a>> {
    let metrics = matching(&p.y);
    let others: Vec<&str> =
        AXES.iter().copied().filter(|a| *a != p.x && table.axis_values(a).len() > 1).collect();
    let coords = table.coords();
    let mut out = Vec::new();
    for s in &spec.servers {
        for &metric in &metrics {
            // The combinations of the other axes this server was measured at.
            let mut combos: Vec<Vec<String>> = coords
                .iter()
                .filter(|c| table.mean(&s.name, c, metric).is_some())
                .map(|c| others.iter().map(|a| c.get(a)).collect())
                .collect();
            combos.sort();
            combos.dedup();
            for combo in combos {
                let label = std::iter::once(s.name.clone())
                    .chain(others.iter().zip(&combo).map(|(a, v)| format!("{a}={v}")))
                    .chain((metrics.len() > 1 && !p.stacked).then(|| metric.to_string()))
                    .collect::<Vec<_>>()
                    .join(" ");
                let at = xs
                    .iter()
                    .map(|x| {
                        coords
                            .iter()
                            .find(|c| {
                                c.get(&p.x) == *x && others.iter().zip(&combo).all(|(a, v)| c.get(a) == *v)
                            })
                            .cloned()
                    })
                    .collect();
                out.push(Series { label, metric, server: &s.name, at });
            }
        }
    }
    out
}

/// One plot as SVG, and its data as CSV (`series,x,mean,min,max`): `y`
/// against the axis `x`, one series per server and per value of the other
/// axes that vary (and per metric, when `y` names several). The clients
/// axis is numeric; paths and CPU sets are categories, in the order
/// measured. `stacked`: bars instead ([`stacked`]).
pub fn plot(spec: &Spec, table: &Table, p: &Plot) -> Result<(String, String)> {
    if p.stacked {
        return stacked(spec, table, p);
    }
    let xs = x_values(spec, table, &p.x);
    let numeric = p.x == "clients" || p.x == "rate";
    let position = |i: usize, v: &str| if numeric { v.parse::<f64>().unwrap_or(0.0) } else { i as f64 };
    let mut csv = format!("series,{},{} mean,min,max\n", p.x, p.y);
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for line in self::series(spec, table, p, &xs) {
        let mut points = Vec::new();
        for (i, (x, at)) in xs.iter().zip(&line.at).enumerate() {
            let Some(at) = at else { continue };
            let (Some(mean), Some((lo, hi))) =
                (table.mean(line.server, at, line.metric), table.spread(line.server, at, line.metric))
            else {
                continue;
            };
            let _ = writeln!(csv, "{},{x},{mean},{lo},{hi}", line.label);
            points.push((position(i, x), mean));
        }
        series.push((line.label, points));
    }
    let positions: Vec<f64> = xs.iter().enumerate().map(|(i, x)| position(i, x)).collect();
    let x_last = positions.iter().copied().fold(0.0, f64::max).max(1.0);
    let x_first = positions.iter().copied().fold(f64::MAX, f64::min).min(x_last);
    let ys: Vec<f64> = series.iter().flat_map(|(_, v)| v.iter().map(|p| p.1)).collect();
    let y_max = ys.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.1;
    let y_min_pos = ys.iter().copied().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let caption = format!("{} — {} vs {}", spec.name, p.y, p.x);
        let mut builder = ChartBuilder::on(&root);
        builder.caption(caption, ("sans-serif", 18)).margin(12).x_label_area_size(42).y_label_area_size(72);
        let x_desc = match p.x.as_str() {
            "clients" => "clients (connections)".to_string(),
            "rate" => "offered load (requests/s, open loop)".to_string(),
            "cpus" => "server CPUs".to_string(),
            "memory" => "the server's memory limit".to_string(),
            "connection" => "connection (keep-alive, or one per request)".to_string(),
            other => other.to_string(),
        };
        let y_desc = format!("{} ({})", p.y, unit(matching(&p.y)[0]));
        let label_of = |v: &f64| {
            if numeric {
                format!("{v}")
            } else {
                xs.get(v.round().max(0.0) as usize).cloned().unwrap_or_default()
            }
        };
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                let mut mesh = chart.configure_mesh();
                mesh.x_desc(x_desc.as_str()).y_desc(y_desc.as_str());
                if !numeric {
                    mesh.x_labels(xs.len()).x_label_formatter(&label_of);
                }
                mesh.draw()?;
                for (i, (name, points)) in series.iter().enumerate() {
                    let colour = COLOURS[i % COLOURS.len()];
                    chart
                        .draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2)))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                        });
                    chart
                        .draw_series(points.iter().map(|&(x, y)| Circle::new((x, y), 3, colour.filled())))?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()?;
            }};
        }
        let linear_x = if numeric { 0.0..x_last * 1.05 } else { -0.5..x_last + 0.5 };
        let log_range = || (x_first.max(0.5)..x_last * 1.1).log_scale();
        match (p.log_x && numeric, p.log_y && y_min_pos < f64::MAX) {
            (true, true) => {
                draw!(builder.build_cartesian_2d(log_range(), (y_min_pos * 0.8..y_max).log_scale())?)
            }
            (true, false) => draw!(builder.build_cartesian_2d(log_range(), 0.0..y_max)?),
            (false, true) => {
                draw!(builder.build_cartesian_2d(linear_x, (y_min_pos * 0.8..y_max).log_scale())?)
            }
            (false, false) => draw!(builder.build_cartesian_2d(linear_x, 0.0..y_max)?),
        }
        root.present()?;
    }
    Ok((svg, csv))
}

/// Stacked bars as SVG, and their data as CSV (`bar,metric,mean,min,max`):
/// a bar per value of `x` and server (and combination of the other axes
/// that vary), the metrics `y` names stacked in it, bottom up in their
/// order — paper 003's phases of a request.
fn stacked(spec: &Spec, table: &Table, p: &Plot) -> Result<(String, String)> {
    let metrics = matching(&p.y);
    let xs = x_values(spec, table, &p.x);
    let all = series(spec, table, p, &xs);
    // One bar per (x, label); its height per metric.
    let mut bars: Vec<(String, Vec<f64>)> = Vec::new();
    let mut csv = "bar,metric,mean,min,max\n".to_string();
    for (i, x) in xs.iter().enumerate() {
        let mut labels: Vec<&str> = all.iter().map(|s| s.label.as_str()).collect();
        labels.dedup();
        for label in labels {
            let name = format!("{label} {}={x}", p.x);
            let mut heights = vec![0.0; metrics.len()];
            let mut any = false;
            for s in all.iter().filter(|s| s.label == label) {
                let Some(at) = &s.at[i] else { continue };
                let (Some(mean), Some((lo, hi))) =
                    (table.mean(s.server, at, s.metric), table.spread(s.server, at, s.metric))
                else {
                    continue;
                };
                let _ = writeln!(csv, "{name},{},{mean},{lo},{hi}", s.metric);
                heights[metrics.iter().position(|m| *m == s.metric).unwrap_or(0)] = mean;
                any = true;
            }
            if any {
                bars.push((name, heights));
            }
        }
    }
    let top = bars.iter().map(|(_, h)| h.iter().sum::<f64>()).fold(0.0, f64::max).max(1e-9) * 1.1;
    // The legend names the metrics some bar has, beside the bars.
    let shown: Vec<usize> = (0..metrics.len()).filter(|m| bars.iter().any(|(_, h)| h[*m] > 0.0)).collect();
    let legend_width = 190;
    let width = (bars.len() as u32 * 150 + 220).max(760) + legend_width;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, 460)).into_drawing_area();
        root.fill(&WHITE)?;
        let (area, legend) = root.split_horizontally(width - legend_width);
        for (row, &m) in shown.iter().rev().enumerate() {
            let y = 60 + row as i32 * 22;
            let colour = COLOURS[m % COLOURS.len()];
            legend.draw(&Rectangle::new([(8, y), (22, y + 14)], colour.filled()))?;
            legend.draw(&Text::new(metrics[m], (30, y), ("sans-serif", 14)))?;
        }
        let mut chart = ChartBuilder::on(&area)
            .caption(format!("{} — {} by {}", spec.name, p.y, p.x), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(72)
            .build_cartesian_2d(-0.5..bars.len() as f64 - 0.5, 0.0..top)?;
        let label_of = |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                bars.get(i as usize).map(|b| b.0.clone()).unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len() * 2 + 1)
            .x_label_formatter(&label_of)
            .y_desc(format!("{} ({})", p.y, unit(metrics[0])))
            .draw()?;
        for m in 0..metrics.len() {
            let colour = COLOURS[m % COLOURS.len()];
            let segments = bars.iter().enumerate().filter(|(_, (_, h))| h[m] > 0.0).map(|(i, (_, h))| {
                let bottom: f64 = h[..m].iter().sum();
                let x = i as f64;
                Rectangle::new([(x - 0.35, bottom), (x + 0.35, bottom + h[m])], colour.filled())
            });
            chart.draw_series(segments)?;
        }
        root.present()?;
    }
    Ok((svg, csv))
}

/// Writes `plots/`, `report.html` and `report.md` for a results directory.
pub fn write(out: &Path, spec: &Spec, table: &Table, meta: &Value) -> Result<()> {
    let plots = out.join("plots");
    std::fs::create_dir_all(&plots)?;
    let mut svgs = Vec::new();
    for p in &spec.plots {
        let (svg, csv) = plot(spec, table, p)?;
        std::fs::write(plots.join(format!("{}.svg", p.name)), &svg)?;
        std::fs::write(plots.join(format!("{}.csv", p.name)), csv)?;
        svgs.push((p.name.clone(), svg));
    }
    std::fs::write(out.join("report.html"), html(spec, table, meta, &svgs))?;
    std::fs::write(out.join("report.md"), markdown(spec, table, meta))?;
    Ok(())
}

/// The report as Markdown, for BENCHMARKS.md and issue threads: the
/// command that made the results, the machine, the ranking, the claims
/// with their verdicts, and every point (the median over repeats, min–max
/// beside it).
pub fn markdown(spec: &Spec, table: &Table, meta: &Value) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "### `modus lab run {}` — {}\n", spec.name, spec.description.trim());
    // Results of an earlier version did not keep their command line.
    let command =
        meta["command"].as_str().map_or_else(|| format!("modus lab run {}", spec.name), str::to_string);
    let _ = writeln!(
        m,
        "Command: `{command}`{}.\n",
        meta["started"].as_str().map(|s| format!(", started {}", started(s))).unwrap_or_default()
    );
    let machine = &meta["machine"];
    let _ = writeln!(
        m,
        "modus {} (git {}), {} × {}, kernel {}, {} MiB; {} repeat(s) per point.\n",
        meta["modus_version"].as_str().unwrap_or("?"),
        meta["git_revision"].as_str().unwrap_or("?"),
        machine["cpus"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["kernel"].as_str().unwrap_or("?"),
        machine["memory_mib"],
        spec.repeats,
    );
    if let Some(network) = meta["network"].as_str() {
        let _ = writeln!(m, "Network: {network}.\n");
    }
    for skipped in meta["skipped"].as_array().into_iter().flatten() {
        let _ = writeln!(
            m,
            "Not measured: {} — {}.\n",
            skipped["server"].as_str().unwrap_or("?"),
            skipped["why"].as_str().unwrap_or("?")
        );
    }
    if let Some(warning) = crate::busy::warning(table) {
        let _ = writeln!(m, "**Warning: {warning}.**\n");
    }
    m.push_str("```\n");
    m.push_str(&ranking(spec, table));
    m.push_str("```\n\n");
    if !spec.claims.is_empty() {
        claims_markdown(&mut m, spec, table);
    }
    let metrics = spec.table_metrics();
    let _ = writeln!(
        m,
        "{} † marks a point where the load generator fell behind: the generator's limit, not the server's.\n",
        if spec.repeats > 1 {
            "Each cell: the median over the repeats, min–max in brackets."
        } else {
            "One repeat per point: no spread measured."
        }
    );
    let _ = write!(m, "| server | at |");
    for k in &metrics {
        let _ = write!(m, " {k} ({}) |", unit(k));
    }
    m.push_str("\n|---|---|");
    m.push_str(&"---|".repeat(metrics.len()));
    m.push('\n');
    for s in &spec.servers {
        for at in table.coords() {
            if table.mean(&s.name, &at, "throughput").is_none() {
                continue;
            }
            let behind = table.mean(&s.name, &at, "fell_behind").unwrap_or(0.0) > 0.0;
            let _ = write!(m, "| {}{} | {} |", s.name, if behind { " †" } else { "" }, at.label(table));
            for k in &metrics {
                let cell = match (table.median(&s.name, &at, k), table.spread(&s.name, &at, k)) {
                    (Some(v), Some((lo, hi))) if hi > lo => format!("{} ({}–{})", fmt(v), fmt(lo), fmt(hi)),
                    (Some(v), _) => fmt(v),
                    _ => "–".into(),
                };
                let _ = write!(m, " {cell} |");
            }
            m.push('\n');
        }
    }
    m
}

/// The claims as Markdown: the method, a row per claim (its verdict, and
/// per point the ratio `mid (lo–hi)` and its word), then why each came out
/// so, from the points' own measurements, beside the paper's machine.
fn claims_markdown(m: &mut String, spec: &Spec, table: &Table) {
    let _ = writeln!(m, "{}\n", crate::claims::METHOD);
    let verdicts: Vec<_> = spec
        .claims
        .iter()
        .map(|c| (c, Claim::parse(&c.expr, &spec.server_names()).map(|cl| (cl.judge(table), cl))))
        .collect();
    if verdicts.iter().any(|(_, v)| v.as_ref().is_ok_and(|(v, _)| v.repeats() == 1)) {
        let _ = writeln!(m, "{}\n", crate::claims::ONE_REPEAT);
    }
    m.push_str("| claim | verdict | per point: ratio mid (lo–hi), verdict |\n|---|---|---|\n");
    for (c, v) in &verdicts {
        let (word, points) = match v {
            Ok((v, claim)) => {
                let points: Vec<String> = v
                    .points
                    .iter()
                    .map(|p| {
                        let mark = if p.counted() { "" } else { " †" };
                        format!("{}: {} {}{mark}", p.at, p.ratio(claim.bound()), p.word)
                    })
                    .collect();
                (v.word, format!("wants {}: {}", claim.wants(), points.join("; ")))
            }
            Err(_) => ("cannot be read", String::new()),
        };
        let _ = writeln!(m, "| {} (`{}`) | **{word}** | {points} |", c.text, c.expr);
    }
    m.push('\n');
    let context = spec.context.as_ref().and_then(|c| c.sentence());
    for (c, v) in &verdicts {
        if let Ok((v, _)) = v {
            let _ = writeln!(
                m,
                "- {}: {}{}",
                c.text,
                v.reason,
                context.as_ref().map(|c| format!(" {c}")).unwrap_or_default()
            );
        }
    }
    m.push('\n');
}

/// `meta.json`'s `started` (a `SystemTime` as Debug prints it) as a UTC
/// date and time; as written when it is not one.
fn started(text: &str) -> String {
    let secs = text
        .split("tv_sec: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<i64>().ok());
    let Some(secs) = secs else { return text.to_string() };
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year}-{month:02}-{day:02} {:02}:{:02} UTC", rest / 3600, rest % 3600 / 60)
}

/// `text` with what lies between the lines holding `<!-- NAME:begin -->`
/// and `<!-- NAME:end -->` replaced by `body` (the marker lines kept); the
/// markers are appended first when `text` has none — as bench/lib.sh's
/// `replace_md_block` did, so BENCHMARKS.md's blocks come from results.
pub fn replace_block(text: &str, name: &str, body: &str) -> Result<String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        anyhow::bail!("block {name:?}: letters, digits, - and _ only");
    }
    let (begin, end) = (format!("<!-- {name}:begin -->"), format!("<!-- {name}:end -->"));
    let mut text = text.to_string();
    if !text.contains(&begin) {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let _ = write!(text, "\n{begin}\n{end}\n");
    }
    let mut out = String::new();
    let mut lines = text.split_inclusive('\n');
    for line in lines.by_ref() {
        out.push_str(line);
        if line.contains(&begin) {
            break;
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(body);
    if !body.is_empty() && !body.ends_with('\n') {
        out.push('\n');
    }
    let mut closed = false;
    for line in lines {
        closed |= line.contains(&end);
        if closed {
            out.push_str(line);
        }
    }
    if !closed {
        anyhow::bail!("{begin} has no {end} after it");
    }
    Ok(out)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The self-contained report.
pub fn html(spec: &Spec, table: &Table, meta: &Value, svgs: &[(String, String)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>modus lab: {name}</title>\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><style>\
body{{font:15px/1.45 system-ui,sans-serif;max-width:70em;margin:0 auto;padding:1em;color:#222}}\
table{{border-collapse:collapse;margin:.5em 0 1.5em}}td,th{{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:right}}\
td:first-child,th:first-child{{text-align:left}}.holds{{color:#2e7d32}}.partly{{color:#ef6c00}}.fails{{color:#c62828}}.noise{{color:#6a1b9a}}\
svg{{max-width:100%;height:auto}}pre{{background:#f4f4f4;padding:.8em;overflow-x:auto}}small{{color:#666}}\
</style></head><body><h1>modus lab: {name}</h1><p>{desc}</p>",
        name = esc(&spec.name),
        desc = esc(&spec.description)
    );
    let machine = &meta["machine"];
    let _ = write!(
        h,
        "<p><small>modus {} ({}) · {} · {} CPUs · {} · {} MiB · started {}</small></p>",
        esc(meta["modus_version"].as_str().unwrap_or("?")),
        esc(meta["git_revision"].as_str().unwrap_or("no git revision")),
        esc(machine["cpu"].as_str().unwrap_or("?")),
        machine["cpus"],
        esc(machine["kernel"].as_str().unwrap_or("?")),
        machine["memory_mib"],
        esc(meta["started"].as_str().unwrap_or("?")),
    );
    if let Some(network) = meta["network"].as_str() {
        let _ = write!(h, "<p><small>Network: {}.</small></p>", esc(network));
    }
    for skipped in meta["skipped"].as_array().into_iter().flatten() {
        let _ = write!(
            h,
            "<p class=\"fails\">Not measured: {} — {}.</p>",
            esc(skipped["server"].as_str().unwrap_or("?")),
            esc(skipped["why"].as_str().unwrap_or("?"))
        );
    }
    for (peer, version) in meta["peers"].as_object().into_iter().flatten() {
        if let Some(version) = version.as_str() {
            let _ = write!(h, "<p><small>{}: {}</small></p>", esc(peer), esc(version));
        }
    }
    if let Some(warning) = crate::busy::warning(table) {
        let _ = write!(h, "<p class=\"fails\"><b>Warning: {}.</b></p>", esc(&warning));
    }
    h.push_str("<h2>Claims</h2>");
    if spec.claims.is_empty() {
        h.push_str("<p>This experiment makes no claims.</p>");
    }
    if !spec.claims.is_empty() {
        claims_html(&mut h, spec, table);
    }
    h.push_str("<h2>Plots</h2>");
    for (name, svg) in svgs {
        let _ = write!(h, "<figure id=\"plot-{}\">{svg}</figure>", esc(name));
    }
    h.push_str("<h2>Results</h2><p><small>Mean over repeats, min–max in brackets when there are several. \
               A point where the load generator fell behind is marked †: its numbers are the generator's limit, not the server's.</small></p>");
    let _ = write!(h, "<table><tr><th>server</th><th>where</th>");
    // The metrics measured at some point (no phases where no modus server ran).
    let shown: Vec<(&str, &str)> = METRICS
        .iter()
        .copied()
        .filter(|(m, _)| *m != "fell_behind")
        .filter(|(m, _)| table.points.iter().any(|p| p.get(m).is_some_and(|v| !v.is_nan())))
        .collect();
    for (m, u) in &shown {
        let _ = write!(h, "<th>{m} ({u})</th>");
    }
    h.push_str("</tr>");
    for s in &spec.servers {
        for at in table.coords() {
            if table.mean(&s.name, &at, "throughput").is_none() {
                continue;
            }
            let behind = table.mean(&s.name, &at, "fell_behind").unwrap_or(0.0) > 0.0;
            let _ = write!(
                h,
                "<tr><td>{}{}</td><td>{}</td>",
                esc(&s.name),
                if behind { " †" } else { "" },
                esc(&at.label(table))
            );
            for (m, _) in &shown {
                let Some(mean) = table.mean(&s.name, &at, m) else {
                    // A metric these results predate.
                    h.push_str("<td>–</td>");
                    continue;
                };
                let (lo, hi) = table.spread(&s.name, &at, m).unwrap_or((mean, mean));
                let spread = if lo != hi {
                    format!(" <small>[{}–{}]</small>", fmt(lo), fmt(hi))
                } else {
                    String::new()
                };
                let _ = write!(h, "<td>{}{spread}</td>", fmt(mean));
            }
            h.push_str("</tr>");
        }
    }
    h.push_str("</table>");
    let spec_toml = toml::to_string(spec).unwrap_or_default();
    let _ = writeln!(h, "<h2>The experiment</h2><pre>{}</pre></body></html>", esc(&spec_toml));
    h
}

/// The claims as HTML: per claim its verdict, what it wants, a row per
/// point (the sides' means, the ratio `mid (lo–hi)`, the word, what limited
/// it), and why, beside the paper's machine; the method below them.
fn claims_html(h: &mut String, spec: &Spec, table: &Table) {
    let context = spec.context.as_ref().and_then(|c| c.sentence());
    let num = |x: f64| if x.is_nan() { "–".to_string() } else { fmt(x) };
    let mut one_repeat = false;
    for c in &spec.claims {
        let claim = match Claim::parse(&c.expr, &spec.server_names()) {
            Ok(claim) => claim,
            Err(e) => {
                let _ = write!(
                    h,
                    "<p><b class=\"fails\">invalid</b> — {}: {}</p>",
                    esc(&c.text),
                    esc(&format!("{e:#}"))
                );
                continue;
            }
        };
        let v = claim.judge(table);
        one_repeat |= v.repeats() == 1;
        let class = |word: &str| match word {
            "holds" => "holds",
            "holds partly" => "partly",
            "within noise" => "noise",
            _ => "fails",
        };
        let _ = write!(
            h,
            "<p><b class=\"{}\">{}</b> — {}<br><small><code>{}</code>: wants {}</small></p>",
            class(v.word),
            v.word,
            esc(&c.text),
            esc(&c.expr),
            esc(&claim.wants())
        );
        if !v.points.is_empty() {
            let _ = write!(
                h,
                "<table><tr><th>where</th><th>{}</th><th>{}</th><th>ratio mid (lo–hi)</th><th>verdict</th><th>limited by</th></tr>",
                esc(&crate::claims::side_name(&claim.left)),
                esc(&crate::claims::side_name(&claim.right))
            );
            for p in &v.points {
                let mark = if p.counted() { "" } else { " †" };
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}{mark}</td><td><small>{}</small></td></tr>",
                    esc(&p.at),
                    num(p.left),
                    num(p.right),
                    esc(&p.ratio(claim.bound())),
                    class(p.word),
                    p.word,
                    esc(&p.reason)
                );
            }
            h.push_str("</table>");
        }
        let _ = write!(
            h,
            "<p><small>Why: {}{}</small></p>",
            esc(&v.reason),
            context.as_ref().map(|c| format!(" {}", esc(c))).unwrap_or_default()
        );
    }
    let _ = write!(
        h,
        "<p><small>{}{}</small></p>",
        esc(crate::claims::METHOD),
        if one_repeat { format!(" {}", crate::claims::ONE_REPEAT) } else { String::new() }
    );
}

/// The ranked summary printed after a run: each server's best throughput,
/// with its latency and cost there.
pub fn ranking(spec: &Spec, table: &Table) -> String {
    struct Row {
        name: String,
        at: String,
        peak: f64,
        p50: f64,
        p99: f64,
        cpu: f64,
        errors: f64,
        behind: bool,
        held: f64,
        failed: usize,
    }
    let failures = |server: &str| {
        table.points.iter().filter(|p| p.server == server && crate::results::failed(p)).count()
    };
    let mut rows: Vec<Row> = spec
        .servers
        .iter()
        .filter_map(|s| {
            let (at, peak) = table
                .coords()
                .into_iter()
                .filter_map(|c| table.mean(&s.name, &c, "throughput").map(|t| (c, t)))
                .max_by(|a, b| a.1.total_cmp(&b.1))?;
            let m = |metric| table.mean(&s.name, &at, metric).unwrap_or(0.0);
            Some(Row {
                name: s.name.clone(),
                at: at.label(table),
                peak,
                p50: m("p50"),
                p99: m("p99"),
                cpu: m("cpu_per_request"),
                errors: m("errors"),
                behind: m("fell_behind") > 0.0,
                held: table.mean(&s.name, &at, "held_load").unwrap_or(f64::NAN),
                failed: failures(&s.name),
            })
        })
        .collect();
    rows.sort_by(|a, b| b.peak.total_cmp(&a.peak));
    // Servers none of whose points measured anything: failures, never 0.
    let empty: Vec<(&str, usize)> = spec
        .servers
        .iter()
        .filter(|s| !rows.iter().any(|r| r.name == s.name))
        .map(|s| (s.name.as_str(), failures(&s.name)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let mut out = format!(
        "{:<4} {:<14} {:>12} {:>9} {:>9} {:>13} {:>8}  {}\n",
        "rank", "server", "peak req/s", "p50 ms", "p99 ms", "CPU µs/req", "errors", "at"
    );
    for (i, r) in rows.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:<4} {:<14} {:>12.0} {:>9.3} {:>9.3} {:>13.1} {:>8.0}  {}{}",
            i + 1,
            r.name,
            r.peak,
            r.p50,
            r.p99,
            r.cpu,
            r.errors,
            r.at,
            ranking_marks(r.behind, r.held, r.failed)
        );
    }
    for (name, n) in empty {
        let _ = writeln!(
            out,
            "{:<4} {:<14} {:>12} {:>9} {:>9} {:>13} {:>8}  ✗ FAILED: none of its {n} points measured anything \
             (the reasons are in raw/)",
            "–", name, "failed", "–", "–", "–", "–"
        );
    }
    out
}

/// The marks after a ranked server's row: the generator was the limit (†),
/// the peak point held less than the load it names (‡, `held_load` below
/// 0.9), some of its points failed (✗, nothing measured).
fn ranking_marks(behind: bool, held: f64, failed: usize) -> String {
    let mut marks = String::new();
    if behind {
        marks.push_str("  † the load generator was the limit here");
    }
    if held < crate::results::HELD_LOAD_MIN {
        let _ = write!(marks, "  ‡ under load: held {:.0}% of the load it names", held * 100.0);
    }
    if failed > 0 {
        let _ = write!(
            marks,
            "  ✗ {failed} failed point{} (nothing measured)",
            if failed == 1 { "" } else { "s" }
        );
    }
    marks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Point;

    /// Failed points are failures and under-load peaks are marked: never a
    /// 0.000 row, never an unmarked one.
    #[test]
    fn the_ranking_marks_failed_and_under_load_points() {
        let spec = crate::spec::load("tiny").unwrap();
        let index = |m: &str| crate::columns::METRICS.iter().position(|(n, _)| *n == m).unwrap();
        let point = |server: &str, clients, pairs: &[(&str, f64)]| {
            let mut values = crate::results::values(&[]);
            for (m, v) in pairs {
                values[index(m)] = *v;
            }
            Point { server: server.into(), at: crate::results::at(clients), repeat: 1, values }
        };
        let measured = |t, held| {
            [
                ("throughput", t),
                ("p50", 0.1),
                ("p99", 0.5),
                ("held_load", held),
                ("fell_behind", 0.0),
                ("failed", 0.0),
            ]
        };
        let table = Table {
            points: vec![
                point("pool", 1, &measured(900.0, 0.98)),
                point("pool", 8, &measured(1500.0, 0.5)),
                point("event", 1, &[("failed", 1.0)]),
                point("event", 8, &[("failed", 1.0)]),
            ],
        };
        let text = ranking(&spec, &table);
        let pool = text.lines().find(|l| l.contains(" pool ")).unwrap();
        assert!(pool.contains("‡ under load: held 50%") && !pool.contains('✗'), "{text}");
        let event = text.lines().find(|l| l.contains(" event ")).unwrap();
        assert!(event.contains("FAILED") && event.contains("2 points"), "{text}");
        assert!(!text.contains("0.000"), "a failure is not a measured zero: {text}");
        let mut table = table;
        table.points[1] = point("pool", 8, &[("failed", 1.0)]);
        let text = ranking(&spec, &table);
        let pool = text.lines().find(|l| l.contains(" pool ")).unwrap();
        assert!(pool.contains("✗ 1 failed point") && !pool.contains('‡'), "{text}");
    }

    #[test]
    fn plots_and_the_report_show_every_series_and_verdict() {
        let spec = crate::spec::load("tiny").unwrap();
        let mut table = Table::default();
        for (server, base) in [("pool", 1000.0), ("event", 1500.0)] {
            for (i, clients) in [1usize, 8].into_iter().enumerate() {
                let t = base * (i + 1) as f64;
                table.points.push(Point {
                    server: server.into(),
                    at: crate::results::at(clients),
                    repeat: 1,
                    values: crate::results::values(&[t, 0.2, 0.1, 0.5, 0.0, 12.0, 900.0, 0.0, 1.0, 0.0]),
                });
            }
        }
        let (svg, csv) = plot(&spec, &table, &spec.plots[0]).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("\npool\n") && svg.contains("\nevent\n"), "{svg}");
        assert!(csv.contains("event,8,3000,3000,3000"), "{csv}");
        // Another axis: categories on x, one series per server and clients.
        let by_path = Plot {
            name: "p".into(),
            x: "path".into(),
            y: "throughput".into(),
            log_x: false,
            log_y: false,
            stacked: false,
        };
        let (svg, csv) = plot(&spec, &table, &by_path).unwrap();
        assert!(svg.contains("/500b.bin"), "the category is a label");
        assert!(csv.contains("pool clients=1,/500b.bin,1000,"), "{csv}");
        let page = html(&spec, &table, &serde_json::json!({}), &[("throughput".into(), svg)]);
        assert!(page.contains("<b class=\"holds\">holds</b>"), "{page}");
        let ranked = ranking(&spec, &table);
        let lines: Vec<&str> = ranked.lines().collect();
        assert!(lines[1].starts_with("1    event") && lines[2].starts_with("2    pool"), "{ranked}");
    }

    #[test]
    fn a_block_is_replaced_between_its_markers_or_appended() {
        let page = "# Benchmarks\n\n<!-- static:begin -->\nold\ntable\n<!-- static:end -->\nafter\n";
        let new = replace_block(page, "static", "| new |\n").unwrap();
        assert_eq!(new, "# Benchmarks\n\n<!-- static:begin -->\n| new |\n<!-- static:end -->\nafter\n");
        assert_eq!(replace_block(&new, "static", "| new |").unwrap(), new, "again: the same page");
        let appended = replace_block("# B\ntext", "timing", "t\n").unwrap();
        assert_eq!(appended, "# B\ntext\n\n<!-- timing:begin -->\nt\n<!-- timing:end -->\n");
        assert_eq!(
            replace_block(&appended, "static", "").unwrap(),
            format!("{appended}\n<!-- static:begin -->\n<!-- static:end -->\n")
        );
        let other = "<!-- a:begin -->\na\n<!-- a:end -->\n<!-- b:begin -->\nb\n<!-- b:end -->\n";
        assert_eq!(
            replace_block(other, "a", "A\n").unwrap(),
            "<!-- a:begin -->\nA\n<!-- a:end -->\n<!-- b:begin -->\nb\n<!-- b:end -->\n",
            "the other block untouched"
        );
        let e = replace_block("<!-- a:begin -->\nrest\n", "a", "x").unwrap_err().to_string();
        assert!(e.contains("has no <!-- a:end -->"), "{e}");
        assert!(replace_block("", "a b", "x").is_err());
    }

    #[test]
    fn the_markdown_has_the_command_the_machine_and_medians() {
        let mut spec = crate::spec::load("tiny").unwrap();
        spec.repeats = 3;
        let mut table = Table::default();
        for (repeat, t) in [(1, 1000.0), (2, 1300.0), (3, 2000.0)] {
            table.points.push(Point {
                server: "pool".into(),
                at: crate::results::at(8),
                repeat,
                values: crate::results::values(&[t, 0.2, 0.1, 0.5, 0.0, 12.0, 900.0, 0.0]),
            });
        }
        let meta = serde_json::json!({
            "command": "modus lab run tiny --out /tmp/t",
            "started": "SystemTime { tv_sec: 1795000000, tv_nsec: 5 }",
            "machine": {"cpus": 2, "cpu": "Xeon", "kernel": "6.18", "memory_mib": 4000},
            "modus_version": "0.1.0", "git_revision": "abc1234",
        });
        let md = markdown(&spec, &table, &meta);
        assert!(md.contains("Command: `modus lab run tiny --out /tmp/t`, started 2026-11-18 "), "{md}");
        assert!(md.contains("2 × Xeon, kernel 6.18, 4000 MiB; 3 repeat(s)"), "{md}");
        assert!(md.contains("| pool | clients=8 | 1300 (1000–2000) |"), "the median, not the mean: {md}");
        let old = markdown(&spec, &table, &serde_json::json!({}));
        assert!(old.contains("Command: `modus lab run tiny`."), "{old}");
    }

    /// `phase_*` stacked: a bar per server and point that has phases (a
    /// peer's NaN makes none), the phases bottom up, the zero ones out of
    /// the legend; as lines, a series per server and phase.
    #[test]
    fn phases_stack_in_bars_or_draw_a_line_each() {
        let mut spec = crate::spec::load("tiny").unwrap();
        spec.servers[1] = crate::spec::ServerSpec {
            name: "nginx".into(),
            model: String::new(),
            peer: Some("nginx".into()),
            ..spec.servers[1].clone()
        };
        let mut table = Table::default();
        for (server, phases) in [("pool", vec![2.0, 0.0, 7.0]), ("nginx", vec![f64::NAN; 3])] {
            let mut values = crate::results::values(&[1000.0]);
            let first = METRICS.iter().position(|(m, _)| *m == "phase_read_us").unwrap();
            values[first..first + 3].copy_from_slice(&phases);
            table.points.push(Point { server: server.into(), at: crate::results::at(8), repeat: 1, values });
        }
        let bars = Plot {
            name: "phases".into(),
            x: "clients".into(),
            y: "phase_*".into(),
            log_x: false,
            log_y: false,
            stacked: true,
        };
        let (svg, csv) = plot(&spec, &table, &bars).unwrap();
        assert!(csv.starts_with("bar,metric,mean,min,max\npool clients=8,phase_read_us,2,2,2\n"), "{csv}");
        assert!(csv.contains("pool clients=8,phase_data_hit_us,7,") && !csv.contains("nginx"), "{csv}");
        assert!(svg.contains("pool clients=8") && !svg.contains("nginx"), "{svg}");
        assert!(
            svg.contains("phase_data_hit_us") && !svg.contains("phase_parse_us"),
            "zero phases: no legend"
        );
        let lines = Plot { stacked: false, ..bars };
        let (_, csv) = plot(&spec, &table, &lines).unwrap();
        assert!(
            csv.contains("pool phase_read_us,8,2,") && csv.contains("pool phase_data_hit_us,8,7,"),
            "{csv}"
        );
    }
}
