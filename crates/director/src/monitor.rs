//! `modus monitor`: the backend host's load reporter (paper 002's rsInfo
//! daemon), and the wire protocol it shares with the director.
//!
//! The monitor runs on the backend host. Every `--interval` it reads
//! `/proc/stat` (CPU time split into busy / niced / iowait / idle, context switches,
//! `procs_running`) — or only the server's own cgroup or processes
//! (`scope.rs`: `--cgroup`, `--pids`) —, `/proc/loadavg` and the SYN_RECV sockets of
//! `/proc/net/tcp` and `/proc/net/tcp6`, classifies the sample as hot, cool
//! or in between, and turns the samples into one verdict — *serviceable* or
//! *overloaded* — with hysteresis: `--enter` hot samples in a row to become
//! overloaded, `--leave` cool samples in a row to become serviceable again;
//! in-between samples reset both runs and keep the verdict. As the paper
//! asks, the monitor does the analysis and the director only reads a code.
//!
//! # Protocol
//!
//! One TCP connection from the monitor to the director's `--monitor-listen`,
//! kept open; text lines, each at most [`MAX_LINE`] bytes, monitor → director
//! only:
//!
//! ```text
//! MODUS-MONITOR 1 interval_ms=200 backend=127.0.0.1:8081     (hello; backend=* : every backend at the peer's IP)
//! S 1 OK cpu=0.12 nice=0.00 iowait=0.00 ctxt=5400 load1=0.31 runq=1 synrecv=0
//! S 2 OVER cpu=0.97 nice=0.00 iowait=0.01 ctxt=91000 load1=7.80 runq=9 synrecv=212
//! ```
//!
//! The second field of a report is a sequence number, the third the code
//! (`OK` or `OVER`); the rest is detail for the director's status page. A
//! director that hears nothing for three intervals (at least one second)
//! treats the backend's state as *unknown*, never as healthy.

use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use crate::options::Dur;
use crate::scope::{Scope, Usage as ScopeUsage};

/// Longest protocol line, including its LF.
pub const MAX_LINE: usize = 512;
/// The first word of the hello line.
pub const HELLO: &str = "MODUS-MONITOR";

/// `modus monitor` options.
#[derive(Args, Debug, Clone)]
pub struct MonitorOptions {
    /// The director's `--monitor-listen` address
    #[arg(long, value_name = "ADDR")]
    pub director: String,

    /// Time between reports
    #[arg(long, default_value = "200ms", value_name = "DURATION")]
    pub interval: Dur,

    /// Which backend this host is, as the director names it (its `--backend`
    /// address); default: every backend at this host's IP
    #[arg(long, value_name = "ADDR")]
    pub backend: Option<String>,

    /// Where the proc file system is mounted
    #[arg(long, default_value = "/proc", value_name = "DIR")]
    pub proc_root: PathBuf,

    /// Measure only this cgroup's CPU time and runnable tasks (a directory
    /// under /sys/fs/cgroup: the web server's service, e.g.
    /// /sys/fs/cgroup/system.slice/modus.service), not the whole host's —
    /// on a shared host other users' work is not the server's overload
    #[arg(long, value_name = "DIR", conflicts_with = "pids")]
    pub cgroup: Option<PathBuf>,

    /// Measure only these processes and their descendants (the server's
    /// master PID, say), not the whole host
    #[arg(long, value_name = "PID,...", value_delimiter = ',')]
    pub pids: Vec<u32>,

    /// Busy CPU fraction that makes a sample hot (time of niced processes is
    /// not busy time: they yield to the web server; see --count-nice)
    #[arg(long, default_value_t = 0.90, value_name = "FRACTION")]
    pub cpu_high: f64,

    /// Busy CPU fraction at or below which a sample may be cool
    #[arg(long, default_value_t = 0.75, value_name = "FRACTION")]
    pub cpu_low: f64,

    /// Half-open (SYN_RECV) connections that make a sample hot
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub syn_high: usize,

    /// Half-open connections at or below which a sample may be cool
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub syn_low: usize,

