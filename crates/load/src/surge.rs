//! `modus workload`: document trees and request streams.
//!
//! SURGE (Barford & Crovella, "Generating Representative Web Workloads for
//! Network and Server Performance Evaluation", SIGMETRICS '98), Table 2
//! models, with the published parameters:
//!
//! | component | model | parameters |
//! |---|---|---|
//! | file sizes, body | lognormal | μ = 9.357, σ = 1.318 (ln bytes) |
//! | file sizes, tail | Pareto | k = 133 KB, α = 1.1 |
//! | popularity | Zipf | P(rank r) ∝ r^-1 |
//! | temporal locality | lognormal stack distances | μ = 1.5, σ = 0.80 |
//! | embedded references | Pareto | k = 1, α = 2.43 |
//! | active OFF times | Weibull | scale 1.46 s, shape 0.382 |
//! | inactive OFF times | Pareto | k = 1 s, α = 1.5 |
//!
//! About 7% of the files are drawn from the tail (the body/tail split of
//! the hybrid size model), the rest from the body. Sizes and popularity are
//! assigned independently (SURGE found their correlation negligible).
//! The request stream: each file gets its Zipf share of the requests;
//! the order comes from SURGE's stack model (draw a stack distance, take
//! the file at that depth of an LRU stack, move it to the top); the
//! references are cut into pages of 1 base file + N embedded objects, N
//! the floor of a Pareto(1, 2.43) draw (so every page embeds at least one
//! object and P(N ≥ n) = n^-2.43 exactly at integers); users
//! alternate ON (a page: requests separated by active OFF times) and OFF
//! (inactive OFF time, "think time") on virtual clocks, and the stream is
//! their merge in time order.
//!
//! Everything is drawn from ChaCha8 streams of one seed: the same seed gives
//! the same bytes.

use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use rand_core::RngCore;
use serde_json::{json, Value};

use crate::dist::{self, Dist};

/// The request stream file in a workload directory.
pub const STREAM_FILE: &str = "stream.txt";
/// The manifest file in a workload directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The documents' directory (serve this).
pub const DOCS_DIR: &str = "docs";

/// SURGE file sizes, body: lognormal (μ, σ of ln bytes).
pub const SIZE_BODY: Dist = Dist::LogNormal { mu: 9.357, sigma: 1.318 };
/// SURGE file sizes, tail: Pareto (k bytes, α).
pub const SIZE_TAIL: Dist = Dist::Pareto { k: 133_000.0, alpha: 1.1 };
/// Fraction of files drawn from the tail.
pub const TAIL_FRACTION: f64 = 0.07;
/// Zipf exponent of popularity.
pub const ZIPF_EXPONENT: f64 = 1.0;
/// SURGE temporal locality: lognormal stack distances.
pub const STACK_DISTANCE: Dist = Dist::LogNormal { mu: 1.5, sigma: 0.80 };
/// SURGE embedded references per page: Pareto.
pub const EMBEDDED: Dist = Dist::Pareto { k: 1.0, alpha: 2.43 };
/// SURGE active OFF times (s): Weibull.
pub const ACTIVE_OFF: Dist = Dist::Weibull { a: 1.46, b: 0.382 };
/// SURGE inactive OFF times (s): Pareto.
pub const INACTIVE_OFF: Dist = Dist::Pareto { k: 1.0, alpha: 1.5 };
/// OFF times are capped (the heavy tails would otherwise idle a user for days).
pub const OFF_CAP_S: f64 = 3600.0;

/// Parameters of `modus workload surge`.
#[derive(Clone, Debug)]
pub struct SurgeParams {
    /// Distinct files.
    pub files: usize,
    /// Requests in the stream.
    pub requests: usize,
    /// User equivalents (virtual clocks) merged into the stream.
    pub users: usize,
    /// Random seed.
    pub seed: u64,
    /// Largest file (bytes); tail draws above are clipped.
    pub max_size: u64,
}

