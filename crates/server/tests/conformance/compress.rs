// Content codings (RFC 9110 §8.4, §12.5.3): `--compress` encodes
// compressible files for clients that accept it, `--precompressed` serves
// FILE.br / FILE.zst / FILE.gz. Every encoded body is decoded here and
// compared with the file. (Included once per model.)

use super::MODEL;
use crate::common::*;
use std::time::Duration;

const ALL: &[&str] = &["--compress", "br,zstd,gzip"];

/// A page worth compressing: repetitive HTML, 6 KB.
fn page() -> Vec<u8> {
    let mut html = String::from("<!doctype html><title>page</title>\n");
    for i in 0..120 {
        html.push_str(&format!("<p class=\"row\">row {i}: the quick brown fox</p>\n"));
    }
    html.into_bytes()
}

/// A docroot with `page.html` ([`page`]) and the standard files.
fn site() -> Docroot {
    let root = Docroot::standard();
    root.file("page.html", page());
    root.set_mtime("page.html", old_mtime());
    root
}

/// `GET /page.html` with `Accept-Encoding: accept` (none if empty).
#[track_caller]
fn fetch(srv: &Server, method: &str, accept: &str, more: &[&str]) -> Response {
    let ae = format!("Accept-Encoding: {accept}");
    let mut headers: Vec<&str> = more.to_vec();
    if !accept.is_empty() {
        headers.push(&ae);
    }
    request(srv, method, "/page.html", &headers)
}

/// Checks an encoded 200 in `coding`: the field, `Vary`, the file's type,
/// a strong tag, and a body that decodes to the file.
#[track_caller]
fn assert_encoded(r: &Response, coding: &str) {
    assert_encoded_as(r, coding, &page());
}

/// [`assert_encoded`] of a page whose content is `want`.
#[track_caller]
fn assert_encoded_as(r: &Response, coding: &str, want: &[u8]) {
    r.assert_status(200);
    assert_eq!(r.header_one("content-encoding"), coding, "{}", r.describe());
    assert_eq!(r.header_one("vary"), "Accept-Encoding");
    assert_eq!(r.header_one("content-type"), "text/html; charset=utf-8");
    check_validators(r);
    assert!(r.body.len() < want.len() / 2, "{coding} body {} bytes", r.body.len());
    assert_bytes_eq(&decode(coding, &r.body), want, &format!("{coding} body decoded"));
}

#[track_caller]
fn assert_identity(r: &Response, vary: bool) {
    r.assert_status(200);
    assert!(r.header("content-encoding").is_none(), "{}", r.describe());
    assert_eq!(r.header("vary"), vary.then_some("Accept-Encoding"), "{}", r.describe());
}

#[test]
fn negotiation_follows_q_values_then_the_servers_order() {
    let root = site();
    let srv = serve(MODEL, &root, ALL);
    for (accept, want) in [
        ("gzip", "gzip"),
        ("br, gzip", "br"),
        ("gzip, br", "br"),
        ("zstd", "zstd"),
        ("gzip;q=0.5, zstd;q=0.8, br;q=0.1", "zstd"),
        ("br;q=0, gzip", "gzip"),
        ("*", "br"),
        ("x-gzip", "gzip"),
        ("deflate, gzip;q=0.2", "gzip"),
    ] {
        let r = fetch(&srv, "GET", accept, &[]);
        assert_encoded(&r, want);
    }
    // No field, an empty one, or nothing we make: the file as it is,
    // still marked as varying.
    for accept in ["", "identity", "deflate", "gzip;q=0"] {
        let r = fetch(&srv, "GET", accept, &[]);
        assert_identity(&r, true);
        assert_bytes_eq(&r.body, &page(), accept);
    }
    // Only the codings asked for are made.
    let root = site();
    let srv = serve(MODEL, &root, &["--compress", "gzip"]);
    assert_encoded(&fetch(&srv, "GET", "br, zstd;q=0.9, gzip;q=0.1", &[]), "gzip");
    assert_identity(&fetch(&srv, "GET", "br", &[]), true);
}