    /// Runnable tasks per CPU that make a sample hot
    #[arg(long, default_value_t = 4.0, value_name = "N")]
    pub runq_high: f64,

    /// Runnable tasks per CPU at or below which a sample may be cool
    #[arg(long, default_value_t = 2.0, value_name = "N")]
    pub runq_low: f64,

    /// Hot samples in a row before reporting OVER
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub enter: u32,

    /// Count the CPU time of niced processes as busy (for a web server that
    /// itself runs niced)
    #[arg(long)]
    pub count_nice: bool,

    /// Cool samples in a row before reporting OK again
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub leave: u32,
}

/// Cumulative counters from `/proc/stat`.
///
/// Time of niced processes is kept apart from the busy time: a host busy
/// with niced batch work (backups, builds, indexing) is not overloaded for
/// a web server at nice 0, whose threads the scheduler runs first; counting
/// it would make the director turn clients away from an idle server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatCounters {
    /// user + system + irq + softirq + steal, in ticks (niced time apart).
    pub busy: u64,
    /// Ticks of niced processes.
    pub nice: u64,
    /// iowait ticks.
    pub iowait: u64,
    /// All ticks of the aggregate `cpu` line (guest time is inside user).
    pub total: u64,
    /// Context switches since boot.
    pub ctxt: u64,
    /// Runnable tasks now (`procs_running`).
    pub procs_running: u64,
    /// Number of `cpuN` lines (at least 1).
    pub ncpu: u64,
}

/// Parses `/proc/stat`.
pub fn parse_stat(text: &str) -> Option<StatCounters> {
    let mut c = StatCounters::default();
    let mut seen_cpu = false;
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(key) = words.next() else { continue };
        let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
        match key {
            "cpu" => {
                // user nice system idle iowait irq softirq steal [guest guest_nice]
                let f: Vec<u64> = std::iter::from_fn(&mut number).take(8).collect();
                if f.len() < 5 {
                    return None;
                }
                let get = |i: usize| f.get(i).copied().unwrap_or(0);
                c.busy = get(0) + get(2) + get(5) + get(6) + get(7);
                c.nice = get(1);
                c.iowait = get(4);
                c.total = f.iter().sum();
                seen_cpu = true;
            }
            "ctxt" => c.ctxt = number()?,
            "procs_running" => c.procs_running = number()?,
            k if k.len() > 3 && k.starts_with("cpu") && k[3..].bytes().all(|b| b.is_ascii_digit()) => {
                c.ncpu += 1;
            }
            _ => {}
        }
    }
    c.ncpu = c.ncpu.max(1);
    seen_cpu.then_some(c)
}

/// The 1-minute load average of `/proc/loadavg`.
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_ascii_whitespace().next()?.parse().ok()
}

/// Sockets in state SYN_RECV (`03`) in a `/proc/net/tcp` or `tcp6` table.
pub fn count_syn_recv(text: &str) -> usize {
    text.lines().skip(1).filter(|line| line.split_ascii_whitespace().nth(3) == Some("03")).count()
}

/// One sample, rates over the last interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Busy fraction of CPU time (niced processes not counted).
    pub cpu: f64,
    /// Fraction of CPU time that niced processes used.
    pub nice: f64,
    /// iowait fraction of CPU time.
    pub iowait: f64,
    /// Context switches per second.
    pub ctxt_per_sec: f64,
    /// 1-minute load average.
    pub load1: f64,
    /// Runnable tasks.
    pub runq: u64,
    /// Half-open connections.
    pub syn_recv: usize,
    /// CPUs.
    pub ncpu: u64,
}

impl Sample {
    /// The sample between two readings of `/proc/stat`. If no CPU time
    /// passed (a frozen fake /proc), the previous CPU fractions are kept.
    pub fn between(prev: &StatCounters, now: &StatCounters, elapsed: Duration, previous: &Sample) -> Sample {
        let total = now.total.saturating_sub(prev.total);
        let (cpu, nice, iowait) = if total == 0 {
            (previous.cpu, previous.nice, previous.iowait)
        } else {
            let share = |now: u64, prev: u64| now.saturating_sub(prev) as f64 / total as f64;
            (share(now.busy, prev.busy), share(now.nice, prev.nice), share(now.iowait, prev.iowait))
        };
        let secs = elapsed.as_secs_f64().max(1e-3);
        Sample {
            cpu,
            nice,
            iowait,
            ctxt_per_sec: now.ctxt.saturating_sub(prev.ctxt) as f64 / secs,
            load1: 0.0,
            runq: now.procs_running,
            syn_recv: 0,
            ncpu: now.ncpu,
        }
    }
}

