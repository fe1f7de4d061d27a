//! The plots: line charts over an axis, stacked bars for `phase_*`, and
//! paper 000's start/end trace scatter — each an SVG with its data as CSV
//! beside it.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;

use crate::columns::{matching, AXES, METRICS};
use crate::readable;
use crate::results::Table;
use crate::spec::{Plot, Spec};

/// Colours apart from one another (Okabe and Ito's, yellow darkened),
/// one per series of a facet, with a marker each ([`MARKERS`]).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0x99, 0x99, 0x33),
];

/// The markers, in the order series take them (with [`COLOURS`]).
const MARKERS: [&str; 8] =
    ["circle", "square", "triangle", "diamond", "open circle", "open square", "open triangle", "cross"];

pub(super) fn unit(metric: &str) -> &'static str {
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
    /// Modus models and peers are drawn apart when there are many.
    group: &'static str,
    at: Vec<Option<crate::results::Coords>>,
}

fn series<'a>(spec: &'a Spec, table: &Table, p: &Plot, xs: &[String]) -> Vec<Series<'a>> {
    let metrics = matching(&p.y);
    let others: Vec<&str> =
        AXES.iter().copied().filter(|a| *a != p.x && table.axis_values(a).len() > 1).collect();
    let coords = table.coords();
    let mut out = Vec::new();
    for s in &spec.servers {
        let group = if s.peer.is_some() { "peers" } else { "modus models" };
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
                    .chain(others.iter().zip(&combo).map(|(a, v)| match *a {
                        "path" => readable::axis_value(a, v),
                        _ => format!("{a}={}", readable::axis_value(a, v)),
                    }))
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
                out.push(Series { label, metric, server: &s.name, group, at });
            }
        }
    }
    out
}

type Area<'a, 'b> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Marker `shape` ([`MARKERS`]) at pixel `at`.
fn marker(area: &Area, shape: usize, at: (i32, i32), colour: RGBColor) -> Result<()> {
    let (x, y) = at;
    let r = 4;
    let fill = colour.filled();
    let line = colour.stroke_width(2);
    let triangle = vec![(x, y - r - 1), (x - r - 1, y + r), (x + r + 1, y + r)];
    match shape % MARKERS.len() {
        0 => area.draw(&Circle::new(at, r, fill))?,
        1 => area.draw(&Rectangle::new([(x - r, y - r), (x + r, y + r)], fill))?,
        2 => area.draw(&Polygon::new(triangle, fill))?,
        3 => area.draw(&Polygon::new(
            vec![(x, y - r - 1), (x + r + 1, y), (x, y + r + 1), (x - r - 1, y)],
            fill,
        ))?,
        4 => area.draw(&Circle::new(at, r, line))?,
        5 => area.draw(&Rectangle::new([(x - r, y - r), (x + r, y + r)], line))?,
        6 => {
            let mut closed = triangle.clone();
            closed.push(triangle[0]);
            area.draw(&PathElement::new(closed, line))?
        }
        _ => {
            area.draw(&PathElement::new(vec![(x - r, y - r), (x + r, y + r)], line))?;
            area.draw(&PathElement::new(vec![(x - r, y + r), (x + r, y - r)], line))?
        }
    }
    Ok(())
}

/// A legend beside the data: a line and marker, and its label, per series.
fn legend(area: &Area, top: i32, left: i32, entries: &[(usize, &str)]) -> Result<()> {
    for (row, (i, label)) in entries.iter().enumerate() {
        let y = top + row as i32 * 20;
        let colour = COLOURS[*i % COLOURS.len()];
        area.draw(&PathElement::new(vec![(left, y), (left + 24, y)], colour.stroke_width(2)))?;
        marker(area, *i, (left + 12, y), colour)?;
        let text: String = if label.chars().count() > 30 {
            label.chars().take(29).chain(std::iter::once('…')).collect()
        } else {
            label.to_string()
        };
        area.draw(&Text::new(text, (left + 32, y - 7), ("sans-serif", 13)))?;
    }
    Ok(())
}

