//! Running an experiment: the order of the points, and each point for
//! real — a `modus serve` child (or a peer, or a front — `modus direct`,
//! HAProxy — with its backends) pinned to its CPUs, in a memory cgroup
//! when it has a limit, a `modus load` child pinned to the others, and
//! what `probe.rs` reads around the measurement.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::columns::{METRICS, PHASES};
use crate::probe::{Scoreboard, Timing};
use crate::results::{Coords, Point, Table};
use crate::spec::{Generator, ServerSpec, Spec};

/// One point to measure: `spec.servers[server]` at `clients`, the
/// `path`-th path, the `cpus`-th CPU set, the `rate`-th rate, the
/// `memory`-th memory limit and the `connection`-th connection mode of the
/// sweep, repeat `repeat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub server: usize,
    pub clients: usize,
    pub path: usize,
    pub cpus: usize,
    pub rate: usize,
    pub memory: usize,
    pub connection: usize,
    pub repeat: u32,
}

impl Planned {
    /// Its coordinates.
    pub fn coords(&self, spec: &Spec) -> Coords {
        Coords {
            clients: self.clients,
            path: spec.paths()[self.path].clone(),
            cpus: spec.cpu_sets()[self.cpus].clone(),
            rate: spec.rates()[self.rate],
            memory: spec.memory_limits()[self.memory].map(|m| m.to_string()).unwrap_or_default(),
            connection: spec.connections()[self.connection].clone(),
        }
    }

    /// The server's memory limit here: the sweep's, or its own.
    pub fn memory_limit(&self, spec: &Spec) -> Option<units::Size> {
        spec.memory_limits()[self.memory].or(spec.servers[self.server].memory)
    }
}

