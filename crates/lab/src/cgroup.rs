//! A memory limit for the server (`memory = "128MiB"` on a `[[server]]`):
//! its whole process tree in a memory cgroup of its own, so a working set
//! larger than the limit is really read from the disk (papers 003 and
//! 004). cgroup v1 (`memory/memory.limit_in_bytes`) or v2 (`memory.max`),
//! whichever holds the memory controller. The server joins the cgroup
//! before it runs (a shell writes its own PID to `cgroup.procs`, then
//! execs the server), so every process it forks is inside. The recipe is
//! bench/srpt.sh's `disk` case. Where it is not permitted (not root, no
//! memory controller) those servers are skipped and the report says why.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// Which cgroup interface the memory controller is mounted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Where memory cgroups are made: the memory controller's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub dir: PathBuf,
    pub version: Version,
}

impl Hierarchy {
    /// The memory controller under `root` (`/sys/fs/cgroup`): v1's
    /// `memory/` hierarchy, or a v2 root whose children may have it
    /// (`+memory` in `cgroup.subtree_control`, written if it is not there).
    pub fn find(root: &Path) -> Result<Hierarchy> {
        let v1 = root.join("memory");
        if v1.join("memory.limit_in_bytes").is_file() {
            return Ok(Hierarchy { dir: v1, version: Version::V1 });
        }
        let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "memory") {
            let subtree = root.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                std::fs::write(&subtree, "+memory").with_context(|| {
                    format!("enabling the memory controller for {}'s children", root.display())
                })?;
            }
            return Ok(Hierarchy { dir: root.to_path_buf(), version: Version::V2 });
        }
        bail!("no memory cgroup controller under {} (neither v1's memory/ nor v2's)", root.display())
    }

    /// A new cgroup `name` limited to `limit` bytes; removed when dropped.
    pub fn create(&self, name: &str, limit: u64) -> Result<Cgroup> {
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir).with_context(|| format!("creating the cgroup {}", dir.display()))?;
        let group = Cgroup { dir, version: self.version };
        let file = match self.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        std::fs::write(group.dir.join(file), limit.to_string())
            .with_context(|| format!("writing {limit} to {}", group.dir.join(file).display()))?;
        Ok(group)
    }
}

/// The memory controller on this machine, if the lab may use it: root,
/// the controller mounted, and a cgroup made and removed as a trial. Found
/// once per run.
pub fn memory() -> Result<&'static Hierarchy, String> {
    static FOUND: OnceLock<Result<Hierarchy, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if !rustix::process::geteuid().is_root() {
                return Err("a memory limit needs root (a memory cgroup)".into());
            }
            let found = Hierarchy::find(Path::new("/sys/fs/cgroup")).map_err(|e| format!("{e:#}"))?;
            let trial = found
                .create(&format!("modus-lab-{}-trial", std::process::id()), u64::MAX >> 12)
                .map_err(|e| format!("{e:#}"))?;
            trial.remove().map_err(|e| format!("{e:#}"))?;
            Ok(found)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// One memory cgroup.
#[derive(Debug)]
pub struct Cgroup {
    pub dir: PathBuf,
    pub version: Version,
}

impl Cgroup {
    /// The file a process joins by writing its PID to (both versions).
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Its path as `/proc/PID/cgroup` shows it for its members: below
    /// the hierarchy's root.
    pub fn name(&self) -> String {
        format!("/{}", self.dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default())
    }

    /// `program args…` run so that it joins this cgroup first: `sh -c`
    /// writes its own PID to `cgroup.procs` and execs the program, keeping
    /// the PID (and every process it forks inside).
    pub fn wrap(&self, argv: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
        let mut wrapped: Vec<std::ffi::OsString> =
            ["sh", "-c", "echo $$ > \"$0\" && exec \"$@\""].map(Into::into).into();
        wrapped.push(self.procs().into());
        wrapped.extend(argv);
        wrapped
    }

    /// The most memory (bytes) its processes have used together, page
    /// cache included, if the kernel says (v2 before 5.19 does not).
    pub fn peak(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        std::fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }

    /// Removes it: its processes have exited (exited ones may linger a
    /// moment before the kernel lets the directory go).
    pub fn remove(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(anyhow!(e).context(format!("removing the cgroup {}", self.dir.display())))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("modus lab: warning: {e:#} (rmdir it by hand)");
        }
    }
}

