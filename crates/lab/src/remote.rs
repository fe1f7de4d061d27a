//! A host reached with the system `ssh` (the user's keys, `~/.ssh/config`,
//! `ControlMaster` as they have them; `BatchMode`, so a missing key fails
//! rather than prompts): commands run there through `sh -c`, files copied
//! there (`rsync` where both ends have it, else a pipe into `tar`/`cat`),
//! processes started in the background and stopped by PID, the host's
//! CPU and memory sampled. Everything lives in one directory of the lab's
//! on the host, removed at the end.

use std::io::Write as _;
use std::net::ToSocketAddrs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use crate::hosts::{parse_facts, Sample, SshUrl, FACTS_SCRIPT, SAMPLE_SCRIPT};

/// `s` as one word for a POSIX shell.
pub fn quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@+%".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A host, connected.
#[derive(Debug)]
pub struct Remote {
    pub url: SshUrl,
    options: Vec<String>,
    /// The lab's directory there.
    pub dir: String,
    /// The address the other hosts reach it at (what `ssh` connects to,
    /// resolved — `ssh -G` says what `~/.ssh/config` makes of an alias).
    pub ip: String,
    /// What it is ([`crate::hosts::parse_facts`]).
    pub facts: Value,
}

impl Remote {
    /// Connects to `url` (checking `ssh` works there, non-interactively),
    /// makes the lab's directory `dir` there and reads what the host is.
    pub fn connect(url: &SshUrl, options: &[String], dir: &str) -> Result<Remote> {
        let mut remote = Remote {
            url: url.clone(),
            options: options.to_vec(),
            dir: dir.to_string(),
            ip: String::new(),
            facts: Value::Null,
        };
        let config = remote.ssh_base().arg("-G").arg(url.destination()).output().context("running ssh -G")?;
        let config = String::from_utf8_lossy(&config.stdout);
        let hostname = config
            .lines()
            .find_map(|l| l.strip_prefix("hostname "))
            .map_or_else(|| url.host.clone(), |h| h.trim().to_string());
        let ip = (hostname.as_str(), 0)
            .to_socket_addrs()
            .with_context(|| format!("{url}: resolving {hostname}"))?
            .next()
            .ok_or_else(|| anyhow!("{url}: {hostname} has no address"))?
            .ip();
        remote.ip = ip.to_string();
        let facts = remote
            .run(&format!("mkdir -p {d} && cd {d} && {FACTS_SCRIPT}", d = quote(dir)))
            .context("connecting with ssh")?;
        remote.facts = parse_facts(&facts);
        Ok(remote)
    }

    /// `ssh` with the options every call takes.
    fn ssh_base(&self) -> Command {
        let mut ssh = Command::new("ssh");
        ssh.args(["-o", "BatchMode=yes"]);
        for o in &self.options {
            ssh.args(["-o", o]);
        }
        if let Some(port) = self.url.port {
            ssh.args(["-p", &port.to_string()]);
        }
        ssh
    }

    /// `ssh HOST sh -c SCRIPT`.
    pub fn command(&self, script: &str) -> Command {
        let mut ssh = self.ssh_base();
        ssh.arg(self.url.destination()).arg("--").arg(format!("sh -c {}", quote(script)));
        ssh
    }

