//! From results to what people read: the plots (`plot.rs`: SVG, with their data as
//! CSV beside them), `report.html` (self-contained: the spec, the machine,
//! the plots, tables with the spread over repeats, the claims' verdicts),
//! and the ranked table printed at the end of a run.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use crate::claims::Claim;
mod plot;

use crate::readable::{self, fmt};
use crate::results::Table;
use crate::spec::Spec;
use plot::{plot, trace_plot, unit};

/// Writes `plots/`, `report.html` and `report.md` for a results directory.
pub fn write(out: &Path, spec: &Spec, table: &Table, meta: &Value) -> Result<()> {
    let plots = out.join("plots");
    std::fs::create_dir_all(&plots)?;
    let mut svgs = Vec::new();
    for p in &spec.plots {
        let (svg, csv) = if p.kind == "trace" { trace_plot(spec, out, p)? } else { plot(spec, table, p)? };
        std::fs::write(plots.join(format!("{}.svg", p.name)), &svg)?;
        std::fs::write(plots.join(format!("{}.csv", p.name)), csv)?;
        svgs.push((p.name.clone(), svg));
    }
    let mut html = html(spec, table, meta, &svgs);
    let mut markdown = markdown(spec, table, meta);
    // `compare --workload`: the recorded workload's own shape (rate over
    // time, sizes, popularity, what its log skipped) beside the results.
    if let Ok(shape) = std::fs::read_to_string(out.join(WORKLOAD_FILE)) {
        let section = format!(
            "<section id=\"workload\"><h2>The workload replayed</h2><pre>{}</pre></section>",
            esc(&shape)
        );
        match html.rfind("</body>") {
            Some(at) => html.insert_str(at, &section),
            None => html.push_str(&section),
        }
        let _ = write!(markdown, "\n#### The workload replayed\n\n```\n{}\n```\n", shape.trim_end());
    }
    std::fs::write(out.join("report.html"), html)?;
    std::fs::write(out.join("report.md"), markdown)?;
    Ok(())
}

/// Where `compare --workload` keeps `modus workload stats` of what it
/// replays, in the results directory.
pub const WORKLOAD_FILE: &str = "workload.txt";

/// The report as Markdown, for BENCHMARKS.md and issue threads: the
/// command that made the results, the machine, the ranking, the claims
/// with their verdicts, and every point (the median over repeats, min–max
/// beside it).
pub fn markdown(spec: &Spec, table: &Table, meta: &Value) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "### `modus lab run {}` — {}\n", spec.name, spec.description.trim());
    if answers(spec) {
        for line in crate::answer::answer(spec, table).lines() {
            let _ = writeln!(m, "**{line}**\n");
        }
    }
    // Results of an earlier version did not keep their command line.
    let command =
        meta["command"].as_str().map_or_else(|| format!("modus lab run {}", spec.name), str::to_string);
    let _ = writeln!(
        m,
        "Command: `{command}`{}.\n",
        meta["started"].as_str().map(|s| format!(", started {}", readable::iso_time(s))).unwrap_or_default()
    );
    let machine = &meta["machine"];
    let _ = writeln!(
        m,
        "modus {} (git {}), {} × {}{}, kernel {}, {} MiB; {} repeat(s) per point; load from {}.\n",
        meta["modus_version"].as_str().unwrap_or("?"),
        meta["git_revision"].as_str().unwrap_or("?"),
        machine["cpus"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["cpu_id"].as_str().map(|id| format!(" ({id})")).unwrap_or_default(),
        machine["kernel"].as_str().unwrap_or("?"),
        machine["memory_mib"],
        spec.repeats,
        spec.generator.name(),
    );
    if let Some(network) = meta["network"].as_str() {
        let _ = writeln!(m, "Network: {network}.\n");
    }
    m.push_str(&crate::hosts::markdown(meta));
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
    if let Some(metric) = &spec.best_peer {
        m.push_str(&crate::versus::markdown(spec, table, metric));
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
        .map(|c| {
            (
                c,
                Claim::parse(&c.expr, &spec.server_names())
                    .map(|cl| (cl.judge_in(table, &|s| spec.slots_of(s)), cl)),
            )
        })
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
        esc(&meta["started"].as_str().map_or_else(|| "?".into(), readable::iso_time)),
    );
    if let Some(network) = meta["network"].as_str() {
        let _ = write!(h, "<p><small>Network: {}.</small></p>", esc(network));
    }
    for host in meta["hosts"].as_array().into_iter().flatten() {
        let roles: Vec<&str> =
            host["roles"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
        let _ = write!(
            h,
            "<p><small>Host {} ({}): {}.</small></p>",
            esc(host["host"].as_str().unwrap_or("?")),
            esc(&roles.join(", ")),
            esc(&crate::hosts::describe(&host["facts"]))
        );
    }
    for w in meta["host_warnings"].as_array().into_iter().flatten() {
        let _ = write!(h, "<p class=\"fails\">Warning: {}.</p>", esc(w.as_str().unwrap_or("?")));
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
    if answers(spec) {
        h.push_str("<section id=\"answer\"><h2>The answer</h2>");
        for line in crate::answer::answer(spec, table).lines() {
            let class = if line.starts_with("Unreliable") { " class=\"fails\"" } else { "" };
            let _ = write!(h, "<p{class}>{}</p>", esc(line));
        }
        h.push_str("</section>");
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
               A point where the load generator fell behind is marked †: its numbers are the generator's limit, not the server's. \
               The experiment's table metrics; every metric is in <code>points.csv</code>.</small></p>");
    let _ = write!(h, "<table><tr><th>server</th><th>where</th>");
    // The experiment's table metrics (or a short default), not all of them:
    // a table that fits the page.
    let shown: Vec<(&str, &str)> = spec.table_metrics().into_iter().map(|m| (m, unit(m))).collect();
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
        let v = claim.judge_in(table, &|s| spec.slots_of(s));
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

/// Whether the report opens with [`crate::answer::answer`]: `compare`'s.
pub fn answers(spec: &Spec) -> bool {
    spec.name == "compare"
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
                behind: table
                    .points
                    .iter()
                    .any(|p| p.server == s.name && p.at == at && crate::results::fell_behind(p)),
                held: table
                    .points
                    .iter()
                    .filter(|p| p.server == s.name && p.at == at)
                    .map(crate::results::held_share)
                    .filter(|h| !h.is_nan())
                    .fold(f64::NAN, f64::min),
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
mod tests;
