//! A sans-IO HTTP/1.1 codec for the server side: bytes in, a validated
//! request head (or the status to refuse it with) out. No sockets, no
//! threads, no clocks except the cached `Date`.
//!
//! - [`parse_request`] parses and validates a request head against RFC 9110
//!   and RFC 9112, strictly: anything two parsers could read differently is
//!   refused, because that difference is what request smuggling exploits.
//! - [`ChunkedDecoder`] removes the chunked transfer coding from a body.
//! - [`ResponseHead`] writes a response head; [`http_date_now`] supplies its
//!   `Date`.
//!
//! Every [`ParseError`] means the connection is answered with
//! [`ParseError::status`] and closed.

#![warn(missing_docs)]

mod chunked;
mod date;
mod error;
mod framing;
mod request;
mod response;
mod syntax;
mod target;

pub use chunked::ChunkedDecoder;
pub use date::{format_http_date, http_date_now, parse_http_date, with_now};
pub use error::ParseError;
pub use framing::BodyFraming;
pub use request::{
    parse_request, parse_request_reusing, HeadBuffers, HeadScan, Header, Limits, Method, Parsed, RequestHead,
    Version,
};
pub use response::{reason_phrase, FieldLines, ResponseHead};
pub use syntax::has_token;
