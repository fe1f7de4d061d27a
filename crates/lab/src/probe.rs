//! What the lab reads from a running server around a measurement: from
//! `/proc`, its process tree's CPU time, memory (PSS) and disk reads; from
//! a modus server's `/status.json`, its own per-phase timing and what each
//! of its workers took.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use crate::columns::PHASES;

/// `pid` and its live descendants (a process model's children).
pub fn tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Some(ppid) = stat_fields(p).and_then(|f| f.get(1).and_then(|v| v.parse().ok())) {
            parents.push((p, ppid));
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found
}

/// The fields of `/proc/PID/stat` after the command name (state first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    Some(after.split(' ').map(str::to_string).collect())
}

/// CPU time (user + system, nanoseconds) of the process tree, with the
/// reaped children of each of its processes (finished CGI scripts, reaped
/// by the root, a worker process or Apache's cgid daemon). A reaped child
/// is no longer in the tree, so nothing is counted twice.
///
/// `/proc/PID/stat` counts a process's time in clock ticks (10 ms here),
/// rounded down per process: the 256 children of a prefork server that
/// each did 5 ms of work in a point read as nothing. So a process's own
/// time is its threads' `schedstat` run times (nanoseconds) where those
/// cover it; a process whose exited threads took more (a thread per
/// request) keeps the tick count, which includes them. Reaped children's
/// times come as one sum, rounded once.
pub fn tree_cpu_ns(pid: u32) -> u64 {
    let tick_ns = 1_000_000_000 / rustix::param::clock_ticks_per_second();
    let process_ns = |p: u32| -> u64 {
        let Some(f) = stat_fields(p) else { return 0 };
        // After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let own = (n(11) + n(12)) * tick_ns;
        own.max(live_threads_ns(p)) + (n(13) + n(14)) * tick_ns
    };
    tree(pid).into_iter().map(process_ns).sum()
}

/// The time on a CPU of `pid`'s live threads (the first field of each
/// thread's `schedstat`, nanoseconds).
fn live_threads_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// Proportional set size of the process tree, KiB.
pub fn tree_pss_kib(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .sum()
}

