//! How the length of a request body is determined (RFC 9112 §6).
//!
//! Disagreement between two parsers about where a body ends is request
//! smuggling, so this module only accepts framing that cannot be read two
//! ways, and otherwise refuses the request (RFC 9112 §6.3, §11.2).

use crate::syntax::{is_token, list_elements, trim_ows};
use crate::{ParseError, Version};

/// How the body of a request is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// Neither `Content-Length` nor `Transfer-Encoding`: the body is empty
    /// (RFC 9112 §6.3, rule 6).
    None,
    /// Exactly this many bytes follow the head (`Content-Length`; may be 0).
    Length(u64),
    /// The body uses the chunked transfer coding; decode it with
    /// [`ChunkedDecoder`](crate::ChunkedDecoder).
    Chunked,
}

/// The framing-relevant fields of one request, collected while its field
/// lines are scanned once.
#[derive(Debug, Default)]
pub(crate) struct FramingFields {
    content_length: Option<u64>,
    transfer_codings: Option<TransferCodings>,
}

/// The transfer-codings of all `Transfer-Encoding` field lines, which together
/// form one list (RFC 9110 §5.3).
#[derive(Debug, Default)]
struct TransferCodings {
    chunked_seen: bool,
    chunked_last: bool,
    unsupported: bool,
}

const INVALID_CONTENT_LENGTH: ParseError = ParseError::BadRequest("invalid Content-Length");

impl FramingFields {
    /// Adds one `Content-Length` field line.
    ///
    /// The value must be `1*DIGIT` (RFC 9110 §8.6), so signs, hex prefixes,
    /// inner spaces and the empty value are errors, and so is a number that
    /// does not fit in a `u64`. RFC 9112 §6.3 lets a recipient accept a list
    /// of identical values (`5, 5`) or repeated identical lines; like nginx we
    /// refuse every second value instead, because a proxy in front of us may
    /// have framed the message by a different one of them.
    pub(crate) fn content_length(&mut self, value: &[u8]) -> Result<(), ParseError> {
        for element in value.split(|&b| b == b',') {
            let length = parse_decimal(trim_ows(element)).ok_or(INVALID_CONTENT_LENGTH)?;
            if self.content_length.replace(length).is_some() {
                return Err(ParseError::BadRequest("duplicate Content-Length"));
            }
        }
        Ok(())
    }

    /// Adds one `Transfer-Encoding` field line.
    ///
    /// Only errors that are certain from this line alone are reported here;
    /// the rest needs the whole list and is left to [`finish`](Self::finish).
    pub(crate) fn transfer_encoding(&mut self, value: &[u8]) -> Result<(), ParseError> {
        let codings = self.transfer_codings.get_or_insert_with(Default::default);
        // Empty list elements are skipped: RFC 9110 §5.6.1.2 requires
        // recipients to ignore them, so `,chunked` is `chunked`.
        for element in list_elements(value) {
            // transfer-coding = token *( OWS ";" OWS transfer-parameter )
            // (RFC 9112 §7). No coding we implement takes parameters, so their
            // syntax does not matter: the request is refused either way.
            let (name, has_parameters) = match element.iter().position(|&b| b == b';') {
                Some(semicolon) => (trim_ows(&element[..semicolon]), true),
                None => (element, false),
            };
            if !is_token(name) {
                return Err(ParseError::BadRequest("invalid Transfer-Encoding"));
            }
            let chunked = name.eq_ignore_ascii_case(b"chunked");
            if chunked && codings.chunked_seen {
                // RFC 9112 §6.1: a sender MUST NOT apply chunked more than once.
                return Err(ParseError::BadRequest("chunked applied more than once"));
            }
            codings.chunked_seen |= chunked;
            codings.chunked_last = chunked;
            codings.unsupported |= !chunked || has_parameters;
        }
        Ok(())
    }

