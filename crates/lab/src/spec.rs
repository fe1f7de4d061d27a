//! An experiment: which servers, which load, which points, which plots and
//! which claims. Written in TOML; the built-in ones live in the
//! repository's `lab/` directory and are compiled into the binary.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use units::{Dur, Size};

use crate::columns::{matching, metric_names, AXES};

/// One experiment.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Spec {
    /// Short name (`modus lab run NAME`).
    pub name: String,
    /// What it asks, in a sentence.
    pub description: String,
    /// What is served: `fixed` (the 500 B / 50 KB / 115 KB / 1 MB files of
    /// `modus workload fixed`), `demo` (the embedded demo site) or a directory.
    #[serde(default = "default_docroot")]
    pub docroot: String,
    /// The URL path every request asks for (unless the sweep has `paths`).
    #[serde(default = "default_path")]
    pub path: String,
    /// Measured time per point.
    #[serde(default = "default_duration")]
    pub duration: Dur,
    /// Unmeasured time before it.
    #[serde(default = "default_warmup")]
    pub warmup: Dur,
    /// How long the load generator waits for an answer before counting a
    /// timeout (`modus load --timeout`) [default: its own, 10 s].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// Runs of every point; rounds are interleaved across servers.
    #[serde(default = "one")]
    pub repeats: u32,
    /// Seeds the order of the points within a round.
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// CPUs of the server (`taskset -c` list), and of the load generator.
    #[serde(default)]
    pub server_cpus: Option<String>,
    #[serde(default)]
    pub load_cpus: Option<String>,
    /// CPUs of the fronts (`modus direct`, HAProxy) of servers that have
    /// one [default: the load generator's — on two cores the front shares
    /// the generator's CPU, as lab/direct.toml runs it; paper 002 gave the
    /// director a host of its own].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_cpus: Option<String>,
    /// Serve the bundled CGI programs (`spin`, `echo`, `env`) under
    /// `/cgi-bin/` from one directory the lab writes, for every server:
    /// modus models get `--cgi-dir`, lighttpd mod_cgi, Apache mod_cgi or
    /// mod_cgid; peers that run no CGI (nginx, h2o) are skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cgi: bool,
    /// Where the load, the fronts and the backends run: loopback by
    /// default, or hosts of their own (`netns.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
    /// Roles on other machines, reached with `ssh` (`hosts.rs`); none:
    /// everything on this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<crate::hosts::HostsSpec>,
    /// Requests drawn from a weighted list of URLs (`modus load --mix`
    /// format: `WEIGHT PATH` per line) instead of `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<String>,
    /// Requests replayed from a `modus workload surge` directory (its
    /// stream, repeated) instead of `path`; with the default `docroot`, its
    /// `docs` are served. `surge` makes one in the results directory
    /// (`modus workload surge` with the spec's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// With `workload = "surge"`: every point at N clients replays a SURGE
    /// stream of N users (made per client count with the spec's seed, in
    /// the results directory as `surge-N/`, over one set of documents), so
    /// the population follows the point. `true`: each user keeps SURGE's
    /// active and inactive OFF times (`modus load --stream-think`), as the
    /// papers' user equivalents do; `false`: back to back.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub surge_think: bool,
    /// With `workload`: the open-loop `rates` replay the stream at its own
    /// arrival times (`modus load --stream-times RATE/stream_rate`), this
    /// being the stream's mean rate (req/s), instead of Poisson arrivals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_rate: Option<f64>,
    /// With `stream_rate`: the stream's busiest second (req/s), the peak
    /// whose headroom `compare` states.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_peak: Option<f64>,
    /// With `stream_rate`: the stream's span (s), to tell where a fast
    /// replay runs out before the point ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_span_s: Option<f64>,
    /// With `stream_rate`: a server "falls over" at a speed where its p99
    /// passes this (ms), or where it errs or serves less than offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_bound_ms: Option<f64>,
    /// modus servers write their access log (Combined format) to
    /// `raw/POINT-access.log` instead of `--access-log off`; peers log
    /// there too (paper 003's logging share).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub access_log: bool,
    /// Named weighted mixes of paths (`WEIGHT /path` lines, as `modus load
    /// --mix` reads them), for the sweep's `paths` as `mix:NAME`: paper
    /// 000's share of CGI requests, say.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mixes: BTreeMap<String, Vec<String>>,
    /// The axes: closed-loop clients, and optionally paths and server CPUs.
    pub sweep: Sweep,
    /// The servers compared.
    #[serde(rename = "server")]
    pub servers: Vec<ServerSpec>,
    /// Plots to draw.
    #[serde(default, rename = "plot")]
    pub plots: Vec<Plot>,
    /// Claims the report checks.
    #[serde(default, rename = "claim")]
    pub claims: Vec<ClaimSpec>,
    /// The paper's machine and how this one differs, shown beside every
    /// verdict's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<PaperContext>,
    /// Trace this share of requests (0 < f ≤ 1) of every modus server:
    /// `--trace raw/<point>-trace.csv --trace-sample FRACTION`, for the
    /// `latency_cv` and `queue_slope` metrics and `kind = "trace"` plots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<f64>,
    /// The metrics in the Markdown report's table (`report --markdown`,
    /// BENCHMARKS.md's blocks); none: throughput, p99 and cpu_per_request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub table: Vec<String>,
    /// A metric to set every modus server against the best peer on, row
    /// by row, in the Markdown report (`versus.rs`): `cpu_per_request`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_peer: Option<String>,
    /// The client every point's load comes from: `modus load` (the
    /// default), or `wrk` — closed loop only, one thread — the client the
    /// peers' own benchmarks use (`run/wrk.rs`: why the server's CPU per
    /// request depends on it). `modus lab run --generator` overrides it.
    #[serde(default, skip_serializing_if = "Generator::is_default")]
    pub generator: Generator,
}

