//! `modus workload from-log`: a workload directory from access logs.
//!
//! The output is what `modus workload surge` writes — `docs/`,
//! `stream.txt`, `manifest.json` — so `modus load --workload`, its
//! `--stream-times` (open loop at the log's own times) and
//! `--stream-think` (closed loop, each user's gaps as think times), and the
//! lab read it unchanged. One extension of the stream: a size of `-` says
//! the body's length is not known (a CGI request), and is not checked.
//!
//! The logs are read once, line by line, in constant memory beyond a table
//! of documents and one of users (and 60 s of lines held to put them back
//! in time order: a log is written at each response's end, so its stamps
//! are only nearly sorted). Within a second — a log's resolution — the
//! requests are spread evenly over it.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::hash::BuildHasher;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rand_core::RngCore;
use serde_json::{json, Value};

use crate::accesslog::{parse_line, Skip, TimeCache};
use crate::fit;
use crate::surge;
use crate::surge::{DOCS_DIR, MANIFEST_FILE, OFF_CAP_S, STREAM_FILE};

/// Lines may be this far out of time order (s) before they are skipped.
pub const REORDER_S: i64 = 60;
/// A user's gap longer than this starts a new session (s), the usual
/// 30-minute web-analytics cut.
pub const SESSION_GAP_S: u64 = 1800;
/// The CGI program requests of CGI-like paths are mapped to.
pub const CGI_PROGRAM: &str = "/cgi-bin/spin";
/// CPU time per CGI request when neither `--cgi-ms` nor the log says.
pub const DEFAULT_CGI_MS: u64 = 10;

/// Options of `modus workload from-log`.
#[derive(Clone, Debug)]
pub struct FromLogParams {
    /// The logs (plain or gzip), in any order: they are read oldest first.
    pub inputs: Vec<PathBuf>,
    /// Rename paths (keeping sizes and extensions).
    pub anonymize: bool,
    /// Divide every time and gap by this.
    pub speed: f64,
    /// Keep requests in [from, to) (Unix seconds).
    pub window: (Option<i64>, Option<i64>),
    /// CPU time of every CGI request; `None`: the line's request time, or [`DEFAULT_CGI_MS`].
    pub cgi_ms: Option<u64>,
    /// Seed of the documents' content.
    pub seed: u64,
}

/// Parses `FROM..TO` (either side may be empty): RFC 3339 times
/// (`2024-01-01T10:00:00Z`, `2024-01-01 10:00:00`, UTC) or Unix seconds.
pub fn parse_window(s: &str) -> Result<(Option<i64>, Option<i64>), String> {
    let (from, to) = s.split_once("..").ok_or_else(|| format!("{s:?}: want FROM..TO"))?;
    let one = |t: &str| -> Result<Option<i64>, String> {
        let t = t.trim();
        if t.is_empty() {
            return Ok(None);
        }
        if let Ok(n) = t.parse::<i64>() {
            return Ok(Some(n));
        }
        let when = humantime::parse_rfc3339_weak(t).map_err(|e| format!("{t:?}: {e}"))?;
        let secs = when.duration_since(std::time::UNIX_EPOCH).map_err(|e| e.to_string())?.as_secs();
        Ok(Some(secs as i64))
    };
    Ok((one(from)?, one(to)?))
}

/// Opens a log, gunzipping when it starts with gzip's magic bytes.
fn open(path: &Path) -> Result<Box<dyn BufRead>> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic)?;
    let f = File::open(path)?;
    Ok(if n == 2 && magic == [0x1f, 0x8b] {
        Box::new(BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(f)))
    } else {
        Box::new(BufReader::with_capacity(1 << 20, f))
    })
}

/// The first time a log's lines give, to read rotated files oldest first.
fn first_time(path: &Path) -> Result<Option<i64>> {
    let mut r = open(path)?;
    let (mut buf, mut times) = (Vec::new(), TimeCache::default());
    for _ in 0..1000 {
        buf.clear();
        if r.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        if let Ok(l) = parse_line(buf.strip_suffix(b"\n").unwrap_or(&buf), &mut times) {
            return Ok(Some(l.time));
        }
    }
    Ok(None)
}

