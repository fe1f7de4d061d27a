//! Model-level guarantees that are not per-request conformance: the
//! registry as `modus models` gives it, and model-specific limits.

use std::time::Duration;

use testkit::{run, Client, Docroot, Server};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// `modus models --names` is the registry, for scripts (bench/lib.sh) and
/// the lab; `modus models` lists the same models. The conformance suite
/// and the reload tests are written from the registry itself
/// (`models::each_model!`), so no model can skip them.
#[test]
fn models_names_is_the_registry() {
    let out = run(BIN, ["models", "--names"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", out.stderr);
    let names: Vec<&str> = out.stdout.lines().collect();
    let registry: Vec<&str> = models::MODELS.iter().map(|m| m.name).collect();
    assert_eq!(names, registry);
    let out = run(BIN, ["models"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", out.stderr);
    let listed: Vec<&str> = out.stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(listed, registry);
}

/// `modus models --json`, which scripts read, says what each model
/// declares in its file: name, paper name, summary, capabilities, knobs.
#[test]
fn models_json_is_each_models_declaration() {
    let out = run(BIN, ["models", "--json"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", out.stderr);
    let listed: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let listed = listed.as_array().expect("a list");
    assert_eq!(listed.len(), models::MODELS.len());
    for (json, model) in listed.iter().zip(models::MODELS) {
        assert_eq!(json["name"], model.name);
        assert_eq!(json["paper_name"], model.paper_name);
        assert_eq!(json["summary"], model.summary);
        for (cap, on) in model.caps.named() {
            assert_eq!(json["caps"][cap], on, "{} {cap}", model.name);
        }
        let knobs: Vec<&str> = model.knobs.iter().map(|k| k.flag()).collect();
        assert_eq!(json["knobs"], serde_json::json!(knobs), "{}", model.name);
    }
    assert_eq!(listed[5]["name"], "perchild");
    assert_eq!(listed[5]["caps"]["forks"], true);
    assert_eq!(
        listed[5]["knobs"],
        serde_json::json!(["processes", "min-spare", "max-spare", "threads-per-child"])
    );
}

/// A docroot whose `/cgi-bin/busy` keeps its thread for `secs` seconds (an
/// idle keep-alive connection holds no thread: it waits in the gate), and
/// the flag that serves it.
fn busy_root(secs: u32) -> (Docroot, String) {
    let root = Docroot::standard();
    let script = format!("#!/bin/sh\nsleep {secs}\nprintf 'Content-Type: text/plain\\n\\ndone\\n'\n");
    root.executable("scripts/busy", &script);
    let dir = root.join("scripts").to_str().unwrap().to_string();
    (root, dir)
}

/// `per-request` answers a request beyond `--max-threads` with a 503
/// instead of starting more threads.
#[test]
fn per_request_cap_answers_503() {
    let (root, scripts) = busy_root(3);
    let srv = Server::start(BIN, "per-request", root.path(), &["--max-threads", "1", "--cgi-dir", &scripts]);
    // The first client's script holds the only thread.
    let mut first = srv.client();
    first.send("GET /cgi-bin/busy HTTP/1.1\r\nHost: x\r\n\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let mut second = srv.client();
    second.send("GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let refused = second.read_response("GET");
    refused.assert_status(503);
    assert_eq!(refused.header("Retry-After"), Some("1"));
    assert!(refused.connection_has("close"));
    assert!(second.is_closed());
    // Once the script is done, its thread ends and service resumes.
    first.read_response("GET").assert_status(200);
    let mut served = None;
    for _ in 0..100 {
        let r = srv.client().request("GET", "/hello.txt", &[]);
        if r.status == 200 {
            served = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(served.is_some(), "the thread of a finished request was never released");
}

/// A client is served once per request even when the model had to refuse
/// others: the refused connections leave no thread or descriptor behind.
#[test]
fn per_request_recovers_after_many_refusals() {
    let (root, scripts) = busy_root(4);
    let srv = Server::start(BIN, "per-request", root.path(), &["--max-threads", "2", "--cgi-dir", &scripts]);
    let holders: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = srv.client();
            c.send("GET /cgi-bin/busy HTTP/1.1\r\nHost: x\r\n\r\n");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..50 {
        let mut c = srv.client();
        c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        c.read_response("GET").assert_status(503);
    }
    for mut c in holders {
        c.read_response("GET").assert_status(200);
    }
    let ok = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        srv.client().request("GET", "/hello.txt", &[]).status == 200
    });
    assert!(ok);
}

/// Raises this test process's descriptor limit so it can hold thousands
/// of client sockets (the server raises its own at start).
fn raise_nofile() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Event-driven models hold thousands of idle keep-alive connections
/// without a thread each, and still serve a newcomer (counts, not timing).
fn many_idle_connections(model: &str) {
    const IDLE: usize = 5000;
    assert!(raise_nofile() >= 2 * IDLE as u64 + 100, "this test needs an open-file limit of 10k+");
    let root = Docroot::standard();
    let srv = Server::start(BIN, model, root.path(), &["--keepalive-timeout", "120s"]);
    let mut idle: Vec<Client> = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let mut c = srv.client();
        c.send("GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        idle.push(c);
    }
    for c in &mut idle {
        c.read_response("GET").assert_status(200);
    }
    // A newcomer is served while all of them stay open...
    srv.client().request("GET", "/alphabet.txt", &[]).assert_status(200);
    // ...and the idle ones are still alive and usable, first and last.
    for i in [0, IDLE / 2, IDLE - 1] {
        idle[i].request("GET", "/hello.txt", &[]).assert_status(200);
    }
    // No thread (or buffer-holding task) per connection: the loop and its
    // helpers are a handful of threads however many clients are connected.
    let threads = std::fs::read_dir(format!("/proc/{}/task", srv.pid())).unwrap().count();
    assert!(threads < 32, "{threads} threads for {IDLE} connections");
}

#[test]
fn event_serves_a_newcomer_beside_5000_idle_connections() {
    many_idle_connections("event");
}

#[test]
fn amped_serves_a_newcomer_beside_5000_idle_connections() {
    many_idle_connections("amped");
}

#[test]
fn uring_serves_a_newcomer_beside_5000_idle_connections() {
    many_idle_connections("uring");
}

/// `staged` reports, per stage, how much work passed and how long it
/// waited in the queue before the stage (paper 000's figure 8).
#[test]
fn staged_reports_its_queues() {
    let root = Docroot::standard();
    let mut srv = Server::start(BIN, "staged", root.path(), &[]);
    let mut c = srv.client();
    for _ in 0..10 {
        c.request("GET", "/hello.txt", &[]).assert_status(200);
    }
    drop(c);
    srv.signal(testkit::Signal::Term);
    assert!(srv.wait_exit(Duration::from_secs(20)).success());
    let stderr = srv.stderr();
    for stage in ["read", "data", "write"] {
        let line = stderr
            .lines()
            .find(|l| l.contains(&format!("stage {stage} (threads=")))
            .unwrap_or_else(|| panic!("no report for stage {stage}:\n{stderr}"));
        let items: u64 =
            line.split(": ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap();
        assert!(items >= 10, "stage {stage} saw {items} items: {line}");
        assert!(line.contains("mean wait") && line.contains("queue now 0"), "{line}");
    }
}

/// `--max-cgi` caps the scripts one process runs at once: beyond it a
/// request gets 503 with `Retry-After` at once (no queueing behind a script
/// that may run for minutes), and service resumes when a script ends. Every
/// model with several connections per process; a prefork child serves one
/// connection at a time, so there the cap is `--max-clients`.
#[test]
fn max_cgi_answers_503_beyond_the_cap() {
    let root = Docroot::standard();
    let dir = tempfile::Builder::new().prefix("modus-maxcgi-").tempdir().unwrap();
    for (name, text) in [
        ("stall", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nstart\\n'\nexec sleep 30\n"),
        ("hello", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nhello\\n'\n"),
    ] {
        let path = dir.path().join(name);
        testkit::write_executable(&path, text, 0o755);
    }
    let cgi_dir = dir.path().to_str().unwrap();
    let one_process: &[(&str, &[&str])] = &[
        ("per-request", &[]),
        ("pool", &[]),
        ("staged", &[]),
        ("event", &[]),
        ("amped", &[]),
        ("uring", &[]),
        ("worker", &["--threads-per-child", "8", "--max-clients", "8"]),
        ("perchild", &["--processes", "1"]),
    ];
    for (model, extra) in one_process {
        let mut args = vec!["--cgi-dir", cgi_dir, "--max-cgi", "1", "--cgi-timeout", "2s"];
        args.extend_from_slice(extra);
        let srv = Server::start(BIN, model, root.path(), &args);
        // The only slot: a script that printed its head and then stalls.
        let mut holder = srv.client();
        holder.send("GET /cgi-bin/stall HTTP/1.1\r\nHost: x\r\n\r\n");
        holder.wait_for_bytes(12);
        let refused = srv.client().request("GET", "/cgi-bin/hello", &[]);
        refused.assert_status(503);
        assert_eq!(refused.header("Retry-After"), Some("1"), "{model}\n{}", refused.describe());
        // Static files are not capped.
        srv.client().request("GET", "/hello.txt", &[]).assert_status(200);
        // The stalled script is killed by --cgi-timeout; its slot comes back.
        drop(holder);
        let mut served = false;
        for _ in 0..200 {
            let r = srv.client().request("GET", "/cgi-bin/hello", &[]);
            if r.status == 200 {
                assert_eq!(r.body_str(), "hello\n", "{model}");
                served = true;
                break;
            }
            r.assert_status(503);
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(served, "{model}: the slot of a finished script never came back");
    }
}

/// `--max-connections` bounds the connections a model without a thread or
/// process per connection holds: at the cap it accepts nothing more, so a
/// newcomer waits in the kernel's backlog unanswered (the handshake itself
/// completes there) while the holders keep being served, and it is served
/// once some of them close.
fn connection_cap(model: &str, extra: &[&str]) {
    use std::io::Read;
    const CAP: usize = 20;
    let root = Docroot::standard();
    let cap = CAP.to_string();
    let mut args = vec!["--max-connections", cap.as_str(), "--keepalive-timeout", "120s"];
    args.extend_from_slice(extra);
    let mut srv = Server::start(BIN, model, root.path(), &args);
    let mut holders: Vec<Client> = (0..CAP)
        .map(|_| {
            let mut c = srv.client();
            c.request("GET", "/hello.txt", &[]).assert_status(200);
            c
        })
        .collect();
    let mut waiting = srv.client();
    waiting.send("GET /alphabet.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    waiting.stream().set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut byte = [0u8; 1];
    match waiting.stream().read(&mut byte) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
        other => panic!("{model}: connection {} beyond the cap of {CAP} got {other:?}", CAP + 1),
    }
    // The held connections are still served: the cap stops accepting only.
    for i in [0, CAP - 1] {
        holders[i].request("GET", "/hello.txt", &[]).assert_status(200);
    }
    // Slots freed by closed connections let the waiting one in.
    holders.truncate(CAP - 5);
    waiting.stream().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = waiting.read_response("GET");
    r.assert_status(200);
    assert_eq!(r.body_str(), "abcdefghijklmnopqrstuvwxyz", "{model}");
    holders.push(waiting);
    // The rest of the freed slots take newcomers; the holders carry on.
    for _ in 0..4 {
        srv.client().request("GET", "/hello.txt", &[]).assert_status(200);
    }
    holders[0].request("GET", "/hello.txt", &[]).assert_status(200);
    // At the cap again, with one more waiting, a graceful stop still ends
    // the server: the full acceptor or loop notices it.
    while holders.len() < CAP {
        let mut c = srv.client();
        c.request("GET", "/hello.txt", &[]).assert_status(200);
        holders.push(c);
    }
    let mut waiting = srv.client();
    waiting.send("GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    srv.signal(testkit::Signal::Term);
    assert!(srv.wait_exit(Duration::from_secs(20)).success(), "{model}: {}", srv.stderr());
}

#[test]
fn event_holds_at_most_max_connections() {
    // Two loops: the cap is split between them, and the total still holds.
    connection_cap("event", &["--workers", "2"]);
}

#[test]
fn amped_holds_at_most_max_connections() {
    connection_cap("amped", &[]);
}

#[test]
fn uring_holds_at_most_max_connections() {
    // Two loops, as for event: each cancels its accept at its share.
    connection_cap("uring", &["--workers", "2"]);
}

#[test]
fn staged_holds_at_most_max_connections() {
    connection_cap("staged", &[]);
}

/// The server's peak resident memory (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// A chunked request body is read whole before its script starts (the
/// script is told CONTENT_LENGTH), but past memory it goes to a temp file:
/// 48 MiB reach the script intact while the server's peak memory stays
/// below the body's size (collected in memory, it held all of it and more).
fn a_large_chunked_body_reaches_the_script_in_constant_memory(model: &str) {
    use std::io::Write;
    const BODY: usize = 48 << 20;
    let root = Docroot::standard();
    root.executable(
        "scripts/sum",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\necho \"$CONTENT_LENGTH\"\ncksum\n",
    );
    let scripts = root.join("scripts").to_str().unwrap().to_string();
    let srv = Server::start(BIN, model, root.path(), &["--cgi-dir", &scripts, "--max-body", "64MiB"]);
    srv.client().request("GET", "/cgi-bin/sum", &[]).assert_status(200);
    let before = peak_rss(srv.pid());

    let piece: Vec<u8> = (0..65_536u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let mut c = srv.client();
    c.send("POST /cgi-bin/sum HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for _ in 0..BODY / piece.len() {
        c.send([format!("{:x}\r\n", piece.len()).as_bytes(), &piece, b"\r\n"].concat());
    }
    c.send("0\r\n\r\n");
    let r = c.read_response("POST");
    r.assert_status(200);

    let mut cksum = std::process::Command::new("cksum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("cksum (coreutils)");
    let mut stdin = cksum.stdin.take().unwrap();
    for _ in 0..BODY / piece.len() {
        stdin.write_all(&piece).unwrap();
    }
    drop(stdin);
    let want = String::from_utf8(cksum.wait_with_output().unwrap().stdout).unwrap();
    assert_eq!(r.body_str(), format!("{BODY}\n{want}"), "what the script was given");

    let peak = peak_rss(srv.pid());
    assert!(
        peak < before + (BODY as u64) / 2,
        "peak RSS {} MiB (was {} MiB) for a {} MiB body",
        peak >> 20,
        before >> 20,
        BODY >> 20
    );
    // The connection goes on.
    c.request("GET", "/hello.txt", &[]).assert_status(200);
}

#[test]
fn event_spools_a_large_chunked_body() {
    a_large_chunked_body_reaches_the_script_in_constant_memory("event");
}

#[test]
fn pool_spools_a_large_chunked_body() {
    a_large_chunked_body_reaches_the_script_in_constant_memory("pool");
}

/// A chunked body that cannot be spooled (here: `TMPDIR` does not exist)
/// gets a 500 and an error-log line that says where and why; the server
/// goes on serving, and a small body still needs no file.
#[test]
fn a_body_that_cannot_be_spooled_is_500_and_says_why() {
    let root = Docroot::standard();
    root.executable(
        "scripts/sum",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\necho \"$CONTENT_LENGTH\"\n",
    );
    let scripts = root.join("scripts").to_str().unwrap().to_string();
    let srv = Server::builder(BIN)
        .model("event")
        .root(root.path())
        .args(["--cgi-dir", &scripts])
        .env("TMPDIR", "/nonexistent/modus-spool")
        .start();
    let chunked = |len: usize| {
        let mut req = b"POST /cgi-bin/sum HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        req.extend_from_slice(format!("{len:x}\r\n").as_bytes());
        req.extend(std::iter::repeat_n(b'a', len));
        req.extend_from_slice(b"\r\n0\r\n\r\n");
        req
    };
    let mut c = srv.client();
    c.send(chunked(200_000));
    let r = c.read_response("POST");
    r.assert_status(500);
    let says = "cannot spool it to a temp file in /nonexistent/modus-spool";
    let log = srv.stderr_once_it_says(says);
    assert!(log.contains(says), "the error log says why: {log}");
    let mut c = srv.client();
    c.send(chunked(1_000));
    let r = c.read_response("POST");
    r.assert_status(200);
    assert_eq!(r.body_str(), "1000\n");
}

/// Drops `path`'s clean pages from the page cache; whether it worked (it
/// does on ext4; tmpfs keeps every page).
fn evict(path: &std::path::Path) -> bool {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    let mut byte = [0u8; 1];
    let probe = rustix::io::preadv2(
        &file,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        0,
        rustix::io::ReadWriteFlags::NOWAIT,
    );
    probe == Err(rustix::io::Errno::AGAIN)
}

/// The windows `amped`'s helpers read ahead after a reply's first
/// (`/status.json`, queue `warm-ahead`).
fn warm_trips(admin: std::net::SocketAddr) -> u64 {
    let body = testkit::get_once(admin, "/status.json").2;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["queues"]["warm-ahead"]["items"].as_u64().expect("amped reports its warm-ahead queue")
}

/// Sends `request` for part of `big.bin` and reads the `len` bytes of the
/// body, calling `midway` after the first MiB of it.
fn fetch_body(srv: &Server, request: &str, len: usize, midway: impl FnOnce()) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(srv.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 20"), "{head}");
    assert!(head.contains(&format!("Content-Length: {len}\r\n")), "{head}");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body[..1 << 20]).unwrap();
    midway();
    s.read_exact(&mut body[1 << 20..]).unwrap();
    body
}

/// `amped` sends a large file in warm-ahead windows: when the next window
/// holds a cold page, a helper reads it in before the loop sends it (the
/// loop's `sendfile` never waits for the disk). A 20 MiB file with 256 KiB
/// windows, its pages dropped while it is being sent, still arrives byte
/// for byte, whole and as a range, and the helpers' warm-ahead trips are
/// counted; a hot file costs none. (The bytes a client has not read yet,
/// a few MiB in the sockets' buffers on loopback, are sent before the drop;
/// the test drops after the first MiB, so the last 10 or more go through
/// the windows.)
fn amped_warms_as_it_sends(schedule: &str) {
    let root = Docroot::new();
    let data = testkit::pseudo_random_bytes(20 << 20, 15);
    root.file("big.bin", &data);
    let path = root.join("big.bin");
    let srv = Server::builder(BIN)
        .model("amped")
        .root(root.path())
        .args(["--admin", "127.0.0.1:0", "--schedule", schedule, "--workers", "1"])
        .env("MODUS_AMPED_WARM", (256u32 << 10).to_string())
        .env("MODUS_AMPED_WARM_AHEAD", "1")
        // Without the kernel's read-ahead (up to `read_ahead_kb` per file, 8
        // MiB here) what the test drops stays dropped: no read in flight
        // brings it back, so the windows after the drop are certainly cold.
        .env("MODUS_AMPED_READAHEAD", "0")
        .start();
    let admin = srv.announced("admin");

    // Hot: every window's probe finds its pages, and no helper is asked.
    std::fs::read(&path).unwrap();
    let body = fetch_body(&srv, "GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n", data.len(), || {});
    testkit::assert_bytes_eq(&body, &data, "the hot file");
    assert_eq!(warm_trips(admin), 0, "a hot file is sent without helper trips");

    // Cold from the second MiB on: helpers read the windows ahead.
    let mut evicted = evict(&path);
    let body = fetch_body(&srv, "GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n", data.len(), || {
        evicted &= evict(&path);
    });
    testkit::assert_bytes_eq(&body, &data, "the file, read ahead in windows");
    let whole = warm_trips(admin);

    let range = "GET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=1000-15000999\r\n\r\n";
    evicted &= evict(&path);
    let body = fetch_body(&srv, range, 15_000_000, || evicted &= evict(&path));
    testkit::assert_bytes_eq(&body, &data[1000..15_001_000], "the range, read ahead in windows");
    let ranged = warm_trips(admin);
    if evicted {
        assert!(whole > 0, "the cold windows of the file went to the helpers");
        assert!(ranged > whole, "the cold windows of the range went to the helpers");
    } else {
        eprintln!("page eviction does not work here: the helpers' trips ({ranged}) are not checked");
    }
}

#[test]
fn amped_warms_as_it_sends_fifo() {
    amped_warms_as_it_sends("fifo");
}

#[test]
fn amped_warms_as_it_sends_srpt() {
    amped_warms_as_it_sends("srpt");
}
