//! Spawning the server binary as a child process.

use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Client;

/// How long the server may take to print its first line. Generous: a debug
/// build on a busy 2-core machine running many tests in parallel.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Signals a test can send to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: graceful stop.
    Term,
    /// SIGINT: graceful stop.
    Int,
    /// SIGUSR1: reopen the access log.
    Usr1,
    /// SIGHUP: a terminal closing, or an operator's reload.
    Hup,
    /// SIGQUIT: graceful stop (as nginx).
    Quit,
    /// SIGUSR2.
    Usr2,
    /// SIGKILL.
    Kill,
}

impl Signal {
    fn to_rustix(self) -> rustix::process::Signal {
        use rustix::process::Signal as S;
        match self {
            Signal::Term => S::TERM,
            Signal::Int => S::INT,
            Signal::Usr1 => S::USR1,
            Signal::Hup => S::HUP,
            Signal::Quit => S::QUIT,
            Signal::Usr2 => S::USR2,
            Signal::Kill => S::KILL,
        }
    }
}

/// Builds the command line for a [`Server`].
///
/// The command is `BIN serve [ROOT] [--model M] [defaults] [args]`, where
/// the defaults are `--listen 127.0.0.1:0` and `--access-log off`, each
/// added only if `args` does not already contain that flag (so a test can
/// override them), and neither added after [`ServerBuilder::no_defaults`].
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    bin: PathBuf,
    subcommand: String,
    model: Option<String>,
    root: Option<PathBuf>,
    args: Vec<OsString>,
    defaults: bool,
    env: Vec<(OsString, OsString)>,
}

impl ServerBuilder {
    /// Run this subcommand instead of `serve` (e.g. `direct`); combine with
    /// [`no_defaults`](Self::no_defaults) for subcommands without
    /// `--access-log`. The first stdout line must still be `listening on ADDR ...`.
    pub fn subcommand(mut self, name: &str) -> Self {
        self.subcommand = name.to_string();
        self
    }

    /// Serve this directory (the positional `ROOT`). Without it, the server
    /// serves its embedded demo site.
    pub fn root(mut self, root: impl AsRef<Path>) -> Self {
        self.root = Some(root.as_ref().to_path_buf());
        self
    }

    /// Pass `--model NAME`.
    ///
    /// The name may be followed by flags the model runs with, separated by
    /// spaces (`"event --schedule srpt"`): how the conformance suite runs
    /// one model under several settings.
    pub fn model(mut self, model: &str) -> Self {
        let mut words = model.split_whitespace();
        self.model = words.next().map(str::to_string);
        self.args.extend(words.map(OsString::from));
        self
    }

    /// Append one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Append arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets an environment variable of the server process.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Do not add `--listen 127.0.0.1:0` and `--access-log off` (e.g. when
    /// a `--config` file provides them).
    pub fn no_defaults(mut self) -> Self {
        self.defaults = false;
        self
    }

    /// The full argument list, after `BIN`.
    pub fn command_args(&self) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![self.subcommand.clone().into()];
        if let Some(root) = &self.root {
            v.push(root.clone().into_os_string());
        }
        if let Some(m) = &self.model {
            v.push("--model".into());
            v.push(m.into());
        }
        if self.defaults {
            // A server asked for HTTPS listens with it, in --listen's place.
            let https = self.has_flag("--tls-self-signed") || self.has_flag("--tls-cert");
            let listen = if https { "--tls-listen" } else { "--listen" };
            for (flag, value) in [(listen, "127.0.0.1:0"), ("--access-log", "off")] {
                if !self.has_flag(flag) {
                    v.push(flag.into());
                    v.push(value.into());
                }
            }
        }
        v.extend(self.args.iter().cloned());
        v
    }

    fn has_flag(&self, flag: &str) -> bool {
        self.args.iter().any(|a| {
            let a = a.to_string_lossy();
            a == flag || a.starts_with(&format!("{flag}="))
        })
    }

    /// Spawn the server and wait for its `listening on ADDR ...` line.
    ///
    /// Panics (with the server's stderr) if it exits or stays silent for
    /// too long, or if the first line is not in the expected form.
    pub fn start(self) -> Server {
        let args = self.command_args();
        let cmdline = format!("{} {:?}", self.bin.display(), args);
        let starting = crate::starting_a_program();
        let mut child = Command::new(&self.bin)
            .args(&args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // Its own process group, so drop can kill worker processes of
            // multi-process models too, even if the master dies first.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {cmdline}: {e}"));
        drop(starting);
        let pid = child.id();

        let stderr_buf = Arc::new(Mutex::new(String::new()));
        let stdout_lines = Arc::new(Mutex::new(Vec::new()));

        let stderr = child.stderr.take().expect("piped stderr");
        let buf = Arc::clone(&stderr_buf);
        let stderr_thread = std::thread::spawn(move || {
            for line in lossy_lines(stderr) {
                eprintln!("[modus {pid} stderr] {line}");
                let mut b = buf.lock().unwrap();
                b.push_str(&line);
                b.push('\n');
            }
        });

        let (first_tx, first_rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::clone(&stdout_lines);
        let stdout_thread = std::thread::spawn(move || {
            let mut first_tx = Some(first_tx);
            for line in lossy_lines(stdout) {
                if let Some(tx) = first_tx.take() {
                    let _ = tx.send(line);
                    continue;
                }
                println!("[modus {pid} stdout] {line}");
                lines.lock().unwrap().push(line);
            }
        });

        let mut server = Server {
            child,
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            first_line: String::new(),
            stdout_lines,
            stderr_buf,
            threads: vec![stdout_thread, stderr_thread],
            exit: None,
        };
        let first = match first_rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(line) => line,
            Err(e) => {
                let status = server.kill_and_collect();
                panic!(
                    "server did not print its first line ({e:?}; exit: {status:?})\n\
                     command: {cmdline}\nstderr:\n{}",
                    server.stderr()
                );
            }
        };
        match parse_first_line(&first) {
            Some(addr) => {
                server.addr = addr;
                // Ports are reused within a test process: what this server
                // speaks replaces what an earlier one on the port spoke.
                crate::tls::set_https(addr, first.split_whitespace().any(|w| w == "https"), server.pid);
            }
            None => {
                server.kill_and_collect();
                panic!(
                    "unexpected first stdout line {first:?} (want `listening on \
                     127.0.0.1:PORT model=M pid=PID`)\ncommand: {cmdline}\nstderr:\n{}",
                    server.stderr()
                );
            }
        }
        server.first_line = first;
        server
    }
}