/// Labels under the x axis at `ticks` (pixel x, text), each left out that
/// would overlap the one before it.
fn x_ticks(area: &Area, y: i32, ticks: &[(i32, String)]) -> Result<()> {
    let width = |s: &str| s.chars().count() as i32 * 7 + 4;
    let mut last: Option<(i32, i32)> = None;
    for (x, text) in ticks {
        let w = width(text);
        if last.is_some_and(|(lx, lw)| x - lx < (lw + w) / 2 + 6) {
            continue;
        }
        area.draw(&PathElement::new(vec![(*x, y), (*x, y + 5)], BLACK.stroke_width(1)))?;
        area.draw(&Text::new(
            text.clone(),
            (*x, y + 8),
            ("sans-serif", 13).into_font().into_text_style(area).pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            )),
        ))?;
        last = Some((*x, w));
    }
    Ok(())
}

/// The ticks of a log axis from `lo` to `hi`: 1, 2 and 5 × 10ⁿ, or the
/// powers of ten alone when those would be more than 12.
pub(super) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo) {
        return Vec::new();
    }
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let all = |steps: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|k| steps.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| *v >= lo && *v <= hi)
            .collect()
    };
    let dense = all(&[1.0, 2.0, 5.0]);
    if dense.len() > 12 {
        all(&[1.0])
    } else {
        dense
    }
}

/// One line of a plot: its label, its index in the facet, and its points
/// (x position, mean, min, max).
struct Line {
    label: String,
    group: &'static str,
    points: Vec<(f64, f64, f64, f64)>,
}