/// Who sends a point's requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Generator {
    #[default]
    ModusLoad,
    Wrk,
}

impl Generator {
    fn is_default(&self) -> bool {
        *self == Generator::ModusLoad
    }

    pub fn name(self) -> &'static str {
        match self {
            Generator::ModusLoad => "modus load",
            Generator::Wrk => "wrk",
        }
    }
}

/// The points of the sweep: every combination of its axes.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Sweep {
    /// Closed-loop clients (connections) at each point.
    pub clients: Vec<usize>,
    /// URL paths (file sizes, say), or `mix:NAME` for one of the spec's
    /// `mixes`; none: the spec's `path`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The server's CPUs (`taskset -c` lists: "0", "0-1"); none: the
    /// spec's `server-cpus`. The load generator gets the other CPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_cpus: Vec<String>,
    /// Open loop: requests per second offered (`modus load -R`), over the
    /// `clients` connections; none: closed loop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rates: Vec<u64>,
    /// Memory limits for every server (as a server's `memory`); none: the
    /// servers' own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<Size>,
    /// `keep-alive` (every client keeps its connection) and/or `close` (a
    /// new connection per request: `modus load --close`, `Connection:
    /// close`); none: keep-alive.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connection: Vec<String>,
}

/// A server under test: a modus model and its flags, or a peer.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerSpec {
    /// Its name in results (defaults to the model or the peer).
    #[serde(default)]
    pub name: String,
    /// `modus serve --model`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// A peer instead (`nginx`, `lighttpd`, `h2o`, `apache-prefork`,
    /// `apache-worker`, `apache-event`, `apache-worker-cache`), from a
    /// configuration the lab writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// More `modus serve` arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// A front the load goes to instead, in front of the `backends`:
    /// `direct` (`modus direct`) or `haproxy` (a configuration the lab writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front: Option<String>,
    /// The front's settings: `modus direct` flags, or lines added to
    /// HAProxy's backend section (`default-server maxconn 16`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub front_args: Vec<String>,
    /// Instances of the model (or peer) behind the front, each on its own port.
    #[serde(default = "one_usize", skip_serializing_if = "is_one")]
    pub backends: usize,
    /// A memory limit for each backend's whole process tree, page cache
    /// included (a memory cgroup; root only, `cgroup.rs`), so documents
    /// past it are read from the disk; their pages are dropped before
    /// every point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Size>,
    /// At most this many clients served at once: `--max-clients N` for a
    /// modus model (the process models' cap), MaxRequestWorkers (and
    /// ServerLimit) N for an Apache peer — paper 001's MaxClients 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_clients: Option<usize>,
}

/// `modus serve --max-clients`'s default (`models::Tuning`); a test of
/// the binary checks the two agree.
pub const MODUS_MAX_CLIENTS: usize = 256;

impl ServerSpec {
    /// How many connections it serves at once when each holds a process
    /// or thread for its whole life, keep-alive waits included — modus
    /// `prefork` and Apache's prefork and worker MPMs — past which clients
    /// wait to be accepted while the server may idle (paper 001's
    /// MaxClients, paper 003's 1.3). `None` where connections wait
    /// without a worker (the event loops, modus's gated thread models,
    /// Apache's event MPM, nginx).
    pub fn connection_slots(&self) -> Option<usize> {
        let from_args =
            self.args.windows(2).find(|w| w[0] == "--max-clients").and_then(|w| w[1].parse().ok());
        let set = self.max_clients.or(from_args);
        match self.peer.as_deref() {
            Some("apache-prefork") => Some(set.unwrap_or(crate::peers::APACHE_PREFORK_WORKERS)),
            Some(p) if p.starts_with("apache-worker") => {
                Some(set.unwrap_or(crate::peers::APACHE_THREADED_WORKERS))
            }
            Some(_) => None,
            None if self.front.is_none() && holds_connections(&self.model) => {
                Some(set.unwrap_or(MODUS_MAX_CLIENTS))
            }
            None => None,
        }
    }
}

/// Whether a modus model's worker holds each connection for its life, as
/// the model declares it (`Caps::holds_connection`).
fn holds_connections(model: &str) -> bool {
    models::MODELS.iter().any(|m| m.name == model && m.caps.holds_connection)
}

