//! Executables written by a test process that also starts programs.
//!
//! A program started while a thread has a file open for writing inherits
//! that descriptor until its `exec` (close-on-exec closes it only then).
//! For that moment the file has a writer, and running it — a CGI script a
//! server is about to start — fails with `ETXTBSY` ("Text file busy": the
//! server answers 500). On a busy machine that moment is long enough to be
//! hit (a conformance run on a saturated machine did). So executables are
//! written, and programs started, under one lock: while a file is open for
//! writing no program is being started, and `Command::spawn` returns only
//! once the child has run `exec`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard};

static STARTING: RwLock<()> = RwLock::new(());

/// Held while a child process is started (shared: starts do not exclude
/// each other). Take it around any `Command::spawn` (or `output`, `status`)
/// in a test process that writes executables.
pub fn starting_a_program() -> RwLockReadGuard<'static, ()> {
    STARTING.read().unwrap_or_else(|e| e.into_inner())
}

/// Writes `text` to `path` with permissions `mode`, with no program being
/// started meanwhile (see the module's notes).
#[track_caller]
pub fn write_executable(path: &Path, text: &str, mode: u32) {
    let _alone = STARTING.write().unwrap_or_else(|e| e.into_inner());
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}