/// One plot as SVG, and its data as CSV (`series,x,mean,min,max`): `y`
/// against the axis `x`, one series per server and per value of the other
/// axes that vary (and per metric, when `y` names several), with error
/// bars from the repeats' min–max. The clients and rate axes are numeric;
/// paths and CPU sets are categories, in the order measured. At most
/// [`readable::MAX_SERIES`] series a facet (modus models and peers apart,
/// or the top ones by peak), each its own colour and marker, the legend
/// beside the data. `stacked`: bars instead ([`stacked`]).
pub fn plot(spec: &Spec, table: &Table, p: &Plot) -> Result<(String, String)> {
    if p.stacked {
        return stacked(spec, table, p);
    }
    let xs = x_values(spec, table, &p.x);
    let numeric = p.x == "clients" || p.x == "rate";
    let log_x = p.log_x && numeric && xs.iter().all(|x| x.parse::<f64>().is_ok_and(|v| v > 0.0));
    let position = |i: usize, v: &str| match (numeric, log_x) {
        (true, true) => v.parse::<f64>().unwrap_or(1.0).log10(),
        (true, false) => v.parse::<f64>().unwrap_or(0.0),
        _ => i as f64,
    };
    let mut csv = format!("series,{},{} mean,min,max\n", p.x, p.y);
    let mut lines: Vec<Line> = Vec::new();
    for s in self::series(spec, table, p, &xs) {
        let mut points = Vec::new();
        for (i, (x, at)) in xs.iter().zip(&s.at).enumerate() {
            let Some(at) = at else { continue };
            let (Some(mean), Some((lo, hi))) =
                (table.mean(s.server, at, s.metric), table.spread(s.server, at, s.metric))
            else {
                continue;
            };
            let _ = writeln!(csv, "{},{x},{mean},{lo},{hi}", s.label);
            points.push((position(i, x), mean, lo, hi));
        }
        lines.push(Line { label: s.label, group: s.group, points });
    }
    let peaks: Vec<(&str, f64)> =
        lines.iter().map(|l| (l.group, l.points.iter().map(|p| p.1).fold(f64::MIN, f64::max))).collect();
    let facets = readable::facets(&peaks);
    let positions: Vec<f64> = xs.iter().enumerate().map(|(i, x)| position(i, x)).collect();
    let x_last = positions.iter().copied().fold(f64::MIN, f64::max);
    let x_first = positions.iter().copied().fold(f64::MAX, f64::min);
    let x_range = match (numeric, log_x) {
        _ if positions.is_empty() => -0.5..0.5,
        (true, true) => {
            let pad = ((x_last - x_first) * 0.05).max(0.1);
            x_first - pad..x_last + pad
        }
        (true, false) => 0.0..(x_last * 1.05).max(1.0),
        _ => -0.5..x_last + 0.5,
    };
    let his: Vec<f64> = lines.iter().flat_map(|l| l.points.iter().map(|p| p.3)).collect();
    let y_max = his.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.1;
    let y_min_pos = lines
        .iter()
        .flat_map(|l| l.points.iter().flat_map(|p| [p.1, p.2]))
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min);
    let log_y = p.log_y && y_min_pos < f64::MAX;
    let y_floor = if log_y { y_min_pos * 0.8 } else { 0.0 };
    let x_desc = p.x_label.clone().unwrap_or_else(|| readable::axis_label(&p.x, &xs));
    let y_desc = p.y_label.clone().unwrap_or_else(|| format!("{} ({})", p.y, unit(matching(&p.y)[0])));
    let (width, chart_width, panel) = (900u32, 650u32, 400u32);
    let caption_h = |f: &readable::Facet| if f.left_out.is_empty() { 0 } else { 22 };
    let height: u32 = 34 + facets.iter().map(|f| panel + caption_h(f)).sum::<u32>();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let what = p.y_label.as_deref().unwrap_or(&p.y);
        root.draw(&Text::new(format!("{} — {what} by {}", spec.name, x_desc), (12, 8), ("sans-serif", 18)))?;
        let mut top = 34i32;
        for facet in &facets {
            let area = root.clone().shrink((0, top), (chart_width, panel));
            let mut builder = ChartBuilder::on(&area);
            builder.margin(12).x_label_area_size(46).y_label_area_size(72);
            if !facet.title.is_empty() {
                builder.caption(&facet.title, ("sans-serif", 15));
            }
            let y_fmt = |v: &f64| readable::tick(*v);
            // The plotting area's pixels, and each value's pixel position.
            let pixels = if log_y {
                let mut chart = builder.build_cartesian_2d(x_range.clone(), (y_floor..y_max).log_scale())?;
                chart
                    .configure_mesh()
                    .x_labels(0)
                    .disable_x_mesh()
                    // Its labels and grid are drawn below, at 1, 2 and 5 × 10ⁿ.
                    .y_labels(0)
                    .disable_y_mesh()
                    .y_label_formatter(&|_| String::new())
                    .x_desc(x_desc.as_str())
                    .y_desc(y_desc.as_str())
                    .draw()?;
                chart.plotting_area().get_pixel_range()
            } else {
                let mut chart = builder.build_cartesian_2d(x_range.clone(), 0.0..y_max)?;
                chart
                    .configure_mesh()
                    .x_labels(0)
                    .disable_x_mesh()
                    .y_labels(6)
                    .y_label_formatter(&y_fmt)
                    .x_desc(x_desc.as_str())
                    .y_desc(y_desc.as_str())
                    .draw()?;
                chart.plotting_area().get_pixel_range()
            };
            let scale_y = |v: f64| if log_y { v.max(y_floor).log10() } else { v };
            let (y_lo, y_hi) = (scale_y(y_floor), scale_y(y_max));
            let to_pixel = |x: f64, y: f64| {
                let (px, py) = (&pixels.0, &pixels.1);
                let fx = (x - x_range.start) / (x_range.end - x_range.start);
                let fy = (scale_y(y) - y_lo) / (y_hi - y_lo);
                (
                    px.start + (fx * f64::from(px.end - px.start - 1)).round() as i32,
                    py.end - 1 - (fy * f64::from(py.end - py.start - 1)).round() as i32,
                )
            };
            if log_y {
                let (px, py) = (&pixels.0, &pixels.1);
                for v in log_ticks(y_floor, y_max) {
                    let y = to_pixel(x_range.start, v).1;
                    if y < py.start || y >= py.end {
                        continue;
                    }
                    let grid = RGBColor(0xdd, 0xdd, 0xdd).stroke_width(1);
                    root.draw(&PathElement::new(vec![(px.start, y), (px.end, y)], grid))?;
                    root.draw(&PathElement::new(
                        vec![(px.start - 5, y), (px.start, y)],
                        BLACK.stroke_width(1),
                    ))?;
                    let style = ("sans-serif", 13).into_font().into_text_style(&root).pos(
                        plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Right,
                            plotters::style::text_anchor::VPos::Center,
                        ),
                    );
                    root.draw(&Text::new(readable::tick(v), (px.start - 8, y), style))?;
                }
            }
            // The x axis's labels at the values measured, none overlapping.
            let ticks: Vec<(i32, String)> = xs
                .iter()
                .enumerate()
                .map(|(i, x)| (to_pixel(position(i, x), y_floor.max(1e-12)).0, readable::axis_value(&p.x, x)))
                .collect();
            x_ticks(&root, pixels.1.end, &ticks)?;
            for (k, &i) in facet.shown.iter().enumerate() {
                let (line, colour) = (&lines[i], COLOURS[k % COLOURS.len()]);
                let path: Vec<(i32, i32)> = line.points.iter().map(|p| to_pixel(p.0, p.1)).collect();
                root.draw(&PathElement::new(path.clone(), colour.stroke_width(2)))?;
                for (&(x, _, lo, hi), &at) in line.points.iter().zip(&path) {
                    if hi > lo {
                        let (a, b) = (to_pixel(x, lo), to_pixel(x, hi));
                        let bar = colour.mix(0.8).stroke_width(1);
                        root.draw(&PathElement::new(vec![a, b], bar))?;
                        root.draw(&PathElement::new(vec![(a.0 - 4, a.1), (a.0 + 4, a.1)], bar))?;
                        root.draw(&PathElement::new(vec![(b.0 - 4, b.1), (b.0 + 4, b.1)], bar))?;
                    }
                    marker(&root, k, at, colour)?;
                }
            }
            let entries: Vec<(usize, &str)> =
                facet.shown.iter().enumerate().map(|(k, &i)| (k, lines[i].label.as_str())).collect();
            legend(&root, top + 40, chart_width as i32 + 10, &entries)?;
            if !facet.left_out.is_empty() {
                let names: Vec<&str> = facet.left_out.iter().map(|&i| lines[i].label.as_str()).collect();
                root.draw(&Text::new(
                    format!("Not drawn (lower peaks; in the CSV): {}", names.join(", ")),
                    (84, top + panel as i32 + 2),
                    ("sans-serif", 13),
                ))?;
            }
            top += (panel + caption_h(facet)) as i32;
        }
        root.present()?;
    }
    Ok((svg, csv))
}

