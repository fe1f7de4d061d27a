//! The bodies the director relays, sans I/O: bytes in, bytes out, and what
//! is left. The proxy loop (`proxy/client.rs`) moves bytes between sockets
//! and these buffers; everything about framing is here, unit-tested with
//! byte slices.
//!
//! * [`RequestBody`]: the client's body to the backend. A `Content-Length`
//!   body passes as it is; a chunked one is decoded and chunked again, so
//!   the backend never sees the client's own chunk boundaries, extensions
//!   or trailers (bad-input note M1).
//! * [`ResponseBody`]: the backend's body to the client, in each of the four
//!   framings a backend may use (none, `Content-Length`, chunked, until it
//!   closes) × the client framings of `response::client_head` (as sent,
//!   re-chunked for an HTTP/1.1 client, until the director closes for an
//!   HTTP/1.0 one).

use h1::{ChunkedDecoder, ParseError};

use crate::forward::{encode_chunk, LAST_CHUNK};
use crate::response::{ClientFraming, Framing};

/// The request body still to go to the backend.
#[derive(Debug)]
pub enum RequestBody {
    /// Sent (or none).
    Done,
    /// This many bytes still to send.
    Length(u64),
    /// Decoded and chunked again as it arrives.
    Chunked(Box<ChunkedDecoder>),
}

impl RequestBody {
    /// A chunked body of at most `max_body` decoded bytes.
    pub fn chunked(max_body: u64) -> RequestBody {
        RequestBody::Chunked(Box::new(ChunkedDecoder::new(max_body)))
    }

    /// Whether all of it has been forwarded.
    pub fn is_done(&self) -> bool {
        matches!(self, RequestBody::Done)
    }

    /// Forwards what `input` holds of the body to `out`, in the backend's
    /// framing, and returns how many bytes of `input` it took; bytes after
    /// the body (a pipelined request) are left. A malformed chunked body is
    /// an error, with the status to answer (`ParseError::status`).
    pub fn forward(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ParseError> {
        match self {
            RequestBody::Done => Ok(0),
            RequestBody::Length(remaining) => {
                let n = (*remaining).min(input.len() as u64) as usize;
                out.extend_from_slice(&input[..n]);
                *remaining -= n as u64;
                if *remaining == 0 {
                    *self = RequestBody::Done;
                }
                Ok(n)
            }
            RequestBody::Chunked(decoder) => {
                let mut data = Vec::new();
                let consumed = decoder.decode(input, &mut data)?;
                encode_chunk(out, &data);
                if decoder.is_done() {
                    out.extend_from_slice(LAST_CHUNK);
                    *self = RequestBody::Done;
                }
                Ok(consumed)
            }
        }
    }
}

/// Why a response body cannot be completed: the client can only be told by
/// closing its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// The backend's chunked body is malformed.
    BadChunk,
    /// The backend closed before the body's end.
    Truncated,
}

/// The response body still to go to the client.
#[derive(Debug)]
pub struct ResponseBody {
    framing: Framing,
    to_client: ClientFraming,
    /// `Content-Length` bytes still due.
    remaining: u64,
    decoder: Option<Box<ChunkedDecoder>>,
    done: bool,
    /// The backend closes after this response (it said so, or its body
    /// runs to the close).
    backend_close: bool,
}

impl ResponseBody {
    /// The body of a response framed as `framing` by the backend, sent to
    /// the client as `to_client`; `backend_close`: the backend said it
    /// closes after it.
    pub fn new(framing: Framing, to_client: ClientFraming, backend_close: bool) -> ResponseBody {
        ResponseBody {
            framing,
            to_client,
            remaining: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            decoder: (framing == Framing::Chunked).then(|| Box::new(ChunkedDecoder::new(u64::MAX))),
            done: framing == Framing::None || framing == Framing::Length(0),
            backend_close,
        }
    }