/// A distinct request target of the stream.
pub(crate) struct Doc {
    pub(crate) target: Box<[u8]>,
    /// The largest body seen (static documents).
    pub(crate) size: u64,
    pub(crate) requests: u64,
    pub(crate) cgi: bool,
}

struct User {
    last_us: Option<u64>,
}

/// One request waiting in the reordering window.
#[derive(Clone, Copy)]
struct Pending {
    doc: u32,
    user: u32,
}

/// Everything counted while reading.
pub(crate) struct Counts {
    pub(crate) lines: u64,
    pub(crate) skipped: BTreeMap<String, u64>,
    pub(crate) requests: u64,
    pub(crate) cgi_requests: u64,
    pub(crate) sessions: u64,
    /// Gaps within sessions (ms): a histogram, constant in the log's length.
    pub(crate) think_ms: hdrhistogram::Histogram<u64>,
    /// Requests per minute since the first.
    pub(crate) rate: RateSeries,
    /// Requests in the busiest second.
    pub(crate) peak_second: u64,
    pub(crate) first: Option<i64>,
    pub(crate) last: i64,
}

impl Counts {
    fn skip(&mut self, why: impl Into<String>) {
        *self.skipped.entry(why.into()).or_default() += 1;
    }
}

/// Requests per bucket of seconds since the first, in constant memory:
/// past [`RateSeries::MAX`] buckets, neighbours merge and the width doubles.
pub(crate) struct RateSeries {
    pub(crate) width_s: u64,
    pub(crate) counts: Vec<u64>,
}

impl Default for RateSeries {
    fn default() -> RateSeries {
        RateSeries { width_s: 1, counts: Vec::new() }
    }
}

impl RateSeries {
    const MAX: usize = 1 << 12;

    fn add(&mut self, at_s: u64, n: u64) {
        let mut i = (at_s / self.width_s) as usize;
        while i >= Self::MAX {
            self.counts = self.counts.chunks(2).map(|p| p.iter().sum()).collect();
            self.width_s *= 2;
            i = (at_s / self.width_s) as usize;
        }
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += n;
    }
}

/// Whether a target is CGI-like: a query string, a `.php` file, `/cgi-bin/`.
pub fn is_cgi(target: &[u8]) -> bool {
    let path = target.split(|&b| b == b'?').next().unwrap_or(target);
    path.len() < target.len() || path.ends_with(b".php") || path.windows(9).any(|w| w == b"/cgi-bin/")
}

/// The file a static target is served from, below `docs/`: `None` when
/// it cannot be one (`.` or `..` segments, a NUL, a bad `%` escape).
pub fn file_of(target: &[u8]) -> Option<PathBuf> {
    let mut decoded = Vec::with_capacity(target.len());
    let mut i = 0;
    while i < target.len() {
        if target[i] == b'%' {
            let hex = std::str::from_utf8(target.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(target[i]);
            i += 1;
        }
    }
    if decoded.first() != Some(&b'/') || decoded.contains(&0) {
        return None;
    }
    if decoded.split(|&b| b == b'/').any(|seg| seg == b"." || seg == b"..") {
        return None;
    }
    if decoded.ends_with(b"/") {
        decoded.extend_from_slice(b"index.html");
    }
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(&decoded[1..])))
}

/// The tables' hasher: foldhash, fixed-seeded. SipHash (the std default)
/// costs more than the rest of a line's parse, and a log is no adversary of
/// the machine reading it.
type TableState = foldhash::fast::FixedState;

/// A user's key: 128 bits of two differently seeded hashes of address and
/// agent, so two users are merged only by a collision of both.
fn user_key(client: &[u8], agent: &[u8]) -> (u64, u64) {
    let one = |seed: u64| foldhash::quality::FixedState::with_seed(seed).hash_one((client, agent));
    (one(1), one(0x5851_f42d_4c95_7f2d))
}

