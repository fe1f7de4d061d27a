//! How busy the machine was over a point: the CPU time of the whole
//! machine (`/proc/stat`) against the experiment's own processes (the
//! server's tree, the fronts, the load generator, the lab itself), and the
//! busiest block device's busy time (`/proc/diskstats` io_ticks) — so a
//! report can say when something else was running, and what was saturated.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// The cpuacct cgroup v1 hierarchy, where the lab accounts for its
/// experiment: every process it starts from then on — servers, their CGI
/// scripts, peers, the load generator — is in the group and its CPU time
/// is charged there, reaped or not (Apache's mod_cgid lets its scripts go
/// unreaped, so no process tree holds their time).
const CPUACCT: &str = "/sys/fs/cgroup/cpuacct";

/// The lab's accounting cgroup while it runs an experiment.
static GROUP: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

/// Membership of the accounting cgroup: the lab process joins a cpuacct
/// group of its own (root, cgroup v1 with cpuacct; otherwise nothing
/// happens and the process trees are counted instead) and leaves it,
/// removing it, when this is dropped.
pub struct Accounting {
    dir: std::path::PathBuf,
}

impl Accounting {
    /// Joins a fresh group; `None` where cpuacct cannot be used.
    pub fn join() -> Option<Accounting> {
        let dir = std::path::Path::new(CPUACCT).join(format!("modus-lab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        if std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).is_err()
            || std::fs::read_to_string(dir.join("cpuacct.usage")).is_err()
        {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        *GROUP.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir.clone());
        Some(Accounting { dir })
    }
}

impl Drop for Accounting {
    fn drop(&mut self) {
        *GROUP.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let _ = std::fs::write(
            std::path::Path::new(CPUACCT).join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The accounting group's CPU time so far, nanoseconds.
fn group_ns() -> Option<u64> {
    let dir = GROUP.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
    std::fs::read_to_string(dir.join("cpuacct.usage")).ok()?.trim().parse().ok()
}

/// The machine at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    at: Instant,
    /// The experiment's CPU time in its accounting cgroup, when it has one.
    group_ns: Option<u64>,
    /// Time every CPU spent on anything but idling and waiting for I/O
    /// (user, nice, system, irq, softirq; not steal), nanoseconds.
    busy_ns: u64,
    /// The lab's own CPU time, nanoseconds.
    own_ns: u64,
    /// Per block device, the milliseconds it had I/O in flight.
    io_ticks: BTreeMap<String, u64>,
}

/// What a window between two snapshots says, in % (NaN where unknown).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// CPU used by processes outside the experiment, as % of the machine.
    pub other_cpu_pct: f64,
    /// The busiest block device's busy time, % of the window.
    pub disk_util_pct: f64,
    /// The window's length, seconds.
    pub seconds: f64,
}

fn tick_ns() -> u64 {
    1_000_000_000 / rustix::param::clock_ticks_per_second()
}

impl Snapshot {
    /// Now.
    pub fn take() -> Snapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let diskstats = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
        Snapshot {
            at: Instant::now(),
            group_ns: group_ns(),
            busy_ns: machine_busy_ticks(&stat) * tick_ns(),
            own_ns: own_ticks(&own) * tick_ns(),
            io_ticks: io_ticks(&diskstats),
        }
    }

    /// From `self` to `after`, the experiment's processes having used
    /// `experiment_ns` of CPU in it (the server's tree and front, the load
    /// generator; the lab's own is taken from the snapshots).
    pub fn until(&self, after: &Snapshot, experiment_ns: u64) -> Window {
        let seconds = after.at.duration_since(self.at).as_secs_f64();
        let cpus = machine_cpus(&std::fs::read_to_string("/proc/stat").unwrap_or_default());
        window(self, after, experiment_ns, seconds, cpus)
    }
}

fn window(before: &Snapshot, after: &Snapshot, experiment_ns: u64, seconds: f64, cpus: usize) -> Window {
    if seconds <= 0.0 {
        return Window { other_cpu_pct: f64::NAN, disk_util_pct: f64::NAN, seconds };
    }
    let busy = after.busy_ns.saturating_sub(before.busy_ns);
    let own = after.own_ns.saturating_sub(before.own_ns);
    // The accounting group holds everything the experiment ran, reaped or
    // not; without it, the process trees and the lab's own time. Ticks are
    // sampled, the experiment's times are not: never below 0.
    let experiment = match (before.group_ns, after.group_ns) {
        (Some(b), Some(a)) => a.saturating_sub(b),
        _ => experiment_ns.saturating_add(own),
    };
    let other = busy.saturating_sub(experiment) as f64;
    let other_cpu_pct =
        if cpus == 0 || busy == 0 { f64::NAN } else { other / (seconds * 1e9 * cpus as f64) * 100.0 };
    let disk_util_pct = after
        .io_ticks
        .iter()
        .filter_map(|(dev, t)| Some(t.saturating_sub(*before.io_ticks.get(dev)?)))
        .max()
        .map_or(f64::NAN, |ms| (ms as f64 / (seconds * 1e3) * 100.0).min(100.0));
    Window { other_cpu_pct, disk_util_pct, seconds }
}

/// `/proc/stat`'s first line (`cpu  user nice system idle iowait irq
/// softirq steal …`): the ticks spent busy.
fn machine_busy_ticks(stat: &str) -> u64 {
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else { return 0 };
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let n = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system (idle iowait) irq softirq; guest is within user.
    n(0) + n(1) + n(2) + n(5) + n(6)
}

/// The CPUs `/proc/stat` counts (`cpuN` lines).
fn machine_cpus(stat: &str) -> usize {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count()
}

/// `/proc/PID/stat`'s utime + stime, ticks.
fn own_ticks(stat: &str) -> u64 {
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else { return 0 };
    let f: Vec<&str> = after.split(' ').collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// `/proc/diskstats`: each block device's io_ticks (ms with I/O in
/// flight); loop and RAM devices left out (a loop device repeats the disk
/// under it).
fn io_ticks(diskstats: &str) -> BTreeMap<String, u64> {
    diskstats
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.get(2)?;
            if ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p)) {
                return None;
            }
            Some((name.to_string(), f.get(12)?.parse().ok()?))
        })
        .collect()
}

