//! `modus serve` under an open-file limit (`prlimit`): accepting pauses
//! and says so once; a hard limit below `--max-connections` is a smaller cap.

use super::*;

/// Out of descriptors, accepting fails for as long as the cause lasts; the
/// error log says so once (with the fix), not once per attempt — through
/// each kind of accepting loop: the gate (`pool`), the thread acceptor
/// (`staged`), the event loop and `uring`'s multishot accept.
#[test]
fn running_out_of_descriptors_is_said_once() {
    if run("prlimit", ["--version"], RUN_TIMEOUT).status.code() != Some(0) {
        eprintln!("skipped: needs prlimit (util-linux) to lower the open-file limit");
        return;
    }
    let root = Docroot::standard();
    for model in ["pool", "staged", "event", "uring"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("error.log");
        let srv = Server::builder("prlimit")
            .subcommand("--nofile=40:40")
            .no_defaults()
            .args([BIN, "serve", root.path().to_str().unwrap(), "--model", model, "--listen", "127.0.0.1:0"])
            .args(["--access-log", "off", "--error-log", log.to_str().unwrap()])
            .start();
        let clients: Vec<std::net::TcpStream> = (0..80)
            .filter_map(|_| std::net::TcpStream::connect(srv.addr()).ok())
            .inspect(|mut c| {
                let _ = std::io::Write::write_all(&mut c, b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
            })
            .collect();
        let said = || {
            std::fs::read_to_string(&log).unwrap_or_default().matches("accept: Too many open files").count()
        };
        for _ in 0..100 {
            if said() > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Accepting keeps failing (and backing off) while the clients stay connected.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(said(), 1, "{model}: {}", std::fs::read_to_string(&log).unwrap());
        assert!(std::fs::read_to_string(&log).unwrap().contains("raise the open-file limit"));
        drop(clients);
    }
}

/// A hard open-file limit below `--max-connections` (the default 10,000
/// here) is a smaller cap, not a failure: every event model starts and
/// serves under it (`uring` used to size its fixed-file table from the flag
/// and exit 1 after `listening on`, which the kernel refuses past the limit).
#[test]
fn a_hard_open_file_limit_below_max_connections_still_serves() {
    if run("prlimit", ["--version"], RUN_TIMEOUT).status.code() != Some(0) {
        eprintln!("skipped: needs prlimit (util-linux) to lower the open-file limit");
        return;
    }
    let root = Docroot::standard();
    for model in ["event", "amped", "uring"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("error.log");
        let srv = Server::builder("prlimit")
            .subcommand("--nofile=64:64")
            .no_defaults()
            .args([BIN, "serve", root.path().to_str().unwrap(), "--model", model, "--listen", "127.0.0.1:0"])
            .args(["--workers", "2", "--max-connections", "10000"])
            .args(["--access-log", "off", "--error-log", log.to_str().unwrap()])
            .start();
        for _ in 0..3 {
            let mut c = srv.client();
            for _ in 0..2 {
                let r = c.request("GET", "/hello.txt", &[]);
                r.assert_status(200);
                assert_eq!(r.body, b"Hello, world!\n", "{model}");
            }
        }
        let said = std::fs::read_to_string(&log).unwrap();
        assert!(said.contains("exceeds the open-file limit"), "{model}: {said}");
        assert!(!said.contains("uring loop"), "{model}: {said}");
    }
}