/// The reader's state.
struct Reader {
    p: FromLogParams,
    docs: Vec<Doc>,
    doc_index: HashMap<Box<[u8]>, u32, TableState>,
    users: Vec<User>,
    user_index: HashMap<(u64, u64), u32, TableState>,
    window: BTreeMap<i64, Vec<Pending>>,
    flushed_to: Option<i64>,
    t0: Option<i64>,
    stream: BufWriter<File>,
    write_error: Option<std::io::Error>,
    c: Counts,
}

/// A stream record in the temporary file: time, gap, user, document.
const RECORD: usize = 24;

impl Reader {
    fn line(&mut self, raw: &[u8], times: &mut TimeCache) {
        self.c.lines += 1;
        let l = match parse_line(raw, times) {
            Ok(l) => l,
            Err(Skip::Empty) => return,
            Err(why) => return self.c.skip(why.describe()),
        };
        if self.p.window.0.is_some_and(|from| l.time < from) || self.p.window.1.is_some_and(|to| l.time >= to)
        {
            return self.c.skip("outside --window");
        }
        if &*l.method != b"GET" {
            return self.c.skip("not a GET");
        }
        if !(200..300).contains(&l.status) {
            return self.c.skip(format!("status {}xx", l.status / 100));
        }
        let target = &*l.target;
        if target.first() != Some(&b'/') || !target.iter().all(|b| (0x21..0x7f).contains(b)) {
            return self.c.skip("target not replayable (not a /path, or spaces, controls, non-ASCII bytes)");
        }
        let cgi = is_cgi(target);
        let key: std::borrow::Cow<[u8]> = if cgi {
            let ms = self.p.cgi_ms.or(l.duration_us.map(|us| (us + 500) / 1000)).unwrap_or(DEFAULT_CGI_MS);
            format!("{CGI_PROGRAM}?ms={ms}").into_bytes().into()
        } else {
            if file_of(target).is_none() {
                return self.c.skip("target not replayable (. or .. segments, NUL, bad % escape)");
            }
            target.into()
        };
        if self.flushed_to.is_some_and(|done| l.time <= done) {
            return self.c.skip(format!("out of time order by more than {REORDER_S} s"));
        }
        let doc = match self.doc_index.get(&*key) {
            Some(&d) => d,
            None => {
                let d = self.docs.len() as u32;
                self.docs.push(Doc { target: key.clone().into(), size: 0, requests: 0, cgi });
                self.doc_index.insert(key.into(), d);
                d
            }
        };
        let entry = &mut self.docs[doc as usize];
        entry.requests += 1;
        if !cgi {
            entry.size = entry.size.max(l.size);
        }
        let next = self.users.len() as u32;
        let user = *self.user_index.entry(user_key(l.client, l.user_agent)).or_insert(next);
        if user == next {
            self.users.push(User { last_us: None });
        }
        self.window.entry(l.time).or_default().push(Pending { doc, user });
        if let Some((&newest, _)) = self.window.last_key_value() {
            self.drain(newest - REORDER_S);
        }
    }