/// The CPUs of a `taskset -c` list; `None` (not pinned): every CPU the lab may use.
pub fn cpu_set(list: Option<&str>) -> BTreeSet<usize> {
    let all = || (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    let Some(list) = list.filter(|l| !l.trim().is_empty()) else { return all() };
    let mut set = BTreeSet::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) else { return all() };
        set.extend(a..=b);
    }
    set
}

/// CPU time used (`ns`) over `seconds` on `cpus` CPUs, as %.
pub fn pct(ns: u64, seconds: f64, cpus: usize) -> f64 {
    if seconds <= 0.0 || cpus == 0 {
        f64::NAN
    } else {
        ns as f64 / (seconds * 1e9 * cpus as f64) * 100.0
    }
}

/// A `tc` rate (`100mbit`, `1gbit`, `500kbps`, `1000000` bits/s) in
/// bytes per second: `bit` units are bits, `bps` units bytes (tc's own
/// reading); k, m, g, t are powers of 1000, ki, mi, gi, ti of 1024.
pub fn tc_rate_bytes(rate: &str) -> Option<f64> {
    let rate = rate.trim().to_ascii_lowercase();
    let split = rate.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rate.len());
    let (number, unit) = rate.split_at(split);
    let number: f64 = number.parse().ok()?;
    let (scale, rest) = match unit {
        u if u.starts_with("ki") => (1024f64, &u[2..]),
        u if u.starts_with("mi") => (1024f64.powi(2), &u[2..]),
        u if u.starts_with("gi") => (1024f64.powi(3), &u[2..]),
        u if u.starts_with("ti") => (1024f64.powi(4), &u[2..]),
        u if u.starts_with('k') => (1e3, &u[1..]),
        u if u.starts_with('m') => (1e6, &u[1..]),
        u if u.starts_with('g') => (1e9, &u[1..]),
        u if u.starts_with('t') => (1e12, &u[1..]),
        u => (1.0, u),
    };
    match rest {
        "" | "bit" => Some(number * scale / 8.0),
        "bps" => Some(number * scale),
        _ => None,
    }
    .filter(|b| *b > 0.0)
}

/// The CPU time (ns) of the process `pid`, a child of this one, once it
/// has exited: waits for it to exit without reaping it (its `/proc` entry
/// stays, with its whole time), reads it, and leaves the reaping to the
/// caller.
pub fn cpu_ns_at_exit(pid: u32) -> u64 {
    use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
    if let Some(pid) = Pid::from_raw(pid as i32) {
        let _ = waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOWAIT);
    }
    crate::probe::tree_cpu_ns(pid)
}