impl Default for SurgeParams {
    /// `modus workload surge`'s defaults: 2,000 files, 100,000 requests, 50
    /// user equivalents, seed 1, files up to 10 MiB.
    fn default() -> SurgeParams {
        SurgeParams { files: 2000, requests: 100_000, users: 50, seed: 1, max_size: 10 << 20 }
    }
}

/// One line of the stream: `TIME_US USER OFF_US SIZE PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEntry {
    /// Virtual time of the request (µs since the stream's start).
    pub time_us: u64,
    /// The user equivalent.
    pub user: u32,
    /// Delay since this user's previous request (its OFF time).
    pub off_us: u64,
    /// Size of the file (bytes); `None` (`-`): a response whose length is
    /// not known in advance (a CGI request of `workload from-log`).
    pub size: Option<u64>,
    /// The file's path below the documents' directory.
    pub path: String,
}

impl StreamEntry {
    /// Parses a stream line.
    pub fn parse(line: &str) -> Result<StreamEntry> {
        let mut f = line.split_whitespace();
        let mut num = |what: &str| -> Result<u64> {
            f.next()
                .with_context(|| format!("missing {what}"))?
                .parse()
                .with_context(|| format!("bad {what}"))
        };
        let (time_us, user, off_us) = (num("time")?, num("user")?, num("off time")?);
        let size = match f.next() {
            Some("-") => None,
            Some(s) => Some(s.parse().context("bad size")?),
            None => bail!("missing size"),
        };
        let path = f.next().context("missing path")?.to_string();
        if !path.starts_with('/') || f.next().is_some() {
            bail!("want `TIME_US USER OFF_US SIZE /PATH`");
        }
        Ok(StreamEntry { time_us, user: user as u32, off_us, size, path })
    }
}

/// The size class of a file, for per-class reports.
pub fn size_class(size: u64) -> &'static str {
    match size {
        0..=1023 => "<1KB",
        1024..=10_239 => "1-10KB",
        10_240..=102_399 => "10-100KB",
        102_400..=1_048_575 => "100KB-1MB",
        _ => ">=1MB",
    }
}

/// File sizes (and whether each came from the tail), as SURGE draws them.
pub fn file_sizes(seed: u64, n: usize, max_size: u64) -> Vec<(u64, bool)> {
    let mut r = dist::rng(seed, 1);
    (0..n)
        .map(|_| {
            let tail = dist::uniform(&mut r) < TAIL_FRACTION;
            let x = if tail { SIZE_TAIL.sample(&mut r) } else { SIZE_BODY.sample(&mut r) };
            ((x.round() as u64).clamp(1, max_size), tail)
        })
        .collect()
}

