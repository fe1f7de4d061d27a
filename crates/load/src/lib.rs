//! `modus load` (an event-driven HTTP/1.1 load generator, open or closed
//! loop, coordinated-omission corrected) and `modus workload` (SURGE and
//! fixed-size document sets). Shares nothing with the server.

pub mod accesslog;
pub mod dist;
pub mod engine;
pub mod fit;
pub mod fromlog;
pub mod http;
pub mod logstats;
pub mod report;
pub mod stats;
pub mod surge;
pub mod target;
pub mod tls;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::dist::DurationDist;
use crate::engine::{Arrivals, Config, Progress};
use crate::target::{Url, Workload};

/// Durations as every modus command reads them (`500ms`, `5s`, `2m`, or seconds).
fn parse_duration(s: &str) -> Result<Duration, String> {
    s.parse::<units::Dur>().map(|d| d.0)
}

/// `modus load URL… [options]`.
///
/// Closed loop by default (`-c` users, each sending its next request when
/// the previous answer arrives, after `--think-time`); open loop with
/// `-R/--rate` (latency from each request's intended send time). Targets
/// must be loopback unless `--allow-remote`.
///
/// Ctrl-C (SIGINT) or SIGTERM ends the run early and prints the report of
/// what ran; a second one exits at once.
///
/// Exit status: 0 when the run completed and requests got responses (any
/// status: 4xx/5xx are reported, and warned about when none succeeded);
/// 1 when no request got a response, or when more than half of them got
/// none (refused, reset, timed out, cut short, dropped); 2 for a usage
/// error; 130 after SIGINT, 143 after SIGTERM.
///
/// `--close` opens a connection per request. Each one leaves a TIME_WAIT
/// entry for 60 s; past ~28k of them per source address, connect fails with
/// EADDRNOTAVAIL. Linux reuses loopback TIME_WAIT ports by default
/// (`net.ipv4.tcp_tw_reuse = 2`); if not, the generator binds new
/// connections to other 127.x.y.z source addresses (`--spread-source` from
/// the start), or raise `net.ipv4.ip_local_port_range` / set `tcp_tw_reuse=1`.
#[derive(Args, Debug, Clone)]
#[command(arg_required_else_help = true)]
pub struct LoadArgs {
    /// Target URL(s), `http://HOST:PORT/PATH` or `https://…`; several are requested round-robin
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// Connections (closed loop: users; with --workload, at most the stream's users)
    #[arg(short = 'c', long = "connections", visible_alias = "users", default_value_t = 50)]
    pub connections: usize,
    /// Event-loop threads
    #[arg(short = 't', long, default_value_t = 1)]
    pub threads: usize,
    /// Measured duration (e.g. 10s); default 10s unless -n or --workload (without --repeat-stream) is given
    #[arg(short = 'd', long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Measured requests (stop after this many)
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Unmeasured warm-up before the measurement
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub warmup: Duration,
    /// Per-request timeout
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub timeout: Duration,
    /// Open loop: total requests per second
    #[arg(short = 'R', long)]
    pub rate: Option<f64>,
    /// Open-loop arrival process
    #[arg(long, value_enum, default_value_t = Arrivals::Poisson)]
    pub arrivals: Arrivals,
    /// Closed-loop think time: fixed:10ms, exp:50ms, uniform:A:B, pareto:K:ALPHA, lognormal:MEDIAN:SIGMA, weibull:SCALE:SHAPE
    #[arg(long)]
    pub think_time: Option<DurationDist>,
    /// A new connection per request (Connection: close)
    #[arg(long)]
    pub close: bool,
    /// With --close: bind each connection to another 127.x.y.z source address
    #[arg(long)]
    pub spread_source: bool,
    /// Requests in flight per connection (HTTP/1.1 pipelining)
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Weighted URLs: one `WEIGHT URL` per line (relative URLs resolved against the first URL)
    #[arg(long, value_name = "FILE")]
    pub mix: Option<PathBuf>,
    /// Replay the request stream of `modus workload surge` (URLs relative to the first URL)
    #[arg(long, value_name = "DIR")]
    pub workload: Option<PathBuf>,
    /// With --workload: honour the stream's OFF times (SURGE user think times) in the closed loop; needs -c >= the stream's users
    #[arg(long)]
    pub stream_think: bool,
    /// With --workload: start the stream over when it ends (default: the run ends with the stream)
    #[arg(long)]
    pub repeat_stream: bool,
    /// With --workload: open loop, each request sent at its time in the stream, sped up SPEEDUP times
    #[arg(long, value_name = "SPEEDUP")]
    pub stream_times: Option<f64>,
    /// Request method (GET or HEAD)
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// Extra request header, `Name: value` (repeatable)
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Hash every body; a body that differs from an earlier one of the same URL (with --workload: from the file on disk) is an error
    #[arg(long)]
    pub checksum: bool,
    /// Open loop: arrivals that may wait for a free connection (beyond: dropped)
    #[arg(long, default_value_t = 100_000)]
    pub max_queue: usize,
    /// Sends (and generator wake-ups) later than this count as late
    #[arg(long, value_parser = parse_duration, default_value = "10ms")]
    pub lag_threshold: Duration,
    /// Random seed (arrivals, think times, mix choices)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of the text report
    #[arg(long)]
    pub json: bool,
    /// Write one CSV row per request (µs since the run started)
    #[arg(long, value_name = "FILE.csv")]
    pub timeline: Option<PathBuf>,
    /// Write the latency HdrHistograms (every answer's, then the 2xx
    /// answers'; µs, coordinated omission corrected) to FILE in
    /// HdrHistogram's V2 serialization, so runs of several generators
    /// merge exactly (`modus lab` with `[hosts] load = [...]`)
    #[arg(long, value_name = "FILE")]
    pub histogram_out: Option<PathBuf>,
    /// Allow targets that are not loopback addresses
    #[arg(long)]
    pub allow_remote: bool,
    /// https://: accept any certificate (a self-signed test server)
    #[arg(short = 'k', long, help_heading = "HTTPS")]
    pub insecure: bool,
    /// https://: trust the CA certificates in FILE (PEM) instead of the system's
    #[arg(long, value_name = "FILE", help_heading = "HTTPS")]
    pub cacert: Option<PathBuf>,
    /// https://: resume TLS sessions (tickets) on new connections; by
    /// default every connection makes a full handshake, so --close measures
    /// the handshakes a server can make
    #[arg(long, help_heading = "HTTPS")]
    pub tls_resume: bool,
}