/// `[network]`: the topology.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NetworkSpec {
    /// The load generator, the front and each backend in a network
    /// namespace of its own, joined by veth pairs to a bridge (root only;
    /// elsewhere loopback, and the report says why).
    #[serde(default)]
    pub netns: bool,
    /// Each host's outgoing link shaped to this rate (`tc` units: `100mbit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
}

/// A line plot: `y` against `x`, one series per server; `y` may name
/// several metrics (`phase_*`): a series per server and metric, or with
/// `stacked`, one bar per server and value of `x`, the metrics stacked in it.
///
/// `kind = "trace"`: from the points' request traces (the spec's `trace`),
/// per server a scatter of each request's arrival (x) against its service
/// end, or with `y = "response"` its response time; no other `y`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Plot {
    pub name: String,
    #[serde(default = "default_x")]
    pub x: String,
    #[serde(default)]
    pub y: String,
    /// `lines` (the default) or `trace`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The axes' names instead of those derived from what varies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_label: Option<String>,
    #[serde(default)]
    pub log_x: bool,
    #[serde(default)]
    pub log_y: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stacked: bool,
}

/// `[context]`: where the paper measured, against this machine.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PaperContext {
    /// The paper's machine and setting, in a sentence ("two 450 MHz
    /// Pentium II, 512 MB, 100 Mbit/s Ethernet, Solaris 7").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper: Option<String>,
    /// How this machine differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differences: Option<String>,
}

impl PaperContext {
    /// As a sentence beside a verdict's reason.
    pub fn sentence(&self) -> Option<String> {
        crate::claims::context(self.paper.as_deref(), self.differences.as_deref())
    }
}

/// A claim over the results (see `claims.rs` for the grammar).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClaimSpec {
    /// In words, as a paper would say it.
    pub text: String,
    pub expr: String,
    /// The paper's own words and number, for REPRODUCTION.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper: Option<String>,
    /// Where in the paper: `Fig. 10`, `Table 1`, `§5.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

fn default_docroot() -> String {
    "fixed".into()
}
fn default_path() -> String {
    "/".into()
}
fn default_duration() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}
fn default_warmup() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}
fn yes() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}
fn one() -> u32 {
    1
}
fn one_u64() -> u64 {
    1
}
fn one_usize() -> usize {
    1
}
fn is_one(n: &usize) -> bool {
    *n == 1
}
/// The least `memory` a server is given: below it, a modus server is
/// killed for its own memory rather than made to read its documents.
const MIN_MEMORY: u64 = 16 << 20;

/// The values of the sweep's `connection` axis.
const CONNECTIONS: [&str; 2] = ["keep-alive", "close"];

fn default_x() -> String {
    "clients".into()
}

/// The built-in experiments: (name, TOML).
pub const BUILT_IN: [(&str, &str); 16] = [
    ("tiny", include_str!("../../../lab/tiny.toml")),
    ("models-500b", include_str!("../../../lab/models-500b.toml")),
    ("paper000-file-size", include_str!("../../../lab/paper000-file-size.toml")),
    ("paper000-cpus", include_str!("../../../lab/paper000-cpus.toml")),
    ("paper000-cgi-share", include_str!("../../../lab/paper000-cgi-share.toml")),
    ("paper000-latency", include_str!("../../../lab/paper000-latency.toml")),
    ("paper001-clients", include_str!("../../../lab/paper001-clients.toml")),
    ("paper002-director", include_str!("../../../lab/paper002-director.toml")),
    ("paper003-surge", include_str!("../../../lab/paper003-surge.toml")),
    ("paper004-srpt", include_str!("../../../lab/paper004-srpt.toml")),
    ("paper004-link", include_str!("../../../lab/paper004-link.toml")),
    ("static", include_str!("../../../lab/static.toml")),
    ("timing", include_str!("../../../lab/timing.toml")),
    ("reuseport", include_str!("../../../lab/reuseport.toml")),
    ("direct", include_str!("../../../lab/direct.toml")),
    ("peers-static", include_str!("../../../lab/peers-static.toml")),
];

/// The built-in experiments that rerun a paper's (`modus lab run papers`).
pub fn papers() -> impl Iterator<Item = &'static str> {
    BUILT_IN.iter().map(|(name, _)| *name).filter(|name| name.starts_with("paper"))
}

impl Spec {
    /// The connection slots of the server named `server`
    /// ([`ServerSpec::connection_slots`]), for a claim's reasons.
    pub fn slots_of(&self, server: &str) -> Option<usize> {
        self.servers.iter().find(|s| s.name == server).and_then(ServerSpec::connection_slots)
    }

    /// Parses and checks a spec; errors name the line and the key.
    pub fn parse(text: &str, origin: &str) -> Result<Spec> {
        let mut spec: Spec = toml::from_str(text).with_context(|| format!("in {origin}"))?;
        for s in &mut spec.servers {
            if s.name.is_empty() {
                s.name = s.peer.clone().unwrap_or_else(|| s.model.clone());
            }
        }
        spec.check().with_context(|| format!("in {origin}"))?;
        Ok(spec)
    }

