// Static files: bodies, content types, validators, directories, dotfiles,
// symlinks. (Included once per model by `models!`; no inner attributes.)

use super::MODEL;
use crate::common::*;

#[track_caller]
fn expect_file(srv: &Server, target: &str, want_body: &[u8], want_ct: &str) -> Response {
    let r = get(srv, target);
    r.assert_status(200);
    assert_bytes_eq(&r.body, want_body, target);
    assert_eq!(r.header_one("content-type"), want_ct, "{}", r.describe());
    assert_eq!(r.header_one("accept-ranges"), "bytes", "{}", r.describe());
    check_validators(&r);
    r
}

#[test]
fn html_file() {
    let (root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "/index.html", &root.read("index.html"), "text/html; charset=utf-8");
}

#[test]
fn txt_file() {
    let (_root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "/hello.txt", HELLO.as_bytes(), "text/plain; charset=utf-8");
}

#[test]
fn css_file() {
    let (root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "/style.css", &root.read("style.css"), "text/css; charset=utf-8");
}

#[test]
fn unknown_extension_is_octet_stream() {
    let (root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "/data.unknownext", &root.read("data.unknownext"), "application/octet-stream");
}

#[test]
fn empty_file() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = expect_file(&srv, "/empty.txt", b"", "text/plain; charset=utf-8");
    assert_eq!(r.header_one("content-length"), "0");
}

#[test]
fn nested_file() {
    let (_root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "/dir/nested/deep.txt", b"deep file\n", "text/plain; charset=utf-8");
}

#[test]
fn last_modified_is_file_mtime() {
    let (root, srv) = standard(MODEL, &[]);
    root.set_mtime("hello.txt", old_mtime());
    let r = get(&srv, "/hello.txt");
    r.assert_status(200);
    assert_eq!(r.header_one("last-modified"), httpdate::fmt_http_date(old_mtime()), "{}", r.describe());
}

#[test]
fn query_string_is_ignored_for_files() {
    let (_root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "/hello.txt?x=1&y=%20", HELLO.as_bytes(), "text/plain; charset=utf-8");
}

#[test]
fn percent_encoded_path() {
    let (_root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "/noindex/sp%20ace.txt", b"file sp ace.txt\n", "text/plain; charset=utf-8");
    expect_file(&srv, "/%68ello.txt", HELLO.as_bytes(), "text/plain; charset=utf-8");
}

#[test]
fn absolute_form_target() {
    // RFC 9112 §3.2.2: a server MUST accept the absolute form.
    let (_root, srv) = standard(MODEL, &[]);
    expect_file(&srv, "http://localhost/hello.txt", HELLO.as_bytes(), "text/plain; charset=utf-8");
}

#[test]
fn head_has_get_headers_and_no_body() {
    let (_root, srv) = standard(MODEL, &[]);
    let g = get(&srv, "/hello.txt");
    let mut c = srv.client();
    // HEAD then GET on one connection: if HEAD carried a body, the GET's
    // response would not parse.
    c.send("HEAD /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let h = c.read_response("HEAD");
    check_common(&h, "HEAD");
    h.assert_status(200);
    for name in ["content-length", "content-type", "etag", "last-modified", "accept-ranges"] {
        assert_eq!(h.header_one(name), g.header_one(name), "HEAD vs GET {name}\n{}", h.describe());
    }
    let g2 = c.read_response("GET");
    g2.assert_status(200);
    assert_eq!(g2.body_str(), HELLO);
}

#[test]
fn large_file_exact() {
    let root = Docroot::standard();
    let data = pseudo_random_bytes(3_000_000, 42);
    root.file("big.bin", &data);
    let srv = serve(MODEL, &root, &[]);
    let r = get(&srv, "/big.bin");
    r.assert_status(200);
    assert_bytes_eq(&r.body, &data, "/big.bin");
    check_validators(&r);
    // HEAD of the large file: full length, no body.
    let h = request(&srv, "HEAD", "/big.bin", &[]);
    assert_eq!(h.header_one("content-length"), "3000000");
}

#[test]
fn root_serves_index_html() {
    let (root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/");
    r.assert_status(200);
    assert_bytes_eq(&r.body, &root.read("index.html"), "/");
    assert_eq!(r.header_one("content-type"), "text/html; charset=utf-8");
}

#[test]
fn dir_with_slash_serves_index_html() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/dir/");
    r.assert_status(200);
    assert_eq!(r.body_str(), "<p>dir index</p>\n");
    assert_eq!(r.header_one("content-type"), "text/html; charset=utf-8");
}

#[test]
fn dir_without_slash_redirects() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/dir");
    r.assert_status(301);
    assert_eq!(r.header_one("location"), "/dir/", "{}", r.describe());
    let r = get(&srv, "/dir/nested");
    r.assert_status(301);
    assert_eq!(r.header_one("location"), "/dir/nested/", "{}", r.describe());
}

#[test]
fn dir_redirect_keeps_query() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/dir?x=1&y=2");
    r.assert_status(301);
    assert_eq!(r.header_one("location"), "/dir/?x=1&y=2", "{}", r.describe());
}

#[test]
fn dir_without_index_is_forbidden() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/noindex/");
    r.assert_status(403);
    check_html_error(&r);
    assert!(!r.body_str().contains("b.txt"), "listing without --browse\n{}", r.describe());
}

