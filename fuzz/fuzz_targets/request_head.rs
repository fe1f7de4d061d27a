//! The request-head parser gives one answer however the head arrives: a
//! complete head parses the same from exactly its own bytes, and every
//! shorter prefix of it is incomplete (never an error, never another head).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = h1::Limits::default();
    let Ok(h1::Parsed::Complete { head, len }) = h1::parse_request(data, &limits) else { return };
    assert!(len <= data.len());
    match h1::parse_request(&data[..len], &limits) {
        Ok(h1::Parsed::Complete { head: again, len: again_len }) => {
            assert_eq!(again_len, len);
            assert!(again == head, "the same head from its own bytes");
        }
        other => panic!("a complete head's own bytes gave {other:?}"),
    }
    for cut in [0, len / 3, len / 2, len.saturating_sub(2), len - 1] {
        if cut < len {
            match h1::parse_request(&data[..cut], &limits) {
                Ok(h1::Parsed::Partial) => {}
                other => panic!("prefix {cut} of a {len}-byte head gave {other:?}"),
            }
        }
    }
});
