//! Validators (RFC 9110 §8.8) and conditional requests (RFC 9110 §13).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A strong entity tag derived from the file's identity, quoted:
/// `"<inode hex>-<len hex>-<mtime ns hex>"`.
///
/// Inode, length and nanosecond mtime change whenever the file is replaced
/// or rewritten, which is what a strong validator needs (RFC 9110 §8.8.1);
/// nginx and Apache build theirs from the same facts. A time before the
/// epoch counts as zero.
pub fn etag(inode: u64, len: u64, mtime: SystemTime) -> String {
    let nanos = mtime.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("\"{inode:x}-{len:x}-{nanos:x}\"")
}

/// The result of evaluating the preconditions of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Perform the method.
    Proceed,
    /// Answer 304 Not Modified.
    NotModified,
    /// Answer 412 Precondition Failed.
    Failed,
}

/// Evaluates `If-Match`, `If-Unmodified-Since`, `If-None-Match` and
/// `If-Modified-Since` in the order of RFC 9110 §13.2.2, for a GET or HEAD
/// (`is_get_or_head`) or another method, against a representation that
/// exists with validators `etag` and `last_modified`.
///
/// Header values are passed in (`None` = absent) so this stays independent
/// of the request type. `If-Range` is separate: see [`if_range_allows`].
pub fn evaluate(
    is_get_or_head: bool,
    if_match: Option<&str>,
    if_unmodified_since: Option<&str>,
    if_none_match: Option<&str>,
    if_modified_since: Option<&str>,
    etag: &str,
    last_modified: SystemTime,
) -> Precondition {
    // Step 1, §13.1.1: strong comparison; `*` matches any current
    // representation, and this one exists.
    if let Some(value) = if_match {
        if !list_matches(value, etag, Comparison::Strong) {
            return Precondition::Failed;
        }
    } else if let Some(date) = if_unmodified_since.and_then(parse_date) {
        // Step 2, §13.1.4: only without If-Match; an invalid date is ignored.
        if seconds(last_modified) > date {
            return Precondition::Failed;
        }
    }
    // Step 3, §13.1.2: weak comparison, so a 304 is possible even for
    // representations only weakly equal.
    if let Some(value) = if_none_match {
        if list_matches(value, etag, Comparison::Weak) {
            return if is_get_or_head { Precondition::NotModified } else { Precondition::Failed };
        }
    } else if is_get_or_head {
        // Step 4, §13.1.3: only without If-None-Match and only for GET and
        // HEAD; an invalid date is ignored.
        if let Some(date) = if_modified_since.and_then(parse_date) {
            if seconds(last_modified) <= date {
                return Precondition::NotModified;
            }
        }
    }
    Precondition::Proceed
}

/// If-Range (RFC 9110 §13.1.5): whether the Range header may be honoured.
///
/// True for an entity tag that strongly matches `etag`, or an HTTP-date
/// exactly equal to `last_modified` (at the one-second granularity of
/// HTTP-dates). Weak tags and invalid values never match, which falls back
/// to sending the whole representation, the safe answer.
pub fn if_range_allows(if_range: &str, etag: &str, last_modified: SystemTime) -> bool {
    let value = if_range.trim_matches([' ', '\t']);
    if value.starts_with('"') || value.starts_with("W/") {
        return match parse_tag(value) {
            Some((tag, rest)) => rest.is_empty() && tags_match(tag, etag, Comparison::Strong),
            None => false,
        };
    }
    parse_date(value) == Some(seconds(last_modified))
}

#[derive(Clone, Copy)]
enum Comparison {
    Strong,
    Weak,
}

/// Whether an `If-Match`/`If-None-Match` value (`*` or `#entity-tag`)
/// matches `etag`. Members after a malformed one are not looked at, so a
/// malformed list can only fail to match.
fn list_matches(value: &str, etag: &str, comparison: Comparison) -> bool {
    let value = value.trim_matches([' ', '\t']);
    if value == "*" {
        return true;
    }
    let mut rest = value;
    loop {
        // Empty list elements and OWS are allowed (RFC 9110 §5.6.1).
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return false;
        }
        let Some((tag, after)) = parse_tag(rest) else {
            return false;
        };
        if tags_match(tag, etag, comparison) {
            return true;
        }
        let after = after.trim_start_matches([' ', '\t']);
        if !(after.is_empty() || after.starts_with(',')) {
            return false;
        }
        rest = after;
    }
}