/// What makes a sample hot or cool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Busy CPU fraction: hot at or above `cpu_high`, cool at or below `cpu_low`.
    pub cpu_high: f64,
    /// See `cpu_high`.
    pub cpu_low: f64,
    /// SYN_RECV count thresholds.
    pub syn_high: usize,
    /// See `syn_high`.
    pub syn_low: usize,
    /// Runnable tasks per CPU thresholds.
    pub runq_high: f64,
    /// See `runq_high`.
    pub runq_low: f64,
    /// Hot samples in a row to enter the overloaded state.
    pub enter: u32,
    /// Cool samples in a row to leave it.
    pub leave: u32,
}

/// How one sample looks on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Some signal is at or above its high mark.
    Hot,
    /// Every signal is at or below its low mark.
    Cool,
    /// Neither: the verdict stays as it is.
    Between,
}

impl Thresholds {
    /// Classifies one sample.
    pub fn classify(&self, s: &Sample) -> Level {
        let runq = s.runq as f64 / s.ncpu.max(1) as f64;
        if s.cpu >= self.cpu_high || s.syn_recv >= self.syn_high || runq >= self.runq_high {
            Level::Hot
        } else if s.cpu <= self.cpu_low && s.syn_recv <= self.syn_low && runq <= self.runq_low {
            Level::Cool
        } else {
            Level::Between
        }
    }
}

/// The serviceable/overloaded verdict with hysteresis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    overloaded: bool,
    hot_run: u32,
    cool_run: u32,
}

impl Verdict {
    /// Takes one sample's level into account; returns whether the backend
    /// is now overloaded.
    pub fn update(&mut self, level: Level, t: &Thresholds) -> bool {
        match level {
            Level::Hot => {
                self.hot_run += 1;
                self.cool_run = 0;
                if self.hot_run >= t.enter.max(1) {
                    self.overloaded = true;
                }
            }
            Level::Cool => {
                self.cool_run += 1;
                self.hot_run = 0;
                if self.cool_run >= t.leave.max(1) {
                    self.overloaded = false;
                }
            }
            Level::Between => {
                self.hot_run = 0;
                self.cool_run = 0;
            }
        }
        self.overloaded
    }

    /// The current verdict.
    pub fn overloaded(&self) -> bool {
        self.overloaded
    }
}

/// The hello line a monitor sends first.
pub fn hello_line(interval: Duration, backend: Option<&str>) -> String {
    format!("{HELLO} 1 interval_ms={} backend={}\n", interval.as_millis(), backend.unwrap_or("*"))
}

/// One report line.
pub fn report_line(seq: u64, overloaded: bool, s: &Sample) -> String {
    format!(
        "S {seq} {} cpu={:.2} nice={:.2} iowait={:.2} ctxt={:.0} load1={:.2} runq={} synrecv={}\n",
        if overloaded { "OVER" } else { "OK" },
        s.cpu,
        s.nice,
        s.iowait,
        s.ctxt_per_sec,
        s.load1,
        s.runq,
        s.syn_recv
    )
}

/// A parsed hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The monitor's reporting interval.
    pub interval: Duration,
    /// The backend it speaks for, `None` for every backend at its IP.
    pub backend: Option<String>,
}

/// Parses a hello line (without its LF).
pub fn parse_hello(line: &str) -> Option<Hello> {
    let mut words = line.split_ascii_whitespace();
    if words.next()? != HELLO || words.next()? != "1" {
        return None;
    }
    let mut hello = Hello { interval: Duration::from_millis(200), backend: None };
    for word in words {
        match word.split_once('=')? {
            ("interval_ms", v) => hello.interval = Duration::from_millis(v.parse().ok()?),
            ("backend", "*") => hello.backend = None,
            ("backend", v) => hello.backend = Some(v.to_owned()),
            _ => {}
        }
    }
    Some(hello)
}

