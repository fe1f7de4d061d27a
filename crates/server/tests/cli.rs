//! Command line and config-file behaviour of `modus serve` (not per model).

use std::path::Path;
use std::time::Duration;

use testkit::{run, Client, Docroot, Output, Server, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_modus");
const RUN_TIMEOUT: Duration = Duration::from_secs(20);

/// Under an open-file limit: `cli/descriptors.rs`.
#[path = "cli/descriptors.rs"]
mod descriptors;

fn run_modus(args: &[&str]) -> Output {
    run(BIN, args, RUN_TIMEOUT)
}

#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "exit status\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

#[track_caller]
fn get_ok(srv: &Server, target: &str) -> testkit::Response {
    let r = Client::connect(srv.addr()).request("GET", target, &[]);
    r.assert_status(200);
    r
}

#[track_caller]
fn stop(srv: &mut Server) {
    srv.signal(Signal::Term);
    let status = srv.wait_exit(RUN_TIMEOUT);
    assert!(status.success(), "{status:?}\n{}", srv.stderr());
}

#[test]
fn first_line_format() {
    let root = Docroot::standard();
    let srv = Server::start(BIN, "pool", root.path(), &[]);
    assert_eq!(srv.first_line(), format!("listening on {} model=pool pid={}", srv.addr(), srv.pid()));
    assert_eq!(srv.addr().ip().to_string(), "127.0.0.1");
    assert_ne!(srv.addr().port(), 0);
}

#[test]
fn demo_site_without_root() {
    let srv = Server::builder(BIN).model("pool").start();
    let r = get_ok(&srv, "/");
    assert!(r.header_one("content-type").starts_with("text/html"), "{}", r.describe());
    assert!(r.body_str().contains("modus"), "{}", r.describe());
    // The page tells the truth about this server: every model `modus
    // models` lists, with its own summary, and the address it serves on.
    let page = r.body_str();
    let models = run_modus(&["models"]);
    for line in models.stdout.lines() {
        let name = line.split_whitespace().next().unwrap();
        assert!(page.contains(&format!("<tr><td><code>{name}</code></td>")), "{name} missing:\n{page}");
    }
    assert!(page.contains("a new thread per ready request"), "{page}");
    // Started on port 0, the address is the browser's own (a script).
    assert!(page.contains("textContent = location.origin"), "{page}");
}

#[test]
fn unknown_model_exits_2_and_lists_models() {
    let root = Docroot::standard();
    let out =
        run_modus(&["serve", root.path().to_str().unwrap(), "--listen", "127.0.0.1:0", "--model", "nope"]);
    assert_exit(&out, 2);
    let listing = run_modus(&["models"]);
    assert_exit(&listing, 0);
    let names: Vec<&str> = listing.stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(names.len() >= 8, "modus models lists every model:\n{}", listing.stdout);
    // What --schedule srpt orders in each: the loop's turns only where there is a loop.
    for line in listing.stdout.lines() {
        let loops = line.starts_with("event ") || line.starts_with("amped ");
        let srpt = if loops { " srpt:link+loop " } else { " srpt:link " };
        assert!(line.contains(srpt), "{line}");
    }
    for name in names {
        assert!(out.stderr.contains(name), "stderr should list {name}:\n{}", out.stderr);
    }
}

#[test]
fn fewer_connections_than_event_loops_exits_2() {
    let out = run_modus(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--model",
        "event",
        "--workers",
        "4",
        "--max-connections",
        "2",
    ]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("--max-connections"), "{}", out.stderr);
}

#[test]
fn unknown_flag_exits_2() {
    let out = run_modus(&["serve", "--listen", "127.0.0.1:0", "--no-such-flag"]);
    assert_exit(&out, 2);
}

#[test]
fn bad_duration_exits_2() {
    let out = run_modus(&["serve", "--listen", "127.0.0.1:0", "--keepalive-timeout", "banana"]);
    assert_exit(&out, 2);
}

#[test]
fn config_file_sets_listen_and_access_log() {
    let root = Docroot::standard();
    let log = root.base().join("from-config.log");
    let cfg = write(
        &root.base().join("modus.toml"),
        &format!(
            "listen = \"127.0.0.1:0\"\naccess-log = \"{}\"\nkeepalive-timeout = \"5s\"\n",
            log.display()
        ),
    );
    let mut srv = Server::builder(BIN).root(root.path()).args(["--config", &cfg]).no_defaults().start();
    assert_eq!(srv.addr().ip().to_string(), "127.0.0.1");
    get_ok(&srv, "/hello.txt");
    stop(&mut srv);
    assert_eq!(count_lines(&log), 1, "access log from the config file");
}

