//! `modus lab`: experiments that compare the concurrency models on real
//! runs — each point a `modus serve` child and a `modus load` child, pinned
//! apart — with the results as CSV and JSON, plots as SVG, and a report
//! that checks the experiment's claims.
//!
//! * `spec.rs` — the experiment format (TOML); built-in ones in `lab/`.
//! * `claims.rs` — the claims' grammar and verdicts.
//! * `run.rs` — the order of the points and each measurement.
//! * `probe.rs` — what is read around a measurement: CPU time, memory and
//!   disk reads from `/proc`, per-phase timing from `/status.json`.
//! * `busy.rs` — how busy the machine was over a point: others' CPU, the disk.
//! * `cgroup.rs` — a server's memory limit: a memory cgroup (v1 or v2).
//! * `netns.rs` — the optional topology: hosts in network namespaces.
//! * `hosts.rs` — `[hosts]`: roles on other machines, what each host is.
//! * `remote.rs` — a host over `ssh`: commands, copies, processes by PID.
//! * `merge.rs` — several generators' reports and HdrHistograms as one.
//! * `peers.rs` — nginx, lighttpd, h2o and Apache httpd measured beside the
//!   models; `modus direct` and HAProxy as fronts.
//! * `results.rs` — `points.csv`.
//! * `report.rs` — plots, `report.html`, the ranked table.
//! * `readable.rs` — round ticks, axis names, ISO times, ≤ 8 series a plot.
//! * `answer.rs` — `compare`'s answer in words.
//! * `versus.rs` — each modus server against the best peer, row by row.
//! * `replay.rs` — `compare --workload --speeds`: a recorded workload at its
//!   own arrival times, sped up, and the answer for it.
//! * `trace.rs` — per-request traces: `latency_cv`, `queue_slope`, scatters.
//! * `reproduction.rs` — `REPRODUCTION.md` over the papers' experiments.

pub mod answer;
pub mod busy;
pub mod cgroup;
pub mod claims;
pub mod columns;
pub mod hosts;
pub mod merge;
pub mod netns;
pub mod peers;
pub mod probe;
pub mod readable;
pub mod remote;
pub mod replay;
pub mod report;
pub mod reproduction;
pub mod results;
pub mod run;
pub mod spec;
pub mod trace;
pub mod versus;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::spec::{Plot, ServerSpec, Spec, Sweep};

/// `modus lab …`.
#[derive(Args, Debug, Clone)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

