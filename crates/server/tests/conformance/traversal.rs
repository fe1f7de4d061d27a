// Path traversal (bad-input G1/G2): no target may serve a file outside the
// root. `Docroot` puts `secret` and `secret.txt` (content `SECRET`) right
// next to the root, so every `..` that escapes would find a real file. The
// answer must be 400 or 404 and must never contain the secret.
// (Included once per model.)

use super::MODEL;
use crate::common::*;

#[track_caller]
fn never_escapes(target: &str) {
    let (_root, srv) = standard(MODEL, &[]);
    let mut c = srv.client();
    let mut req = b"GET ".to_vec();
    req.extend_from_slice(target.as_bytes());
    req.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let _ = c.try_send(&req);
    let r = c.read_response("GET");
    check_common(&r, "GET");
    assert!(
        !r.body_str().contains(SECRET),
        "{target:?} served the secret outside the root!\n{}",
        r.describe()
    );
    assert!(r.status == 400 || r.status == 404, "{target:?}: want 400 or 404\n{}", r.describe());
    assert_serves(&srv);
}

#[test]
fn dotdot() {
    never_escapes("/../secret");
}

#[test]
fn dotdot_txt() {
    never_escapes("/../secret.txt");
}

#[test]
fn dotdot_after_dir() {
    never_escapes("/dir/../../secret.txt");
}

#[test]
fn dot_then_dotdot() {
    never_escapes("/./../secret.txt");
}

#[test]
fn encoded_dotdot() {
    never_escapes("/%2e%2e/secret");
}

#[test]
fn encoded_dotdot_uppercase() {
    never_escapes("/%2E%2E/secret.txt");
}

#[test]
fn mixed_encoded_dotdot() {
    never_escapes("/.%2e/secret.txt");
}

#[test]
fn encoded_slash() {
    never_escapes("/..%2fsecret");
}

#[test]
fn fully_encoded() {
    never_escapes("/%2e%2e%2fsecret.txt");
}

#[test]
fn double_encoded() {
    never_escapes("/%252e%252e/secret");
}

#[test]
fn overlong_utf8_dots() {
    never_escapes("/%c0%ae%c0%ae/secret");
}

#[test]
fn encoded_backslash() {
    never_escapes("/..%5csecret");
}

#[test]
fn raw_backslashes() {
    never_escapes("/a/..\\..\\secret");
}

#[test]
fn encoded_nul() {
    never_escapes("/%00");
}

#[test]
fn nul_truncation() {
    // Must not be truncated at the NUL to serve /index.html.
    never_escapes("/index.html%00.txt");
}

#[test]
fn nested_encoded_escape() {
    never_escapes("/dir/%2e%2e/%2e%2e/secret.txt");
}

#[test]
fn dotdot_semicolon() {
    never_escapes("/..;/secret.txt");
}

#[test]
fn absolute_form_dotdot() {
    never_escapes("http://localhost/../secret.txt");
}

#[test]
fn dotdot_climbing_out_of_nested_dirs() {
    never_escapes("/dir/nested/../../../secret.txt");
}