/// Splits one `entity-tag` (RFC 9110 §8.8.3) off the front of `s`. Tags are
/// not split on commas, because `etagc` allows them inside the quotes.
fn parse_tag(s: &str) -> Option<(&str, &str)> {
    let opaque_start = usize::from(s.starts_with("W/")) * 2;
    let body = s[opaque_start..].strip_prefix('"')?;
    // etagc = %x21 / %x23-7E / obs-text: anything but controls, space, DEL
    // and the quote itself, which ends the tag.
    let close = body.find(|c: char| c == '"' || c.is_ascii_control() || c == ' ')?;
    if !body[close..].starts_with('"') {
        return None;
    }
    let end = opaque_start + 1 + close + 1;
    Some((&s[..end], &s[end..]))
}

/// Compares two entity tags (each possibly `W/`-prefixed) as RFC 9110
/// §8.8.3.2 defines: strong needs both strong and the opaque tags equal,
/// weak only the opaque tags equal.
fn tags_match(a: &str, b: &str, comparison: Comparison) -> bool {
    let (a_weak, a_opaque) = split_weak(a);
    let (b_weak, b_opaque) = split_weak(b);
    a_opaque == b_opaque
        && match comparison {
            Comparison::Strong => !a_weak && !b_weak,
            Comparison::Weak => true,
        }
}

fn split_weak(tag: &str) -> (bool, &str) {
    match tag.strip_prefix("W/") {
        Some(opaque) => (true, opaque),
        None => (false, tag),
    }
}

/// Parses an HTTP-date (RFC 9110 §5.6.7, all three formats); `None` for an
/// invalid one, which the caller must then ignore.
fn parse_date(value: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(value.trim_matches([' ', '\t'])).ok()
}

/// Truncates to whole seconds, the resolution of HTTP-dates, so a file
/// modified at 12:00:00.7 is "not modified since" 12:00:00.
fn seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => UNIX_EPOCH + Duration::from_secs(d.as_secs()),
        Err(_) => t,
    }
}

#[cfg(test)]
mod tests {
    use super::Precondition::{Failed, NotModified, Proceed};
    use super::*;

    const TAG: &str = "\"abc-10-5f\"";
    const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
    const AFTER: &str = "Sun, 06 Nov 1994 08:49:38 GMT";

