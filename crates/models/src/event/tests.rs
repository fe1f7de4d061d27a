use super::*;
use pipeline::accesslog::LogTarget;
use pipeline::{AccessLog, ErrorLog, Reply, Request, Settings, Site};
use std::io::{Read, Write};
use std::sync::mpsc;

/// A docroot on disk with caching off, so every request needs the disk
/// and goes to the helpers (memory answers never leave the loop).
fn pipeline(settings: Settings) -> (Arc<Pipeline>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "AAAA").unwrap();
    std::fs::write(dir.path().join("b.txt"), "BBBB").unwrap();
    let settings = Settings { max_cached_file: 0, ..settings };
    let site = Site::dir(dir.path(), false).unwrap();
    let access = Arc::new(AccessLog::open(LogTarget::Off).unwrap());
    (Arc::new(Pipeline::new(settings, site, access, Arc::new(ErrorLog::stderr()))), dir)
}

/// Helpers the test plays by hand: it sees each request and decides
/// when (and whether) a reply comes back.
struct Manual {
    waker: Arc<Waker>,
    submitted: mpsc::Sender<(u64, Request)>,
    finished: mpsc::Receiver<(u64, Option<Reply>)>,
}

impl Helpers for Manual {
    fn waker(&self) -> &Waker {
        &self.waker
    }
    fn submit(&mut self, token: u64, request: Request) -> bool {
        self.submitted.send((token, request)).is_ok()
    }
    fn finished(&mut self) -> Option<(u64, Option<Reply>)> {
        self.finished.try_recv().ok()
    }
    // Files are sent as they are (no warm-ahead).
    fn warm_window(&self) -> u64 {
        0
    }
    fn warm(&mut self, _: u64, _: transport::FilePages) -> bool {
        false
    }
    fn warmed(&mut self) -> Option<u64> {
        None
    }
}

struct Harness {
    addr: SocketAddr,
    shutdown: Shutdown,
    p: Arc<Pipeline>,
    jobs: mpsc::Receiver<(u64, Request)>,
    replies: mpsc::Sender<(u64, Option<Reply>)>,
    waker: Arc<Waker>,
    thread: thread::JoinHandle<io::Result<()>>,
    _root: tempfile::TempDir,
}

impl Harness {
    fn start(settings: Settings) -> Harness {
        Harness::start_sending(settings, SendAway::All)
    }

    fn start_sending(settings: Settings, send_away: SendAway) -> Harness {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let ((p, root), shutdown) = (pipeline(settings), Shutdown::new().unwrap());
        let (submitted, jobs) = mpsc::channel();
        let (replies, finished) = mpsc::channel();
        let waker = Arc::new(Waker::new().unwrap());
        let helpers = Manual { waker: waker.clone(), submitted, finished };
        let mut lp = Loop::new(
            Arc::new(listener),
            p.clone(),
            shutdown.clone(),
            Some((send_away, Box::new(helpers))),
            usize::MAX,
        )
        .unwrap();
        let thread = thread::spawn(move || lp.run());
        Harness { addr, shutdown, p, jobs, replies, waker, thread, _root: root }
    }

    fn job(&self) -> (u64, Request) {
        self.jobs.recv_timeout(Duration::from_secs(5)).expect("a request reaches the helpers")
    }

    fn answer(&self, token: u64, request: &Request) {
        let reply = self.p.handle(&request.head, request.keep_alive);
        self.replies.send((token, Some(reply))).unwrap();
        self.waker.wake();
    }

