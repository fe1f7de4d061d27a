//! What the director sends a client for a backend's response head is a
//! head it can parse again, with the same status and one framing: never a
//! Content-Length beside a Transfer-Encoding, never a framing field lost to
//! a `Connection` header. A head the director refuses to write (its own
//! framing fields would take it past the limits) is answered 502 instead:
//! it must be one the limits really refuse.
#![no_main]
use libfuzzer_sys::fuzz_target;

use director::response::{client_head, parse_response, HeadParse};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, buf)) = data.split_first() else { return };
    let (client_11, keep) = (flags & 1 != 0, flags & 2 != 0);
    let Ok(HeadParse::Complete(head, _)) = parse_response(buf, false) else { return };
    let (bytes, _, _) = match client_head(&head, client_11, keep) {
        Ok(written) => written,
        Err(why) => {
            assert!(why.contains("more than the"), "{why}");
            return;
        }
    };
    let again = match parse_response(&bytes, false) {
        Ok(HeadParse::Complete(again, len)) => {
            assert_eq!(len, bytes.len(), "the head is all the director wrote");
            again
        }
        other => panic!(
            "the director wrote a head it cannot parse: {other:?}\n{}",
            String::from_utf8_lossy(&bytes)
        ),
    };
    assert_eq!(again.status, head.status);
    let has = |name: &str| again.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    assert!(!(has("content-length") && has("transfer-encoding")), "{}", String::from_utf8_lossy(&bytes));
    if let director::response::Framing::Length(n) = head.framing {
        if !head.is_interim() && head.status != 204 && head.status != 304 {
            assert!(
                again.framing == director::response::Framing::Length(n)
                    || again.framing == director::response::Framing::Chunked
                    || again.framing == director::response::Framing::Close,
                "{}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }
});
