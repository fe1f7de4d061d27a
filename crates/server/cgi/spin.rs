//! `cgi-spin`: the papers' CPU-bound CGI workload (paper 000 used a program
//! that computes for 0.25 s). Burns `ms` milliseconds of *CPU time* (not
//! wall time, so a loaded machine does not shorten the work), taken from
//! `QUERY_STRING` (`?ms=10`; default 10, at most 60000), then prints a
//! short plain-text response.

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

fn cpu_time() -> Duration {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

pub fn main() {
    let query = std::env::var("QUERY_STRING").unwrap_or_default();
    let ms: u64 = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .min(60_000);
    let budget = Duration::from_millis(ms);
    let start = cpu_time();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while cpu_time() - start < budget {
        for i in 0..10_000u64 {
            x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
    }
    let body = format!("spun {ms} ms of CPU ({x:016x})\n");
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    let _ = out.flush();
}