    /// Decides the framing once all field lines have been added.
    pub(crate) fn finish(self, version: Version) -> Result<BodyFraming, ParseError> {
        match (self.transfer_codings, self.content_length) {
            (None, None) => Ok(BodyFraming::None),
            (None, Some(length)) => Ok(BodyFraming::Length(length)),
            // RFC 9112 §6.3 rule 3 allows either rejecting this or letting
            // Transfer-Encoding win. Rejecting is the only choice that cannot
            // disagree with whatever framed the message upstream.
            (Some(_), Some(_)) => Err(ParseError::BadRequest("both Transfer-Encoding and Content-Length")),
            // HTTP/1.0 has no transfer codings, so an intermediary that speaks
            // 1.0 frames this message differently (RFC 9112 §6.1, last
            // paragraph: the framing is faulty).
            (Some(_), None) if version == Version::Http10 => {
                Err(ParseError::BadRequest("Transfer-Encoding in an HTTP/1.0 request"))
            }
            // RFC 9112 §6.3 rule 4: without chunked last the length cannot be
            // determined, and the server MUST answer 400 and close. This takes
            // precedence over the 501 for unknown codings below.
            (Some(codings), None) if !codings.chunked_last => {
                Err(ParseError::BadRequest("Transfer-Encoding does not end in chunked"))
            }
            // RFC 9112 §6.1: SHOULD answer 501 to a coding it does not
            // understand. Only plain chunked is implemented.
            (Some(codings), None) if codings.unsupported => {
                Err(ParseError::NotImplemented("unsupported transfer-coding"))
            }
            (Some(_), None) => Ok(BodyFraming::Chunked),
        }
    }
}

