//! `modus workload from-log`, end to end: modus serves a SURGE tree,
//! `modus load` replays its stream, and modus's own access log goes
//! through `from-log` — whose fits must find the SURGE parameters again —
//! and back through `modus load` against the documents it wrote.

use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{run, Server};

const BIN: &str = env!("CARGO_BIN_EXE_modus");
const LIMIT: Duration = Duration::from_secs(120);

fn ok(args: &[&str]) -> String {
    let out = run(BIN, args, LIMIT);
    assert!(out.status.success(), "modus {args:?}: {}\n{}", out.stdout, out.stderr);
    out.stdout
}

fn load_json(args: &[&str]) -> Value {
    let mut all = vec!["load"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(&ok(&all)).expect("one JSON report")
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn a_surge_log_written_by_modus_goes_through_from_log_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let (surge, work, log) = (dir.path().join("surge"), dir.path().join("w"), dir.path().join("access.log"));
    let s = surge.to_str().unwrap();
    // 1,500 files, all of which 10,000 Zipf requests reach; sizes clipped
    // at 512 KiB to keep the tree small (the fit reads the clipped files
    // as censored).
    ok(&[
        "workload",
        "surge",
        "--out",
        s,
        "--files",
        "1500",
        "--requests",
        "10000",
        "--max-size",
        "524288",
        "--seed",
        "3",
    ]);
    let srv = Server::start(BIN, "event", &surge.join("docs"), &["--access-log", log.to_str().unwrap()]);
    let url = format!("http://{}/", srv.addr());
    let r = load_json(&[&url, "--workload", s, "-c", "16"]);
    assert_eq!((r["requests"].as_u64(), r["errors"].as_u64()), (Some(10_000), Some(0)), "{r}");
    // The log is flushed at least once a second.
    let start = Instant::now();
    while lines(&log) < 10_000 && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lines(&log), 10_000);

    let stats = ok(&["workload", "from-log", log.to_str().unwrap(), "--out", work.to_str().unwrap()]);
    assert!(stats.contains("10000 requests replayed, 0 skipped") && stats.contains("0 missing"), "{stats}");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("manifest.json")).unwrap()).unwrap();
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(surge.join("manifest.json")).unwrap()).unwrap();
    let (r, gen) = (&m["realised"], &g["realised"]);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert_eq!(r["documents"], gen["files_requested"]);
    // Every document has the size the log recorded, which is the file's.
    let stream = std::fs::read_to_string(work.join("stream.txt")).unwrap();
    for l in stream.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split(' ').collect();
        let original = std::fs::metadata(surge.join("docs").join(&f[4][1..])).unwrap().len();
        assert_eq!(f[3], original.to_string(), "{l}");
    }
    let within = |got: f64, want: f64, what: &str| {
        assert!(
            (got - want).abs() <= 0.10 * want.abs(),
            "{what}: recovered {got}, generated {want}\n{stats}"
        );
    };
    // The generating parameters (SURGE's published ones).
    within(f(r, "zipf_exponent_mle"), 1.0, "Zipf exponent");
    within(f(r, "size_body_mu"), 9.357, "lognormal μ");
    within(f(r, "size_body_sigma"), 1.318, "lognormal σ");
    within(f(r, "size_tail_fraction"), 0.07, "tail fraction");
    // The Pareto shape: ~100 of 1,500 files are in the tail, so the shape
    // drawn differs from 1.1 by its standard error α/√n ≈ 11 % already (the
    // generator's own MLE, which knows which files were tail draws, says
    // 1.14 here): within 10 % of what was drawn, and within two standard
    // errors of the published 1.1.
    let alpha = f(r, "size_tail_alpha");
    within(alpha, f(gen, "tail_alpha_mle"), "Pareto α against the drawn files'");
    let se = 1.1 / f(gen, "tail_files").sqrt();
    assert!((alpha - 1.1).abs() < 2.0 * se, "Pareto α {alpha}: more than 2 SE ({se}) from 1.1");

    // And back: the new workload replays against its own documents, open
    // loop at 4× the recorded times, every body the size the log said.
    drop(srv);
    let srv = Server::start(BIN, "event", &work.join("docs"), &[]);
    let url = format!("http://{}/", srv.addr());
    let w = work.to_str().unwrap();
    let r = load_json(&[&url, "--workload", w, "-c", "32", "--stream-times", "4", "--checksum"]);
    assert_eq!((r["requests"].as_u64(), r["errors"].as_u64()), (Some(10_000), Some(0)), "{r}");
}

