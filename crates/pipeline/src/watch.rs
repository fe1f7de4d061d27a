//! Knowing that a cached file changed without a `stat` per request: the
//! directories of cached files are watched with inotify, and an event loop
//! that holds the inotify descriptor in its epoll set reads the changes
//! before it serves anything else in the same turn
//! ([`Pipeline::files_changed`](crate::Pipeline::files_changed)).
//!
//! Which entries can be trusted to the watch, and which keep the `stat`:
//!
//! * Every directory from the root down to the file is watched (one watch
//!   per directory, shared by everything beneath it), so a rename or
//!   removal of any of them is seen too — the entries beneath the name go.
//! * The watch is added *before* the file is opened and read, and an entry
//!   whose fill overlapped any change read in the meantime is not trusted
//!   ([`Ticket`]): a change can never slip in between the read and the watch.
//! * A file that is a symlink, or has other hard links, can change through
//!   a name no watch of ours sees; a filesystem whose changes need not pass
//!   through this kernel (NFS, SMB, FUSE, 9p, Ceph) sends no event for them;
//!   and a directory the watch limit (`fs.inotify.max_user_watches`) left
//!   unwatched sends none either. Those entries keep today's `stat` per hit,
//!   and the error log says so once per cause.
//! * A lost event (the kernel's queue overflowed) empties the cache.
//!
//! What a change is guaranteed to reach: a loop reads the watch before
//! anything else in a turn whose wait reported it (and waits for another
//! loop that is still dropping what it read); a connection accepted after
//! the first of a turn waits for its own readable edge rather than being
//! read at once. So a request is answered from the changed file when its
//! bytes arrived after the change's event was queued — except bytes that
//! arrive between a wait and the read of the connection that wait
//! reported (a client that connects, changes the file, then sends at
//! once). The `stat` it replaces was exact; nginx's `open_file_cache`
//! trusts a descriptor for `open_file_cache_valid` (60 s by default),
//! lighttpd's default stat cache for a second.

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use rustix::io::Errno;

use crate::errorlog::ErrorLog;

/// What a directory watch reports: the changes that can make a cached copy
/// stale — contents, attributes (a `chmod` that now refuses the file),
/// names arriving or leaving, and the directory itself going.
fn watch_flags() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
}

/// A change that makes cached entries stale.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stale {
    /// The entry cached under this path; when `beneath` also every entry
    /// under it as a directory (a name that came or went may have been one).
    Path { key: String, beneath: bool },
    /// Events were lost: nothing can be trusted.
    Everything,
}

/// The inotify instance of one document root.
#[derive(Debug)]
pub(crate) struct Watch {
    fd: OwnedFd,
    /// `/proc/self/fd/N`: the root as its descriptor sees it (a path
    /// through the root's name could meanwhile lead to another directory).
    root: String,
    dirs: Mutex<Dirs>,
    /// Moves whenever changes were read: a fill that began before the move
    /// may have read a version that a change already replaced.
    epoch: AtomicU64,
    error_log: Arc<ErrorLog>,
}

#[derive(Debug, Default)]
struct Dirs {
    /// Directory key ("" for the root, "/a", "/a/b") → watch.
    by_key: HashMap<String, Option<i32>>,
    /// Watch → directory key.
    by_wd: HashMap<i32, String>,
}

/// Taken before a file is opened for the cache: whether the watch covers
/// its directories, and the epoch its read began in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    pub watched: bool,
    pub epoch: u64,
}

impl Watch {
    /// Watches the root whose directory descriptor is `root_fd`.
    pub fn new(root_fd: BorrowedFd<'_>, error_log: Arc<ErrorLog>) -> io::Result<Watch> {
        use std::os::fd::AsRawFd;
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
        let root = format!("/proc/self/fd/{}", root_fd.as_raw_fd());
        let watch = Watch { fd, root, dirs: Mutex::default(), epoch: AtomicU64::new(0), error_log };
        // The root's own watch proves the /proc path works here.
        if !watch.ensure_dir("") {
            return Err(io::Error::other("cannot watch the document root"));
        }
        Ok(watch)
    }