    /// Whether the whole body has been relayed.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Relays what `input` holds of the body to `out` and returns how many
    /// bytes of `input` it took. Bytes beyond a `Content-Length` or the last
    /// chunk are left (they make the backend connection unfit for reuse).
    pub fn relay(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, Broken> {
        if self.done {
            return Ok(0);
        }
        match self.framing {
            Framing::None => {
                self.done = true;
                Ok(0)
            }
            Framing::Length(_) => {
                let n = self.remaining.min(input.len() as u64) as usize;
                out.extend_from_slice(&input[..n]);
                self.remaining -= n as u64;
                self.done = self.remaining == 0;
                Ok(n)
            }
            Framing::Chunked => {
                let decoder = self.decoder.as_mut().expect("a chunked body has a decoder");
                let mut data = Vec::new();
                let consumed = decoder.decode(input, &mut data).map_err(|_| Broken::BadChunk)?;
                match self.to_client {
                    ClientFraming::Chunked => encode_chunk(out, &data),
                    _ => out.extend_from_slice(&data),
                }
                if decoder.is_done() {
                    if self.to_client == ClientFraming::Chunked {
                        out.extend_from_slice(LAST_CHUNK);
                    }
                    self.done = true;
                }
                Ok(consumed)
            }
            Framing::Close => {
                match self.to_client {
                    ClientFraming::Chunked => encode_chunk(out, input),
                    _ => out.extend_from_slice(input),
                }
                Ok(input.len())
            }
        }
    }

    /// The backend closed (or its connection failed) with nothing more
    /// read: the end of a body that runs to the close, or a truncation.
    pub fn backend_closed(&mut self, out: &mut Vec<u8>) -> Result<(), Broken> {
        if self.framing != Framing::Close {
            return Err(Broken::Truncated);
        }
        if self.to_client == ClientFraming::Chunked {
            out.extend_from_slice(LAST_CHUNK);
        }
        self.done = true;
        self.backend_close = true;
        Ok(())
    }

    /// Whether the backend connection may serve another request once the
    /// body is relayed, as far as the response goes: not if it closes, nor
    /// if its body ran to the close.
    pub fn backend_reusable(&self) -> bool {
        !self.backend_close && self.framing != Framing::Close
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relays `input` cut into pieces of `piece` bytes, as reads would
    /// bring it; what is left of each piece is kept for the next, as the
    /// loop keeps its buffer. Returns what went out and what was left.
    fn relay_in_pieces(body: &mut ResponseBody, input: &[u8], piece: usize) -> (Vec<u8>, Vec<u8>) {
        let mut out = Vec::new();
        let mut pending = Vec::new();
        for chunk in input.chunks(piece.max(1)) {
            pending.extend_from_slice(chunk);
            let n = body.relay(&pending, &mut out).unwrap();
            pending.drain(..n);
        }
        (out, pending)
    }

    const CHUNKED: &[u8] = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n";

    #[test]
    fn a_length_body_passes_as_it_is_and_leaves_what_follows() {
        for piece in 1..=20 {
            let mut body = ResponseBody::new(Framing::Length(11), ClientFraming::Same, false);
            let (out, left) = relay_in_pieces(&mut body, b"hello worldEXTRA", piece);
            assert_eq!(out, b"hello world", "piece {piece}");
            assert_eq!(left, b"EXTRA", "more than its length: left, not sent");
            assert!(body.is_done() && body.backend_reusable());
        }
    }

    #[test]
    fn an_empty_or_absent_body_is_done_at_once() {
        for framing in [Framing::None, Framing::Length(0)] {
            let mut body = ResponseBody::new(framing, ClientFraming::Same, false);
            assert!(body.is_done());
            let mut out = Vec::new();
            assert_eq!(body.relay(b"stray", &mut out), Ok(0));
            assert!(out.is_empty());
        }
    }

    #[test]
    fn a_chunked_body_is_chunked_again_for_a_1_1_client() {
        for piece in 1..=CHUNKED.len() {
            let mut body = ResponseBody::new(Framing::Chunked, ClientFraming::Chunked, false);
            let (out, left) = relay_in_pieces(&mut body, CHUNKED, piece);
            // Extensions and trailers stay behind; the data is framed anew.
            let text = String::from_utf8(out).unwrap();
            assert!(text.ends_with("0\r\n\r\n"), "piece {piece}: {text:?}");
            assert!(!text.contains("ext") && !text.contains("Trailer"), "{text:?}");
            assert_eq!(dechunk(&text), "hello world", "piece {piece}");
            assert!(left.is_empty() && body.is_done() && body.backend_reusable());
        }
    }

    #[test]
    fn a_chunked_body_goes_plain_to_a_1_0_client() {
        for piece in 1..=CHUNKED.len() {
            let mut body = ResponseBody::new(Framing::Chunked, ClientFraming::Close, false);
            let (out, _) = relay_in_pieces(&mut body, CHUNKED, piece);
            assert_eq!(out, b"hello world", "piece {piece}");
            assert!(body.is_done());
        }
    }

    #[test]
    fn a_body_to_the_close_is_chunked_for_a_1_1_client_and_ends_at_the_close() {
        let mut body = ResponseBody::new(Framing::Close, ClientFraming::Chunked, false);
        let (mut out, left) = relay_in_pieces(&mut body, b"stream of bytes", 4);
        assert!(left.is_empty() && !body.is_done());
        assert_eq!(body.backend_closed(&mut out), Ok(()));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(dechunk(&text), "stream of bytes");
        assert!(text.ends_with("0\r\n\r\n"));
        assert!(body.is_done() && !body.backend_reusable());
    }

    #[test]
    fn a_body_to_the_close_goes_plain_to_a_1_0_client() {
        let mut body = ResponseBody::new(Framing::Close, ClientFraming::Close, false);
        let (mut out, _) = relay_in_pieces(&mut body, b"plain", 2);
        assert_eq!(body.backend_closed(&mut out), Ok(()));
        assert_eq!(out, b"plain");
    }

    #[test]
    fn a_backend_that_closes_early_truncates_every_delimited_body() {
        for framing in [Framing::Length(10), Framing::Chunked] {
            for to_client in [ClientFraming::Same, ClientFraming::Chunked, ClientFraming::Close] {
                let mut body = ResponseBody::new(framing, to_client, false);
                let mut out = Vec::new();
                let _ = body.relay(b"5\r\nhel", &mut out);
                assert_eq!(
                    body.backend_closed(&mut out),
                    Err(Broken::Truncated),
                    "{framing:?} {to_client:?}"
                );
                assert!(!body.is_done());
            }
        }
    }

    #[test]
    fn a_malformed_chunk_breaks_the_body() {
        let mut body = ResponseBody::new(Framing::Chunked, ClientFraming::Chunked, false);
        let mut out = Vec::new();
        assert_eq!(body.relay(b"zz\r\nhello\r\n", &mut out), Err(Broken::BadChunk));
    }

    #[test]
    fn a_backend_that_said_close_is_not_reused() {
        let mut body = ResponseBody::new(Framing::Length(2), ClientFraming::Same, true);
        body.relay(b"ok", &mut Vec::new()).unwrap();
        assert!(body.is_done() && !body.backend_reusable());
    }

    #[test]
    fn a_request_body_with_a_length_stops_at_its_end() {
        for piece in 1..=12 {
            let mut body = RequestBody::Length(5);
            let mut out = Vec::new();
            let mut pending = Vec::new();
            for chunk in b"helloGET / ".chunks(piece) {
                pending.extend_from_slice(chunk);
                let n = body.forward(&pending, &mut out).unwrap();
                pending.drain(..n);
            }
            assert_eq!(out, b"hello");
            assert_eq!(pending, b"GET / ", "the next request stays with the client");
            assert!(body.is_done());
        }
    }

    #[test]
    fn a_chunked_request_body_is_framed_anew_for_the_backend() {
        for piece in 1..=CHUNKED.len() {
            let mut body = RequestBody::chunked(1 << 20);
            let mut out = Vec::new();
            let mut pending = Vec::new();
            for chunk in CHUNKED.chunks(piece) {
                pending.extend_from_slice(chunk);
                let n = body.forward(&pending, &mut out).unwrap();
                pending.drain(..n);
            }
            let text = String::from_utf8(out).unwrap();
            assert_eq!(dechunk(&text), "hello world", "piece {piece}");
            assert!(!text.contains("ext") && !text.contains("Trailer"));
            assert!(body.is_done());
        }
    }

    #[test]
    fn a_bad_or_oversized_chunked_request_body_is_refused_with_its_status() {
        let mut out = Vec::new();
        let e = RequestBody::chunked(1 << 20).forward(b"xyz\r\n", &mut out).unwrap_err();
        assert_eq!(e.status(), 400);
        let e = RequestBody::chunked(4).forward(b"5\r\nhello\r\n", &mut out).unwrap_err();
        assert_eq!(e.status(), 413);
    }

    /// The data of a chunked text (no extensions, no trailers).
    fn dechunk(mut text: &str) -> String {
        let mut data = String::new();
        loop {
            let (size, rest) = text.split_once("\r\n").unwrap();
            let size = usize::from_str_radix(size, 16).unwrap();
            if size == 0 {
                return data;
            }
            data.push_str(&rest[..size]);
            text = &rest[size + 2..];
        }
    }
}