#[test]
fn identity_refused() {
    let root = site();
    let srv = serve(MODEL, &root, ALL);
    assert_encoded(&fetch(&srv, "GET", "identity;q=0, gzip", &[]), "gzip");
    // Nothing acceptable can be made: the file as it is, as nginx and
    // Caddy answer (RFC 9110 §12.5.3 prefers it to a 406).
    for accept in ["identity;q=0, deflate", "*;q=0"] {
        let r = fetch(&srv, "GET", accept, &[]);
        assert_identity(&r, true);
        assert_bytes_eq(&r.body, &page(), accept);
    }
    // A list field spread over lines is one list (RFC 9110 §5.3).
    let r = request(&srv, "GET", "/page.html", &["Accept-Encoding: identity;q=0", "Accept-Encoding: gzip"]);
    assert_encoded(&r, "gzip");
    let r = request(&srv, "GET", "/page.html", &["Accept-Encoding: br;q=0.1", "Accept-Encoding: zstd"]);
    assert_encoded(&r, "zstd");
    // `*;q=0` with identity named: identity is acceptable.
    assert_identity(&fetch(&srv, "GET", "*;q=0, identity", &[]), true);
}

#[test]
fn each_variant_has_its_own_etag_and_304() {
    let root = site();
    let srv = serve(MODEL, &root, ALL);
    let mut tags = vec![fetch(&srv, "GET", "", &[]).header_one("etag").to_string()];
    for coding in ["br", "zstd", "gzip"] {
        let r = fetch(&srv, "GET", coding, &[]);
        assert_encoded(&r, coding);
        let etag = r.header_one("etag").to_string();
        assert!(!tags.contains(&etag), "{coding}: ETag {etag} shared with another representation");
        // Its own tag: 304, with the tag and Vary.
        let inm = format!("If-None-Match: {etag}");
        let r304 = fetch(&srv, "GET", coding, &[&inm]);
        r304.assert_status(304);
        assert_eq!(r304.header_one("etag"), etag);
        assert_eq!(r304.header_one("vary"), "Accept-Encoding");
        assert!(r304.body.is_empty());
        // Another representation's tag does not match this one.
        let other = if coding == "gzip" { "br" } else { "gzip" };
        assert_encoded(&fetch(&srv, "GET", other, &[&inm]), other);
        tags.push(etag);
    }
    let identity_inm = format!("If-None-Match: {}", tags[0]);
    assert_encoded(&fetch(&srv, "GET", "gzip", &[&identity_inm]), "gzip");
    fetch(&srv, "GET", "", &[&identity_inm]).assert_status(304);
}

#[test]
fn head_says_what_get_sends() {
    let root = site();
    let srv = serve(MODEL, &root, ALL);
    for coding in ["br", "zstd", "gzip"] {
        let get = fetch(&srv, "GET", coding, &[]);
        let head = fetch(&srv, "HEAD", coding, &[]);
        head.assert_status(200);
        assert!(head.body.is_empty());
        for name in ["content-encoding", "content-length", "etag", "vary", "content-type"] {
            assert_eq!(head.header_one(name), get.header_one(name), "{coding} {name}");
        }
        assert_eq!(head.content_length(), Some(get.body.len() as u64));
    }
}