    /// The descriptor an event loop polls for readability.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Watches every directory above `path` (a normalised request path
    /// naming a file) and says whether all of them are watched.
    pub fn ticket(&self, path: &str) -> Ticket {
        // The epoch first: a change read after this is caught at insert.
        let epoch = self.epoch();
        let mut watched = self.ensure_dir("");
        let mut end = 0;
        while let Some(i) = path[end + 1..].find('/') {
            end += 1 + i;
            watched &= self.ensure_dir(&path[..end]);
        }
        Ticket { watched, epoch }
    }

    /// Whether the directory `key` is watched, adding the watch if it is new.
    fn ensure_dir(&self, key: &str) -> bool {
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(wd) = dirs.by_key.get(key) {
            return wd.is_some();
        }
        let path = format!("{}{key}", self.root);
        let wd = match inotify::add_watch(&self.fd, path.as_str(), watch_flags()) {
            Ok(wd) => Some(wd),
            Err(e) => {
                let why = match e {
                    Errno::NOSPC => {
                        "the limit of inotify watches is reached (sysctl fs.inotify.max_user_watches)"
                    }
                    Errno::NOMEM => "the kernel is out of memory for inotify watches",
                    _ => "the directory cannot be watched",
                };
                self.error_log.warn_once(
                    "inotify-watch",
                    format_args!(
                        "cache: {why} ({}): files under {} are checked with a stat per request",
                        io::Error::from(e),
                        if key.is_empty() { "/" } else { key }
                    ),
                );
                None
            }
        };
        // Two directory names can be one directory (a symlink): one watch,
        // whose events are reported under the key added last.
        if let Some(wd) = wd {
            dirs.by_wd.insert(wd, key.to_string());
        }
        dirs.by_key.insert(key.to_string(), wd);
        wd.is_some()
    }

    /// Says once why an entry is not trusted to the watch.
    pub fn unwatchable(&self, cause: &'static str, path: &str) {
        self.error_log.warn_once(
            cause,
            format_args!(
                "cache: {path}: {}; such files are checked with a stat per request",
                match cause {
                    "inotify-link" =>
                        "a symlink or a file with other hard links changes where no watch sees it",
                    _ => "its filesystem does not report changes made elsewhere (network or FUSE)",
                }
            ),
        );
    }

    /// Reads every queued event and returns what went stale.
    pub fn drain(&self) -> Vec<Stale> {
        let mut stale = Vec::new();
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(Errno::AGAIN | Errno::INTR) => break,
                Err(e) => {
                    self.error_log.error_once("inotify-read", format_args!("cache: reading inotify: {e}"));
                    stale.push(Stale::Everything);
                    break;
                }
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                self.error_log.warn_once(
                    "inotify-overflow",
                    format_args!(
                        "cache: inotify lost events (fs.inotify.max_queued_events): the cache is emptied"
                    ),
                );
                stale.push(Stale::Everything);
                continue;
            }
            let Some(dir) = dirs.by_wd.get(&event.wd()).cloned() else { continue };
            if flags.intersects(
                ReadFlags::IGNORED | ReadFlags::UNMOUNT | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF,
            ) {
                // The directory itself went (or moved away from its name).
                stale.push(Stale::Path { key: dir.clone(), beneath: true });
                if flags.contains(ReadFlags::IGNORED) {
                    dirs.by_wd.remove(&event.wd());
                    dirs.by_key.retain(|_, wd| *wd != Some(event.wd()));
                } else {
                    // Watched again, under its name, when a file beneath is cached.
                    let _ = inotify::remove_watch(&self.fd, event.wd());
                }
                continue;
            }
            let Some(name) = event.file_name().and_then(|n| n.to_str().ok()) else { continue };
            let key = format!("{dir}/{name}");
            // A name that came or went may have been a directory (or a
            // symlink to one) above cached files; contents and attributes
            // of a directory matter to what is beneath it.
            let renamed = flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO | ReadFlags::DELETE);
            if renamed {
                self.forget_beneath(&mut dirs, &key);
            }
            stale.push(Stale::Path { key, beneath: renamed || flags.contains(ReadFlags::ISDIR) });
        }
        if !stale.is_empty() {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        stale
    }

    /// Drops the watches of `key` and the directories under it: the name
    /// now leads elsewhere (or nowhere), so the next fill beneath it
    /// watches what it leads to, and the old directories' events stop.
    fn forget_beneath(&self, dirs: &mut Dirs, key: &str) {
        let under = format!("{key}/");
        dirs.by_key.retain(|k, wd| {
            let gone = k == key || k.starts_with(&under);
            if let (true, Some(wd)) = (gone, wd) {
                // Its IN_IGNORED follows; until then its events still name the old key.
                let _ = inotify::remove_watch(&self.fd, *wd);
            }
            !gone
        });
    }
}