/// What the lab does.
// Parsed once per run: a boxed `Compare` would save nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug, Clone)]
pub enum LabCommand {
    /// List the built-in experiments (and those in --dir)
    List {
        /// A directory of experiment files (*.toml)
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Run an experiment: a built-in NAME or a FILE.toml; `papers` runs
    /// every paper's experiment and writes REPRODUCTION.md beside them
    Run {
        /// A built-in experiment's name, an experiment file, or `papers`
        experiment: String,
        /// One short round at the ends of the sweep (a first look, or a test)
        #[arg(long)]
        quick: bool,
        /// Results directory [default: lab-results/NAME-TIMESTAMP]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Keep the points already measured in --out (after an interruption)
        #[arg(long, requires = "out")]
        resume: bool,
        /// Runs of every point (overrides the experiment's)
        #[arg(long, value_name = "N")]
        repeats: Option<u32>,
        /// The load's client (overrides the experiment's): `modus-load`,
        /// or `wrk` for closed-loop experiments of one path a point
        #[arg(long, value_enum, value_name = "CLIENT")]
        generator: Option<spec::Generator>,
    },
    /// Rebuild the plots and report of a results directory (no rerun);
    /// for a `papers` directory, every experiment's and REPRODUCTION.md
    Report {
        /// A directory written by `modus lab run` or `modus lab compare`
        dir: PathBuf,
        /// Print the report as Markdown (also written to DIR/report.md), for
        /// BENCHMARKS.md or an issue, instead of the ranking
        #[arg(long)]
        markdown: bool,
        /// With --markdown: write it into FILE between `<!-- NAME:begin -->`
        /// and `<!-- NAME:end -->` (appended when missing) instead of printing it
        #[arg(long, value_name = "FILE", requires_all = ["markdown", "block"])]
        into: Option<PathBuf>,
        /// The block of --into (`static` for BENCHMARKS.md's `<!-- static:begin -->`)
        #[arg(long, value_name = "NAME", requires = "into")]
        block: Option<String>,
    },
    /// Every model serves your site under a climbing load; ranked by peak throughput
    Compare {
        /// Directory to serve [default: the embedded demo site]
        root: Option<PathBuf>,
        /// The path requested [default: / ]
        #[arg(long, default_value = "/", value_name = "PATH")]
        path: String,
        /// Requests from a weighted list of URLs instead (`WEIGHT PATH` per line, as `modus load --mix`)
        #[arg(long, value_name = "FILE", conflicts_with = "workload")]
        mix: Option<PathBuf>,
        /// Requests replayed from a `modus workload surge` or `from-log` directory instead; ROOT defaults to its docs/
        #[arg(long, value_name = "DIR")]
        workload: Option<PathBuf>,
        /// Models to compare, comma-separated, or `all`
        #[arg(long, default_value = "all", value_name = "LIST")]
        models: String,
        /// Peers to measure beside them, comma-separated, `all` (those installed) or `none`
        #[arg(long, default_value = "all", value_name = "LIST")]
        peers: String,
        /// Closed-loop clients at each point (with --speeds: the open loop's connections, the largest)
        #[arg(long, default_value = "1,4,16,64", value_name = "LIST", value_delimiter = ',')]
        clients: Vec<usize>,
        /// Measured time per point
        #[arg(long, default_value = "3s", value_name = "DURATION")]
        duration: units::Dur,
        /// CPUs for the server (taskset list); the load generator gets the others
        #[arg(long, value_name = "CPUS")]
        server_cpus: Option<String>,
        /// Results directory [default: lab-results/compare-TIMESTAMP]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Runs of every point, in interleaved rounds (one run says little
        /// on a busy machine: the ranking is of their means)
        #[arg(long, default_value_t = 3, value_name = "N")]
        repeats: u32,
        /// With --workload: replay it open loop at its own arrival times,
        /// at these multiples of its recorded rate (each point replays the
        /// stream's first DURATION × SPEED seconds); the answer says where each server falls over
        #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "workload")]
        speeds: Option<Vec<f64>>,
        /// With --speeds: a server falls over where its p99 passes this (or it errs)
        #[arg(long, default_value = "100ms", value_name = "DURATION")]
        p99_bound: units::Dur,
    },
}

/// The models `modus serve` knows: the registry, as `modus models --names`
/// of this binary gives it (the lab runs inside `modus`).
fn registered_models() -> Result<Vec<String>> {
    let modus = std::env::current_exe()?;
    let out = std::process::Command::new(&modus).args(["models", "--names"]).output()?;
    if !out.status.success() {
        anyhow::bail!("{} models --names: {}", modus.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

/// `modus lab`.
pub fn lab_main(args: LabArgs) -> ExitCode {
    match lab(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("modus lab: {e:#}");
            // As every modus command: 2 for what was asked, 1 for what failed.
            if e.chain().any(|cause| cause.is::<UsageError>()) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// What was asked cannot be done as asked — no such experiment, a spec
/// that does not read, an unknown model or peer, a directory with no
/// results — rather than a run that failed.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `e` as a usage error (exit 2), its message kept whole.
fn usage(e: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(UsageError(format!("{e:#}")))
}

fn lab(args: LabArgs) -> Result<()> {
    match args.command {
        LabCommand::List { dir } => {
            for (name, text) in spec::BUILT_IN {
                let s = Spec::parse(text, name)?;
                println!("{:<22} {}", s.name, s.description);
            }
            if let Some(dir) = dir {
                let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .with_context(|| format!("reading {}", dir.display()))?
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                    .collect();
                files.sort();
                for f in files {
                    match spec::load(&f.display().to_string()) {
                        Ok(s) => println!("{:<22} {} ({})", s.name, s.description, f.display()),
                        Err(e) => println!("{:<22} INVALID: {e:#}", f.display()),
                    }
                }
            }
            Ok(())
        }
        LabCommand::Run { experiment, quick, out, resume, repeats, generator } if experiment == "papers" => {
            let out = out.unwrap_or_else(|| default_out("papers"));
            for name in spec::papers() {
                let mut spec = spec::load(name).map_err(usage)?;
                if quick {
                    spec = spec.quick();
                }
                if let Some(r) = repeats {
                    spec.repeats = r.max(1);
                }
                if let Some(g) = generator {
                    spec = spec.with_generator(g).map_err(usage)?;
                }
                execute(&spec, &out.join(name), resume)?;
            }
            reproduction::write(&out)?;
            println!("reproduction: {}", out.join("REPRODUCTION.md").display());
            Ok(())
        }
        LabCommand::Run { experiment, quick, out, resume, repeats, generator } => {
            let mut spec = spec::load(&experiment).map_err(usage)?;
            if quick {
                spec = spec.quick();
            }
            if let Some(r) = repeats {
                spec.repeats = r.max(1);
            }
            if let Some(g) = generator {
                spec = spec.with_generator(g).map_err(usage)?;
            }
            let out = out.unwrap_or_else(|| default_out(&spec.name));
            execute(&spec, &out, resume)
        }
        LabCommand::Report { dir, markdown, into, block } if !dir.join("meta.json").exists() => {
            // A `papers` directory: an experiment in each subdirectory.
            let runs = reproduction::read(&dir)?;
            if runs.is_empty() {
                return Err(usage(anyhow!(
                    "{}: no meta.json, and no experiment's results below it",
                    dir.display()
                )));
            }
            for run in runs.iter().filter(|r| r.meta["skipped"].is_null()) {
                report::write(&dir.join(&run.name), &run.spec, &run.table, &run.meta)?;
            }
            let text = reproduction::markdown(&runs);
            std::fs::write(dir.join("REPRODUCTION.md"), &text)?;
            if let (Some(file), Some(block)) = (&into, &block) {
                write_into(file, block, &text)?;
            } else if markdown {
                print!("{text}");
            } else {
                println!("reproduction: {}", dir.join("REPRODUCTION.md").display());
            }
            Ok(())
        }
        LabCommand::Report { dir, markdown, into, block } => {
            let meta: Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join("meta.json"))
                    .with_context(|| format!("{}: no meta.json", dir.display()))
                    .map_err(usage)?,
            )?;
            let spec = Spec::parse(meta["spec"].as_str().unwrap_or(""), "meta.json's spec")?;
            let table = results::Table::read(&dir.join("points.csv"))?;
            report::write(&dir, &spec, &table, &meta)?;
            if let (Some(file), Some(block)) = (&into, &block) {
                return write_into(file, block, &report::markdown(&spec, &table, &meta));
            }
            if markdown {
                print!("{}", report::markdown(&spec, &table, &meta));
                return Ok(());
            }
            print!("{}", report::ranking(&spec, &table));
            println!("report: {}", dir.join("report.html").display());
            Ok(())
        }
        LabCommand::Compare {
            root,
            path,
            mix,
            workload,
            models,
            peers,
            clients,
            duration,
            server_cpus,
            out,
            repeats,
            speeds,
            p99_bound,
        } => {
            let root = root.or_else(|| workload.as_ref().map(|w| w.join("docs")));
            // A recorded workload at its own times: open loop, a rate per speed.
            let shape = match (&workload, &speeds) {
                (Some(dir), Some(speeds)) => {
                    if speeds.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
                        return Err(usage(anyhow!("--speeds: every speed must be a positive number")));
                    }
                    let shape = replay::shape(dir).map_err(usage)?;
                    let described = load::logstats::stats(dir).unwrap_or_else(|e| format!("{e:#}\n"));
                    print!("{described}");
                    Some((shape.clone(), replay::rates(&shape, speeds), described))
                }
                _ => None,
            };
            // Open loop: one pool of connections, the largest asked for.
            let clients = match &shape {
                Some(_) => vec![clients.iter().copied().max().unwrap_or(64)],
                None => clients,
            };
            let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p).display().to_string();
            let (mix, workload) = (mix.map(absolute), workload.map(absolute));
            let registered = registered_models()?;
            let chosen: Vec<&str> = if models == "all" {
                registered.iter().map(String::as_str).collect()
            } else {
                models.split(',').map(str::trim).collect()
            };
            for m in &chosen {
                if !registered.iter().any(|r| r == m) {
                    return Err(usage(anyhow!(
                        "--models: no model {m:?} (they are {})",
                        registered.join(", ")
                    )));
                }
            }
            let chosen_peers: Vec<&str> = match peers.as_str() {
                "none" => Vec::new(),
                "all" => peers::PEERS.to_vec(),
                list => list.split(',').map(str::trim).collect(),
            };
            for p in &chosen_peers {
                if !peers::PEERS.contains(p) {
                    return Err(usage(anyhow!(
                        "--peers: no peer {p:?} (the lab runs {})",
                        peers::PEERS.join(", ")
                    )));
                }
            }
            let load_cpus = server_cpus.as_deref().map(|_| run::other_cpus(server_cpus.as_deref()));
            let spec = Spec {
                name: "compare".into(),
                description: format!(
                    "Every model serving {} ({}), {}",
                    root.as_ref().map_or("the demo site".into(), |r| r.display().to_string()),
                    match (&mix, &workload, &shape) {
                        (Some(m), _, _) => format!("the mix in {m}"),
                        (_, Some(w), Some((s, _, _))) => format!(
                            "the stream in {w} at its own arrival times, {:.1} req/s recorded, sped up",
                            s.mean_rps
                        ),
                        (_, Some(w), None) => format!("the SURGE stream in {w}"),
                        _ => path.clone(),
                    },
                    if shape.is_some() {
                        "open loop, connections".to_string()
                    } else {
                        "closed loop".to_string()
                    } + &format!(
                        ", {} clients",
                        clients.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
                    )
                ),
                docroot: root.as_ref().map_or("demo".into(), |r| r.display().to_string()),
                path,
                mix,
                workload,
                surge_think: true,
                stream_rate: shape.as_ref().map(|(s, _, _)| s.mean_rps),
                stream_peak: shape.as_ref().map(|(s, _, _)| s.peak_rps),
                stream_span_s: shape.as_ref().map(|(s, _, _)| s.span_s),
                p99_bound_ms: shape.as_ref().map(|_| p99_bound.0.as_secs_f64() * 1e3),
                access_log: false,
                mixes: Default::default(),
                duration,
                warmup: units::Dur(std::time::Duration::from_millis(500).min(duration.0)),
                timeout: None,
                repeats: repeats.max(1),
                seed: 1,
                server_cpus,
                load_cpus: load_cpus.flatten(),
                front_cpus: None,
                cgi: shape.as_ref().is_some_and(|(s, _, _)| s.cgi),
                network: None,
                hosts: None,
                generator: spec::Generator::ModusLoad,
                context: None,
                sweep: Sweep {
                    clients,
                    paths: Vec::new(),
                    server_cpus: Vec::new(),
                    rates: shape.as_ref().map(|(_, r, _)| r.clone()).unwrap_or_default(),
                    memory: Vec::new(),
                    connection: Vec::new(),
                },
                servers: chosen
                    .iter()
                    .map(|m| ServerSpec {
                        name: m.to_string(),
                        model: m.to_string(),
                        peer: None,
                        args: Vec::new(),
                        front: None,
                        front_args: Vec::new(),
                        backends: 1,
                        memory: None,
                        max_clients: None,
                    })
                    .chain(chosen_peers.iter().map(|p| ServerSpec {
                        name: p.to_string(),
                        model: String::new(),
                        peer: Some(p.to_string()),
                        args: Vec::new(),
                        front: None,
                        front_args: Vec::new(),
                        backends: 1,
                        memory: None,
                        max_clients: None,
                    }))
                    .collect(),
                plots: ["throughput", "p99", "cpu_per_request"]
                    .iter()
                    .map(|y| Plot {
                        name: y.to_string(),
                        x: if shape.is_some() { "rate" } else { "clients" }.into(),
                        y: y.to_string(),
                        log_x: true,
                        ..Plot::default()
                    })
                    .collect(),
                claims: Vec::new(),
                table: Vec::new(),
                trace: None,
                best_peer: None,
            };
            let spec = Spec::parse(&toml::to_string(&spec)?, "the compare experiment")?;
            let out = out.unwrap_or_else(|| default_out("compare"));
            if let Some((_, _, described)) = &shape {
                // The log's own shape beside the results.
                std::fs::create_dir_all(&out)?;
                std::fs::write(out.join(report::WORKLOAD_FILE), described)?;
            }
            execute(&spec, &out, false)
        }
    }
}

/// Runs `spec` into `out`, then writes the plots, the report and the ranking.
fn execute(spec: &Spec, out: &Path, resume: bool) -> Result<()> {
    // Peers are started with their configuration under `out`, from a
    // prefix of their own: a relative `out` would be read relative to that.
    let out = &std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
    // Everything the experiment starts is charged to one cpuacct group, so
    // "the machine was busy" counts only what is not the experiment.
    let _accounting = busy::Accounting::join();
    if spec.generator == spec::Generator::Wrk
        && !std::process::Command::new("wrk")
            .arg("-v")
            .output()
            .is_ok_and(|o| !o.stdout.is_empty() || !o.stderr.is_empty())
    {
        bail!("{}: generator = \"wrk\", and wrk is not installed (apt-get install wrk)", spec.name);
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    std::fs::create_dir_all(out)?;
    let mut network = None;
    let mut placement = "loopback".to_string();
    if let Some(net) = spec.network.as_ref().filter(|n| n.netns) {
        let backends = spec.servers.iter().map(|s| s.backends).max().unwrap_or(1);
        match netns::Network::create(backends, net.rate.as_deref()) {
            Ok(n) => {
                let hosts: Vec<&str> = n.hosts.iter().map(|h| h.ip.as_str()).collect();
                placement = format!(
                    "network namespaces joined by a bridge: load {}, front {}, backends {}{}",
                    hosts[0],
                    hosts[1],
                    hosts[2..].join(", "),
                    net.rate.as_ref().map(|r| format!("; each link shaped to {r} (htb)")).unwrap_or_default()
                );
                network = Some(n);
            }
            Err(e) if net.rate.is_some() => {
                // A shaped link is the experiment (paper 004's bottleneck):
                // on loopback it would measure something else. Skipped, and
                // said so where the results would be.
                let why = format!(
                    "skipped: it needs a link shaped to {} between network namespaces, not permitted here ({e:#})",
                    net.rate.as_deref().unwrap_or("")
                );
                eprintln!("modus lab: {}: {why}", spec.name);
                let mut meta = meta(spec, out)?;
                meta["network"] = json!("none");
                meta["skipped"] = json!(why);
                std::fs::write(out.join("meta.json"), serde_json::to_string_pretty(&meta)?)?;
                std::fs::write(out.join("points.csv"), format!("{}\n", results::header()))?;
                std::fs::write(out.join("report.md"), format!("# {}\n\n{}: {why}.\n", spec.name, spec.name))?;
                return Ok(());
            }
            Err(e) => {
                placement =
                    format!("loopback: the netns topology was asked for but is not permitted here ({e:#})");
                eprintln!("modus lab: warning: {placement}");
            }
        }
    }
    let hosts = match &spec.hosts {
        Some(h) => {
            let placement = hosts::Placement::from_spec(h)?;
            eprintln!("modus lab: connecting to {} host(s) with ssh", placement.roles().len());
            Some(run::placed::Hosts::connect(placement)?)
        }
        None => None,
    };
    let host_meta = hosts.as_ref().map(run::placed::Hosts::meta);
    if let Some(h) = &hosts {
        let roles: Vec<String> =
            h.placement.roles().iter().map(|(url, roles)| format!("{} {url}", roles.join("+"))).collect();
        placement = format!("hosts over ssh: {}; every other role on this machine", roles.join(", "));
    }
    let runner =
        run::Runner { modus: std::env::current_exe()?, out: out.to_path_buf(), resume, stop, network, hosts };
    let mut meta = meta(spec, out)?;
    meta["network"] = json!(placement);
    if let Some(host_meta) = host_meta {
        meta["hosts"] = host_meta;
    }
    std::fs::write(out.join("meta.json"), serde_json::to_string_pretty(&meta)?)?;
    if cfg!(debug_assertions) {
        eprintln!(
            "modus lab: warning: this modus is a debug build, several times slower than a release build: \
             its numbers say little (cargo install --path crates/server, or cargo run --release -- lab ...)"
        );
    }
    for (server, why) in run::unavailable(spec, out) {
        eprintln!("modus lab: skipping {server}: {why}");
    }
    eprintln!("modus lab: {} into {}", spec.name, out.display());
    let table = runner.run(spec, |line| eprintln!("{line}"))?;
    if meta.get("hosts").is_some() {
        let warnings = hosts::generator_warnings(&run::placed::raw_records(out));
        for w in &warnings {
            eprintln!("modus lab: warning: {w}");
        }
        meta["host_warnings"] = json!(warnings);
        std::fs::write(out.join("meta.json"), serde_json::to_string_pretty(&meta)?)?;
    }
    report::write(out, spec, &table, &meta)?;
    if let Some(warning) = busy::warning(&table) {
        eprintln!("modus lab: warning: {warning}");
    }
    print!("{}", report::ranking(spec, &table));
    if report::answers(spec) {
        let general = answer::answer(spec, &table);
        if spec.stream_rate.is_some() {
            // Open loop, every server serves what it is offered until it
            // cannot: the peak-throughput ranking says little; its doubts
            // about the machine still hold.
            let doubts = general.lines().filter(|l| l.starts_with("Unreliable"));
            print!("\n{}", doubts.map(|l| format!("{l}\n")).collect::<String>());
            print!("{}", replay::answer(spec, &table));
        } else {
            print!("\n{general}");
        }
    }
    for c in &spec.claims {
        let v = claims::Claim::parse(&c.expr, &spec.server_names())?.judge(&table);
        println!("claim: {} — {}", v.word, c.text);
    }
    println!("report: {}", out.join("report.html").display());
    Ok(())
}

/// Puts `markdown` into `file`'s block `name` (`report --into --block`).
fn write_into(file: &Path, name: &str, markdown: &str) -> Result<()> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
    };
    let text =
        report::replace_block(&text, name, markdown).with_context(|| format!("in {}", file.display()))?;
    std::fs::write(file, text).with_context(|| format!("writing {}", file.display()))?;
    println!("{}: block {name} rewritten", file.display());
    Ok(())
}

/// The command line that made a results directory, as people type it.
fn command_line() -> String {
    let words = std::env::args().skip(1).map(|a| {
        if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
            a
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    });
    std::iter::once("modus".to_string()).chain(words).collect::<Vec<_>>().join(" ")
}

fn default_out(name: &str) -> PathBuf {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    PathBuf::from("lab-results").join(format!("{name}-{stamp}"))
}

/// What a results directory says about where and how it was made.
fn meta(spec: &Spec, out: &Path) -> Result<Value> {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string());
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_id = cpu_id(&cpuinfo);
    let memory_kib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    Ok(json!({
        "modus_version": env!("CARGO_PKG_VERSION"),
        "git_revision": git,
        "started": readable::now_iso(),
        "command": command_line(),
        "machine": {
            "cpu": cpu,
            "cpu_id": cpu_id,
            "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "kernel": read("/proc/sys/kernel/osrelease").trim(),
            "memory_mib": memory_kib.map(|k| k / 1024),
        },
        "peers": spec.servers.iter().flat_map(|s| {
            let haproxy = (s.front.as_deref() == Some("haproxy")).then_some("haproxy");
            s.peer.as_deref().into_iter().chain(haproxy).map(|peer| {
                (peer.to_string(), json!(peers::binary(peer).map(|bin| peers::version(peer, &bin))))
            })
        }).collect::<serde_json::Map<String, Value>>(),
        "skipped": run::unavailable(spec, out).into_iter().map(|(server, why)| json!({"server": server, "why": why})).collect::<Vec<_>>(),
        "spec": toml::to_string(spec)?,
    }))
}

