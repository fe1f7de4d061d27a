//! HTTPS end to end: `modus serve --tls-listen` with real certificate files,
//! checked by real clients (curl, Python's ssl, the testkit's rustls
//! client) — SNI, HSTS, a reload on SIGHUP, plain HTTP on the TLS port,
//! handshakes that never finish, and the configuration errors.
//! (The whole conformance suite also runs over HTTPS for every model.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testkit::{Docroot, Server, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_modus");

/// A certificate and its key written as PEM files.
struct Pair {
    cert: PathBuf,
    key: PathBuf,
}

fn make_pair(dir: &Path, stem: &str, names: &[&str]) -> Pair {
    let made = rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("rcgen");
    let pair = Pair { cert: dir.join(format!("{stem}.crt")), key: dir.join(format!("{stem}.key")) };
    std::fs::write(&pair.cert, made.cert.pem()).unwrap();
    std::fs::write(&pair.key, made.signing_key.serialize_pem()).unwrap();
    pair
}

fn serve_tls(model: &str, root: &Docroot, pairs: &[&Pair], extra: &[&str]) -> Server {
    let mut b = Server::builder(BIN).model(model).root(root.path()).arg("--tls-listen").arg("127.0.0.1:0");
    for p in pairs {
        b = b.arg("--tls-cert").arg(&p.cert).arg("--tls-key").arg(&p.key);
    }
    b.args(extra).start()
}

/// curl over HTTPS, trusting `ca`, reaching `name:port` at the server's
/// address (so SNI and the name checked are `name`); (status line and
/// headers, body). Panics if curl fails.
fn curl(srv: &Server, ca: &Path, name: &str, path: &str, extra: &[&str]) -> (String, String) {
    let port = srv.addr().port();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--noproxy", "*", "-D", "-", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{name}:{port}:127.0.0.1"))
        .args(extra)
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "curl failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    (head.to_string(), body.to_string())
}

#[test]
fn curl_and_python_fetch_over_https_with_hsts_and_alpn() {
    let dir = tempfile::tempdir().unwrap();
    let pair = make_pair(dir.path(), "site", &["localhost"]);
    let root = Docroot::standard();
    let srv = serve_tls("event", &root, &[&pair], &["--hsts", "1y"]);
    assert!(srv.first_line().ends_with(" https"), "{}", srv.first_line());

    let (head, body) =
        curl(&srv, &pair.cert, "localhost", "/hello.txt", &["--http1.1", "-w", "%{ssl_verify_result}"]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // 1y is 365.25 days (humantime's year).
    assert!(head.contains("\r\nStrict-Transport-Security: max-age=31557600"), "{head}");
    assert_eq!(body, "Hello, world!\n0", "the body, then curl's verify result (0: verified)");

    // ALPN: curl offers h2 and http/1.1; modus agrees on http/1.1.
    let out = Command::new("curl")
        .args(["-sS", "-v", "-o", "/dev/null", "--cacert"])
        .arg(&pair.cert)
        .arg("--resolve")
        .arg(format!("localhost:{}:127.0.0.1", srv.addr().port()))
        .arg(format!("https://localhost:{}/", srv.addr().port()))
        .output()
        .unwrap();
    let verbose = String::from_utf8_lossy(&out.stderr);
    assert!(verbose.contains("ALPN: server accepted http/1.1"), "{verbose}");
    assert!(verbose.contains("TLSv1.3"), "{verbose}");

    // Python's ssl module, with its default (verifying) context.
    let script = format!(
        "import ssl, urllib.request\n\
         ctx = ssl.create_default_context(cafile={:?})\n\
         r = urllib.request.urlopen('https://localhost:{}/hello.txt', context=ctx, timeout=10)\n\
         print(r.status, r.headers['Strict-Transport-Security'], r.read().decode(), end='')",
        pair.cert.display().to_string(),
        srv.addr().port()
    );
    let out = Command::new("python3").arg("-c").arg(&script).output().expect("python3 runs");
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200 max-age=31557600 Hello, world!\n");
}

#[test]
fn the_certificate_follows_the_name_the_client_asks_for() {
    let dir = tempfile::tempdir().unwrap();
    let first = make_pair(dir.path(), "first", &["first.test"]);
    let second = make_pair(dir.path(), "second", &["second.test", "*.second.test"]);
    let root = Docroot::standard();
    let srv = serve_tls("pool", &root, &[&first, &second], &[]);
    // curl trusts one certificate at a time: each succeeds only with its own.
    curl(&srv, &second.cert, "second.test", "/hello.txt", &[]);
    curl(&srv, &second.cert, "www.second.test", "/hello.txt", &[]);
    curl(&srv, &first.cert, "first.test", "/hello.txt", &[]);
    // A name no certificate covers gets the first one (the default).
    curl(&srv, &first.cert, "other.test", "/hello.txt", &["--insecure"]);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&second.cert)
        .arg("--resolve")
        .arg(format!("other.test:{}:127.0.0.1", srv.addr().port()))
        .arg(format!("https://other.test:{}/", srv.addr().port()))
        .output()
        .unwrap();
    assert!(!out.status.success(), "the default certificate is the first, not the second");
}

