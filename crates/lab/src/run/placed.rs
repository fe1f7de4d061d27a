//! The roles of `[hosts]` for the runner: each host connected once (its
//! facts for the report), the modus binary, the docroot and what the
//! generators read copied there, servers and fronts started and stopped
//! there by PID, the generators run there in parallel — the users or
//! the rate split between them — and merged (`merge.rs`), and each host's
//! CPU and memory over the point.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::hosts::{Placement, Sample, SshUrl};
use crate::merge::{merge_reports, split, Generated};
use crate::remote::{quote, Remote};
use crate::spec::{ServerSpec, Spec};

/// The hosts of a run, connected; their lab directories removed when dropped.
pub struct Hosts {
    pub placement: Placement,
    remotes: Vec<(Arc<Remote>, Vec<&'static str>)>,
}

impl std::fmt::Debug for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosts").field("placement", &self.placement).finish()
    }
}

/// Why `server` cannot run where `[hosts]` puts it, if it cannot.
pub fn unavailable(spec: &Spec, server: &ServerSpec) -> Option<String> {
    let hosts = spec.hosts.as_ref()?;
    let remote_backends = hosts.server.is_some() || !hosts.backends.is_empty();
    if remote_backends {
        let why = if server.peer.is_some() {
            "a peer on a host of [hosts] is not supported yet (modus serve only)"
        } else if server.memory.is_some() || !spec.sweep.memory.is_empty() {
            "a memory limit on a host of [hosts] is not supported yet"
        } else if spec.cgi {
            "CGI on a host of [hosts] is not supported yet"
        } else if spec.access_log {
            "access logs on a host of [hosts] are not supported yet"
        } else {
            ""
        };
        if !why.is_empty() {
            return Some(why.into());
        }
    }
    if hosts.front.is_some() && server.front.as_deref().is_some_and(|f| f != "direct") {
        return Some("only a `direct` front runs on a host of [hosts]".into());
    }
    if !hosts.load.is_empty() {
        // The generators must reach what they load: not the lab's loopback.
        let target_remote = if server.front.is_some() { hosts.front.is_some() } else { remote_backends };
        if !target_remote {
            return Some(
                "its generators are on hosts of [hosts] but what they load runs on the lab's loopback: \
                 place the server (or its front) on a host too"
                    .into(),
            );
        }
    }
    None
}

impl Hosts {
    /// Connects to every host of `placement` and makes its lab directory.
    pub fn connect(placement: Placement) -> Result<Hosts> {
        let id = std::process::id();
        let mut remotes = Vec::new();
        for (i, (url, roles)) in placement.roles().into_iter().enumerate() {
            // One directory per host and run: hosts may share a file system (namespaces).
            let dir = format!("/tmp/modus-lab-{id}-h{i}");
            let remote = Remote::connect(&url, &placement.ssh_options, &dir)?;
            remotes.push((Arc::new(remote), roles));
        }
        Ok(Hosts { placement, remotes })
    }

    /// The connected host of `url`.
    pub fn remote(&self, url: &SshUrl) -> Arc<Remote> {
        let found = self.remotes.iter().find(|(r, _)| &r.url == url);
        Arc::clone(&found.expect("every host of the placement is connected").0)
    }

    /// Each host, its roles, address and facts (for `meta.json`).
    pub fn meta(&self) -> Value {
        self.remotes
            .iter()
            .map(
                |(r, roles)| json!({"host": r.url.to_string(), "roles": roles, "ip": r.ip, "facts": r.facts}),
            )
            .collect()
    }

