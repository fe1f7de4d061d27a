use super::*;
use crate::columns::METRICS;
use crate::results::Point;
use crate::spec::Plot;
use plot::log_ticks;

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
    // Round ticks, an x label per value measured, the legend beside the data.
    assert!(svg.contains("\n1k\n") && !svg.contains("1000.0") && !svg.contains(".0\n"), "{svg}");
    assert!(svg.contains("\n1\n") && svg.contains("\n8\n"), "x ticks at the clients: {svg}");
    assert!(svg.contains("#0072B2") && svg.contains("#D55E00"), "a colour each: {svg}");
    let log = Plot { log_y: true, log_x: true, ..spec.plots[0].clone() };
    let (svg, _) = plot(&spec, &table, &log).unwrap();
    assert!(svg.contains("\n1k\n") && svg.contains("\n2k\n") && !svg.contains(".0\n"), "{svg}");
    // Another axis: categories on x, one series per server and clients.
    let by_path = Plot { name: "p".into(), x: "path".into(), y: "throughput".into(), ..Plot::default() };
    let (svg, csv) = plot(&spec, &table, &by_path).unwrap();
    assert!(svg.contains("\n500 B\n") && svg.contains("file size"), "the category, readable: {svg}");
    assert!(csv.contains("pool clients=1,/500b.bin,1000,"), "{csv}");
    let page = html(&spec, &table, &serde_json::json!({}), &[("throughput".into(), svg)]);
    assert!(page.contains("<b class=\"holds\">holds</b>"), "{page}");
    let ranked = ranking(&spec, &table);
    let lines: Vec<&str> = ranked.lines().collect();
    assert!(lines[1].starts_with("1    event") && lines[2].starts_with("2    pool"), "{ranked}");
}

#[test]
fn log_axes_tick_at_round_values() {
    assert_eq!(log_ticks(150.0, 90000.0), [200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 50000.0]);
    assert_eq!(log_ticks(0.1, 1e6), [0.1, 1.0, 10.0, 100.0, 1000.0, 1e4, 1e5, 1e6].map(|v: f64| v));
    assert!(log_ticks(0.0, 10.0).is_empty());
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
    assert!(md.contains("Command: `modus lab run tiny --out /tmp/t`, started 2026-11-18T11:06:40Z."), "{md}");
    assert!(!md.contains("SystemTime"), "{md}");
    let page = html(&spec, &table, &meta, &[]);
    assert!(page.contains("started 2026-11-18T11:06:40Z") && !page.contains("SystemTime"), "{page}");
    // The table shows the spec's metrics, not every one.
    assert!(page.contains("<th>p99 (ms)</th>") && !page.contains("<th>pss"), "{page}");
    assert!(md.contains("2 × Xeon, kernel 6.18, 4000 MiB; 3 repeat(s)"), "{md}");
    assert!(md.contains("| pool | clients=8 | 1300 (1000–2000) |"), "the median, not the mean: {md}");
    let old = markdown(&spec, &table, &serde_json::json!({}));
    assert!(old.contains("Command: `modus lab run tiny`."), "{old}");
    // A virtual machine's generic model name, with the numbers that tell its generation.
    let mut with_id = meta.clone();
    with_id["machine"]["cpu_id"] = "GenuineIntel family 6 model 207 stepping 2, virtual".into();
    let md = markdown(&spec, &table, &with_id);
    assert!(
        md.contains("2 × Xeon (GenuineIntel family 6 model 207 stepping 2, virtual), kernel 6.18"),
        "{md}"
    );
}

/// Compare's 9 models and 7 peers: two facets (models, peers), each at
/// most 8 series — the models' lowest peak named under its facet —
/// with error bars where the repeats differ.
#[test]
fn many_servers_are_faceted_with_error_bars() {
    let mut spec = crate::spec::load("tiny").unwrap();
    let template = spec.servers[0].clone();
    let models =
        ["per-request", "pool", "staged", "prefork", "worker", "perchild", "event", "amped", "uring"];
    let peers = [
        "nginx",
        "lighttpd",
        "h2o",
        "apache-prefork",
        "apache-worker",
        "apache-event",
        "apache-worker-cache",
    ];
    spec.servers = models
        .iter()
        .map(|m| crate::spec::ServerSpec { name: m.to_string(), model: m.to_string(), ..template.clone() })
        .chain(peers.iter().map(|p| crate::spec::ServerSpec {
            name: p.to_string(),
            model: String::new(),
            peer: Some(p.to_string()),
            ..template.clone()
        }))
        .collect();
    let mut table = Table::default();
    for (k, s) in spec.servers.iter().enumerate() {
        for (repeat, wobble) in [(1, 0.9), (2, 1.1)] {
            let t = 1000.0 * (k as f64 + 1.0) * wobble;
            table.points.push(Point {
                server: s.name.clone(),
                at: crate::results::at(8),
                repeat,
                values: crate::results::values(&[t]),
            });
        }
    }
    let (svg, _) = plot(&spec, &table, &spec.plots[0]).unwrap();
    assert!(svg.contains("\nmodus models\n") && svg.contains("\npeers\n"), "{svg}");
    assert!(svg.contains("Not drawn (lower peaks; in the CSV): per-request"), "{svg}");
    // Each series' legend entry once: 8 + 7 drawn.
    let drawn = spec.servers.iter().filter(|s| svg.contains(&format!("\n{}\n", s.name))).count();
    assert_eq!(drawn, 15, "{svg}");
    // Error bars: a vertical line per point from min to max, with caps.
    let per_point = 3;
    let paths = svg.matches("<polyline").count();
    assert!(paths >= 15 * per_point, "{paths} lines: {svg}");
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
        stacked: true,
        ..Plot::default()
    };
    let (svg, csv) = plot(&spec, &table, &bars).unwrap();
    assert!(
        csv.starts_with("bar,metric,mean,min,max,share\npool clients=8,phase_read_us,2,2,2,22.22\n"),
        "{csv}"
    );
    assert!(csv.contains("pool clients=8,phase_data_hit_us,7,7,7,77.78") && !csv.contains("nginx"), "{csv}");
    assert!(svg.contains("\npool\n") && svg.contains("8 clients") && !svg.contains("nginx"), "{svg}");
    assert!(
        svg.contains("share of the request&apos;s time (%)")
            || svg.contains("share of the request's time (%)"),
        "{svg}"
    );
    assert!(
        svg.contains("data (hit)") && svg.contains("\nread\n") && !svg.contains("parse"),
        "readable names; zero phases: no legend: {svg}"
    );
    assert!(!svg.contains("phase_"), "{svg}");
    let lines = Plot { stacked: false, ..bars };
    let (_, csv) = plot(&spec, &table, &lines).unwrap();
    assert!(csv.contains("pool phase_read_us,8,2,") && csv.contains("pool phase_data_hit_us,8,7,"), "{csv}");
}