#[test]
fn flags_override_config() {
    let root = Docroot::standard();
    let cfg_log = root.base().join("config.log");
    let flag_log = root.base().join("flag.log");
    let cfg = write(
        &root.base().join("modus.toml"),
        &format!("listen = \"127.0.0.2:0\"\naccess-log = \"{}\"\n", cfg_log.display()),
    );
    let mut srv = Server::builder(BIN)
        .root(root.path())
        .args(["--config", &cfg, "--listen", "127.0.0.1:0", "--access-log", flag_log.to_str().unwrap()])
        .start();
    assert_eq!(srv.addr().ip().to_string(), "127.0.0.1", "{}", srv.first_line());
    get_ok(&srv, "/hello.txt");
    stop(&mut srv);
    assert_eq!(count_lines(&flag_log), 1);
    assert_eq!(count_lines(&cfg_log), 0, "the config's access-log was used");
}

#[test]
fn config_unknown_key_exits_2() {
    let root = Docroot::standard();
    let cfg = write(&root.base().join("modus.toml"), "listen = \"127.0.0.1:0\"\nno-such-key = 1\n");
    let out = run_modus(&["serve", root.path().to_str().unwrap(), "--config", &cfg]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("no-such-key"), "stderr should name the key:\n{}", out.stderr);
}

#[test]
fn config_syntax_error_exits_2() {
    let root = Docroot::standard();
    let cfg = write(&root.base().join("modus.toml"), "listen = \n");
    let out = run_modus(&["serve", root.path().to_str().unwrap(), "--config", &cfg]);
    assert_exit(&out, 2);
}

#[test]
fn missing_config_file_exits_2() {
    let root = Docroot::standard();
    let missing = root.base().join("missing.toml");
    let out = run_modus(&["serve", root.path().to_str().unwrap(), "--config", missing.to_str().unwrap()]);
    assert_exit(&out, 2);
}

#[test]
fn check_valid_config_exits_0() {
    let root = Docroot::standard();
    let cfg = write(
        &root.base().join("modus.toml"),
        "listen = \"127.0.0.1:0\"\nkeepalive-timeout = \"2s\"\nmax-body = \"2MiB\"\nbrowse = true\n",
    );
    let out = run_modus(&["serve", root.path().to_str().unwrap(), "--config", &cfg, "--check"]);
    assert_exit(&out, 0);
    assert!(!out.stdout.contains("listening on"), "--check must not serve:\n{}", out.stdout);
}

#[test]
fn check_invalid_config_exits_2() {
    let root = Docroot::standard();
    let cfg = write(&root.base().join("modus.toml"), "keepalive-timeout = \"soon\"\n");
    let out = run_modus(&["serve", root.path().to_str().unwrap(), "--config", &cfg, "--check"]);
    assert_exit(&out, 2);
    let cfg = write(&root.base().join("modus2.toml"), "bogus = true\n");
    let out = run_modus(&["serve", root.path().to_str().unwrap(), "--config", &cfg, "--check"]);
    assert_exit(&out, 2);
    let out = run_modus(&["serve", "--model", "nope", "--check"]);
    assert_exit(&out, 2);
}

#[test]
fn threads_flag() {
    let root = Docroot::standard();
    let srv = Server::start(BIN, "pool", root.path(), &["--threads", "1"]);
    let mut c = Client::connect(srv.addr());
    for _ in 0..3 {
        c.request("GET", "/hello.txt", &[]).assert_status(200);
    }
    drop(c);
    // With one thread, the next connection is served once the first closes.
    get_ok(&srv, "/alphabet.txt");
}

#[test]
fn error_log_to_file() {
    let root = Docroot::standard();
    let errlog = root.base().join("error.log");
    let mut srv = Server::start(BIN, "pool", root.path(), &["--error-log", errlog.to_str().unwrap()]);
    get_ok(&srv, "/hello.txt");
    stop(&mut srv);
    let text = std::fs::read_to_string(&errlog).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 2, "start and stop are logged:\n{text}");
    for line in &lines {
        // `[23/Nov/2026:18:05:46 +0000] [info] ...`: a timestamp, then a level.
        let stamp = line.strip_prefix('[').and_then(|l| l.split_once("] [")).map(|(t, _)| t);
        assert!(stamp.is_some_and(|t| t.len() == 26 && t.ends_with(" +0000")), "timestamped: {line:?}");
    }
    assert!(lines[0].contains("serving") && lines[0].contains("pool"), "{text}");
    assert!(text.contains("stopping"), "{text}");
}