/// Bytes the process tree has read from the disk (`/proc/PID/io`
/// `read_bytes`: what reached the block layer, not page-cache hits).
pub fn tree_read_bytes(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/io")).ok())
        .filter_map(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("read_bytes:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// A modus server's `/status.json`, from its admin listener at `addr`.
pub fn status(addr: &str) -> Result<Value> {
    let mut stream = std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("GET /status.json HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { bail!("{addr}: no HTTP answer") };
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("{addr}/status.json: {}", head.lines().next().unwrap_or_default());
    }
    serde_json::from_str(body).map_err(|e| anyhow!("{addr}/status.json: {e}"))
}

/// A server's timing totals at one moment: requests timed, and the sum
/// (µs) of their whole time and of each of [`PHASES`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timing {
    pub requests: f64,
    pub request_us: f64,
    pub phases_us: [f64; PHASES.len()],
}

impl Timing {
    /// From `/status.json`; `None` when the server takes no timestamps
    /// (`--no-timing`).
    pub fn from_status(status: &Value) -> Option<Timing> {
        if status["timing"] == false {
            return None;
        }
        let phases = &status["phases_us"];
        let sum = |name: &str| phases[name]["sum"].as_f64().unwrap_or(0.0);
        Some(Timing {
            requests: phases["total"]["count"].as_f64()?,
            request_us: sum("total"),
            phases_us: PHASES.map(sum),
        })
    }

    /// Several servers' (a front's backends) together.
    pub fn plus(mut self, other: &Timing) -> Timing {
        self.requests += other.requests;
        self.request_us += other.request_us;
        self.phases_us.iter_mut().zip(other.phases_us).for_each(|(a, b)| *a += b);
        self
    }

    /// Time getting the documents: from the cache and from their files.
    fn data_us(&self) -> f64 {
        let phase = |name: &str| PHASES.iter().position(|p| *p == name).map_or(0.0, |i| self.phases_us[i]);
        phase("data_hit") + phase("data_miss")
    }

    /// The mean per request between `before` and `self`: the request's
    /// time, the data's, then each phase's (NaN when no request was timed).
    pub fn per_request_since(&self, before: &Timing) -> Vec<f64> {
        let n = self.requests - before.requests;
        let mean = |after: f64, before: f64| if n > 0.0 { (after - before) / n } else { f64::NAN };
        [mean(self.request_us, before.request_us), mean(self.data_us(), before.data_us())]
            .into_iter()
            .chain(self.phases_us.iter().zip(before.phases_us).map(|(a, b)| mean(*a, b)))
            .collect()
    }
}

/// What each worker on a server's scoreboard (`/status.json`'s
/// `workers.scoreboard`) has taken so far, by its line's name: its
/// `served` count — connections or requests for a thread or a process,
/// turns with work for an event loop (what it accepted and served comes
/// to it in those turns).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scoreboard(pub BTreeMap<String, u64>);

impl Scoreboard {
    /// The lines of several servers' `/status.json` (a front's backends),
    /// each named by its server's place as well when there are several.
    pub fn from_statuses(statuses: &[Value]) -> Scoreboard {
        let mut lines = BTreeMap::new();
        for (i, status) in statuses.iter().enumerate() {
            for line in status["workers"]["scoreboard"].as_array().into_iter().flatten() {
                let (Some(name), Some(served)) = (line["name"].as_str(), line["served"].as_u64()) else {
                    continue;
                };
                let mut key = if statuses.len() > 1 { format!("{i}:{name}") } else { name.to_string() };
                // Two lines of one name (unnamed threads) stay two workers.
                while lines.contains_key(&key) {
                    key.push('\'');
                }
                lines.insert(key, served);
            }
        }
        Scoreboard(lines)
    }

    /// How evenly the workers took the work since `before`: (the number
    /// of workers, the most any took over the least). Workers are the
    /// lines here (one gone since is not counted; one new counts from
    /// zero); one that took nothing counts as having taken one, as
    /// bench/reuseport.sh counted, so the spread stays finite. NaN for the
    /// spread when none took anything.
    pub fn spread_since(&self, before: &Scoreboard) -> (f64, f64) {
        let took: Vec<u64> = self
            .0
            .iter()
            .map(|(name, served)| served.saturating_sub(before.0.get(name).copied().unwrap_or(0)))
            .collect();
        let (most, least) =
            (took.iter().copied().max().unwrap_or(0), took.iter().copied().min().unwrap_or(0));
        let spread = if most == 0 { f64::NAN } else { most as f64 / least.max(1) as f64 };
        (took.len() as f64, spread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Many processes that each did less than a clock tick of work (a
    /// prefork server's children in a short point) are counted: a shell
    /// starts 24 children that each spin 1.5–7.5 ms and then wait, the
    /// tree is read, and the shell's `times` gives what they used once
    /// they have exited (its children's total, rounded down once). They
    /// wait on the test's pipe (fd 3: a background job's own stdin is
    /// /dev/null), so they are alive when the tree is read.
    #[test]
    fn work_below_a_tick_per_process_is_counted() {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let script = "exec 3<&0; read go; n=3000; while [ $n -lt 15000 ]; do \
            (i=0; while [ $i -lt $n ]; do i=$((i+1)); done; echo x; read y <&3) & n=$((n+500)); done; wait; times";
        let mut shell = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = shell.id();
        let before = tree_cpu_ns(pid);
        let mut stdin = shell.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        let mut out = BufReader::new(shell.stdout.take().unwrap());
        let mut line = String::new();
        for _ in 0..24 {
            line.clear();
            out.read_line(&mut line).unwrap();
            assert_eq!(line, "x\n");
        }
        let during = tree_cpu_ns(pid) - before;
        drop(stdin);
        let times: Vec<String> = out.lines().map(Result::unwrap).collect();
        shell.wait().unwrap();
        // "0m0.110000s 0m0.010000s": the children's user and system time.
        let seconds = |t: &str| -> f64 {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        };
        let children: f64 = times[1].split(' ').map(seconds).sum();
        assert!(children >= 0.03, "the children worked: {times:?}");
        let during = during as f64 / 1e9;
        assert!(during >= children - 0.005, "counted {during:.4} s while the children used {children:.4} s");
    }

    #[test]
    fn the_process_tree_is_found() {
        let me = std::process::id();
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let found = tree(me);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&me) && found.contains(&child.id()), "{found:?}");
        assert!(tree_cpu_ns(me) > 0 || tree_pss_kib(me) > 0);
    }

    #[test]
    fn disk_reads_are_read_from_proc() {
        let me = std::process::id();
        if std::fs::read_to_string(format!("/proc/{me}/io")).is_err() {
            eprintln!("skipped: no /proc/PID/io here");
            return;
        }
        // Counted, and never less than before.
        let before = tree_read_bytes(me);
        let _ = std::fs::read("/proc/self/exe");
        assert!(tree_read_bytes(me) >= before);
    }

    #[test]
    fn phase_means_come_from_the_status_totals() {
        let status = |count: u64, total: f64, read: f64, write: f64| {
            let mut phases = serde_json::json!({
                "total": { "count": count, "sum": total },
                "read": { "count": count, "sum": read },
                "write": { "count": count, "sum": write },
            });
            for p in PHASES {
                if phases.get(p).is_none() {
                    phases[p] = serde_json::json!({ "count": 0, "sum": 0.0 });
                }
            }
            serde_json::json!({ "timing": true, "phases_us": phases })
        };
        let before = Timing::from_status(&status(10, 100.0, 20.0, 30.0)).unwrap();
        let after = Timing::from_status(&status(110, 1100.0, 220.0, 530.0)).unwrap();
        let means = after.per_request_since(&before);
        assert_eq!(means.len(), 2 + PHASES.len());
        assert_eq!((means[0], means[1], means[2], means[8]), (10.0, 0.0, 2.0, 5.0), "{means:?}");
        assert!(before.per_request_since(&before).iter().all(|v| v.is_nan()), "no requests: no means");
        let mut data = Timing { requests: 2.0, request_us: 20.0, ..Timing::default() };
        data.phases_us[PHASES.iter().position(|p| *p == "data_hit").unwrap()] = 3.0;
        data.phases_us[PHASES.iter().position(|p| *p == "data_miss").unwrap()] = 5.0;
        assert_eq!(data.per_request_since(&Timing::default())[1], 4.0, "data: hits and misses");
        let both = after.clone().plus(&after);
        assert_eq!((both.requests, both.phases_us[0]), (220.0, 440.0));
        assert_eq!(Timing::from_status(&serde_json::json!({ "timing": false })), None);
    }

    #[test]
    fn the_workers_spread_comes_from_two_scoreboards() {
        let status = |lines: &[(&str, u64)]| {
            let board: Vec<Value> =
                lines.iter().map(|(n, s)| serde_json::json!({ "name": n, "served": s })).collect();
            serde_json::json!({ "workers": { "scoreboard": board } })
        };
        let before = Scoreboard::from_statuses(&[status(&[("event-0", 100), ("event-1", 40)])]);
        let after = Scoreboard::from_statuses(&[status(&[("event-0", 400), ("event-1", 140)])]);
        assert_eq!(after.spread_since(&before), (2.0, 3.0), "300 against 100");
        assert_eq!(after.spread_since(&after).0, 2.0);
        assert!(after.spread_since(&after).1.is_nan(), "nothing taken: no spread");
        // A loop that took nothing counts as one; a line gone is not
        // counted, a new one counts from zero.
        let idle = Scoreboard::from_statuses(&[status(&[("event-0", 150), ("event-1", 40), ("new", 20)])]);
        assert_eq!(idle.spread_since(&before), (3.0, 50.0));
        // Two backends: their lines apart, even under one name.
        let two = [status(&[("process", 5)]), status(&[("process", 9)])];
        let both = Scoreboard::from_statuses(&two);
        assert_eq!(both.spread_since(&Scoreboard::default()), (2.0, 1.8));
        let same_name = Scoreboard::from_statuses(&[status(&[("conn", 2), ("conn", 6)])]);
        assert_eq!(same_name.spread_since(&Scoreboard::default()), (2.0, 3.0));
        assert_eq!(Scoreboard::from_statuses(&[serde_json::json!({})]).spread_since(&before).0, 0.0);
    }
}
