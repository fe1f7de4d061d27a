//! The demo site's CGI programs inside the `modus` binary, busybox-style:
//! `modus serve` with no ROOT maps `/cgi-bin/NAME` to `modus demo-cgi NAME`,
//! so the one binary `cargo run` builds serves the whole demo. The same
//! sources also build the lean `cgi-spin`, `cgi-echo` and `cgi-env`
//! executables, which experiments copy into a CGI directory (a 5 MB binary
//! starts about 0.4 ms sooner than this 25 MB one, which matters when the
//! spawn is what is measured).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[path = "../cgi/echo.rs"]
mod echo;
#[path = "../cgi/env.rs"]
mod env;
#[path = "../cgi/spin.rs"]
mod spin;

/// The first argument that runs one of them (`modus demo-cgi NAME`).
pub const SUBCOMMAND: &str = "demo-cgi";

/// Their URL names, which are also their names on `modus demo-cgi`.
pub const NAMES: [&str; 3] = ["spin", "echo", "env"];

/// `modus demo-cgi NAME`; `args` are those after [`SUBCOMMAND`].
pub fn run(args: &[OsString]) -> ExitCode {
    let [name] = args else {
        eprintln!("modus {SUBCOMMAND}: want one program name: {}", NAMES.join(", "));
        return ExitCode::from(2);
    };
    let name = name.to_string_lossy();
    match &*name {
        "spin" => spin::main(),
        "env" => env::main(),
        "echo" => {
            if echo::main().is_err() {
                // The client went away or the server closed the pipe: nothing to tell anyone.
                return ExitCode::FAILURE;
            }
        }
        _ => {
            eprintln!("modus: no demo program {name:?}; they are: {}", NAMES.join(", "));
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

/// This binary's path, to run it again (a demo program, the keeper).
/// Rebuilt while it runs (`cargo build` replaces the file): the new binary
/// at the same path has the same programs.
pub fn this_binary() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(match exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
        Some(path) => PathBuf::from(path),
        None => exe,
    })
}

/// The demo site's `/cgi-bin/{spin,echo,env}`, run by the binary that is
/// serving. `None` if that binary cannot be named (`/proc` not mounted).
pub fn scripts() -> Option<pipeline::Scripts> {
    let exe = this_binary().ok()?;
    let programs = NAMES
        .iter()
        .map(|name| pipeline::Program {
            name: name.to_string(),
            command: exe.clone(),
            args: vec![OsString::from(SUBCOMMAND), OsString::from(name)],
        })
        .collect();
    Some(pipeline::Scripts::Programs(programs))
}