/// Zipf request counts for ranks 1..=n summing to `m` (largest remainders).
pub fn zipf_counts(n: usize, m: usize) -> Vec<usize> {
    let w: Vec<f64> = (1..=n).map(|r| (r as f64).powf(-ZIPF_EXPONENT)).collect();
    let total: f64 = w.iter().sum();
    let exact: Vec<f64> = w.iter().map(|x| x / total * m as f64).collect();
    let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut left = m - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    counts
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64;
    (m, var.sqrt())
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Pareto shape by maximum likelihood: n / Σ ln(x/k).
pub fn pareto_alpha_mle(xs: &[f64], k: f64) -> f64 {
    let s: f64 = xs.iter().map(|x| (x / k).ln()).sum();
    if s > 0.0 {
        xs.len() as f64 / s
    } else {
        0.0
    }
}

/// Pareto shape by maximum likelihood when values at `cap` were clipped
/// (right-censored): uncensored count / Σ ln(x/k). Without clipping it is
/// [`pareto_alpha_mle`].
pub fn pareto_alpha_mle_censored(xs: &[f64], k: f64, cap: f64) -> f64 {
    let s: f64 = xs.iter().map(|x| (x.min(cap) / k).ln()).sum();
    let uncensored = xs.iter().filter(|&&x| x < cap).count();
    if s > 0.0 {
        uncensored as f64 / s
    } else {
        0.0
    }
}

/// Weibull (scale, shape) by maximum likelihood: the shape k solves
/// Σ xᵏ ln x / Σ xᵏ − 1/k = mean(ln x) (increasing in k, so bisection),
/// then scale = (Σ xᵏ / n)^(1/k).
pub fn weibull_mle(xs: &[f64]) -> (f64, f64) {
    let xs: Vec<f64> = xs.iter().copied().filter(|&x| x > 0.0).collect();
    if xs.len() < 2 {
        return (0.0, 0.0);
    }
    // Scaled by the largest value so xᵏ cannot overflow.
    let top = xs.iter().copied().fold(0.0, f64::max);
    let ln: Vec<f64> = xs.iter().map(|x| (x / top).ln()).collect();
    let mean_ln = ln.iter().sum::<f64>() / ln.len() as f64;
    let f = |k: f64| {
        let (mut a, mut b) = (0.0, 0.0);
        for &l in &ln {
            let w = (k * l).exp();
            a += w * l;
            b += w;
        }
        a / b - 1.0 / k - mean_ln
    };
    let (mut lo, mut hi): (f64, f64) = (1e-3, 100.0);
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if f(mid) > 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let k = (lo * hi).sqrt();
    let mean_pow = ln.iter().map(|l| (k * l).exp()).sum::<f64>() / ln.len() as f64;
    (top * mean_pow.powf(1.0 / k), k)
}

/// Least-squares slope of ln(count) against ln(rank) over ranks with
/// count > 0 (≈ −1 for Zipf).
pub fn zipf_slope(counts_by_rank: &[usize]) -> f64 {
    let pts: Vec<(f64, f64)> = counts_by_rank
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(r, &c)| (((r + 1) as f64).ln(), (c as f64).ln()))
        .collect();
    let n = pts.len() as f64;
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx > 0.0 {
        sxy / sxx
    } else {
        0.0
    }
}

fn file_path(id: usize) -> String {
    format!("/d{:02}/f{id:05}.bin", id / 1000)
}

/// Generates the SURGE document tree under `out/docs`, the stream
/// `out/stream.txt` and `out/manifest.json`; returns the manifest.
pub fn generate(p: &SurgeParams, out: &Path) -> Result<Value> {
    generate_parts(p, out, true, true)
}

/// The document tree alone (`out/docs`, and the manifest). The documents
/// depend on the seed, `files` and `max_size` only: streams of any number
/// of users or requests made with those replay against them.
pub fn generate_documents(p: &SurgeParams, out: &Path) -> Result<Value> {
    generate_parts(p, out, true, false)
}

/// The request stream alone (`out/stream.txt`, and the manifest), for
/// documents [`generate_documents`] wrote elsewhere with the same seed,
/// `files` and `max_size`: the lab's stream of N users per client count.
pub fn generate_stream(p: &SurgeParams, out: &Path) -> Result<Value> {
    generate_parts(p, out, false, true)
}