/// Ranges of an encoded response are ranges of the encoded bytes (RFC
/// 9110 §14.1.1), and If-Range compares with the variant's tag.
#[test]
fn ranges_apply_to_the_encoded_bytes() {
    let root = site();
    let srv = serve(MODEL, &root, ALL);
    let whole = fetch(&srv, "GET", "gzip", &[]);
    let encoded = whole.body.clone();
    let etag = whole.header_one("etag").to_string();
    let r = fetch(&srv, "GET", "gzip", &["Range: bytes=10-99"]);
    r.assert_status(206);
    assert_eq!(r.header_one("content-encoding"), "gzip");
    assert_eq!(r.header_one("content-range"), format!("bytes 10-99/{}", encoded.len()));
    assert_eq!(r.header_one("etag"), etag);
    assert_eq!(r.header_one("vary"), "Accept-Encoding");
    assert_bytes_eq(&r.body, &encoded[10..100], "range of the gzip bytes");
    let r = fetch(&srv, "GET", "gzip", &["Range: bytes=-20"]);
    assert_bytes_eq(&r.body, &encoded[encoded.len() - 20..], "suffix of the gzip bytes");
    // Two ranges: a multipart body of the encoded bytes.
    let r = fetch(&srv, "GET", "gzip", &["Range: bytes=0-4,30-39"]);
    r.assert_status(206);
    assert!(r.header_one("content-type").starts_with("multipart/byteranges"));
    let body = r.body_str();
    assert!(body.contains(&format!("Content-Range: bytes 30-39/{}", encoded.len())), "{body}");
    // If-Range with the variant's tag honours the range; the identity's does not.
    let if_range = format!("If-Range: {etag}");
    fetch(&srv, "GET", "gzip", &["Range: bytes=0-9", &if_range]).assert_status(206);
    let identity_tag = fetch(&srv, "GET", "", &[]).header_one("etag").to_string();
    let if_range = format!("If-Range: {identity_tag}");
    let r = fetch(&srv, "GET", "gzip", &["Range: bytes=0-9", &if_range]);
    assert_encoded(&r, "gzip");
    // Past the end of the encoded bytes (not of the file): 416.
    let beyond = format!("Range: bytes={}-", encoded.len());
    let r = fetch(&srv, "GET", "gzip", &[&beyond]);
    r.assert_status(416);
    assert_eq!(r.header_one("content-range"), format!("bytes */{}", encoded.len()));
}

#[test]
fn other_types_and_small_files_are_left_alone() {
    let root = site();
    root.file("image.png", pseudo_random_bytes(1, 1).repeat(6000));
    let srv = serve(MODEL, &root, ALL);
    let r = request(&srv, "GET", "/image.png", &["Accept-Encoding: gzip, br"]);
    assert_identity(&r, false);
    assert_eq!(r.body.len(), 6000);
    // hello.txt: 14 bytes, below --compress-min-size.
    let r = request(&srv, "GET", "/hello.txt", &["Accept-Encoding: gzip, br"]);
    assert_identity(&r, false);
    assert_eq!(r.body_str(), HELLO);
    // A refused identity changes nothing for them: never encoded, never refused.
    assert_identity(&request(&srv, "GET", "/hello.txt", &["Accept-Encoding: identity;q=0"]), false);
    // Lower the minimum and the small file is encoded.
    let srv = serve(MODEL, &root, &["--compress", "gzip", "--compress-min-size", "1"]);
    let r = request(&srv, "GET", "/style.css", &["Accept-Encoding: gzip"]);
    assert_eq!(r.header("content-encoding"), None, "not smaller once encoded: sent as it is");
    let r = request(&srv, "GET", "/index.html", &["Accept-Encoding: gzip"]);
    r.assert_status(200);
}

/// A file larger than the cache takes is sent as it is (encoding it per
/// request would cost CPU every time): `--precompressed` is for those.
#[test]
fn files_beyond_the_cache_go_out_as_they_are() {
    let root = site();
    let big: Vec<u8> = page().repeat(20);
    root.file("big.html", &big);
    let srv = serve(MODEL, &root, &["--compress", "gzip", "--max-cached-file", "64KiB"]);
    let r = request(&srv, "GET", "/big.html", &["Accept-Encoding: gzip"]);
    assert_identity(&r, false);
    assert_bytes_eq(&r.body, &big, "big.html");
}

/// Without --compress the server sends nothing encoded and says no Vary.
#[test]
fn off_by_default() {
    let root = site();
    let srv = serve(MODEL, &root, &[]);
    let r = fetch(&srv, "GET", "gzip, br", &[]);
    assert_identity(&r, false);
}

