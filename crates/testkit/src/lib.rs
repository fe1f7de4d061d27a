//! Test harness for black-box tests of the `modus` binary.
//!
//! # Brief overview
//!
//! - [`Server`] spawns the binary as a child process (`modus serve ROOT
//!   --listen 127.0.0.1:0 --model M --access-log off ...`), reads the bound
//!   address from the first stdout line, forwards the rest of the child's
//!   output to the test's captured output, and kills the child on drop.
//!   [`Server::builder`] gives control over the arguments; [`run`] runs the
//!   binary to completion (for `--check` and argument errors).
//! - [`Client`] is a raw HTTP/1.1 client over a [`std::net::TcpStream`] with
//!   5 s read/write timeouts: it sends exact bytes and parses exact responses
//!   ([`Response`]), so tests can assert on framing, pipelining and closes.
//! - [`Docroot`] builds a document root in a temporary directory: files of
//!   known content, nested directories, symlinks, and a secret file *next
//!   to* the root that must never be served.
//!
//! Everything blocks for bounded time: reads time out, waits take a
//! deadline, and failures panic with the context a test report needs
//! (including the server's stderr when it fails to start).

#![warn(missing_docs)]

mod client;
mod exec;
mod fixtures;
mod server;
pub mod tls;

pub use client::{get_once, Client, Response};
pub use exec::{starting_a_program, write_executable};
pub use fixtures::{Docroot, SECRET};
pub use server::{run, Output, Server, ServerBuilder, Signal};

/// Asserts that two byte strings are equal without dumping megabytes on
/// failure: reports both lengths and the first differing offset.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first_diff = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    let show = |b: &[u8]| {
        let end = (first_diff + 32).min(b.len());
        let start = first_diff.saturating_sub(16).min(end);
        String::from_utf8_lossy(&b[start..end]).into_owned()
    };
    panic!(
        "{what}: bytes differ: got {} bytes, want {} bytes, first difference at \
         offset {first_diff}\n  got:  {:?}\n  want: {:?}",
        got.len(),
        want.len(),
        show(got),
        show(want),
    );
}

/// Deterministic pseudo-random bytes (xorshift), for large test files whose
/// every byte matters.
pub fn pseudo_random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