/// Parses `listening on ADDR ...` into ADDR.
fn parse_first_line(line: &str) -> Option<SocketAddr> {
    let rest = line.strip_prefix("listening on ")?;
    rest.split(' ').next()?.parse().ok()
}

/// Lines of a pipe, lossily decoded, without line terminators.
fn lossy_lines(r: impl Read) -> impl Iterator<Item = String> {
    BufReader::new(r).split(b'\n').map_while(Result::ok).map(|mut l| {
        if l.last() == Some(&b'\r') {
            l.pop();
        }
        String::from_utf8_lossy(&l).into_owned()
    })
}

/// A running server child process; it and its process group are killed
/// (SIGKILL) on drop.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    first_line: String,
    stdout_lines: Arc<Mutex<Vec<String>>>,
    stderr_buf: Arc<Mutex<String>>,
    threads: Vec<JoinHandle<()>>,
    exit: Option<ExitStatus>,
}

impl Server {
    /// A builder for the binary at `bin` (integration tests pass
    /// `env!("CARGO_BIN_EXE_modus")`).
    pub fn builder(bin: impl AsRef<Path>) -> ServerBuilder {
        ServerBuilder {
            bin: bin.as_ref().to_path_buf(),
            subcommand: "serve".into(),
            model: None,
            root: None,
            args: Vec::new(),
            defaults: true,
            env: Vec::new(),
        }
    }

    /// `modus serve ROOT --model MODEL --listen 127.0.0.1:0 --access-log off
    /// EXTRA...` (the two defaults only if `extra_args` doesn't set them).
    pub fn start(bin: impl AsRef<Path>, model: &str, root: &Path, extra_args: &[&str]) -> Server {
        Server::builder(bin).model(model).root(root).args(extra_args).start()
    }

    /// The address the server listens on (from its first stdout line).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The first stdout line, verbatim.
    pub fn first_line(&self) -> &str {
        &self.first_line
    }

    /// The address the first line announces as `KEY=ADDR` (e.g. `admin`,
    /// `monitor`). Panics if there is none.
    #[track_caller]
    pub fn announced(&self, key: &str) -> SocketAddr {
        let prefix = format!("{key}=");
        let word = self.first_line.split_whitespace().find_map(|w| w.strip_prefix(prefix.as_str()));
        word.unwrap_or_else(|| panic!("{key}= in the first line: {:?}", self.first_line))
            .parse()
            .unwrap_or_else(|e| panic!("{key}= address in {:?}: {e}", self.first_line))
    }

    /// Whether the server speaks HTTPS (its first line says so).
    pub fn is_https(&self) -> bool {
        crate::tls::is_https(self.addr)
    }

