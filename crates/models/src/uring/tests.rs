//! The loop against real sockets: every path where the kernel holds the
//! loop's memory (receives into the buffer ring, sends from a batch, the
//! fixed-file slots) is crossed by these, including slots and buffers
//! reused across connections and a stop with sends in flight.

use super::*;
use pipeline::accesslog::LogTarget;
use pipeline::{AccessLog, ErrorLog, Settings, Site};
use std::io::{Read, Write};

/// Some tests count the process's pipes of the loops' size, so the loops
/// of this module's tests run one at a time.
static LOOPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Harness {
    addr: SocketAddr,
    shutdown: Shutdown,
    thread: thread::JoinHandle<io::Result<()>>,
    root: tempfile::TempDir,
    /// The loop's pipes for splicing files.
    pipes: Arc<files::PipeCount>,
    /// Its counters: what it logged, and when.
    pipeline: Arc<Pipeline>,
    /// Tests that count the process's pipes see only their own loop's.
    _one: std::sync::MutexGuard<'static, ()>,
}

/// A loop over a docroot with `small.txt` (cached) and `big.bin` (larger
/// than the send window and the cache: sent from the file in pieces), or
/// `None` where io_uring is unavailable.
fn start(settings: Settings, max_conns: usize) -> Option<Harness> {
    start_with(settings, max_conns, Knobs { files: FilePath::Splice, zc_min: usize::MAX, batch_wait_us: 0 })
}

fn start_with(settings: Settings, max_conns: usize, knobs: Knobs) -> Option<Harness> {
    if let Err(e) = probe() {
        eprintln!("skipped: {e}");
        return None;
    }
    let one = LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.txt"), "small").unwrap();
    std::fs::write(dir.path().join("big.bin"), big()).unwrap();
    let site = Site::dir(dir.path(), false).unwrap();
    let access = Arc::new(AccessLog::open(LogTarget::Off).unwrap());
    let p = Arc::new(Pipeline::new(settings, site, access, Arc::new(ErrorLog::stderr())));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new().unwrap();
    let stop = shutdown.clone();
    let listener = Arc::new(listener);
    let pipeline = p.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = thread::spawn(move || {
        let mut lp = Loop::new(listener, p, stop, None, max_conns, knobs)?;
        let _ = tx.send(lp.pipes.count());
        lp.run()
    });
    let Ok(pipes) = rx.recv() else { panic!("the loop did not start: {:?}", thread.join()) };
    Some(Harness { addr, shutdown, thread, root: dir, pipes, pipeline, _one: one })
}

fn big() -> Vec<u8> {
    (0..super::SEND_WINDOW * 3 + 777).map(|i| (i % 251) as u8).collect()
}

impl Harness {
    fn client(&self) -> TcpStream {
        let c = TcpStream::connect(self.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c
    }

    fn stop(self) {
        self.shutdown.trigger();
        self.thread.join().unwrap().unwrap();
    }
}

/// Reads one response with a Content-Length body.
fn response(c: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "closed inside a head: {}", String::from_utf8_lossy(&buf));
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0; length];
    c.read_exact(&mut body).unwrap();
    (head, body)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
}

#[test]
fn keep_alive_pipelined_and_large_responses_arrive_whole_and_in_order() {
    let Some(h) = start(Settings::default(), 64) else { return };
    let mut c = h.client();
    // Pipelined: a cached body (sent by reference), a file larger than the
    // window (read and sent in pieces), then the cached one again.
    c.write_all(format!("{}{}{}", get("/small.txt"), get("/big.bin"), get("/small.txt")).as_bytes()).unwrap();
    let (head, body) = response(&mut c);
    assert!(head.starts_with("HTTP/1.1 200 ") && body == b"small", "{head}");
    let (head, body) = response(&mut c);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(body == big(), "the large file arrives whole and in order");
    let (_, body) = response(&mut c);
    assert_eq!(body, b"small");
    // Many connections one after another: slots, fixed files and receive
    // buffers are reused, and a closed connection's slot serves the next.
    for _ in 0..200 {
        let mut c = h.client();
        c.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut all = Vec::new();
        c.read_to_end(&mut all).unwrap();
        assert!(all.starts_with(b"HTTP/1.1 200 ") && all.ends_with(b"small"));
    }
    h.stop();
}

/// Every send zero-copy (its buffers held until the kernel's notification)
/// and every wait a batching one: the same bytes arrive.
#[test]
fn zero_copy_sends_and_batching_waits_deliver_the_same_bytes() {
    let knobs = Knobs { files: FilePath::Splice, zc_min: 0, batch_wait_us: 200 };
    let Some(h) = start_with(Settings::default(), 64, knobs) else { return };
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let mut c = h.client();
            c.write_all(format!("{}{}", get("/big.bin"), get("/small.txt")).as_bytes()).unwrap();
            c
        })
        .collect();
    for mut c in clients {
        let (_, body) = response(&mut c);
        assert!(body == big(), "the large file arrives whole and in order");
        assert_eq!(response(&mut c).1, b"small");
    }
    h.stop();
}

