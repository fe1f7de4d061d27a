//! `modus lab` end to end: a real (tiny) experiment into a results
//! directory, its report rebuilt without a rerun, an interrupted run
//! resumed, `compare` over every model on the demo site, peers, fronts,
//! network namespaces and memory limits.

use std::path::Path;
use std::time::Duration;

use testkit::run;

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// Reports: `lab/report.rs`.
#[path = "lab/report.rs"]
mod report;
const LIMIT: Duration = Duration::from_secs(180);
/// The header of `points.csv`.
const HEADER: &str = "server,clients,path,cpus,rate,memory,connection,repeat,throughput,mean,p50,p99,errors,\
cpu_per_request,pss,fell_behind,goodput,busy,disk_read_per_req,request_us,data_us,phase_read_us,phase_parse_us,\
phase_data_hit_us,phase_data_miss_us,phase_cgi_spawn_us,phase_cgi_run_us,phase_write_us,phase_log_us,\
phase_queue_us,p50_2xx,p99_2xx,other_5xx,worker_spread,workers,users,held_load,failed,server_cpu_pct,\
load_cpu_pct,other_cpu_pct,disk_util_pct,link_util_pct,latency_cv,queue_slope,starved";

/// A column of `points.csv`, by name.
fn col(name: &str) -> usize {
    HEADER.split(',').position(|c| c == name).unwrap_or_else(|| panic!("no column {name}"))
}

const THROUGHPUT: usize = 8;
const ERRORS: usize = 12;
const GOODPUT: usize = 16;

/// Whether `program` is installed where the lab looks for it.
fn installed(program: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin"].iter().any(|d| Path::new(d).join(program).is_file())
}

/// A temporary directory others may search: Apache's children run as
/// www-data when the tests run as root.
fn searchable_tempdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    tmp
}

