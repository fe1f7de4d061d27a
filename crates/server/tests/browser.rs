//! Issue 7: the `/status` page in a real browser. Headless Chromium loads
//! it from `modus serve --admin` after a known sequence of requests; the
//! DOM it rendered must show the model and non-zero counts, and a phone-
//! sized screenshot is kept as a CI artifact (`target/ci-artifacts/`).
//!
//! `.ci/run` installs Debian's `chromium`. Without it the tests fail when
//! `CI` is set and are skipped (with a notice) otherwise.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{Client, Docroot, Server};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// Chromium on `PATH` (Debian's package is `chromium`).
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Chromium, or `None` after a skip notice; in CI its absence is a failure.
fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: chromium is not installed (.ci/run installs it with apt-get)"
        );
        eprintln!("SKIPPED {test}: chromium is not installed (apt-get install chromium)");
    }
    found
}

/// Runs headless Chromium on `url` with `args` (a fresh profile each time),
/// killing it if it hangs; its stdout.
fn run_chromium(chromium: &Path, url: &str, args: &[&str]) -> String {
    run_chromium_logged(chromium, url, args).0
}

/// [`run_chromium`], and what Chromium logged on stderr.
fn run_chromium_logged(chromium: &Path, url: &str, args: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stderr.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish: {}", err_reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    assert!(status.success(), "chromium failed ({status}): {err}");
    (out, err)
}