/// Builds the engine's configuration (resolving and checking the target).
pub fn config(a: &LoadArgs) -> Result<Config> {
    let urls = a.urls.iter().map(|u| Url::parse(u)).collect::<Result<Vec<_>>>()?;
    let base = urls[0].clone();
    let addr = target::resolve(&base, a.allow_remote)?;
    let workload = match (&a.mix, &a.workload) {
        (Some(_), Some(_)) => bail!("--mix and --workload exclude each other"),
        (Some(f), None) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            Workload::mix(&base, &text).with_context(|| format!("in {}", f.display()))?
        }
        (None, Some(d)) => Workload::replay(&base, d, a.checksum)?,
        (None, None) => Workload::urls(&base, &urls)?,
    };
    if a.connections == 0 || a.threads == 0 || a.pipeline == 0 {
        bail!("--connections, --threads and --pipeline must be at least 1");
    }
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate must be a positive number of requests per second");
        }
    }
    if (a.stream_think || a.repeat_stream || a.stream_times.is_some()) && a.workload.is_none() {
        bail!("--stream-think, --repeat-stream and --stream-times are for --workload");
    }
    if let Some(s) = a.stream_times {
        if !(s.is_finite() && s > 0.0) {
            bail!("--stream-times: the speed-up must be a positive number (1 = the stream's own pace)");
        }
        if a.rate.is_some() || a.think_time.is_some() || a.stream_think || a.repeat_stream {
            bail!("--stream-times sets the arrivals: not with --rate, --think-time, --stream-think or --repeat-stream");
        }
    }
    let open_loop = a.rate.is_some() || a.stream_times.is_some();
    if let (false, target::Chooser::Stream(seq)) = (open_loop, &workload.chooser) {
        // Closed loop: user u's requests go on connection u mod -c. A
        // connection beyond the users would carry nobody: the run would
        // claim -c users and hold only the stream's.
        let users = seq.iter().map(|r| r.user as usize + 1).max().unwrap_or(0);
        if a.connections > users {
            bail!(
                "--workload: the stream has {users} users, -c is {}: the connections beyond {users} would                  send nothing (use -c {users} or fewer, or make a stream with more users: modus workload                  surge --users {})",
                a.connections,
                a.connections
            );
        }
    }
    if let (true, target::Chooser::Stream(seq)) = (a.stream_think, &workload.chooser) {
        // Users sharing a connection would queue behind each other, their
        // OFF times added end to end: far less load and no ON/OFF pattern.
        let users = seq.iter().map(|r| r.user as usize + 1).max().unwrap_or(0);
        if users > a.connections {
            bail!(
                "--stream-think needs a connection per SURGE user: the stream has {users} users, -c is {} \
                 (use -c {users}, or --stream-times for the stream's own pace)",
                a.connections
            );
        }
    }
    if a.rate.is_some() && a.think_time.is_some() {
        bail!("--think-time is for the closed loop; with --rate the arrivals set the pace");
    }
    if a.requests == Some(0) {
        bail!("-n must be at least 1");
    }
    let method = a.method.to_ascii_uppercase();
    if method != "GET" && method != "HEAD" {
        bail!("--method: only GET and HEAD (requests carry no body)");
    }
    for h in &a.headers {
        let Some((name, _)) = h.split_once(':') else { bail!("header {h:?}: want `Name: value`") };
        if name.is_empty() || h.contains('\r') || h.contains('\n') {
            bail!("header {h:?}: bad name or line break");
        }
    }
    let tls = if base.https {
        let verify = match (&a.cacert, a.insecure) {
            (Some(_), true) => bail!("--cacert and --insecure exclude each other"),
            (Some(file), false) => tls::Verify::Roots(file.clone()),
            (None, true) => tls::Verify::Anything,
            (None, false) => tls::Verify::System,
        };
        Some(engine::Tls {
            config: tls::client_config(&verify, a.tls_resume)?,
            name: tls::server_name(&base.host)?,
        })
    } else {
        if a.insecure || a.cacert.is_some() || a.tls_resume {
            bail!("--insecure, --cacert and --tls-resume are for https:// URLs");
        }
        None
    };
    Ok(Config {
        addr,
        tls,
        host: base.authority(),
        method,
        headers: a.headers.clone(),
        workload,
        connections: a.connections,
        threads: a.threads,
        pipeline: a.pipeline,
        close: a.close,
        spread_source: a.spread_source,
        rate: a.rate,
        arrivals: a.arrivals,
        think: a.think_time,
        stream_think: a.stream_think,
        repeat_stream: a.repeat_stream,
        stream_times: a.stream_times,
        // A replayed stream bounds the run itself (unless repeated).
        duration: a.duration.or(if a.requests.is_none() && (a.workload.is_none() || a.repeat_stream) {
            Some(Duration::from_secs(10))
        } else {
            None
        }),
        requests: a.requests,
        warmup: a.warmup,
        timeout: a.timeout,
        max_queue: a.max_queue,
        lag_threshold: a.lag_threshold,
        seed: a.seed,
        checksum: a.checksum,
        timeline: a.timeline.is_some(),
    })
}