/// A parsed report: whether the backend is overloaded, and the detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Sequence number.
    pub seq: u64,
    /// `OVER` rather than `OK`.
    pub overloaded: bool,
    /// The rest of the line.
    pub detail: String,
}

/// Parses a report line (without its LF).
pub fn parse_report(line: &str) -> Option<Report> {
    let mut parts = line.splitn(4, ' ');
    if parts.next()? != "S" {
        return None;
    }
    let seq = parts.next()?.parse().ok()?;
    let overloaded = match parts.next()? {
        "OK" => false,
        "OVER" => true,
        _ => return None,
    };
    let detail = parts.next().unwrap_or("").to_owned();
    Some(Report { seq, overloaded, detail })
}

/// The CPU fraction of all `ncpu` CPUs a scope used between two readings.
pub fn scoped_cpu(before: ScopeUsage, after: ScopeUsage, elapsed: Duration, ncpu: u64) -> f64 {
    let capacity = elapsed.as_nanos() as f64 * ncpu.max(1) as f64;
    (after.cpu_ns.saturating_sub(before.cpu_ns) as f64 / capacity.max(1.0)).min(1.0)
}

/// Reads one sample's files under `root`.
pub struct ProcReader {
    root: PathBuf,
}

impl ProcReader {
    /// Reads from `root` (normally `/proc`).
    pub fn new(root: &Path) -> ProcReader {
        ProcReader { root: root.to_path_buf() }
    }

    /// `/proc/stat`.
    pub fn stat(&self) -> io::Result<StatCounters> {
        let text = std::fs::read_to_string(self.root.join("stat"))?;
        parse_stat(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable stat"))
    }

    /// Fills in the instantaneous fields of `s`.
    pub fn complete(&self, s: &mut Sample) {
        s.load1 = std::fs::read_to_string(self.root.join("loadavg"))
            .ok()
            .and_then(|t| parse_loadavg(&t))
            .unwrap_or(0.0);
        s.syn_recv = ["net/tcp", "net/tcp6"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.root.join(f)).ok())
            .map(|t| count_syn_recv(&t))
            .sum();
    }
}

