//! Warm-ahead (`Connection::set_warm_ahead`): a connection that must never
//! send a file page that is not in memory sends a large file a window at a
//! time, and stops with `Want::Warm` before a window with a cold page.

use super::*;
use crate::schedule::{Schedule, Srpt};

const WINDOW: u64 = 256 << 10;
const LEN: usize = 3 << 20;

/// A docroot on disk holding `big.bin` (`LEN` bytes, no two windows
/// alike), served without the cache, so it goes out as a file range.
fn on_disk(schedule: Schedule) -> (Harness, tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i % 251) as u8 ^ (i >> 18) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    let settings = Settings { max_cached_file: 0, schedule, ..Settings::default() };
    let access = Arc::new(AccessLog::open(LogTarget::Stdout).unwrap());
    let site = Site::dir(dir.path(), false).unwrap();
    let p = Pipeline::new(settings, site, access, Arc::new(ErrorLog::stderr())).with_stats(Stats::new(false));
    let now = Instant::now();
    let peer = SocketAddr::from(([192, 0, 2, 7], 40000));
    let mut conn = Connection::new(ConnInfo { peer }, now, &p, Mode::Inline);
    conn.defer_log();
    conn.set_warm_ahead(WINDOW);
    if matches!(p.settings.schedule, Schedule::Srpt(_)) {
        conn.set_yielding();
    }
    (Harness { p, conn, wire: MemoryWire::new(), now, records: Vec::new() }, dir, data)
}

/// Drops the file's clean pages; whether that worked (not on tmpfs).
fn evict(path: &std::path::Path) -> bool {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    let mut byte = [0u8; 1];
    let flags = rustix::io::ReadWriteFlags::NOWAIT;
    rustix::io::preadv2(&file, &mut [std::io::IoSliceMut::new(&mut byte)], 0, flags)
        == Err(rustix::io::Errno::AGAIN)
}

/// Drives `request` to its end, warming what the connection asks for (as
/// a helper would), and returns the response and how many windows it asked for.
fn serve(h: &mut Harness, request: &[u8]) -> (Response, usize) {
    let mut want = h.send(request);
    let mut warms = 0;
    loop {
        match want {
            Want::Warm => {
                let pages = h.conn.take_cold_pages().expect("Want::Warm hands out its pages");
                // Only non-empty: the window was cold when the connection
                // probed it, but kernel readahead from the window before may
                // have brought it in since, so `cached()` here would race.
                assert!(!pages.is_empty(), "a window with a cold page is handed out");
                assert!(h.conn.take_cold_pages().is_none(), "once");
                pages.warm().unwrap();
                h.conn.pages_warmed();
                warms += 1;
            }
            Want::Again => {}
            Want::Read(_) => return (h.response(), warms),
            other => panic!("{other:?}"),
        }
        want = h.drive();
    }
}

fn srpt() -> Schedule {
    Schedule::Srpt(Srpt { quantum: 64 << 10, ..Srpt::default() })
}

#[test]
fn a_hot_file_goes_out_without_a_warm_up() {
    for schedule in [Schedule::Fifo, srpt()] {
        let (mut h, dir, data) = on_disk(schedule);
        std::fs::read(dir.path().join("big.bin")).unwrap();
        let (response, warms) = serve(&mut h, b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(response.status, 200);
        assert!(response.body == data, "the body, byte for byte");
        assert_eq!(warms, 0, "every window's probe found its pages");
    }
}

#[test]
fn a_cold_file_is_warmed_before_it_is_sent() {
    for schedule in [Schedule::Fifo, srpt()] {
        let (mut h, dir, data) = on_disk(schedule);
        let path = dir.path().join("big.bin");
        let evicted = evict(&path);
        let (response, warms) = serve(&mut h, b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(response.body == data, "the body, byte for byte");
        let evicted = evict(&path) && evicted;
        let range = b"GET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=100000-2999999\r\n\r\n";
        let (response, range_warms) = serve(&mut h, range);
        assert_eq!(response.status, 206);
        assert!(response.body == data[100_000..3_000_000], "the range, byte for byte");
        if evicted {
            assert!(warms > 0 && range_warms > 0, "cold windows are handed out: {warms}, {range_warms}");
        }
    }
}
