// Real clients: curl (required; CI installs it) and the ureq crate.
// (Included once per model.)

use super::MODEL;
use crate::common::*;
use std::time::Duration;

/// Runs `curl -sS --max-time 10 --noproxy '*' -k ARGS`; panics if it
/// can't run or fails (`-k`: over HTTPS the servers are self-signed).
#[track_caller]
fn curl(args: &[&str]) -> std::process::Output {
    let _starting = testkit::starting_a_program();
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--noproxy", "*", "-k"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl (required by this suite): {e}"));
    assert!(
        out.status.success(),
        "curl {args:?} failed: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn url(srv: &Server, path: &str) -> String {
    srv.url(path)
}

#[test]
fn curl_get() {
    let (_root, srv) = standard(MODEL, &[]);
    let out = curl(&[&url(&srv, "/hello.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), HELLO);
}

#[test]
fn curl_head() {
    let (_root, srv) = standard(MODEL, &[]);
    let out = curl(&["-I", &url(&srv, "/hello.txt")]);
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("\r\ncontent-length: 14\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "{text:?}");
}

#[test]
fn curl_range() {
    let (_root, srv) = standard(MODEL, &[]);
    let out = curl(&["-r", "0-9", "-w", "\n%{http_code}", &url(&srv, "/alphabet.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "abcdefghij\n206");
}

#[test]
fn curl_reuses_the_connection() {
    let (_root, srv) = standard(MODEL, &[]);
    // %{num_connects} is 0 for a transfer that reused a connection.
    let out = curl(&[
        "-w",
        "[%{http_code} %{num_connects}]",
        &url(&srv, "/hello.txt"),
        &url(&srv, "/alphabet.txt"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{HELLO}[200 1]{ALPHABET}[200 0]"));
}

#[test]
fn curl_large_file() {
    let root = Docroot::standard();
    let data = pseudo_random_bytes(2_500_000, 11);
    root.file("big.bin", &data);
    let srv = serve(MODEL, &root, &[]);
    let out = curl(&[&url(&srv, "/big.bin")]);
    assert_bytes_eq(&out.stdout, &data, "curl big.bin");
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .proxy(None)
        // Over HTTPS the servers under test are self-signed.
        .tls_config(ureq::tls::TlsConfig::builder().disable_verification(true).build())
        .build()
        .into()
}

#[test]
fn ureq_basic_gets() {
    let (root, srv) = standard(MODEL, &[]);
    let agent = agent();
    let mut r = agent.get(url(&srv, "/hello.txt")).call().expect("GET /hello.txt");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers().get("content-type").unwrap(), "text/plain; charset=utf-8");
    assert_eq!(r.body_mut().read_to_string().unwrap(), HELLO);

    let mut r = agent.get(url(&srv, "/")).call().expect("GET /");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.body_mut().read_to_vec().unwrap(), root.read("index.html"));

    let r = agent.get(url(&srv, "/nope.txt")).call().expect("GET /nope.txt");
    assert_eq!(r.status().as_u16(), 404);

    let mut r = agent.get(url(&srv, "/alphabet.txt")).header("Range", "bytes=-3").call().expect("range");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(r.body_mut().read_to_string().unwrap(), "xyz");
}

#[test]
fn ureq_head() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = agent().head(url(&srv, "/alphabet.txt")).call().expect("HEAD");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers().get("content-length").unwrap(), "26");
}
