//! What the lab reports: the Markdown report and its files block, and
//! the noise between identical servers.

use super::*;

/// `report --markdown --into FILE --block NAME` rewrites FILE's block from
/// a results directory — here a made one: the static spec, two repeats of
/// pool and nginx — and leaves the rest of FILE as it was.
#[test]
fn the_markdown_report_goes_into_a_files_block() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("results");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = include_str!("../../../../lab/static.toml");
    let meta = serde_json::json!({
        "modus_version": "0.1.0", "git_revision": "abc1234",
        "command": "modus lab run static --out /tmp/static",
        "started": "SystemTime { tv_sec: 1795000000, tv_nsec: 0 }",
        "machine": {"cpu": "Intel Xeon", "cpus": 2, "kernel": "6.18", "memory_mib": 3900},
        "network": "loopback", "spec": spec,
    });
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    let mut csv = HEADER.to_string() + "\n";
    let metrics = HEADER.split(',').count() - col("throughput");
    for (server, base) in [("pool", 1000.0), ("nginx", 800.0)] {
        for (mode, factor) in [("keep-alive", 3.0), ("close", 1.0)] {
            for repeat in 1..=2 {
                let throughput = base * factor + f64::from(repeat) * 10.0;
                let cpu = if server == "pool" && mode == "close" { 70.0 } else { 40.0 };
                let mut values = vec![String::new(); metrics];
                values[0] = throughput.to_string();
                values[col("p99") - col("throughput")] = "1.5".into();
                values[col("cpu_per_request") - col("throughput")] = cpu.to_string();
                values[col("fell_behind") - col("throughput")] = "0".into();
                csv += &format!("{server},50,/500b.bin,0,0,,{mode},{repeat},{}\n", values.join(","));
            }
        }
    }
    std::fs::write(dir.join("points.csv"), csv).unwrap();
    let page = tmp.path().join("BENCHMARKS.md");
    let before = "# Benchmarks\n\nWords above.\n\n<!-- static:begin -->\nthe old table\n<!-- static:end -->\n\nWords below.\n";
    std::fs::write(&page, before).unwrap();
    let d = dir.to_str().unwrap();
    let report = ["lab", "report", d, "--markdown", "--into", page.to_str().unwrap(), "--block", "static"];
    let r = run(BIN, report, LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let after = std::fs::read_to_string(&page).unwrap();
    assert!(
        after
            .starts_with("# Benchmarks\n\nWords above.\n\n<!-- static:begin -->\n### `modus lab run static`"),
        "{after}"
    );
    assert!(
        after.ends_with("<!-- static:end -->\n\nWords below.\n") && !after.contains("the old table"),
        "{after}"
    );
    assert!(
        after.contains("Command: `modus lab run static --out /tmp/static`, started 2026-11-18T11:06:40Z.")
            && !after.contains("SystemTime"),
        "{after}"
    );
    assert!(after.contains("2 × Intel Xeon, kernel 6.18, 3900 MiB; 3 repeat(s)"), "{after}");
    assert!(after.contains("| pool | connection=close | 1015 (1010–1020) |"), "{after}");
    assert!(after.contains("| nginx | connection=keep-alive | 2415 (2410–2420) |"), "{after}");
    assert!(
        after.contains("`throughput(server=pool) >= 0.8 * throughput(server=nginx)`) | **holds** |")
            && after.contains("connection=close: 1.25× (1.24–1.25) holds"),
        "{after}"
    );
    let r = run(BIN, report, LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&page).unwrap(), after, "again: the same page");

    // A file without the block gets it at its end; --into wants --block.
    std::fs::write(&page, "# Other\n").unwrap();
    let r = run(BIN, report, LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    let appended = std::fs::read_to_string(&page).unwrap();
    assert!(
        appended.starts_with("# Other\n\n<!-- static:begin -->\n### `modus lab run static`"),
        "{appended}"
    );
    assert!(appended.ends_with("<!-- static:end -->\n"), "{appended}");
    let r = run(BIN, ["lab", "report", d, "--markdown", "--into", page.to_str().unwrap()], LIMIT);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--block"), "{}", r.stderr);
}