/// `/status.json` until `requests_total` is `n` (process models publish
/// every 250 ms).
fn wait_for_requests(admin: SocketAddr, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = TcpStream::connect(admin).unwrap();
        write!(s, "GET /status.json HTTP/1.1\r\nHost: admin\r\n\r\n").unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let v: Value = serde_json::from_str(raw.split_once("\r\n\r\n").unwrap().1).unwrap();
        if v["requests_total"].as_u64() == Some(n) {
            return;
        }
        assert!(Instant::now() < deadline, "requests never reached {n}: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `model` with `--admin`, makes 4 × 200 and 1 × 404, and returns
/// the server, its open client and the status page's URL.
fn server_after_requests(model: &str, root: &Docroot) -> (Server, Client, String) {
    // The client's connection stays open however long Chromium takes to
    // start on a busy machine (the page counts it).
    let srv =
        Server::start(BIN, model, root.path(), &["--admin", "127.0.0.1:0", "--keepalive-timeout", "5m"]);
    let admin = srv.announced("admin");
    let mut c: Client = srv.client();
    for _ in 0..4 {
        c.request("GET", "/hello.txt", &[]).assert_status(200);
    }
    c.request("GET", "/missing.txt", &[]).assert_status(404);
    wait_for_requests(admin, 5);
    (srv, c, format!("http://{admin}/status"))
}

/// The number in `<b id="ID">N</b>`.
fn number_in(dom: &str, id: &str) -> f64 {
    let open = format!("<b id=\"{id}\">");
    let at = dom.find(&open).unwrap_or_else(|| panic!("no {open} in the DOM:\n{dom}")) + open.len();
    let text = &dom[at..at + dom[at..].find('<').unwrap()];
    text.trim().parse().unwrap_or_else(|_| panic!("{id}: {text:?} is not a number"))
}

fn renders_model_and_counts(model: &str) -> Option<(Server, Client, String)> {
    let chromium = chromium_or_skip(&format!("status page for {model}"))?;
    let root = Docroot::standard();
    let (srv, client, url) = server_after_requests(model, &root);
    let dom = run_chromium(&chromium, &url, &["--dump-dom"]);
    assert!(dom.contains(&format!("<span id=\"model\">{model}</span>")), "model name in:\n{dom}");
    assert_eq!(number_in(&dom, "requests"), 5.0, "{dom}");
    assert!(number_in(&dom, "connections") >= 1.0, "{dom}");
    // The scoreboard and the response table rendered.
    assert!(dom.contains("<td>404 Not Found</td><td>1</td>"), "{dom}");
    assert!(dom.contains("class=\"idle\"") || dom.contains("class=\"busy\""), "{dom}");
    drop(root);
    Some((srv, client, chromium.display().to_string()))
}

#[test]
fn status_page_renders_in_chromium_for_event() {
    renders_model_and_counts("event");
}

/// The process model (numbers from every child through shared memory),
/// with a phone-sized screenshot saved for CI.
#[test]
fn status_page_renders_in_chromium_for_prefork_with_screenshot() {
    let Some((srv, _client, chromium)) = renders_model_and_counts("prefork") else { return };
    let url = format!("http://{}/status", srv.announced("admin"));
    // target/debug/deps/browser-… → target/
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).expect("the target directory");
    let artifacts = target.join("ci-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join("status.png");
    let _ = std::fs::remove_file(&png);
    run_chromium(
        Path::new(&chromium),
        &url,
        &[&format!("--screenshot={}", png.display()), "--window-size=390,844", "--hide-scrollbars"],
    );
    let bytes = std::fs::read(&png).expect("chromium wrote the screenshot");
    assert!(bytes.len() > 1000, "a real picture, not an empty file: {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    assert_eq!(width, 390, "the phone-sized window");
    eprintln!("screenshot: {}", png.display());
}

/// The director's status page with its widest backend row (a backend down,
/// and why) fits a 1,280 px screen: no horizontal scrolling of the
/// backends table or the page. The page is measured by a script added to a
/// copy of it (Chromium runs it, then dumps the DOM).
#[test]
fn director_backends_table_fits_1280_pixels() {
    let Some(chromium) = chromium_or_skip("director status page width") else { return };
    let root = Docroot::standard();
    let backend = Server::start(BIN, "pool", root.path(), &[]);
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let director = Server::builder(BIN)
        .subcommand("direct")
        .no_defaults()
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--monitor-listen", "127.0.0.1:0"])
        .args(["--backend", &backend.addr().to_string(), "--backend", &dead.to_string()])
        .start();
    for _ in 0..5 {
        director.client().request("GET", "/hello.txt", &[]).assert_status(200);
    }
    let admin = director.announced("admin");
    let mut tries = 0;
    let page = loop {
        tries += 1;
        assert!(tries < 400, "the dead backend never showed as down");
        let mut s = TcpStream::connect(admin).unwrap();
        write!(s, "GET /status HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let body = raw.split_once("\r\n\r\n").unwrap().1.to_string();
        if body.contains("down<small>") {
            break body;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let measure = "<script>const t = document.getElementById('backends'), w = t.parentElement, d = document.documentElement;\
        document.body.setAttribute('data-measured', [w.scrollWidth, w.clientWidth, d.scrollWidth, d.clientWidth].join(' '));</script>";
    let page = page
        .replace("<meta http-equiv=\"refresh\" content=\"2\">", "")
        .replace("</body>", &format!("{measure}</body>"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("director.html");
    std::fs::write(&file, page).unwrap();
    let dom = run_chromium(
        &chromium,
        &format!("file://{}", file.display()),
        &["--window-size=1280,800", "--dump-dom"],
    );
    let at = dom.find("data-measured=\"").expect("the script ran") + "data-measured=\"".len();
    let widths: Vec<u32> =
        dom[at..at + dom[at..].find('"').unwrap()].split(' ').map(|n| n.parse().unwrap()).collect();
    let [table_scroll, table_box, page_scroll, page_box] = widths[..] else { panic!("{widths:?}") };
    assert!(table_scroll <= table_box, "the backends table scrolls: {table_scroll} > {table_box} px");
    assert!(page_scroll <= page_box, "the page scrolls: {page_scroll} > {page_box} px");
}

/// The demo site over HTTPS in Chromium, which trusts exactly the
/// certificate the test made (`--ignore-certificate-errors-spki-list`
/// pins its public key; any other certificate would still be an error).
#[test]
fn the_demo_site_renders_in_chromium_over_https() {
    let Some(chromium) = chromium_or_skip("the demo site over https") else { return };
    let dir = tempfile::tempdir().unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("site.crt"), dir.path().join("site.key"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    // base64(sha256(SubjectPublicKeyInfo)), as Chromium wants it.
    let pin = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der | \
             openssl dgst -sha256 -binary | base64",
            cert.display()
        ))
        .output()
        .expect("openssl runs");
    let pin = String::from_utf8(pin.stdout).unwrap().trim().to_string();
    assert_eq!(pin.len(), 44, "a base64 SHA-256: {pin:?}");
    let srv = Server::builder(BIN)
        .model("event")
        .arg("--tls-listen")
        .arg("127.0.0.1:0")
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .start();
    let url = format!("https://localhost:{}/", srv.addr().port());
    let resolve = format!("--host-resolver-rules=MAP localhost 127.0.0.1:{}", srv.addr().port());
    let spki = format!("--ignore-certificate-errors-spki-list={pin}");
    let dom = run_chromium(&chromium, &url, &["--dump-dom", &spki, &resolve]);
    assert!(dom.contains("<title>") && dom.contains("modus"), "the demo page in:\n{dom}");
    assert!(!dom.contains("ERR_CERT") && !dom.contains("Your connection is not private"), "{dom}");
    // Served from port 0, the page's example names the origin the browser
    // reached it at.
    let origin = format!("<span id=\"origin\">https://localhost:{}</span>/cgi-bin/echo", srv.addr().port());
    assert!(dom.contains(&origin), "{origin} in:\n{dom}");
}

/// A lab report renders in Chromium from the file alone (it is
/// self-contained, no server, no network): the plot's SVG inline in its
/// figure and the claim's verdict are in the DOM, the console stays clean,
/// and a screenshot is kept as a CI artifact.
#[test]
fn a_lab_report_renders_in_chromium() {
    let Some(chromium) = chromium_or_skip("lab report") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tiny");
    let r = testkit::run(
        BIN,
        ["lab", "run", "tiny", "--quick", "--out", out.to_str().unwrap()],
        Duration::from_secs(180),
    );
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let url = format!("file://{}", out.join("report.html").display());
    let (dom, log) =
        run_chromium_logged(&chromium, &url, &["--enable-logging=stderr", "--v=0", "--dump-dom"]);
    assert!(dom.contains("<figure id=\"plot-throughput\"><svg"), "the plot in:\n{dom}");
    assert!(dom.contains("event") && dom.contains("pool"), "both servers in:\n{dom}");
    let verdicts = [
        "<b class=\"holds\">holds</b>",
        "<b class=\"partly\">holds partly</b>",
        "<b class=\"fails\">does not hold</b>",
    ];
    assert!(verdicts.iter().any(|v| dom.contains(v)), "the claim's verdict in:\n{dom}");
    assert!(!dom.contains("SystemTime"), "times as ISO 8601 in:\n{dom}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    assert!(dom.contains(&format!("started {}", meta["started"].as_str().unwrap())), "{dom}");
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load"))
        .collect();
    assert!(console.is_empty(), "the page logged:\n{}", console.join("\n"));
    // A compare report: its answer in words at the top, its plots faceted.
    let compare = tmp.path().join("compare");
    let r = testkit::run(
        BIN,
        [
            "lab",
            "compare",
            "--models",
            "pool,event",
            "--peers",
            "none",
            "--clients",
            "1,2",
            "--duration",
            "300ms",
            "--out",
            compare.to_str().unwrap(),
        ],
        Duration::from_secs(180),
    );
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let url = format!("file://{}", compare.join("report.html").display());
    let (dom, log) =
        run_chromium_logged(&chromium, &url, &["--enable-logging=stderr", "--v=0", "--dump-dom"]);
    assert!(dom.contains("<section id=\"answer\"><h2>The answer</h2>"), "the answer in:\n{dom}");
    assert!(dom.contains("Winner at peak throughput: ") && !dom.contains("SystemTime"), "{dom}");
    assert!(dom.contains("<figure id=\"plot-throughput\"><svg"), "the plot in:\n{dom}");
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load"))
        .collect();
    assert!(console.is_empty(), "the compare page logged:\n{}", console.join("\n"));
    let url = format!("file://{}", out.join("report.html").display());
    let exe = std::env::current_exe().unwrap();
    let artifacts = exe.ancestors().nth(3).expect("the target directory").join("ci-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join("lab-report.png");
    run_chromium(&chromium, &url, &[&format!("--screenshot={}", png.display()), "--window-size=1280,2000"]);
    let bytes = std::fs::read(&png).expect("chromium wrote the screenshot");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
}