#[test]
fn a_request_cut_into_single_bytes_is_assembled_from_many_receives() {
    let Some(h) = start(Settings::default(), 64) else { return };
    let mut c = h.client();
    c.set_nodelay(true).unwrap();
    for b in get("/small.txt").bytes() {
        c.write_all(&[b]).unwrap();
        thread::sleep(Duration::from_millis(1));
    }
    let (head, body) = response(&mut c);
    assert!(head.starts_with("HTTP/1.1 200 ") && body == b"small", "{head}");
    h.stop();
}

/// A peer that pipelines far more than a receive buffer, a read room and
/// the unread-input limit hold while its first response is not read: the
/// bytes wait (the receive paused past the limit) and every request is
/// answered, in order.
#[test]
fn pipelined_requests_past_the_unread_limit_are_all_answered_in_order() {
    let Some(h) = start(Settings::default(), 64) else { return };
    let mut c = h.client();
    let pad = "p".repeat(1000);
    let huge = h.write_huge();
    let mut requests = get("/huge.bin").into_bytes();
    let count = super::INBOX_HIGH * 2 / 1000;
    for i in 0..count {
        requests.extend(format!("GET /small.txt?{i} HTTP/1.1\r\nHost: x\r\nX-Pad: {pad}\r\n\r\n").bytes());
    }
    let mut writer = c.try_clone().unwrap();
    // Written while nothing is read: the server's receive pauses, so the
    // writes may wait for the responses to be read.
    let wrote = thread::spawn(move || writer.write_all(&requests));
    thread::sleep(Duration::from_millis(200));
    let (head, body) = response(&mut c);
    assert!(head.starts_with("HTTP/1.1 200 ") && body == huge, "{head}");
    for i in 0..count {
        let (head, body) = response(&mut c);
        assert!(head.starts_with("HTTP/1.1 200 ") && body == b"small", "request {i}: {head}");
    }
    wrote.join().unwrap().unwrap();
    h.stop();
}

#[test]
fn a_partial_head_gets_its_408_from_the_timer_and_the_error_reaches_the_client() {
    let settings = Settings { header_timeout: Duration::from_millis(200), ..Settings::default() };
    let Some(h) = start(settings, 64) else { return };
    let mut c = h.client();
    c.write_all(b"GET /small.txt HTTP/1.1\r\n").unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).unwrap();
    assert!(all.starts_with(b"HTTP/1.1 408 "), "{}", String::from_utf8_lossy(&all));
    h.stop();
}

#[test]
fn at_its_cap_the_loop_stops_accepting_until_a_connection_closes() {
    let Some(h) = start(Settings::default(), 1) else { return };
    let mut first = h.client();
    first.write_all(get("/small.txt").as_bytes()).unwrap();
    response(&mut first);
    // The second waits in the backlog (or is refused and retried) while the first stays open.
    let mut second = h.client();
    second.write_all(get("/small.txt").as_bytes()).unwrap();
    second.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut byte = [0u8; 1];
    assert!(second.read(&mut byte).is_err(), "served past the cap");
    drop(first);
    second.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (head, _) = response(&mut second);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    h.stop();
}

#[test]
fn the_stop_lets_a_large_response_finish_and_closes_idle_connections() {
    let Some(h) = start(Settings::default(), 64) else { return };
    let mut idle = h.client();
    idle.write_all(get("/small.txt").as_bytes()).unwrap();
    response(&mut idle);
    let mut busy = h.client();
    // Not read yet: the response fills the socket buffers and the window.
    busy.write_all(get("/big.bin").as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(100));
    h.shutdown.trigger();
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the idle connection closes at once");
    let (head, body) = response(&mut busy);
    assert!(head.starts_with("HTTP/1.1 200 ") && body == big());
    h.thread.join().unwrap().unwrap();
}

#[test]
fn an_unavailable_ring_is_explained() {
    let e = unavailable(&io::Error::from_raw_os_error(libc::EPERM));
    assert!(
        e.contains("--model uring") && e.contains("io_uring_disabled") && e.contains("--model event"),
        "{e}"
    );
    let e = unavailable(&io::Error::from_raw_os_error(libc::ENOSYS));
    assert!(e.contains("no io_uring"), "{e}");
}

/// Open pipe descriptors of the size the loops ask for (other pipes in the
/// test process keep the default size).
fn loop_pipe_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&fd| {
            std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .is_ok_and(|target| target.to_string_lossy().starts_with("pipe:"))
                // SAFETY: F_GETPIPE_SZ reads a number about the descriptor
                // and changes nothing; a descriptor closed meanwhile fails.
                && unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) } == super::SEND_WINDOW as i32
        })
        .count()
}

