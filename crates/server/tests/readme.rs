//! README's "Two commands", as a newcomer types them. The serve command
//! runs exactly as README writes it, through a shell, in a copy of the
//! repository that holds only what a clone would (no `target/`), and the
//! demo site it serves must answer `/` and `/cgi-bin/spin?ms=1`. The test
//! command is what `.ci/run` runs, read from README the same way, so it
//! cannot drift from what CI proves.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use testkit::Client;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The commands of README's "Two commands" block, comments stripped.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(WORKSPACE).join("README.md")).unwrap();
    let section = readme.split("\n## Two commands").nth(1).expect("README has a \"## Two commands\" section");
    let block = section.split("```sh\n").nth(1).expect("a ```sh block in \"Two commands\"");
    let block = &block[..block.find("```").expect("the block ends")];
    block
        .lines()
        .map(|line| line.split(" #").next().unwrap().trim().to_string())
        .filter(|line| !line.is_empty())
        .collect()
}

#[test]
fn readme_shows_one_serve_and_one_test_command() {
    let commands = readme_commands();
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert!(commands[0].starts_with("cargo run") && commands[0].contains(" serve"), "{commands:?}");
    assert!(commands[1].starts_with("cargo test"), "{commands:?}");
    let ci = std::fs::read_to_string(Path::new(WORKSPACE).join(".ci/run")).unwrap();
    assert!(ci.contains("## Two commands"), ".ci/run must take its test command from README");
}

/// Kills the command's whole process group (the shell, cargo and the
/// server it started) however the test ends.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
        }
        let _ = self.0.wait();
    }
}

#[test]
fn readme_serve_command_serves_the_demo_from_a_clean_copy() {
    let Some(files) = tracked_files() else {
        eprintln!(
            "skipped: {WORKSPACE} is not a git checkout (git ls-files failed), so no clean copy can be made"
        );
        return;
    };
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let copy = tmp.join("readme-clone");
    let _ = std::fs::remove_dir_all(&copy);
    for file in &files {
        let (from, to) = (Path::new(WORKSPACE).join(file), copy.join(file));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        match std::fs::copy(&from, &to) {
            Ok(_) => {}
            // Deleted in the work tree but not yet in the index: a clone would not have it either.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("copying {}: {e}", from.display()),
        }
    }
    assert!(!copy.join("target").exists());

    let serve = readme_commands().remove(0);
    let mut command = Command::new("bash");
    command.arg("-c").arg(&serve).current_dir(&copy);
    // The environment of a newcomer's shell, not of this test run: cargo
    // sets CARGO_* variables for tests that would steer the inner cargo.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_") && name != "CARGO_HOME" {
            command.env_remove(&*name);
        }
    }
    command.env_remove("MODUS_LISTEN");
    // Kept across runs, so only the workspace's own crates are rebuilt.
    command.env("CARGO_TARGET_DIR", tmp.join("readme-clone-target"));
    if std::net::TcpListener::bind("127.0.0.1:8080").is_err() {
        // The command stays as written; only its default address moves.
        eprintln!("127.0.0.1:8080 is taken on this machine: MODUS_LISTEN=127.0.0.1:0 for this run");
        command.env("MODUS_LISTEN", "127.0.0.1:0");
    }
    let build_log = tmp.join("readme-clone-build.log");
    let mut child = command
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&build_log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let group = Group(child);

    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // A release build from nothing, on a slow machine.
    let first = lines.recv_timeout(Duration::from_secs(1800)).unwrap_or_else(|_| {
        panic!(
            "`{serve}` printed no address; its output:\n{}",
            std::fs::read_to_string(&build_log).unwrap_or_default()
        )
    });
    let addr = first
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("first line of `{serve}`: {first:?}"));

    let index = Client::connect(addr).request("GET", "/", &[]);
    index.assert_status(200);
    assert!(index.body_str().contains("<html"), "{}", index.describe());
    let spin = Client::connect(addr).request("GET", "/cgi-bin/spin?ms=1", &[]);
    spin.assert_status(200);
    assert!(spin.body_str().starts_with("spun 1 ms"), "{}", spin.describe());
    drop(group);
}

/// The files a clone of this checkout would hold (committed or staged,
/// plus new files not ignored), relative to the workspace.
fn tracked_files() -> Option<Vec<PathBuf>> {
    let out = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(WORKSPACE)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let files: Vec<PathBuf> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
        .collect();
    (!files.is_empty()).then_some(files)
}
