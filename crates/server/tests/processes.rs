//! The process models (`prefork`, `worker`, `perchild`): what the
//! conformance suite cannot see from outside one connection — children
//! replaced after SIGKILL, spare-count bounds after a burst, access-log
//! lines from many processes, and stops that leave no process behind.
//!
//! Children are found through /proc (`ppid` in `/proc/PID/stat`). Waits are
//! bounded polls; nothing asserts on elapsed time.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use testkit::{Client, Docroot, Server, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// The models that run connections in child processes (the registry's `Caps::forks`).
fn process_models() -> impl Iterator<Item = &'static str> {
    models::MODELS.iter().filter(|m| m.caps.forks).map(|m| m.name)
}
/// Generous: the master acts once a second, and debug builds on a loaded
/// 2-core machine are slow.
const PATIENCE: Duration = Duration::from_secs(30);

fn serve(model: &str, root: &Docroot, args: &[&str]) -> Server {
    Server::start(BIN, model, root.path(), args)
}

/// `(pid, ppid, state)` of every process, from /proc/*/stat.
fn processes() -> Vec<(u32, u32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let rest = &stat[stat.rfind(')')? + 2..];
        let mut fields = rest.split(' ');
        let state = fields.next()?.chars().next()?;
        let ppid = fields.next()?.parse().ok()?;
        Some((pid, ppid, state))
    })
    .collect()
}

/// The live (non-zombie) children of `pid`.
fn children(pid: u32) -> BTreeSet<u32> {
    processes()
        .into_iter()
        .filter(|&(_, ppid, state)| ppid == pid && state != 'Z')
        .map(|(p, _, _)| p)
        .collect()
}

/// Zombie children of `pid` (the master must never leave any for long).
fn zombies(pid: u32) -> BTreeSet<u32> {
    processes()
        .into_iter()
        .filter(|&(_, ppid, state)| ppid == pid && state == 'Z')
        .map(|(p, _, _)| p)
        .collect()
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

fn kill(sig: &str, pid: u32) {
    let status = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().expect("run kill");
    assert!(status.success(), "kill {sig} {pid}: {status:?}");
}

/// Polls `probe` until it returns `Some`, for at most [`PATIENCE`].
#[track_caller]
fn eventually<T>(what: &str, srv: &Server, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}\nstderr:\n{}", srv.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[track_caller]
fn assert_serves(srv: &Server) {
    let r = srv.client().request("GET", "/hello.txt", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), "Hello, world!\n");
}

/// Stops the server with SIGTERM; asserts exit 0 and that none of `kids`
/// (nor any other child) is left.
#[track_caller]
fn stop_cleanly(srv: &mut Server, kids: &BTreeSet<u32>) {
    srv.signal(Signal::Term);
    let status = srv.wait_exit(PATIENCE);
    assert!(status.success(), "exit status after SIGTERM: {status:?}\n{}", srv.stderr());
    let left: Vec<_> = kids.iter().filter(|&&k| alive(k)).collect();
    assert!(left.is_empty(), "children still alive after the master exited: {left:?}");
    assert!(children(srv.pid()).is_empty() && zombies(srv.pid()).is_empty());
}

#[test]
fn a_child_killed_with_sigkill_is_reaped_and_replaced() {
    for model in process_models() {
        let root = Docroot::standard();
        // prefork: 3 idle processes; worker: 1 child of 2 threads covers
        // min-spare 2; perchild: 2 processes.
        let mut srv =
            serve(model, &root, &["--min-spare", "2", "--max-spare", "3", "--threads-per-child", "2"]);
        let want = match model {
            "prefork" => 2,
            "worker" => 1,
            _ => 2,
        };
        let before = eventually("the first children", &srv, || {
            let kids = children(srv.pid());
            (kids.len() == want).then_some(kids)
        });
        assert_serves(&srv);
        let victim = *before.iter().next().unwrap();
        kill("-KILL", victim);
        let after = eventually("a replacement child", &srv, || {
            let kids = children(srv.pid());
            (kids.len() >= want && !kids.contains(&victim)).then_some(kids)
        });
        assert!(after.difference(&before).count() >= 1, "{model}: no new child: {before:?} → {after:?}");
        // Reaped, not left as a zombie.
        eventually("the killed child reaped", &srv, || (!alive(victim)).then_some(()));
        assert_serves(&srv);
        stop_cleanly(&mut srv, &after);
    }
}

