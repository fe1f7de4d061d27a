//! Range requests (RFC 9110 §14): parsing a `Range` header and deciding
//! which bytes of a representation to send.

use std::cmp::Ordering;
use std::ops::Range;

/// What to send in answer to a `Range` header.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Ignore the header and send the whole representation (200).
    Full,
    /// Send these byte ranges (206): half-open, sorted, merged, non-empty.
    /// A satisfiable range covering the whole representation is a 206 too,
    /// as nginx answers: the client asked for a range and gets one, with
    /// its `Content-Range`.
    Partial(Vec<Range<u64>>),
    /// No range overlaps the representation (416 with
    /// `Content-Range: bytes */len`, RFC 9110 §15.5.17).
    Unsatisfiable,
}

/// Evaluates a `Range` header value against a representation of `len`
/// bytes, honouring at most `max_ranges` range specs.
///
/// Any unit other than `bytes`, and any syntactically invalid header,
/// yields [`RangeOutcome::Full`]: RFC 9110 §14.2 lets a server ignore the
/// field, and an invalid one must not be half-applied. So does a header
/// with more than `max_ranges` specs (counted before merging), which bounds
/// the work one request can cause (the "Apache Killer", CVE-2011-3192).
pub fn evaluate(header: &str, len: u64, max_ranges: usize) -> RangeOutcome {
    let Some((unit, set)) = header.split_once('=') else {
        return RangeOutcome::Full;
    };
    // Range units are case-insensitive (RFC 9110 §14.1).
    if !unit.eq_ignore_ascii_case("bytes") {
        return RangeOutcome::Full;
    }

    let mut ranges = Vec::new();
    let mut specs = 0;
    // `1#range-spec` (§14.1.1) is a list, so empty elements and optional
    // whitespace around commas must be accepted (§5.6.1).
    for spec in set.split(',').map(|s| s.trim_matches([' ', '\t'])) {
        if spec.is_empty() {
            continue;
        }
        specs += 1;
        if specs > max_ranges {
            return RangeOutcome::Full;
        }
        match parse_spec(spec, len) {
            Spec::Invalid => return RangeOutcome::Full,
            Spec::Unsatisfiable => {}
            Spec::Satisfiable(range) => ranges.push(range),
        }
    }
    if specs == 0 {
        return RangeOutcome::Full;
    }
    if ranges.is_empty() {
        return RangeOutcome::Unsatisfiable;
    }
    if len == 0 {
        // A suffix-range is satisfiable on an empty representation
        // (§14.1.1) but selects no bytes, which a 206 cannot express.
        return RangeOutcome::Full;
    }

    // Overlapping and out-of-order ranges are what §14.2 allows a server to
    // coalesce; merging also caps the response at `len` bytes.
    ranges.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    RangeOutcome::Partial(merged)
}

enum Spec {
    Invalid,
    Unsatisfiable,
    /// Half-open; may be empty only when `len` is zero.
    Satisfiable(Range<u64>),
}

