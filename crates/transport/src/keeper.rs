//! The keeper: what `--user` leaves root for. nginx keeps a root master
//! that reopens the logs and reads the certificates for its unprivileged
//! workers; modus, whose thread and loop models are one process, starts a
//! small process of its own before giving root up — the same binary, run
//! as [`ARG`] — which keeps root and does two things when asked: open a
//! log file for appending and hand the descriptor back, and read a
//! certificate or key file and hand its bytes back. Only for the files it
//! was started with: a request names one by its place in that list, so a
//! server taken over can ask for nothing else. It ends when every process
//! that could ask has ended (its socket's end of file).
//!
//! Each request carries its own reply socket (passed with it), so the
//! children of a process model, which share the request socket, never read
//! one another's answers; a request is one `SOCK_SEQPACKET` record, so
//! requests from several processes never interleave.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// The first argument that runs the keeper (`modus privileged-keeper PATH…`).
pub const ARG: &str = "privileged-keeper";

const OPEN_APPEND: u8 = 1;
const READ: u8 = 2;
/// Certificate and key files are small; a larger one is refused.
const READ_MAX: u64 = 1 << 20;

/// The keeper of this process, once [`start`]ed.
static KEEPER: OnceLock<Keeper> = OnceLock::new();

struct Keeper {
    requests: OwnedFd,
    paths: Vec<PathBuf>,
}

/// Starts the keeper (`program`, this binary) for `paths`, while this
/// process is still root: call it just before giving root up. Files not
/// among `paths` are opened as before, with the rights the process has.
pub fn start(program: &Path, paths: Vec<PathBuf>) -> io::Result<()> {
    let (ours, theirs) =
        rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
    // Not waited for: it outlives nothing it serves, and a process model's
    // master reaps children it does not know without a word.
    Command::new(program)
        .arg(ARG)
        .args(&paths)
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    KEEPER
        .set(Keeper { requests: ours, paths })
        .map_err(|_| io::Error::other("the keeper was started already"))
}

/// `path` opened for appending by the keeper, if it keeps `path`.
pub fn open_append(path: &Path) -> Option<io::Result<File>> {
    let reply = ask(path, OPEN_APPEND)?;
    Some(reply.and_then(|mut reply| {
        status(&mut reply)?;
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let iov = &mut [IoSliceMut::new(&mut byte)];
        rustix::net::recvmsg(&reply, iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
        let fd = control.drain().find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        });
        fd.map(File::from).ok_or_else(|| io::Error::other("the keeper sent no descriptor"))
    }))
}

/// The bytes of `path`, read by the keeper, if it keeps `path`.
pub fn read(path: &Path) -> Option<io::Result<Vec<u8>>> {
    let reply = ask(path, READ)?;
    Some(reply.and_then(|mut reply| {
        status(&mut reply)?;
        let mut bytes = Vec::new();
        reply.read_to_end(&mut bytes)?;
        Ok(bytes)
    }))
}

/// Sends the request for `path` with a fresh reply socket; `None` when no
/// keeper runs or it does not keep `path`.
fn ask(path: &Path, op: u8) -> Option<io::Result<UnixStream>> {
    let keeper = KEEPER.get()?;
    let index = u32::try_from(keeper.paths.iter().position(|p| p == path)?).ok()?;
    let send = || -> io::Result<UnixStream> {
        let (reply, theirs) = UnixStream::pair()?;
        let mut request = [0u8; 5];
        request[0] = op;
        request[1..].copy_from_slice(&index.to_le_bytes());
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [theirs.as_fd()];
        control.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(&keeper.requests, &[IoSlice::new(&request)], &mut control, SendFlags::NOSIGNAL)?;
        Ok(reply)
    };
    Some(send())
}

/// Reads a reply's status: 0, or 1 and the keeper's `errno`.
fn status(reply: &mut UnixStream) -> io::Result<()> {
    let mut first = [0u8; 1];
    reply.read_exact(&mut first)?;
    if first[0] == 0 {
        return Ok(());
    }
    let mut errno = [0u8; 4];
    reply.read_exact(&mut errno)?;
    Err(io::Error::from_raw_os_error(i32::from_le_bytes(errno)))
}

/// The keeper's side, when this binary was started as [`ARG`] (`args` are
/// those after it: the paths it may open). Serves requests on standard
/// input until its end of file.
pub fn serve(args: &[std::ffi::OsString]) -> ExitCode {
    let paths: Vec<PathBuf> = args.iter().map(PathBuf::from).collect();
    let Ok(requests) = std::io::stdin().as_fd().try_clone_to_owned() else { return ExitCode::FAILURE };
    loop {
        let mut request = [0u8; 5];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let iov = &mut [IoSliceMut::new(&mut request)];
        let got = match rustix::net::recvmsg(&requests, iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(got) => got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return ExitCode::FAILURE,
        };
        if got.bytes == 0 {
            return ExitCode::SUCCESS;
        }
        let reply: Option<OwnedFd> = control.drain().find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        });
        let (Some(reply), 5) = (reply, got.bytes) else { continue };
        let index = u32::from_le_bytes([request[1], request[2], request[3], request[4]]) as usize;
        let Some(path) = paths.get(index) else { continue };
        // A reply that cannot be written: the asker went away.
        let _ = answer(UnixStream::from(reply), request[0], path);
    }
}

fn answer(mut reply: UnixStream, op: u8, path: &Path) -> io::Result<()> {
    let refused = |reply: &mut UnixStream, e: io::Error| {
        let mut out = [1u8; 5];
        out[1..].copy_from_slice(&e.raw_os_error().unwrap_or(libc::EIO).to_le_bytes());
        reply.write_all(&out)
    };
    match op {
        OPEN_APPEND => match std::fs::OpenOptions::new().create(true).append(true).open(path) {
            Ok(file) => {
                reply.write_all(&[0])?;
                let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
                let mut control = SendAncillaryBuffer::new(&mut space);
                let fds = [file.as_fd()];
                control.push(SendAncillaryMessage::ScmRights(&fds));
                rustix::net::sendmsg(&reply, &[IoSlice::new(&[0])], &mut control, SendFlags::NOSIGNAL)?;
                Ok(())
            }
            Err(e) => refused(&mut reply, e),
        },
        READ => {
            let read = File::open(path).and_then(|file| {
                let mut bytes = Vec::new();
                file.take(READ_MAX + 1).read_to_end(&mut bytes)?;
                if bytes.len() as u64 > READ_MAX {
                    return Err(io::Error::from_raw_os_error(libc::EFBIG));
                }
                Ok(bytes)
            });
            match read {
                Ok(bytes) => {
                    reply.write_all(&[0])?;
                    reply.write_all(&bytes)
                }
                Err(e) => refused(&mut reply, e),
            }
        }
        _ => Ok(()),
    }
}
