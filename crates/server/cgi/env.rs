//! `cgi-env`: prints its environment, sorted, one `NAME=value` per line —
//! the meta-variables of RFC 3875 §4.1 as the server set them.

use std::io::Write;

pub fn main() {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .collect();
    vars.sort();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(b"Content-Type: text/plain; charset=utf-8\r\n\r\n");
    for (k, v) in vars {
        let _ = writeln!(out, "{k}={v}");
    }
    let _ = out.flush();
}