    /// Last-Modified is DATE plus 0.5 s, to exercise second truncation.
    fn lm() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(784_111_777_500)
    }

    #[derive(Default)]
    struct H<'a> {
        im: Option<&'a str>,
        ius: Option<&'a str>,
        inm: Option<&'a str>,
        ims: Option<&'a str>,
    }

    fn get(h: H) -> Precondition {
        evaluate(true, h.im, h.ius, h.inm, h.ims, TAG, lm())
    }

    fn put(h: H) -> Precondition {
        evaluate(false, h.im, h.ius, h.inm, h.ims, TAG, lm())
    }

    #[test]
    fn etag_format() {
        let t = UNIX_EPOCH + Duration::new(1, 5);
        assert_eq!(etag(0x1234, 0x10, t), "\"1234-10-3b9aca05\"");
        assert_eq!(etag(1, 0, UNIX_EPOCH - Duration::from_secs(5)), "\"1-0-0\"");
        assert_ne!(etag(1, 2, t), etag(1, 2, t + Duration::from_nanos(1)));
        assert_ne!(etag(1, 2, t), etag(1, 3, t));
        assert_ne!(etag(1, 2, t), etag(2, 2, t));
        let tag = etag(u64::MAX, u64::MAX, t);
        assert!(parse_tag(&tag).is_some_and(|(t, rest)| t == tag && rest.is_empty()));
    }

    #[test]
    fn no_conditions() {
        assert_eq!(get(H::default()), Proceed);
        assert_eq!(put(H::default()), Proceed);
    }

    #[test]
    fn if_match() {
        for value in [TAG, "*", " * ", "\"x\", \"abc-10-5f\"", "\"x\",\"abc-10-5f\" ,"] {
            let h = H { im: Some(value), ..H::default() };
            assert_eq!(get(h), Proceed, "{value}");
        }
        for value in
            ["\"other\"", "W/\"abc-10-5f\"", "abc-10-5f", "", "\"x\" \"abc-10-5f\"", "garbage, \"abc-10-5f\""]
        {
            let h = H { im: Some(value), ..H::default() };
            assert_eq!(get(h), Failed, "{value}");
            let h = H { im: Some(value), ..H::default() };
            assert_eq!(put(h), Failed, "{value}");
        }
    }

    #[test]
    fn if_unmodified_since() {
        let h = |d| H { ius: Some(d), ..H::default() };
        assert_eq!(get(h(DATE)), Proceed);
        assert_eq!(get(h(AFTER)), Proceed);
        assert_eq!(get(h(BEFORE)), Failed);
        assert_eq!(put(h(BEFORE)), Failed);
        // Invalid dates are ignored.
        assert_eq!(get(h("yesterday")), Proceed);
        // If-Match takes precedence over If-Unmodified-Since.
        let both = H { im: Some(TAG), ius: Some(BEFORE), ..H::default() };
        assert_eq!(get(both), Proceed);
    }

    #[test]
    fn if_none_match() {
        for value in [TAG, "*", "W/\"abc-10-5f\"", "\"a\", W/\"abc-10-5f\""] {
            let h = H { inm: Some(value), ..H::default() };
            assert_eq!(get(h), NotModified, "{value}");
            let h = H { inm: Some(value), ..H::default() };
            assert_eq!(put(h), Failed, "{value}");
        }
        for value in ["\"other\"", "", "abc-10-5f", "\"abc-10-5f"] {
            let h = H { inm: Some(value), ..H::default() };
            assert_eq!(get(h), Proceed, "{value}");
        }
    }

    #[test]
    fn weak_own_tag_matches_if_none_match_only() {
        let weak = "W/\"abc-10-5f\"";
        let inm = evaluate(true, None, None, Some(TAG), None, weak, lm());
        assert_eq!(inm, NotModified);
        let im = evaluate(true, Some(TAG), None, None, None, weak, lm());
        assert_eq!(im, Failed);
    }

    #[test]
    fn if_modified_since() {
        let h = |d| H { ims: Some(d), ..H::default() };
        // Equal at one-second granularity, though lm has 0.5 s more.
        assert_eq!(get(h(DATE)), NotModified);
        assert_eq!(get(h(AFTER)), NotModified);
        assert_eq!(get(h(BEFORE)), Proceed);
        // All three HTTP-date formats.
        assert_eq!(get(h("Sunday, 06-Nov-94 08:49:37 GMT")), NotModified);
        assert_eq!(get(h("Sun Nov  6 08:49:37 1994")), NotModified);
        // Invalid dates are ignored.
        assert_eq!(get(h("not a date")), Proceed);
        assert_eq!(get(h("Sun, 06 Nov 1994 08:49:37 GMT, Mon, 07 Nov 1994 08:49:37 GMT")), Proceed);
        // Only for GET and HEAD.
        assert_eq!(put(h(AFTER)), Proceed);
    }

    #[test]
    fn if_none_match_overrides_if_modified_since() {
        let h = H { inm: Some("\"other\""), ims: Some(AFTER), ..H::default() };
        assert_eq!(get(h), Proceed);
        let h = H { inm: Some(TAG), ims: Some(BEFORE), ..H::default() };
        assert_eq!(get(h), NotModified);
    }

    #[test]
    fn failed_if_match_beats_matching_if_none_match() {
        let h = H { im: Some("\"other\""), inm: Some(TAG), ..H::default() };
        assert_eq!(get(h), Failed);
        let h = H { ius: Some(BEFORE), ims: Some(AFTER), ..H::default() };
        assert_eq!(get(h), Failed);
    }

    #[test]
    fn if_range() {
        assert!(if_range_allows(TAG, TAG, lm()));
        assert!(if_range_allows(" \"abc-10-5f\" ", TAG, lm()));
        assert!(!if_range_allows("\"other\"", TAG, lm()));
        assert!(!if_range_allows("W/\"abc-10-5f\"", TAG, lm()));
        assert!(!if_range_allows(TAG, "W/\"abc-10-5f\"", lm()));
        assert!(!if_range_allows("\"abc-10-5f\", \"x\"", TAG, lm()));
        assert!(!if_range_allows("*", TAG, lm()));
        assert!(!if_range_allows("", TAG, lm()));
        assert!(if_range_allows(DATE, TAG, lm()));
        assert!(!if_range_allows(AFTER, TAG, lm()));
        assert!(!if_range_allows(BEFORE, TAG, lm()));
        assert!(!if_range_allows("garbage", TAG, lm()));
    }

    #[test]
    fn tag_parsing() {
        assert_eq!(parse_tag("\"a,b\", \"c\""), Some(("\"a,b\"", ", \"c\"")));
        assert_eq!(parse_tag("W/\"x\""), Some(("W/\"x\"", "")));
        assert_eq!(parse_tag("\"\""), Some(("\"\"", "")));
        assert_eq!(parse_tag("\"é\""), Some(("\"é\"", "")));
        assert_eq!(parse_tag("\"a b\""), None);
        assert_eq!(parse_tag("\"open"), None);
        assert_eq!(parse_tag("w/\"x\""), None);
        assert_eq!(parse_tag("W/x"), None);
        assert!(list_matches("\"a,b\"", "\"a,b\"", Comparison::Strong));
        assert!(!list_matches("\"a\", \"b\"", "\"a,b\"", Comparison::Strong));
    }
}
