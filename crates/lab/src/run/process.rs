//! The processes of a point: a server (or a peer, or a front) started,
//! found listening and stopped by PID, and the commands that pin a process
//! to its CPUs, namespace and memory cgroup.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};

use crate::cgroup::Cgroup;
use crate::probe::{tree_cpu_ns, tree_pss_kib, tree_read_bytes, Timing};

/// `program` under `taskset -c CPUS` when CPUs are given and taskset
/// exists, in network namespace `ns` when given (`ip netns exec` and
/// taskset exec it: the child's PID is the program's).
pub(super) fn pinned(program: &Path, cpus: Option<&str>, ns: Option<&str>) -> Command {
    pinned_in(program, cpus, ns, None)
}

/// [`pinned`], and in `cgroup` from its start when given.
pub(super) fn pinned_in(
    program: &Path,
    cpus: Option<&str>,
    ns: Option<&str>,
    cgroup: Option<&Cgroup>,
) -> Command {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if let Some(cpus) = cpus {
        if Command::new("taskset").arg("-V").output().is_ok_and(|o| o.status.success()) {
            argv.extend(["taskset", "-c", cpus].map(Into::into));
        }
    }
    argv.push(program.into());
    if let Some(cgroup) = cgroup {
        argv = cgroup.wrap(argv);
    }
    if let Some(ns) = ns {
        argv.splice(0..0, ["ip", "netns", "exec", ns].map(Into::into));
    }
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    c
}

/// A server under test: its processes (the front first), and where the
/// load goes.
pub(super) struct Running {
    pub(super) servers: Vec<Server>,
    /// Those on hosts of `[hosts]` (a front first).
    pub(super) remote: Vec<super::placed::RemoteServer>,
    pub(super) addr: String,
}

impl Running {
    pub(super) fn cpu_ns(&self) -> u64 {
        self.servers.iter().map(|s| tree_cpu_ns(s.pid())).sum()
    }

    pub(super) fn pss_kib(&self) -> u64 {
        self.servers.iter().map(|s| tree_pss_kib(s.pid())).sum()
    }

    pub(super) fn read_bytes(&self) -> u64 {
        self.servers.iter().map(|s| tree_read_bytes(s.pid())).sum()
    }

    /// The backends' `/status.json`; `None` when one has none (a peer) or
    /// cannot be asked.
    pub(super) fn statuses(&self) -> Option<Vec<Value>> {
        let backends = self.servers.iter().filter(|s| !s.front).map(|s| s.admin.as_deref());
        let remote = self.remote.iter().filter(|s| !s.front).map(|s| s.admin.as_deref());
        backends.chain(remote).map(|admin| crate::probe::status(admin?).ok()).collect()
    }

    /// The status listeners of the servers on hosts: (host, address).
    pub(super) fn remote_admins(&self) -> Vec<(String, String)> {
        self.remote.iter().filter_map(|s| Some((s.host(), s.admin.clone()?))).collect()
    }

    /// The statuses once the `requests` answered since `before` are
    /// counted: the process models' children publish theirs every 250 ms.
    pub(super) fn statuses_after(&self, before: &[Value], requests: f64) -> Option<Vec<Value>> {
        // Timed requests where the server times them, else its request count.
        let counted = |status: &Value| {
            Timing::from_status(status)
                .map_or(status["requests_total"].as_f64().unwrap_or(0.0), |t| t.requests)
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let now = self.statuses()?;
            let answered: f64 = now.iter().zip(before).map(|(a, b)| counted(a) - counted(b)).sum();
            if answered >= requests || Instant::now() > deadline {
                return Some(now);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The memory cgroups of the backends that have one: its name, and the
    /// server's own as `/proc/PID/cgroup` says (the same, when it is in).
    pub(super) fn cgroups(&self) -> Vec<Value> {
        self.servers
            .iter()
            .filter_map(|s| {
                let c = s.cgroup.as_ref()?;
                Some(json!({
                    "cgroup": c.name(),
                    "server_in": crate::cgroup::of_process(s.pid(), c.version),
                    "peak_bytes": c.peak(),
                }))
            })
            .collect()
    }

    pub(super) fn stop(&mut self) {
        self.remote.iter_mut().for_each(super::placed::RemoteServer::stop);
        self.servers.iter_mut().for_each(Server::stop);
    }
}

/// A `modus serve` child, stopped (and reaped) when dropped.
pub(super) struct Server {
    pub(super) child: Child,
    pub(super) addr: String,
    /// A modus server's status listener.
    pub(super) admin: Option<String>,
    /// A front (`modus direct`, HAProxy), not a server measured.
    pub(super) front: bool,
    /// Its memory cgroup, removed once it has stopped.
    pub(super) cgroup: Option<Cgroup>,
}

impl Server {
    pub(super) fn start(mut command: Command) -> Result<Server> {
        let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            // Keep the pipe drained until the server exits.
            for _ in lines {}
        });
        let first = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| anyhow!("the server never said where it listens"))?;
        let addr = first
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split(' ').next())
            .ok_or_else(|| anyhow!("unexpected first line {first:?}"))?
            .to_string();
        let admin = first.split(' ').find_map(|w| w.strip_prefix("admin=")).map(str::to_string);
        Ok(Server { child, addr, admin, front: false, cgroup: None })
    }

    /// A peer, which says nothing on start: it is up when its port answers.
    /// In a process group of its own: Apache's prefork signals its whole
    /// group when it stops.
    pub(super) fn start_peer(mut command: Command, ip: &str, port: u16) -> Result<Server> {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let mut server =
            Server { child, addr: format!("{ip}:{port}"), admin: None, front: false, cgroup: None };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(&server.addr).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = server.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                bail!("the server exited ({status}) before listening: {}", err.trim());
            }
            if Instant::now() > deadline {
                server.stop();
                bail!("the server never listened on {}", server.addr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// With the memory cgroup it was started in.
    pub(super) fn in_cgroup(mut self, cgroup: Option<Cgroup>) -> Server {
        self.cgroup = cgroup;
        self
    }

    /// As a front: what it says of its timing is not the servers'.
    pub(super) fn in_front(mut self) -> Server {
        self.front = true;
        self
    }

    pub(super) fn stop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Its children may outlive it a moment; the cgroup waits for them.
        self.cgroup.take();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}