/// `lab compare --workload DIR --speeds`: a small log (static files and
/// a CGI share) made into a workload, replayed at its own times at 1× and
/// 4× against two models, answered in words, and one point per speed.
#[test]
fn compare_replays_a_log_workload_at_speeds_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let mut text = String::new();
    // 20 s at 40 requests a second from 8 clients; every tenth request a script.
    for i in 0..800u32 {
        let (s, client) = (i / 40, i % 8);
        let target = if i % 10 == 0 { format!("/search.php?q={i}") } else { format!("/p/{}.html", i % 37) };
        let size = 200 + (i % 37) * 300;
        text += &format!(
            "10.0.0.{client} - - [01/Jan/2024:00:00:{s:02} +0000] \"GET {target} HTTP/1.1\" 200 {size} \"-\" \"ua {client}\" 0.001\n"
        );
    }
    std::fs::write(&log, text).unwrap();
    let work = dir.path().join("w");
    let stats = ok(&["workload", "from-log", log.to_str().unwrap(), "--out", work.to_str().unwrap()]);
    assert!(stats.contains("800 requests replayed") && stats.contains("(10.0 %)"), "{stats}");
    let out = dir.path().join("cmp");
    let args = [
        "lab",
        "compare",
        "--workload",
        work.to_str().unwrap(),
        "--speeds",
        "1,4",
        "--models",
        "event,pool",
        "--peers",
        "none",
        "--duration",
        "1s",
        "--repeats",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    let answer = ok(&args);
    assert!(answer.contains("The workload: 40 req/s recorded on average"), "{answer}");
    assert!(
        answer.contains("Lowest p99 at 1× the recorded rate") || answer.contains("No server served"),
        "{answer}"
    );
    for model in ["event", "pool"] {
        let line = answer
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{model}: ")))
            .unwrap_or_else(|| panic!("{answer}"));
        assert!(line.contains("falls over at") || line.contains("did not fall over up to 4×"), "{line}");
    }
    assert!(answer.contains("Highest peak held: "), "{answer}");
    let shape = std::fs::read_to_string(out.join("workload.txt")).unwrap();
    assert!(
        shape.contains("(modus workload from-log)") && shape.contains("CGI: 1 targets, 80 requests"),
        "{shape}"
    );
    // The log's shape is in the report beside the results.
    for report in ["report.md", "report.html"] {
        let text = std::fs::read_to_string(out.join(report)).unwrap();
        assert!(
            text.contains("The workload replayed") && text.contains("CGI: 1 targets, 80 requests"),
            "{report}"
        );
    }
    // A point per model, speed and repeat, at 40 and 160 req/s.
    let csv = std::fs::read_to_string(out.join("points.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 2 * 2 * 2, "{csv}");
    for rate in ["40", "160"] {
        assert_eq!(rows.iter().filter(|r| r.split(',').nth(4) == Some(rate)).count(), 4, "{csv}");
    }
    // The CGI share went to the bundled spin program, at the log's 1 ms.
    let raw = std::fs::read_dir(out.join("raw"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("q0-r1"))
        .unwrap();
    let record: Value = serde_json::from_str(&std::fs::read_to_string(raw).unwrap()).unwrap();
    assert!(record["load"]["per_class"]["cgi"]["requests"].as_u64().unwrap_or(0) > 0, "{record}");
    assert!(
        record["load"]["status"]["200"].as_u64().unwrap_or(0) > 0
            && record["load"]["status"]["404"].is_null(),
        "{record}"
    );
}