    /// Writes out every second up to `until`, in order.
    fn drain(&mut self, until: i64) {
        while let Some(entry) = self.window.first_entry() {
            if *entry.key() > until {
                break;
            }
            let (second, reqs) = entry.remove_entry();
            self.flushed_to = Some(second);
            let t0 = *self.t0.get_or_insert(second);
            self.c.first.get_or_insert(second);
            self.c.last = second;
            let n = reqs.len() as u64;
            self.c.rate.add((second - t0) as u64, n);
            self.c.peak_second = self.c.peak_second.max(n);
            for (i, r) in reqs.into_iter().enumerate() {
                let t = (second - t0) as u64 * 1_000_000 + i as u64 * 1_000_000 / n;
                let u = &mut self.users[r.user as usize];
                let off = match u.last_us {
                    None => {
                        self.c.sessions += 1;
                        0
                    }
                    Some(last) => {
                        let gap = t - last;
                        if gap > SESSION_GAP_S * 1_000_000 {
                            self.c.sessions += 1;
                        } else {
                            // `record` grows the histogram; `saturating_record` would clamp to its current top.
                            let _ = self.c.think_ms.record(gap / 1000);
                        }
                        gap.min((OFF_CAP_S * 1e6) as u64)
                    }
                };
                u.last_us = Some(t);
                self.c.requests += 1;
                if self.docs[r.doc as usize].cgi {
                    self.c.cgi_requests += 1;
                }
                // Fixed-size binary records: no formatting on the hot path.
                let mut rec = [0u8; RECORD];
                rec[0..8].copy_from_slice(&t.to_le_bytes());
                rec[8..16].copy_from_slice(&off.to_le_bytes());
                rec[16..20].copy_from_slice(&r.user.to_le_bytes());
                rec[20..24].copy_from_slice(&r.doc.to_le_bytes());
                if let Err(e) = self.stream.write_all(&rec) {
                    self.write_error.get_or_insert(e);
                }
            }
        }
    }
}

/// The document names: the log's paths, or with `anonymize`,
/// `/dNNN/fNNNNNN.EXT` keeping the extension.
fn names(docs: &[Doc], anonymize: bool) -> Vec<String> {
    let mut static_id = 0;
    docs.iter()
        .map(|d| {
            let t = String::from_utf8_lossy(&d.target).into_owned();
            if d.cgi || !anonymize {
                return t;
            }
            let id = static_id;
            static_id += 1;
            let last = t.rsplit('/').next().unwrap_or("");
            let ext = last
                .rsplit_once('.')
                .map(|(_, e)| e)
                .filter(|e| !e.is_empty() && e.len() <= 10 && e.bytes().all(|b| b.is_ascii_alphanumeric()));
            match ext {
                Some(ext) => format!("/d{:03}/f{id:06}.{ext}", id / 1000),
                None if t.ends_with('/') => format!("/d{:03}/f{id:06}/", id / 1000),
                None => format!("/d{:03}/f{id:06}", id / 1000),
            }
        })
        .collect()
}