/// The child of `master` whose descriptors include the server side of the
/// client connection `client` (matched by socket inode in /proc/net/tcp).
fn child_serving(master: u32, client: &TcpStream) -> Option<u32> {
    let local = client.local_addr().ok()?;
    let peer = client.peer_addr().ok()?;
    // /proc/net/tcp prints `0100007F:1F90` (address little-endian on x86, port big-endian);
    // the ports alone identify a loopback connection here.
    let (server_port, client_port) = (format!(":{:04X}", peer.port()), format!(":{:04X}", local.port()));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 9 && f[1].ends_with(&server_port) && f[2].ends_with(&client_port))
            .then(|| f[9].to_string())
    })?;
    let wanted = format!("socket:[{inode}]");
    children(master).into_iter().find(|kid| {
        std::fs::read_dir(format!("/proc/{kid}/fd")).is_ok_and(|fds| {
            fds.filter_map(Result::ok)
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_str() == Some(wanted.as_str())))
        })
    })
}

/// Kills, with SIGKILL, the prefork child that is serving a known keep-alive
/// connection while other clients keep the server busy: only that
/// connection is lost; every other request succeeds, and requests keep
/// being served after the kill.
#[test]
fn prefork_child_killed_under_load_loses_only_its_own_connection() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let root = Docroot::standard();
    let mut srv =
        serve("prefork", &root, &["--min-spare", "4", "--max-spare", "8", "--keepalive-timeout", "60s"]);
    eventually("the first children", &srv, || (children(srv.pid()).len() >= 4).then_some(()));

    let mut victim_client = srv.client();
    victim_client.request("GET", "/hello.txt", &[]).assert_status(200);
    let victim = eventually("the child holding the connection", &srv, || {
        child_serving(srv.pid(), victim_client.stream())
    });

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let addr = srv.addr();
    let load: Vec<_> = (0..3)
        .map(|_| {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || {
                // Bounded: at most 20k requests per thread even if the main thread dies.
                for _ in 0..20_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let served = Client::try_connect(addr).is_ok_and(|mut c| {
                        c.try_send("GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                            .is_ok()
                            && c.try_read_response("GET")
                                .is_ok_and(|r| r.status == 200 && r.body_str() == "Hello, world!\n")
                    });
                    let counter = if served { &ok } else { &failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    eventually("load running", &srv, || (ok.load(Ordering::Relaxed) >= 100).then_some(()));
    kill("-KILL", victim);
    let served_at_kill = ok.load(Ordering::Relaxed);
    // The connection that child was serving is gone with it...
    let answered = victim_client.try_send("GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").is_ok()
        && victim_client.try_read_response("GET").is_ok();
    assert!(!answered, "the killed child's connection still answered");
    // ...everyone else is still being served, and a replacement is forked.
    eventually("requests after the kill", &srv, || {
        (ok.load(Ordering::Relaxed) >= served_at_kill + 300).then_some(())
    });
    eventually("the killed child reaped", &srv, || (!alive(victim)).then_some(()));
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "requests lost besides the killed child's connection");
    // The master tops the idle children back up to --min-spare.
    let kids = eventually("min-spare idle children again", &srv, || {
        let kids = children(srv.pid());
        (kids.len() >= 4).then_some(kids)
    });
    assert!(!kids.contains(&victim), "{kids:?}");
    stop_cleanly(&mut srv, &kids);
}

/// Opens `n` connections that each send one request and then stay open
/// (keep-alive), holding a worker each once served.
fn hold_connections(srv: &Server, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(srv.addr()).expect("connect");
            s.write_all(b"GET /cgi-bin/busy HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("send");
            s
        })
        .collect()
}

/// Waits for the held requests' answers (the script ends on its own: a
/// script killed when its client left might leave a reaper thread behind,
/// which the thread counts would see), then closes the connections.
fn finish(held: Vec<TcpStream>) {
    use std::io::Read;
    for mut s in held {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(5).any(|w| w == b"done\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    }
}

/// The standard docroot with a script that keeps its worker busy for 8 s
/// (`/cgi-bin/busy`, what [`hold_connections`] asks for: a connection
/// merely open holds no thread of the models that read heads in a gate),
/// and the flag that serves it.
fn busy_root() -> (Docroot, String) {
    let root = Docroot::standard();
    root.executable("scripts/busy", "#!/bin/sh\nsleep 8\nprintf 'Content-Type: text/plain\\n\\ndone\\n'\n");
    let dir = root.join("scripts").to_str().unwrap().to_string();
    (root, dir)
}

/// `--start-servers` forks that many children at once (Apache's
/// StartServers), beyond what `--min-spare` alone would start.
#[test]
fn start_servers_forks_that_many_children_at_start() {
    let root = Docroot::standard();
    let mut srv = serve("prefork", &root, &["--start-servers", "6", "--min-spare", "1", "--max-spare", "10"]);
    let kids = eventually("six children", &srv, || {
        let kids = children(srv.pid());
        (kids.len() == 6).then_some(kids)
    });
    assert_serves(&srv);
    stop_cleanly(&mut srv, &kids);
}

/// A reload forks the new generation as strong as the old one was, not at
/// the start count: the old children's clients come back at once, and
/// growing from one child at 1, 2, 4… a second left them seconds in the
/// backlog (wrk timeouts across reloads).
#[test]
fn a_reload_forks_as_many_children_as_were_serving() {
    let (root, scripts) = busy_root();
    let mut srv = serve(
        "prefork",
        &root,
        &["--min-spare", "1", "--max-spare", "2", "--start-servers", "1", "--cgi-dir", &scripts],
    );
    let pid = srv.pid();
    let held = hold_connections(&srv, 6);
    let old = eventually("six busy children and a spare", &srv, || {
        let kids = children(pid);
        (kids.len() >= 7).then_some(kids)
    });
    srv.signal(Signal::Hup);
    eventually("the reload", &srv, || srv.stderr().contains("SIGHUP: configuration reloaded").then_some(()));
    // The master forks the whole generation before it says so.
    let new: Vec<u32> = children(pid).difference(&old).copied().collect();
    assert!(
        new.len() >= 6,
        "{} children in the new generation after a reload of a generation of {}",
        new.len(),
        old.len()
    );
    assert_serves(&srv);
    finish(held);
    let kids = children(pid);
    stop_cleanly(&mut srv, &kids);
}

#[test]
fn prefork_keeps_spare_processes_within_bounds() {
    let (root, scripts) = busy_root();
    let mut srv = serve(
        "prefork",
        &root,
        &[
            "--min-spare",
            "2",
            "--max-spare",
            "3",
            "--max-clients",
            "6",
            "--keepalive-timeout",
            "60s",
            "--cgi-dir",
            &scripts,
        ],
    );
    let pid = srv.pid();
    eventually("2 idle children", &srv, || (children(pid).len() == 2).then_some(()));

    // A burst larger than MaxClients: every child busy, so the master grows
    // the pool (1, 2, 4 a second) up to --max-clients and no further.
    let held = hold_connections(&srv, 8);
    let mut most = 0;
    eventually("max-clients children", &srv, || {
        let n = children(pid).len();
        most = most.max(n);
        assert!(n <= 6, "{n} children > --max-clients 6");
        (n == 6).then_some(())
    });
    // Still capped a little later.
    for _ in 0..20 {
        assert!(children(pid).len() <= 6);
        std::thread::sleep(Duration::from_millis(50));
    }

    // Load gone: idle children above --max-spare are retired (one a
    // second) until 2..=3 are left.
    finish(held);
    eventually("idle children back within --min-spare..--max-spare", &srv, || {
        let n = children(pid).len();
        assert!(n <= 6, "{n} children > --max-clients 6");
        (2..=3).contains(&n).then_some(())
    });
    // A child retired a moment ago is a zombie until the master's next
    // turn reaps it; one left longer is a leak.
    eventually("retired children reaped, not left as zombies", &srv, || {
        zombies(pid).is_empty().then_some(())
    });
    // A retirement is not a crash: the master knew it was coming.
    assert!(!srv.stderr().contains("unexpectedly"), "a retirement logged as a crash:\n{}", srv.stderr());
    assert_serves(&srv);
    let kids = children(pid);
    stop_cleanly(&mut srv, &kids);
}

#[test]
fn worker_adds_and_retires_whole_children() {
    let (root, scripts) = busy_root();
    // 2 threads per child, spare counted in threads: min 2, max 4 (at least
    // min + threads-per-child), at most 6 threads = 3 children.
    let mut srv = serve(
        "worker",
        &root,
        &[
            "--cgi-dir",
            &scripts,
            "--threads-per-child",
            "2",
            "--min-spare",
            "2",
            "--max-spare",
            "4",
            "--max-clients",
            "6",
            "--keepalive-timeout",
            "60s",
        ],
    );
    let pid = srv.pid();
    eventually("one child", &srv, || (children(pid).len() == 1).then_some(()));
    let held = hold_connections(&srv, 6);
    eventually("3 children (6 threads = --max-clients)", &srv, || {
        let n = children(pid).len();
        assert!(n <= 3, "{n} children > max-clients / threads-per-child");
        (n == 3).then_some(())
    });
    finish(held);
    // 6 idle threads > 4: one child retires, leaving 4 idle threads.
    eventually("back to 2 children", &srv, || {
        let n = children(pid).len();
        assert!(n <= 3);
        (n == 2).then_some(())
    });
    assert_serves(&srv);
    let kids = children(pid);
    stop_cleanly(&mut srv, &kids);
}

#[test]
fn perchild_grows_and_shrinks_threads_within_bounds() {
    let (root, scripts) = busy_root();
    let mut srv = serve(
        "perchild",
        &root,
        &[
            "--cgi-dir",
            &scripts,
            "--processes",
            "1",
            "--threads-per-child",
            "8",
            "--min-spare",
            "1",
            "--max-spare",
            "2",
            "--keepalive-timeout",
            "60s",
        ],
    );
    let pid = srv.pid();
    let child = eventually("the child", &srv, || children(pid).into_iter().next());
    // Besides its workers a child has its main thread and a housekeeping thread.
    let workers = || threads(child).saturating_sub(2);
    eventually("min-spare threads", &srv, || (workers() == 1).then_some(()));
    let held = hold_connections(&srv, 6);
    eventually("a thread per held connection plus a spare", &srv, || {
        let n = workers();
        assert!(n <= 8, "{n} worker threads > --threads-per-child 8");
        (n == 7).then_some(())
    });
    finish(held);
    eventually("idle threads back within --max-spare", &srv, || {
        let n = workers();
        assert!(n <= 8);
        (1..=2).contains(&n).then_some(())
    });
    assert_eq!(children(pid).len(), 1, "perchild keeps --processes processes");
    assert_serves(&srv);
    stop_cleanly(&mut srv, &BTreeSet::from([child]));
}

#[test]
fn access_log_lines_from_many_processes_are_whole_and_all_there() {
    const CLIENTS: usize = 6;
    const PER_CLIENT: usize = 60;
    for model in process_models() {
        let root = Docroot::standard();
        let log = root.base().join(format!("{model}-access.log"));
        let mut srv = serve(
            model,
            &root,
            &[
                "--access-log",
                log.to_str().unwrap(),
                "--min-spare",
                "4",
                "--max-spare",
                "8",
                "--threads-per-child",
                "2",
                "--processes",
                "3",
                "--admin",
                "127.0.0.1:0",
            ],
        );
        eventually("several children", &srv, || (children(srv.pid()).len() >= 2).then_some(()));
        let addr = srv.addr();
        std::thread::scope(|s| {
            for c in 0..CLIENTS {
                s.spawn(move || {
                    for i in 0..PER_CLIENT {
                        // A fresh connection each time, so requests spread
                        // over the processes.
                        let mut client = Client::connect(addr);
                        let r = client.request(
                            "GET",
                            &format!("/alphabet.txt?c={c}&i={i}"),
                            &["Connection: close"],
                        );
                        r.assert_status(200);
                    }
                });
            }
        });
        // The point is several writers: more than one child served requests
        // (the scoreboard's lines are named `pid/worker`; children publish
        // their counts every housekeeping tick).
        let admin = srv.announced("admin");
        eventually("requests served by two children or more", &srv, || {
            let (_, _, body) = testkit::get_once(admin, "/status.json");
            let v: serde_json::Value = serde_json::from_str(&body).ok()?;
            let serving: BTreeSet<&str> = v["workers"]["scoreboard"]
                .as_array()?
                .iter()
                .filter(|l| l["served"].as_u64().unwrap_or(0) > 0)
                .filter_map(|l| l["name"].as_str()?.split('/').next())
                .collect();
            (serving.len() >= 2).then_some(())
        });
        let kids = children(srv.pid());
        stop_cleanly(&mut srv, &kids);

        let text = std::fs::read_to_string(&log).expect("access log");
        let lines: Vec<&str> = text.lines().collect();
        assert!(text.ends_with('\n'), "{model}: last line cut");
        assert_eq!(lines.len(), CLIENTS * PER_CLIENT, "{model}: lines lost or duplicated");
        let mut seen = BTreeSet::new();
        for line in &lines {
            let (prefix, rest) =
                line.split_once(" [").unwrap_or_else(|| panic!("{model}: bad line {line:?}"));
            assert_eq!(prefix, "127.0.0.1 - -", "{model}: bad line {line:?}");
            let (_, rest) = rest.split_once("] \"GET /alphabet.txt?").unwrap_or_else(|| panic!("{line:?}"));
            let (query, rest) = rest.split_once(" HTTP/1.1\" ").unwrap_or_else(|| panic!("{line:?}"));
            assert_eq!(rest, "200 26 \"-\" \"-\"", "{model}: bad line {line:?}");
            assert!(seen.insert(query.to_string()), "{model}: duplicate line {line:?}");
        }
    }
}

#[test]
fn sigusr1_reaches_every_child() {
    for model in process_models() {
        let root = Docroot::standard();
        let log = root.base().join("access.log");
        let rotated = root.base().join("access.log.1");
        let mut srv = serve(
            model,
            &root,
            &[
                "--access-log",
                log.to_str().unwrap(),
                "--min-spare",
                "3",
                "--threads-per-child",
                "1",
                "--processes",
                "3",
            ],
        );
        let kids = eventually("3 children", &srv, || {
            let k = children(srv.pid());
            (k.len() >= 2).then_some(k)
        });
        std::fs::rename(&log, &rotated).unwrap();
        srv.signal(Signal::Usr1);
        // Every child reopens: once the new file exists, wait a little for
        // the slowest, then every request lands in the new file whichever
        // process serves it.
        eventually("a new access.log", &srv, || log.exists().then_some(()));
        std::thread::sleep(Duration::from_millis(500));
        for i in 0..30 {
            let mut c = srv.client();
            c.request("GET", &format!("/hello.txt?after={i}"), &["Connection: close"]).assert_status(200);
        }
        stop_cleanly(&mut srv, &kids);
        let old = std::fs::read_to_string(&rotated).unwrap();
        let new = std::fs::read_to_string(&log).unwrap();
        assert!(!old.contains("after="), "{model}: a child kept writing to the rotated file:\n{old}");
        assert_eq!(new.lines().filter(|l| l.contains("after=")).count(), 30, "{model}:\n{new}");
    }
}

#[test]
fn graceful_stop_finishes_in_flight_requests_and_leaves_no_child() {
    for model in process_models() {
        for sig in [Signal::Term, Signal::Int] {
            let root = Docroot::standard();
            let mut srv = serve(model, &root, &["--keepalive-timeout", "60s"]);
            let kids = eventually("children", &srv, || {
                let k = children(srv.pid());
                (!k.is_empty()).then_some(k)
            });
            // An idle keep-alive connection must not hold the stop up.
            let mut idle = srv.client();
            idle.request("GET", "/hello.txt", &[]).assert_status(200);
            srv.signal(sig);
            let status = srv.wait_exit(PATIENCE);
            assert!(status.success(), "{model} {sig:?}: {status:?}\n{}", srv.stderr());
            assert!(idle.read_to_end_expect_closed().is_empty());
            let left: Vec<_> = kids.iter().filter(|&&k| alive(k)).collect();
            assert!(left.is_empty(), "{model} {sig:?}: children left: {left:?}");
        }
    }
}

#[test]
fn children_do_not_outlive_a_killed_master() {
    for model in process_models() {
        let root = Docroot::standard();
        let mut srv = serve(model, &root, &[]);
        let kids = eventually("children", &srv, || {
            let k = children(srv.pid());
            (!k.is_empty()).then_some(k)
        });
        assert_serves(&srv);
        srv.signal(Signal::Kill);
        srv.wait_exit(PATIENCE);
        eventually("orphans gone (parent-death signal)", &srv, || {
            kids.iter()
                .all(|&k| !alive(k) || processes().iter().any(|&(p, _, s)| p == k && s == 'Z'))
                .then_some(())
        });
    }
}

#[test]
fn children_print_nothing_on_stdout() {
    for model in process_models() {
        let root = Docroot::standard();
        let mut srv =
            serve(model, &root, &["--min-spare", "3", "--threads-per-child", "1", "--processes", "3"]);
        eventually("children", &srv, || (children(srv.pid()).len() >= 2).then_some(()));
        assert_serves(&srv);
        let kids = children(srv.pid());
        stop_cleanly(&mut srv, &kids);
        assert!(srv.first_line().starts_with("listening on "));
        assert_eq!(srv.stdout_lines(), Vec::<String>::new(), "{model}: extra stdout lines");
    }
}