/// The cgroup of `pid` in the memory controller, as `/proc/PID/cgroup`
/// says (`N:memory:/path` on v1, `0::/path` on v2).
pub fn of_process(pid: u32, version: Version) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let ours = match version {
            Version::V1 => controllers.split(',').any(|c| c == "memory"),
            Version::V2 => controllers.is_empty(),
        };
        ours.then(|| path.to_string())
    })
}

/// Drops the page cache of every file below `dir` (`fdatasync`, since
/// dirty pages cannot be dropped, then `POSIX_FADV_DONTNEED`), so each
/// point under a memory limit starts with its documents on the disk alike.
pub fn drop_page_cache(dir: &Path) -> Result<u64> {
    let mut dropped = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(path),
                Ok(t) if t.is_file() => {
                    let file = std::fs::File::open(&path)?;
                    rustix::fs::fdatasync(&file)?;
                    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)?;
                    dropped += 1;
                }
                _ => {}
            }
        }
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_is_found_and_a_cgroup_gets_its_limit() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("memory")).unwrap();
        std::fs::write(root.path().join("memory/memory.limit_in_bytes"), "9223372036854771712").unwrap();
        let h = Hierarchy::find(root.path()).unwrap();
        assert_eq!(h, Hierarchy { dir: root.path().join("memory"), version: Version::V1 });
        let group = h.create("modus-lab-1-pool", 128 << 20).unwrap();
        assert_eq!(group.peak(), None, "no usage recorded in a plain directory");
        let limit = std::fs::read_to_string(group.dir.join("memory.limit_in_bytes")).unwrap();
        assert_eq!(limit, "134217728");
        assert_eq!(group.name(), "/modus-lab-1-pool");
        assert_eq!(group.procs(), root.path().join("memory/modus-lab-1-pool/cgroup.procs"));
        // A plain directory with a file in it (the real one is removed with rmdir).
        std::fs::remove_file(group.dir.join("memory.limit_in_bytes")).unwrap();
        group.remove().unwrap();
        assert!(!root.path().join("memory/modus-lab-1-pool").exists());
        let again = h.create("modus-lab-1-pool", 1).unwrap();
        std::fs::remove_file(again.dir.join("memory.limit_in_bytes")).unwrap();
    }

    #[test]
    fn v2_wants_the_memory_controller_for_children() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        std::fs::write(root.path().join("cgroup.subtree_control"), "cpu\n").unwrap();
        let h = Hierarchy::find(root.path()).unwrap();
        assert_eq!(h.version, Version::V2);
        assert_eq!(std::fs::read_to_string(root.path().join("cgroup.subtree_control")).unwrap(), "+memory");
        let group = h.create("g", 64 << 20).unwrap();
        assert_eq!(std::fs::read_to_string(group.dir.join("memory.max")).unwrap(), "67108864");
        std::fs::remove_file(group.dir.join("memory.max")).unwrap();
    }

    #[test]
    fn no_controller_says_so() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpu pids\n").unwrap();
        let e = format!("{:#}", Hierarchy::find(root.path()).unwrap_err());
        assert!(e.contains("no memory cgroup controller"), "{e}");
    }

    #[test]
    fn the_wrapper_joins_then_execs() {
        let root = tempfile::tempdir().unwrap();
        let group = Cgroup { dir: root.path().join("g"), version: Version::V1 };
        std::fs::create_dir(&group.dir).unwrap();
        let argv = group.wrap(vec!["sh".into(), "-c".into(), "echo $$".into()]);
        let out = std::process::Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        let written = std::fs::read_to_string(group.procs()).unwrap();
        assert_eq!(written, String::from_utf8_lossy(&out.stdout), "the PID written is the program's");
        std::fs::remove_file(group.procs()).unwrap();
    }

    #[test]
    fn a_process_cgroup_is_read_for_its_version() {
        let me = std::process::id();
        let text = std::fs::read_to_string(format!("/proc/{me}/cgroup")).unwrap_or_default();
        if text.lines().any(|l| l.contains(":memory:")) {
            assert!(of_process(me, Version::V1).is_some_and(|p| p.starts_with('/')), "{text}");
        }
        if text.lines().any(|l| l.starts_with("0::")) {
            assert!(of_process(me, Version::V2).is_some_and(|p| p.starts_with('/')), "{text}");
        }
        assert_eq!(of_process(u32::MAX, Version::V1), None);
    }

    #[test]
    fn the_page_cache_is_dropped_for_every_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a"), vec![7u8; 8192]).unwrap();
        std::fs::write(dir.path().join("sub/b"), b"b").unwrap();
        assert_eq!(drop_page_cache(dir.path()).unwrap(), 2);
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), vec![7u8; 8192], "the data stays");
    }
}