/// One `int-range` or `suffix-range` (RFC 9110 §14.1.1).
fn parse_spec(spec: &str, len: u64) -> Spec {
    let Some((first, last)) = spec.split_once('-') else {
        return Spec::Invalid;
    };
    if first.is_empty() {
        // suffix-range: the last N bytes, or all of them if N ≥ len; `-0`
        // is valid but selects nothing.
        if !is_digits(last) {
            return Spec::Invalid;
        }
        return match parse_saturating(last) {
            0 => Spec::Unsatisfiable,
            n => Spec::Satisfiable(len.saturating_sub(n)..len),
        };
    }
    if !is_digits(first) || !(last.is_empty() || is_digits(last)) {
        return Spec::Invalid;
    }
    // Compare as decimal strings, so values beyond u64 are still ordered
    // right: `last < first` makes the whole header invalid.
    if !last.is_empty() && cmp_decimal(last, first) == Ordering::Less {
        return Spec::Invalid;
    }
    // A first-pos that overflows u64 saturates, which is ≥ len anyway.
    let start = parse_saturating(first);
    if start >= len {
        return Spec::Unsatisfiable;
    }
    // A missing or too-large last-pos means "to the end".
    let end = if last.is_empty() { len } else { parse_saturating(last).saturating_add(1).min(len) };
    Spec::Satisfiable(start..end)
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses ASCII digits, saturating at `u64::MAX` instead of overflowing
/// (the class of bug behind IIS MS15-034 and nginx CVE-2017-7529).
fn parse_saturating(digits: &str) -> u64 {
    digits.bytes().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0')))
}

fn cmp_decimal(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
// A one-element `vec![a..b]` is exactly the `Partial` payload meant here,
// not a mistaken attempt to collect the range.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::RangeOutcome::{Full, Partial, Unsatisfiable};
    use super::*;

    fn eval(header: &str, len: u64) -> RangeOutcome {
        evaluate(header, len, 16)
    }

    #[test]
    fn single_ranges() {
        assert_eq!(eval("bytes=0-0", 10), Partial(vec![0..1]));
        assert_eq!(eval("bytes=2-5", 10), Partial(vec![2..6]));
        assert_eq!(eval("bytes=5-", 10), Partial(vec![5..10]));
        assert_eq!(eval("bytes=9-9", 10), Partial(vec![9..10]));
        assert_eq!(eval("bytes=-3", 10), Partial(vec![7..10]));
        assert_eq!(eval("bytes=-1", 10), Partial(vec![9..10]));
    }

    #[test]
    fn the_whole_representation_as_a_range_is_a_206() {
        for spec in [
            "bytes=0-",
            "bytes=0-9",
            "bytes=0-100",
            "bytes=-10",
            "bytes=-100",
            "bytes=0-4,5-9",
            "bytes=5-,0-6",
        ] {
            assert_eq!(eval(spec, 10), Partial(vec![0..10]), "{spec}");
        }
    }

    #[test]
    fn last_pos_clamps() {
        assert_eq!(eval("bytes=5-100", 10), Partial(vec![5..10]));
        assert_eq!(eval("bytes=1-18446744073709551615", 10), Partial(vec![1..10]));
        assert_eq!(eval("bytes=1-18446744073709551616", 10), Partial(vec![1..10]));
        assert_eq!(eval("bytes=1-99999999999999999999999999999999", 10), Partial(vec![1..10]));
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        assert_eq!(eval("bytes=0-18446744073709551615", 10), Partial(vec![0..10]));
        assert_eq!(eval("bytes=0-18446744073709551616", 10), Partial(vec![0..10]));
        assert_eq!(eval("bytes=18446744073709551615-", 10), Unsatisfiable);
        assert_eq!(eval("bytes=18446744073709551616-", 10), Unsatisfiable);
        assert_eq!(eval("bytes=18446744073709551616-18446744073709551617", 10), Unsatisfiable);
        // Beyond u64 the order still decides validity.
        assert_eq!(eval("bytes=18446744073709551617-18446744073709551616", 10), Full);
        assert_eq!(eval("bytes=-18446744073709551616", 10), Partial(vec![0..10]));
        assert_eq!(
            eval("bytes=18446744073709551614-18446744073709551615", u64::MAX),
            Partial(vec![u64::MAX - 1..u64::MAX])
        );
        assert_eq!(eval("bytes=-1", u64::MAX), Partial(vec![u64::MAX - 1..u64::MAX]));
    }

    #[test]
    fn leading_zeros() {
        assert_eq!(eval("bytes=0002-0005", 10), Partial(vec![2..6]));
        assert_eq!(eval("bytes=005-0003", 10), Full);
        assert_eq!(eval("bytes=-000", 10), Unsatisfiable);
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(eval("bytes=100-", 6), Unsatisfiable);
        assert_eq!(eval("bytes=6-6", 6), Unsatisfiable);
        assert_eq!(eval("bytes=6-", 6), Unsatisfiable);
        assert_eq!(eval("bytes=-0", 6), Unsatisfiable);
        assert_eq!(eval("bytes=10-20,30-", 6), Unsatisfiable);
        // One satisfiable spec is enough; the rest are dropped.
        assert_eq!(eval("bytes=100-,2-3", 6), Partial(vec![2..4]));
        assert_eq!(eval("bytes=-0,2-3", 6), Partial(vec![2..4]));
    }

    #[test]
    fn empty_representation() {
        assert_eq!(eval("bytes=0-", 0), Unsatisfiable);
        assert_eq!(eval("bytes=0-0", 0), Unsatisfiable);
        assert_eq!(eval("bytes=-0", 0), Unsatisfiable);
        // §14.1.1: a non-zero suffix-range is the one satisfiable form on a
        // zero-length representation; it selects all (no) bytes, so the
        // plain 200 is the answer (a 206 cannot express an empty range).
        assert_eq!(eval("bytes=-5", 0), Full);
        assert_eq!(eval("bytes=alpha", 0), Full);
    }

    #[test]
    fn invalid_syntax_is_ignored() {
        for header in [
            "bytes=alpha",
            "bytes=10",
            "bytes=10-11 12-",
            "bytes=5-3",
            "bytes=",
            "bytes=,",
            "bytes= , ",
            "bytes=-",
            "bytes=--5",
            "bytes=1--5",
            "bytes=-5-",
            "bytes=+1-2",
            "bytes=1-+2",
            "bytes=0x10-0x20",
            "bytes=1 -2",
            "bytes=1- 2",
            "bytes=1.5-2",
            "bytes=0-1,alpha",
            "bytes=0-1,5-3",
            "bytes=０-１",
            "bytes",
            "bytes 0-1",
            "bytes =0-1",
            " bytes=0-1",
            "",
        ] {
            assert_eq!(eval(header, 100), Full, "{header:?}");
        }
    }

    #[test]
    fn other_units_are_ignored() {
        assert_eq!(eval("items=0-1", 100), Full);
        assert_eq!(eval("byte=0-1", 100), Full);
        assert_eq!(eval("none", 100), Full);
    }

    #[test]
    fn unit_is_case_insensitive() {
        assert_eq!(eval("BYTES=0-1", 100), Partial(vec![0..2]));
        assert_eq!(eval("Bytes=0-1", 100), Partial(vec![0..2]));
    }

    #[test]
    fn list_whitespace_and_empty_elements() {
        assert_eq!(eval("bytes=0-1, 4-5 ,\t8-9", 100), Partial(vec![0..2, 4..6, 8..10]));
        assert_eq!(eval("bytes=0-1,,4-5,", 100), Partial(vec![0..2, 4..6]));
        assert_eq!(eval("bytes=, 0-1", 100), Partial(vec![0..2]));
    }

    #[test]
    fn sorted_and_merged() {
        assert_eq!(eval("bytes=8-9,0-1", 100), Partial(vec![0..2, 8..10]));
        assert_eq!(eval("bytes=0-5,3-8", 100), Partial(vec![0..9]));
        // Adjacent ranges merge too.
        assert_eq!(eval("bytes=0-1,2-3", 100), Partial(vec![0..4]));
        assert_eq!(eval("bytes=0-9,2-3", 100), Partial(vec![0..10]));
        assert_eq!(eval("bytes=0-1,0-1,0-1", 100), Partial(vec![0..2]));
        assert_eq!(eval("bytes=-5,90-94", 100), Partial(vec![90..100]));
        assert_eq!(eval("bytes=50-,-10", 100), Partial(vec![50..100]));
        assert_eq!(eval("bytes=20-29,0-4,10-14,3-11", 100), Partial(vec![0..15, 20..30]));
    }

    #[test]
    fn too_many_ranges_are_ignored() {
        let header = |n: usize| {
            let specs: Vec<String> = (0..n).map(|i| format!("{}-{}", i * 2, i * 2)).collect();
            format!("bytes={}", specs.join(","))
        };
        assert!(matches!(evaluate(&header(200), 1000, 200), Partial(r) if r.len() == 200));
        assert_eq!(evaluate(&header(201), 1000, 200), Full);
        // Counted before merging: identical specs still count.
        let repeated = format!("bytes={}", vec!["0-1"; 201].join(","));
        assert_eq!(evaluate(&repeated, 1000, 200), Full);
        let repeated = format!("bytes={}", vec!["0-1"; 200].join(","));
        assert_eq!(evaluate(&repeated, 1000, 200), Partial(vec![0..2]));
        assert_eq!(evaluate("bytes=0-1,4-5", 100, 1), Full);
        assert_eq!(evaluate("bytes=0-1", 100, 0), Full);
    }

    #[test]
    fn many_overlapping_ranges_stay_bounded() {
        // Thousands of overlapping specs collapse into one small range.
        let header = format!("bytes={}", vec!["0-"; 5000].join(","));
        assert_eq!(evaluate(&header, 1000, 10_000), Partial(vec![0..1000]));
        let header = format!("bytes={}", vec!["1-"; 5000].join(","));
        assert_eq!(evaluate(&header, 1000, 10_000), Partial(vec![1..1000]));
    }
}