/// Filesystems whose files can change without this kernel seeing it, so
/// without an inotify event (statfs `f_type`).
pub(crate) fn remote_filesystem(file: &std::fs::File) -> bool {
    const NFS: i64 = 0x6969;
    const SMB: i64 = 0x517b;
    const CIFS: i64 = 0xff53_4d42u32 as i32 as i64;
    const SMB2: i64 = 0xfe53_4d42u32 as i32 as i64;
    const FUSE: i64 = 0x6573_5546;
    const V9FS: i64 = 0x0102_1997;
    const CEPH: i64 = 0x00c3_6400;
    const AFS: i64 = 0x5346_414f;
    const CODA: i64 = 0x7375_7245;
    const OCFS2: i64 = 0x7461_636f;
    const GFS2: i64 = 0x0116_1970;
    match rustix::fs::fstatfs(file) {
        #[allow(clippy::unnecessary_cast)] // f_type's type differs between targets
        Ok(fs) => {
            let kind = fs.f_type as i64;
            let kind32 = kind as i32 as i64;
            [NFS, SMB, CIFS, SMB2, FUSE, V9FS, CEPH, AFS, CODA, OCFS2, GFS2].contains(&kind32)
        }
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn watch(dir: &std::path::Path) -> (Watch, OwnedFd) {
        let root = rustix::fs::open(
            dir,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        (Watch::new(root.as_fd(), Arc::new(ErrorLog::stderr())).unwrap(), root)
    }

    fn keys(stale: &[Stale]) -> Vec<(String, bool)> {
        stale
            .iter()
            .map(|s| match s {
                Stale::Path { key, beneath } => (key.clone(), *beneath),
                Stale::Everything => ("*".into(), true),
            })
            .collect()
    }

    #[test]
    fn a_rewrite_a_rename_over_and_a_removal_are_each_seen() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::write(tmp.path().join("a/b/f.html"), "one").unwrap();
        let (w, _root) = watch(tmp.path());
        let t = w.ticket("/a/b/f.html");
        assert!(t.watched);
        assert!(w.drain().is_empty());

        fs::write(tmp.path().join("a/b/f.html"), "two").unwrap();
        assert!(keys(&w.drain()).contains(&("/a/b/f.html".into(), false)));
        assert!(w.epoch() > t.epoch, "a fill that overlapped the change is not trusted");

        fs::write(tmp.path().join("a/b/new"), "three").unwrap();
        let _ = w.drain();
        fs::rename(tmp.path().join("a/b/new"), tmp.path().join("a/b/f.html")).unwrap();
        assert!(keys(&w.drain()).contains(&("/a/b/f.html".into(), true)));

        fs::remove_file(tmp.path().join("a/b/f.html")).unwrap();
        assert!(keys(&w.drain()).contains(&("/a/b/f.html".into(), true)));
    }

    #[test]
    fn a_directory_renamed_above_a_file_is_seen_and_rewatched() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::write(tmp.path().join("a/b/f.html"), "one").unwrap();
        let (w, _root) = watch(tmp.path());
        assert!(w.ticket("/a/b/f.html").watched);
        fs::rename(tmp.path().join("a"), tmp.path().join("gone")).unwrap();
        let stale = keys(&w.drain());
        assert!(stale.contains(&("/a".into(), true)), "{stale:?}");
        // A new /a is watched anew when something beneath it is cached.
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::write(tmp.path().join("a/b/f.html"), "two").unwrap();
        let _ = w.drain();
        assert!(w.ticket("/a/b/f.html").watched);
        fs::write(tmp.path().join("a/b/f.html"), "three").unwrap();
        assert!(keys(&w.drain()).contains(&("/a/b/f.html".into(), false)));
    }

    #[test]
    fn local_filesystems_are_not_remote() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("x");
        fs::write(&f, "x").unwrap();
        assert!(!remote_filesystem(&fs::File::open(&f).unwrap()));
    }
}
