//! Fits of the SURGE models to what a log shows: the Zipf exponent of
//! popularity, and the hybrid size model (a lognormal body and a Pareto
//! tail above `k`) as a two-component mixture.

/// Zipf exponent by maximum likelihood over ranks 1..=N (N the number of
/// counts), the counts taken in descending order as ranks: `s` solves
/// E_s[ln r] = Σ c_r ln r / Σ c_r, whose left side falls as `s` grows
/// (so bisection). Least squares on the log-log plot instead weighs each
/// rank alike, and the tail's many counts of 1 and 2 flatten it.
pub fn zipf_mle(counts: &[u64]) -> f64 {
    let mut c: Vec<u64> = counts.iter().copied().filter(|&c| c > 0).collect();
    c.sort_unstable_by(|a, b| b.cmp(a));
    let m: f64 = c.iter().sum::<u64>() as f64;
    if c.len() < 2 {
        return 0.0;
    }
    let ln: Vec<f64> = (1..=c.len()).map(|r| (r as f64).ln()).collect();
    let target = c.iter().zip(&ln).map(|(&c, l)| c as f64 * l).sum::<f64>() / m;
    let mean_ln = |s: f64| {
        let (mut num, mut den) = (0.0, 0.0);
        for l in &ln {
            let w = (-s * l).exp();
            num += w * l;
            den += w;
        }
        num / den
    };
    let (mut lo, mut hi) = (0.0f64, 8.0f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if mean_ln(mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// The hybrid size model fitted: lognormal body, Pareto tail above `k`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SizeFit {
    /// Body: mean of ln bytes.
    pub mu: f64,
    /// Body: standard deviation of ln bytes.
    pub sigma: f64,
    /// Tail: the Pareto scale (bytes), fixed, not fitted.
    pub k: f64,
    /// Tail: the Pareto shape.
    pub alpha: f64,
    /// The tail's share of the files.
    pub tail_fraction: f64,
    /// Files at the largest size, read as clipped there (right-censored).
    pub censored: usize,
}

/// Fits the hybrid model by EM. `k` is SURGE's body/tail split (133 KB):
/// where the tail begins is not identifiable from a mixture whose body
/// overlaps it, so it is given, and the body is free to reach past it.
/// When several files share the largest size exactly, a generator or a
/// site clipped them there: they count as right-censored (their tail
/// weight enters the Pareto fit as a survival, not a density).
pub fn size_mixture(sizes: &[u64], k: f64) -> SizeFit {
    let xs: Vec<f64> = sizes.iter().filter(|&&s| s > 0).map(|&s| s as f64).collect();
    let n = xs.len();
    let none = SizeFit { mu: 0.0, sigma: 0.0, k, alpha: 0.0, tail_fraction: 0.0, censored: 0 };
    if n < 2 {
        return none;
    }
    let cap = xs.iter().copied().fold(0.0, f64::max);
    let at_cap = xs.iter().filter(|&&x| x == cap).count();
    let censored_at = (at_cap >= 2 && cap > k).then_some(cap);
    let is_censored = |x: f64| censored_at == Some(x);
    let ln: Vec<f64> = xs.iter().map(|x| x.ln()).collect();
    let body: Vec<f64> = ln.iter().copied().filter(|&l| l < k.ln()).collect();
    let (mut mu, mut sigma) = mean_sd(if body.len() >= 2 { &body } else { &ln });
    let (mut pi, mut alpha) = (0.05f64, 1.0f64);
    let mut r = vec![0.0; n];
    for _ in 0..500 {
        // E: each file's probability of being from the tail.
        for i in 0..n {
            if xs[i] < k {
                r[i] = 0.0;
                continue;
            }
            let z = (ln[i] - mu) / sigma;
            let (body_l, tail_l) = if is_censored(xs[i]) {
                (0.5 * erfc(z / std::f64::consts::SQRT_2), (k / xs[i]).powf(alpha))
            } else {
                let body = (-0.5 * z * z).exp() / (xs[i] * sigma * (2.0 * std::f64::consts::PI).sqrt());
                (body, alpha * k.powf(alpha) / xs[i].powf(alpha + 1.0))
            };
            let (a, b) = (pi * tail_l, (1.0 - pi) * body_l);
            r[i] = if a + b > 0.0 { a / (a + b) } else { 1.0 };
        }
        // M.
        let tail_w: f64 = r.iter().sum();
        let new_pi = tail_w / n as f64;
        let body_w = n as f64 - tail_w;
        let new_mu = ln.iter().zip(&r).map(|(l, r)| (1.0 - r) * l).sum::<f64>() / body_w;
        let var = ln.iter().zip(&r).map(|(l, r)| (1.0 - r) * (l - new_mu).powi(2)).sum::<f64>() / body_w;
        let uncensored: f64 = xs.iter().zip(&r).filter(|(x, _)| !is_censored(**x)).map(|(_, r)| r).sum();
        let logs: f64 = xs.iter().zip(&r).map(|(x, r)| r * (x / k).ln().max(0.0)).sum();
        let new_alpha = if logs > 0.0 { uncensored / logs } else { alpha };
        let done =
            (new_mu - mu).abs() < 1e-9 && (new_alpha - alpha).abs() < 1e-9 && (new_pi - pi).abs() < 1e-12;
        (pi, mu, sigma, alpha) = (new_pi, new_mu, var.sqrt().max(1e-6), new_alpha);
        if done {
            break;
        }
    }
    SizeFit { mu, sigma, k, alpha, tail_fraction: pi, censored: censored_at.map_or(0, |_| at_cap) }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64;
    (m, var.sqrt().max(1e-6))
}

/// The complementary error function (Numerical Recipes' erfcc, |error| < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::surge;

    #[test]
    fn zipf_mle_recovers_the_exponent_where_least_squares_does_not() {
        // SURGE's own counts: 10,000 requests over 2,000 files.
        let counts = surge::zipf_counts(2000, 10_000);
        let c: Vec<u64> = counts.iter().map(|&c| c as u64).collect();
        let s = zipf_mle(&c);
        assert!((s - 1.0).abs() < 0.05, "MLE {s}");
        let slope = -surge::zipf_slope(&counts);
        assert!((slope - 1.0).abs() > 2.0 * (s - 1.0).abs(), "least squares {slope}, MLE {s}");
        let steep: Vec<u64> = (1..=500).map(|r| (1e6 * (r as f64).powf(-1.4)).round() as u64).collect();
        assert!((zipf_mle(&steep) - 1.4).abs() < 0.02, "{}", zipf_mle(&steep));
    }

    #[test]
    fn mixture_recovers_surge_sizes() {
        let sizes: Vec<u64> = surge::file_sizes(7, 20_000, u64::MAX).into_iter().map(|s| s.0).collect();
        let f = size_mixture(&sizes, 133_000.0);
        assert!((f.mu - 9.357).abs() < 0.05, "{f:?}");
        assert!((f.sigma - 1.318).abs() < 0.05, "{f:?}");
        assert!((f.alpha - 1.1).abs() < 0.08, "{f:?}");
        assert!((f.tail_fraction - 0.07).abs() < 0.01, "{f:?}");
        assert_eq!(f.censored, 0);
        // Clipped at 1 MB: the clipped files are censored, not a spike.
        let clipped: Vec<u64> = sizes.iter().map(|&s| s.min(1 << 20)).collect();
        let f = size_mixture(&clipped, 133_000.0);
        assert!(f.censored > 50, "{f:?}");
        assert!((f.alpha - 1.1).abs() < 0.08, "{f:?}");
    }

    #[test]
    fn erfc_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-6);
        assert!((erfc(1.0) - 0.157_299_2).abs() < 1e-6);
        assert!((erfc(-1.0) - 1.842_700_8).abs() < 1e-6);
    }
}