/// The first CPU's vendor, family, model and stepping from `/proc/cpuinfo`
/// (`GenuineIntel family 6 model 207 stepping 2`), and `, virtual` under a
/// hypervisor: a virtual machine's model name can be generic ("Intel(R)
/// Xeon(R) Processor"), and these numbers still tell the generation.
fn cpu_id(cpuinfo: &str) -> Option<String> {
    let first = cpuinfo.split("\n\n").next()?;
    let field = |name: &str| {
        first.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    let vendor = field("vendor_id")?;
    let mut id = format!("{vendor} family {} model {}", field("cpu family")?, field("model")?);
    if let Some(stepping) = field("stepping") {
        id.push_str(&format!(" stepping {stepping}"));
    }
    if field("flags").is_some_and(|f| f.split(' ').any(|x| x == "hypervisor")) {
        id.push_str(", virtual");
    }
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_is_named_by_its_numbers_too() {
        let info = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n\
                    model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 2\nflags\t\t: fpu hypervisor avx\n\n\
                    processor\t: 1\nvendor_id\t: Other\n";
        assert_eq!(cpu_id(info).as_deref(), Some("GenuineIntel family 6 model 207 stepping 2, virtual"));
        assert_eq!(cpu_id("processor : 0\n"), None, "no vendor: nothing to say");
        if let Ok(here) = std::fs::read_to_string("/proc/cpuinfo") {
            if here.contains("vendor_id") {
                assert!(cpu_id(&here).is_some_and(|id| id.contains(" family ")), "{here}");
            }
        }
    }

    #[test]
    fn the_load_generator_gets_the_other_cpus() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        if n < 2 {
            return;
        }
        let rest = run::other_cpus(Some("0")).unwrap();
        assert!(!rest.split(',').any(|c| c == "0") && rest.split(',').count() == n - 1, "{rest}");
        assert_eq!(run::other_cpus(Some(&format!("0-{}", n - 1))), None, "nothing left");
        assert_eq!(run::other_cpus(None), None);
    }
}
