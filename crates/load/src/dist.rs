//! Random variates by inversion (and Box–Muller), on a seeded ChaCha8
//! generator, so a seed names the same stream on every machine and every
//! version of this crate (no dependency on `rand_distr`'s algorithms).

use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The generator every random choice uses: ChaCha8, seeded explicitly.
pub type Rng = ChaCha8Rng;

/// A generator for `(seed, stream)`: independent streams per thread/purpose.
pub fn rng(seed: u64, stream: u64) -> Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// Uniform in the open interval (0, 1): never 0, so `ln(u)` is finite.
pub fn uniform(r: &mut Rng) -> f64 {
    ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Standard normal (Box–Muller; one of the pair is discarded for simplicity).
pub fn normal(r: &mut Rng) -> f64 {
    let (u1, u2) = (uniform(r), uniform(r));
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// A distribution of non-negative reals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// Always the value.
    Fixed(f64),
    /// Exponential with this mean.
    Exp(f64),
    /// Uniform on [lo, hi).
    Uniform(f64, f64),
    /// Lognormal: `exp(N(mu, sigma))`.
    LogNormal { mu: f64, sigma: f64 },
    /// Pareto with scale (minimum) `k` and shape `alpha`: P(X > x) = (k/x)^alpha.
    Pareto { k: f64, alpha: f64 },
    /// Weibull with scale `a` and shape `b`: P(X > x) = exp(-(x/a)^b).
    Weibull { a: f64, b: f64 },
}

impl Dist {
    /// One sample.
    pub fn sample(&self, r: &mut Rng) -> f64 {
        match *self {
            Dist::Fixed(v) => v,
            Dist::Exp(mean) => -mean * uniform(r).ln(),
            Dist::Uniform(lo, hi) => lo + (hi - lo) * uniform(r),
            Dist::LogNormal { mu, sigma } => (mu + sigma * normal(r)).exp(),
            Dist::Pareto { k, alpha } => k / uniform(r).powf(1.0 / alpha),
            Dist::Weibull { a, b } => a * (-uniform(r).ln()).powf(1.0 / b),
        }
    }
}

/// A think-time (or any duration) distribution given on the command line:
/// `fixed:10ms`, `exp:50ms` (mean), `uniform:5ms:15ms`,
/// `pareto:K:ALPHA` (K a duration, the minimum), `lognormal:MEDIAN:SIGMA`,
/// `weibull:SCALE:SHAPE`. A bare duration means `fixed:`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DurationDist {
    /// The distribution, in seconds.
    pub dist: Dist,
    /// Samples above this are clipped (heavy tails must not stall a run).
    pub cap_s: f64,
}

impl DurationDist {
    /// One sample.
    pub fn sample(&self, r: &mut Rng) -> Duration {
        Duration::from_secs_f64(self.dist.sample(r).clamp(0.0, self.cap_s))
    }
}

fn secs(s: &str) -> Result<f64, String> {
    humantime::parse_duration(s).map(|d| d.as_secs_f64()).map_err(|e| format!("{s:?}: {e}"))
}

fn num(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{s:?} must be positive"))
    }
}

impl std::str::FromStr for DurationDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let dist = match parts.as_slice() {
            [d] => Dist::Fixed(secs(d)?),
            ["fixed", d] => Dist::Fixed(secs(d)?),
            ["exp", m] => Dist::Exp(secs(m)?),
            ["uniform", lo, hi] => Dist::Uniform(secs(lo)?, secs(hi)?),
            ["pareto", k, a] => Dist::Pareto { k: secs(k)?, alpha: num(a)? },
            ["lognormal", median, sigma] => Dist::LogNormal { mu: secs(median)?.ln(), sigma: num(sigma)? },
            ["weibull", a, b] => Dist::Weibull { a: secs(a)?, b: num(b)? },
            _ => {
                return Err(format!(
                    "bad distribution {s:?}: want fixed:D, exp:MEAN, uniform:LO:HI, pareto:K:ALPHA, \
                     lognormal:MEDIAN:SIGMA or weibull:SCALE:SHAPE (durations like 10ms)"
                ))
            }
        };
        Ok(DurationDist { dist, cap_s: 60.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        let a: Vec<u64> = (0..4).map(|_| rng(7, 1).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(rng(7, 1).next_u64(), rng(7, 2).next_u64());
    }

    #[test]
    fn sample_means_match() {
        let mut r = rng(1, 0);
        let n = 200_000;
        let e: Vec<f64> = (0..n).map(|_| Dist::Exp(2.0).sample(&mut r)).collect();
        assert!((mean(&e) - 2.0).abs() < 0.05, "{}", mean(&e));
        let ln: Vec<f64> =
            (0..n).map(|_| Dist::LogNormal { mu: 1.0, sigma: 0.5 }.sample(&mut r).ln()).collect();
        assert!((mean(&ln) - 1.0).abs() < 0.01);
        // Weibull mean = a * Gamma(1 + 1/b); b = 1 is the exponential.
        let w: Vec<f64> = (0..n).map(|_| Dist::Weibull { a: 3.0, b: 1.0 }.sample(&mut r)).collect();
        assert!((mean(&w) - 3.0).abs() < 0.06);
        // Pareto alpha = 3, k = 1: mean 1.5, minimum k.
        let p: Vec<f64> = (0..n).map(|_| Dist::Pareto { k: 1.0, alpha: 3.0 }.sample(&mut r)).collect();
        assert!((mean(&p) - 1.5).abs() < 0.03 && p.iter().all(|&x| x >= 1.0));
    }

    #[test]
    fn parses_think_times() {
        assert_eq!("10ms".parse::<DurationDist>().unwrap().dist, Dist::Fixed(0.01));
        assert_eq!("exp:50ms".parse::<DurationDist>().unwrap().dist, Dist::Exp(0.05));
        assert_eq!(
            "pareto:1s:1.5".parse::<DurationDist>().unwrap().dist,
            Dist::Pareto { k: 1.0, alpha: 1.5 }
        );
        assert!("pareto:1s".parse::<DurationDist>().is_err());
        assert!("exp:x".parse::<DurationDist>().is_err());
    }
}