/// `modus load`.
pub fn load_main(a: LoadArgs) -> ExitCode {
    match load(&a) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("modus load: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the load and reports; returns the exit status ([`report::exit_status`]).
fn load(a: &LoadArgs) -> Result<u8> {
    let cfg = config(a)?;
    raise_open_file_limit();
    let progress = Arc::new(Progress::default());
    let stop = Arc::new(AtomicBool::new(false));
    // The first SIGINT or SIGTERM ends the run and still reports what ran
    // (as wrk, oha and k6 do); a second one exits at once. Registered in
    // that order, so the first signal finds the flag down and only raises it.
    let caught = Arc::new(AtomicUsize::new(0));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, Arc::clone(&stop))
            .context("installing signal handlers")?;
        signal_hook::flag::register(signal, Arc::clone(&stop)).context("installing signal handlers")?;
        signal_hook::flag::register_usize(signal, Arc::clone(&caught), signal as usize)
            .context("installing signal handlers")?;
    }
    let tty = std::io::stderr().is_terminal();
    let done = Arc::new(AtomicBool::new(false));
    let ticker = tty.then(|| {
        let (progress, done) = (Arc::clone(&progress), Arc::clone(&done));
        std::thread::spawn(move || {
            let start = Instant::now();
            let (mut last, mut last_requests) = (0, 0);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let s = start.elapsed().as_secs();
                if s != last {
                    let requests = progress.requests.load(Ordering::Relaxed);
                    // Responses in the last whole second(s) (warm-up ones are not counted).
                    let rate = (requests - last_requests) as f64 / (s - last) as f64;
                    (last, last_requests) = (s, requests);
                    eprint!(
                        "\r\x1b[K[{s:>4}s] {requests} responses, {rate:.0} req/s, {} errors",
                        progress.errors.load(Ordering::Relaxed)
                    );
                }
            }
            // The line ends clean, the `^C` a terminal echoed included.
            eprint!("\r\x1b[K");
        })
    });
    let outcome = engine::run(&cfg, progress, stop);
    done.store(true, Ordering::Relaxed);
    if let Some(t) = ticker {
        let _ = t.join();
    }
    let outcome = outcome.context("running the load")?;
    let ending = report::Ending {
        interrupted_by: match caught.load(Ordering::Relaxed) as i32 {
            SIGINT => Some("SIGINT"),
            SIGTERM => Some("SIGTERM"),
            _ => None,
        },
    };
    if let Some(path) = &a.timeline {
        report::write_timeline(path, &cfg, &outcome.stats)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.histogram_out {
        report::write_histograms(path, &outcome.stats)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        println!("{}", report::json(a, &cfg, &outcome, ending));
    } else {
        print!("{}", report::text(a, &cfg, &outcome, ending));
    }
    let status = report::exit_status(&outcome.stats, ending);
    if let (1, Some(why)) = (status, report::failure(&outcome.stats)) {
        eprintln!("modus load: {why} (exit status 1)");
    }
    Ok(status)
}