fn generate_parts(p: &SurgeParams, out: &Path, write_docs: bool, write_stream: bool) -> Result<Value> {
    if p.files == 0 || p.requests == 0 || p.users == 0 {
        bail!("--files, --requests and --users must be positive");
    }
    let sizes = file_sizes(p.seed, p.files, p.max_size);

    // Popularity: a random permutation assigns Zipf ranks to files.
    let mut r = dist::rng(p.seed, 2);
    let mut by_rank: Vec<usize> = (0..p.files).collect();
    for i in (1..by_rank.len()).rev() {
        let j = (r.next_u64() % (i as u64 + 1)) as usize;
        by_rank.swap(i, j);
    }
    let counts_by_rank = zipf_counts(p.files, p.requests);
    let mut remaining = vec![0usize; p.files];
    for (rank, &file) in by_rank.iter().enumerate() {
        remaining[file] = counts_by_rank[rank];
    }

    // Temporal locality: the LRU stack model. The stack's top is its end;
    // initially the most popular files are on top.
    let mut r = dist::rng(p.seed, 3);
    let mut stack: Vec<usize> = by_rank.iter().rev().copied().filter(|&f| remaining[f] > 0).collect();
    let mut refs = Vec::with_capacity(p.requests);
    // The continuous draws, for the manifest's fit (the discrete depth is
    // also clipped to the stack's size).
    let mut distances = Vec::with_capacity(p.requests);
    while !stack.is_empty() {
        let x = STACK_DISTANCE.sample(&mut r);
        distances.push(x);
        let d = (x.floor() as usize).min(stack.len() - 1);
        let pos = stack.len() - 1 - d;
        let f = stack.remove(pos);
        refs.push(f);
        remaining[f] -= 1;
        if remaining[f] > 0 {
            stack.push(f);
        }
    }

    // Pages (base + embedded objects) and users' ON/OFF clocks.
    let mut r = dist::rng(p.seed, 4);
    let mut clocks: BinaryHeap<std::cmp::Reverse<(u64, u32)>> =
        (0..p.users as u32).map(|u| std::cmp::Reverse(((r.next_u64() % 1_000_000), u))).collect();
    let mut first_page = vec![true; p.users];
    let mut entries = Vec::with_capacity(p.requests);
    // Raw draws (before flooring and capping) for the manifest's fits.
    let (mut embedded_draws, mut page_sizes) = (Vec::new(), Vec::new());
    let (mut active, mut inactive) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < refs.len() {
        let x = EMBEDDED.sample(&mut r);
        embedded_draws.push(x);
        // The last page may be cut short by the end of the stream.
        let objects = (1 + x.floor() as usize).min(refs.len() - i);
        page_sizes.push(objects as f64);
        let std::cmp::Reverse((mut clock, user)) = clocks.pop().expect("users");
        for (j, &f) in refs[i..i + objects].iter().enumerate() {
            let off_s = if j > 0 {
                let s = ACTIVE_OFF.sample(&mut r);
                active.push(s);
                s.min(OFF_CAP_S)
            } else if first_page[user as usize] {
                first_page[user as usize] = false;
                0.0
            } else {
                let s = INACTIVE_OFF.sample(&mut r);
                inactive.push(s);
                s.min(OFF_CAP_S)
            };
            let off_us = (off_s * 1e6).round() as u64;
            clock += off_us;
            entries.push(StreamEntry {
                time_us: clock,
                user,
                off_us,
                size: Some(sizes[f].0),
                path: file_path(f),
            });
        }
        clocks.push(std::cmp::Reverse((clock, user)));
        i += objects;
    }
    entries.sort_by_key(|e| e.time_us);

    // Write the documents, the stream and the manifest.
    let docs = out.join(DOCS_DIR);
    fs::create_dir_all(if write_docs { &docs } else { out })
        .with_context(|| format!("creating {}", out.display()))?;
    for (id, &(size, _)) in sizes.iter().enumerate().filter(|_| write_docs) {
        let path = docs.join(file_path(id).trim_start_matches('/'));
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut content = vec![0u8; size as usize];
        dist::rng(p.seed, 1_000_000 + id as u64).fill_bytes(&mut content);
        fs::write(&path, content).with_context(|| format!("writing {}", path.display()))?;
    }
    let mut stream = String::with_capacity(entries.len() * 40);
    stream.push_str("# modus workload surge: TIME_US USER OFF_US SIZE PATH\n");
    for e in &entries {
        let _ = writeln!(stream, "{} {} {} {} {}", e.time_us, e.user, e.off_us, e.size.unwrap_or(0), e.path);
    }
    if write_stream {
        fs::write(out.join(STREAM_FILE), &stream)?;
    }

    let body_ln: Vec<f64> = sizes.iter().filter(|s| !s.1).map(|s| (s.0 as f64).ln()).collect();
    let tail: Vec<f64> = sizes.iter().filter(|s| s.1).map(|s| s.0 as f64).collect();
    let (body_mu, body_sigma) = mean_sd(&body_ln);
    let mut all: Vec<f64> = sizes.iter().map(|s| s.0 as f64).collect();
    let total_bytes: u64 = sizes.iter().map(|s| s.0).sum();
    let ln_d: Vec<f64> = distances.iter().map(|d| d.ln()).collect();
    let (d_mu, d_sigma) = mean_sd(&ln_d);
    let requested_bytes: u64 = entries.iter().filter_map(|e| e.size).sum();
    let mut per_file = std::collections::HashMap::new();
    for e in &entries {
        *per_file.entry(e.path.as_str()).or_insert(0usize) += 1;
    }
    let mut stream_counts: Vec<usize> = per_file.into_values().collect();
    stream_counts.sort_unstable_by(|a, b| b.cmp(a));
    let (active_scale, active_shape) = weibull_mle(&active);
    let manifest = json!({
        "schema": 1,
        "generator": "modus workload surge",
        "reference": "Barford & Crovella, Generating Representative Web Workloads for Network and Server Performance Evaluation, SIGMETRICS 1998 (SURGE), Table 2",
        "parameters": {
            "files": p.files, "requests": p.requests, "users": p.users, "seed": p.seed, "max_size": p.max_size,
            "rng": "ChaCha8 (rand_chacha), one stream per purpose",
            "size_body": {"model": "lognormal", "mu": 9.357, "sigma": 1.318},
            "size_tail": {"model": "pareto", "k": 133_000, "alpha": 1.1, "fraction_of_files": TAIL_FRACTION},
            "popularity": {"model": "zipf", "exponent": ZIPF_EXPONENT},
            "stack_distance": {"model": "lognormal", "mu": 1.5, "sigma": 0.80},
            "embedded_per_page": {"model": "pareto", "k": 1, "alpha": 2.43},
            "active_off_s": {"model": "weibull", "scale": 1.46, "shape": 0.382, "cap": OFF_CAP_S},
            "inactive_off_s": {"model": "pareto", "k": 1, "alpha": 1.5, "cap": OFF_CAP_S},
        },
        "realised": {
            "files": p.files,
            "total_bytes": total_bytes,
            "size_min": all.iter().copied().fold(f64::INFINITY, f64::min),
            "size_median": median(&mut all),
            "size_mean": total_bytes as f64 / p.files as f64,
            "size_max": all.last().copied().unwrap_or(0.0),
            "body_files": body_ln.len(), "body_ln_mean": body_mu, "body_ln_sd": body_sigma,
            "tail_files": tail.len(), "tail_fraction": tail.len() as f64 / p.files as f64,
            "tail_alpha_mle": pareto_alpha_mle_censored(&tail, 133_000.0, p.max_size as f64),
            "tail_files_clipped": tail.iter().filter(|&&x| x >= p.max_size as f64).count(),
            "zipf_slope_stream": zipf_slope(&stream_counts),
            "files_requested": stream_counts.len(),
            "requests": entries.len(),
            "requested_bytes": requested_bytes,
            "stack_distance_ln_mean": d_mu, "stack_distance_ln_sd": d_sigma,
            "pages": page_sizes.len(),
            "objects_per_page_mean": mean_sd(&page_sizes).0,
            "pages_without_embedded": page_sizes.iter().filter(|&&n| n < 2.0).count(),
            "embedded_alpha_mle": pareto_alpha_mle(&embedded_draws, 1.0),
            "active_off_weibull_scale_mle": active_scale, "active_off_weibull_shape_mle": active_shape,
            "active_off_median_s": median(&mut active), "active_off_count": active.len(),
            "inactive_off_median_s": median(&mut inactive),
            "inactive_off_alpha_mle": pareto_alpha_mle(&inactive, 1.0),
            "stream_span_s": entries.last().map_or(0.0, |e| e.time_us as f64 / 1e6),
        },
    });
    fs::write(out.join(MANIFEST_FILE), serde_json::to_string_pretty(&manifest)? + "\n")?;
    Ok(manifest)
}