/// SIGHUP reads the files again in every process of the model: new
/// handshakes present the new certificate; a broken file leaves the one in
/// force and the error log says why.
fn reload_on_sighup(model: &str) {
    let dir = tempfile::tempdir().unwrap();
    let old = make_pair(dir.path(), "old", &["localhost"]);
    let root = Docroot::standard();
    let srv = serve_tls(model, &root, &[&old], &["--min-spare", "2", "--processes", "2"]);
    curl(&srv, &old.cert, "localhost", "/hello.txt", &[]);
    let old_copy = dir.path().join("old-copy.crt");
    std::fs::copy(&old.cert, &old_copy).unwrap();

    let new = make_pair(dir.path(), "new", &["localhost"]);
    std::fs::copy(&new.cert, &old.cert).unwrap();
    std::fs::copy(&new.key, &old.key).unwrap();
    srv.signal(Signal::Hup);
    let reloaded = testkit_poll(|| srv.stderr().contains("SIGHUP: configuration reloaded"));
    assert!(reloaded, "{}", srv.stderr());
    // Every process (and every connection of a pool) now presents the new one.
    let served_new = testkit_poll(|| {
        (0..6).all(|_| {
            let port = srv.addr().port();
            Command::new("curl")
                .args(["-sS", "--max-time", "10", "-o", "/dev/null", "--cacert"])
                .arg(&new.cert)
                .arg("--resolve")
                .arg(format!("localhost:{port}:127.0.0.1"))
                .arg(format!("https://localhost:{port}/hello.txt"))
                .status()
                .unwrap()
                .success()
        })
    });
    assert!(served_new, "the new certificate is presented after SIGHUP");

    std::fs::write(&old.key, "-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n").unwrap();
    srv.signal(Signal::Hup);
    let said =
        testkit_poll(|| srv.stderr().contains("TLS certificates not reloaded, the ones in force stay"));
    assert!(said, "{}", srv.stderr());
    curl(&srv, &new.cert, "localhost", "/hello.txt", &[]);
}

fn testkit_poll(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

#[test]
fn sighup_reloads_the_certificates_in_a_thread_model() {
    reload_on_sighup("pool");
}

#[test]
fn sighup_reloads_the_certificates_in_every_child_of_a_process_model() {
    reload_on_sighup("prefork");
}

#[test]
fn plain_http_to_the_tls_port_is_told_to_use_https_and_the_server_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let pair = make_pair(dir.path(), "site", &["localhost"]);
    let root = Docroot::standard();
    for model in ["pool", "event"] {
        let srv = serve_tls(model, &root, &[&pair], &[]);
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{model}: {answer}");
        assert!(answer.contains("Connection: close\r\n"), "{answer}");
        assert!(answer.ends_with("This port speaks HTTPS: use https:// in the URL instead.\n"), "{answer}");
        curl(&srv, &pair.cert, "localhost", "/hello.txt", &[]);
    }
}

