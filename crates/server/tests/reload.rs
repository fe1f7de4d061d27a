//! SIGHUP reads the configuration again (issue 16, item 2), in every model:
//! a new generation of workers serves with the new configuration while the
//! old one finishes its requests; a configuration that does not read, or
//! that changes what only a restart can (the model, the listening address,
//! `--admin`, `--user`), leaves the one in force and the error log says
//! why. Under load, reloads fail no request and lose no log line.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{Server, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// A site in `dir/NAME` with one file, `/x.txt`, saying NAME.
fn site(dir: &Path, name: &str) -> String {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("x.txt"), name).unwrap();
    root.display().to_string()
}

fn write_config(path: &Path, root: &str, extra: &str) {
    std::fs::write(path, format!("root = \"{root}\"\n{extra}")).unwrap();
}

fn start(model: &str, config: &Path, access_log: &Path) -> Server {
    Server::builder(BIN)
        .model(model)
        .args(["--config", &config.display().to_string()])
        .args(["--access-log", &access_log.display().to_string()])
        // Small process models, so a reload forks few children.
        .args(["--min-spare", "2", "--max-spare", "4", "--processes", "2", "--threads-per-child", "8"])
        .start()
}

fn body(srv: &Server) -> String {
    let r = srv.client().request("GET", "/x.txt", &["Connection: close"]);
    r.assert_status(200);
    r.body_str().to_string()
}

