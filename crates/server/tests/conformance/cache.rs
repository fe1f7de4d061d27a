// The in-memory file cache must never serve stale bytes (bad-input G6):
// after a file changes on disk, the next request sees the new body and a
// new ETag. (Included once per model.)

use super::MODEL;
use crate::common::*;
use std::time::Duration;

/// GET `target` twice (warming any cache) and return the last response.
#[track_caller]
fn warm(srv: &Server, target: &str) -> Response {
    get(srv, target);
    let r = get(srv, target);
    r.assert_status(200);
    r
}

#[track_caller]
fn expect_new(srv: &Server, target: &str, want: &[u8], old_etag: &str) -> Response {
    let r = get(srv, target);
    r.assert_status(200);
    assert_bytes_eq(&r.body, want, "body after the file changed");
    let etag = check_validators(&r);
    assert_ne!(etag, old_etag, "ETag unchanged after the file changed\n{}", r.describe());
    r
}

#[test]
fn rewrite_with_different_size() {
    let (root, srv) = standard(MODEL, &[]);
    let before = warm(&srv, "/hello.txt");
    assert_eq!(before.body_str(), HELLO);
    root.file("hello.txt", "A completely different, longer body.\n");
    expect_new(&srv, "/hello.txt", b"A completely different, longer body.\n", before.header_one("etag"));
}

#[test]
fn rewrite_same_size_new_mtime() {
    let root = Docroot::standard();
    root.set_mtime("hello.txt", old_mtime());
    let srv = serve(MODEL, &root, &[]);
    let before = warm(&srv, "/hello.txt");
    let new = "HELLO, WORLD!\n";
    assert_eq!(new.len(), HELLO.len());
    root.file("hello.txt", new);
    root.set_mtime("hello.txt", old_mtime() + Duration::from_secs(5));
    let r = expect_new(&srv, "/hello.txt", new.as_bytes(), before.header_one("etag"));
    assert_ne!(r.header_one("last-modified"), before.header_one("last-modified"));
}

#[test]
fn replaced_by_rename() {
    let (root, srv) = standard(MODEL, &[]);
    let before = warm(&srv, "/alphabet.txt");
    root.replace_file("alphabet.txt", "ZYXWVUTSRQPONMLKJIHGFEDCBA");
    root.set_mtime("alphabet.txt", old_mtime());
    expect_new(&srv, "/alphabet.txt", b"ZYXWVUTSRQPONMLKJIHGFEDCBA", before.header_one("etag"));
}

#[test]
fn conditional_after_change_is_200() {
    // A 304 for the old ETag would keep a client on stale bytes.
    let (root, srv) = standard(MODEL, &[]);
    let before = warm(&srv, "/hello.txt");
    let old_etag = before.header_one("etag");
    root.file("hello.txt", "changed\n");
    root.set_mtime("hello.txt", old_mtime());
    let r = request(&srv, "GET", "/hello.txt", &[&format!("If-None-Match: {old_etag}")]);
    r.assert_status(200);
    assert_eq!(r.body_str(), "changed\n");
}

#[test]
fn deleted_file_is_404() {
    let (root, srv) = standard(MODEL, &[]);
    warm(&srv, "/hello.txt");
    std::fs::remove_file(root.join("hello.txt")).unwrap();
    let r = get(&srv, "/hello.txt");
    r.assert_status(404);
}

#[test]
fn large_uncached_file_changes() {
    // Above --max-cached-file the body goes out via sendfile.
    let root = Docroot::standard();
    let a = pseudo_random_bytes(300_000, 1);
    let b = pseudo_random_bytes(300_000, 2);
    root.file("big.bin", &a);
    root.set_mtime("big.bin", old_mtime());
    let srv = serve(MODEL, &root, &["--max-cached-file", "64KiB"]);
    let before = warm(&srv, "/big.bin");
    assert_bytes_eq(&before.body, &a, "big.bin before");
    root.file("big.bin", &b);
    root.set_mtime("big.bin", old_mtime() + Duration::from_secs(5));
    expect_new(&srv, "/big.bin", &b, before.header_one("etag"));
    let shorter = &a[..123_456];
    root.file("big.bin", shorter);
    let r = get(&srv, "/big.bin");
    assert_bytes_eq(&r.body, shorter, "big.bin after truncation");
}

#[test]
fn tiny_cache_still_serves_everything() {
    // A cache smaller than the working set evicts; every body stays exact.
    let root = Docroot::standard();
    let files: Vec<(String, Vec<u8>)> =
        (0..12).map(|i| (format!("f{i}.bin"), pseudo_random_bytes(700 + i * 100, i as u64 + 10))).collect();
    for (name, data) in &files {
        root.file(name, data);
    }
    let srv = serve(MODEL, &root, &["--cache-size", "2KiB"]);
    let mut c = srv.client();
    for round in 0..3 {
        for (name, data) in &files {
            let r = c.request("GET", &format!("/{name}"), &[]);
            check_common(&r, "GET");
            r.assert_status(200);
            assert_bytes_eq(&r.body, data, &format!("{name} round {round}"));
        }
    }
}