fn csv_rows(dir: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(dir.join("points.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(HEADER), "{text}");
    assert_eq![(col("throughput"), col("errors"), col("goodput")), (THROUGHPUT, ERRORS, GOODPUT)];
    lines.map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[test]
fn a_tiny_experiment_runs_reports_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tiny");
    let o = out.to_str().unwrap();
    let r = run(BIN, ["lab", "run", "tiny", "--quick", "--out", o], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    assert_eq!(rows.len(), 4, "2 servers × 2 points: {rows:?}");
    for row in &rows {
        assert!(["pool", "event"].contains(&row[0].as_str()), "{row:?}");
        let throughput: f64 = row[THROUGHPUT].parse().unwrap();
        assert!(throughput > 0.0, "every point served requests: {row:?}");
        assert_eq!(row[ERRORS], "0", "no errors: {row:?}");
        // Its own timing, from /status.json: a request's time, the sum of its phases.
        let request: f64 = row[col("request_us")].parse().unwrap();
        // The read phase, not separated from the receive (heads in one
        // segment), is an empty cell, never a measured 0.
        let read = &row[col("phase_read_us")];
        assert!(read.is_empty() || read.parse::<f64>().unwrap() > 0.0, "{row:?}");
        let phases: f64 = (col("phase_read_us")..=col("phase_queue_us"))
            .filter(|c| !row[*c].is_empty())
            .map(|c| row[c].parse::<f64>().unwrap())
            .sum();
        assert!(request > 0.0 && (phases - request).abs() <= 0.05 * request, "{row:?}");
        // Every connection a client that sent, the load held, nothing failed.
        assert_eq!(row[col("users")], row[col("clients")], "{row:?}");
        let held: f64 = row[col("held_load")].parse().unwrap();
        assert!(held > 0.0 && held.is_finite(), "{row:?}");
        assert_eq!(row[col("failed")], "0", "{row:?}");
        assert!(row[col("disk_read_per_req")].parse::<f64>().unwrap() >= 0.0, "{row:?}");
    }
    let svg = std::fs::read_to_string(out.join("plots/throughput.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "an SVG document");
    assert!(svg.contains("\npool\n") && svg.contains("\nevent\n"), "both series in the legend");
    assert!(std::fs::read_to_string(out.join("plots/throughput.csv"))
        .unwrap()
        .starts_with("series,clients,"));
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("<b class=\"holds\">holds</b>"), "the claim's verdict");
    assert!(report.contains("<svg"), "plots inline: the report is self-contained");
    assert!(!report.contains("src=\"http") && !report.contains("href=\"http"), "no external assets");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    assert!(meta["machine"]["cpus"].as_u64().unwrap() >= 1, "{meta}");
    let started = meta["started"].as_str().unwrap();
    assert!(started.starts_with("20") && started.ends_with('Z') && started.contains('T'), "RFC 3339: {meta}");
    assert!(report.contains(&format!("started {started}")) && !report.contains("SystemTime"), "{report}");
    assert!(r.stdout.contains("claim: holds"), "{}", r.stdout);

    // The report again, from the results alone.
    std::fs::remove_file(out.join("report.html")).unwrap();
    let r = run(BIN, ["lab", "report", o], LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(out.join("report.html").exists());

    // The same as Markdown, for BENCHMARKS.md: the rerun command, the
    // ranking, the claims' verdicts and a row per server and point.
    let r = run(BIN, ["lab", "report", o, "--markdown"], LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    let md = &r.stdout;
    assert!(md.starts_with("### `modus lab run tiny`"), "{md}");
    assert!(md.contains(&format!("Command: `modus lab run tiny --quick --out {o}`, started 20")), "{md}");
    assert!(md.contains("rank server") && md.contains("peak req/s"), "{md}");
    assert!(md.contains("| claim | verdict | per point: ratio mid (lo–hi), verdict |"), "{md}");
    assert!(md.contains("one repeat cannot tell noise"), "{md}");
    assert!(
        md.contains("| server | at | throughput (requests/s) | p99 (ms) | cpu_per_request (µs) |"),
        "{md}"
    );
    for server in ["pool", "event"] {
        assert_eq!(md.matches(&format!("\n| {server} | ")).count(), 2, "two points each: {md}");
    }
    assert_eq!(std::fs::read_to_string(out.join("report.md")).unwrap(), *md);

    // An interrupted run (one point's record gone) measures only what is missing.
    let raw = out.join("raw");
    let kept = raw.join("pool-c1-p0-u0-r1.json");
    let before = std::fs::metadata(&kept).unwrap().modified().unwrap();
    std::fs::remove_file(raw.join("event-c8-p0-u0-r1.json")).unwrap();
    let r = run(BIN, ["lab", "run", "tiny", "--quick", "--out", o, "--resume"], LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(raw.join("event-c8-p0-u0-r1.json").exists(), "the missing point was measured");
    assert_eq!(std::fs::metadata(&kept).unwrap().modified().unwrap(), before, "a finished point was kept");
    assert_eq!(csv_rows(&out).len(), 4);
}

#[test]
fn compare_ranks_every_model_on_the_demo_site() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("compare");
    let r = run(
        BIN,
        ["lab", "compare", "--clients", "2", "--duration", "200ms", "--out", out.to_str().unwrap()],
        LIMIT,
    );
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    // The ranking, then the answer in words after a blank line.
    let ranked: Vec<&str> = r.stdout.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    assert_eq!(ranked.len(), 9, "{}", r.stdout);
    let answer = r.stdout.split("\n\n").nth(1).unwrap_or_default();
    assert!(answer.contains("Winner at peak throughput: ") && answer.contains("Best p99"), "{}", r.stdout);
    // Three repeats by default: the ranking is called unreliable only with a
    // reason from the repeats (a wide spread, a failed point), never for
    // having one repeat (answer.rs's unit tests cover each reason).
    if let Some(doubt) = answer.lines().next().and_then(|l| l.strip_prefix("Unreliable ranking: ")) {
        assert!(!doubt.contains("one repeat per point"), "{}", r.stdout);
        assert!(
            doubt.contains("repeats at some peaks differ")
                || doubt.contains("measured nothing")
                || doubt.contains("busy"),
            "{}",
            r.stdout
        );
    }
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("<section id=\"answer\"><h2>The answer</h2><p"), "{report}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("**Winner at peak throughput: "), "{md}");
    // Nine models: at most eight lines a plot, the ninth named under it.
    let svg = std::fs::read_to_string(out.join("plots/throughput.svg")).unwrap();
    assert!(svg.contains("Not drawn (lower peaks; in the CSV): "), "{svg}");
    for model in models::MODELS.iter().map(|m| m.name) {
        assert!(
            ranked.iter().any(|l| l.split_whitespace().nth(1) == Some(model)),
            "{model} in\n{}",
            r.stdout
        );
    }
    // Three interleaved repeats by default: one run says little.
    let rows = csv_rows(&out);
    let registered = models::MODELS.len();
    assert_eq!(rows.len(), 3 * registered, "every model × 3 repeats");
    for repeat in ["1", "2", "3"] {
        assert_eq!(rows.iter().filter(|r| r[col("repeat")] == repeat).count(), registered, "{rows:?}");
    }
}

/// `compare --mix` and `--workload`: the requests come from the mix file or
/// the SURGE stream, and each point's load report shows those paths.
#[test]
fn compare_takes_a_mix_or_a_workload() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("site");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("small.txt"), "s".repeat(100)).unwrap();
    std::fs::write(root.join("large.txt"), "l".repeat(50_000)).unwrap();
    let mix = tmp.path().join("mix.txt");
    std::fs::write(&mix, "3 /small.txt\n1 /large.txt\n").unwrap();
    let workload = tmp.path().join("w");
    let r = run(
        BIN,
        ["workload", "surge", "--out", workload.to_str().unwrap(), "--files", "20", "--requests", "200"],
        LIMIT,
    );
    assert!(r.status.success(), "{}", r.stderr);
    let replayed = format!("\"workload\": \"SURGE stream {}", workload.to_str().unwrap());
    for (flag, value, root_arg, wanted) in
        [("--mix", &mix, Some(&root), "\"/large.txt\""), ("--workload", &workload, None, replayed.as_str())]
    {
        let out = tmp.path().join(format!("out{flag}"));
        let mut args = vec!["lab", "compare", "--models", "pool,event", "--peers", "none", "--clients", "2"];
        args.extend(["--repeats", "1"]);
        args.extend(["--duration", "300ms", flag, value.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        if let Some(root) = root_arg {
            args.push(root.to_str().unwrap());
        }
        let r = run(BIN, args, LIMIT);
        assert!(r.status.success(), "{flag}: {}\n{}", r.stdout, r.stderr);
        assert_eq!(csv_rows(&out).len(), 2, "{flag}");
        let raw = std::fs::read_dir(out.join("raw")).unwrap().next().unwrap().unwrap().path();
        let record = std::fs::read_to_string(raw).unwrap();
        assert!(record.contains(wanted), "{flag}: the load came from it: {record}");
        assert!(!record.contains("\"404\""), "{flag}: every path was found: {record}");
    }
}

/// `workload = "surge"`: the population follows the point. At N clients
/// the lab replays a SURGE stream of N users (made per client count, over
/// one set of documents), each with SURGE's OFF times; `users` counts
/// those that sent a measured request. With no warm-up that count is
/// exactly the clients, and not by luck: each user's first request has no
/// OFF time before it (SURGE's first page), so every user sends at the
/// point's start, inside the measured second. (With a warm-up, a user in a
/// long OFF time — SURGE's are heavy-tailed, seconds to an hour — may be
/// silent through a short window, and `users` would be at most the
/// clients.) Every user is either waiting for an answer or thinking
/// through the whole second (thinks cut at the window's ends count), so
/// Little's law holds the clients: `held_load` at least 0.9.
#[test]
fn a_surge_point_replays_as_many_users_as_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("surge.toml");
    std::fs::write(
        &spec,
        "name = \"surge-users\"\ndescription = \"d\"\nworkload = \"surge\"\nduration = \"1s\"\n\
         warmup = \"0s\"\nseed = 3\n[sweep]\nclients = [3, 6]\n[[server]]\nmodel = \"event\"\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        let clients = &row[col("clients")];
        assert_eq!(&row[col("users")], clients, "every user sent: {row:?}");
        assert_eq!(row[col("failed")], "0", "{row:?}");
        let held: f64 = row[col("held_load")].parse().unwrap();
        assert!((0.9..=1.1).contains(&held), "the users held: {row:?}");
        let raw = out.join(format!("raw/event-c{clients}-p0-u0-r1.json"));
        let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(raw).unwrap()).unwrap();
        let params = &record["load"]["params"];
        assert_eq!(params["stream_think"], true, "SURGE's OFF times: {params}");
        let stream = out.join(format!("surge-{clients}"));
        assert_eq!(params["workload_dir"], stream.to_str().unwrap(), "{params}");
        assert!(record["load"]["think_mean_us"].as_f64().is_some_and(|t| t >= 0.0), "{}", record["load"]);
        // A stream of exactly that many users.
        let users: std::collections::BTreeSet<String> = std::fs::read_to_string(stream.join("stream.txt"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(' ').nth(1).unwrap().to_string())
            .collect();
        assert_eq!(users.len().to_string(), *clients, "{users:?}");
    }
    // One set of documents for every point.
    assert!(out.join("surge/docs").is_dir() && !out.join("surge-3/docs").exists());
}

/// A point that measures nothing (here a server that cannot start) is a
/// failed point — `failed` 1, its other metrics empty, never a measured
/// 0, its reason in its raw record — and the run goes on to the next;
/// the ranking says it failed.
#[test]
fn a_point_that_measures_nothing_is_a_failure_not_a_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("broken.toml");
    std::fs::write(
        &spec,
        "name = \"broken\"\ndescription = \"d\"\npath = \"/500b.bin\"\nduration = \"300ms\"\n\
         warmup = \"100ms\"\n[sweep]\nclients = [2]\n[[server]]\nmodel = \"pool\"\n\
         [[server]]\nname = \"broken\"\nmodel = \"event\"\nargs = [\"--no-such-flag\"]\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "the run goes on: {}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    let broken = rows.iter().find(|r| r[0] == "broken").expect("its point is recorded");
    assert_eq!(broken[col("failed")], "1", "{broken:?}");
    assert_eq!(broken[THROUGHPUT], "", "not a measured zero: {broken:?}");
    let pool = rows.iter().find(|r| r[0] == "pool").expect("the other server was measured");
    assert_eq!(pool[col("failed")], "0", "{pool:?}");
    assert!(pool[THROUGHPUT].parse::<f64>().unwrap() > 0.0, "{pool:?}");
    let record = std::fs::read_to_string(out.join("raw/broken-c2-p0-u0-r1.json")).unwrap();
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert!(record["failure"].as_str().is_some_and(|w| !w.is_empty()), "{record}");
    let line = r.stdout.lines().find(|l| l.contains(" broken ")).unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(line.contains("FAILED") && !line.contains("0.000"), "{}", r.stdout);
}

/// The peers run beside the models from the configurations the lab
/// writes, where installed; otherwise the report says they were skipped.
#[test]
fn peers_are_measured_or_said_to_be_missing() {
    let tmp = searchable_tempdir();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "<p>peer test</p>\n").unwrap();
    let out = tmp.path().join("peers");
    let r = run(
        BIN,
        [
            "lab",
            "compare",
            root.to_str().unwrap(),
            "--path",
            "/index.html",
            "--models",
            "event",
            "--clients",
            "2",
            "--duration",
            "300ms",
            "--repeats",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    let rows = csv_rows(&out);
    for (peer, program) in [
        ("nginx", "nginx"),
        ("lighttpd", "lighttpd"),
        ("h2o", "h2o"),
        ("apache-prefork", "apache2"),
        ("apache-worker", "apache2"),
        ("apache-event", "apache2"),
        ("apache-worker-cache", "apache2"),
    ] {
        if installed(program) {
            let row =
                rows.iter().find(|r| r[0] == peer).unwrap_or_else(|| panic!("{peer} measured: {rows:?}"));
            assert!(
                row[THROUGHPUT].parse::<f64>().unwrap() > 0.0 && row[ERRORS] == "0",
                "{peer} served: {row:?}"
            );
            assert_eq!(row[col("request_us")], "", "a peer has no phases: an empty cell: {row:?}");
            assert!(out.join(format!("peers/{peer}/{peer}.conf")).is_file());
        } else {
            eprintln!("{peer} is not installed: checking that the report says so");
            assert!(report.contains(&format!("Not measured: {peer} — {peer} is not installed")), "{report}");
            assert!(report.contains(&format!("apt-get install {program}")), "{report}");
            assert!(r.stderr.contains(&format!("skipping {peer}")), "{}", r.stderr);
        }
    }
}

#[test]
fn list_and_bad_experiments() {
    let r = run(BIN, ["lab", "list"], LIMIT);
    assert!(r.status.success());
    for name in ["tiny", "models-500b", "paper000-file-size", "paper002-director", "reuseport", "direct"] {
        assert!(r.stdout.lines().any(|l| l.starts_with(name)), "{name} in\n{}", r.stdout);
    }
    // What was asked cannot be: exit 2, as every modus command's usage errors.
    let r = run(BIN, ["lab", "run", "nope"], LIMIT);
    assert_eq!(r.status.code(), Some(2));
    assert!(r.stderr.contains("no experiment \"nope\": the built-in ones are tiny"), "{}", r.stderr);
    let r = run(BIN, ["lab", "compare", "--models", "pool,nope"], LIMIT);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--models: no model \"nope\""), "{}", r.stderr);
    let empty = tempfile::tempdir().unwrap();
    let r = run(BIN, ["lab", "report", empty.path().to_str().unwrap()], LIMIT);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
}

/// The `connection` axis: `close` opens a connection per request
/// (`modus load --close`), `keep-alive` keeps each client's.
#[test]
fn a_connection_per_request_is_an_axis() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("modes.toml");
    std::fs::write(
        &spec,
        "name = \"modes\"\ndescription = \"d\"\npath = \"/500b.bin\"\nduration = \"1s\"\nwarmup = \"200ms\"\n\
         [sweep]\nclients = [2]\nconnection = [\"keep-alive\", \"close\"]\n\
         [[server]]\nmodel = \"pool\"\nargs = [\"--max-keepalive-requests\", \"100000000\"]\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    let modes: Vec<&str> = rows.iter().map(|r| r[col("connection")].as_str()).collect();
    assert!(modes.len() == 2 && modes.contains(&"keep-alive") && modes.contains(&"close"), "{rows:?}");
    for (k, mode) in [(0, "keep-alive"), (1, "close")] {
        let raw: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("raw/pool-c2-p0-u0-k{k}-r1.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(raw["connection"], mode);
        let load = &raw["load"];
        let (requests, opened) =
            (load["requests"].as_f64().unwrap(), load["connections_opened"].as_f64().unwrap());
        assert!(requests > 0.0 && load["errors"] == 0, "{load}");
        if mode == "close" {
            assert!(opened >= 0.9 * requests, "a connection per request: {opened} for {requests}");
        } else {
            assert!(opened < requests / 2.0, "connections kept: {opened} for {requests}");
        }
    }
}

/// wrk as the generator (`generator = "wrk"`, or `lab run --generator
/// wrk`): its text read into the record, what it sent seen in the
/// server's own access log, both connection modes; open loop refused.
#[test]
fn wrk_can_be_the_generator() {
    if !installed("wrk") {
        eprintln!("wrk is not installed: skipped (apt-get install wrk)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("wrk.toml");
    let text =
        "name = \"wrk\"\ndescription = \"d\"\npath = \"/500b.bin\"\nduration = \"1s\"\nwarmup = \"1s\"\n\
                access-log = true\n[sweep]\nclients = [2]\nconnection = [\"keep-alive\", \"close\"]\n\
                [[server]]\nmodel = \"pool\"\nargs = [\"--max-keepalive-requests\", \"100000000\"]\n";
    std::fs::write(&spec, text).unwrap();
    let out = tmp.path().join("out");
    let r = run(
        BIN,
        ["lab", "run", spec.to_str().unwrap(), "--generator", "wrk", "--out", out.to_str().unwrap()],
        LIMIT,
    );
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    for (k, mode) in [(0, "keep-alive"), (1, "close")] {
        let raw: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("raw/pool-c2-p0-u0-k{k}-r1.json"))).unwrap(),
        )
        .unwrap();
        let load = &raw["load"];
        assert_eq!(load["generator"], "wrk", "{load}");
        let requests = load["requests"].as_f64().unwrap();
        assert!(requests > 0.0 && load["errors"] == 0, "{mode}: {load}");
        assert!(load["latency_us"]["p99"].as_f64().unwrap() > 0.0, "{load}");
        // The warm-up's requests and the measured ones, each in the log.
        let log = std::fs::read_to_string(out.join(format!("raw/pool-c2-p0-u0-k{k}-r1-access.log"))).unwrap();
        let logged = log.lines().filter(|l| l.contains("\"GET /500b.bin HTTP/1.1\" 200 500 ")).count();
        assert!(logged as f64 >= requests, "{mode}: {logged} logged for {requests} measured");
        let cpu = raw["point"]["cpu_per_request"].as_f64().unwrap();
        assert!(cpu > 0.0, "{mode}: the server's CPU per request: {cpu}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("load from wrk"), "{report}");
    std::fs::write(&spec, text.replace("clients = [2]", "clients = [2]\nrates = [100]")).unwrap();
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--generator", "wrk"], LIMIT);
    assert_eq!(r.status.code(), Some(2), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("closed loop"), "{}", r.stderr);
}

/// The built-in reuseport spec (bench/reuseport.sh's experiment): how
/// evenly event's two loops took the work, from their scoreboard lines
/// before and after each point, shared listener and one per loop, both
/// connection modes; and the Markdown table names the spread.
#[test]
fn the_reuseport_spec_measures_the_loops_spread() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("reuseport");
    let o = out.to_str().unwrap();
    let r = run(BIN, ["lab", "run", "reuseport", "--quick", "--out", o], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    assert_eq!(rows.len(), 4, "2 servers × keep-alive and close: {rows:?}");
    for row in &rows {
        assert!(["shared", "reuseport"].contains(&row[0].as_str()), "{row:?}");
        let spread: f64 = row[col("worker_spread")].parse().unwrap();
        let workers: f64 = row[col("workers")].parse().unwrap();
        assert!(spread >= 1.0, "max/min: {row:?}");
        assert_eq!(workers, 2.0, "event --workers 2: two loops on the scoreboard: {row:?}");
        assert!(row[col("p99_2xx")].parse::<f64>().unwrap() > 0.0, "every answer a 200: {row:?}");
        assert_eq!(row[col("other_5xx")], "0", "{row:?}");
    }
    let r = run(BIN, ["lab", "report", o, "--markdown"], LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stdout.contains("| worker_spread (max/min) | workers (lines) |"), "{}", r.stdout);
}

/// An experiment with CGI: the lab writes one `cgi-bin/`, which a modus
/// model (`--cgi-dir`) and Apache (mod_cgid under the event MPM) both run;
/// nginx, which runs no CGI, is skipped and the report says why.
#[test]
fn apache_runs_the_experiments_cgi_beside_a_model() {
    let tmp = searchable_tempdir();
    let spec = tmp.path().join("cgi.toml");
    std::fs::write(
        &spec,
        r#"name = "cgi"
description = "pool and Apache event serving a file and a script"
docroot = "fixed"
cgi = true
duration = "300ms"
warmup = "100ms"
[sweep]
clients = [2]
paths = ["/500b.bin", "/cgi-bin/spin?ms=1"]
[[server]]
model = "pool"
[[server]]
peer = "apache-event"
[[server]]
peer = "nginx"
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("Not measured: nginx — nginx runs no CGI here"), "{report}");
    let rows = csv_rows(&out);
    let apache = installed("apache2");
    assert_eq!(rows.len(), if apache { 4 } else { 2 }, "{rows:?}");
    for row in &rows {
        assert!(row[GOODPUT].parse::<f64>().unwrap() > 0.0 && row[ERRORS] == "0", "answered 200: {row:?}");
    }
    let raw = out.join("raw").join("pool-c2-p1-u0-r1.json");
    assert!(std::fs::read_to_string(raw).unwrap().contains("\"/cgi-bin/spin?ms=1\""));
    if apache {
        let conf = std::fs::read_to_string(out.join("peers/apache-event/apache-event.conf")).unwrap();
        assert!(conf.contains("mod_cgid.so") && conf.contains("ScriptAlias /cgi-bin/"), "{conf}");
        assert!(rows.iter().any(|r| r[0] == "apache-event" && r[2] == "/cgi-bin/spin?ms=1"), "{rows:?}");
    } else {
        eprintln!("apache2 is not installed: checking that the report says so");
        assert!(report.contains("apache-event is not installed (apt-get install apache2)"), "{report}");
    }
}

/// An Apache httpd the lab configured, run in the foreground in a process
/// group of its own; stopped (SIGTERM to the group: the parent stops its
/// children) and reaped on drop.
struct Apache(std::process::Child);

impl Apache {
    fn start(peer: &str, dir: &Path, root: &Path, port: u16) -> Apache {
        use std::os::unix::process::CommandExt;
        let conf = dir.join(format!("{peer}.conf"));
        let site = lab::peers::Site { docroot: root, cgi: None, max_clients: None, access_log: None };
        std::fs::write(&conf, lab::peers::config(peer, dir, site, "127.0.0.1", port).unwrap()).unwrap();
        lab::peers::prepare(peer, dir).unwrap();
        let bin = lab::peers::binary(peer).unwrap();
        lab::peers::check(peer, &bin, dir, &conf, None).unwrap_or_else(|e| panic!("{e:#}"));
        let child = std::process::Command::new(&bin)
            .args(lab::peers::args(peer, dir, &conf))
            .process_group(0)
            .spawn()
            .unwrap();
        let mut apache = Apache(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(apache.0.try_wait().unwrap().is_none(), "{peer} exited: see {}/error.log", dir.display());
            assert!(std::time::Instant::now() < deadline, "{peer} never listened on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        apache
    }
}

impl Drop for Apache {
    fn drop(&mut self) {
        if let Some(group) = rustix::process::Pid::from_raw(self.0.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
        }
        let _ = self.0.wait();
    }
}

/// `apache-worker-cache` really caches: mod_file_cache maps a small file
/// and keeps a larger one's descriptor open at startup, so a file replaced
/// on disk afterwards still comes back as it was — from the cache — while
/// `apache-worker`, the same server without the cache, reads the new one.
#[test]
fn the_cached_apache_worker_answers_from_its_cache() {
    if !installed("apache2") {
        eprintln!("skipped: apache2 is not installed (apt-get install apache2)");
        return;
    }
    let tmp = searchable_tempdir();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    // Mapped (up to 16 KiB), and kept open (up to 1 MiB).
    let files = [("small.html", 600), ("mid.bin", 100_000)];
    for peer in ["apache-worker-cache", "apache-worker"] {
        for (name, size) in files {
            std::fs::write(root.join(name), testkit::pseudo_random_bytes(size, 1)).unwrap();
        }
        let dir = tmp.path().join(peer);
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let _apache = Apache::start(peer, &dir, &root, port);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut client = testkit::Client::connect(addr);
        for (name, size) in files {
            let path = format!("/{name}");
            let old = testkit::pseudo_random_bytes(size, 1);
            let before = client.request("GET", &path, &[]);
            before.assert_status(200);
            testkit::assert_bytes_eq(&before.body, &old, &format!("{peer} {path} before"));
            // Another file, longer and other bytes, renamed over it.
            let new = testkit::pseudo_random_bytes(size + 7, 2);
            let next = root.join(format!("{name}.next"));
            std::fs::write(&next, &new).unwrap();
            std::fs::rename(&next, root.join(name)).unwrap();
            let after = client.request("GET", &path, &[]);
            after.assert_status(200);
            let (want, what) = if peer == "apache-worker-cache" {
                (&old, "served from the cache, as it was at startup")
            } else {
                (&new, "read from the file")
            };
            testkit::assert_bytes_eq(&after.body, want, &format!("{peer} {path} after the rename: {what}"));
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The committed run of the papers' experiments (written by an earlier
/// version of the lab) still rebuilds: its specs parse, its points read.
#[test]
fn the_committed_reproduction_still_reports() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../reproduction");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("reproduction");
    copy_tree(&committed, &dir);
    std::fs::remove_file(dir.join("REPRODUCTION.md")).unwrap();
    let r = run(BIN, ["lab", "report", dir.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let md = std::fs::read_to_string(dir.join("REPRODUCTION.md")).unwrap();
    assert!(md.contains("## paper000-cgi-share") && md.contains("**holds"), "{md}");
}

/// A server with a front: the load goes to `modus direct` (or HAProxy,
/// where installed) in front of two backends, in open loop (`rates`); the
/// answers are counted by kind (goodput, busy).
#[test]
fn fronts_stand_before_backends_in_open_loop() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("front.toml");
    std::fs::write(
        &spec,
        r#"name = "front"
description = "pool alone, behind modus direct and behind HAProxy"
docroot = "fixed"
path = "/500b.bin"
duration = "300ms"
warmup = "100ms"
[sweep]
clients = [4]
rates = [50]
[[server]]
name = "alone"
model = "pool"
[[server]]
name = "direct"
model = "pool"
front = "direct"
front-args = ["--max-backend-conns", "4"]
backends = 2
[[server]]
name = "haproxy"
model = "pool"
front = "haproxy"
front-args = ["default-server maxconn 4"]
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    let haproxy = installed("haproxy");
    assert_eq!(rows.len(), if haproxy { 3 } else { 2 }, "{rows:?}");
    for row in &rows {
        assert_eq!(row[4], "50", "open loop at 50/s: {row:?}");
        assert!(row[GOODPUT].parse::<f64>().unwrap() > 0.0 && row[ERRORS] == "0", "answered 200: {row:?}");
    }
    let raw = std::fs::read_to_string(out.join("raw/direct-c4-p0-u0-q0-r1.json")).unwrap();
    assert!(raw.contains("\"mode\": \"open\"") && raw.contains("\"rate\": 50.0"), "{raw}");
    if haproxy {
        let conf = std::fs::read_to_string(out.join("peers/haproxy-haproxy/haproxy.cfg")).unwrap();
        assert!(conf.contains("default-server maxconn 4") && conf.contains("server b1 127.0.0.1:"), "{conf}");
    } else {
        let report = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(report.contains("haproxy is not installed (apt-get install haproxy)"), "{report}");
    }
}

/// `[network] netns`: the load, the front and the backends on hosts of
/// their own (network namespaces, links shaped with tc), where permitted
/// (root, iproute2); elsewhere loopback, and the report says why.
#[test]
fn a_netns_topology_carries_the_load_or_is_said_to_be_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("netns.toml");
    std::fs::write(
        &spec,
        r#"name = "netns"
description = "pool behind modus direct, on hosts of their own"
docroot = "fixed"
path = "/500b.bin"
duration = "300ms"
warmup = "100ms"
[network]
netns = true
rate = "100mbit"
[sweep]
clients = [2]
[[server]]
name = "direct"
model = "pool"
front = "direct"
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    assert!(rows.len() == 1 && rows[0][GOODPUT].parse::<f64>().unwrap() > 0.0, "{rows:?}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    let network = meta["network"].as_str().unwrap();
    let raw = std::fs::read_to_string(out.join("raw/direct-c2-p0-u0-r1.json")).unwrap();
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    // The backend's own timing, from its status listener on its host.
    assert!(rows[0][col("request_us")].parse::<f64>().unwrap() > 0.0, "{rows:?}");
    if network.starts_with("network namespaces") {
        assert!(network.contains("shaped to 100mbit"), "{network}");
        assert!(raw.contains("\"http://10.201."), "the load crossed the bridge: {raw}");
        // The bytes through the shaped link over its rate (12.5 MB/s).
        let link: f64 = rows[0][col("link_util_pct")].parse().unwrap();
        let load: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let expected = load["load"]["bytes_per_s"].as_f64().unwrap() / 12.5e6 * 100.0;
        assert!(link > 0.0 && (link - expected).abs() < 1e-6 * expected.max(1.0), "{link} vs {expected}");
    } else {
        eprintln!("no network namespaces here: checking that the report says so");
        assert!(network.starts_with("loopback: the netns topology was asked for"), "{network}");
        assert!(raw.contains("\"http://127.0.0.1:"), "{raw}");
        assert_eq!(rows[0][col("link_util_pct")], "", "no shaped link: no link use");
    }
    assert!(report.contains("Network: "), "{report}");
}

/// Whether this test may make memory cgroups: root, the memory controller
/// (v1 or v2), and a cgroup made and removed.
fn memory_cgroups() -> Option<std::path::PathBuf> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let v1 = Path::new("/sys/fs/cgroup/memory");
    let root = if v1.join("memory.limit_in_bytes").is_file() {
        v1.to_path_buf()
    } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").is_ok_and(|c| c.contains("memory"))
    {
        std::path::PathBuf::from("/sys/fs/cgroup")
    } else {
        return None;
    };
    let trial = root.join(format!("modus-lab-test-{}", std::process::id()));
    std::fs::create_dir(&trial).ok()?;
    std::fs::remove_dir(&trial).ok()?;
    Some(root)
}

/// `memory = "64MiB"`: the server's process tree runs in a memory cgroup
/// with that limit, removed after; where that is not permitted the server
/// is skipped and the report says why. Either way a server without a
/// limit runs.
#[test]
fn a_memory_limit_runs_the_server_in_a_cgroup_or_is_said_to_be_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("memory.toml");
    std::fs::write(
        &spec,
        r#"name = "memory"
description = "prefork in 64 MiB, event without a limit"
docroot = "fixed"
path = "/50k.bin"
duration = "300ms"
warmup = "100ms"
[sweep]
clients = [2]
[[server]]
name = "small"
model = "prefork"
memory = "64MiB"
[[server]]
model = "event"
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = csv_rows(&out);
    let event = rows.iter().find(|r| r[0] == "event").unwrap_or_else(|| panic!("event ran: {rows:?}"));
    assert!(event[GOODPUT].parse::<f64>().unwrap() > 0.0, "{event:?}");
    let Some(root) = memory_cgroups() else {
        eprintln!("skipped: no memory cgroups here (root and the memory controller): checking that the report says so");
        assert!(r.stderr.contains("skipping small: its memory limit (64MiB) cannot be set"), "{}", r.stderr);
        let report = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(report.contains("Not measured: small — its memory limit (64MiB) cannot be set"), "{report}");
        return;
    };
    let small = rows.iter().find(|r| r[0] == "small").unwrap_or_else(|| panic!("small ran: {rows:?}"));
    assert!(small[GOODPUT].parse::<f64>().unwrap() > 0.0 && small[ERRORS] == "0", "{small:?}");
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("raw/small-c2-p0-u0-r1.json")).unwrap())
            .unwrap();
    assert_eq!(raw["memory_limit"], 64 << 20, "{raw}");
    let cgroup = raw["cgroups"][0]["cgroup"].as_str().unwrap_or_else(|| panic!("a cgroup: {raw}"));
    assert!(cgroup.starts_with("/modus-lab-"), "{raw}");
    assert_eq!(raw["cgroups"][0]["server_in"], cgroup, "the server ran in it: {raw}");
    assert!(!root.join(cgroup.trim_start_matches('/')).exists(), "{cgroup} was removed");
    let unlimited: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("raw/event-c2-p0-u0-r1.json")).unwrap())
            .unwrap();
    assert_eq!(unlimited["cgroups"], serde_json::json!([]), "{unlimited}");
}

/// `trace = 1`: a modus server traces every request into
/// `raw/<point>-trace.csv`; `latency_cv` and `queue_slope` come from it,
/// and a `kind = "trace"` plot draws a facet per server.
#[test]
fn a_traced_point_has_its_trace_metrics_and_scatter() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("traced.toml");
    std::fs::write(
        &spec,
        r#"name = "traced"
description = "two models, every request traced"
path = "/500b.bin"
duration = "500ms"
warmup = "100ms"
trace = 1.0
[sweep]
clients = [2]
[[server]]
model = "pool"
[[server]]
model = "event"
[[plot]]
name = "arrivals"
kind = "trace"
[[plot]]
name = "responses"
kind = "trace"
y = "response"
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    for row in csv_rows(&out) {
        let trace =
            std::fs::read_to_string(out.join(format!("raw/{}-c2-p0-u0-r1-trace.csv", row[0]))).unwrap();
        assert!(trace.starts_with("conn,arrival_us,service_start_us,service_end_us,"), "{trace}");
        assert!(trace.lines().count() > 10, "every request traced: {trace}");
        let cv: f64 = row[col("latency_cv")].parse().unwrap();
        let slope: f64 = row[col("queue_slope")].parse().unwrap();
        assert!(cv > 0.0 && slope.is_finite(), "{row:?}");
    }
    let svg = std::fs::read_to_string(out.join("plots/arrivals.svg")).unwrap();
    assert!(
        svg.contains("pool: CV ") && svg.contains("event: CV ") && svg.contains("service end (s)"),
        "{svg}"
    );
    let svg = std::fs::read_to_string(out.join("plots/responses.svg")).unwrap();
    assert!(svg.contains("response time (ms)"), "{svg}");
    assert!(std::fs::read_to_string(out.join("plots/arrivals.csv"))
        .unwrap()
        .starts_with("server,arrival_s,"));
}

/// The lab's reasons know modus prefork's connection slots by the
/// default it was built with: the two must agree.
#[test]
fn the_lab_knows_preforks_default_slots() {
    assert_eq!(lab::spec::MODUS_MAX_CLIENTS, models::Tuning::default().max_clients);
}