fn poll(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn reload_applies_and_refuses(model: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (site(dir.path(), "A"), site(dir.path(), "B"));
    let config = dir.path().join("modus.toml");
    write_config(&config, &a, "");
    let mut srv = start(model, &config, &dir.path().join("access.log"));
    assert_eq!(body(&srv), "A");

    write_config(&config, &b, "");
    srv.signal(Signal::Hup);
    // Until the old workers have seen their stop (a process model's child
    // blocked in accept() looks at it every 250 ms), a connection may still
    // be theirs: then every one is the new generation's.
    assert!(poll(|| (0..20).all(|_| body(&srv) == "B")), "{model}: still the old root\n{}", srv.stderr());
    let log = srv.stderr_once_it_says("SIGHUP: configuration reloaded");
    assert!(log.contains("SIGHUP: configuration reloaded"), "{log}");

    // A file that does not read leaves the configuration in force.
    write_config(&config, &a, "cach-size = \"1MiB\"\n");
    srv.signal(Signal::Hup);
    assert!(
        poll(|| srv.stderr().contains("configuration not reloaded, the one in force stays")
            && srv.stderr().contains("`cach-size`")),
        "{model}: {}",
        srv.stderr()
    );
    assert_eq!(body(&srv), "B", "{model}: a refused reload changed what is served");

    // What only a restart can change is refused, and said.
    write_config(&config, &a, "admin = \"127.0.0.1:0\"\n");
    srv.signal(Signal::Hup);
    assert!(
        poll(|| srv.stderr().contains("--admin changed") && srv.stderr().contains("takes a restart")),
        "{model}: {}",
        srv.stderr()
    );
    assert_eq!(body(&srv), "B");

    srv.signal(Signal::Term);
    let status = srv.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{model}: {status:?}\n{}", srv.stderr());
}

/// Reloads while `modus load` keeps 8 keep-alive connections busy: no
/// failed request, and the access log holds a line for every response.
fn reloads_under_load_lose_nothing(model: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (site(dir.path(), "A"), site(dir.path(), "B"));
    let config = dir.path().join("modus.toml");
    let access_log = dir.path().join("access.log");
    write_config(&config, &a, "");
    let mut srv = start(model, &config, &access_log);
    assert_eq!(body(&srv), "A");
    let url = format!("http://{}/x.txt", srv.addr());
    let load = std::thread::spawn(move || {
        std::process::Command::new(BIN)
            .args(["load", &url, "-c", "8", "-d", "3s", "--json"])
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..5 {
        write_config(&config, if i % 2 == 0 { &b } else { &a }, "");
        srv.signal(Signal::Hup);
        std::thread::sleep(Duration::from_millis(400));
    }
    let out = load.join().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{model}: {e}\n{}", String::from_utf8_lossy(&out.stderr)));
    srv.signal(Signal::Term);
    let status = srv.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{model}: {status:?}\n{}", srv.stderr());
    assert_eq!(srv.stderr().matches("SIGHUP: configuration reloaded").count(), 5, "{}", srv.stderr());
    assert_eq!(report["errors"], 0, "{model}: requests failed across reloads: {report}");
    let requests = report["requests"].as_u64().unwrap();
    assert!(requests > 100, "{model}: {report}");
    // Every response the generator counted has its line, plus the probe's;
    // responses it did not wait for at the end may have theirs too.
    let lines = std::fs::read_to_string(&access_log).unwrap().lines().count() as u64;
    let unfinished = report["unfinished"].as_u64().unwrap_or(0);
    assert!(
        lines > requests && lines <= requests + 1 + unfinished,
        "{model}: {lines} access-log lines for {requests} responses (+1 probe, {unfinished} unfinished)"
    );
}

/// One keep-alive client on a raw socket, sending its next request as soon
/// as the previous response is whole: how `wrk` and a browser use a
/// connection. Counts the requests answered and the requests cut — sent,
/// then the connection ended (end of stream, or a reset) with no response.
/// A server may close a keep-alive connection between requests: a close
/// already there before the next request is sent (end of stream readable
/// before the send) cuts nothing; a close after a response that said
/// `Connection: close` is expected.
fn keep_alive_client(
    addr: std::net::SocketAddr,
    go: &std::sync::atomic::AtomicBool,
) -> (u64, u64, Vec<String>) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let (mut answered, mut cut, mut why) = (0u64, 0u64, Vec::new());
    let mut conn: Option<std::net::TcpStream> = None;
    while go.load(Ordering::Relaxed) {
        let mut c = match conn.take() {
            Some(c) => c,
            None => std::net::TcpStream::connect(addr).unwrap(),
        };
        // Closed while idle: the end of stream is already readable.
        c.set_nonblocking(true).unwrap();
        let mut peek = [0u8; 1];
        let closed = match c.peek(&mut peek) {
            Ok(0) => true,
            Ok(_) => panic!("bytes before a request was sent"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(_) => true,
        };
        c.set_nonblocking(false).unwrap();
        if closed {
            continue;
        }
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        if c.write_all(b"GET /x.txt HTTP/1.1\r\nHost: x\r\n\r\n").is_err() {
            cut += 1;
            why.push("write failed".into());
            continue;
        }
        // The response: a head, then Content-Length bytes.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let whole = loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap_or_else(|| panic!("no content-length: {head}"));
                if got.len() >= end + 4 + len {
                    break Some(head);
                }
            }
            match c.read(&mut buf) {
                Ok(0) => break None,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => {
                    why.push(format!("{e}"));
                    break None;
                }
            }
        };
        match whole {
            Some(head) => {
                assert!(head.starts_with("http/1.1 200"), "{head}");
                answered += 1;
                if !head.contains("connection: close") {
                    conn = Some(c);
                }
            }
            None => {
                cut += 1;
                why.push(format!("no whole response ({} bytes)", got.len()));
            }
        }
    }
    (answered, cut, why)
}

/// Reloads while 16 raw keep-alive clients send requests back to back:
/// every request sent is answered; a retiring generation ends a client's
/// connection only after a response with `Connection: close`, or before
/// the client sends its next request, never with one unanswered.
fn reloads_cut_no_request(model: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (site(dir.path(), "A"), site(dir.path(), "B"));
    let config = dir.path().join("modus.toml");
    write_config(&config, &a, "");
    let mut srv = start(model, &config, &dir.path().join("access.log"));
    assert_eq!(body(&srv), "A");
    let addr = srv.addr();
    let go = std::sync::Arc::new(AtomicBool::new(true));
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let go = go.clone();
            std::thread::spawn(move || keep_alive_client(addr, &go))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..5 {
        write_config(&config, if i % 2 == 0 { &b } else { &a }, "");
        srv.signal(Signal::Hup);
        std::thread::sleep(Duration::from_millis(400));
    }
    go.store(false, Ordering::Relaxed);
    let (mut answered, mut cut, mut why) = (0, 0, Vec::new());
    for client in clients {
        let (a, c, w) = client.join().unwrap();
        answered += a;
        cut += c;
        why.extend(w);
    }
    assert!(poll(|| srv.stderr().matches("SIGHUP: configuration reloaded").count() == 5), "{}", srv.stderr());
    srv.signal(Signal::Term);
    let status = srv.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{model}: {status:?}\n{}", srv.stderr());
    assert_eq!(cut, 0, "{model}: {cut} requests cut across 5 reloads ({answered} answered): {why:?}");
    assert!(answered > 100, "{model}: {answered}");
}

macro_rules! per_model {
    ($($module:ident => $name:literal),* $(,)?) => {$(
        mod $module {
            #[test]
            fn reload_applies_a_new_configuration_and_refuses_a_bad_one() {
                super::reload_applies_and_refuses($name);
            }

            #[test]
            fn reloads_under_load_lose_nothing() {
                super::reloads_under_load_lose_nothing($name);
            }

            #[test]
            fn reloads_cut_no_request() {
                super::reloads_cut_no_request($name);
            }
        }
    )*};
}

// Every model of the registry.
models::each_model!(per_model);
