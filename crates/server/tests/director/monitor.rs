//! `modus monitor`: its log lines, its hysteresis, a cgroup measured, and
//! the director acting on its reports.

use super::*;

/// A fake /proc with a static /proc/stat and loadavg, and `syn` half-open
/// sockets in net/tcp (files replaced atomically).
fn fake_proc(dir: &Path, syn: usize) {
    std::fs::create_dir_all(dir.join("net")).unwrap();
    let write = |rel: &str, text: String| {
        let tmp = dir.join(format!("{rel}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(rel)).unwrap();
    };
    write(
        "stat",
        "cpu  10 0 10 1000 0 0 0 0 0 0\ncpu0 10 0 10 1000 0 0 0 0 0 0\nctxt 100\nprocs_running 1\n".into(),
    );
    write("loadavg", "0.10 0.10 0.10 1/100 200\n".into());
    let mut tcp = String::from("  sl  local_address rem_address   st tx_queue rx_queue\n");
    for i in 0..syn {
        tcp.push_str(&format!("{i}: 0100007F:1F90 0100007F:{:04X} 03 00000000:00000000\n", 1000 + i));
    }
    tcp.push_str("99: 0100007F:1F90 00000000:0000 0A 00000000:00000000\n");
    write("net/tcp", tcp);
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_monitor(director: SocketAddr, proc_root: &Path, backend: &str) -> Killed {
    let child = Command::new(BIN)
        .args(["monitor", "--director", &director.to_string(), "--interval", "40ms", "--backend", backend])
        .args(["--enter", "2", "--leave", "3", "--syn-high", "50", "--syn-low", "5", "--proc-root"])
        .arg(proc_root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Killed(child)
}

/// The monitor says in its error log what it tells the director, and
/// when it cannot reach it.
#[test]
fn monitor_logs_its_transitions() {
    let proc_dir = tempfile::tempdir().unwrap();
    fake_proc(proc_dir.path(), 0);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("monitor.err");
    let child = Command::new(BIN)
        .args(["monitor", "--director", &port.to_string(), "--interval", "40ms", "--backend", "127.0.0.1:9"])
        .args(["--enter", "2", "--leave", "3", "--syn-high", "50", "--syn-low", "5", "--proc-root"])
        .arg(proc_dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let _monitor = Killed(child);
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    eventually("the unreachable line", || {
        log().contains(&format!("cannot reach the director at {port}: Connection refused"))
    });
    let director = TcpListener::bind(port).unwrap();
    let (conn, _) = director.accept().unwrap();
    eventually("the reachable line", || {
        log().contains(&format!("reporting to the director at {port} again"))
    });
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut lines = BufReader::new(conn).lines().map(|l| l.expect("a report line"));
    assert!(lines.next().unwrap().starts_with("MODUS-MONITOR 1 "));
    assert!(lines.next().unwrap().contains(" nice=0.00 "), "niced time is reported apart");
    fake_proc(proc_dir.path(), 80);
    eventually("the overloaded line", || {
        log().contains("[warn] overloaded (cpu=") && log().contains("synrecv=80)")
    });
    fake_proc(proc_dir.path(), 0);
    eventually("the serviceable line", || log().contains("[info] serviceable again (cpu="));
    drop(lines);
}

/// On a shared host whose run queue is long with other users' work, a
/// monitor of the whole host reports OVER; one told the server's cgroup
/// (`--cgroup`, here idle) reports that cgroup's runnable tasks and OK,
/// and its first line says what it measures.
#[test]
fn monitor_measures_the_servers_own_cgroup_when_told() {
    let proc_dir = tempfile::tempdir().unwrap();
    fake_proc(proc_dir.path(), 0);
    std::fs::write(
        proc_dir.path().join("stat"),
        "cpu  10 0 10 1000 0 0 0 0 0 0\ncpu0 10 0 10 1000 0 0 0 0 0 0\nctxt 100\nprocs_running 40\n",
    )
    .unwrap();
    let cgroup = tempfile::tempdir().unwrap();
    std::fs::write(cgroup.path().join("cpu.stat"), "usage_usec 0\n").unwrap();
    std::fs::write(cgroup.path().join("cgroup.threads"), "").unwrap();
    for scoped in [false, true] {
        let director = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut monitor = Command::new(BIN);
        monitor
            .args([
                "monitor",
                "--director",
                &director.local_addr().unwrap().to_string(),
                "--interval",
                "40ms",
            ])
            .args(["--backend", "127.0.0.1:9", "--enter", "2", "--proc-root"])
            .arg(proc_dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if scoped {
            monitor.arg("--cgroup").arg(cgroup.path());
        }
        let mut child = monitor.spawn().unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let _monitor = Killed(child);
        let what =
            if scoped { format!("(cgroup {})", cgroup.path().display()) } else { "(the whole host)".into() };
        assert!(first.contains(&what), "{first}");
        let (conn, _) = director.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut lines = BufReader::new(conn).lines().map(|l| l.expect("a report line"));
        let third = lines.nth(3).unwrap();
        if scoped {
            assert!(third.contains(" OK ") && third.contains(" runq=0 "), "{third}");
        } else {
            assert!(third.contains(" OVER ") && third.contains(" runq=40 "), "{third}");
        }
    }
}

#[test]
fn monitor_reports_with_hysteresis() {
    let proc_dir = tempfile::tempdir().unwrap();
    fake_proc(proc_dir.path(), 0);
    let fake_director = TcpListener::bind("127.0.0.1:0").unwrap();
    let _monitor = spawn_monitor(fake_director.local_addr().unwrap(), proc_dir.path(), "127.0.0.1:9");
    let (conn, _) = fake_director.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut lines = BufReader::new(conn).lines().map(|l| l.expect("a report line"));
    let hello = lines.next().unwrap();
    assert_eq!(hello, "MODUS-MONITOR 1 interval_ms=40 backend=127.0.0.1:9");
    let mut next_with = |syn: usize| -> String {
        let want = format!("synrecv={syn}");
        (0..500).map(|_| lines.next().unwrap()).find(|l| l.ends_with(&want)).expect("a matching report")
    };
    assert!(next_with(0).starts_with("S ") && next_with(0).contains(" OK "));
    // Hot: the first hot sample does not flip the verdict, the second does.
    fake_proc(proc_dir.path(), 80);
    assert!(next_with(80).contains(" OK "), "one hot sample is not enough");
    assert!(next_with(80).contains(" OVER "));
    // Between the marks: the verdict holds.
    fake_proc(proc_dir.path(), 20);
    assert!(next_with(20).contains(" OVER "));
    assert!(next_with(20).contains(" OVER "));
    // Cool: three cool samples in a row to return to OK.
    fake_proc(proc_dir.path(), 0);
    assert!(next_with(0).contains(" OVER "));
    assert!(next_with(0).contains(" OVER "));
    assert!(next_with(0).contains(" OK "));
}

#[test]
fn an_overloaded_backend_is_paused_and_a_silent_monitor_is_unknown() {
    let backend = TestBackend::ok();
    let d = director(
        &[backend.addr],
        &[
            "--monitor-listen",
            "127.0.0.1:0",
            "--queue-timeout",
            "200ms",
            "--max-backend-conns",
            "4",
            "--status-path",
            "/.director",
        ],
    );
    // No monitor yet: unknown, half the limit — not "healthy".
    let st = status(&d);
    assert!(st.contains("monitor=unknown inflight=0 limit=2"), "{st}");
    let mut m = TcpStream::connect(d.announced("monitor")).unwrap();
    m.write_all(
        format!("MODUS-MONITOR 1 interval_ms=5000 backend={}\nS 1 OVER cpu=0.99\n", backend.addr).as_bytes(),
    )
    .unwrap();
    wait_status(&d, "overloaded", |s| s.contains("monitor=overloaded"));
    let said = |line: String| eventually(&line.clone(), || d.stderr().contains(&line));
    said(format!(
        "backend {}: its monitor reports overload (cpu=0.99): no new requests are admitted (limit 0)",
        backend.addr
    ));
    let r = d.client().request("GET", "/", &[]);
    r.assert_status(503);
    assert_eq!(backend.requests().len(), 0, "nothing is admitted to an overloaded backend");
    m.write_all(b"S 2 OK cpu=0.20\n").unwrap();
    wait_status(&d, "serviceable", |s| s.contains("monitor=ok inflight=0 limit=4"));
    said(format!("backend {}: its monitor reports recovery (cpu=0.20): admitting again", backend.addr));
    d.client().request("GET", "/", &[]).assert_status(200);
    drop(m);
    wait_status(&d, "unknown after the monitor left", |s| s.contains("monitor=unknown"));
    said(format!("backend {}: its monitor is silent", backend.addr));
    d.client().request("GET", "/", &[]).assert_status(200);

    // End to end: the real monitor on a hot fake /proc pauses admission.
    let proc_dir = tempfile::tempdir().unwrap();
    fake_proc(proc_dir.path(), 200);
    let _monitor = spawn_monitor(d.announced("monitor"), proc_dir.path(), &backend.addr.to_string());
    let st = wait_status(&d, "overloaded from modus monitor", |s| s.contains("monitor=overloaded"));
    assert!(st.contains("synrecv=200"), "{st}");
    d.client().request("GET", "/", &[]).assert_status(503);
    fake_proc(proc_dir.path(), 0);
    wait_status(&d, "ok from modus monitor", |s| s.contains("monitor=ok"));
    d.client().request("GET", "/", &[]).assert_status(200);
}
