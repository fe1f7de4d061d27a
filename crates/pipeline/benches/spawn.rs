//! What starting a CGI script costs the server, by how the child is made.
//!
//! modus starts scripts with `std::process::Command`, which on Linux uses
//! `posix_spawn` — glibc's `clone(CLONE_VM | CLONE_VFORK)`: the child
//! borrows the parent's address space until `exec`, so nothing is copied.
//! The classic alternative (Apache's mod_cgi, lighttpd) is `fork` + `exec`,
//! which copies the parent's page tables first: its cost grows with the
//! server's resident memory. `Command::uid` (to our own uid, a no-op) is
//! what makes std take its `fork` path, so the two are compared on the same
//! API. Each is measured with the parent small and with 256 MiB touched,
//! roughly a server with a warm file cache.
//!
//! `cargo bench -p pipeline --bench spawn`

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn spawn_and_wait(use_fork: bool) {
    let mut cmd = Command::new("/bin/true");
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    if use_fork {
        cmd.uid(rustix::process::getuid().as_raw());
    }
    let status = cmd.status().expect("spawn /bin/true");
    assert!(status.success());
}

fn spawn(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn /bin/true");
    let mut ballast: Vec<u8> = Vec::new();
    for parent_mib in [0usize, 256] {
        // Touch every page so it is resident and has page-table entries.
        ballast.resize(parent_mib << 20, 1);
        for (name, use_fork) in [("posix_spawn (vfork)", false), ("fork+exec", true)] {
            group.bench_with_input(
                BenchmarkId::new(name, format!("{parent_mib} MiB parent")),
                &use_fork,
                |b, &f| b.iter(|| spawn_and_wait(f)),
            );
        }
    }
    group.finish();
    drop(ballast);
}

criterion_group!(benches, spawn);
criterion_main!(benches);