/// A 403 says why in the error log, once: an operator should not have to
/// guess between a missing index, a symlink and permissions.
#[test]
fn a_403_says_why_in_the_error_log_once() {
    let (root, srv) = standard(MODEL, &[]);
    // One connection, so one process in the process models too: the limit
    // is kept per process (each prefork child says it once).
    let mut client = srv.client();
    for _ in 0..3 {
        client.request("GET", "/noindex/", &[]).assert_status(403);
        client.request("GET", "/link-outside.txt", &[]).assert_status(403);
    }
    let no_index = format!(
        "403 /noindex/: directory {}/noindex/ has no index.html and listings are off (--browse lists it)",
        root.path().display()
    );
    let escape = "403 /link-outside.txt: ";
    assert!(
        poll_until(|| srv.stderr().contains(&no_index) && srv.stderr().contains(escape)),
        "{}",
        srv.stderr()
    );
    let log = srv.stderr();
    assert!(log.contains("link-outside.txt leads out of ROOT"), "{log}");
    assert_eq!(log.matches(&no_index).count(), 1, "repeats are held back:\n{log}");
    assert_eq!(log.matches(escape).count(), 1, "repeats are held back:\n{log}");
}

#[test]
fn browse_lists_directory() {
    let (_root, srv) = standard(MODEL, &["--browse"]);
    let r = get(&srv, "/noindex/");
    r.assert_status(200);
    assert!(r.header_one("content-type").starts_with("text/html"), "{}", r.describe());
    let body = r.body_str();
    let pos = |needle: &str| body.find(needle).unwrap_or_else(|| panic!("listing lacks {needle:?}:\n{body}"));
    // Directories first, then files, each group sorted by name.
    let order = ["adir", "zdir", "a.txt", "b.txt", "sp ace.txt"];
    let positions: Vec<usize> = order.iter().map(|n| pos(n)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "listing order {order:?} at {positions:?}:\n{body}");
    // Names are HTML-escaped...
    assert!(!body.contains("a<b>"), "unescaped name in listing:\n{body}");
    assert!(body.contains("a&lt;b&gt;&amp;"), "escaped name missing:\n{body}");
    // ...and hrefs percent-encoded.
    assert!(body.contains("sp%20ace.txt\""), "href for `sp ace.txt` not encoded:\n{body}");
    assert!(body.contains("pct%2541.txt\""), "href for `pct%41.txt` not encoded:\n{body}");
    assert!(!body.contains("href=\"sp ace.txt\""), "raw space in href:\n{body}");
}

#[test]
fn browse_links_resolve() {
    let (_root, srv) = standard(MODEL, &["--browse"]);
    let r = get(&srv, "/noindex/pct%2541.txt");
    r.assert_status(200);
    assert_eq!(r.body_str(), "file pct%41.txt\n");
}

#[test]
fn browse_still_serves_index_html() {
    let (_root, srv) = standard(MODEL, &["--browse"]);
    let r = get(&srv, "/dir/");
    r.assert_status(200);
    assert_eq!(r.body_str(), "<p>dir index</p>\n");
}

#[test]
fn missing_file_is_404() {
    let (_root, srv) = standard(MODEL, &[]);
    for target in ["/nope.txt", "/dir/nope", "/nope/", "/nope/x.txt"] {
        let r = get(&srv, target);
        assert_eq!(r.status, 404, "{target}\n{}", r.describe());
        check_html_error(&r);
    }
}

#[test]
fn dotfiles_are_404() {
    let (_root, srv) = standard(MODEL, &["--browse"]);
    for target in ["/.env", "/.git/config", "/.git/", "/.git", "/dir/.hidden", "/%2eenv"] {
        let r = get(&srv, target);
        assert_eq!(r.status, 404, "{target}\n{}", r.describe());
        assert!(!r.body_str().contains(SECRET), "{target} leaked\n{}", r.describe());
    }
}

#[test]
fn symlink_inside_root_is_served() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/link-inside.txt");
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
}

/// An absolute link to a file or directory inside the root is inside the
/// root (`ln -s /srv/www/hello.txt`), as a relative one is.
#[test]
fn absolute_symlink_inside_root_is_served() {
    let (root, srv) = standard(MODEL, &[]);
    let real = std::fs::canonicalize(root.path()).unwrap();
    root.symlink("abs-inside.txt", real.join("hello.txt").to_str().unwrap());
    root.symlink("abs-dir", real.to_str().unwrap());
    let r = get(&srv, "/abs-inside.txt");
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
    let r = get(&srv, "/abs-dir/hello.txt");
    r.assert_status(200);
    assert_eq!(r.body_str(), HELLO);
    // One that leads out stays refused however it is spelled.
    let out = std::fs::canonicalize(root.base()).unwrap();
    root.symlink("abs-outside", out.to_str().unwrap());
    let r = get(&srv, "/abs-outside/secret.txt");
    r.assert_status(403);
    assert!(!r.body_str().contains(SECRET), "{}", r.describe());
}

#[test]
fn symlink_outside_root_is_forbidden() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/link-outside.txt");
    r.assert_status(403);
    assert!(!r.body_str().contains(SECRET), "{}", r.describe());
}

#[test]
fn symlinked_dir_outside_root_is_forbidden() {
    let (_root, srv) = standard(MODEL, &[]);
    let r = get(&srv, "/link-dir-outside/secret.txt");
    r.assert_status(403);
    assert!(!r.body_str().contains(SECRET), "{}", r.describe());
}

#[test]
fn follow_symlinks_serves_outside_target() {
    let (_root, srv) = standard(MODEL, &["--follow-symlinks"]);
    let r = get(&srv, "/link-outside.txt");
    r.assert_status(200);
    assert_eq!(r.body_str(), SECRET);
}