    /// `http://ADDR/PATH`, or `https://` for a server that speaks HTTPS.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.is_https() { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// A new raw client connected to the server.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Sends a signal to the server process.
    pub fn signal(&self, sig: Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid as i32).expect("pid > 0");
        rustix::process::kill_process(pid, sig.to_rustix())
            .unwrap_or_else(|e| panic!("kill({}, {sig:?}): {e}", self.pid));
    }

    /// Waits for the process to exit, up to `timeout`; panics (after
    /// killing it) if it is still running then. Also waits until its
    /// output has been forwarded, so [`Server::stderr`] and
    /// [`Server::stdout_lines`] are complete afterwards.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(s) = self.exit {
            return s;
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.peek_exit() {
                Ok(Some(status)) => {
                    self.join_output();
                    return status;
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    self.kill_and_collect();
                    panic!(
                        "server pid {} did not exit within {timeout:?}; killed it\nstderr:\n{}",
                        self.pid,
                        self.stderr()
                    );
                }
                Err(e) => panic!("waitpid({}): {e}", self.pid),
            }
        }
    }

    /// Whether the process has exited (without blocking).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.peek_exit(), Ok(Some(_)))
    }

    /// The exit status once the process has exited, without reaping it:
    /// its zombie keeps its process id — the id of its process group too —
    /// from being given to another process until drop has signalled the
    /// group and reaped it. Reaped at once, the id could be reused (this
    /// machine's pid_max is 32,768, a busy test run goes through it in
    /// minutes) and drop's SIGKILL to the group would hit the newcomer:
    /// another test's server, or a CGI script's group, whose response
    /// would then end early.
    fn peek_exit(&mut self) -> io::Result<Option<ExitStatus>> {
        use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
        use std::os::unix::process::ExitStatusExt;
        if self.exit.is_some() {
            return Ok(self.exit);
        }
        let Some(pid) = Pid::from_raw(self.pid as i32) else { return Ok(None) };
        let peek = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        let Some(status) = waitid(WaitId::Pid(pid), peek)? else { return Ok(None) };
        // The raw wait status std decodes: the code in the second byte, or the signal.
        let raw = match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => (code & 0xff) << 8,
            (None, Some(signal)) => signal & 0x7f,
            (None, None) => return Ok(None),
        };
        self.exit = Some(ExitStatus::from_raw(raw));
        Ok(self.exit)
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr_buf.lock().unwrap().clone()
    }

    /// stderr once it holds `needle`, or as it is after 10 s: a line the
    /// server wrote before its response may still be on its way through
    /// the pipe and the reader thread when the response is read.
    pub fn stderr_once_it_says(&self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.stderr();
            if text.contains(needle) || std::time::Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The stdout lines after the first one, so far (access-log lines when
    /// the access log is `-`).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout_lines.lock().unwrap().clone()
    }

    fn kill_and_collect(&mut self) -> Option<ExitStatus> {
        self.kill_group();
        if self.exit.is_none() {
            let _ = self.child.kill();
        }
        // Reaps it (a zombie `peek_exit` left, or the process just killed).
        let reaped = self.child.wait().ok();
        self.exit = self.exit.or(reaped);
        self.join_output();
        self.exit
    }

    /// SIGKILL to the child's whole process group (it is the group leader),
    /// catching worker processes a multi-process model may have forked.
    fn kill_group(&self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }

    /// Waits (bounded: a grandchild could hold the pipes open) for the
    /// output-forwarding threads to drain the pipes.
    fn join_output(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for t in self.threads.drain(..) {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Before the port is freed: a plain server may be given it next.
        crate::tls::forget(self.addr, self.pid);
        // Also after a clean exit of the master: no worker may outlive the
        // test.
        self.kill_group();
        if self.exit.is_none() {
            let _ = self.child.kill();
        }
        // Only now, after the group's signal: see `peek_exit`.
        let _ = self.child.wait();
        // The output threads end by themselves once the pipes close; don't
        // join them here, a panicking test should not wait on anything.
    }
}

/// The result of [`run`].
#[derive(Debug)]
pub struct Output {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
}

/// Runs `bin args...` to completion (stdin is /dev/null), killing it and
/// panicking if it runs longer than `timeout`.
pub fn run<I, S>(bin: impl AsRef<Path>, args: I, timeout: Duration) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
    let starting = crate::starting_a_program();
    let mut child = Command::new(bin.as_ref())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", bin.as_ref().display()));
    drop(starting);
    let read_all = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let out = read_all(Box::new(child.stdout.take().unwrap()));
    let err = read_all(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().expect("waitpid") {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} {args:?} did not exit within {timeout:?}; stderr:\n{}",
                bin.as_ref().display(),
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that exited is not reaped before drop: its process id,
    /// which names its process group, stays its own until drop has sent
    /// the group SIGKILL, so that signal cannot reach a process that was
    /// given the id since.
    #[test]
    fn an_exited_server_keeps_its_id_until_drop() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("fake-server");
        crate::write_executable(
            &bin,
            "#!/bin/sh\necho \"listening on 127.0.0.254:9 model=fake pid=$$\"\n",
            0o755,
        );
        let mut srv = Server::builder(&bin).start();
        assert!(srv.wait_exit(Duration::from_secs(10)).success());
        assert!(srv.has_exited());
        let stat = format!("/proc/{}/stat", srv.pid());
        let state = std::fs::read_to_string(&stat).expect("the exited server's id is still its own");
        assert!(state.contains(") Z "), "a zombie until drop: {state}");
        drop(srv);
        assert!(std::fs::read_to_string(&stat).is_err(), "reaped at drop");
    }

    /// A model given with flags runs with them (the conformance suite's
    /// `"event --schedule srpt"`).
    #[test]
    fn a_model_may_carry_its_flags() {
        let args = Server::builder("modus").model("event --schedule srpt").arg("--x").command_args();
        let words: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        let at = |w: &str| words.iter().position(|x| *x == w).unwrap_or_else(|| panic!("{w} in {words:?}"));
        assert_eq!(words[at("--model") + 1], "event");
        assert_eq!(words[at("--schedule") + 1], "srpt");
        assert!(words.contains(&"--x"));
    }
}