    /// Copies to each host what it needs: the modus binary; the docroot
    /// to a server's; the mixes and streams to a generator's.
    pub fn prepare(
        &self,
        modus: &Path,
        root: Option<&Path>,
        out: &Path,
        workload: Option<&Path>,
    ) -> Result<()> {
        for (r, roles) in &self.remotes {
            r.run(&format!("mkdir -p {}", quote(&r.path("out"))))?;
            r.copy(modus, "modus")?;
            if let Some(root) = root.filter(|_| roles.iter().any(|x| *x == "server" || *x == "backend")) {
                r.copy(root, "docroot")?;
            }
            if !roles.contains(&"load") {
                continue;
            }
            for entry in std::fs::read_dir(out)?.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.path().is_dir() && (name == "mixes" || name.starts_with("surge-")) {
                    r.copy(&entry.path(), &format!("out/{name}"))?;
                }
            }
            if let Some(w) = workload.filter(|w| !w.starts_with(out)) {
                r.copy(w, "workload")?;
            }
        }
        Ok(())
    }

    /// A local path among `args` as it is on `r` (see [`prepare`](Self::prepare)).
    fn translate(r: &Remote, arg: &str, out: &Path, workload: Option<&Path>) -> String {
        let out = out.display().to_string();
        if let Some(rest) = arg.strip_prefix(&out) {
            return format!("{}{rest}", r.path("out"));
        }
        if let Some(rest) = workload.and_then(|w| arg.strip_prefix(&w.display().to_string())) {
            return format!("{}{rest}", r.path("workload"));
        }
        arg.to_string()
    }

    /// Starts `modus ARGS` (`serve` or `direct`) on `url`, listening on its address.
    pub fn start(&self, url: &SshUrl, name: &str, args: Vec<String>) -> Result<RemoteServer> {
        let remote = self.remote(url);
        let mut argv = vec![remote.path("modus")];
        // An address to listen on: an IPv6 one in brackets, before its port.
        let ip = if remote.ip.contains(':') { format!("[{}]", remote.ip) } else { remote.ip.clone() };
        argv.extend(args.into_iter().map(|a| a.replace("{ip}", &ip)));
        RemoteServer::start(remote, name, argv)
    }

    /// Starts `modus serve` for `server` on `url`: the docroot copied
    /// there (`root`; else the embedded demo site), its status listener on.
    pub fn start_backend(
        &self,
        url: &SshUrl,
        server: &ServerSpec,
        name: &str,
        root: bool,
    ) -> Result<RemoteServer> {
        let mut args = vec!["serve".to_string()];
        if root {
            args.push(self.docroot(url));
        }
        args.extend(
            ["--model", &server.model, "--listen", "{ip}:0", "--access-log", "off"].map(String::from),
        );
        if !server.args.iter().any(|a| a == "--admin" || a.starts_with("--admin=")) {
            args.extend(["--admin".into(), "{ip}:0".into()]);
        }
        if let Some(n) = server.max_clients {
            args.extend(["--max-clients".into(), n.to_string()]);
        }
        args.extend(server.args.iter().cloned());
        self.start(url, name, args).with_context(|| format!("starting {name} on {url}"))
    }

    /// Starts `modus direct` before `backends` on `url`, as a front.
    pub fn start_front(
        &self,
        url: &SshUrl,
        server: &ServerSpec,
        backends: &[String],
    ) -> Result<RemoteServer> {
        let mut args = vec!["direct".to_string(), "--listen".into(), "{ip}:0".into()];
        for b in backends {
            args.extend(["--backend".into(), b.clone()]);
        }
        args.extend(server.front_args.iter().cloned());
        let name = format!("{}-front", server.name);
        Ok(self.start(url, &name, args).with_context(|| format!("starting {name} on {url}"))?.in_front())
    }

    /// [`run_load`](Self::run_load) of the local `modus load` command
    /// `load` (its arguments after `load`): the merged report as that
    /// command's output would have been, and the generator hosts' records.
    pub fn run_load_command(
        &self,
        load: &std::process::Command,
        out: &Path,
        workload: Option<&Path>,
        tag: &str,
    ) -> Result<(std::process::Output, Vec<Value>)> {
        let args: Vec<String> = load.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let args = &args[args.iter().position(|a| a == "load").map_or(0, |i| i + 1)..];
        let (report, records) = self.run_load(args, out, workload, tag)?;
        let stdout = serde_json::to_vec(&report)?;
        let status = std::process::ExitStatus::default();
        Ok((std::process::Output { status, stdout, stderr: Vec::new() }, records))
    }

    /// The docroot on a server's host.
    pub fn docroot(&self, url: &SshUrl) -> String {
        self.remote(url).path("docroot")
    }

    /// The hosts of the servers and fronts, sampled now.
    pub fn sample_servers(&self) -> Vec<(Arc<Remote>, &'static str, Option<Sample>)> {
        let servers = self.remotes.iter().filter(|(_, roles)| roles.iter().any(|x| *x != "load"));
        servers
            .map(|(r, roles)| {
                let role = roles.iter().copied().find(|x| *x != "load").unwrap_or("server");
                (Arc::clone(r), role, r.sample().ok())
            })
            .collect()
    }

    /// Runs `modus load ARGS` on every generator host at once, each with
    /// its share of `-c` (closed loop: the users) and `-R` (open loop:
    /// the rate), and merges them: the merged report, and each host's
    /// record (its CPU busy over its run, memory, its own count).
    pub fn run_load(
        &self,
        args: &[String],
        out: &Path,
        workload: Option<&Path>,
        tag: &str,
    ) -> Result<(Value, Vec<Value>)> {
        let shares = generator_args(args, self.placement.load.len());
        let runs: Vec<Result<(Generated, Value)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .placement
                .load
                .iter()
                .zip(shares)
                .filter_map(|(url, argv)| Some((url, argv?)))
                .map(|(url, argv)| {
                    let remote = self.remote(url);
                    let argv: Vec<String> =
                        argv.iter().map(|a| Self::translate(&remote, a, out, workload)).collect();
                    scope.spawn(move || generate(&remote, argv, tag))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a generator thread panicked"))))
                .collect()
        });
        let mut generated = Vec::new();
        let mut records = Vec::new();
        for run in runs {
            let (g, record) = run?;
            generated.push(g);
            records.push(record);
        }
        Ok((merge_reports(&generated)?, records))
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for (r, _) in &self.remotes {
            r.clean();
        }
    }
}