    fn check(&self) -> Result<()> {
        if self.servers.is_empty() {
            bail!("no [[server]]: nothing to measure");
        }
        let mut names = BTreeSet::new();
        for s in &self.servers {
            match (&s.peer, s.model.is_empty()) {
                (Some(_), false) | (None, true) => {
                    bail!("server {:?}: give either a `model` or a `peer`", s.name)
                }
                (Some(peer), true) if !crate::peers::PEERS.contains(&peer.as_str()) => {
                    bail!(
                        "server {:?}: no peer {peer:?} (the lab runs {})",
                        s.name,
                        crate::peers::PEERS.join(", ")
                    )
                }
                (Some(_), true) if !s.args.is_empty() => {
                    bail!(
                        "server {:?}: `args` are for modus models; a peer runs from the lab's configuration",
                        s.name
                    )
                }
                _ => {}
            }
            match &s.front {
                Some(front) if !crate::peers::FRONTS.contains(&front.as_str()) => bail!(
                    "server {:?}: no front {front:?} (the lab runs {})",
                    s.name,
                    crate::peers::FRONTS.join(", ")
                ),
                None if s.backends != 1 || !s.front_args.is_empty() => {
                    bail!(
                        "server {:?}: `backends` and `front-args` want a `front` (direct or haproxy)",
                        s.name
                    )
                }
                _ => {}
            }
            if s.backends == 0 {
                bail!("server {:?}: backends must be at least 1", s.name);
            }
            match (s.max_clients, s.peer.as_deref()) {
                (Some(0), _) => bail!("server {:?}: max-clients must be at least 1", s.name),
                (Some(_), Some(peer)) if !peer.starts_with("apache-") => {
                    bail!("server {:?}: max-clients is for modus models and Apache peers, not {peer}", s.name)
                }
                _ => {}
            }
            if s.memory.is_some_and(|m| m.0 < MIN_MEMORY) {
                bail!(
                    "server {:?}: memory must be at least {} (a server must fit)",
                    s.name,
                    Size(MIN_MEMORY)
                );
            }
            if s.memory.is_some() && !self.sweep.memory.is_empty() {
                bail!("server {:?}: memory on a server and as a [sweep] axis: one or the other", s.name);
            }
            if !names.insert(s.name.as_str()) {
                bail!("two servers are named {:?} (give one a `name`)", s.name);
            }
            if s.name.contains([',', '/', ' ']) {
                bail!("server name {:?}: no commas, slashes or spaces (it names files)", s.name);
            }
        }
        if self.sweep.clients.is_empty() || self.sweep.clients.contains(&0) {
            bail!("[sweep] clients: at least one point, each at least 1");
        }
        if self.sweep.memory.iter().any(|m| m.0 < MIN_MEMORY) {
            bail!("[sweep] memory: each at least {} (a server must fit)", Size(MIN_MEMORY));
        }
        if let Some(bad) = self.sweep.connection.iter().find(|c| !CONNECTIONS.contains(&c.as_str())) {
            bail!("[sweep] connection: {bad:?} is neither `keep-alive` nor `close`");
        }
        if self.sweep.rates.contains(&0) {
            bail!("[sweep] rates: requests per second, each at least 1 (no rates: closed loop)");
        }
        if let Some(hosts) = &self.hosts {
            crate::hosts::Placement::from_spec(hosts)?;
            if self.network.as_ref().is_some_and(|n| n.netns) {
                bail!("[hosts] and [network] netns: one placement or the other");
            }
            let fewest = self.sweep.clients.iter().min().copied().unwrap_or(1);
            if hosts.load.len() > fewest {
                bail!("[hosts] load: {} generators for {fewest} clients: each needs one", hosts.load.len());
            }
        }
        for path in self.paths() {
            if let Some(name) = path.strip_prefix("mix:") {
                if !self.mixes.contains_key(name) {
                    let known: Vec<&str> = self.mixes.keys().map(String::as_str).collect();
                    bail!("path {path:?}: no mix {name:?} in [mixes] (there: {})", known.join(", "));
                }
            } else if !path.starts_with('/') || path.contains([',', ' ']) {
                bail!("path {path:?} must start with / (or be mix:NAME) and hold no commas or spaces");
            }
        }
        for (name, lines) in &self.mixes {
            if name.contains(['/', ',', ' ']) || name.is_empty() {
                bail!("mix {name:?}: a name without slashes, commas or spaces");
            }
            for line in lines {
                let mut fields = line.split_whitespace();
                let weight = fields.next().map(|w| w.trim_end_matches('%').parse::<f64>());
                let path = fields.next();
                if !matches!(weight, Some(Ok(w)) if w > 0.0) || !path.is_some_and(|p| p.starts_with('/')) {
                    bail!("mix {name:?}: {line:?} is not `WEIGHT /path` (a positive weight)");
                }
            }
        }
        if self.mix.is_some() && self.workload.is_some() {
            bail!("mix and workload: one or the other");
        }
        if (self.mix.is_some() || self.workload.is_some()) && !self.sweep.paths.is_empty() {
            bail!("[sweep] paths with a mix or a workload: the requests' paths come from it");
        }
        if self.repeats == 0 {
            bail!("repeats must be at least 1");
        }
        if self.generator == Generator::Wrk {
            if !self.sweep.rates.is_empty() {
                bail!("generator = \"wrk\" is closed loop: no [sweep] rates");
            }
            if self.mix.is_some()
                || self.workload.is_some()
                || self.paths().iter().any(|p| p.starts_with("mix:"))
            {
                bail!("generator = \"wrk\" asks for one path a point: no mix or workload");
            }
            if self.hosts.is_some() {
                bail!("generator = \"wrk\" runs here: no [hosts]");
            }
        }
        if self.trace.is_some_and(|f| !(f > 0.0 && f <= 1.0)) {
            bail!("trace: a share of the requests, more than 0 and at most 1");
        }
        for p in &self.plots {
            match p.kind.as_str() {
                "" | "lines" => {}
                "trace" if self.trace.is_none() => {
                    bail!("plot {:?}: kind = \"trace\" wants the spec's `trace = FRACTION`", p.name)
                }
                "trace" if !["", "end", "response"].contains(&p.y.as_str()) => {
                    bail!("plot {:?}: a trace plot's y is `end` (the default) or `response`", p.name)
                }
                "trace" => continue,
                other => bail!("plot {:?}: kind {other:?} is neither `lines` nor `trace`", p.name),
            }
            if !AXES.contains(&p.x.as_str()) {
                bail!("plot {:?}: x = {:?} is not an axis ({})", p.name, p.x, AXES.join(", "));
            }
            if matching(&p.y).is_empty() {
                bail!(
                    "plot {:?}: y = {:?} is not a metric ({}), nor a prefix of some with a final *",
                    p.name,
                    p.y,
                    metric_names()
                );
            }
            if p.stacked && p.log_y {
                bail!("plot {:?}: stacked bars have a linear y axis (no log-y)", p.name);
            }
        }
        if let Some(bad) = self.best_peer.as_ref().filter(|m| matching(m) != [m.as_str()]) {
            bail!("best-peer: {bad:?} is not a metric ({})", metric_names());
        }
        if self.best_peer.is_some() && !self.servers.iter().any(|s| s.peer.is_some()) {
            bail!("best-peer: no [[server]] is a peer");
        }
        if let Some(bad) = self.table.iter().find(|m| matching(m) != [m.as_str()]) {
            bail!("table: {bad:?} is not a metric ({})", metric_names());
        }
        for c in &self.claims {
            crate::claims::Claim::parse(&c.expr, &self.server_names())
                .with_context(|| format!("claim {:?}", c.expr))?;
        }
        Ok(())
    }