#[test]
fn precompressed_newer_is_served_older_is_not() {
    let root = site();
    let gz = gzip(&page());
    root.file("page.html.gz", &gz);
    root.set_mtime("page.html.gz", old_mtime() + Duration::from_secs(10));
    let srv = serve(MODEL, &root, &["--precompressed"]);
    let r = fetch(&srv, "GET", "gzip", &[]);
    assert_encoded(&r, "gzip");
    assert_bytes_eq(&r.body, &gz, "the .gz file itself");
    let etag = r.header_one("etag").to_string();
    let inm = format!("If-None-Match: {etag}");
    fetch(&srv, "GET", "gzip", &[&inm]).assert_status(304);
    let r = fetch(&srv, "GET", "gzip", &["Range: bytes=0-9"]);
    r.assert_status(206);
    assert_bytes_eq(&r.body, &gz[..10], "range of the .gz file");
    // A client that does not take gzip gets the file.
    let r = fetch(&srv, "GET", "br", &[]);
    assert_identity(&r, true);
    assert_bytes_eq(&r.body, &page(), "identity");
    // The original changes after the .gz was made: the .gz is stale.
    let mut changed = page();
    changed.extend_from_slice(b"<p>changed</p>\n");
    root.file("page.html", &changed);
    root.set_mtime("page.html", old_mtime() + Duration::from_secs(20));
    let r = fetch(&srv, "GET", "gzip", &[]);
    assert_identity(&r, true);
    assert_bytes_eq(&r.body, &changed, "identity once the .gz is older");
    // With --compress too, the server encodes what the stale file cannot give.
    let srv = serve(MODEL, &root, &["--precompressed", "--compress", "gzip"]);
    assert_encoded_as(&fetch(&srv, "GET", "gzip", &[]), "gzip", &changed);
}

/// Siblings made by the real tools beside a file whose time has a
/// fraction of a second: `brotli -k` (1.0.9) keeps the time in whole
/// seconds, so its `.br` looks a fraction older than the file — it is
/// served all the same.
#[test]
fn precompressed_siblings_made_by_the_real_tools() {
    let root = site();
    root.set_mtime("page.html", old_mtime() + Duration::from_millis(700));
    let srv = serve(MODEL, &root, &["--precompressed"]);
    for (tool, ext, coding) in [("brotli", "br", "br"), ("gzip", "gz", "gzip"), ("zstd", "zst", "zstd")] {
        let made = std::process::Command::new(tool)
            .args(["-k", "-f", "-q"])
            .arg(root.path().join("page.html"))
            .stderr(std::process::Stdio::null())
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped {tool}: not installed");
            continue;
        }
        let r = fetch(&srv, "GET", coding, &[]);
        assert_encoded(&r, coding);
        let sibling = std::fs::read(root.path().join(format!("page.html.{ext}"))).unwrap();
        assert_bytes_eq(&r.body, &sibling, &format!("{tool}'s own .{ext}"));
    }
}