/// A point's name among the generators' files on their hosts.
pub fn raw_tag(server: &ServerSpec, at: &crate::results::Coords) -> String {
    let mut tag = format!("{}-c{}-q{}-{}", server.name, at.clients, at.rate, at.connection);
    tag.retain(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    tag
}

/// Every point's raw record in `out/raw/`.
pub fn raw_records(out: &Path) -> Vec<Value> {
    let Ok(dir) = std::fs::read_dir(out.join("raw")) else { return Vec::new() };
    dir.flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok())
        .collect()
}

/// `modus load ARGS` for each of `n` generators: `-c` (the connections,
/// in the closed loop the users) split as evenly as whole numbers allow,
/// `-R` (the rate) split evenly between those with a connection; `None`
/// for a generator left without one.
fn generator_args(args: &[String], n: usize) -> Vec<Option<Vec<String>>> {
    let value_of = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let clients: usize = value_of("-c").and_then(|c| c.parse().ok()).unwrap_or(1);
    let rate: Option<f64> = value_of("-R").and_then(|r| r.parse().ok());
    let shares = split(clients, n);
    let used = shares.iter().filter(|s| **s > 0).count().max(1) as f64;
    shares
        .into_iter()
        .map(|c| {
            (c > 0).then(|| {
                let mut argv = args.to_vec();
                for i in 0..argv.len().saturating_sub(1) {
                    match argv[i].as_str() {
                        "-c" => argv[i + 1] = c.to_string(),
                        "-R" => argv[i + 1] = (rate.unwrap_or(0.0) / used).to_string(),
                        _ => {}
                    }
                }
                argv
            })
        })
        .collect()
}