/// Stacked bars as SVG, and their data as CSV
/// (`bar,metric,mean,min,max,share`): a bar per value of `x` and server
/// (and combination of the other axes that vary), the metrics `y` names
/// stacked in it bottom up in their order, each as its share (%) of the
/// bar's sum — paper 003's phases as shares of a request's time, named
/// as people read them (`data (hit)`); the sum (µs) above each bar.
fn stacked(spec: &Spec, table: &Table, p: &Plot) -> Result<(String, String)> {
    let metrics = matching(&p.y);
    let xs = x_values(spec, table, &p.x);
    let all = series(spec, table, p, &xs);
    // One bar per (x, label): its heights per metric, and its two label lines.
    let mut bars: Vec<(String, String, Vec<f64>)> = Vec::new();
    let mut rows: Vec<(String, &str, f64, f64, f64)> = Vec::new();
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
                rows.push((name.clone(), s.metric, mean, lo, hi));
                heights[metrics.iter().position(|m| *m == s.metric).unwrap_or(0)] = mean;
                any = true;
            }
            if any {
                let under = format!("{} {}", readable::axis_value(&p.x, x), readable::axis_label(&p.x, &xs));
                bars.push((label.to_string(), under, heights));
            }
        }
    }
    let mut csv = "bar,metric,mean,min,max,share\n".to_string();
    for (name, metric, mean, lo, hi) in &rows {
        let sum = rows.iter().filter(|r| r.0 == *name).map(|r| r.2).sum::<f64>();
        let share = if sum > 0.0 { mean / sum * 100.0 } else { 0.0 };
        let _ = writeln!(csv, "{name},{metric},{mean},{lo},{hi},{share:.2}");
    }
    // The legend names the metrics some bar has, beside the bars.
    let shown: Vec<usize> = (0..metrics.len()).filter(|m| bars.iter().any(|(_, _, h)| h[*m] > 0.0)).collect();
    let legend_width = 200;
    let width = (bars.len() as u32 * 130 + 160).max(700) + legend_width;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let (area, legend) = root.split_horizontally(width - legend_width);
        legend.draw(&Text::new("phase", (8, 40), ("sans-serif", 14)))?;
        for (row, &m) in shown.iter().rev().enumerate() {
            let y = 62 + row as i32 * 22;
            let colour = phase_colour(m);
            legend.draw(&Rectangle::new([(8, y), (22, y + 14)], colour.filled()))?;
            let name =
                if p.y.starts_with("phase_") { readable::phase_name(metrics[m]) } else { metrics[m].into() };
            legend.draw(&Text::new(name, (30, y), ("sans-serif", 14)))?;
        }
        let what = if p.y.starts_with("phase_") { "where a request's time goes" } else { p.y.as_str() };
        let mut chart = ChartBuilder::on(&area)
            .caption(
                format!("{} — {what}, by {}", spec.name, readable::axis_label(&p.x, &xs)),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(52)
            .y_label_area_size(72)
            .build_cartesian_2d(-0.5..bars.len().max(1) as f64 - 0.5, 0.0..108.0)?;
        let y_fmt = |v: &f64| readable::tick(*v);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(6)
            .y_label_formatter(&y_fmt)
            .y_desc(p.y_label.clone().unwrap_or_else(|| "share of the request's time (%)".into()))
            .draw()?;
        for m in 0..metrics.len() {
            let colour = phase_colour(m);
            let segments =
                bars.iter().enumerate().filter(|(_, (_, _, h))| h[m] > 0.0).map(|(i, (_, _, h))| {
                    let sum: f64 = h.iter().sum();
                    let bottom: f64 = h[..m].iter().sum::<f64>() / sum * 100.0;
                    let x = i as f64;
                    Rectangle::new(
                        [(x - 0.35, bottom), (x + 0.35, bottom + h[m] / sum * 100.0)],
                        colour.filled(),
                    )
                });
            chart.draw_series(segments)?;
        }
        let bottom = chart.plotting_area().get_pixel_range().1.end;
        let centre = |s: &str, at: (i32, i32), size: i32| {
            Text::new(
                s.to_string(),
                at,
                ("sans-serif", size).into_font().into_text_style(&root).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Top,
                    ),
                ),
            )
        };
        for (i, (label, under, h)) in bars.iter().enumerate() {
            let x = chart.backend_coord(&(i as f64, 0.0)).0;
            area.draw(&centre(label, (x, bottom + 6), 13))?;
            area.draw(&centre(under, (x, bottom + 22), 12))?;
            let top = chart.backend_coord(&(i as f64, 104.0)).1;
            area.draw(&centre(&format!("{} µs", readable::tick(h.iter().sum())), (x, top - 6), 12))?;
        }
        root.present()?;
    }
    Ok((svg, csv))
}