/// Lifts the soft limit on open descriptors to the hard one, as `modus
/// serve` and `modus direct` do: every connection is a descriptor, and the
/// usual soft default of 1024 would fail `-c 2000` (bench/direct.sh's
/// `ulimit -n` did this for it).
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    }
}

/// `modus workload …`.
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    #[command(subcommand)]
    pub command: WorkloadCommand,
}

/// The workload generators.
#[derive(Subcommand, Debug, Clone)]
pub enum WorkloadCommand {
    /// A SURGE document tree (DIR/docs) and request stream (DIR/stream.txt)
    Surge {
        /// Output directory
        #[arg(long)]
        out: PathBuf,
        /// Distinct files
        #[arg(long, default_value_t = 2000)]
        files: usize,
        /// Requests in the stream
        #[arg(long, default_value_t = 100_000)]
        requests: usize,
        /// User equivalents merged into the stream
        #[arg(long, default_value_t = 50)]
        users: usize,
        /// Random seed
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Largest file in bytes (heavier Pareto draws are clipped)
        #[arg(long, default_value_t = 10 << 20)]
        max_size: u64,
    },
    /// Fixed-size files of the classic server benchmarks: 500b.bin, 50k.bin, 115k.bin (and 1m.bin)
    Fixed {
        /// Output directory
        #[arg(long)]
        out: PathBuf,
        /// Random seed for the content
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// A workload from access logs (Combined or Common Log Format, plain or gzip): DIR/docs and DIR/stream.txt
    FromLog {
        /// The logs (rotated files in any order: read oldest first)
        #[arg(required = true)]
        logs: Vec<PathBuf>,
        /// Output directory
        #[arg(long, default_value = "workload")]
        out: PathBuf,
        /// Rename the paths (keeping sizes and extensions)
        #[arg(long)]
        anonymize: bool,
        /// Replay this many times faster than recorded (times and gaps divided by X)
        #[arg(long, value_name = "X", default_value_t = 1.0)]
        speed: f64,
        /// Only requests in FROM..TO (RFC 3339 UTC times or Unix seconds; either side may be empty)
        #[arg(long, value_name = "FROM..TO", value_parser = fromlog::parse_window)]
        window: Option<(Option<i64>, Option<i64>)>,
        /// CPU time of each CGI-like request (query string, .php, /cgi-bin/) [default: the line's request time, else 10]
        #[arg(long, value_name = "N")]
        cgi_ms: Option<u64>,
        /// Random seed for the documents' content
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Print a workload's parameters and realised distributions
    Stats {
        /// A directory written by `modus workload surge` or `from-log`
        dir: PathBuf,
    },
}

/// `modus workload`.
pub fn workload_main(a: WorkloadArgs) -> ExitCode {
    let result = match a.command {
        WorkloadCommand::Surge { out, files, requests, users, seed, max_size } => {
            let p = surge::SurgeParams { files, requests, users, seed, max_size };
            surge::generate(&p, &out).and_then(|_| logstats::stats(&out)).map(|s| print!("{s}"))
        }
        WorkloadCommand::Fixed { out, seed } => surge::fixed(&out, seed).map(|()| {
            for (name, size) in surge::FIXED {
                println!("{} {size}", out.join(name).display());
            }
        }),
        WorkloadCommand::FromLog { logs, out, anonymize, speed, window, cgi_ms, seed } => {
            let p = fromlog::FromLogParams {
                inputs: logs,
                anonymize,
                speed,
                window: window.unwrap_or_default(),
                cgi_ms,
                seed,
            };
            fromlog::from_log(&p, &out).and_then(|_| logstats::stats(&out)).map(|s| print!("{s}"))
        }
        WorkloadCommand::Stats { dir } => logstats::stats(&dir).map(|s| print!("{s}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("modus workload: {e:#}");
            ExitCode::FAILURE
        }
    }
}