/// Reads the logs and writes the workload into `out`; returns the manifest.
pub fn from_log(p: &FromLogParams, out: &Path) -> Result<Value> {
    if p.inputs.is_empty() {
        bail!("no log to read");
    }
    if !(p.speed.is_finite() && p.speed > 0.0) {
        bail!("--speed must be a positive number");
    }
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut inputs = Vec::new();
    for path in &p.inputs {
        inputs.push((first_time(path)?.unwrap_or(i64::MAX), path.clone()));
    }
    inputs.sort();
    let tmp = out.join("stream.records.tmp");
    let mut r = Reader {
        p: p.clone(),
        docs: Vec::new(),
        doc_index: HashMap::default(),
        users: Vec::new(),
        user_index: HashMap::default(),
        window: BTreeMap::new(),
        flushed_to: None,
        t0: None,
        stream: BufWriter::with_capacity(1 << 20, File::create(&tmp)?),
        write_error: None,
        c: Counts {
            lines: 0,
            skipped: BTreeMap::new(),
            requests: 0,
            cgi_requests: 0,
            sessions: 0,
            think_ms: hdrhistogram::Histogram::new(3).expect("3 significant figures"),
            rate: RateSeries::default(),
            peak_second: 0,
            first: None,
            last: 0,
        },
    };
    let started = std::time::Instant::now();
    let cpu = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
    };
    let cpu_started = cpu();
    let mut buf = Vec::with_capacity(4096);
    let mut times = TimeCache::default();
    for (_, path) in &inputs {
        let mut input = open(path)?;
        loop {
            buf.clear();
            if input.read_until(b'\n', &mut buf).with_context(|| format!("reading {}", path.display()))? == 0
            {
                break;
            }
            let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
            r.line(line, &mut times);
        }
    }
    r.drain(i64::MAX);
    if let Some(e) = r.write_error.take() {
        return Err(e).with_context(|| format!("writing {}", tmp.display()));
    }
    r.stream.flush()?;
    drop(r.stream);
    let read_s = (started.elapsed().as_secs_f64(), cpu() - cpu_started);
    let Reader { docs, users, mut c, .. } = r;

    // The documents.
    let names = names(&docs, p.anonymize);
    let docs_dir = out.join(DOCS_DIR);
    fs::create_dir_all(&docs_dir)?;
    let mut written = vec![true; docs.len()];
    for (i, d) in docs.iter().enumerate().filter(|(_, d)| !d.cgi) {
        let file = docs_dir.join(file_of(names[i].as_bytes()).expect("checked when read"));
        let wrote = file.parent().map_or(Ok(()), fs::create_dir_all).and_then(|()| {
            let mut content = vec![0u8; d.size as usize];
            crate::dist::rng(p.seed, 3_000_000 + i as u64).fill_bytes(&mut content);
            fs::write(&file, content)
        });
        if wrote.is_err() {
            // `/a` a file and `/a/b` below it: the log's server had both
            // (a rewrite, a handler); a directory tree cannot.
            written[i] = false;
            c.skip("document path collides with another's directory");
        }
    }

    // The stream, with each target's final size and name.
    let mut stream = BufWriter::with_capacity(1 << 20, File::create(out.join(STREAM_FILE))?);
    writeln!(
        stream,
        "# modus workload from-log: TIME_US USER OFF_US SIZE PATH (SIZE - : a CGI request, length unchecked)"
    )?;
    let mut dropped = 0u64;
    let mut records = BufReader::with_capacity(1 << 20, File::open(&tmp)?);
    let mut rec = [0u8; RECORD];
    loop {
        match records.read_exact(&mut rec) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e).context("reading the stream's records back"),
        }
        let word = |r: std::ops::Range<usize>| rec[r].iter().rev().fold(0u64, |a, &b| a << 8 | u64::from(b));
        let (t, off, u, d) = (word(0..8), word(8..16), word(16..20), word(20..24) as usize);
        if !written[d] {
            dropped += 1;
            continue;
        }
        let (t, off) = ((t as f64 / p.speed) as u64, (off as f64 / p.speed) as u64);
        let size = if docs[d].cgi { "-".to_string() } else { docs[d].size.to_string() };
        writeln!(stream, "{t} {u} {off} {size} {}", names[d])?;
    }
    stream.flush()?;
    fs::remove_file(&tmp)?;
    c.requests -= dropped;

    let manifest = manifest(p, &docs, users.len(), &c, read_s);
    fs::write(out.join(MANIFEST_FILE), serde_json::to_string_pretty(&manifest)? + "\n")?;
    Ok(manifest)
}

/// Most buckets of the rate over time kept in the manifest.
const RATE_BUCKETS: usize = 48;