/// A large file's first encoding does not stall an event loop: where the
/// loop runs the pipeline itself (`event`, `uring`), the first request is
/// answered with the file as it is at once — on another connection a
/// small request is answered meanwhile — and the encoding, made aside,
/// is served once ready; elsewhere the thread that asks encodes it.
#[test]
fn a_large_files_first_encoding_stalls_no_loop() {
    let root = site();
    let mut json = String::from("[");
    for i in 0..12_000 {
        json.push_str(&format!("{{\"id\":{i},\"name\":\"row {i}\",\"tags\":[\"a\",\"b\"]}},"));
    }
    json.push_str("0]");
    root.file("big.json", &json);
    let srv =
        serve(MODEL, &root, &["--compress", "br", "--cache-size", "64MiB", "--max-cached-file", "8MiB"]);
    let model = MODEL.split_whitespace().next().unwrap();
    let on_loop = models::find(model).is_some_and(|m| m.caps.pipeline_on_loop);
    let mut big = srv.client();
    let first = big.request("GET", "/big.json", &["Accept-Encoding: br"]);
    first.assert_status(200);
    if on_loop {
        assert_eq!(first.header("content-encoding"), None, "the loop did not encode: {}", first.describe());
        assert_eq!(first.header_one("vary"), "Accept-Encoding");
        assert_bytes_eq(&first.body, json.as_bytes(), "the file as it is");
        // Another connection is served while the encoder works.
        get(&srv, "/hello.txt").assert_status(200);
        assert!(
            poll_until(|| big
                .request("GET", "/big.json", &["Accept-Encoding: br"])
                .header("content-encoding")
                == Some("br")),
            "the encoding made aside is served"
        );
    }
    let r = big.request("GET", "/big.json", &["Accept-Encoding: br"]);
    assert_eq!(r.header_one("content-encoding"), "br", "{}", r.describe());
    assert_bytes_eq(&decode("br", &r.body), json.as_bytes(), "br decoded");
}

/// A file rewritten in place with its inode, size and mtime kept
/// (`rsync --inplace --times`): its encoded variants follow it, as the
/// unencoded bytes do — the inode's change time tells.
#[test]
fn variants_follow_an_in_place_rewrite_that_keeps_size_and_mtime() {
    use std::io::{Seek, Write};
    let root = site();
    let srv = serve(MODEL, &root, &["--compress", "gzip,br"]);
    assert_encoded(&fetch(&srv, "GET", "gzip", &[]), "gzip");
    assert_encoded(&fetch(&srv, "GET", "br", &[]), "br");
    let changed = String::from_utf8(page()).unwrap().replace("row", "ROW").into_bytes();
    assert_eq!(changed.len(), page().len());
    let mut file = std::fs::OpenOptions::new().write(true).open(root.path().join("page.html")).unwrap();
    file.seek(std::io::SeekFrom::Start(0)).unwrap();
    file.write_all(&changed).unwrap();
    drop(file);
    root.set_mtime("page.html", old_mtime());
    for coding in ["gzip", "br"] {
        let mut fresh = false;
        // The event loops learn of it from their watch, a moment later.
        assert!(
            poll_until(|| {
                let r = fetch(&srv, "GET", coding, &[]);
                fresh = r.status == 200 && decode(coding, &r.body) == changed;
                fresh
            }),
            "{coding}: still the old bytes"
        );
    }
    let r = fetch(&srv, "GET", "", &[]);
    assert_bytes_eq(&r.body, &changed, "identity");
}

#[test]
fn precompressed_follows_the_clients_preference() {
    let root = site();
    let gz = gzip(&page());
    root.file("page.html.gz", &gz);
    root.file("page.html.br", {
        let mut out = Vec::new();
        let params = brotli::enc::BrotliEncoderParams::default();
        brotli::BrotliCompress(&mut &page()[..], &mut out, &params).unwrap();
        out
    });
    let srv = serve(MODEL, &root, &["--precompressed"]);
    assert_encoded(&fetch(&srv, "GET", "gzip, br", &[]), "br");
    assert_encoded(&fetch(&srv, "GET", "gzip, br;q=0.5", &[]), "gzip");
    let r = fetch(&srv, "HEAD", "gzip", &[]);
    assert_eq!(r.content_length(), Some(gz.len() as u64));
    assert_eq!(r.header_one("content-type"), "text/html; charset=utf-8");
    // A directory's index has its siblings too.
    root.file("dir/index.html.gz", gzip(b"<p>dir index</p>\n"));
    let r = request(&srv, "GET", "/dir/", &["Accept-Encoding: gzip"]);
    r.assert_status(200);
    assert_eq!(r.header_one("content-encoding"), "gzip");
    assert_bytes_eq(&decode("gzip", &r.body), b"<p>dir index</p>\n", "dir/ index.html.gz");
}
