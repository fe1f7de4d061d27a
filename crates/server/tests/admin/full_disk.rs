//! Issue 34, item 5: the access log on a small tmpfs that fills and empties
//! under load. Every line in the file is whole (none cut, none glued to the
//! next), and the lines in the file plus `log_lines_dropped` are exactly
//! `requests_total`. Needs root to mount the tmpfs; skipped otherwise.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::*;

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0.path()).status();
    }
}

/// Writes `path` until the filesystem is full.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![b'f'; 4096];
    while f.write_all(&chunk).is_ok() {}
    // The last pages' slack, a byte at a time is too slow: 64 bytes at a time.
    while f.write_all(&chunk[..64]).is_ok() {}
}

fn status(admin: SocketAddr) -> Value {
    serde_json::from_str(&get_once(admin, "/status.json").2).unwrap()
}

/// `/status.json` once `done` holds (bounded: 30 s, by count, not by time).
fn wait_for(admin: SocketAddr, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = status(admin);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "never {what}: {v:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn count(v: &Value, name: &str) -> u64 {
    v[name].as_u64().unwrap_or_else(|| panic!("{name} in {v:#}"))
}

/// Whole lines in the log; panics at one that is cut or glued.
fn whole_lines(path: &Path) -> u64 {
    let data = std::fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&data);
    let mut n = 0;
    for line in text.split_inclusive('\n') {
        if !line.ends_with('\n') {
            // The last flush may be under way: an unfinished end is not counted yet.
            break;
        }
        let line = line.trim_end_matches('\n');
        assert!(
            line.starts_with("127.0.0.1 - - [")
                && line.ends_with('"')
                && line.matches("127.0.0.1 - - [").count() == 1,
            "a cut or glued line: {line:?}"
        );
        n += 1;
    }
    n
}

pub fn check(model: &str) {
    let Some(fs) = Tmpfs::mount("4m") else {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    };
    let root = Docroot::standard();
    let log = fs.path().join("access.log");
    let filler = fs.path().join("filler");
    let srv = start(model, &root, &["--access-log", log.to_str().unwrap()]);
    let admin = srv.announced("admin");

    // Load: four keep-alive clients, each request answered 200, until told to stop (a
    // connection the server ends after its 1000th request is replaced).
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let addr = srv.addr();
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, answered) = (stop.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                while !stop.load(Ordering::Relaxed) {
                    let r = c.request("GET", "/hello.txt", &[]);
                    r.assert_status(200);
                    answered.fetch_add(1, Ordering::Relaxed);
                    if r.connection_has("close") {
                        c = Client::connect(addr);
                    }
                }
            })
        })
        .collect();

    let v = wait_for(admin, "200 requests", |v| count(v, "requests_total") >= 200);
    fill(&filler);
    let at_fill = count(&v, "requests_total");
    // Full until lines were dropped and a good many requests more were served.
    let v = wait_for(admin, "dropped lines", |v| {
        count(v, "log_lines_dropped") > 0 && count(v, "requests_total") >= at_fill + 500
    });
    std::fs::remove_file(&filler).unwrap();
    let at_free = count(&v, "requests_total");
    let lines_at_free = whole_lines(&log);
    wait_for(admin, "requests after the disk was freed", |v| count(v, "requests_total") >= at_free + 500);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let answered = answered.load(Ordering::Relaxed);

    // Every request is a whole line in the file or counted as dropped, once the last
    // flushes are in (the log is flushed every 500 ms; children publish every 250 ms).
    let v = wait_for(admin, "requests = lines + dropped", |v| {
        count(v, "requests_total") == answered
            && whole_lines(&log) + count(v, "log_lines_dropped") == answered
    });
    let (lines, dropped) = (whole_lines(&log), count(&v, "log_lines_dropped"));
    assert!(dropped > 0, "{model}: the disk was full");
    assert!(lines > lines_at_free, "{model}: logging resumed once the disk was freed");
    let data = std::fs::read(&log).unwrap();
    assert!(data.ends_with(b"\n"), "{model}: the log ends with a whole line");
    eprintln!("{model}: {answered} requests, {lines} whole lines, {dropped} dropped");
}
