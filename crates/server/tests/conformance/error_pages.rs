// `--error-page STATUS=PATH`: the site's page, sent with the original
// status; when it cannot be served, the built-in page. (Included once per
// model.)

use super::MODEL;
use crate::common::*;

const NOT_FOUND: &str = "<!doctype html><title>Not here</title><p>Nothing at this address.</p>\n";

fn site() -> Docroot {
    let root = Docroot::standard();
    root.file("errors/404.html", NOT_FOUND);
    root
}

#[test]
fn the_sites_page_with_the_original_status() {
    let root = site();
    let srv = serve(MODEL, &root, &["--error-page", "404=/errors/404.html"]);
    let mut c = srv.client();
    for target in ["/missing.html", "/dir/nothing/here", "/.env"] {
        let r = c.request("GET", target, &[]);
        check_common(&r, "GET");
        r.assert_status(404);
        assert_eq!(r.body_str(), NOT_FOUND, "{target}");
        assert_eq!(r.header_one("content-type"), "text/html; charset=utf-8");
        assert!(r.header("etag").is_none(), "an error page is no representation of the target");
        assert!(!r.connection_has("close"), "keep-alive goes on");
    }
    let r = c.request("HEAD", "/missing.html", &[]);
    check_common(&r, "HEAD");
    r.assert_status(404);
    assert!(r.body.is_empty());
    assert_eq!(r.content_length(), Some(NOT_FOUND.len() as u64));
    // Statuses without a page of their own keep the built-in one.
    let r = c.request("GET", "/noindex/", &[]);
    r.assert_status(403);
    check_html_error(&r);
    assert!(r.body_str().contains("403 Forbidden"));
    // The page itself is an ordinary file too.
    let r = c.request("GET", "/errors/404.html", &[]);
    r.assert_status(200);
    assert_eq!(r.body_str(), NOT_FOUND);
}

#[test]
fn a_page_that_cannot_be_served_falls_back_to_the_built_in_one() {
    let root = site();
    // Pages that exist at start (a start refuses one that names nothing)
    // and are gone, or a directory, by the time they are wanted.
    root.file("errors/gone.html", NOT_FOUND);
    root.file("errors/405.html", NOT_FOUND);
    let srv = serve(
        MODEL,
        &root,
        &["--error-page", "404=/errors/gone.html", "--error-page", "405=/errors/405.html"],
    );
    std::fs::remove_file(root.path().join("errors/gone.html")).unwrap();
    std::fs::remove_file(root.path().join("errors/405.html")).unwrap();
    std::fs::create_dir(root.path().join("errors/405.html")).unwrap();
    let r = get(&srv, "/missing.html");
    r.assert_status(404);
    check_html_error(&r);
    assert!(r.body_str().contains("404 Not Found"), "{}", r.describe());
    let r = request(&srv, "DELETE", "/hello.txt", &[]);
    r.assert_status(405);
    assert_eq!(r.header_one("allow"), ALLOW);
    check_html_error(&r);
    assert_serves(&srv);
    assert!(
        poll_until(|| srv.stderr().contains("--error-page 404=/errors/gone.html")),
        "the error log says why:\n{}",
        srv.stderr()
    );
}

/// The page keeps the fields its status needs (405's Allow) and its
/// status even when the file would be a 200.
#[test]
fn extra_fields_stay() {
    let root = site();
    root.file("errors/405.html", "<p>not that method</p>\n");
    let srv = serve(MODEL, &root, &["--error-page", "405=/errors/405.html"]);
    let r = request(&srv, "POST", "/hello.txt", &["Content-Length: 0"]);
    r.assert_status(405);
    assert_eq!(r.header_one("allow"), ALLOW);
    assert_eq!(r.body_str(), "<p>not that method</p>\n");
}

#[test]
fn config_file_form() {
    let root = site();
    let config = root.base().join("modus.toml");
    std::fs::write(&config, "error-page = [\"404=/errors/404.html\"]\n").unwrap();
    let srv = serve(MODEL, &root, &["--config", config.to_str().unwrap()]);
    let r = get(&srv, "/missing.html");
    r.assert_status(404);
    assert_eq!(r.body_str(), NOT_FOUND);
}

/// A script that does not exist is the site's 404 too; a script's own
/// error status is its answer, left as it wrote it.
#[test]
fn missing_script() {
    let root = site();
    let cgi = tempfile::Builder::new().prefix("modus-cgi-").tempdir().unwrap();
    let script = cgi.path().join("gone");
    testkit::write_executable(
        &script,
        "#!/bin/sh\nprintf 'Status: 404 Not Found\\nContent-Type: text/plain\\n\\nmine\\n'\n",
        0o755,
    );
    let srv = serve(
        MODEL,
        &root,
        &["--error-page", "404=/errors/404.html", "--cgi-dir", cgi.path().to_str().unwrap()],
    );
    let r = get(&srv, "/cgi-bin/nothing");
    r.assert_status(404);
    assert_eq!(r.body_str(), NOT_FOUND);
    let mut c = srv.client();
    let r = c.request("GET", "/cgi-bin/gone", &[]);
    r.assert_status(404);
    assert_eq!(r.body_str(), "mine\n");
}
