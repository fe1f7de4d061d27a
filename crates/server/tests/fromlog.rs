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