/// Runs the monitor until killed.
pub fn main(mut options: MonitorOptions) -> ExitCode {
    let thresholds = Thresholds {
        cpu_high: options.cpu_high,
        cpu_low: options.cpu_low,
        syn_high: options.syn_high,
        syn_low: options.syn_low,
        runq_high: options.runq_high,
        runq_low: options.runq_low,
        enter: options.enter,
        leave: options.leave,
    };
    let interval = options.interval.0.max(Duration::from_millis(10));
    let reader = ProcReader::new(&options.proc_root);
    let scope = match (&options.cgroup, options.pids.is_empty()) {
        (Some(dir), _) => Scope::Cgroup(dir.clone()),
        (None, false) => Scope::Pids(options.pids.clone()),
        (None, true) => Scope::Host,
    };
    let mut scoped = match scope.read(&options.proc_root) {
        Ok(usage) => usage,
        Err(e) => {
            eprintln!("modus monitor: {}: {e}", scope.describe());
            return ExitCode::from(2);
        }
    };
    let mut prev = match reader.stat() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("modus monitor: reading {}/stat: {e}", options.proc_root.display());
            return ExitCode::from(2);
        }
    };
    match crate::options::resolve("--director", &options.director) {
        Ok(addr) => options.director = addr.to_string(),
        Err(e) => {
            eprintln!("modus monitor: {e:#}");
            return ExitCode::from(2);
        }
    }
    println!(
        "monitoring {} ({}) for {} every {} pid={}",
        options.proc_root.display(),
        scope.describe(),
        options.director,
        humantime::format_duration(interval),
        std::process::id()
    );
    let _ = io::stdout().flush();
    let mut prev_at = Instant::now();
    let mut sample = Sample::default();
    let mut verdict = Verdict::default();
    let mut seq = 0u64;
    let mut conn: Option<TcpStream> = None;
    let mut backoff = interval;
    // Its transitions, in the error log (standard error): the operator of
    // the backend host sees what the director was told, and when.
    let log = pipeline::ErrorLog::stderr();
    let mut was_overloaded = false;
    let mut unreachable: Option<String> = None;
    loop {
        std::thread::sleep(interval);
        let now = Instant::now();
        if let Ok(counters) = reader.stat() {
            sample = Sample::between(&prev, &counters, now - prev_at, &sample);
            if let (Some(before), Ok(Some(usage))) = (scoped, scope.read(&options.proc_root)) {
                // The scope's own share of all the CPUs, and its own runnable tasks.
                sample.cpu = scoped_cpu(before, usage, now - prev_at, sample.ncpu);
                sample.nice = 0.0;
                sample.runq = usage.runnable;
                scoped = Some(usage);
            }
            prev = counters;
            prev_at = now;
        }
        reader.complete(&mut sample);
        if options.count_nice {
            sample.cpu += sample.nice;
            sample.nice = 0.0;
        }
        let overloaded = verdict.update(thresholds.classify(&sample), &thresholds);
        if overloaded != was_overloaded {
            let detail = report_line(seq + 1, overloaded, &sample);
            let detail = detail.trim_end().splitn(4, ' ').nth(3).unwrap_or("");
            if overloaded {
                log.warn(format_args!("overloaded ({detail}): the director admits no new requests"));
            } else {
                log.info(format_args!("serviceable again ({detail})"));
            }
            was_overloaded = overloaded;
        }
        if conn.is_none() {
            match connect(&options.director, interval, options.backend.as_deref()) {
                Ok(stream) => {
                    conn = Some(stream);
                    if unreachable.take().is_some() {
                        log.info(format_args!("reporting to the director at {} again", options.director));
                    }
                }
                Err(e) => {
                    let why = e.to_string();
                    if unreachable.as_deref() != Some(why.as_str()) {
                        log.warn(format_args!(
                            "cannot reach the director at {}: {why}; retrying (it counts this host as unknown)",
                            options.director
                        ));
                        unreachable = Some(why);
                    }
                    // Keep sampling (the hysteresis needs the history), retry later.
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            }
            backoff = interval;
        }
        seq += 1;
        let line = report_line(seq, overloaded, &sample);
        if let Some(stream) = conn.as_mut() {
            if let Err(e) = stream.write_all(line.as_bytes()) {
                conn = None;
                let why = format!("the connection broke: {e}");
                log.warn(format_args!(
                    "cannot reach the director at {}: {why}; reconnecting",
                    options.director
                ));
                unreachable = Some(why);
            }
        }
    }
}