/// The warning at the top of a report when, at some measured point,
/// processes outside the experiment used more than 10 % of the machine:
/// how many points, and the worst.
pub fn warning(table: &crate::results::Table) -> Option<String> {
    let limit = crate::claims::OTHER_CPU_BUSY;
    let measured: Vec<(&crate::results::Point, f64)> = table
        .points
        .iter()
        .filter_map(|p| Some((p, p.get("other_cpu_pct").filter(|v| !v.is_nan())?)))
        .collect();
    let busy: Vec<&(&crate::results::Point, f64)> = measured.iter().filter(|(_, v)| *v > limit).collect();
    let (worst, pct) = busy.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(format!(
        "the machine was busy: at {} of {} measured points processes outside the experiment used more than {limit:.0} % \
         of it (the worst: {pct:.0} %, {} at {} repeat {}); those numbers are not this machine's best",
        busy.len(),
        measured.len(),
        worst.server,
        worst.at.label(table),
        worst.repeat
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\ncpu1 50 3 25 500 10 2 1 4 0 0\nintr 1\n";

    #[test]
    fn proc_stat_and_diskstats_are_read() {
        assert_eq!(machine_busy_ticks(STAT), 100 + 5 + 50 + 3 + 2, "idle, iowait and steal left out");
        assert_eq!(machine_cpus(STAT), 2);
        let disks = "   8       0 sda 10 0 80 5 4 0 32 6 0 1234 11 0 0 0 0\n   7       0 loop0 1 0 2 0 0 0 0 0 0 99 0\n 259 0 nvme0n1 1 0 2 0 0 0 0 0 0 77 0\n";
        let t = io_ticks(disks);
        assert_eq!(t.get("sda"), Some(&1234));
        assert_eq!(t.get("nvme0n1"), Some(&77));
        assert!(!t.contains_key("loop0"));
        assert_eq!(own_ticks("42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15"), 11 + 12);
    }

    #[test]
    fn the_window_takes_the_experiment_out() {
        let snap = |busy_s: f64, own_s: f64, sda: u64| Snapshot {
            at: Instant::now(),
            group_ns: None,
            busy_ns: (busy_s * 1e9) as u64,
            own_ns: (own_s * 1e9) as u64,
            io_ticks: [("sda".to_string(), sda), ("sdb".to_string(), 0)].into(),
        };
        // 2 s on 2 CPUs: 3 s busy, of which 2.5 s the server and load, 0.1 s the lab.
        let w = window(&snap(10.0, 1.0, 100), &snap(13.0, 1.1, 1100), 2_500_000_000, 2.0, 2);
        assert!((w.other_cpu_pct - 10.0).abs() < 1e-6, "{w:?}");
        assert!((w.disk_util_pct - 50.0).abs() < 1e-9, "{w:?}");
        let w = window(&snap(10.0, 1.0, 0), &snap(11.0, 1.0, 0), 3_000_000_000, 2.0, 2);
        assert_eq!(w.other_cpu_pct, 0.0, "ticks undercount: never below 0");
        assert_eq!(w.disk_util_pct, 0.0); // With the accounting group, its time is the experiment's: a script
                                          // no process tree holds (reaped by nobody) is not "others".
        let grouped = |busy_s: f64, group_s: f64| Snapshot {
            group_ns: Some((group_s * 1e9) as u64),
            ..snap(busy_s, 0.0, 0)
        };
        let w = window(&grouped(10.0, 4.0), &grouped(13.0, 6.8), 1_000_000_000, 2.0, 2);
        assert!((w.other_cpu_pct - 5.0).abs() < 1e-6, "3 s busy, 2.8 s in the group: {w:?}");
    }

    /// As root with cpuacct (this machine; skipped elsewhere): a child's
    /// CPU time is charged to the group even though nobody reaps it.
    #[test]
    fn the_accounting_group_charges_unreaped_children() {
        let Some(group) = Accounting::join() else {
            eprintln!("skipped: no cpuacct cgroup here (root and cgroup v1 cpuacct needed)");
            return;
        };
        let before = group_ns().unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        child.wait().unwrap();
        let spent = group_ns().unwrap() - before;
        assert!(spent > 1_000_000, "the shell's loop took more than 1 ms of CPU: {spent} ns");
        drop(group);
        assert_eq!(group_ns(), None, "left");
    }

    #[test]
    fn cpu_lists_and_tc_rates() {
        assert_eq!(cpu_set(Some("0,2-3")), [0, 2, 3].into());
        assert_eq!(cpu_set(None).len(), std::thread::available_parallelism().unwrap().get());
        assert_eq!(pct(1_000_000_000, 2.0, 1), 50.0);
        assert_eq!(tc_rate_bytes("100mbit"), Some(12.5e6));
        assert_eq!(tc_rate_bytes("1Gbit"), Some(125e6));
        assert_eq!(tc_rate_bytes("8000"), Some(1000.0));
        assert_eq!(tc_rate_bytes("10kbps"), Some(10_000.0));
        assert_eq!(tc_rate_bytes("1mibit"), Some(1024.0 * 1024.0 / 8.0));
        assert_eq!(tc_rate_bytes("fast"), None);
    }

    #[test]
    fn a_busy_machine_is_warned_of() {
        let mut table = crate::results::Table::default();
        let i = crate::columns::METRICS.iter().position(|(m, _)| *m == "other_cpu_pct").unwrap();
        for (clients, other) in [(1, 3.0), (2, 25.0), (4, 12.0), (8, f64::NAN)] {
            let mut values = crate::results::values(&[100.0]);
            values[i] = other;
            table.points.push(crate::results::Point {
                server: "pool".into(),
                at: crate::results::at(clients),
                repeat: 1,
                values,
            });
        }
        let w = warning(&table).unwrap();
        assert!(
            w.contains("at 2 of 3 measured points") && w.contains("the worst: 25 %, pool at clients=2"),
            "{w}"
        );
        table.points.retain(|p| p.at.clients == 1);
        assert_eq!(warning(&table), None);
    }

    /// A child's CPU time is read once it exits, before it is reaped.
    #[test]
    fn a_childs_time_is_read_at_its_exit() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let ns = cpu_ns_at_exit(child.id());
        assert!(child.wait().unwrap().success());
        assert!(ns >= 10_000_000, "the loop took CPU: {ns} ns");
    }
}