/// The papers' fixed-size files: 500 B, 50 KB and 115 KB; and 1 MB, the
/// largest file modus's cache keeps by default (`--max-cached-file 1MiB`).
/// Appended last: each file's content depends on its place in the list.
pub const FIXED: [(&str, usize); 4] =
    [("500b.bin", 500), ("50k.bin", 50 * 1024), ("115k.bin", 115 * 1024), ("1m.bin", 1 << 20)];

/// Writes the fixed-size files into `out` (deterministic content).
pub fn fixed(out: &Path, seed: u64) -> Result<()> {
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (i, (name, size)) in FIXED.iter().enumerate() {
        let mut content = vec![0u8; *size];
        dist::rng(seed, 2_000_000 + i as u64).fill_bytes(&mut content);
        fs::write(out.join(name), content)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_sizes_recover_the_published_parameters() {
        let s = file_sizes(42, 60_000, u64::MAX);
        let body: Vec<f64> = s.iter().filter(|x| !x.1).map(|x| (x.0 as f64).ln()).collect();
        let tail: Vec<f64> = s.iter().filter(|x| x.1).map(|x| x.0 as f64).collect();
        let (mu, sigma) = mean_sd(&body);
        assert!((mu - 9.357).abs() < 0.03, "mu {mu}");
        assert!((sigma - 1.318).abs() < 0.03, "sigma {sigma}");
        let frac = tail.len() as f64 / s.len() as f64;
        assert!((frac - 0.07).abs() < 0.005, "tail fraction {frac}");
        let alpha = pareto_alpha_mle(&tail, 133_000.0);
        assert!((alpha - 1.1).abs() < 0.08, "alpha {alpha}");
    }

    #[test]
    fn zipf_counts_sum_and_slope() {
        let c = zipf_counts(1000, 100_000);
        assert_eq!(c.iter().sum::<usize>(), 100_000);
        assert!(c.windows(2).all(|w| w[0] >= w[1]));
        let slope = zipf_slope(&c);
        assert!((slope + 1.0).abs() < 0.05, "slope {slope}");
    }

    #[test]
    fn clipped_tail_still_recovers_alpha() {
        // A 1 MB cap clips about 10% of the tail draws.
        let cap = 1_000_000;
        let s = file_sizes(42, 60_000, cap);
        let tail: Vec<f64> = s.iter().filter(|x| x.1).map(|x| x.0 as f64).collect();
        let clipped = tail.iter().filter(|&&x| x >= cap as f64).count();
        assert!(clipped * 20 > tail.len(), "{clipped} of {} clipped", tail.len());
        let naive = pareto_alpha_mle(&tail, 133_000.0);
        let alpha = pareto_alpha_mle_censored(&tail, 133_000.0, cap as f64);
        assert!((alpha - 1.1).abs() < 0.08, "censored MLE {alpha}");
        assert!(naive - 1.1 > 0.1, "clipping biases the plain MLE ({naive}): the test would not notice");
    }

    #[test]
    fn weibull_mle_recovers_parameters() {
        let mut r = dist::rng(5, 0);
        let xs: Vec<f64> = (0..50_000).map(|_| Dist::Weibull { a: 2.0, b: 0.7 }.sample(&mut r)).collect();
        let (scale, shape) = weibull_mle(&xs);
        assert!((shape - 0.7).abs() < 0.02 && (scale - 2.0).abs() < 0.05, "{scale} {shape}");
    }

    /// A large stream: every SURGE component's parameters come back out of
    /// what was generated (the fits in the manifest use the raw draws; the
    /// Zipf slope is fitted to the stream's own per-file counts).
    #[test]
    fn stream_recovers_the_published_parameters() {
        let dir = tempfile::tempdir().unwrap();
        let p = SurgeParams { files: 1000, requests: 200_000, users: 50, seed: 9, max_size: 2048 };
        let m = generate(&p, dir.path()).unwrap();
        let r = &m["realised"];
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {}", r[k]));
        assert_eq!(r["requests"], 200_000);
        let (mu, sigma) = (f("stack_distance_ln_mean"), f("stack_distance_ln_sd"));
        assert!((mu - 1.5).abs() < 0.02 && (sigma - 0.80).abs() < 0.02, "stack distance {mu} {sigma}");
        let alpha = f("embedded_alpha_mle");
        assert!((alpha - 2.43).abs() < 0.06, "embedded alpha {alpha}");
        // Only a last page cut short by the end of the stream may lack an embedded object.
        assert!(f("pages_without_embedded") <= 1.0, "{}", r["pages_without_embedded"]);
        // 1 + E[floor(Pareto(1, 2.43))] = 1 + ζ(2.43) ≈ 2.37.
        let per_page = f("objects_per_page_mean");
        assert!((per_page - 2.37).abs() < 0.05, "objects per page {per_page}");
        let (scale, shape) = (f("active_off_weibull_scale_mle"), f("active_off_weibull_shape_mle"));
        assert!((shape - 0.382).abs() < 0.01 && (scale - 1.46).abs() < 0.06, "active OFF {scale} {shape}");
        // Weibull median = scale * ln(2)^(1/shape) = 0.559 s.
        let med = f("active_off_median_s");
        assert!((med - 0.559).abs() < 0.03, "active OFF median {med}");
        let a = f("inactive_off_alpha_mle");
        assert!((a - 1.5).abs() < 0.05, "inactive OFF alpha {a}");
        let slope = f("zipf_slope_stream");
        assert!((slope + 1.0).abs() < 0.03, "Zipf slope of the stream {slope}");
        assert_eq!(r["files_requested"], 1000);
    }

    #[test]
    fn same_seed_same_bytes() {
        let read_all = |d: &Path| {
            let mut v = Vec::new();
            for sub in fs::read_dir(d.join(DOCS_DIR)).unwrap() {
                let sub = sub.unwrap().path();
                let mut files: Vec<_> = fs::read_dir(&sub).unwrap().map(|e| e.unwrap().path()).collect();
                files.sort();
                for f in files {
                    v.push((f.strip_prefix(d).unwrap().to_path_buf(), fs::read(&f).unwrap()));
                }
            }
            v.sort();
            (v, fs::read(d.join(STREAM_FILE)).unwrap(), fs::read(d.join(MANIFEST_FILE)).unwrap())
        };
        let p = SurgeParams { files: 50, requests: 500, users: 5, seed: 3, max_size: 200_000 };
        let (a, b, c) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        generate(&p, a.path()).unwrap();
        generate(&p, b.path()).unwrap();
        generate(&SurgeParams { seed: 4, ..p.clone() }, c.path()).unwrap();
        assert!(read_all(a.path()) == read_all(b.path()), "same seed, different output");
        assert!(read_all(a.path()).1 != read_all(c.path()).1, "another seed, same stream");
    }

    /// The lab's split: documents once, a stream per number of users,
    /// the same bytes as a whole workload made at once.
    #[test]
    fn documents_once_streams_per_users() {
        let p = SurgeParams { files: 40, requests: 400, users: 3, seed: 5, max_size: 100_000 };
        let (whole, docs, six) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        generate(&p, whole.path()).unwrap();
        generate_documents(&p, docs.path()).unwrap();
        assert!(!docs.path().join(STREAM_FILE).exists());
        let m = generate_stream(&SurgeParams { users: 6, ..p.clone() }, six.path()).unwrap();
        assert!(!six.path().join(DOCS_DIR).exists());
        assert_eq!(m["parameters"]["users"], 6);
        let file = file_path(7);
        let read = |d: &Path| fs::read(d.join(DOCS_DIR).join(file.trim_start_matches('/'))).unwrap();
        assert_eq!(read(whole.path()), read(docs.path()));
        let users: std::collections::BTreeSet<u32> = fs::read_to_string(six.path().join(STREAM_FILE))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| StreamEntry::parse(l).unwrap().user)
            .collect();
        assert_eq!(users.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn stream_lines_round_trip() {
        let e = StreamEntry::parse("10 2 5 1234 /d00/f00001.bin").unwrap();
        assert_eq!(
            (e.time_us, e.user, e.off_us, e.size, e.path.as_str()),
            (10, 2, 5, Some(1234), "/d00/f00001.bin")
        );
        assert_eq!(StreamEntry::parse("10 2 5 - /cgi-bin/spin?ms=3").unwrap().size, None);
        assert!(StreamEntry::parse("10 2 5 x /a").is_err());
        assert!(StreamEntry::parse("10 2 5 1234 rel").is_err());
        assert!(StreamEntry::parse("10 2 5").is_err());
    }
}
