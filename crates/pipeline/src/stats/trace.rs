//! The sampled request trace (`--trace FILE.csv`).

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use super::{Phase, PhaseTimes, Stats};

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// A sampled request trace (`--trace FILE.csv`).
#[derive(Debug)]
pub(super) struct Trace {
    file: File,
    buf: Mutex<Vec<u8>>,
    /// Sample when a 64-bit random number is below this.
    threshold: u64,
}

/// The header row of the trace CSV.
pub const TRACE_HEADER: &str = "conn,arrival_us,service_start_us,service_end_us,wait_us,read_us,parse_us,\
data_us,data,cgi_us,write_us,log_us,queue_us,status,bytes,path,worker\n";

impl Stats {
    /// Writes a sampled trace of requests to `path` (truncated, with a
    /// header row); `sample` is the fraction of requests traced (0..=1).
    pub fn with_trace(mut self, path: &Path, sample: f64) -> io::Result<Stats> {
        let mut file = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        file.write_all(TRACE_HEADER.as_bytes())?;
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        let sample = sample.clamp(0.0, 1.0);
        let threshold = if sample >= 1.0 { u64::MAX } else { (sample * u64::MAX as f64) as u64 };
        self.trace = Some(Trace { file, buf: Mutex::new(Vec::with_capacity(64 << 10)), threshold });
        Ok(self)
    }

    /// Whether this request should be traced (a cheap thread-local draw).
    pub fn sample(&self) -> bool {
        let Some(trace) = &self.trace else { return false };
        if trace.threshold == u64::MAX {
            return true;
        }
        RNG.with(|r| {
            let mut x = r.get();
            if x == 0 {
                // Seed from the thread's stack address and the clock.
                x = ((&x as *const u64 as u64) ^ self.epoch.elapsed().as_nanos() as u64) | 1;
            }
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            r.set(x);
            x.wrapping_mul(0x2545_f491_4f6c_dd1d) < trace.threshold
        })
    }

    /// Appends a trace row (see [`TRACE_HEADER`]); written in whole rows.
    pub fn trace_row(&self, row: &TraceRow<'_>) {
        let Some(trace) = &self.trace else { return };
        let us = |t: u64| t.saturating_sub(self.epoch_ns) / 1000;
        let d = |p: Phase| row.phases.get(p).map_or(String::new(), |ns| format!("{:.1}", ns as f64 / 1e3));
        let mut path = String::with_capacity(row.path.len() + 2);
        path.push('"');
        for c in row.path.chars() {
            if c == '"' {
                path.push('"');
            }
            if !c.is_control() {
                path.push(c);
            }
        }
        path.push('"');
        let thread = std::thread::current();
        let line = format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}/{}\n",
            row.conn,
            us(row.arrival),
            us(row.service_start),
            us(row.service_end),
            d(Phase::Wait),
            d(Phase::Read),
            d(Phase::Parse),
            [Phase::DataHit, Phase::DataMiss, Phase::CgiSpawn]
                .into_iter()
                .find(|p| row.phases.get(*p).is_some())
                .map_or(String::new(), d),
            row.data,
            d(Phase::CgiRun),
            d(Phase::Write),
            d(Phase::Log),
            d(Phase::Queue),
            row.status,
            row.bytes,
            path,
            std::process::id(),
            thread.name().unwrap_or("main"),
        );
        let mut buf = trace.buf.lock().unwrap_or_else(|e| e.into_inner());
        buf.extend_from_slice(line.as_bytes());
        if buf.len() >= 32 << 10 {
            Self::flush_buf(&trace.file, &mut buf);
        }
    }

    fn flush_buf(mut file: &File, buf: &mut Vec<u8>) {
        // One write of whole rows to an O_APPEND file: rows from several
        // processes do not interleave.
        let _ = file.write_all(buf);
        buf.clear();
    }

    /// Writes buffered trace rows out (the log flusher calls it).
    pub fn flush(&self) {
        if let Some(trace) = &self.trace {
            let mut buf = trace.buf.lock().unwrap_or_else(|e| e.into_inner());
            if !buf.is_empty() {
                Self::flush_buf(&trace.file, &mut buf);
            }
        }
    }
}

/// One trace row's data.
#[derive(Debug)]
pub struct TraceRow<'a> {
    /// Connection number (unique in the server: each child of a process
    /// model numbers from its own base, see [`Stats::number_conns_from`]).
    pub conn: u64,
    /// The request's first byte ([`now_ns`](super::now_ns)).
    pub arrival: u64,
    /// The pipeline started on it ([`now_ns`](super::now_ns)).
    pub service_start: u64,
    /// The response was out and logged ([`now_ns`](super::now_ns)).
    pub service_end: u64,
    /// Durations by [`Phase`], where measured.
    pub phases: &'a PhaseTimes,
    /// `hit`, `miss`, `cgi` or empty.
    pub data: &'a str,
    /// Response status.
    pub status: u16,
    /// Bytes on the wire.
    pub bytes: u64,
    /// The request path.
    pub path: &'a str,
}
