//! A script's response head parses without panicking, within its limit,
//! and the same bytes give the same answer when more output follows.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let max = 8192;
    let first = pipeline::cgi::parse_head(data, max);
    if let Ok(Some((_, n))) = &first {
        assert!(*n <= data.len() && *n <= max + 4);
        let mut more = data.to_vec();
        more.extend_from_slice(b"trailing body bytes");
        match pipeline::cgi::parse_head(&more, max) {
            Ok(Some((_, again))) => assert_eq!(again, *n, "the head ends where it ended"),
            other => panic!("{other:?} once the body follows"),
        }
    }
});