#[test]
fn handshakes_that_never_finish_time_out_and_do_not_stop_others() {
    let dir = tempfile::tempdir().unwrap();
    let pair = make_pair(dir.path(), "site", &["localhost"]);
    let root = Docroot::standard();
    let srv = serve_tls("event", &root, &[&pair], &["--tls-handshake-timeout", "1s", "--defer-accept", "0"]);
    // 1,000 connections: silent ones, and ones that stop halfway through a ClientHello.
    let mut idle: Vec<TcpStream> = (0..1000)
        .map(|i| {
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            if i % 2 == 0 {
                s.write_all(&[22, 3, 1, 2, 0, 1, 0, 1]).unwrap();
            }
            s
        })
        .collect();
    // Others are served meanwhile.
    for _ in 0..5 {
        let (head, body) = curl(&srv, &pair.cert, "localhost", "/hello.txt", &[]);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, "Hello, world!\n");
    }
    // Each unfinished handshake is closed at its deadline (EOF, no bytes).
    for s in idle.iter_mut().take(20) {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("expected the server to close the half-open handshake, got {other:?}"),
        }
    }
}

/// `modus serve ARGS --check`: (exit code, stderr).
fn check(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).arg("serve").args(args).arg("--check").output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn tls_configuration_errors_exit_2_and_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_pair(dir.path(), "a", &["a.test"]);
    let b = make_pair(dir.path(), "b", &["b.test"]);
    let (a_cert, a_key, b_key) = (a.cert.to_str().unwrap(), a.key.to_str().unwrap(), b.key.to_str().unwrap());

    let (code, err) = check(&["--tls-listen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs a certificate and its key") && err.contains("--tls-self-signed"), "{err}");

    let (code, err) = check(&["--tls-listen", "127.0.0.1:0", "--tls-cert", a_cert, "--tls-key", b_key]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not hold the private key of") && err.contains("b.key"), "{err}");

    let (code, err) = check(&["--tls-listen", "127.0.0.1:0", "--tls-cert", a_key, "--tls-key", a_key]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a.key: no CERTIFICATE"), "{err}");

    // --listen beside --tls-listen is the plain side that redirects to
    // HTTPS; one address for both is refused.
    let (code, err) = check(&["--listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0", "--tls-self-signed"]);
    assert_eq!(code, 0, "{err}");
    let (code, err) =
        check(&["--listen", "127.0.0.1:18443", "--tls-listen", "127.0.0.1:18443", "--tls-self-signed"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("name one address"), "{err}");

    let (code, err) = check(&["--tls-cert", a_cert, "--tls-key", a_key]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("need --tls-listen"), "{err}");

    let (code, err) = check(&["--tls-listen", "127.0.0.1:0", "--tls-cert", a_cert, "--tls-key", a_key]);
    assert_eq!(code, 0, "{err}");
}

/// `modus load ARGS --json` against `srv`: the report.
fn load_json(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(BIN).arg("load").args(args).arg("--json").output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), report, String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn modus_load_speaks_https_and_counts_full_handshakes() {
    let dir = tempfile::tempdir().unwrap();
    let pair = make_pair(dir.path(), "site", &["localhost"]);
    let root = Docroot::standard();
    let srv = serve_tls("event", &root, &[&pair], &[]);
    let url = format!("https://localhost:{}/hello.txt", srv.addr().port());

    // Trusting the certificate: keep-alive requests over a few sessions.
    let (code, r, err) = load_json(&[&url, "--cacert", pair.cert.to_str().unwrap(), "-n", "200", "-c", "4"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["status"]["200"], 200, "{r}");
    assert_eq!(r["tls_handshakes"], 4, "one per connection: {r}");

    // --close: a full handshake per request (no resumption unless asked).
    let (code, r, err) = load_json(&[&url, "-k", "--close", "-n", "50", "-c", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["status"]["200"], 50, "{r}");
    assert_eq!(r["tls_handshakes"], r["connections_opened"], "{r}");

    // Not trusted: every connection fails, and the report says why and what to do.
    let (code, r, _) = load_json(&[&url, "-n", "5", "-c", "1"]);
    assert_eq!(code, 1);
    let why = r["connect_failures"].to_string();
    assert!(why.contains("invalid peer certificate") && why.contains("--insecure"), "{why}");
}

#[test]
fn the_director_ends_tls_and_tells_the_backend_the_scheme() {
    // The backend: the demo site (its env script prints what it is given), over plain HTTP.
    let backend = Server::builder(BIN).model("pool").start();
    let director = Server::builder(BIN)
        .subcommand("direct")
        .no_defaults()
        .args(["--tls-listen", "127.0.0.1:0", "--tls-self-signed", "--backend"])
        .arg(backend.addr().to_string())
        .start();
    assert!(director.is_https(), "{}", director.first_line());
    let mut c = director.client();
    let r = c.request("GET", "/cgi-bin/env", &["X-Forwarded-Proto: gopher"]);
    r.assert_status(200);
    let env = r.body_str();
    assert!(env.contains("HTTP_X_FORWARDED_PROTO=https\n"), "{env}");
    assert!(!env.contains("gopher"), "a client's claim is not passed on: {env}");
    // A body both ways, on the same kept-alive session.
    let body = "x".repeat(100_000);
    c.send(format!("POST /cgi-bin/echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    let r = c.read_response("POST");
    r.assert_status(200);
    assert!(r.body_str().contains(&body), "the echo carries the body: {}", r.describe());

    // Plain HTTP to the director's TLS port: told to use https.
    let mut s = TcpStream::connect(director.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{answer}");
}

#[test]
fn the_handshake_is_timed_as_a_phase_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let pair = make_pair(dir.path(), "site", &["localhost"]);
    let root = Docroot::standard();
    for model in ["pool", "event"] {
        let srv = serve_tls(model, &root, &[&pair], &["--admin", "127.0.0.1:0"]);
        // Three connections (three handshakes), the last with two requests.
        curl(&srv, &pair.cert, "localhost", "/hello.txt", &[]);
        curl(&srv, &pair.cert, "localhost", "/hello.txt", &[]);
        let url = format!("https://localhost:{}/hello.txt", srv.addr().port());
        curl(&srv, &pair.cert, "localhost", "/hello.txt", &["-o", "/dev/null", &url]);
        let (status, _, json) = testkit::get_once(srv.announced("admin"), "/status.json");
        assert_eq!(status, 200);
        let j: serde_json::Value = serde_json::from_str(&json).unwrap();
        let phases = &j["phases_us"];
        assert_eq!(phases["total"]["count"], 4, "{model}: {phases}");
        assert_eq!(phases["tls_handshake"]["count"], 3, "{model}: one per connection: {phases}");
        assert!(phases["tls_handshake"]["p50"].as_f64().unwrap() > 0.0, "{phases}");
    }
}

#[test]
fn the_director_reads_its_certificates_again_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let old = make_pair(dir.path(), "old", &["localhost"]);
    let backend = Server::builder(BIN).model("pool").start();
    let mut director = Server::builder(BIN)
        .subcommand("direct")
        .no_defaults()
        .args(["--tls-listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&old.cert)
        .arg("--tls-key")
        .arg(&old.key)
        .arg("--backend")
        .arg(backend.addr().to_string())
        .start();
    curl(&director, &old.cert, "localhost", "/", &[]);
    let new = make_pair(dir.path(), "new", &["localhost"]);
    std::fs::copy(&new.cert, &old.cert).unwrap();
    std::fs::copy(&new.key, &old.key).unwrap();
    director.signal(Signal::Hup);
    assert!(
        testkit_poll(|| director.stderr().contains("TLS certificates reloaded")),
        "{}",
        director.stderr()
    );
    curl(&director, &new.cert, "localhost", "/", &[]);
    assert!(!director.has_exited(), "HUP does not stop the director");
}

/// HTTP beside HTTPS: with `--listen` and `--tls-listen` both, every model
/// serves HTTPS and its plain port answers every request with a 308 to the
/// same host and target over HTTPS (the port named unless 443), a request
/// that does not parse with a 400 — and the redirector goes with the server.
#[test]
fn the_plain_side_redirects_to_https_in_every_model() {
    let root = Docroot::standard();
    for model in models::names() {
        let srv = Server::builder(BIN)
            .root(root.path())
            .model(model)
            .args(["--tls-listen", "127.0.0.1:0", "--tls-self-signed", "--listen", "127.0.0.1:0"])
            .start();
        let plain: std::net::SocketAddr = srv
            .first_line()
            .split_whitespace()
            .find_map(|w| w.strip_prefix("redirect="))
            .unwrap_or_else(|| panic!("{model}: {}", srv.first_line()))
            .parse()
            .unwrap();
        let ask = |request: &[u8]| {
            let mut c = std::net::TcpStream::connect(plain).unwrap();
            c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
            c.write_all(request).unwrap();
            let mut answer = String::new();
            c.read_to_string(&mut answer).unwrap();
            answer
        };
        let answer = ask(b"GET /hello.txt?x=1 HTTP/1.1\r\nHost: example.org:80\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"), "{model}: {answer}");
        let location = format!("\r\nLocation: https://example.org:{}/hello.txt?x=1\r\n", srv.addr().port());
        assert!(answer.contains(&location), "{model}: {answer}");
        assert!(
            answer.contains("\r\nConnection: close\r\n") && answer.ends_with("\r\n\r\n"),
            "{model}: {answer}"
        );
        let answer = ask(b"GE(T / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 400 "), "{model}: {answer}");
        // HTTPS itself is served.
        let r = srv.client().request("GET", "/hello.txt", &[]);
        r.assert_status(200);
        drop(srv);
        // Gone with the server.
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            std::net::TcpStream::connect(plain).is_err()
        });
        assert!(gone, "{model}: the plain port still answers after the server stopped");
    }
}

/// `--tls-ocsp`: a CA's OCSP answer about the certificate (made here by
/// `openssl ocsp`, as a responder would) is stapled to the handshakes that
/// ask for it (`openssl s_client -status`); without it none is sent.
#[test]
fn an_ocsp_response_is_stapled() {
    if Command::new("openssl").arg("version").output().map_or(true, |o| !o.status.success()) {
        eprintln!("skipped: needs the openssl CLI");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let make = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout site.key -out site.csr -subj /CN=localhost
printf 'subjectAltName=DNS:localhost\n' > ext
openssl x509 -req -in site.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out site.pem -days 2 -extfile ext
serial=$(openssl x509 -in site.pem -noout -serial | cut -d= -f2)
printf 'V\t301231235959Z\t\t%s\tunknown\t/CN=localhost\n' "$serial" > index.txt
openssl ocsp -index index.txt -rsigner ca.pem -rkey ca.key -CA ca.pem -issuer ca.pem -cert site.pem -respout resp.der -ndays 1"#;
    let made = Command::new("sh").args(["-c", make]).current_dir(dir.path()).output().unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let root = Docroot::standard();
    let file = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let status = |srv: &Server| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl s_client -connect {} -servername localhost -status </dev/null 2>/dev/null",
                srv.addr()
            ))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let tls =
        ["--tls-listen", "127.0.0.1:0", "--tls-cert", &file("site.pem"), "--tls-key", &file("site.key")];
    let srv = Server::builder(BIN)
        .root(root.path())
        .model("event")
        .args(tls)
        .args(["--tls-ocsp", &file("resp.der")])
        .start();
    let said = status(&srv);
    assert!(
        said.contains("OCSP Response Status: successful") && said.contains("Cert Status: good"),
        "{said}"
    );
    drop(srv);
    let srv = Server::builder(BIN).root(root.path()).model("event").args(tls).start();
    assert!(status(&srv).contains("OCSP response: no response sent"));
    // Not DER: refused at start, naming the file.
    let bad = Command::new(BIN)
        .args(["serve", root.path().to_str().unwrap(), "--check"])
        .args(tls)
        .args(["--tls-ocsp", &file("site.pem")])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a DER OCSP response"));
}