    /// The servers' names, as claims name them.
    pub fn server_names(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.name.as_str()).collect()
    }

    /// The paths requested, one per point of that axis.
    pub fn paths(&self) -> Vec<String> {
        if self.sweep.paths.is_empty() {
            vec![self.path.clone()]
        } else {
            self.sweep.paths.clone()
        }
    }

    /// The server's CPU sets, one per point of that axis ("": not pinned).
    pub fn cpu_sets(&self) -> Vec<String> {
        if self.sweep.server_cpus.is_empty() {
            vec![self.server_cpus.clone().unwrap_or_default()]
        } else {
            self.sweep.server_cpus.clone()
        }
    }

    /// The open-loop rates, one per point of that axis (0: closed loop).
    pub fn rates(&self) -> Vec<u64> {
        if self.sweep.rates.is_empty() {
            vec![0]
        } else {
            self.sweep.rates.clone()
        }
    }

    /// The memory limits, one per point of that axis (none: the servers' own).
    pub fn memory_limits(&self) -> Vec<Option<Size>> {
        if self.sweep.memory.is_empty() {
            vec![None]
        } else {
            self.sweep.memory.iter().copied().map(Some).collect()
        }
    }

    /// The connection modes, one per point of that axis ("": keep-alive,
    /// the axis not swept).
    pub fn connections(&self) -> Vec<String> {
        if self.sweep.connection.is_empty() {
            vec![String::new()]
        } else {
            self.sweep.connection.clone()
        }
    }

    /// The metrics of the Markdown report's table.
    pub fn table_metrics(&self) -> Vec<&str> {
        if self.table.is_empty() {
            vec!["throughput", "p99", "cpu_per_request"]
        } else {
            self.table.iter().map(String::as_str).collect()
        }
    }

    /// Whether some point runs under a memory limit.
    pub fn limits_memory(&self) -> bool {
        !self.sweep.memory.is_empty() || self.servers.iter().any(|s| s.memory.is_some())
    }

    /// The spec with its load from `generator`, checked again (wrk is
    /// for closed-loop experiments of one path a point).
    pub fn with_generator(mut self, generator: Generator) -> Result<Spec> {
        self.generator = generator;
        self.check()?;
        Ok(self)
    }

    /// The spec for a quick look: one short round at the ends of the
    /// clients axis and of the rates.
    pub fn quick(mut self) -> Spec {
        let c = &self.sweep.clients;
        let ends = [c[0], c[c.len() - 1]];
        self.sweep.clients = ends.into_iter().collect::<BTreeSet<_>>().into_iter().collect();
        if let (Some(&first), Some(&last)) = (self.sweep.rates.first(), self.sweep.rates.last()) {
            self.sweep.rates = [first, last].into_iter().collect::<BTreeSet<_>>().into_iter().collect();
        }
        self.duration = Dur(self.duration.0.min(std::time::Duration::from_secs(1)));
        self.warmup = Dur(self.warmup.0.min(std::time::Duration::from_millis(200)));
        self.repeats = 1;
        self
    }
}