/// The manifest of a workload made from a log.
pub(crate) fn manifest(
    p: &FromLogParams,
    docs: &[Doc],
    users: usize,
    c: &Counts,
    read_s: (f64, f64),
) -> Value {
    let mut sizes: Vec<u64> = docs.iter().filter(|d| !d.cgi).map(|d| d.size).collect();
    let counts: Vec<u64> = docs.iter().filter(|d| !d.cgi).map(|d| d.requests).collect();
    let sf = fit::size_mixture(&sizes, 133_000.0);
    sizes.sort_unstable();
    let total: u64 = sizes.iter().sum();
    let span_s = c.first.map_or(0, |f| c.last - f + 1).max(1);
    // The rate over time, in at most RATE_BUCKETS buckets.
    let per = c.rate.counts.len().div_ceil(RATE_BUCKETS).max(1);
    let width = per as u64 * c.rate.width_s;
    let rates: Vec<f64> = c
        .rate
        .counts
        .chunks(per)
        .map(|b| b.iter().sum::<u64>() as f64 / width as f64)
        .map(|r| (r * 1000.0).round() / 1000.0)
        .collect();
    let q = |h: &hdrhistogram::Histogram<u64>, q: f64| {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q) as f64 / 1e3
        }
    };
    json!({
        "schema": 1,
        "generator": "modus workload from-log",
        "reference": "fitted to the models of Barford & Crovella, Generating Representative Web Workloads for Network and Server Performance Evaluation, SIGMETRICS 1998 (SURGE), Table 2",
        "parameters": {
            "inputs": p.inputs.iter().map(|i| i.display().to_string()).collect::<Vec<_>>(),
            "anonymize": p.anonymize, "speed": p.speed,
            "window": [p.window.0, p.window.1], "cgi_ms": p.cgi_ms, "seed": p.seed,
            "session_gap_s": SESSION_GAP_S, "reorder_s": REORDER_S,
            "size_tail_k": sf.k,
        },
        "realised": {
            "lines": c.lines,
            "requests": c.requests,
            "users": users,
            "sessions": c.sessions,
            "documents": sizes.len(),
            "cgi_targets": docs.iter().filter(|d| d.cgi).count(),
            "cgi_requests": c.cgi_requests,
            "cgi_share": if c.requests > 0 { c.cgi_requests as f64 / c.requests as f64 } else { 0.0 },
            "span_s": span_s,
            "mean_rate_rps": c.requests as f64 / span_s as f64,
            "peak_second_rps": c.peak_second,
            "zipf_exponent_mle": fit::zipf_mle(&counts),
            "zipf_slope_ls": ls_slope(&counts),
            "size_body_mu": sf.mu, "size_body_sigma": sf.sigma,
            "size_tail_alpha": sf.alpha, "size_tail_fraction": sf.tail_fraction,
            "size_censored_at_max": sf.censored,
            "size_min": sizes.first().copied().unwrap_or(0),
            "size_median": sizes.get(sizes.len() / 2).copied().unwrap_or(0),
            "size_mean": if sizes.is_empty() { 0.0 } else { total as f64 / sizes.len() as f64 },
            "size_max": sizes.last().copied().unwrap_or(0),
            "total_bytes": total,
            "think_median_s": q(&c.think_ms, 0.5),
            "think_p90_s": q(&c.think_ms, 0.9),
            "think_gaps": c.think_ms.len(),
            "read_s": read_s.0,
            "read_cpu_s": read_s.1,
            "lines_per_cpu_s": c.lines as f64 / read_s.1.max(1e-9),
        },
        "skipped": c.skipped,
        "rate": {"bucket_s": width, "rps": rates},
    })
}