    fn client(&self, request: &str) -> TcpStream {
        let mut c = TcpStream::connect(self.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        c
    }
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
}

fn read_all(mut c: TcpStream) -> String {
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_reply_for_a_vanished_client_never_reaches_the_next_one() {
    let h = Harness::start(Settings::default());
    let first = h.client(&get("/a.txt"));
    let (stale, request_a) = h.job();
    // Reset (not a clean close): the loop sees the client is gone.
    socket_reset(first);
    thread::sleep(Duration::from_millis(100));
    let second = h.client(&get("/b.txt"));
    let (token, request_b) = h.job();
    assert_eq!(token as u32, stale as u32, "the slot is reused");
    assert_ne!(token, stale, "under a new generation");
    h.answer(stale, &request_a);
    h.answer(token, &request_b);
    let response = read_all(second);
    assert!(response.starts_with("HTTP/1.1 200 ") && response.ends_with("BBBB"), "{response}");
    h.shutdown.trigger();
    h.thread.join().unwrap().unwrap();
}

#[test]
fn pipelined_requests_wait_their_turn_and_the_stop_waits_for_the_helpers() {
    let h = Harness::start(Settings::default());
    let c = h.client("GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let (token, first) = h.job();
    assert_eq!(first.head.target(), "/a.txt");
    // One request at a time per connection: the second waits in the buffer.
    assert!(h.jobs.recv_timeout(Duration::from_millis(100)).is_err());
    h.shutdown.trigger();
    thread::sleep(Duration::from_millis(50));
    assert!(!h.thread.is_finished(), "a request with the helpers keeps the loop alive");
    h.answer(token, &first);
    let (token, second) = h.job();
    assert_eq!(second.head.target(), "/b.txt");
    assert!(!second.keep_alive, "a request parsed while stopping closes the connection");
    h.answer(token, &second);
    let response = read_all(c);
    assert_eq!(response.matches("HTTP/1.1 200 ").count(), 2, "{response}");
    assert!(response.find("AAAA") < response.find("BBBB"), "in order: {response}");
    h.thread.join().unwrap().unwrap();
}

#[test]
fn a_partial_head_gets_its_408_from_the_timer() {
    let settings = Settings { header_timeout: Duration::from_millis(200), ..Settings::default() };
    let h = Harness::start(settings);
    let c = h.client("GET /a.txt HTTP/1.1\r\n");
    let response = read_all(c);
    assert!(response.starts_with("HTTP/1.1 408 "), "{response}");
    h.shutdown.trigger();
    h.thread.join().unwrap().unwrap();
}

#[test]
fn event_starts_scripts_away_from_the_loop_and_serves_meanwhile() {
    use std::os::unix::fs::PermissionsExt;
    let scripts = tempfile::tempdir().unwrap();
    let script = scripts.path().join("ran");
    std::fs::write(&script, "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nran'\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cgi = pipeline::CgiSettings::new(pipeline::Scripts::Dir(scripts.path().to_path_buf()));
    let h = Harness::start_sending(Settings { cgi: Some(cgi), ..Settings::default() }, SendAway::Cgi);
    let script_client = h.client(&get("/cgi-bin/ran"));
    // The start (a stat, an exec) is handed out; nothing is spawned by the loop.
    let (token, request) = h.job();
    assert_eq!(request.head.path(), "/cgi-bin/ran");
    // While it waits, the loop serves other connections itself, from the disk.
    let response = read_all(h.client(&get("/a.txt")));
    assert!(response.starts_with("HTTP/1.1 200 ") && response.ends_with("AAAA"), "{response}");
    assert!(h.jobs.try_recv().is_err(), "only the script's start leaves the loop");
    // The started script comes back; the loop streams its output.
    let reply = h.p.handle_request(&request);
    h.replies.send((token, Some(reply))).unwrap();
    h.waker.wake();
    let response = read_all(script_client);
    assert!(
        response.starts_with("HTTP/1.1 200 ") && response.ends_with("\r\nran\r\n0\r\n\r\n"),
        "{response}"
    );
    h.shutdown.trigger();
    h.thread.join().unwrap().unwrap();
}

/// Closes with SO_LINGER 0, so the peer gets a reset.
fn socket_reset(c: TcpStream) {
    rustix::net::sockopt::set_socket_linger(&c, Some(Duration::ZERO)).unwrap();
}