/// A spec by built-in name or file path.
pub fn load(name_or_file: &str) -> Result<Spec> {
    if let Some((name, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_file) {
        return Spec::parse(text, &format!("the built-in spec {name}"));
    }
    let path = std::path::Path::new(name_or_file);
    if path.extension().is_some_and(|e| e == "toml") || path.exists() {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        return Spec::parse(&text, &path.display().to_string());
    }
    let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
    bail!("no experiment {name_or_file:?}: the built-in ones are {} (or give a FILE.toml)", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_spec_parses() {
        for (name, text) in BUILT_IN {
            let spec = Spec::parse(text, name).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert_eq!(spec.name, name);
        }
    }

    #[test]
    fn bad_specs_say_where_and_what() {
        let base = "name = \"x\"\ndescription = \"d\"\npath = \"/\"\n[sweep]\nclients = [1]\n";
        let err =
            |extra: &str| format!("{:#}", Spec::parse(&format!("{base}{extra}"), "t.toml").unwrap_err());
        let e = err("[[server]]\nmodel = \"pool\"\nthreads = 4\n");
        assert!(
            e.contains("in t.toml") && e.contains("unknown field `threads`") && e.contains("line 8"),
            "{e}"
        );
        assert!(err("").contains("missing field `server`"), "{}", err(""));
        assert!(err("[[server]]\npeer = \"caddy\"\n").contains("no peer \"caddy\""));
        assert!(err("[[server]]\nname = \"x\"\n").contains("give either a `model` or a `peer`"));
        let e = err("[[server]]\nmodel = \"pool\"\nfront = \"nginx\"\n");
        assert!(e.contains("no front \"nginx\" (the lab runs direct, haproxy)"), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\nbackends = 2\n");
        assert!(e.contains("`backends` and `front-args` want a `front`"), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\nfront = \"direct\"\nbackends = 0\n");
        assert!(e.contains("backends must be at least 1"), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\n[[server]]\nmodel = \"pool\"\n");
        assert!(e.contains("two servers are named \"pool\""), "{e}");
        let zero_rate = "name = \"x\"\ndescription = \"d\"\n[sweep]\nclients = [1]\nrates = [0]\n[[server]]\nmodel = \"pool\"\n";
        let e = format!("{:#}", Spec::parse(zero_rate, "t.toml").unwrap_err());
        assert!(e.contains("[sweep] rates: requests per second, each at least 1"), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\n[[plot]]\nname = \"p\"\ny = \"speed\"\n");
        assert!(e.contains("y = \"speed\" is not a metric"), "{e}");
        let e = err(
            "[[server]]\nmodel = \"pool\"\n[[claim]]\ntext = \"t\"\nexpr = \"throughput(server=nope) > 1\"\n",
        );
        assert!(e.contains("no server \"nope\""), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\nmemory = \"lots\"\n");
        assert!(e.contains("invalid size \"lots\""), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\nmemory = \"1MiB\"\n");
        assert!(e.contains("memory must be at least 16MiB"), "{e}");
        let spec =
            Spec::parse(&format!("{base}[[server]]\nmodel = \"pool\"\nmemory = \"128MiB\"\n"), "t").unwrap();
        assert_eq!(spec.servers[0].memory, Some(Size(128 << 20)));
        let axis = "name = \"x\"\ndescription = \"d\"\n[sweep]\nclients = [1]\nmemory = [\"64MiB\", \"1G\"]\n[[server]]\nmodel = \"pool\"\n";
        let spec = Spec::parse(axis, "t").unwrap();
        assert_eq!(spec.memory_limits(), [Some(Size(64 << 20)), Some(Size(1 << 30))]);
        let e = format!("{:#}", Spec::parse(&format!("{axis}memory = \"64MiB\"\n"), "t").unwrap_err());
        assert!(e.contains("one or the other"), "{e}");
        let modes = "name = \"x\"\ndescription = \"d\"\n[sweep]\nclients = [1]\nconnection = [\"keep-alive\", \"close\"]\n[[server]]\nmodel = \"pool\"\n";
        assert_eq!(Spec::parse(modes, "t").unwrap().connections(), ["keep-alive", "close"]);
        let e = format!("{:#}", Spec::parse(&modes.replace("\"close\"", "\"closed\""), "t").unwrap_err());
        assert!(e.contains("\"closed\" is neither `keep-alive` nor `close`"), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\n[[plot]]\nname = \"p\"\ny = \"speed*\"\n");
        assert!(e.contains("nor a prefix of some"), "{e}");
        let text = format!("table = [\"throughput\", \"phase_*\"]\n{base}[[server]]\nmodel = \"pool\"\n");
        let e = format!("{:#}", Spec::parse(&text, "t.toml").unwrap_err());
        assert!(e.contains("table: \"phase_*\" is not a metric"), "{e}");
        let trace_plot = "[[server]]\nmodel = \"pool\"\n[[plot]]\nname = \"t\"\nkind = \"trace\"\n";
        let e = err(trace_plot);
        assert!(e.contains("kind = \"trace\" wants the spec's `trace = FRACTION`"), "{e}");
        let traced = Spec::parse(&format!("trace = 0.1\n{base}{trace_plot}"), "t").unwrap();
        assert_eq!(
            (traced.trace, traced.plots[0].kind.as_str(), traced.plots[0].y.as_str()),
            (Some(0.1), "trace", "")
        );
        let e = format!("{:#}", Spec::parse(&format!("trace = 1.5\n{base}{trace_plot}"), "t").unwrap_err());
        assert!(e.contains("trace: a share of the requests"), "{e}");
        let e = format!(
            "{:#}",
            Spec::parse(&format!("trace = 0.1\n{base}{trace_plot}y = \"p99\"\n"), "t").unwrap_err()
        );
        assert!(e.contains("a trace plot's y is `end` (the default) or `response`"), "{e}");
        let e = err("[[server]]\nmodel = \"pool\"\n[[plot]]\nname = \"p\"\ny = \"p99\"\nkind = \"pie\"\n");
        assert!(e.contains("kind \"pie\" is neither"), "{e}");
        let labelled =
            "[[server]]\nmodel = \"pool\"\n[[plot]]\nname = \"p\"\ny = \"p99\"\nx-label = \"users\"\n";
        assert_eq!(
            Spec::parse(&format!("{base}{labelled}"), "t").unwrap().plots[0].x_label.as_deref(),
            Some("users")
        );
        let text = format!("duration = \"fast\"\n{base}[[server]]\nmodel = \"pool\"\n");
        assert!(format!("{:#}", Spec::parse(&text, "t.toml").unwrap_err()).contains("invalid duration"));
    }

    /// bench/reuseport.sh and bench/direct.sh as specs: what each kept of
    /// its script.
    #[test]
    fn the_specs_that_replaced_scripts_keep_their_setup() {
        let reuseport = load("reuseport").unwrap();
        let flags: Vec<bool> =
            reuseport.servers.iter().map(|s| s.args.iter().any(|a| a == "--reuseport")).collect();
        assert_eq!(flags, [false, true], "shared listener, then one per loop");
        assert!(reuseport
            .servers
            .iter()
            .all(|s| s.model == "event" && s.args.join(" ").contains("--workers 2")));
        assert_eq!(reuseport.connections(), ["keep-alive", "close"]);
        assert!(reuseport.table_metrics().contains(&"worker_spread"));
        let direct = load("direct").unwrap();
        assert_eq!(direct.sweep.clients, [1, 10, 50, 100, 200, 500, 1000, 2000]);
        assert_eq!(direct.timeout.map(|t| t.0), Some(std::time::Duration::from_secs(30)));
        let fronted: Vec<&str> = direct
            .servers
            .iter()
            .filter(|s| s.front.as_deref() == Some("direct"))
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(fronted, ["apache-prefork-direct", "prefork-direct"]);
        assert!(["p50_2xx", "p99_2xx", "other_5xx"].iter().all(|m| direct.table_metrics().contains(m)));
        assert_eq!(load("tiny").unwrap().table_metrics(), ["throughput", "p99", "cpu_per_request"]);
    }

    /// Issue 35's table as an experiment: every size, both connection
    /// modes, the tuned nginx and the other peers beside three models,
    /// logs on, pinned apart, judged against the best peer on CPU.
    #[test]
    fn peers_static_measures_issue_35s_table() {
        let spec = load("peers-static").unwrap();
        assert_eq!(spec.paths(), ["/500b.bin", "/50k.bin", "/115k.bin", "/1m.bin"]);
        assert_eq!(spec.connections(), ["keep-alive", "close"]);
        let peers: Vec<&str> = spec.servers.iter().filter_map(|s| s.peer.as_deref()).collect();
        assert_eq!(peers, ["nginx-tuned", "lighttpd", "h2o", "apache-event"]);
        let models: Vec<&str> =
            spec.servers.iter().filter(|s| s.peer.is_none()).map(|s| s.model.as_str()).collect();
        assert_eq!(models, ["event", "amped", "uring"]);
        assert!(spec.access_log && spec.repeats == 3);
        assert_eq!((spec.server_cpus.as_deref(), spec.load_cpus.as_deref()), (Some("0"), Some("1")));
        assert_eq!(spec.best_peer.as_deref(), Some("cpu_per_request"));
        let points =
            spec.servers.len() * spec.paths().len() * spec.connections().len() * spec.repeats as usize;
        // About 0.3 s per point to start, check and stop a server: ~12 minutes in all.
        let each = spec.duration.0 + spec.warmup.0 + std::time::Duration::from_millis(300);
        assert!(
            each * points as u32 <= std::time::Duration::from_secs(15 * 60),
            "{points} points of {each:?}"
        );
        let e = format!(
            "{:#}",
            Spec::parse(
                "name = \"x\"\ndescription = \"d\"\nbest-peer = \"speed\"\n[sweep]\nclients = [1]\n[[server]]\npeer = \"nginx\"\n",
                "t"
            )
            .unwrap_err()
        );
        assert!(e.contains("best-peer: \"speed\" is not a metric"), "{e}");
        let e = format!(
            "{:#}",
            Spec::parse(
                "name = \"x\"\ndescription = \"d\"\nbest-peer = \"cpu_per_request\"\n[sweep]\nclients = [1]\n[[server]]\nmodel = \"event\"\n",
                "t"
            )
            .unwrap_err()
        );
        assert!(e.contains("best-peer: no [[server]] is a peer"), "{e}");
    }

    #[test]
    fn mixes_are_named_in_the_sweep_and_checked() {
        let base = "name = \"x\"\ndescription = \"d\"\n[[server]]\nmodel = \"pool\"\n";
        let parse = |extra: &str| Spec::parse(&format!("{base}{extra}"), "t.toml");
        let good = parse("[mixes]\ncgi-10 = [\"90 /a\", \"10% /cgi-bin/spin\"]\n[sweep]\nclients = [1]\npaths = [\"mix:cgi-10\", \"/a\"]\n")
            .unwrap();
        assert_eq!(good.paths(), ["mix:cgi-10", "/a"]);
        let err = |extra: &str| format!("{:#}", parse(extra).unwrap_err());
        let e = err("[mixes]\ncgi = [\"90 /a\"]\n[sweep]\nclients = [1]\npaths = [\"mix:nope\"]\n");
        assert!(e.contains("no mix \"nope\"") && e.contains("cgi"), "{e}");
        let e = err("[mixes]\ncgi = [\"ninety /a\"]\n[sweep]\nclients = [1]\npaths = [\"mix:cgi\"]\n");
        assert!(e.contains("is not `WEIGHT /path`"), "{e}");
        let e = err("[mixes]\ncgi = [\"0 /a\"]\n[sweep]\nclients = [1]\n");
        assert!(e.contains("a positive weight"), "{e}");
    }

    #[test]
    fn the_papers_are_the_built_ins_named_so() {
        let papers: Vec<&str> = papers().collect();
        assert!(papers.len() >= 5, "{papers:?}");
        assert!(papers.iter().all(|p| p.starts_with("paper")));
        for name in papers {
            let spec = load(name).unwrap();
            assert!(!spec.claims.is_empty(), "{name} checks something");
            assert!(spec.claims.iter().all(|c| c.paper.is_some()), "{name}: every claim quotes its paper");
            assert!(spec.claims.iter().all(|c| c.source.is_some()), "{name}: every claim names its figure");
            assert!(spec.repeats >= 3, "{name}: at least 3 repeats, for the spread");
            assert!(!spec.description.contains("shared/papers"), "{name} cites the paper, not a path");
        }
        // Paper 001 ran every server with MaxClients 80.
        let p001 = load("paper001-clients").unwrap();
        assert!(p001.servers.iter().all(|s| s.max_clients == Some(80)), "{:?}", p001.servers);
        // Paper 004's link case: a shaped link between namespaces, or nothing.
        let link = load("paper004-link").unwrap();
        assert!(link.network.as_ref().is_some_and(|n| n.netns && n.rate.is_some()));
    }

    #[test]
    fn max_clients_is_for_models_and_apache() {
        let base = "name = \"x\"\ndescription = \"d\"\n[sweep]\nclients = [1]\n[[server]]\n";
        let parse = |server: &str| Spec::parse(&format!("{base}{server}"), "t.toml");
        assert_eq!(
            parse("model = \"prefork\"\nmax-clients = 80\n").unwrap().servers[0].max_clients,
            Some(80)
        );
        assert!(parse("peer = \"apache-worker\"\nmax-clients = 80\n").is_ok());
        let e = format!("{:#}", parse("peer = \"nginx\"\nmax-clients = 80\n").unwrap_err());
        assert!(e.contains("max-clients is for modus models and Apache peers"), "{e}");
        let e = format!("{:#}", parse("model = \"prefork\"\nmax-clients = 0\n").unwrap_err());
        assert!(e.contains("at least 1"), "{e}");
    }

    #[test]
    fn quick_keeps_the_ends_of_the_sweep() {
        let mut spec = load("tiny").unwrap();
        spec.sweep.clients = vec![1, 4, 16, 64];
        let q = spec.quick();
        assert_eq!(q.sweep.clients, [1, 64]);
        assert!(q.duration.0 <= std::time::Duration::from_secs(1));
        assert_eq!(q.repeats, 1);
    }
}