const HUGE: usize = 10 << 20;

/// A 10 MiB file whose every byte depends on its position (a byte from
/// the wrong place, or a stale one, shows).
fn huge() -> Vec<u8> {
    (0..HUGE as u32).map(|i| ((i % 251) ^ (i >> 12)) as u8).collect()
}

impl Harness {
    fn write_huge(&self) -> Vec<u8> {
        let body = huge();
        std::fs::write(self.root.path().join("huge.bin"), &body).unwrap();
        body
    }

    fn lent(&self) -> usize {
        self.pipes.lent.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn open_pipes(&self) -> usize {
        self.pipes.open.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits (a bounded while) for the loop to have given every pipe back.
    fn wait_for_pipes_back(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.lent() > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(self.lent(), 0, "a pipe is still lent");
    }
}

fn splice_knobs() -> Knobs {
    Knobs { files: FilePath::Splice, zc_min: usize::MAX, batch_wait_us: 0 }
}

#[test]
fn a_10_mib_file_is_spliced_whole_and_byte_exact_twice_on_one_connection() {
    let Some(h) = start_with(Settings::default(), 64, splice_knobs()) else { return };
    let body = h.write_huge();
    let mut c = h.client();
    c.write_all(format!("{}{}{}", get("/huge.bin"), get("/small.txt"), get("/huge.bin")).as_bytes()).unwrap();
    let (head, got) = response(&mut c);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(got == body, "the 10 MiB file arrives whole and byte-exact");
    assert_eq!(response(&mut c).1, b"small");
    let (_, got) = response(&mut c);
    assert!(got == body, "again, through a pipe taken back clean");
    h.wait_for_pipes_back();
    assert_eq!(h.open_pipes(), 1, "one connection, one pipe, reused");
    assert_eq!(loop_pipe_fds(), 2, "its two ends are the loop's only pipe descriptors");
    h.stop();
    assert_eq!(loop_pipe_fds(), 0, "closed with the loop");
}

#[test]
fn a_range_in_the_middle_of_a_large_file_is_spliced_from_its_offset() {
    let Some(h) = start_with(Settings::default(), 64, splice_knobs()) else { return };
    let body = h.write_huge();
    // Starts inside a page and spans several pipefuls.
    let (first, last) = (3_000_001usize, 3_000_001 + 1_000_000 - 1);
    let mut c = h.client();
    c.write_all(
        format!("GET /huge.bin HTTP/1.1\r\nHost: x\r\nRange: bytes={first}-{last}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let (head, got) = response(&mut c);
    assert!(head.starts_with("HTTP/1.1 206 "), "{head}");
    assert!(got == body[first..=last], "the range's bytes, from its offset");
    assert!(h.open_pipes() > 0, "spliced, not read");
    h.stop();
}

#[test]
fn a_client_that_leaves_mid_file_leaks_no_pipe_and_the_next_gets_clean_bytes() {
    let Some(h) = start_with(Settings::default(), 64, splice_knobs()) else { return };
    let before = loop_pipe_fds();
    let body = h.write_huge();
    for _ in 0..3 {
        let mut c = h.client();
        c.write_all(get("/huge.bin").as_bytes()).unwrap();
        // Some of the body, then a reset: the socket splice fails with
        // bytes left in the pipe.
        let mut some = vec![0; 300 << 10];
        c.read_exact(&mut some).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while h.lent() == 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(h.lent(), 1, "the file goes through a pipe");
        socket2_linger_zero(&c);
        drop(c);
        h.wait_for_pipes_back();
    }
    assert!(h.open_pipes() <= 1, "{} pipes open", h.open_pipes());
    assert_eq!(loop_pipe_fds(), before + 2 * h.open_pipes(), "no pipe descriptor leaked");
    // A pipe that held bytes was not reused: the next response is exact.
    let mut c = h.client();
    c.write_all(get("/huge.bin").as_bytes()).unwrap();
    assert!(response(&mut c).1 == body, "no stale bytes from an earlier pipe");
    h.stop();
    assert_eq!(loop_pipe_fds(), before, "every pipe closed with the loop");
}

/// Closes with a reset rather than a FIN, so the server's next send fails.
fn socket2_linger_zero(c: &TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt reads `linger` for the call's duration only.
    let rc = unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

#[test]
fn a_file_that_shrinks_mid_send_ends_the_connection_after_its_remaining_bytes() {
    let Some(h) = start_with(Settings::default(), 64, splice_knobs()) else { return };
    let body = h.write_huge();
    let mut c = h.client();
    c.write_all(format!("{}{}", get("/huge.bin"), get("/small.txt")).as_bytes()).unwrap();
    // The head, then nothing read: what is in flight stays below the cut.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let cut = 8 << 20;
    std::fs::OpenOptions::new()
        .write(true)
        .open(h.root.path().join("huge.bin"))
        .unwrap()
        .set_len(cut)
        .unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).expect("the connection ends rather than wait for the missing bytes");
    assert!(
        rest == body[..cut as usize],
        "every byte the file still has, then the end ({} bytes)",
        rest.len()
    );
    h.wait_for_pipes_back();
    // Its pipe was emptied and serves the next response.
    let mut c = h.client();
    c.write_all(get("/huge.bin").as_bytes()).unwrap();
    assert!(response(&mut c).1 == body[..cut as usize]);
    assert_eq!(h.open_pipes(), 1, "the one pipe, taken back and reused");
    h.stop();
}

#[test]
fn sendfile_and_copy_paths_send_the_same_bytes() {
    for files in [FilePath::Sendfile, FilePath::Copy] {
        let knobs = Knobs { files, zc_min: usize::MAX, batch_wait_us: 0 };
        let Some(h) = start_with(Settings::default(), 64, knobs) else { return };
        let body = h.write_huge();
        let mut c = h.client();
        c.write_all(format!("{}{}{}", get("/huge.bin"), get("/small.txt"), get("/big.bin")).as_bytes())
            .unwrap();
        assert!(response(&mut c).1 == body, "{files:?}: the 10 MiB file");
        assert_eq!(response(&mut c).1, b"small");
        assert!(response(&mut c).1 == big(), "{files:?}: the file past the window");
        assert_eq!(h.open_pipes(), 0, "{files:?} takes no pipe");
        h.stop();
    }
}

/// A peer that stops reading: at the send timeout the splice the kernel's
/// worker is blocked in is cancelled, the connection closes, and its pipe
/// (holding bytes) is closed rather than kept.
#[test]
fn a_splice_to_a_peer_that_stops_reading_is_cancelled_at_the_send_timeout() {
    let settings = Settings { send_timeout: Duration::from_millis(300), ..Settings::default() };
    let Some(h) = start_with(settings, 64, splice_knobs()) else { return };
    let before = loop_pipe_fds();
    h.write_huge();
    let mut c = h.client();
    c.write_all(get("/huge.bin").as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.lent() == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(h.lent(), 1, "the file goes through a pipe");
    h.wait_for_pipes_back();
    assert_eq!(h.open_pipes(), 0, "the pipe held bytes: closed, not kept");
    assert_eq!(loop_pipe_fds(), before);
    // The connection was given up: what arrived, then the end.
    let mut all = Vec::new();
    let _ = c.read_to_end(&mut all);
    assert!(all.len() < HUGE, "{} bytes", all.len());
    // And the loop serves the next one.
    let mut c = h.client();
    c.write_all(get("/small.txt").as_bytes()).unwrap();
    assert_eq!(response(&mut c).1, b"small");
    h.stop();
}

/// On the `sendfile` path a file response goes out by the socket's own
/// calls, as in `event`, and what the kernel does not take is queued: a
/// peer that stops reading is still cut at the send timeout, not left to
/// the keep-alive timeout as if its response had been sent whole.
#[test]
fn a_sendfile_to_a_peer_that_stops_reading_is_cut_at_the_send_timeout() {
    let settings = Settings {
        send_timeout: Duration::from_millis(300),
        keepalive_timeout: Duration::from_secs(3600),
        ..Settings::default()
    };
    let knobs = Knobs { files: FilePath::Sendfile, zc_min: usize::MAX, batch_wait_us: 0 };
    let Some(h) = start_with(settings, 64, knobs) else { return };
    h.write_huge();
    let mut c = h.client();
    c.write_all(get("/huge.bin").as_bytes()).unwrap();
    // Unread, the response is counted once the connection is done with
    // it: given up at the send timeout, short of its length. Counted whole
    // at once, the loop would have taken what the kernel held for sent.
    let counted = |p: &Pipeline| {
        let s = p.stats.snapshot();
        (s.requests() > 0).then_some(s.bytes)
    };
    let guard = Instant::now() + Duration::from_secs(60);
    while counted(&h.pipeline).is_none() && Instant::now() < guard {
        thread::sleep(Duration::from_millis(10));
    }
    let bytes = counted(&h.pipeline).expect("the response is counted");
    assert!(bytes < HUGE as u64, "given up mid-file: {bytes} bytes");
    let mut all = Vec::new();
    let _ = c.read_to_end(&mut all);
    assert!(all.len() < HUGE, "what arrived, then the end: {} bytes", all.len());
    let mut c = h.client();
    c.write_all(get("/small.txt").as_bytes()).unwrap();
    assert_eq!(response(&mut c).1, b"small");
    h.stop();
}
