//! Other servers measured beside modus (nginx, lighttpd, h2o), each from a configuration the lab
//! writes (checked with the server's own `-t` before use), on its own port
//! and directory, in the foreground, stopped by PID. A peer that is not
//! installed is skipped, and the report says so.
//!
//! Like the modus models in the lab, they serve without an access log, with
//! keep-alive unlimited, one worker process (the lab pins servers to CPUs;
//! `server-cpus` decides how many they get).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The peers the lab can run.
pub const PEERS: [&str; 3] = ["nginx", "lighttpd", "h2o"];

/// The peer's binary, if installed (Debian puts them in /usr/sbin).
pub fn binary(peer: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(peer))
        .find(|p| p.is_file())
}

/// The peer's version line, for `meta.json`.
pub fn version(peer: &str, bin: &Path) -> String {
    let out = Command::new(bin).arg("-v").output();
    let text =
        out.map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
    text.ok()
        .and_then(|t| t.lines().next().map(str::to_string))
        .unwrap_or_else(|| format!("{peer} (version unknown)"))
}

/// The configuration serving `docroot` on 127.0.0.1:`port`, with its
/// working files in `dir`.
pub fn config(peer: &str, dir: &Path, docroot: &Path, port: u16) -> Result<String> {
    let (dir, root) = (dir.display(), docroot.display());
    Ok(match peer {
        "nginx" => {
            // As root, nginx's workers would run as `nobody`, who may not
            // read a docroot under a private temporary directory.
            let user = if rustix::process::geteuid().is_root() { "user root;" } else { "" };
            format!(
                "# written by modus lab\n{user}\nworker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\n\
                 error_log {dir}/error.log warn;\nworker_rlimit_nofile 20000;\nevents {{ worker_connections 10000; }}\n\
                 http {{\n    default_type application/octet-stream;\n    sendfile on;\n    tcp_nopush on;\n\
                 keepalive_requests 100000000;\n    access_log off;\n    client_body_temp_path {dir}/body;\n\
                 proxy_temp_path {dir}/proxy;\n    fastcgi_temp_path {dir}/fastcgi;\n    uwsgi_temp_path {dir}/uwsgi;\n\
                 scgi_temp_path {dir}/scgi;\n    server {{\n        listen 127.0.0.1:{port};\n        root {root};\n\
                 location / {{ }}\n    }}\n}}\n"
            )
        }
        "lighttpd" => format!(
            "# written by modus lab\nserver.document-root = \"{root}\"\nserver.bind = \"127.0.0.1\"\n\
             server.port = {port}\nserver.errorlog = \"{dir}/error.log\"\nserver.max-keep-alive-requests = 100000000\n\
             server.max-fds = 20000\nserver.max-connections = 10240\n\
             mimetype.assign = ( \".html\" => \"text/html\", \".txt\" => \"text/plain\", \"\" => \"application/octet-stream\" )\n"
        ),
        "h2o" => {
            // As root h2o wants to be told whom to run as; root keeps the
            // docroot readable wherever the results directory is.
            let user = if rustix::process::geteuid().is_root() { "user: root\n" } else { "" };
            format!(
                "# written by modus lab\n{user}num-threads: 1\npid-file: {dir}/h2o.pid\n\
                 error-log: {dir}/error.log\nmax-connections: 10240\nlisten:\n  host: 127.0.0.1\n  port: {port}\n\
                 hosts:\n  default:\n    paths:\n      /:\n        file.dir: \"{root}\"\n"
            )
        }
        other => bail!("no peer {other:?} (the lab knows {})", PEERS.join(", ")),
    })
}

/// The peer's own check of `conf` (`nginx -t`, `lighttpd -tt`, `h2o -t`).
pub fn check(peer: &str, bin: &Path, dir: &Path, conf: &Path) -> Result<()> {
    let out = match peer {
        "nginx" => Command::new(bin).args(["-t", "-q", "-p"]).arg(dir).arg("-c").arg(conf).output(),
        "h2o" => Command::new(bin).arg("-t").arg("-c").arg(conf).output(),
        _ => Command::new(bin).arg("-tt").arg("-f").arg(conf).output(),
    }
    .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{peer} refuses the configuration {}: {}",
            conf.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The arguments that run `conf` in the foreground.
pub fn args(peer: &str, dir: &Path, conf: &Path) -> Vec<std::ffi::OsString> {
    match peer {
        "nginx" => vec!["-p".into(), dir.into(), "-c".into(), conf.into()],
        "h2o" => vec!["-c".into(), conf.into()],
        _ => vec!["-D".into(), "-f".into(), conf.into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each configuration passes the peer's own check where it is installed.
    #[test]
    fn configurations_pass_the_peers_own_check() {
        let dir = tempfile::tempdir().unwrap();
        let docroot = dir.path().join("root");
        std::fs::create_dir_all(&docroot).unwrap();
        for peer in PEERS {
            let text = config(peer, dir.path(), &docroot, 18999).unwrap();
            assert!(text.contains("18999") && text.contains(&docroot.display().to_string()), "{text}");
            let Some(bin) = binary(peer) else {
                eprintln!(
                    "skipped: {peer} is not installed (apt-get install {peer}); its config was not checked"
                );
                continue;
            };
            let conf = dir.path().join(format!("{peer}.conf"));
            std::fs::write(&conf, text).unwrap();
            check(peer, &bin, dir.path(), &conf).unwrap_or_else(|e| panic!("{e:#}"));
        }
        assert!(config("caddy", dir.path(), &docroot, 1).is_err());
    }
}