/// The points in the order they run: round after round (one per repeat),
/// each round every (server, clients) pair once, shuffled with the spec's
/// seed — so drift over time (a warming machine, a neighbour's job) is
/// spread over every server rather than loaded onto the last one.
pub fn schedule(spec: &Spec) -> Vec<Planned> {
    let mut order = Vec::new();
    for repeat in 1..=spec.repeats {
        let (paths, cpus, rates) = (spec.paths().len(), spec.cpu_sets().len(), spec.rates().len());
        let (limits, modes) = (spec.memory_limits().len(), spec.connections().len());
        let mut round = Vec::new();
        for server in 0..spec.servers.len() {
            for &clients in &spec.sweep.clients {
                for path in 0..paths {
                    for cpus in 0..cpus {
                        for rate in 0..rates {
                            for memory in 0..limits {
                                for connection in 0..modes {
                                    round.push(Planned {
                                        server,
                                        clients,
                                        path,
                                        cpus,
                                        rate,
                                        memory,
                                        connection,
                                        repeat,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        let mut state = spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(repeat) | 1;
        for i in (1..round.len()).rev() {
            // xorshift64: enough to shuffle a few dozen points reproducibly.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            round.swap(i, (state % (i as u64 + 1)) as usize);
        }
        order.extend(round);
    }
    order
}

/// Servers that cannot run here, and why: a peer or front that is not
/// installed, a peer asked to serve the embedded demo site (which only
/// modus has) or CGI it does not run, Apache as root (its children run
/// as www-data) with the results directory `out` out of www-data's reach,
/// or a memory limit where memory cgroups are not permitted.
pub fn unavailable(spec: &Spec, out: &Path) -> Vec<(String, String)> {
    use crate::peers;
    spec.servers
        .iter()
        .filter_map(|s| {
            if let Some(why) = placed::unavailable(spec, s) {
                return Some((s.name.clone(), why));
            }
            let limit = s.memory.or(spec.sweep.memory.first().copied());
            // Memory cgroups are only tried where a limit is asked for.
            let refused = limit.and_then(|limit| crate::cgroup::memory().err().map(|why| (limit, why)));
            let why = if let Some((limit, why)) = refused {
                format!("its memory limit ({limit}) cannot be set: {why}")
            } else if let Some(peer) = s.peer.as_deref() {
                if peers::binary(peer).is_none() {
                    format!("{peer} is not installed (apt-get install {})", peers::program(peer))
                } else if spec.docroot == "demo" {
                    format!("{peer} cannot serve the embedded demo site; give a directory")
                } else if spec.cgi && !peers::runs_cgi(peer) {
                    format!("{peer} runs no CGI here, and this experiment requests /cgi-bin/")
                } else if let Some(dir) = peers::drops_root(peer)
                    .then(|| [out.to_path_buf(), PathBuf::from(&spec.docroot)])
                    .and_then(|dirs| dirs.into_iter().find(|d| d.is_absolute() && !searchable(d)))
                {
                    format!(
                        "Apache's children run as www-data, who cannot reach {}: make it and the \
                         directories above it world-searchable (chmod o+x)",
                        dir.display()
                    )
                } else {
                    return None;
                }
            } else if s.front.as_deref() == Some("haproxy") && peers::binary("haproxy").is_none() {
                "haproxy is not installed (apt-get install haproxy)".to_string()
            } else {
                return None;
            };
            Some((s.name.clone(), why))
        })
        .collect()
}

/// Whether others (www-data) may reach `dir`: every directory from it up
/// to the root searchable by all. One that does not exist yet is made
/// by the lab, readable by all.
fn searchable(dir: &Path) -> bool {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    dir.ancestors().filter_map(|d| std::fs::metadata(d).ok()).all(|m| m.permissions().mode() & 0o001 != 0)
}

/// Where a point's raw record is kept (its presence marks it done).
pub fn raw_path(out: &Path, spec: &Spec, p: &Planned) -> PathBuf {
    // Indices rather than the paths and CPU lists themselves, which hold slashes and commas.
    let name = spec.servers[p.server].name.as_str();
    let rate = if spec.sweep.rates.is_empty() { String::new() } else { format!("-q{}", p.rate) };
    let memory = if spec.sweep.memory.is_empty() { String::new() } else { format!("-m{}", p.memory) };
    let mode = if spec.sweep.connection.is_empty() { String::new() } else { format!("-k{}", p.connection) };
    out.join("raw")
        .join(format!("{name}-c{}-p{}-u{}{rate}{memory}{mode}-r{}.json", p.clients, p.path, p.cpus, p.repeat))
}

/// How to run.
#[derive(Debug)]
pub struct Runner {
    /// The `modus` binary (the running one).
    pub modus: PathBuf,
    /// The results directory.
    pub out: PathBuf,
    /// Keep points already measured in `out`.
    pub resume: bool,
    /// Raised by Ctrl-C: finish the point, stop.
    pub stop: Arc<AtomicBool>,
    /// Hosts of their own for the load, the fronts and the backends
    /// (`[network] netns`); none: loopback.
    pub network: Option<crate::netns::Network>,
    /// The hosts of `[hosts]`, connected; none: every role here.
    pub hosts: Option<placed::Hosts>,
}

/// Where a process runs: its network namespace (none: the lab's) and the
/// address it listens on.
#[derive(Clone, Copy)]
struct Place<'a> {
    ns: Option<&'a str>,
    ip: &'a str,
}

impl Runner {
    fn place(&self, host: impl Fn(&crate::netns::Network) -> &crate::netns::Host) -> Place<'_> {
        match &self.network {
            Some(net) => Place { ns: Some(&host(net).ns), ip: &host(net).ip },
            None => Place { ns: None, ip: "127.0.0.1" },
        }
    }
}

impl Runner {
    /// Measures every point not yet done; `points.csv` is rewritten after
    /// each, so an interrupted run leaves a resumable directory.
    pub fn run(&self, spec: &Spec, mut progress: impl FnMut(&str)) -> Result<Table> {
        std::fs::create_dir_all(self.out.join("raw"))
            .with_context(|| format!("creating {}", self.out.display()))?;
        self.prepare_requests(spec)?;
        let root = self.docroot(spec)?;
        if let Some(hosts) = &self.hosts {
            hosts
                .prepare(&self.modus, root.as_deref(), &self.out, self.workload(spec).as_deref())
                .context("copying modus and the docroot to the hosts")?;
        }
        let skipped: Vec<String> = unavailable(spec, &self.out).into_iter().map(|(name, _)| name).collect();
        let plan: Vec<Planned> =
            schedule(spec).into_iter().filter(|p| !skipped.contains(&spec.servers[p.server].name)).collect();
        let mut table = Table::default();
        let started = Instant::now();
        let mut measured = 0;
        for (i, p) in plan.iter().enumerate() {
            let raw = raw_path(&self.out, spec, p);
            let server = &spec.servers[p.server];
            let values = match self.resume.then(|| read_raw(&raw)).flatten() {
                Some(values) => values,
                None => {
                    if self.stop.load(Ordering::Relaxed) {
                        bail!(
                            "interrupted: {} of {} points measured; `--resume` goes on",
                            table.points.len(),
                            plan.len()
                        );
                    }
                    let at = p.coords(spec);
                    // With its memory limit here: the sweep's, or its own.
                    let mut limited = ServerSpec { memory: p.memory_limit(spec), ..server.clone() };
                    let log = spec.access_log.then(|| access_log_path(&raw));
                    // A modus server traces its requests (`trace.rs`).
                    let remote = self.hosts.as_ref().is_some_and(|h| h.placement.backend(0).is_some());
                    let trace = spec.trace.filter(|_| server.peer.is_none() && !remote).map(|share| {
                        let file = crate::trace::path_for(&raw);
                        let sample = share.to_string();
                        limited.args.extend(["--trace".into(), file.display().to_string()]);
                        limited.args.extend(["--trace-sample".into(), sample]);
                        file
                    });
                    // A point that measured nothing (a server that would not
                    // start, a generator that sent nothing) is recorded as
                    // failed, its reason in its raw record, and the run goes on.
                    let attempt =
                        self.measure(spec, &limited, &at, root.as_deref(), log.as_deref(), trace.as_deref());
                    let (values, record) = match attempt {
                        Ok(measured) => measured,
                        Err(e) => failed_record(&limited, &at, &format!("{e:#}"), Value::Null),
                    };
                    if let Some(why) = record["failure"].as_str() {
                        progress(&format!(
                            "modus lab: {} at {}: failed: {why}",
                            server.name,
                            at.label(&table)
                        ));
                    }
                    std::fs::write(&raw, serde_json::to_string_pretty(&record)?)?;
                    measured += 1;
                    values
                }
            };
            let point = Point { server: server.name.clone(), at: p.coords(spec), repeat: p.repeat, values };
            let left = plan.len() - i - 1;
            let eta =
                if measured > 0 { started.elapsed() / measured as u32 * left as u32 } else { Duration::ZERO };
            let measured = if crate::results::failed(&point) {
                "FAILED (nothing measured; the reason is in its raw record)".to_string()
            } else {
                format!(
                    "{:.0} req/s, p99 {:.2} ms",
                    point.get("throughput").unwrap_or(0.0),
                    point.get("p99").unwrap_or(0.0)
                )
            };
            progress(&format!(
                "[{}/{}] {} c={}{} {}{}{}{} r{}: {measured} (left: {} points, ~{}s)",
                i + 1,
                plan.len(),
                point.server,
                point.at.clients,
                if point.at.rate > 0 { format!(" R={}/s", point.at.rate) } else { String::new() },
                point.at.path,
                if point.at.cpus.is_empty() { String::new() } else { format!(" cpus={}", point.at.cpus) },
                if point.at.memory.is_empty() {
                    String::new()
                } else {
                    format!(" memory={}", point.at.memory)
                },
                if point.at.connection.is_empty() {
                    String::new()
                } else {
                    format!(" {}", point.at.connection)
                },
                point.repeat,
                left,
                eta.as_secs()
            ));
            table.points.push(point);
            std::fs::write(self.out.join("points.csv"), table.to_csv())?;
        }
        Ok(table)
    }

    /// Writes what the load generator reads: each of the spec's mixes as
    /// `mixes/NAME.txt`, and the SURGE workload of `workload = "surge"`
    /// (made once, with the spec's seed: a resumed run keeps its own); and
    /// the CGI programs of `cgi = true`.
    fn prepare_requests(&self, spec: &Spec) -> Result<()> {
        if spec.cgi {
            self.write_cgi_bin()?;
        }
        if !spec.mixes.is_empty() {
            std::fs::create_dir_all(self.out.join("mixes"))?;
        }
        for (name, lines) in &spec.mixes {
            std::fs::write(self.out.join("mixes").join(format!("{name}.txt")), lines.join("\n") + "\n")?;
        }
        match spec.workload.as_deref() {
            Some("surge") => self.prepare_surge(spec)?,
            Some(dir) if spec.sweep.rates.is_empty() => {
                // A stream of its own: the closed loop puts a user per
                // connection, and `modus load` refuses more connections.
                let stream = Path::new(dir).join(load::surge::STREAM_FILE);
                let text = std::fs::read_to_string(&stream)
                    .with_context(|| format!("reading {}", stream.display()))?;
                let users = text
                    .lines()
                    .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                    .filter_map(|l| load::surge::StreamEntry::parse(l).ok())
                    .map(|e| e.user as usize + 1)
                    .max()
                    .unwrap_or(0);
                if let Some(too_many) = spec.sweep.clients.iter().find(|c| **c > users) {
                    bail!(
                        "workload {dir}: its stream has {users} users, and a point asks for {too_many} clients:                          each client is one of its users (make one with `modus workload surge --users                          {too_many}`, or use workload = \"surge\", which makes a stream per point)"
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `workload = "surge"`: the documents once (`surge/docs`, the spec's
    /// seed), and for every client count N a stream of N users over them
    /// (`surge-N/stream.txt`), long enough that no user runs out of
    /// requests within a point (the load also repeats a stream that ends).
    /// A resumed run keeps what it made.
    fn prepare_surge(&self, spec: &Spec) -> Result<()> {
        use load::surge::{generate_documents, generate_stream, SurgeParams, MANIFEST_FILE, STREAM_FILE};
        let base = SurgeParams { seed: spec.seed, ..SurgeParams::default() };
        let docs = self.out.join("surge");
        if !docs.join(MANIFEST_FILE).exists() {
            // The stream made beside them is not used: a small one.
            let params = SurgeParams { requests: base.files, users: 1, ..base.clone() };
            generate_documents(&params, &docs).context("making the SURGE documents")?;
        }
        // Virtual seconds each user's stream must cover: the point, twice.
        let needed = 2.0 * (spec.warmup.0 + spec.duration.0).as_secs_f64();
        let mut counts = spec.sweep.clients.clone();
        counts.sort_unstable();
        counts.dedup();
        for users in counts {
            let dir = self.surge_stream(users);
            if dir.join(STREAM_FILE).exists() {
                continue;
            }
            // About 50 requests a user (SURGE users ask for one every few
            // seconds), doubled until the stream's span covers the point.
            let mut requests = (users * 50).max(10_000);
            loop {
                let params = SurgeParams { users, requests, ..base.clone() };
                let manifest = generate_stream(&params, &dir)
                    .with_context(|| format!("making the SURGE stream of {users} users"))?;
                let span = manifest["realised"]["stream_span_s"].as_f64().unwrap_or(0.0);
                if span >= needed || requests >= 1 << 22 {
                    break;
                }
                requests *= 2;
            }
        }
        Ok(())
    }

    /// The stream of `users` SURGE users of `workload = "surge"`.
    fn surge_stream(&self, users: usize) -> PathBuf {
        self.out.join(format!("surge-{users}"))
    }

    /// The `modus load --workload` directory of a point at `clients`: the
    /// spec's own, or the stream of that many users.
    fn stream(&self, spec: &Spec, clients: usize) -> Option<PathBuf> {
        match spec.workload.as_deref()? {
            "surge" => Some(self.surge_stream(clients)),
            dir => Some(PathBuf::from(dir)),
        }
    }

    /// `cgi-bin/`: the bundled programs `cgi-spin`, `cgi-echo` and
    /// `cgi-env` beside the modus binary, copied (so Apache's www-data
    /// children may run them), or where they are not (an installed modus
    /// alone), scripts that run `modus demo-cgi NAME`.
    fn write_cgi_bin(&self) -> Result<()> {
        let dir = self.cgi_bin();
        std::fs::create_dir_all(&dir)?;
        for name in ["spin", "echo", "env"] {
            let target = dir.join(name);
            let lean = self.modus.with_file_name(format!("cgi-{name}"));
            if lean.is_file() {
                std::fs::copy(&lean, &target).with_context(|| format!("copying {}", lean.display()))?;
            } else {
                let modus = self.modus.display().to_string().replace('\'', "'\\''");
                std::fs::write(&target, format!("#!/bin/sh\nexec '{modus}' demo-cgi {name}\n"))?;
            }
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(())
    }

    fn cgi_bin(&self) -> PathBuf {
        self.out.join("cgi-bin")
    }

    /// The `modus workload surge` directory the spec replays, if any.
    fn workload(&self, spec: &Spec) -> Option<PathBuf> {
        match spec.workload.as_deref()? {
            "surge" => Some(self.out.join("surge")),
            dir => Some(PathBuf::from(dir)),
        }
    }

    /// The directory served, made in the results directory for `fixed`;
    /// `None` for the embedded demo site.
    fn docroot(&self, spec: &Spec) -> Result<Option<PathBuf>> {
        match spec.docroot.as_str() {
            "demo" => Ok(None),
            "fixed" if spec.workload.is_some() => {
                let dir = self.workload(spec).unwrap_or_default().join("docs");
                if !dir.is_dir() {
                    bail!(
                        "workload {}: no docs/ (make one with modus workload surge --out DIR)",
                        dir.display()
                    );
                }
                Ok(Some(dir))
            }
            "fixed" => {
                let dir = self.out.join("docroot");
                load::surge::fixed(&dir, 1)?;
                Ok(Some(dir))
            }
            dir => {
                let dir = PathBuf::from(dir);
                if !dir.is_dir() {
                    bail!("docroot {} is not a directory", dir.display());
                }
                Ok(Some(dir))
            }
        }
    }

    /// Starts `server`: its backends (`modus serve`, or a peer from its
    /// configuration) on `cpus`, and its front, if any, on `front_cpus`.
    fn start(
        &self,
        spec: &Spec,
        server: &ServerSpec,
        cpus: Option<&str>,
        front_cpus: Option<&str>,
        root: Option<&Path>,
        log: Option<&Path>,
    ) -> Result<Running> {
        let mut parts = Vec::new();
        let mut remote = Vec::new();
        let mut backends: Vec<String> = Vec::new();
        for i in 0..server.backends {
            let name =
                if server.backends == 1 { server.name.clone() } else { format!("{}-{}", server.name, i + 1) };
            if let Some((hosts, url)) = self.hosts.as_ref().and_then(|h| Some((h, h.placement.backend(i)?))) {
                let started = hosts.start_backend(url, server, &name, root.is_some())?;
                backends.push(started.addr.clone());
                remote.push(started);
                continue;
            }
            let place = self.place(|net| net.backend(i));
            // Each backend its own log: `…-access.log`, `…-2-access.log`.
            let log = log.map(|l| match i {
                0 => l.to_path_buf(),
                i => l.with_file_name(
                    l.file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or("access.log")
                        .replace("-access.log", &format!("-{}-access.log", i + 1)),
                ),
            });
            let started = self.start_backend(spec, server, &name, cpus, place, root, log.as_deref())?;
            backends.push(started.addr.clone());
            parts.push(started);
        }
        let at = self.place(|net| net.front());
        let front_host = self.hosts.as_ref().and_then(|h| Some((h, h.placement.front.as_ref()?)));
        let front = match server.front.as_deref() {
            None => None,
            Some("direct") if front_host.is_some() => {
                let (hosts, url) = front_host.expect("checked");
                let started = hosts.start_front(url, server, &backends)?;
                let addr = started.addr.clone();
                remote.insert(0, started.in_front());
                return Ok(Running { servers: parts, remote, addr });
            }
            Some("direct") => {
                let mut direct = pinned(&self.modus, front_cpus, at.ns);
                direct.args(["direct", "--listen", &format!("{}:0", at.ip)]);
                for b in &backends {
                    direct.args(["--backend", b]);
                }
                direct.args(&server.front_args);
                Some(Server::start(direct).context("starting modus direct")?.in_front())
            }
            Some(_) => {
                let bin =
                    crate::peers::binary("haproxy").ok_or_else(|| anyhow!("haproxy is not installed"))?;
                let dir = self.out.join("peers").join(format!("{}-haproxy", server.name));
                std::fs::create_dir_all(&dir)?;
                let port = free_port()?;
                let conf = dir.join("haproxy.cfg");
                let text = crate::peers::haproxy_config(&dir, at.ip, port, &backends, &server.front_args);
                std::fs::write(&conf, text)?;
                crate::peers::check("haproxy", &bin, &dir, &conf, at.ns)?;
                let mut command = pinned(&bin, front_cpus, at.ns);
                command.args(crate::peers::args("haproxy", &dir, &conf));
                Some(Server::start_peer(command, at.ip, port).context("starting haproxy")?.in_front())
            }
        };
        let addr = front.as_ref().map_or_else(|| backends[0].clone(), |f| f.addr.clone());
        // The front first: stopped first, it sends nothing more to the backends.
        let mut servers: Vec<Server> = front.into_iter().collect();
        servers.extend(parts);
        Ok(Running { servers, remote, addr })
    }

    /// One backend: `modus serve`, or a peer from its configuration in
    /// `peers/NAME/`; its access log to `log` if given, else none.
    #[allow(clippy::too_many_arguments)]
    fn start_backend(
        &self,
        spec: &Spec,
        server: &ServerSpec,
        name: &str,
        cpus: Option<&str>,
        at: Place,
        root: Option<&Path>,
        log: Option<&Path>,
    ) -> Result<Server> {
        let cgi = spec.cgi.then(|| self.cgi_bin());
        let cgroup = match server.memory {
            Some(limit) => {
                let hierarchy = crate::cgroup::memory().map_err(|e| anyhow!(e))?;
                Some(hierarchy.create(&format!("modus-lab-{}-{name}", std::process::id()), limit.0)?)
            }
            None => None,
        };
        let Some(peer) = server.peer.as_deref() else {
            let mut serve = pinned_in(&self.modus, cpus, at.ns, cgroup.as_ref());
            serve.arg("serve");
            if let Some(root) = root {
                serve.arg(root);
            }
            let listen = format!("{}:0", at.ip);
            serve.args(["--model", &server.model, "--listen", &listen, "--access-log"]);
            serve.arg(log.map_or_else(|| "off".into(), |l| l.as_os_str().to_owned()));
            if let Some(cgi) = &cgi {
                serve.arg("--cgi-dir").arg(cgi);
            }
            // The status listener, for the per-phase timing (`probe.rs`).
            if !server.args.iter().any(|a| a == "--admin" || a.starts_with("--admin=")) {
                serve.args(["--admin", &listen]);
            }
            if let Some(n) = server.max_clients {
                serve.args(["--max-clients", &n.to_string()]);
            }
            serve.args(&server.args);
            return Server::start(serve).map(|s| s.in_cgroup(cgroup));
        };
        let bin = crate::peers::binary(peer).ok_or_else(|| anyhow!("{peer} is not installed"))?;
        let root = root.ok_or_else(|| anyhow!("{peer} cannot serve the embedded demo site"))?;
        let dir = self.out.join("peers").join(name);
        std::fs::create_dir_all(&dir)?;
        let port = free_port()?;
        let conf = dir.join(format!("{peer}.conf"));
        let site = crate::peers::Site {
            docroot: root,
            cgi: cgi.as_deref(),
            max_clients: server.max_clients,
            access_log: log,
        };
        std::fs::write(&conf, crate::peers::config(peer, &dir, site, at.ip, port)?)?;
        crate::peers::prepare(peer, &dir)?;
        crate::peers::check(peer, &bin, &dir, &conf, at.ns)?;
        let mut command = pinned_in(&bin, cpus, at.ns, cgroup.as_ref());
        command.args(crate::peers::args(peer, &dir, &conf));
        Server::start_peer(command, at.ip, port).map(|s| s.in_cgroup(cgroup))
    }

    fn measure(
        &self,
        spec: &Spec,
        server: &ServerSpec,
        at: &Coords,
        root: Option<&Path>,
        log: Option<&Path>,
        trace: Option<&Path>,
    ) -> Result<(Vec<f64>, Value)> {
        let cpus = (!at.cpus.is_empty()).then_some(at.cpus.as_str());
        let load_cpus = spec.load_cpus.clone().or_else(|| other_cpus(cpus));
        let front_cpus = spec.front_cpus.clone().or_else(|| load_cpus.clone());
        if let (Some(_), Some(root)) = (server.memory, root) {
            // Its pages may be charged to an earlier point's cgroup, gone
            // now, or to none: on the disk, every point starts alike.
            crate::cgroup::drop_page_cache(root)
                .with_context(|| format!("dropping the page cache of {}", root.display()))?;
        }
        let mut running = self.start(spec, server, cpus, front_cpus.as_deref(), root, log)?;
        let mix = at.path.strip_prefix("mix:");
        let url = format!("http://{}{}", running.addr, if mix.is_some() { "/" } else { &at.path });
        let read_before = running.read_bytes();
        let status_before = running.statuses();
        let load_ns_place = self.place(|net| net.client()).ns;
        let wrk = spec.generator == Generator::Wrk;
        let wrk_command = |seconds| {
            let timeout = spec.timeout.map(|t| t.0);
            wrk::command(
                load_cpus.as_deref(),
                load_ns_place,
                &url,
                at.clients,
                seconds,
                at.connection == "close",
                timeout,
            )
        };
        let mut load = pinned(&self.modus, load_cpus.as_deref(), load_ns_place);
        load.args(["load", &url, "-c", &at.clients.to_string(), "--json"]);
        if self.network.is_some() || self.hosts.is_some() {
            load.arg("--allow-remote");
        }
        match spec.stream_rate.filter(|r| *r > 0.0) {
            // The workload's own arrival times, sped up to the point's rate.
            Some(recorded) if at.rate > 0 => {
                load.args(["--stream-times", &format!("{}", at.rate as f64 / recorded)]);
            }
            _ if at.rate > 0 => {
                load.args(["-R", &at.rate.to_string()]);
            }
            _ => {}
        }
        if at.connection == "close" {
            load.arg("--close");
        }
        if let Some(timeout) = spec.timeout {
            load.args(["--timeout", &timeout.to_string()]);
        }
        if let Some(name) = mix {
            load.arg("--mix").arg(self.out.join("mixes").join(format!("{name}.txt")));
        } else if let Some(mix) = &spec.mix {
            load.args(["--mix", mix]);
        }
        if let Some(stream) = self.stream(spec, at.clients) {
            load.arg("--workload").arg(stream);
            // At its own times the stream is not repeated (modus load
            // refuses both): a point replays its first DURATION × speed.
            if spec.stream_rate.is_none() || at.rate == 0 {
                load.arg("--repeat-stream");
            }
            // Each client a SURGE user with its OFF times (closed loop).
            if spec.workload.as_deref() == Some("surge") && spec.surge_think && at.rate == 0 {
                load.arg("--stream-think");
            }
        }
        load.args([
            "-d",
            &units::Dur(spec.duration.0).to_string(),
            "--warmup",
            &units::Dur(spec.warmup.0).to_string(),
        ]);
        if wrk {
            // Its warm-up is a run of its own, before the measured window.
            if !spec.warmup.0.is_zero() {
                wrk::warm_up(wrk_command(spec.warmup.0))?;
            }
            load = wrk_command(spec.duration.0);
        }
        // The window the machine's business is measured over: the load's run.
        let window = crate::busy::Snapshot::take();
        let before = running.cpu_ns();
        let hosts_before = self.hosts.as_ref().map(placed::Hosts::sample_servers);
        let mut host_records = Vec::new();
        let generators = self.hosts.as_ref().filter(|h| !h.placement.load.is_empty());
        let (out, load_ns) = match generators {
            Some(hosts) => {
                let tag = placed::raw_tag(server, at);
                let (out, records) =
                    hosts.run_load_command(&load, &self.out, self.workload(spec).as_deref(), &tag)?;
                host_records = records;
                (out, 0)
            }
            None => run_load(load)?,
        };
        let mut after = running.cpu_ns();
        let mut server_cores = None;
        if let (Some(hosts), Some(before_samples)) = (&self.hosts, hosts_before) {
            let admins = running.remote_admins();
            let (records, server_ns) =
                placed::server_records(&before_samples, &hosts.sample_servers(), &admins);
            host_records.extend(records);
            // A server on a host of its own: its CPU is its host's.
            if let Some((ns, cores)) = server_ns.filter(|_| !running.remote.is_empty()) {
                after = before + ns;
                server_cores = Some(cores);
            }
        }
        let window = window.until(&crate::busy::Snapshot::take(), after.saturating_sub(before) + load_ns);
        let read_after = running.read_bytes();
        let pss = running.pss_kib();
        let report: Result<Value> = if wrk {
            wrk::report(&String::from_utf8_lossy(&out.stdout), at.clients, load_ns, at.connection == "close")
        } else {
            serde_json::from_slice(&out.stdout).map_err(|e| {
                anyhow!("modus load gave no report ({e}): {}", String::from_utf8_lossy(&out.stderr))
            })
        };
        let requests = report.as_ref().map_or(0.0, |r| {
            r["requests"].as_f64().unwrap_or(0.0) + r["warmup_requests"].as_f64().unwrap_or(0.0)
        });
        let statuses =
            status_before.and_then(|before| Some((running.statuses_after(&before, requests)?, before)));
        let phases = statuses
            .as_ref()
            .and_then(|(after, before)| Some(timing(after)?.per_request_since(&timing(before)?)));
        let (workers, spread) = statuses.as_ref().map_or((f64::NAN, f64::NAN), |(after, before)| {
            Scoreboard::from_statuses(after).spread_since(&Scoreboard::from_statuses(before))
        });
        let cgroups = running.cgroups();
        let remote_backends = running.remote.iter().any(|s| !s.front);
        running.stop();
        let report = report?;
        let answered_none = report["requests"].as_u64() == Some(0);
        if answered_none && report["waiting_at_end"].as_u64().unwrap_or(0) == 0 {
            // Not a measured zero: nothing was measured.
            let why = report["failure"].as_str().unwrap_or("no request got a response").to_string();
            return Ok(failed_record(server, at, &format!("modus load: {why}"), report));
        }
        // Requests were waiting and none was answered in the window: a true
        // zero of throughput, and no latency to speak of (NaN, not 0).
        let latency_ms = |q: &str| {
            if answered_none {
                f64::NAN
            } else {
                report["latency_us"][q].as_f64().unwrap_or(0.0) / 1e3
            }
        };
        let seconds = report["duration_s"].as_f64().filter(|d| *d > 0.0).unwrap_or(1.0);
        let count = |class: &dyn Fn(&str) -> bool| -> f64 {
            let status = report["status"].as_object().into_iter().flatten();
            status.filter(|(code, _)| class(code)).filter_map(|(_, n)| n.as_f64()).fold(0.0, |a, n| a + n)
        };
        let answered = |class: &dyn Fn(&str) -> bool| count(class) / seconds;
        let cpu_us = (after.saturating_sub(before)) as f64 / 1e3;
        let mut values = vec![
            report["throughput_rps"].as_f64().unwrap_or(0.0),
            latency_ms("mean"),
            latency_ms("p50"),
            latency_ms("p99"),
            report["errors"].as_f64().unwrap_or(0.0),
            if requests > 0.0 { cpu_us / requests } else { 0.0 },
            // A backend on a host: its memory and disk reads are not read
            // here (its host's memory is in the record's `hosts`).
            if remote_backends { f64::NAN } else { pss as f64 },
            if report["generator_fell_behind"] == true { 1.0 } else { 0.0 },
            answered(&|code| code.starts_with('2')),
            answered(&|code| code == "503"),
            if remote_backends {
                f64::NAN
            } else if requests > 0.0 {
                read_after.saturating_sub(read_before) as f64 / requests
            } else {
                0.0
            },
        ];
        let mut phases = phases.unwrap_or_else(|| vec![f64::NAN; 2 + PHASES.len()]);
        // `read` is timed from the head's first byte *seen* — stamped after
        // the read that brought it returned — to the head's end: a head
        // that arrives in one segment (every one `modus load` sends) reads
        // 0 by construction, in every model. The receive itself is not in
        // it: an event loop's `recv` falls in the idle `wait` before the
        // first stamp, and a blocking thread's read is its wait for the
        // client, inseparable from it. A sum of exactly 0 therefore says
        // "not separated", not "took no time": NaN (an empty cell), never
        // a measured zero. Heads that did arrive in pieces keep their time.
        if phases[2] == 0.0 {
            phases[2] = f64::NAN;
        }
        values.extend(phases);
        let [p50_2xx, p99_2xx] = latency_2xx_ms(&report);
        values.extend([
            p50_2xx,
            p99_2xx,
            count(&|code| code.starts_with('5') && code != "503"),
            spread,
            workers,
        ]);
        values.extend([report["users_active"].as_f64().unwrap_or(f64::NAN), held_load(&report, at), 0.0]);
        // Over the CPUs each is pinned to: the server's (and its front's), the generator's.
        let mut server_set = crate::busy::cpu_set(cpus);
        if server.front.is_some() {
            server_set.extend(crate::busy::cpu_set(front_cpus.as_deref()));
        }
        let load_set = crate::busy::cpu_set(load_cpus.as_deref());
        if let Some(cores) = server_cores {
            server_set = (0..cores).collect();
        }
        // Generators on hosts of their own: the busiest host's CPU.
        let remote_load_pct = host_records
            .iter()
            .filter(|h| h["role"] == "load")
            .filter_map(|h| h["cpu_pct"].as_f64())
            .reduce(f64::max);
        let shaped = spec.network.as_ref().and_then(|n| n.rate.as_deref()).filter(|_| self.network.is_some());
        let link = shaped
            .and_then(crate::busy::tc_rate_bytes)
            .map_or(f64::NAN, |rate| report["bytes_per_s"].as_f64().map_or(f64::NAN, |b| b / rate * 100.0));
        values.extend([
            crate::busy::pct(after.saturating_sub(before), window.seconds, server_set.len()),
            remote_load_pct.unwrap_or_else(|| crate::busy::pct(load_ns, window.seconds, load_set.len())),
            window.other_cpu_pct,
            window.disk_util_pct,
            link,
        ]);
        values.extend(crate::trace::metrics_of(trace));
        values.push(report["starved"].as_f64().unwrap_or(f64::NAN));
        debug_assert_eq!(values.len(), METRICS.len());
        let named: serde_json::Map<String, Value> =
            METRICS.iter().zip(&values).map(|((m, _), v)| (m.to_string(), json!(v))).collect();
        let record = json!({
            "point": named, "server": server.name, "clients": at.clients, "rate": at.rate, "path": at.path, "connection": at.connection,
            "server_cpus": at.cpus, "load_cpus": load_cpus, "front_cpus": server.front.as_ref().and(front_cpus),
            "memory_limit": server.memory.map(|m| m.0), "cgroups": cgroups,
            "disk_read_bytes": read_after.saturating_sub(read_before),
            "load": report,
        });
        let mut record = record;
        if !host_records.is_empty() {
            record["hosts"] = json!(host_records);
        }
        Ok((values, record))
    }
}

/// Runs `modus load` to its end: its output, and its CPU time (read at
/// its exit, before it is reaped).
fn run_load(mut load: Command) -> Result<(std::process::Output, u64)> {
    use std::io::Read;
    let mut child = load
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running modus load")?;
    let (mut stdout, mut stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let errors = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let mut out = Vec::new();
    let read = stdout.read_to_end(&mut out);
    let cpu_ns = crate::busy::cpu_ns_at_exit(child.id());
    let status = child.wait().context("waiting for modus load")?;
    read.context("reading modus load's report")?;
    let stderr = errors.join().unwrap_or_default();
    Ok((std::process::Output { status, stdout: out, stderr }, cpu_ns))
}

/// The load a point held over the load it names (the `held_load`
/// metric): open loop, the throughput over the rate offered; closed loop,
/// the users held by Little's law (`modus load`'s `held_users`:
/// throughput × (mean response time + mean think time)) over the clients.
/// NaN from a report of a version before `held_users`.
pub fn held_load(report: &Value, at: &Coords) -> f64 {
    if at.rate > 0 {
        report["throughput_rps"].as_f64().map_or(f64::NAN, |t| t / at.rate as f64)
    } else {
        report["held_users"].as_f64().map_or(f64::NAN, |h| h / at.clients.max(1) as f64)
    }
}

/// A point that measured nothing: `failed` 1, its other metrics NaN
/// (never a measured zero), and why, with the load report if there is one.
fn failed_record(server: &ServerSpec, at: &Coords, why: &str, load: Value) -> (Vec<f64>, Value) {
    let values: Vec<f64> = METRICS.iter().map(|(m, _)| if *m == "failed" { 1.0 } else { f64::NAN }).collect();
    let named: serde_json::Map<String, Value> =
        METRICS.iter().zip(&values).map(|((m, _), v)| (m.to_string(), json!(v))).collect();
    let record = json!({
        "point": named, "server": server.name, "clients": at.clients, "rate": at.rate, "path": at.path,
        "connection": at.connection, "server_cpus": at.cpus, "failure": why, "load": load,
    });
    (values, record)
}

/// Where a point's server writes its access log (`access-log = true`):
/// beside its raw record, `raw/POINT-access.log`.
fn access_log_path(raw: &Path) -> PathBuf {
    let stem = raw.file_stem().and_then(|s| s.to_str()).unwrap_or("point");
    // Absolute: a peer resolves a relative path against its own root.
    let raw = std::path::absolute(raw).unwrap_or_else(|_| raw.to_path_buf());
    raw.with_file_name(format!("{stem}-access.log"))
}

/// The median and 99th percentile (ms) of a `modus load` report's 2xx
/// answers; NaN when none was 2xx, or the report is of a version before
/// `latency_2xx_us`.
fn latency_2xx_ms(report: &Value) -> [f64; 2] {
    let ok = &report["latency_2xx_us"];
    let measured = ok["max"].as_f64().is_some_and(|max| max > 0.0);
    ["p50", "p99"].map(|q| ok[q].as_f64().filter(|_| measured).map_or(f64::NAN, |us| us / 1e3))
}

/// The backends' timing totals together; `None` when one takes no
/// timestamps (`--no-timing`).
fn timing(statuses: &[Value]) -> Option<Timing> {
    statuses.iter().map(Timing::from_status).try_fold(Timing::default(), |sum, t| Some(sum.plus(&t?)))
}

/// The metrics of a point already measured, from its raw record.
fn read_raw(path: &Path) -> Option<Vec<f64>> {
    let record: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    // A metric the server had not (a peer's phases) is null; one missing, not yet measured.
    let point = record["point"].as_object()?;
    METRICS.iter().map(|(m, _)| point.get(*m).map(|v| v.as_f64().unwrap_or(f64::NAN))).collect()
}

/// The CPUs not in `list` (a `taskset -c` list of single CPUs and ranges).
pub fn other_cpus(list: Option<&str>) -> Option<String> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut taken = vec![false; n];
    for part in list?.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        taken.iter_mut().take(b.saturating_add(1)).skip(a).for_each(|t| *t = true);
    }
    let rest: Vec<String> = (0..n).filter(|c| !taken[*c]).map(|c| c.to_string()).collect();
    (!rest.is_empty()).then(|| rest.join(","))
}

/// A port nobody listens on now (a peer is told its port; it cannot pick one).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub mod placed;
mod process;
mod wrk;

use process::{pinned, pinned_in, Running, Server};

#[cfg(test)]
mod tests;