/// One generator's run on `remote`: its report and histograms, and its
/// host's record.
fn generate(remote: &Remote, mut argv: Vec<String>, tag: &str) -> Result<(Generated, Value)> {
    let hist = remote.path(&format!("out/{tag}.hist"));
    argv.extend(["--histogram-out".to_string(), hist.clone()]);
    let json = remote.path(&format!("out/{tag}.json"));
    let err = remote.path(&format!("out/{tag}.err"));
    let argv: Vec<String> = argv.iter().map(|a| quote(a)).collect();
    let script = format!(
        "cd {dir} && a=$(head -n1 /proc/stat); {modus} load {args} > {json} 2> {err}; rc=$?; \
         b=$(head -n1 /proc/stat); echo \"$a\"; echo \"$b\"; \
         grep -E '^(MemTotal|MemAvailable):' /proc/meminfo; echo \"rc=$rc\"; cat {json}; echo; cat {err} >&2",
        dir = quote(&remote.dir),
        modus = quote(&remote.path("modus")),
        args = argv.join(" "),
        json = quote(&json),
        err = quote(&err),
    );
    let out = remote.command(&script).stdin(std::process::Stdio::null()).output().context("running ssh")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (a, b) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
    let mem: Vec<&str> = lines.by_ref().take(2).collect();
    let before = Sample::parse(&format!("{a}\n{}", mem.join("\n")));
    let after = Sample::parse(b);
    let rc = lines.next().unwrap_or_default().to_string();
    let report: Value =
        lines.find(|l| l.starts_with('{')).and_then(|l| serde_json::from_str(l).ok()).ok_or_else(|| {
            anyhow!(
                "{}: modus load gave no report ({rc}): {}",
                remote.url,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
    let histograms = load::report::read_histograms(&remote.read(&hist)?)
        .with_context(|| format!("{}: reading {hist}", remote.url))?;
    let cpu = match (before, after) {
        (Some(a), Some(b)) => a.busy_pct(&b),
        _ => f64::NAN,
    };
    let record = json!({
        "role": "load", "host": remote.url.to_string(), "cpu_pct": cpu,
        "memory_used_kib": before.map(|s| s.mem_used_kib()),
        "requests": report["requests"], "histogram_count": histograms[0].len(),
        "connections": argv.iter().position(|a| a == "-c").and_then(|i| argv.get(i + 1)),
    });
    Ok((Generated { host: remote.url.to_string(), report, histograms }, record))
}

/// The records of the server hosts over a load: CPU busy between the two
/// samples, memory used at the end, and a modus server's `/status.json`.
pub fn server_records(
    before: &[(Arc<Remote>, &'static str, Option<Sample>)],
    after: &[(Arc<Remote>, &'static str, Option<Sample>)],
    admin: &[(String, String)],
) -> (Vec<Value>, Option<(u64, usize)>) {
    let mut server_ns = None;
    let records = before
        .iter()
        .zip(after)
        .map(|((r, role, a), (_, _, b))| {
            let (cpu, ns) = match (a, b) {
                (Some(a), Some(b)) => (a.busy_pct(b), Some(a.busy_ns(b))),
                _ => (f64::NAN, None),
            };
            if *role != "front" {
                if let Some(ns) = ns {
                    let cores = r.facts["cores"].as_u64().unwrap_or(1) as usize;
                    let (sum, n) = server_ns.unwrap_or((0, 0));
                    server_ns = Some((sum + ns, n + cores));
                }
            }
            let host = r.url.to_string();
            let status =
                admin.iter().filter(|(h, _)| *h == host).find_map(|(_, a)| crate::probe::status(a).ok());
            json!({"role": role, "host": host, "cpu_pct": cpu,
                   "memory_used_kib": b.map(|s| s.mem_used_kib()), "status": status})
        })
        .collect();
    (records, server_ns)
}

/// A `modus serve` or `modus direct` on a host, stopped by PID when dropped.
pub struct RemoteServer {
    remote: Arc<Remote>,
    pid: u32,
    pub addr: String,
    pub admin: Option<String>,
    pub front: bool,
    stopped: bool,
}

impl RemoteServer {
    fn start(remote: Arc<Remote>, name: &str, argv: Vec<String>) -> Result<RemoteServer> {
        let pid = remote.spawn(name, &argv)?;
        let first = match remote.first_line(name, pid, Duration::from_secs(30)) {
            Ok(first) => first,
            Err(e) => {
                let _ = remote.stop(pid);
                return Err(e);
            }
        };
        let mut server =
            RemoteServer { remote, pid, addr: String::new(), admin: None, front: false, stopped: false };
        let Some(addr) = first.strip_prefix("listening on ").and_then(|rest| rest.split(' ').next()) else {
            server.stop();
            bail!("{}: unexpected first line {first:?}", server.remote.url);
        };
        server.addr = addr.to_string();
        server.admin = first.split(' ').find_map(|w| w.strip_prefix("admin=")).map(str::to_string);
        Ok(server)
    }

    /// The host it runs on.
    pub fn host(&self) -> String {
        self.remote.url.to_string()
    }

    pub fn in_front(mut self) -> RemoteServer {
        self.front = true;
        self
    }

    pub fn stop(&mut self) {
        if !std::mem::replace(&mut self.stopped, true) {
            let _ = self.remote.stop(self.pid);
        }
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn generators_split_the_users_or_the_rate() {
        let closed = generator_args(&words("http://h/ -c 5 --json -d 2s"), 2);
        assert_eq!(closed[0].as_deref(), Some(&words("http://h/ -c 3 --json -d 2s")[..]));
        assert_eq!(closed[1].as_deref(), Some(&words("http://h/ -c 2 --json -d 2s")[..]));
        let open = generator_args(&words("http://h/ -c 400 --json -R 300"), 3);
        for argv in &open {
            let argv = argv.as_ref().unwrap();
            assert_eq!(argv[argv.len() - 1], "100", "{argv:?}");
        }
        // One connection, two generators: the second sits out, the first takes the whole rate.
        let one = generator_args(&words("http://h/ -c 1 -R 50"), 2);
        assert_eq!(one[0].as_deref(), Some(&words("http://h/ -c 1 -R 50")[..]));
        assert!(one[1].is_none());
    }
}