fn connect(director: &str, interval: Duration, backend: Option<&str>) -> io::Result<TcpStream> {
    let addr = director
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing"))?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(hello_line(interval, backend).as_bytes())?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n\
                        cpu1 50 3 25 400 10 2 1 0 0 0\nintr 1 2 3\nctxt 123456\nbtime 1\n\
                        processes 99\nprocs_running 3\nprocs_blocked 0\n";

    fn thresholds() -> Thresholds {
        Thresholds {
            cpu_high: 0.9,
            cpu_low: 0.75,
            syn_high: 64,
            syn_low: 16,
            runq_high: 4.0,
            runq_low: 2.0,
            enter: 2,
            leave: 3,
        }
    }

    #[test]
    fn parses_proc_files() {
        let c = parse_stat(STAT).unwrap();
        assert_eq!(c.busy, 100 + 50 + 3 + 2, "niced time apart");
        assert_eq!(c.nice, 5);
        assert_eq!(c.iowait, 20);
        assert_eq!(c.total, 980);
        assert_eq!(c.ctxt, 123456);
        assert_eq!(c.procs_running, 3);
        assert_eq!(c.ncpu, 2);
        assert!(parse_stat("ctxt 5\n").is_none());
        assert_eq!(parse_loadavg("0.52 0.40 0.30 2/345 6789\n"), Some(0.52));
        let tcp = "  sl  local_address rem_address   st tx_queue\n\
                   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000\n\
                   1: 0100007F:1F90 0100007F:D2A2 03 00000000:00000000\n\
                   2: 0100007F:1F90 0100007F:D2A4 03 00000000:00000000\n\
                   3: 0100007F:1F90 0100007F:D2A6 01 00000000:00000000\n";
        assert_eq!(count_syn_recv(tcp), 2);
    }

    #[test]
    fn sample_between_readings() {
        let a = parse_stat(STAT).unwrap();
        let mut b = a;
        b.busy += 60;
        b.nice += 30;
        b.iowait += 5;
        b.total += 100;
        b.ctxt += 1000;
        let s = Sample::between(&a, &b, Duration::from_millis(500), &Sample::default());
        assert!((s.cpu - 0.6).abs() < 1e-9 && (s.iowait - 0.05).abs() < 1e-9, "{s:?}");
        assert!((s.nice - 0.3).abs() < 1e-9, "niced batch work is counted apart: {s:?}");
        assert!((s.ctxt_per_sec - 2000.0).abs() < 1e-6);
        // No CPU time passed: the previous fractions stay.
        let frozen = Sample::between(&b, &b, Duration::from_millis(500), &s);
        assert_eq!(frozen.cpu, s.cpu);
    }

    #[test]
    fn classification() {
        let t = thresholds();
        let s = |cpu, syn_recv, runq| Sample { cpu, syn_recv, runq, ncpu: 2, ..Sample::default() };
        assert_eq!(t.classify(&s(0.95, 0, 0)), Level::Hot);
        assert_eq!(t.classify(&s(0.1, 64, 0)), Level::Hot);
        assert_eq!(t.classify(&s(0.1, 0, 8)), Level::Hot, "4 runnable per CPU");
        assert_eq!(t.classify(&s(0.5, 3, 2)), Level::Cool);
        assert_eq!(t.classify(&s(0.8, 3, 2)), Level::Between);
        assert_eq!(t.classify(&s(0.5, 30, 2)), Level::Between);
    }

    #[test]
    fn hysteresis_needs_runs() {
        let t = thresholds();
        let mut v = Verdict::default();
        assert!(!v.update(Level::Hot, &t), "one hot sample is not enough");
        assert!(!v.update(Level::Between, &t));
        assert!(!v.update(Level::Hot, &t), "the run was broken");
        assert!(v.update(Level::Hot, &t), "two in a row");
        assert!(v.update(Level::Cool, &t));
        assert!(v.update(Level::Cool, &t));
        assert!(v.update(Level::Hot, &t), "a hot sample resets the cool run");
        assert!(v.update(Level::Cool, &t));
        assert!(v.update(Level::Cool, &t));
        assert!(!v.update(Level::Cool, &t), "three cool in a row");
        assert!(!v.overloaded());
    }

    #[test]
    fn protocol_round_trip() {
        let hello = hello_line(Duration::from_millis(250), Some("127.0.0.1:8081"));
        assert_eq!(
            parse_hello(hello.trim_end()),
            Some(Hello { interval: Duration::from_millis(250), backend: Some("127.0.0.1:8081".into()) })
        );
        assert_eq!(parse_hello("MODUS-MONITOR 1 interval_ms=100 backend=*").unwrap().backend, None);
        assert!(parse_hello("HELLO 1").is_none());
        assert!(parse_hello("MODUS-MONITOR 2 interval_ms=1").is_none());
        let s = Sample { cpu: 0.97, syn_recv: 212, runq: 9, ncpu: 2, ..Sample::default() };
        let line = report_line(7, true, &s);
        let r = parse_report(line.trim_end()).unwrap();
        assert_eq!((r.seq, r.overloaded), (7, true));
        assert!(r.detail.contains("synrecv=212"), "{}", r.detail);
        assert!(!parse_report("S 8 OK").unwrap().overloaded);
        assert!(parse_report("S 8 MAYBE x").is_none());
        assert!(parse_report("S x OK").is_none());
    }
}