/// With `--defer-accept` (on by default) the kernel holds a connection until
/// its first bytes; one that stays silent must still reach the server once
/// the wait is over, and be closed by the header timeout like any idle
/// connection — not left in the kernel for ever. `--defer-accept 0` serves too.
#[test]
fn defer_accept_still_ends_silent_connections() {
    use std::io::Read;
    let root = Docroot::standard();
    for (model, defer) in [("event", "1s"), ("pool", "1s"), ("event", "0")] {
        let srv = Server::start(
            BIN,
            model,
            root.path(),
            &["--defer-accept", defer, "--header-timeout", "1s", "--keepalive-timeout", "1s"],
        );
        let mut silent = std::net::TcpStream::connect(srv.addr()).unwrap();
        silent.set_read_timeout(Some(RUN_TIMEOUT)).unwrap();
        let mut buf = [0u8; 64];
        // Closed without a word (nginx does the same for idle connections);
        // a reset counts as closed too.
        let end = silent.read(&mut buf);
        assert!(
            matches!(end, Ok(0))
                || end.is_err()
                    && !matches!(
                        end.as_ref().unwrap_err().kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
            "{model} --defer-accept {defer}: {end:?}"
        );
        get_ok(&srv, "/hello.txt");
    }
}

#[test]
fn defer_accept_is_in_the_effective_config() {
    let out = run_modus(&["serve", "--print-config"]);
    assert_exit(&out, 0);
    assert!(out.stdout.contains("defer-accept = \"1s\""), "{}", out.stdout);
    let out = run_modus(&["serve", "--defer-accept", "0", "--print-config"]);
    assert_exit(&out, 0);
    assert!(out.stdout.contains("defer-accept = \"0s\""), "{}", out.stdout);
}

#[test]
fn demo_programs_run_from_the_modus_binary() {
    // What the demo site's /cgi-bin/spin runs: a CGI response on stdout.
    let out = run_modus(&["demo-cgi", "spin"]);
    assert_exit(&out, 0);
    assert!(out.stdout.starts_with("Content-Type: text/plain\r\n"), "{}", out.stdout);
    assert!(out.stdout.contains("spun 10 ms"), "{}", out.stdout);
    let out = run_modus(&["demo-cgi", "nope"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("spin, echo, env"), "{}", out.stderr);
    let out = run_modus(&["demo-cgi"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("want one program name: spin, echo, env"), "{}", out.stderr);
    // The other roles the server starts the binary in come before the CLI too.
    let out = run_modus(&["https-redirect"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("want the HTTPS port"), "{}", out.stderr);
    // Not offered to users: it is the server's business.
    assert!(!run_modus(&["--help"]).stdout.contains("demo-cgi"));
}

/// Addresses as people type them: a bare port stays on loopback, `:PORT`
/// is every interface, `--port` keeps --listen's host.
#[test]
fn listen_addresses_as_typed() {
    for listen in [&["--port", "0"][..], &["--listen", "0"], &["--listen", "127.0.0.1:0"]] {
        let srv = Server::builder(BIN)
            .model("pool")
            .no_defaults()
            .args(listen)
            .args(["--access-log", "off"])
            .start();
        assert_eq!(srv.addr().ip().to_string(), "127.0.0.1", "{listen:?}");
        assert_ne!(srv.addr().port(), 0, "{listen:?}");
        get_ok(&srv, "/");
    }
    let printed = |args: &[&str]| {
        let mut all = vec!["serve", "--print-config"];
        all.extend_from_slice(args);
        let out = run_modus(&all);
        assert_exit(&out, 0);
        out.stdout.lines().find(|l| l.starts_with("listen = ")).unwrap().to_string()
    };
    assert_eq!(printed(&[]), "listen = \"127.0.0.1:8080\"");
    assert_eq!(printed(&["--listen", "9000"]), "listen = \"127.0.0.1:9000\"");
    assert_eq!(printed(&["--listen", ":9000"]), "listen = \"0.0.0.0:9000\"");
    assert_eq!(printed(&["--port", "9000"]), "listen = \"127.0.0.1:9000\"");
    assert_eq!(printed(&["--listen", "[::1]:80", "--port", "9000"]), "listen = \"[::1]:9000\"");
    let out = run_modus(&["serve", "--listen", "localhost", "--check"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("want HOST:PORT"), "{}", out.stderr);
    // --port is the plain side: beside --tls-listen, the port that
    // redirects to HTTPS, never a move of the HTTPS listener.
    let tls = ["--port", "9000", "--tls-listen", "127.0.0.1:9443", "--tls-self-signed"];
    assert_eq!(printed(&tls), "listen = \"127.0.0.1:9000\"");
    let mut all = vec!["serve", "--print-config"];
    all.extend_from_slice(&tls);
    let out = run_modus(&all);
    assert!(out.stdout.contains("tls-listen = \"127.0.0.1:9443\""), "{}", out.stdout);
}

/// A port someone else holds: the error says so and how to get a free one.
#[test]
fn a_taken_port_is_explained() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run_modus(&["serve", "--listen", &addr]);
    assert_exit(&out, 1);
    assert!(out.stderr.contains(&format!("--listen: cannot listen on {addr}")), "{}", out.stderr);
    assert!(out.stderr.contains("hint: something is already listening"), "{}", out.stderr);
    assert!(out.stderr.contains("--listen 127.0.0.1:0 for a free one"), "{}", out.stderr);
}

/// Port 81 without the privilege: the error names the fixes. Needs root to
/// drop to `nobody` with setpriv (it is what an unprivileged user sees).
#[test]
fn a_privileged_port_without_privilege_suggests_the_fix() {
    if !rustix::process::geteuid().is_root()
        || run("setpriv", ["--version"], RUN_TIMEOUT).status.code() != Some(0)
    {
        eprintln!("skipped: needs root and setpriv to run the server as an unprivileged user");
        return;
    }
    let out = run(
        "setpriv",
        ["--reuid=65534", "--regid=65534", "--clear-groups", BIN, "serve", "--listen", "127.0.0.1:81"],
        RUN_TIMEOUT,
    );
    if out.stderr.contains("Permission denied") && !out.stderr.contains("cannot listen") {
        eprintln!("skipped: user nobody cannot run {BIN}: {}", out.stderr);
        return;
    }
    assert_exit(&out, 1);
    assert!(out.stderr.contains("hint: ports below 1024 need privileges"), "{}", out.stderr);
    assert!(out.stderr.contains("cap_net_bind_service"), "{}", out.stderr);
}

/// One way to write sizes and durations, in every command and the file.
#[test]
fn sizes_and_durations_parse_alike_everywhere() {
    let out = run_modus(&["serve", "--max-body", "10MiB", "--keepalive-timeout", "30", "--print-config"]);
    assert_exit(&out, 0);
    assert!(out.stdout.contains("max-body = \"10MiB\""), "{}", out.stdout);
    assert!(out.stdout.contains("keepalive-timeout = \"30s\""), "{}", out.stdout);
    // `direct` takes the same sizes: parsing gets past --max-body to the
    // (deliberately) bad --listen.
    let out = run_modus(&[
        "direct",
        "--max-body",
        "10MiB",
        "--queue-timeout",
        "30",
        "--backend",
        "127.0.0.1:9",
        "--listen",
        "nope",
    ]);
    assert_exit(&out, 2);
    assert!(!out.stderr.contains("max-body"), "{}", out.stderr);
    assert!(out.stderr.contains("--listen: invalid address \"nope\""), "{}", out.stderr);
    let out = run_modus(&["direct", "--max-body", "10 parsecs", "--backend", "127.0.0.1:9"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("try 4096, 512k, 64MiB, 1G"), "{}", out.stderr);
    // `load` reads bare seconds too (nothing listens on the port: exit 1, not a usage error).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = run_modus(&["load", &format!("http://{closed}/"), "-n", "1", "--timeout", "5"]);
    assert_exit(&out, 1);
}

#[test]
fn an_unknown_config_key_gets_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir.path().join("modus.toml"), "threads = 4\nmax_body = \"10MiB\"\n");
    let out = run_modus(&["serve", "--config", &file, "--check"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("unknown key `max_body` (line 2): use `max-body`"), "{}", out.stderr);
    let file = write(&dir.path().join("typo.toml"), "cahce-size = \"1G\"\n");
    let out = run_modus(&["serve", "--config", &file, "--check"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("did you mean `cache-size`?"), "{}", out.stderr);
}

#[test]
fn help_is_grouped_and_plain() {
    let serve = run_modus(&["serve", "--help"]).stdout;
    for heading in ["Network:", "Files:", "CGI:", "Limits and timeouts:", "Logging and metrics:", "Models:"] {
        assert!(serve.contains(&format!("\n{heading}\n")), "no {heading} in\n{serve}");
    }
    assert!(serve.contains("[default: 127.0.0.1:8080]"), "{serve}");
    assert!(serve.contains("[default: pool]"), "{serve}");
    assert!(serve.contains("[possible values: per-request, pool,"), "{serve}");
    for command in [
        &["--help"][..],
        &["serve", "--help"],
        &["direct", "--help"],
        &["monitor", "--help"],
        &["load", "--help"],
        &["workload", "--help"],
    ] {
        let help = run_modus(command).stdout.to_lowercase();
        for jargon in ["paper 0", "rsinfo", "tests point"] {
            assert!(!help.contains(jargon), "{command:?} --help says {jargon:?}:\n{help}");
        }
    }
}

/// Completions and the manual come from the same definitions as the flags.
#[test]
fn completions_and_manual_pages() {
    let bash = run_modus(&["completions", "bash"]);
    assert_exit(&bash, 0);
    assert!(bash.stdout.contains("_modus()") && bash.stdout.contains("--listen"), "{}", bash.stdout);
    for shell in ["zsh", "fish"] {
        let out = run_modus(&["completions", shell]);
        assert_exit(&out, 0);
        assert!(out.stdout.contains("serve"), "{shell}: {}", out.stdout);
    }
    assert_exit(&run_modus(&["completions", "tcsh"]), 2);
    let man = run_modus(&["manpage"]);
    assert_exit(&man, 0);
    assert!(man.stdout.contains(".TH modus 1") && man.stdout.contains("serve"), "{}", man.stdout);
    let dir = tempfile::tempdir().unwrap();
    let out = run_modus(&["manpage", "--out", dir.path().to_str().unwrap()]);
    assert_exit(&out, 0);
    let serve = std::fs::read_to_string(dir.path().join("modus-serve.1")).unwrap();
    assert!(serve.contains(".TH modus-serve 1") && serve.contains("listen"), "{serve}");
    assert!(!dir.path().join("modus-demo-cgi.1").exists(), "hidden commands have no page");
    assert!(serve.contains(".SH SIGNALS") && serve.contains("USR1") && serve.contains(".SH \"EXIT STATUS\""));
    let load = std::fs::read_to_string(dir.path().join("modus-load.1")).unwrap();
    assert!(load.contains(".SH \"EXIT STATUS\"") && !load.contains(".SH SIGNALS"), "{load}");
    // The demo programs' entry is no command to offer; values that name
    // no file complete to nothing, paths to file names.
    assert!(!bash.stdout.contains("demo-cgi"), "{}", bash.stdout);
    let case = |flag: &str| {
        let at = bash.stdout.find(&format!("                {flag})")).unwrap_or_else(|| panic!("{flag}"));
        bash.stdout[at..].lines().nth(1).unwrap().trim().to_string()
    };
    assert_eq!(case("--compress"), "COMPREPLY=(\"${cur}\")");
    assert_eq!(case("--keepalive-timeout"), "COMPREPLY=(\"${cur}\")");
    assert_eq!(case("--access-log"), "COMPREPLY=($(compgen -f \"${cur}\"))");
    // The programs still run as the server starts them.
    let echo = run_modus(&["demo-cgi", "nope"]);
    assert_exit(&echo, 2);
    assert!(echo.stderr.contains("no demo program \"nope\""), "{}", echo.stderr);
}

/// `--user`: once the port is bound the server (and a process model's
/// children) runs as that user, so a file only root may read gets 403.
/// Needs root.
#[test]
fn user_gives_up_root_once_the_port_is_bound() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to become another user");
        return;
    }
    let root = Docroot::standard();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.path().join("secret.txt"), "root only\n").unwrap();
    std::fs::set_permissions(root.path().join("secret.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let uid_of = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap().to_string();
        line.split_whitespace().skip(1).map(|n| n.parse::<u32>().unwrap()).collect::<Vec<_>>()
    };
    for model in ["pool", "prefork"] {
        let srv = Server::start(BIN, model, root.path(), &["--user", "nobody"]);
        assert_eq!(uid_of(srv.pid()), [65534; 4], "{model}: real, effective, saved, fs uid");
        let mut c = srv.client();
        let r = c.request("GET", "/hello.txt", &[]);
        r.assert_status(200);
        let r = srv.client().request("GET", "/secret.txt", &[]);
        r.assert_status(403);
        if model == "prefork" {
            // The answers came from children: they are nobody too.
            let children =
                std::fs::read_to_string(format!("/proc/{}/task/{}/children", srv.pid(), srv.pid()))
                    .unwrap_or_default();
            for child in children.split_whitespace() {
                // The keeper alone keeps root, by design (transport::keeper).
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                if cmdline.windows(17).any(|w| w == b"privileged-keeper") {
                    continue;
                }
                assert_eq!(uid_of(child.parse().unwrap())[1], 65534, "child {child}");
            }
        }
    }
    // Without --user, root is told what it risks.
    let srv = Server::start(BIN, "pool", root.path(), &[]);
    assert_eq!(srv.client().request("GET", "/secret.txt", &[]).status, 200);
    let log = srv.stderr_once_it_says("running as root");
    assert!(log.contains("running as root"), "{log}");
}

#[test]
fn user_names_that_do_not_exist_are_configuration_errors() {
    let out = run_modus(&["serve", "--user", "no-such-user-here", "--check"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("no user \"no-such-user-here\""), "{}", out.stderr);
    let out = run_modus(&["serve", "--user", "nobody:no-such-group", "--check"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("no group \"no-such-group\""), "{}", out.stderr);
}

/// Under systemd: a socket handed in by socket activation (descriptor 3,
/// `LISTEN_FDS`, `LISTEN_PID`) is served instead of binding `--listen`, and
/// the service manager is told `READY=1` once connections are taken,
/// `RELOADING=1` … `READY=1` around a reload (SIGHUP), and `STOPPING=1` when
/// the stop begins (`Type=notify`).
#[test]
fn a_socket_handed_in_by_systemd_is_served() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixDatagram;
    let root = Docroot::standard();
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The socket goes in as stdin; the shell moves it to 3 and, being the
    // process modus becomes (exec), names its own pid, as systemd does.
    let script = r#"exec 3<&0 0</dev/null; LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" serve "$1" --access-log off"#;
    let mut child = std::process::Command::new("sh")
        .args(["-c", script, BIN, root.path().to_str().unwrap()])
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(listener)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with(&format!("listening on {addr} ")), "the socket handed in: {first}");
    let mut buf = [0u8; 128];
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), format!("READY=1\nMAINPID={}", child.id()));
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    c.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 ") && response.ends_with("Hello, world!\n"), "{response}");
    // `systemctl reload` (HUP): the manager is told a reload runs, then that it is done.
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    let n = notify.recv(&mut buf).unwrap();
    let reloading = std::str::from_utf8(&buf[..n]).unwrap();
    let usec = reloading.strip_prefix("RELOADING=1\nMONOTONIC_USEC=").expect(reloading);
    assert!(usec.parse::<u64>().unwrap() > 0, "{reloading}");
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(child.wait().unwrap().success());
}

/// The systemd unit in contrib/ names only flags modus has, and its
/// ExecStart is a configuration modus accepts (paths and user aside).
#[test]
fn the_systemd_unit_names_flags_modus_has() {
    let unit = include_str!("../../../contrib/modus.service");
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("an ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(&words[..2], ["/usr/local/bin/modus", "serve"]);
    let help = run_modus(&["serve", "--help"]).stdout;
    for flag in words.iter().filter(|w| w.starts_with("--")) {
        assert!(help.contains(&format!("{flag} ")), "{flag} is not a modus serve flag");
    }
    assert!(unit.contains("Type=notify") && unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // The same flags with this machine's paths, checked without serving.
    let root = Docroot::standard();
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = words[1..].iter().map(|w| w.to_string()).collect();
    for arg in args.iter_mut() {
        *arg = match arg.as_str() {
            "/srv/www" => root.path().to_str().unwrap().to_string(),
            "www-data" => "nobody".to_string(),
            a if a.starts_with("/var/log/modus/") => dir.path().join(&a[15..]).to_str().unwrap().to_string(),
            a => a.to_string(),
        };
    }
    args.push("--check".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_modus(&args);
    if rustix::process::geteuid().is_root() {
        assert_exit(&out, 0);
    } else {
        assert!(out.stderr.contains("only root can become another user"), "{}", out.stderr);
    }
}

/// `--reuseport`: every loop of `event`, `amped` and `uring` accepts from a listener
/// of its own on the one port, and both loops get connections (the kernel
/// hashes 64 connections' addresses over the two: all on one would be a
/// 1 in 2^63 chance); a model without loops refuses the flag.
#[test]
fn reuseport_gives_every_loop_a_listener_of_its_own() {
    let root = Docroot::standard();
    for model in ["event", "amped"] {
        let srv = Server::start(
            BIN,
            model,
            root.path(),
            &["--workers", "2", "--reuseport", "--admin", "127.0.0.1:0"],
        );
        let port = srv.addr().port();
        // The loops open their listeners once the model runs, just after
        // the address is announced.
        let listeners = || {
            let out = std::process::Command::new("ss").args(["-Htln", &format!("sport = :{port}")]).output();
            out.map(|o| String::from_utf8_lossy(&o.stdout).lines().count()).unwrap_or(0)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while listeners() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(listeners(), 2, "{model}: listeners on port {port}");
        for _ in 0..64 {
            get_ok(&srv, "/hello.txt");
        }
        let admin = srv.announced("admin");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let served = loop {
            let (_, _, body) = testkit::get_once(admin, "/status.json");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let served: Vec<u64> = v["workers"]["scoreboard"]
                .as_array()
                .unwrap()
                .iter()
                // The loops, not amped's helpers.
                .filter(|w| {
                    w["name"].as_str().is_some_and(|n| n.starts_with("event-") || n.starts_with("uring-"))
                })
                .map(|w| w["served"].as_u64().unwrap())
                .collect();
            if served.iter().sum::<u64>() >= 64 || std::time::Instant::now() > deadline {
                break served;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(served.len(), 2, "{model}: {served:?}");
        assert!(served.iter().all(|&n| n > 0), "{model}: a loop served nothing: {served:?}");
    }
    let out = run_modus(&["serve", "--listen", "127.0.0.1:0", "--model", "pool", "--reuseport", "--check"]);
    assert_exit(&out, 2);
    assert!(
        out.stderr.contains("--reuseport") && out.stderr.contains("event, amped and uring"),
        "{}",
        out.stderr
    );
}

/// Output to a reader that went away ends the command quietly — killed by
/// SIGPIPE as `cat` is (or exit 0 when it was all written first), never a
/// panic (exit 101) — for every command that prints: `serve --check`,
/// `models`, `completions`, `manpage`, `workload` and `lab list`.
#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let commands: &[&[&str]] =
        &[&["serve", "--check"], &["models"], &["completions", "bash"], &["manpage"], &["lab", "list"]];
    for args in commands {
        let mut child =
            Command::new(BIN).args(*args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // The reader leaves before the first byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let quiet =
            out.status.success() || out.status.signal() == Some(rustix::process::Signal::PIPE.as_raw());
        assert!(quiet, "modus {args:?}: {:?}, stderr {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "modus {args:?}: {stderr}");
    }
}

/// `--check` does what a start does before serving: an address another
/// process holds, an error page that names no file and a count of zero
/// workers are refused (exit 2), each naming the flag.
#[test]
fn check_refuses_what_a_start_would() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let out = run_modus(&["serve", "--check", "--listen", &addr]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("--listen") && out.stderr.contains(&addr), "{}", out.stderr);
    drop(held);
    let out = run_modus(&["serve", "--check", "--listen", &addr]);
    assert_exit(&out, 0);
    assert_eq!(out.stdout.trim(), "configuration ok");

    let root = Docroot::standard();
    let root_arg = root.path().to_str().unwrap();
    let out = run_modus(&[
        "serve",
        root_arg,
        "--check",
        "--listen",
        "127.0.0.1:0",
        "--error-page",
        "404=/nope.html",
    ]);
    assert_exit(&out, 2);
    assert!(
        out.stderr.contains("--error-page 404=/nope.html") && out.stderr.contains("is not a file"),
        "{}",
        out.stderr
    );
    root.file("nope.html", "gone");
    let out = run_modus(&[
        "serve",
        root_arg,
        "--check",
        "--listen",
        "127.0.0.1:0",
        "--error-page",
        "404=/nope.html",
    ]);
    assert_exit(&out, 0);

    for flag in ["--threads", "--workers", "--processes", "--max-clients", "--max-connections"] {
        let out = run_modus(&["serve", "--check", "--listen", "127.0.0.1:0", flag, "0"]);
        assert_exit(&out, 2);
        assert!(out.stderr.contains(&format!("{flag} 0")), "{flag}: {}", out.stderr);
    }
}

/// contrib/'s units pass `systemd-analyze verify` once modus and its
/// manual pages are installed as README says (here: the unit pointed at
/// this build, the pages in a temporary MANPATH).
#[test]
fn the_systemd_units_verify() {
    let have = |program: &str, arg: &str| {
        std::process::Command::new(program).arg(arg).output().is_ok_and(|o| o.status.success())
    };
    if !have("systemd-analyze", "--version") || !have("man", "--version") {
        eprintln!("skipped: needs systemd-analyze and man");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man/man1");
    assert_exit(&run_modus(&["manpage", "--out", man1.to_str().unwrap()]), 0);
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib");
    let mut units = Vec::new();
    for unit in ["modus.service", "modus.socket"] {
        let text = std::fs::read_to_string(contrib.join(unit)).unwrap();
        assert!(unit != "modus.service" || text.contains("ExecStart=/usr/local/bin/modus serve"));
        let path = dir.path().join(unit);
        std::fs::write(&path, text.replace("/usr/local/bin/modus", BIN)).unwrap();
        units.push(path);
    }
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .env("MANPATH", dir.path().join("man"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

/// A list key of the config file may be one string, as a repeated flag
/// may be given once; anything else says what it wants.
#[test]
fn config_list_keys_take_one_string() {
    let root = Docroot::standard();
    root.file("errors/404.html", "not here");
    let dir = root.path().to_str().unwrap();
    let one = write(
        &root.base().join("one.toml"),
        "error-page = \"404=/errors/404.html\"\ncache-control = \"*.css=max-age=60\"\n",
    );
    let out = run_modus(&["serve", dir, "--config", &one, "--print-config"]);
    assert_exit(&out, 0);
    assert!(out.stdout.contains("error-page = [\"404=/errors/404.html\"]"), "{}", out.stdout);
    assert!(out.stdout.contains("cache-control = [\"*.css=max-age=60\"]"), "{}", out.stdout);
    let many = write(&root.base().join("many.toml"), "error-page = [\"404=/errors/404.html\"]\n");
    assert_exit(&run_modus(&["serve", dir, "--config", &many, "--print-config"]), 0);
    let wrong = write(&root.base().join("wrong.toml"), "error-page = 404\n");
    let out = run_modus(&["serve", dir, "--config", &wrong, "--check"]);
    assert_exit(&out, 2);
    assert!(out.stderr.contains("a string or a list of strings"), "{}", out.stderr);
}

/// Two sockets handed in (two `ListenStream=` lines, IPv4 and IPv6): modus
/// serves one listener, so it refuses at start naming both (exit 2), rather
/// than leave connections to the second accepted and never answered.
#[test]
fn two_sockets_handed_in_are_refused_by_name() {
    let root = Docroot::standard();
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (addr_a, addr_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    // The first socket is stdin and the second stdout; the shell moves
    // them to 3 and 4 and, being the process modus becomes, names its pid.
    let script = r#"exec 3<&0 4>&1 0</dev/null 1>/dev/null; LISTEN_PID=$$ LISTEN_FDS=2 exec "$0" serve "$1" --access-log off"#;
    let out = std::process::Command::new("sh")
        .args(["-c", script, BIN, root.path().to_str().unwrap()])
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(a)))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(b)))
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("2 sockets were passed ({addr_a}, {addr_b})")), "{stderr}");
}

/// `--user` with root-owned logs and certificates (what
/// contrib/modus.service sets up): after a logrotate-style rename, USR1
/// opens a new log, and after a certificate renewal (key mode 600) HUP
/// serves the new one — in every model, through the keeper that kept root.
/// Root only (skipped elsewhere).
#[test]
fn logrotate_and_renewal_under_user_in_every_model() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: --user needs root");
        return;
    }
    let have_openssl =
        std::process::Command::new("openssl").arg("version").output().is_ok_and(|o| o.status.success());
    let fingerprint = |addr: std::net::SocketAddr| -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl s_client -connect {addr} -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
            ))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let make_cert = |dir: &Path| -> String {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        for (name, pem) in [("site.crt", made.cert.pem()), ("site.key", made.signing_key.serialize_pem())] {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        made.cert.pem()
    };
    for model in models::names() {
        let root = Docroot::standard();
        std::fs::set_permissions(root.base(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let private = tempfile::tempdir().unwrap();
        let (logs, certs) = (private.path().join("logs"), private.path().join("certs"));
        for dir in [&logs, &certs] {
            std::fs::create_dir(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        make_cert(&certs);
        let access = logs.join("access.log");
        let srv = Server::builder(BIN)
            .root(root.path())
            .model(model)
            .args(["--user", "nobody", "--access-log", access.to_str().unwrap()])
            .args(["--error-log", logs.join("error.log").to_str().unwrap()])
            .args(["--tls-listen", "127.0.0.1:0"])
            .args(["--tls-cert", certs.join("site.crt").to_str().unwrap()])
            .args(["--tls-key", certs.join("site.key").to_str().unwrap()])
            .start();
        get_ok(&srv, "/hello.txt");
        // logrotate: the file moves away, USR1 asks for a new one.
        std::fs::rename(&access, logs.join("access.log.1")).unwrap();
        srv.signal(Signal::Usr1);
        let reopened = (0..200).any(|_| {
            get_ok(&srv, "/hello.txt");
            std::thread::sleep(Duration::from_millis(50));
            std::fs::read_to_string(&access).is_ok_and(|log| log.contains("GET /hello.txt"))
        });
        let errors = std::fs::read_to_string(logs.join("error.log")).unwrap_or_default();
        assert!(reopened, "{model}: no new access log after USR1:\n{errors}");
        if have_openssl {
            let before = fingerprint(srv.addr());
            make_cert(&certs);
            srv.signal(Signal::Hup);
            let renewed = (0..200).any(|_| {
                std::thread::sleep(Duration::from_millis(50));
                let now = fingerprint(srv.addr());
                !now.is_empty() && now != before
            });
            let errors = std::fs::read_to_string(logs.join("error.log")).unwrap_or_default();
            assert!(renewed, "{model}: the renewed certificate is not served after HUP:\n{errors}");
        }
        let errors = std::fs::read_to_string(logs.join("error.log")).unwrap_or_default();
        assert!(!errors.contains("Permission denied"), "{model}:\n{errors}");
    }
}
