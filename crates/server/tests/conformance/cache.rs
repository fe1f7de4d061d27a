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

// The event loops trust a cached file to an inotify watch of its
// directories instead of a stat per hit: these are the changes a watch of
// the file's own directory alone would miss, and every model must see them.

#[test]
fn directory_renamed_above_a_cached_file() {
    let (root, srv) = standard(MODEL, &[]);
    let before = warm(&srv, "/dir/nested/deep.txt");
    std::fs::rename(root.join("dir/nested"), root.join("dir/moved")).unwrap();
    get(&srv, "/dir/nested/deep.txt").assert_status(404);
    root.file("dir/nested/deep.txt", "a new deep file\n");
    root.set_mtime("dir/nested/deep.txt", old_mtime());
    expect_new(&srv, "/dir/nested/deep.txt", b"a new deep file\n", before.header_one("etag"));
    // The moved directory still serves under its new name.
    let moved = get(&srv, "/dir/moved/deep.txt");
    moved.assert_status(200);
    assert_eq!(moved.body_str(), "deep file\n");
}

#[test]
fn target_of_a_symlink_rewritten() {
    let (root, srv) = standard(MODEL, &[]);
    let before = warm(&srv, "/link-inside.txt");
    assert_eq!(before.body_str(), HELLO);
    root.file("hello.txt", "changed behind the link\n");
    expect_new(&srv, "/link-inside.txt", b"changed behind the link\n", before.header_one("etag"));
}

#[test]
fn symlink_pointed_elsewhere() {
    let (root, srv) = standard(MODEL, &[]);
    let before = warm(&srv, "/link-inside.txt");
    std::fs::remove_file(root.join("link-inside.txt")).unwrap();
    root.symlink("link-inside.txt", "alphabet.txt");
    expect_new(&srv, "/link-inside.txt", b"abcdefghijklmnopqrstuvwxyz", before.header_one("etag"));
}

#[test]
fn hard_link_written_through_a_name_outside_the_root() {
    let (root, srv) = standard(MODEL, &[]);
    let outside = root.base().join("outside-link.txt");
    std::fs::hard_link(root.join("hello.txt"), &outside).unwrap();
    let before = warm(&srv, "/hello.txt");
    // Same inode, rewritten in place through the other name.
    std::fs::write(&outside, "written through the other link\n").unwrap();
    expect_new(&srv, "/hello.txt", b"written through the other link\n", before.header_one("etag"));
}

#[test]
fn file_replaced_in_a_new_subdirectory_tree() {
    // The whole tree under a name swapped at once (a deploy by rename).
    let (root, srv) = standard(MODEL, &[]);
    root.file("site/v.txt", "version one\n");
    root.set_mtime("site/v.txt", old_mtime());
    let before = warm(&srv, "/site/v.txt");
    let staged = root.base().join("staged-site");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("v.txt"), "version two\n").unwrap();
    std::fs::rename(root.join("site"), root.base().join("old-site")).unwrap();
    std::fs::rename(&staged, root.join("site")).unwrap();
    expect_new(&srv, "/site/v.txt", b"version two\n", before.header_one("etag"));
}

#[test]
fn changed_between_requests_on_one_connection() {
    let (root, srv) = standard(MODEL, &[]);
    let mut c = srv.client();
    let before = c.request("GET", "/hello.txt", &[]);
    before.assert_status(200);
    let again = c.request("GET", "/hello.txt", &[]);
    assert_eq!(again.body_str(), HELLO);
    for round in 0..20 {
        let body = format!("round {round}\n");
        root.file("hello.txt", &body);
        let r = c.request("GET", "/hello.txt", &[]);
        r.assert_status(200);
        assert_eq!(r.body_str(), body, "round {round}\n{}", r.describe());
    }
}
