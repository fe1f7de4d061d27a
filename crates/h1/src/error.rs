//! The one error type of the crate.

/// Why a request was refused.
///
/// Every variant is fatal for the connection: after a framing or syntax error
/// the position of the next request in the byte stream is unknown (RFC 9112
/// §9.6), so the server answers [`status`](Self::status) with a small error
/// page and closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// 400: the request is malformed. The text is a short lowercase reason
    /// for the error log and the error page, e.g. `"duplicate Content-Length"`.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// 414: the request line is longer than [`Limits::max_request_line`](crate::Limits::max_request_line)
    /// (RFC 9112 §3).
    #[error("request line too long")]
    UriTooLong,
    /// 431: the header section is too large in total, has too many fields, or
    /// one field line is too long (RFC 6585 §5); also used for oversized
    /// chunked trailer sections.
    #[error("request header fields too large")]
    HeadersTooLarge,
    /// 501: the request uses a transfer-coding the server does not implement
    /// (RFC 9112 §6.1). The text is a short lowercase reason.
    #[error("not implemented: {0}")]
    NotImplemented(&'static str),
    /// 505: a well-formed HTTP version whose major version is not 1
    /// (RFC 9110 §15.6.6).
    #[error("HTTP version not supported")]
    VersionNotSupported,
    /// 413: a chunked body grew past the configured maximum (RFC 9110 §15.5.14).
    #[error("request body too large")]
    PayloadTooLarge,
}

/// Only CRLF ends a line, anywhere. RFC 9112 §2.2 lets a recipient also
/// accept a bare LF in the head, but a peer that disagrees about line ends
/// disagrees about where the message ends, so we never do.
pub(crate) const INVALID_LINE_ENDING: ParseError = ParseError::BadRequest("invalid line ending");

impl ParseError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            Self::BadRequest(_) => 400,
            Self::UriTooLong => 414,
            Self::HeadersTooLarge => 431,
            Self::NotImplemented(_) => 501,
            Self::VersionNotSupported => 505,
            Self::PayloadTooLarge => 413,
        }
    }

    /// A short lowercase explanation for the error log and the error page.
    ///
    /// This is the detail, not the reason phrase of the status line; that one
    /// is [`reason_phrase`](crate::reason_phrase)`(self.status())`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::BadRequest(reason) | Self::NotImplemented(reason) => reason,
            Self::UriTooLong => "request line too long",
            Self::HeadersTooLarge => "request header fields too large",
            Self::VersionNotSupported => "HTTP version not supported",
            Self::PayloadTooLarge => "request body too large",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ParseError;

    #[test]
    fn status_and_reason() {
        let cases = [
            (ParseError::BadRequest("bad thing"), 400, "bad thing"),
            (ParseError::UriTooLong, 414, "request line too long"),
            (ParseError::HeadersTooLarge, 431, "request header fields too large"),
            (ParseError::NotImplemented("gzip"), 501, "gzip"),
            (ParseError::VersionNotSupported, 505, "HTTP version not supported"),
            (ParseError::PayloadTooLarge, 413, "request body too large"),
        ];
        for (error, status, reason) in cases {
            assert_eq!(error.status(), status, "{error:?}");
            assert_eq!(error.reason(), reason, "{error:?}");
        }
    }

    #[test]
    fn display_includes_the_detail() {
        assert_eq!(
            ParseError::BadRequest("missing Host header").to_string(),
            "bad request: missing Host header"
        );
        assert_eq!(
            ParseError::NotImplemented("unsupported transfer-coding").to_string(),
            "not implemented: unsupported transfer-coding"
        );
    }
}
