//! Pieces of the common field-value syntax of RFC 9110 §5.6, shared by the
//! request parser, the framing rules and the chunked decoder.

/// `tchar` of RFC 9110 §5.6.2, as a table because it sits on the hot path of
/// every method, field name and chunk extension.
static TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = matches!(
            b as u8,
            b'0'..=b'9'
                | b'a'..=b'z'
                | b'A'..=b'Z'
                | b'!'
                | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        );
        b += 1;
    }
    table
};

/// Whether `b` may appear in a `token` (RFC 9110 §5.6.2).
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// Whether `s` is a `token` (RFC 9110 §5.6.2): one or more `tchar`.
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// Whether `b` is optional whitespace, `OWS` (RFC 9110 §5.6.3).
pub(crate) fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `s` without leading and trailing `OWS`.
pub(crate) fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|&b| !is_ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// The elements of a comma-separated list (RFC 9110 §5.6.1), with `OWS`
/// trimmed. Empty elements are skipped, as §5.6.1.2 requires of recipients.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows).filter(|element| !element.is_empty())
}

/// True if the comma-separated list `value` contains `token`, compared ASCII
/// case-insensitively with `OWS` around elements ignored.
///
/// This is the membership test for token-list fields such as `Connection`,
/// `Expect` and `TE`, whose tokens are case-insensitive (RFC 9110 §7.6.1,
/// §10.1.1).
pub fn has_token(value: &[u8], token: &str) -> bool {
    list_elements(value).any(|element| element.eq_ignore_ascii_case(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tchar_matches_the_rfc_grammar() {
        let tchars: Vec<u8> = (0..=255u8).filter(|&b| is_tchar(b)).collect();
        let mut expected: Vec<u8> = b"!#$%&'*+-.^_`|~".to_vec();
        expected.extend(b'0'..=b'9');
        expected.extend(b'A'..=b'Z');
        expected.extend(b'a'..=b'z');
        expected.sort_unstable();
        assert_eq!(tchars, expected);
    }

    #[test]
    fn token() {
        assert!(is_token(b"chunked"));
        assert!(is_token(b"x-Custom_1"));
        assert!(!is_token(b""));
        assert!(!is_token(b"a b"));
        assert!(!is_token(b"a/b"));
        assert!(!is_token(b"caf\xc3\xa9"));
    }

    #[test]
    fn trims_ows_only() {
        assert_eq!(trim_ows(b" \t a b \t "), b"a b");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"\x0ba\x0b"), b"\x0ba\x0b");
    }

    #[test]
    fn list_elements_skip_empty_ones() {
        let elements: Vec<&[u8]> = list_elements(b" ,a, b ,,\tc d ,").collect();
        assert_eq!(elements, [&b"a"[..], b"b", b"c d"]);
        assert_eq!(list_elements(b"").count(), 0);
        assert_eq!(list_elements(b" , ,").count(), 0);
    }

    #[test]
    fn has_token_cases() {
        let cases: &[(&[u8], &str, bool)] = &[
            (b"close", "close", true),
            (b"Close", "close", true),
            (b"keep-alive, CLOSE", "close", true),
            (b" keep-alive ,\tclose\t", "close", true),
            (b"upgrade,close", "close", true),
            (b"closed", "close", false),
            (b"close-ish", "close", false),
            (b"x-close", "close", false),
            (b"", "close", false),
            (b",,", "close", false),
            (b"keep-alive", "keep-alive", true),
            (b"100-Continue", "100-continue", true),
        ];
        for &(value, token, expected) in cases {
            assert_eq!(
                has_token(value, token),
                expected,
                "{:?} in {:?}",
                token,
                String::from_utf8_lossy(value)
            );
        }
    }
}
