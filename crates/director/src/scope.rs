//! What `modus monitor` measures: the whole host (`/proc/stat`'s CPU time
//! and runnable tasks), or only the web server's own processes — its
//! cgroup (`--cgroup`), or processes by PID and their descendants
//! (`--pids`) — so that on a shared host other users' work does not make
//! the director admit nothing.

use std::io;
use std::path::{Path, PathBuf};

/// Whose CPU time and runnable tasks a sample counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything on the host.
    Host,
    /// The tasks of a cgroup directory (v2, or v1's `cpuacct` hierarchy).
    Cgroup(PathBuf),
    /// These processes and every process descended from them.
    Pids(Vec<u32>),
}

/// One reading of a scope: CPU time used so far and runnable tasks now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time, in nanoseconds, since an arbitrary start.
    pub cpu_ns: u64,
    /// Tasks (threads) that are running or ready to run.
    pub runnable: u64,
}

impl Scope {
    /// What the monitor's first line says it measures.
    pub fn describe(&self) -> String {
        match self {
            Scope::Host => "the whole host".into(),
            Scope::Cgroup(dir) => format!("cgroup {}", dir.display()),
            Scope::Pids(pids) => format!(
                "processes {} and their descendants",
                pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
        }
    }

    /// Reads the scope's usage under the proc file system at `proc_root`.
    /// `None` for [`Scope::Host`], which `/proc/stat` measures.
    pub fn read(&self, proc_root: &Path) -> io::Result<Option<Usage>> {
        match self {
            Scope::Host => Ok(None),
            Scope::Cgroup(dir) => {
                let cpu_ns = cgroup_cpu_ns(dir)?;
                let tasks = cgroup_tasks(dir)?;
                let runnable =
                    tasks.iter().filter(|tid| task_runnable(proc_root, **tid, **tid)).count() as u64;
                Ok(Some(Usage { cpu_ns, runnable }))
            }
            Scope::Pids(roots) => {
                let processes = descendants(proc_root, roots);
                let mut usage = Usage::default();
                for pid in processes {
                    usage.cpu_ns += process_cpu_ns(proc_root, pid).unwrap_or(0);
                    let tasks = std::fs::read_dir(proc_root.join(pid.to_string()).join("task"));
                    for tid in tasks.into_iter().flatten().flatten() {
                        if let Some(tid) = tid.file_name().to_str().and_then(|t| t.parse().ok()) {
                            usage.runnable += u64::from(task_runnable(proc_root, pid, tid));
                        }
                    }
                }
                Ok(Some(usage))
            }
        }
    }
}

/// A cgroup's CPU time: v2's `cpu.stat` `usage_usec`, or v1's
/// `cpuacct.usage` (nanoseconds).
fn cgroup_cpu_ns(dir: &Path) -> io::Result<u64> {
    if let Ok(stat) = std::fs::read_to_string(dir.join("cpu.stat")) {
        if let Some(us) = stat.lines().find_map(|l| l.strip_prefix("usage_usec ")) {
            return us.trim().parse::<u64>().map(|us| us * 1000).map_err(io::Error::other);
        }
    }
    let ns = std::fs::read_to_string(dir.join("cpuacct.usage")).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{}: neither cpu.stat (v2) nor cpuacct.usage (v1): {e}", dir.display()),
        )
    })?;
    ns.trim().parse().map_err(io::Error::other)
}

/// The threads of a cgroup: v2's `cgroup.threads`, else v1's `tasks`.
fn cgroup_tasks(dir: &Path) -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string(dir.join("cgroup.threads"))
        .or_else(|_| std::fs::read_to_string(dir.join("tasks")))?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// The state field of `/proc/PID/task/TID/stat` is `R`.
fn task_runnable(proc_root: &Path, pid: u32, tid: u32) -> bool {
    let path = proc_root.join(pid.to_string()).join("task").join(tid.to_string()).join("stat");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|stat| stat_fields(&stat).map(|f| f[0] == "R"))
        .unwrap_or(false)
}

/// A process's CPU time (`utime` + `stime`, clock ticks of 10 ms on Linux).
fn process_cpu_ns(proc_root: &Path, pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    let fields = stat_fields(&stat)?;
    // After the command: state is field 3, utime 14 and stime 15 (1-based).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

/// A `stat` line's fields after the command name (which may hold spaces
/// and parentheses): the state first.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_ascii_whitespace().collect())
}

/// `roots` and every process whose parent chain reaches one of them.
fn descendants(proc_root: &Path, roots: &[u32]) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir(proc_root).into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(ppid) = stat_fields(&stat).and_then(|f| f.get(1)?.parse().ok()) {
            parent_of.push((pid, ppid));
        }
    }
    let mut found: Vec<u32> =
        roots.iter().copied().filter(|r| parent_of.iter().any(|(p, _)| p == r)).collect();
    let mut grew = true;
    while grew {
        grew = false;
        for &(pid, ppid) in &parent_of {
            if found.contains(&ppid) && !found.contains(&pid) {
                found.push(pid);
                grew = true;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake proc tree: 10 (R) → 11 (S) → 12 (R, two threads, one R).
    #[test]
    fn pids_count_their_descendants_and_runnable_threads() {
        let root = tempfile::tempdir().unwrap();
        let proc = |pid: u32, ppid: u32, utime: u64, threads: &[(u32, char)]| {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir_all(dir.join("task")).unwrap();
            let stat = |state: char| {
                format!("{pid} (a (b) c) {state} {ppid} 0 0 0 0 0 0 0 0 0 {utime} 5 0 0 20 0 1 0 0 0 0")
            };
            std::fs::write(dir.join("stat"), stat(threads[0].1)).unwrap();
            for &(tid, state) in threads {
                let t = dir.join("task").join(tid.to_string());
                std::fs::create_dir_all(&t).unwrap();
                std::fs::write(t.join("stat"), stat(state)).unwrap();
            }
        };
        proc(10, 1, 100, &[(10, 'R')]);
        proc(11, 10, 50, &[(11, 'S')]);
        proc(12, 11, 0, &[(12, 'R'), (13, 'S')]);
        proc(20, 1, 999, &[(20, 'R')]);
        let usage = Scope::Pids(vec![10]).read(root.path()).unwrap().unwrap();
        assert_eq!(usage.runnable, 2, "10 and thread 12, not 20");
        assert_eq!(usage.cpu_ns, (105 + 55 + 5) * 10_000_000);
        assert_eq!(Scope::Host.read(root.path()).unwrap(), None);
        assert_eq!(Scope::Pids(vec![10, 20]).describe(), "processes 10,20 and their descendants");
    }

    #[test]
    fn a_cgroup_v2_or_v1_is_read() {
        let proc = tempfile::tempdir().unwrap();
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\n").unwrap();
        std::fs::write(v2.path().join("cgroup.threads"), "").unwrap();
        let usage = Scope::Cgroup(v2.path().into()).read(proc.path()).unwrap().unwrap();
        assert_eq!(usage, Usage { cpu_ns: 1_500_000, runnable: 0 });
        let v1 = tempfile::tempdir().unwrap();
        std::fs::write(v1.path().join("cpuacct.usage"), "123456\n").unwrap();
        std::fs::write(v1.path().join("tasks"), "").unwrap();
        assert_eq!(Scope::Cgroup(v1.path().into()).read(proc.path()).unwrap().unwrap().cpu_ns, 123_456);
        let none = tempfile::tempdir().unwrap();
        let e = Scope::Cgroup(none.path().into()).read(proc.path()).unwrap_err().to_string();
        assert!(e.contains("neither cpu.stat (v2) nor cpuacct.usage (v1)"), "{e}");
    }
}