/// Two identically configured servers: their repeats overlap, so "a ≥ b"
/// is within noise (or, in the rare run where every round happens to fall
/// one way, the word the paired repeats in points.csv call for), while
/// "a ≥ 0.3 × b" holds and "a ≤ 0.3 × b" does not. Each point records how
/// busy the machine was.
#[test]
fn identical_servers_are_within_noise_of_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("twins.toml");
    std::fs::write(
        &spec,
        r#"name = "twins"
description = "two identical pool servers"
path = "/500b.bin"
duration = "1s"
warmup = "200ms"
repeats = 6
[sweep]
clients = [2]
[[server]]
name = "a"
model = "pool"
[[server]]
name = "b"
model = "pool"
[context]
paper = "none: a test"
differences = "the same server twice"
[[claim]]
text = "a serves as much as b"
expr = "throughput(server=a) >= throughput(server=b)"
[[claim]]
text = "a serves at least 0.3 of b"
expr = "throughput(server=a) >= 0.3 * throughput(server=b)"
[[claim]]
text = "a serves at most 0.3 of b"
expr = "throughput(server=a) <= 0.3 * throughput(server=b)"
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    assert_eq!(rows.len(), 12, "2 servers × 6 repeats: {rows:?}");
    let value = |row: &Vec<String>, name: &str| -> f64 { row[col(name)].parse().unwrap() };
    for row in &rows {
        assert!(value(row, "server_cpu_pct") > 0.0, "the server worked: {row:?}");
        assert!(value(row, "load_cpu_pct") > 0.0, "the generator worked: {row:?}");
        assert!((0.0..=100.0).contains(&value(row, "other_cpu_pct")), "{row:?}");
        let disk = &row[col("disk_util_pct")];
        assert!(disk.is_empty() || (0.0..=100.0).contains(&disk.parse::<f64>().unwrap()), "{row:?}");
        assert_eq!(row[col("link_util_pct")], "", "no shaped link: {row:?}");
    }
    // What the paired repeats call for: a's throughput against b's, round by round.
    let throughput = |server: &str, repeat: &str| {
        let row = rows.iter().find(|r| r[0] == server && r[col("repeat")] == repeat).unwrap();
        value(row, "throughput")
    };
    let wins = (1..=6).filter(|r| throughput("a", &r.to_string()) >= throughput("b", &r.to_string())).count();
    let expected = match wins {
        6 => "holds",
        0 => "does not hold",
        _ => "within noise",
    };
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let verdict = |text: &str| {
        let line =
            md.lines().find(|l| l.starts_with(&format!("| {text} ("))).unwrap_or_else(|| panic!("{md}"));
        line.split(" | ").nth(1).unwrap().trim_matches('*').to_string()
    };
    assert_eq!(verdict("a serves as much as b"), expected, "a won {wins} of 6 rounds: {md}");
    if expected != "within noise" {
        eprintln!("note: a won {wins} of 6 rounds, so the repeats did not overlap in this run");
    }
    assert_eq!(verdict("a serves at least 0.3 of b"), "holds", "{md}");
    assert_eq!(verdict("a serves at most 0.3 of b"), "does not hold", "{md}");
    assert!(md.contains("wants a's throughput ÷ b's throughput ≥ 1.00×: clients=2: "), "{md}");
    assert!(md.contains("Limits at clients=2: a — ") && md.contains("b — "), "a reason from the data: {md}");
    assert!(
        md.contains("The paper's machine: none: a test; this one: the same server twice."),
        "the context beside the reason: {md}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains(&format!(">{expected}</b> — a serves as much as b")), "{html}");
    assert!(html.contains("<b class=\"holds\">holds</b> — a serves at least 0.3 of b"), "{html}");
    assert!(r.stdout.contains(&format!("claim: {expected} — a serves as much as b")), "{}", r.stdout);
}