/// The least-squares log-log slope (negated), SURGE's own check.
fn ls_slope(counts: &[u64]) -> f64 {
    let mut c: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
    c.sort_unstable_by(|a, b| b.cmp(a));
    if c.len() > 1 {
        -surge::zipf_slope(&c)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::surge::StreamEntry;

    fn line(ip: &str, t: &str, target: &str, status: u16, size: u64, ua: &str) -> String {
        format!("{ip} - - [{t} +0000] \"GET {target} HTTP/1.1\" {status} {size} \"-\" \"{ua}\"\n")
    }

    fn run(
        log: &str,
        tweak: impl FnOnce(&mut FromLogParams),
    ) -> (tempfile::TempDir, Value, Vec<StreamEntry>) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("access.log");
        fs::write(&input, log).unwrap();
        let mut p = FromLogParams {
            inputs: vec![input],
            anonymize: false,
            speed: 1.0,
            window: (None, None),
            cgi_ms: None,
            seed: 1,
        };
        tweak(&mut p);
        let out = dir.path().join("w");
        let m = from_log(&p, &out).unwrap();
        let stream = fs::read_to_string(out.join(STREAM_FILE)).unwrap();
        let entries =
            stream.lines().filter(|l| !l.starts_with('#')).map(|l| StreamEntry::parse(l).unwrap()).collect();
        (dir, m, entries)
    }

    #[test]
    fn arrival_times_spread_over_each_second_and_sorted() {
        let mut log = String::new();
        log += &line("10.0.0.1", "01/Jan/2024:00:00:00", "/a", 200, 10, "x");
        log += &line("10.0.0.2", "01/Jan/2024:00:00:00", "/b", 200, 20, "x");
        log += &line("10.0.0.3", "01/Jan/2024:00:00:00", "/a", 200, 5, "x");
        log += &line("10.0.0.1", "01/Jan/2024:00:00:02", "/a", 200, 10, "x");
        // Written late (a long response): 1 s out of order, put back.
        log += &line("10.0.0.2", "01/Jan/2024:00:00:01", "/b", 200, 20, "x");
        let (_d, m, e) = run(&log, |_| {});
        let times: Vec<u64> = e.iter().map(|e| e.time_us).collect();
        assert_eq!(times, [0, 333_333, 666_666, 1_000_000, 2_000_000]);
        assert_eq!(e[0].size, Some(10), "the largest size seen");
        assert_eq!(m["realised"]["requests"], 5);
        assert_eq!(m["realised"]["span_s"], 3);
        assert_eq!(m["realised"]["peak_second_rps"], 3);
        let (_d, _, fast) = run(&log, |p| p.speed = 4.0);
        assert_eq!(
            fast.iter().map(|e| e.time_us).collect::<Vec<_>>(),
            [0, 83_333, 166_666, 250_000, 500_000]
        );
        assert_eq!((fast[3].off_us, fast[4].off_us), (166_666, 500_000), "gaps shrink too");
    }

    #[test]
    fn the_rate_series_stays_small() {
        let mut r = RateSeries::default();
        for s in 0..100_000 {
            r.add(s, 2);
        }
        assert!(r.counts.len() <= RateSeries::MAX && r.width_s == 32, "{} × {}", r.counts.len(), r.width_s);
        assert_eq!(r.counts.iter().sum::<u64>(), 200_000);
        assert_eq!(r.counts[0], 64);
    }

    #[test]
    fn users_are_address_and_agent_and_gaps_are_think_times() {
        let mut log = String::new();
        log += &line("10.0.0.1", "01/Jan/2024:00:00:00", "/a", 200, 1, "firefox");
        log += &line("10.0.0.1", "01/Jan/2024:00:00:00", "/b", 200, 1, "curl");
        log += &line("10.0.0.1", "01/Jan/2024:00:00:05", "/c", 200, 1, "firefox");
        // 40 minutes later: a new session of the same user (its gap kept whole, under OFF_CAP_S).
        log += &line("10.0.0.1", "01/Jan/2024:00:40:05", "/a", 200, 1, "firefox");
        log += &line("::1", "01/Jan/2024:00:40:06", "/a", 200, 1, "firefox");
        let (_d, m, e) = run(&log, |_| {});
        let users: Vec<u32> = e.iter().map(|e| e.user).collect();
        assert_eq!(users, [0, 1, 0, 0, 2]);
        let offs: Vec<u64> = e.iter().map(|e| e.off_us).collect();
        assert_eq!(offs, [0, 0, 5_000_000, 2_400_000_000, 0]);
        assert_eq!(m["realised"]["users"], 3);
        assert_eq!(m["realised"]["sessions"], 4);
        assert_eq!(m["realised"]["think_gaps"], 1);
        let think = m["realised"]["think_median_s"].as_f64().unwrap();
        assert!((think - 5.0).abs() < 0.01, "{think}: 3 significant figures");
    }

    #[test]
    fn documents_cgi_skips_and_anonymized_names() {
        let mut log = String::new();
        log += &line("1.1.1.1", "01/Jan/2024:00:00:00", "/img/logo.png", 200, 300, "x");
        log += &line("1.1.1.1", "01/Jan/2024:00:00:00", "/img/logo.png", 206, 100, "x");
        log += &line("1.1.1.1", "01/Jan/2024:00:00:00", "/docs/", 200, 42, "x");
        log += &line("1.1.1.1", "01/Jan/2024:00:00:01", "/search?q=a", 200, 999, "x");
        log += &line("1.1.1.1", "01/Jan/2024:00:00:01", "/index.php", 200, 999, "x");
        log += &line("1.1.1.1", "01/Jan/2024:00:00:01", "/missing", 404, 0, "x");
        log += &line("1.1.1.1", "01/Jan/2024:00:00:01", "/../etc/passwd", 200, 9, "x");
        log += "1.1.1.1 - - [01/Jan/2024:00:00:01 +0000] \"POST /form HTTP/1.1\" 200 5 \"-\" \"x\"\n";
        log += "1.1.1.1 - - [01/Jan/2024:00:00:01 +0000] \"GET /cut";
        let (d, m, e) = run(&log, |p| p.cgi_ms = Some(7));
        let docs = d.path().join("w/docs");
        assert_eq!(fs::metadata(docs.join("img/logo.png")).unwrap().len(), 300);
        assert_eq!(fs::metadata(docs.join("docs/index.html")).unwrap().len(), 42);
        let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["/img/logo.png", "/img/logo.png", "/docs/", "/cgi-bin/spin?ms=7", "/cgi-bin/spin?ms=7"]
        );
        assert_eq!(e[3].size, None, "a CGI body's length is not checked");
        let r = &m["realised"];
        assert_eq!((r["documents"].as_u64(), r["cgi_requests"].as_u64()), (Some(2), Some(2)));
        let skipped = &m["skipped"];
        assert_eq!(skipped["status 4xx"], 1);
        assert_eq!(skipped["not a GET"], 1);
        assert_eq!(skipped["truncated line"], 1);
        assert_eq!(skipped["target not replayable (. or .. segments, NUL, bad % escape)"], 1);

        let (d, _, e) = run(&log, |p| p.anonymize = true);
        let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths[..3], ["/d000/f000000.png", "/d000/f000000.png", "/d000/f000001/"]);
        assert_eq!(fs::metadata(d.path().join("w/docs/d000/f000000.png")).unwrap().len(), 300);
        assert!(!fs::read_to_string(d.path().join("w").join(STREAM_FILE)).unwrap().contains("logo"));
    }

    #[test]
    fn request_time_is_the_cgi_cost_and_windows_and_gzip() {
        let mut log = String::new();
        for (t, ms) in [("00:00:00", "0.020"), ("00:00:10", "0.004"), ("00:01:00", "0.004")] {
            log += &format!(
                "1.1.1.1 - - [01/Jan/2024:{t} +0000] \"GET /a.php?x=1 HTTP/1.1\" 200 5 \"-\" \"x\" {ms}\n"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let gz = dir.path().join("access.log.1.gz");
        let mut enc = flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
        enc.write_all(log.as_bytes()).unwrap();
        enc.finish().unwrap();
        // The newer plain file is given first: read second.
        let newer = dir.path().join("access.log");
        fs::write(&newer, line("1.1.1.1", "01/Jan/2024:00:02:00", "/b", 200, 3, "x")).unwrap();
        let p = FromLogParams {
            inputs: vec![newer, gz],
            anonymize: false,
            speed: 1.0,
            window: parse_window("2024-01-01T00:00:05Z..1704067260").unwrap(),
            cgi_ms: None,
            seed: 1,
        };
        let m = from_log(&p, &dir.path().join("w")).unwrap();
        let stream = fs::read_to_string(dir.path().join("w").join(STREAM_FILE)).unwrap();
        let paths: Vec<String> = stream
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| StreamEntry::parse(l).unwrap().path)
            .collect();
        assert_eq!(paths, ["/cgi-bin/spin?ms=4"]);
        assert_eq!(m["skipped"]["outside --window"], 3);
        assert_eq!(parse_window("..").unwrap(), (None, None));
        assert!(parse_window("x..").is_err());
    }
}