/// The colour of the `m`-th stacked metric.
fn phase_colour(m: usize) -> RGBColor {
    const MORE: [RGBColor; 2] = [RGBColor(0x88, 0x88, 0x88), RGBColor(0x8c, 0x51, 0x0a)];
    if m < COLOURS.len() {
        COLOURS[m]
    } else {
        MORE[(m - COLOURS.len()) % MORE.len()]
    }
}

/// A `kind = "trace"` plot as SVG, and its data as CSV
/// (`server,point,arrival_s,end_s,response_ms`): per server (each point's
/// first repeat that has a trace), a scatter of each traced request's
/// arrival (s since the first) against its service end (s; the diagonal
/// is no wait at all) or, with `y = "response"`, its response time (ms) —
/// paper 000's figures 7–9: RBW's uneven latency, TBW's queue building
/// up, TPW's even service. One small plot per server, on the same scales.
pub fn trace_plot(spec: &Spec, out: &Path, p: &Plot) -> Result<(String, String)> {
    let response = p.y == "response";
    let mut facets: Vec<(String, Vec<crate::trace::Request>)> = Vec::new();
    let mut plan: Vec<crate::run::Planned> =
        crate::run::schedule(spec).into_iter().filter(|pl| pl.repeat == 1).collect();
    // In the spec's order of servers, not the run's shuffled one.
    plan.sort_by_key(|pl| (pl.server, pl.clients, pl.path, pl.cpus, pl.rate, pl.memory, pl.connection));
    for planned in &plan {
        let file = crate::trace::path_for(&crate::run::raw_path(out, spec, planned));
        let Ok(requests) = crate::trace::read(&file) else { continue };
        let server = &spec.servers[planned.server].name;
        let at = planned.coords(spec);
        let name = if spec.sweep.clients.len() > 1 || spec.paths().len() > 1 || spec.rates().len() > 1 {
            format!("{server}, {} clients, {}", at.clients, readable::axis_value("path", &at.path))
        } else {
            server.clone()
        };
        facets.push((name, requests));
    }
    facets.truncate(readable::MAX_SERIES);
    let mut csv = "server,arrival_s,end_s,response_ms\n".to_string();
    let y_of = |r: &crate::trace::Request| if response { r.response_ms } else { r.end_s };
    let x_max = facets.iter().flat_map(|f| f.1.iter().map(|r| r.arrival_s)).fold(0.0, f64::max).max(1e-3);
    let y_max = facets.iter().flat_map(|f| f.1.iter().map(y_of)).fold(0.0, f64::max).max(1e-3) * 1.05;
    let (cols, cell_w, cell_h) = (2u32, 450u32, 300u32);
    let rows = (facets.len() as u32).div_ceil(cols).max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (cols * cell_w, rows * cell_h + 34)).into_drawing_area();
        root.fill(&WHITE)?;
        let what = if response { "response time" } else { "service end" };
        root.draw(&Text::new(
            format!("{} — each traced request's arrival against its {what}", spec.name),
            (12, 8),
            ("sans-serif", 18),
        ))?;
        if facets.is_empty() {
            root.draw(&Text::new(
                "No trace was recorded (a modus server with the spec's `trace`).",
                (12, 60),
                ("sans-serif", 14),
            ))?;
        }
        let cells = root
            .clone()
            .shrink((0, 34), (cols * cell_w, rows * cell_h))
            .split_evenly((rows as usize, cols as usize));
        for (k, ((name, requests), cell)) in facets.iter().zip(cells).enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            let (cv, slope) = crate::trace::metrics(requests);
            let mut chart = ChartBuilder::on(&cell)
                .caption(
                    format!(
                        "{name}: CV {}, slope {} ms/s, {} requests",
                        readable::tick(cv),
                        readable::tick(slope),
                        requests.len()
                    ),
                    ("sans-serif", 13),
                )
                .margin(8)
                .x_label_area_size(36)
                .y_label_area_size(56)
                .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_max)?;
            let fmt = |v: &f64| readable::tick(*v);
            chart
                .configure_mesh()
                .x_labels(6)
                .y_labels(5)
                .x_label_formatter(&fmt)
                .y_label_formatter(&fmt)
                .x_desc("arrival (s)")
                .y_desc(if response { "response time (ms)" } else { "service end (s)" })
                .draw()?;
            if !response {
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(0.0, 0.0), (x_max, x_max)],
                    RGBColor(0xaa, 0xaa, 0xaa).stroke_width(1),
                )))?;
            }
            // A few thousand points a plot are enough to see the shape.
            let step = requests.len().div_ceil(4000).max(1);
            let drawn: Vec<&crate::trace::Request> = requests.iter().step_by(step).collect();
            chart
                .draw_series(drawn.iter().map(|r| Circle::new((r.arrival_s, y_of(r)), 2, colour.filled())))?;
            for r in drawn {
                let _ = writeln!(csv, "{name},{:.6},{:.6},{:.3}", r.arrival_s, r.end_s, r.response_ms);
            }
        }
        root.present()?;
    }
    Ok((svg, csv))
}