/// Parses `1*DIGIT` as a decimal number; `None` if empty, not all digits, or
/// too large for a `u64`.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = char::from(b).to_digit(10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Field values of each line, and the framing they lead to.
    type Case = (&'static [&'static [u8]], Result<BodyFraming, ParseError>);

    fn framing(
        version: Version,
        content_lengths: &[&[u8]],
        transfer_encodings: &[&[u8]],
    ) -> Result<BodyFraming, ParseError> {
        let mut fields = FramingFields::default();
        for value in content_lengths {
            fields.content_length(value)?;
        }
        for value in transfer_encodings {
            fields.transfer_encoding(value)?;
        }
        fields.finish(version)
    }

    #[test]
    fn decimal() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"011"), Some(11));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX), "u64::MAX still fits");
        assert_eq!(parse_decimal(b"18446744073709551616"), None);
        assert_eq!(parse_decimal(b"99999999999999999999999"), None);
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"1a"), None);
        assert_eq!(parse_decimal("١".as_bytes()), None, "only ASCII digits");
    }

    #[test]
    fn content_length_values() {
        let bad = INVALID_CONTENT_LENGTH;
        let duplicate = ParseError::BadRequest("duplicate Content-Length");
        let cases: &[Case] = &[
            (&[], Ok(BodyFraming::None)),
            (&[b"0"], Ok(BodyFraming::Length(0))),
            (&[b"42"], Ok(BodyFraming::Length(42))),
            (&[b"007"], Ok(BodyFraming::Length(7))),
            (&[b"18446744073709551615"], Ok(BodyFraming::Length(u64::MAX))),
            (&[b"5, 5"], Err(duplicate)),
            (&[b"5,5,\t5"], Err(duplicate)),
            (&[b"5", b"5"], Err(duplicate)),
            (&[b"5", b"05"], Err(duplicate)),
            (&[b"5, 10"], Err(duplicate)),
            (&[b"5", b"6"], Err(duplicate)),
            (&[b"5", b"5, 6"], Err(duplicate)),
            (&[b""], Err(bad)),
            (&[b"+5"], Err(bad)),
            (&[b"-5"], Err(bad)),
            (&[b"0x5"], Err(bad)),
            (&[b"1_000"], Err(bad)),
            (&[b"1 0"], Err(bad)),
            (&[b"5,"], Err(bad)),
            (&[b",5"], Err(bad)),
            (&[b"5,,5"], Err(bad)),
            (&[b"1e3"], Err(bad)),
            (&[b"18446744073709551616"], Err(bad)),
            (&[b"5", b"x"], Err(bad)),
        ];
        for (values, expected) in cases {
            assert_eq!(framing(Version::Http11, values, &[]), *expected, "Content-Length {values:?}");
        }
    }

    #[test]
    fn transfer_encoding_values() {
        const NOT_LAST: ParseError = ParseError::BadRequest("Transfer-Encoding does not end in chunked");
        const TWICE: ParseError = ParseError::BadRequest("chunked applied more than once");
        const INVALID: ParseError = ParseError::BadRequest("invalid Transfer-Encoding");
        const UNSUPPORTED: ParseError = ParseError::NotImplemented("unsupported transfer-coding");
        let cases: &[Case] = &[
            (&[b"chunked"], Ok(BodyFraming::Chunked)),
            (&[b"Chunked"], Ok(BodyFraming::Chunked)),
            (&[b"CHUNKED"], Ok(BodyFraming::Chunked)),
            (&[b",chunked"], Ok(BodyFraming::Chunked)),
            (&[b"chunked ,"], Ok(BodyFraming::Chunked)),
            (&[b"", b"chunked"], Ok(BodyFraming::Chunked)),
            (&[b"chunked, chunked"], Err(TWICE)),
            (&[b"chunked", b"chunked"], Err(TWICE)),
            (&[b"chunked, gzip, chunked"], Err(TWICE)),
            (&[b"gzip"], Err(NOT_LAST)),
            (&[b"chunked, gzip"], Err(NOT_LAST)),
            (&[b"chunked", b"gzip"], Err(NOT_LAST)),
            (&[b"xchunked"], Err(NOT_LAST)),
            (&[b"chunkedx"], Err(NOT_LAST)),
            (&[b"identity"], Err(NOT_LAST)),
            (&[b""], Err(NOT_LAST)),
            (&[b" , "], Err(NOT_LAST)),
            (&[b"gzip, chunked"], Err(UNSUPPORTED)),
            (&[b"gzip", b"chunked"], Err(UNSUPPORTED)),
            (&[b"x-custom, chunked"], Err(UNSUPPORTED)),
            (&[b"chunked;x=y"], Err(UNSUPPORTED)),
            (&[b"chunked ; x=y"], Err(UNSUPPORTED)),
            (&[b"gzip;q=1, chunked"], Err(UNSUPPORTED)),
            (&[b"chunked x"], Err(INVALID)),
            (&[b"\"chunked\""], Err(INVALID)),
            (&[b"chun/ked"], Err(INVALID)),
            (&[b";x=y, chunked"], Err(INVALID)),
            (&[b"ch\xc3\xbcnked"], Err(INVALID)),
        ];
        for (values, expected) in cases {
            assert_eq!(framing(Version::Http11, &[], values), *expected, "Transfer-Encoding {values:?}");
        }
    }

    #[test]
    fn transfer_encoding_never_combines_with_content_length() {
        let both = Err(ParseError::BadRequest("both Transfer-Encoding and Content-Length"));
        assert_eq!(framing(Version::Http11, &[b"5"], &[b"chunked"]), both);
        assert_eq!(framing(Version::Http11, &[b"0"], &[b"chunked"]), both);
        assert_eq!(framing(Version::Http11, &[b"5"], &[b"gzip"]), both);
    }

    #[test]
    fn transfer_encoding_is_refused_in_http_1_0() {
        assert_eq!(
            framing(Version::Http10, &[], &[b"chunked"]),
            Err(ParseError::BadRequest("Transfer-Encoding in an HTTP/1.0 request"))
        );
        assert_eq!(framing(Version::Http10, &[b"5"], &[]), Ok(BodyFraming::Length(5)));
    }
}
