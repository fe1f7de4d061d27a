//! A request path, normalised, never leaves the document root: it starts
//! with `/`, holds no `.` or `..` segment, no empty segment, no NUL, and no
//! backslash (a path separator elsewhere).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else { return };
    let Ok(path) = pipeline::resolve::normalize(raw) else { return };
    assert!(path.starts_with('/'), "{raw:?} → {path:?}");
    assert!(!path.contains('\0') && !path.contains('\\'), "{raw:?} → {path:?}");
    for segment in path[1..].split('/').filter(|s| !s.is_empty()) {
        assert!(segment != ".." && segment != ".", "{raw:?} → {path:?}");
    }
    assert!(!path.contains("//"), "{raw:?} → {path:?}");
});