    /// Runs `script` there: its standard output, or why it failed.
    pub fn run(&self, script: &str) -> Result<String> {
        let out = self.command(script).stdin(Stdio::null()).output().context("running ssh")?;
        if !out.status.success() {
            bail!("{}: {} ({})", self.url, String::from_utf8_lossy(&out.stderr).trim(), out.status);
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The bytes of `path` there.
    pub fn read(&self, path: &str) -> Result<Vec<u8>> {
        let out = self.command(&format!("cat {}", quote(path))).stdin(Stdio::null()).output()?;
        if !out.status.success() {
            bail!("{}: reading {path}: {}", self.url, String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(out.stdout)
    }

    /// `dir/NAME` there.
    pub fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }

    /// Copies the file or directory `local` to `dir/NAME` there (a
    /// directory's contents replace what was there): `rsync` where both
    /// ends have it, else `tar` (a directory) or `cat` (a file) over ssh.
    pub fn copy(&self, local: &Path, name: &str) -> Result<()> {
        let target = self.path(name);
        // `MODUS_LAB_RSYNC=no`: tar or cat over ssh even where rsync is.
        let rsync_here = std::env::var("MODUS_LAB_RSYNC").map_or(true, |v| v != "no")
            && Command::new("rsync").arg("--version").output().is_ok_and(|o| o.status.success());
        let how = if rsync_here && self.facts["rsync"] == true {
            let mut shell = vec!["ssh".to_string(), "-o".into(), "BatchMode=yes".into()];
            for o in &self.options {
                shell.extend(["-o".into(), o.clone()]);
            }
            if let Some(port) = self.url.port {
                shell.extend(["-p".into(), port.to_string()]);
            }
            let shell: Vec<String> = shell.iter().map(|w| quote(w)).collect();
            let mut source = local.as_os_str().to_owned();
            if local.is_dir() {
                source.push("/");
            }
            let dest = format!("{}:{}", self.url.destination(), target);
            let dest = if self.url.host.contains(':') {
                format!(
                    "{}[{}]:{target}",
                    self.url.user.as_ref().map(|u| format!("{u}@")).unwrap_or_default(),
                    self.url.host
                )
            } else {
                dest
            };
            let out = Command::new("rsync")
                .args(["-a", "--delete", "-e", &shell.join(" ")])
                .arg(source)
                .arg(dest)
                .stdin(Stdio::null())
                .output()
                .context("running rsync")?;
            (out.status.success(), out.stderr)
        } else if local.is_dir() {
            let mut tar = Command::new("tar")
                .arg("-C")
                .arg(local)
                .args(["-cf", "-", "."])
                .stdout(Stdio::piped())
                .spawn()
                .context("running tar")?;
            let t = quote(&target);
            let out = self
                .command(&format!("rm -rf {t} && mkdir -p {t} && tar -C {t} -xf -"))
                .stdin(tar.stdout.take().expect("piped"))
                .output()?;
            let tarred = tar.wait()?.success();
            (tarred && out.status.success(), out.stderr)
        } else {
            let t = quote(&target);
            let mut ssh = self
                .command(&format!("cat > {t}.part && chmod 755 {t}.part && mv {t}.part {t}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?;
            let bytes = std::fs::read(local).with_context(|| format!("reading {}", local.display()))?;
            let wrote = ssh.stdin.take().expect("piped").write_all(&bytes);
            let out = ssh.wait_with_output()?;
            (wrote.is_ok() && out.status.success(), out.stderr)
        };
        if !how.0 {
            bail!(
                "{}: copying {} to {target}: {}",
                self.url,
                local.display(),
                String::from_utf8_lossy(&how.1).trim()
            );
        }
        Ok(())
    }

    /// Starts `argv` there in the background, in the lab's directory, its
    /// output to `NAME.out` and `NAME.err`: its PID.
    pub fn spawn(&self, name: &str, argv: &[String]) -> Result<u32> {
        let argv: Vec<String> = argv.iter().map(|a| quote(a)).collect();
        let (out, err) =
            (quote(&self.path(&format!("{name}.out"))), quote(&self.path(&format!("{name}.err"))));
        let script =
            format!("cd {} && {} > {out} 2> {err} < /dev/null & echo $!", quote(&self.dir), argv.join(" "));
        let pid = self.run(&script)?;
        pid.trim().parse().map_err(|_| anyhow!("{}: starting {name}: no PID ({pid:?})", self.url))
    }

    /// The first line `NAME` (started by [`spawn`](Self::spawn) as `pid`)
    /// wrote, once it has; an error with its standard error if it exits
    /// first, or says nothing within `timeout`.
    pub fn first_line(&self, name: &str, pid: u32, timeout: Duration) -> Result<String> {
        let (out, err) =
            (quote(&self.path(&format!("{name}.out"))), quote(&self.path(&format!("{name}.err"))));
        let script = format!(
            "i=0; while [ $i -lt {tries} ]; do l=$(head -n1 {out}); [ -n \"$l\" ] && {{ echo \"$l\"; exit 0; }}; \
             kill -0 {pid} 2>/dev/null || {{ echo exited; cat {err}; exit 3; }}; sleep 0.1; i=$((i+1)); done; exit 4",
            tries = timeout.as_millis() / 100,
        );
        let o = self.command(&script).stdin(Stdio::null()).output()?;
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        match o.status.code() {
            Some(0) => Ok(text.trim().to_string()),
            Some(3) => bail!(
                "{}: {name} exited before it listened: {}",
                self.url,
                text.trim_start_matches("exited").trim()
            ),
            _ => bail!(
                "{}: {name} said nothing in {timeout:?}: {}",
                self.url,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        }
    }

    /// Stops `pid` there: `SIGTERM`, and after 15 s `SIGKILL`.
    pub fn stop(&self, pid: u32) -> Result<()> {
        let script = format!(
            "kill -TERM {pid} 2>/dev/null || exit 0; i=0; while [ $i -lt 150 ]; do \
             kill -0 {pid} 2>/dev/null || exit 0; sleep 0.1; i=$((i+1)); done; kill -KILL {pid}"
        );
        self.run(&script).map(drop)
    }

    /// The host's CPU and memory now.
    pub fn sample(&self) -> Result<Sample> {
        let text = self.run(SAMPLE_SCRIPT)?;
        Sample::parse(&text).ok_or_else(|| anyhow!("{}: no /proc/stat", self.url))
    }

    /// Removes the lab's directory there.
    pub fn clean(&self) {
        let _ = self.run(&format!("rm -rf {}", quote(&self.dir)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_one_word() {
        assert_eq!(quote("/tmp/modus-lab/x.txt"), "/tmp/modus-lab/x.txt");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }
}
