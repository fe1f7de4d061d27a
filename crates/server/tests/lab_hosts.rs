//! `modus lab` across machines (`[hosts]`), for real on one machine:
//! three network namespaces joined by a bridge stand for three hosts, each
//! running its own `sshd` on its veth address with a throw-away host key,
//! a throw-away client key and a throw-away configuration in a temporary
//! directory. The server runs on one, two load generators on the others,
//! all reached with the system `ssh`. Root only, and `sshd` installed
//! (openssh-server); elsewhere the test says why it did not run.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::run;

const BIN: &str = env!("CARGO_BIN_EXE_modus");
const LIMIT: Duration = Duration::from_secs(240);
const SSHD: &str = "/usr/sbin/sshd";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Three hosts: namespaces on one bridge, each with an sshd on its address.
struct Hosts {
    bridge: String,
    namespaces: Vec<String>,
    addrs: Vec<String>,
    sshd: Vec<Child>,
}

impl Hosts {
    fn create(dir: &Path, n: usize) -> Result<Hosts, String> {
        let id = std::process::id();
        let subnet = id % 250 + 1;
        let bridge = format!("mh{id}b");
        let mut hosts =
            Hosts { bridge: bridge.clone(), namespaces: Vec::new(), addrs: Vec::new(), sshd: Vec::new() };
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("10.202.{subnet}.254/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").map_err(|e| format!("/run/sshd: {e}"))?;
        let keygen = |path: &Path| {
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Ok(())
            } else {
                Err("ssh-keygen failed".to_string())
            }
        };
        keygen(&dir.join("host_key"))?;
        keygen(&dir.join("client_key"))?;
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).map_err(|e| e.to_string())?;
        for h in 0..n {
            let ns = format!("mh{id}-{h}");
            let (inside, outside) = (format!("mh{id}i{h}"), format!("mh{id}o{h}"));
            let addr = format!("10.202.{subnet}.{}", h + 1);
            ip(&["netns", "add", &ns])?;
            hosts.namespaces.push(ns.clone());
            ip(&["link", "add", &inside, "type", "veth", "peer", "name", &outside])?;
            ip(&["link", "set", &inside, "netns", &ns])?;
            ip(&["link", "set", &outside, "master", &bridge])?;
            ip(&["link", "set", &outside, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", &inside])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "link", "set", &inside, "up"])?;
            let config = dir.join(format!("sshd-{h}.conf"));
            std::fs::write(
                &config,
                format!(
                    "ListenAddress {addr}\nPort 22\nHostKey {dir}/host_key\nAuthorizedKeysFile {dir}/authorized_keys\n\
                     PidFile {dir}/sshd-{h}.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nMaxStartups 50\n",
                    dir = dir.display()
                ),
            )
            .map_err(|e| e.to_string())?;
            let sshd = Command::new("ip")
                .args(["netns", "exec", &ns, SSHD, "-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("sshd-{h}.log"))).map_err(|e| e.to_string())?)
                .spawn()
                .map_err(|e| format!("starting sshd: {e}"))?;
            hosts.sshd.push(sshd);
            hosts.addrs.push(addr);
        }
        // Each sshd up: its port answers from the lab's namespace, over the bridge.
        let deadline = Instant::now() + Duration::from_secs(20);
        for addr in &hosts.addrs {
            while std::net::TcpStream::connect((addr.as_str(), 22)).is_err() {
                if Instant::now() > deadline {
                    return Err(format!("sshd on {addr} never listened"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for sshd in &mut self.sshd {
            // `ip netns exec` execs sshd: the child's PID is sshd's.
            let _ = sshd.kill();
            let _ = sshd.wait();
        }
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// Why this machine cannot run the test, if it cannot.
fn cannot() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root (network namespaces and sshd need it)".into());
    }
    if !Path::new(SSHD).is_file() {
        return Some(format!("no {SSHD} (apt-get install openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen", "ip"] {
        if !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(format!("no {tool}"));
        }
    }
    None
}

/// The server on one host, two generators on two others: the load splits
/// between them, their histograms merge to the sum of their counts, and
/// the report names each host.
#[test]
fn a_server_and_two_generators_on_ssh_hosts() {
    if let Some(why) = cannot() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path().join("ssh");
    std::fs::create_dir(&keys).unwrap();
    let hosts = match Hosts::create(&keys, 3) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("skipped: no network namespaces with sshd here: {e}");
            return;
        }
    };
    let key = keys.join("client_key");
    let url = |i: usize| format!("ssh://root@{}", hosts.addrs[i]);
    let spec = tmp.path().join("hosts.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "hosts"
description = "event on one host, two generators on two others"
docroot = "fixed"
path = "mix:two"
duration = "2s"
warmup = "200ms"
[mixes]
two = ["3 /500b.bin", "1 /50k.bin"]
[hosts]
server = "{server}"
front = "{server}"
load = ["{g1}", "{g2}"]
ssh-options = ["IdentityFile={key}", "IdentitiesOnly=yes", "StrictHostKeyChecking=no",
               "UserKnownHostsFile=/dev/null", "LogLevel=ERROR", "ConnectTimeout=10"]
[sweep]
clients = [5]
[[server]]
name = "event"
model = "event"
[[server]]
name = "direct"
model = "pool"
front = "direct"
"#,
            server = url(0),
            g1 = url(1),
            g2 = url(2),
            key = key.display()
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let lab_dirs = || -> Vec<String> {
        let entries = std::fs::read_dir("/tmp").unwrap().flatten();
        let mut names: Vec<String> = entries.map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.retain(|n| n.starts_with("modus-lab-"));
        names.sort();
        names
    };
    let dirs_before = lab_dirs();
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    let logs: String = (0..3)
        .map(|h| std::fs::read_to_string(keys.join(format!("sshd-{h}.log"))).unwrap_or_default())
        .collect();
    assert!(r.status.success(), "{}\n{}\nsshd:\n{logs}", r.stdout, r.stderr);
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("raw/event-c5-p0-u0-r1.json")).unwrap())
            .unwrap();
    let load = &raw["load"];
    assert!(
        load["params"]["urls"][0].as_str().unwrap().starts_with(&format!("http://{}:", hosts.addrs[0])),
        "{load}"
    );
    // Two generators, the five users split 3 + 2, each answered.
    let generators = load["generators"].as_array().unwrap();
    assert_eq!(generators.len(), 2, "{load}");
    let hosts_of: Vec<&str> = generators.iter().map(|g| g["host"].as_str().unwrap()).collect();
    assert_eq!(hosts_of, [url(1), url(2)]);
    let counts: Vec<u64> = generators.iter().map(|g| g["histogram_count"].as_u64().unwrap()).collect();
    assert!(counts.iter().all(|c| *c > 0), "{generators:?}");
    // The merged histogram holds every generator's every request, exactly.
    assert_eq!(load["histogram_count"].as_u64().unwrap(), counts.iter().sum::<u64>(), "{load}");
    let requests: u64 = generators.iter().map(|g| g["requests"].as_u64().unwrap()).sum();
    assert_eq!(load["requests"].as_u64().unwrap(), requests);
    // The mix, copied to each generator's host, was what they asked for: every answer a 200, some of them 50 KB.
    assert_eq!(load["status"]["200"].as_u64().unwrap(), requests, "{load}");
    assert!(load["bytes"].as_u64().unwrap() > requests * 2000, "{load}");
    let max: u64 = generators.iter().map(|g| g["latency_us"]["max"].as_u64().unwrap()).max().unwrap();
    assert_eq!(load["latency_us"]["max"].as_u64().unwrap(), max, "the merge's max is the larger one");
    // Each host's CPU and memory over the point; the server's /status.json.
    let records = raw["hosts"].as_array().unwrap();
    let conns: Vec<&str> = records.iter().filter_map(|h| h["connections"].as_str()).collect();
    assert_eq!(conns, ["3", "2"], "{records:?}");
    assert_eq!(records.len(), 3, "{records:?}");
    for h in records {
        assert!(h["cpu_pct"].as_f64().is_some_and(|c| (0.0..=100.0).contains(&c)), "{h}");
        assert!(h["memory_used_kib"].as_u64().is_some_and(|m| m > 0), "{h}");
    }
    let server = records.iter().find(|h| h["role"] == "server").unwrap();
    assert!(server["status"]["requests_total"].as_u64().unwrap() >= requests, "{server}");
    // The report names each host: what it is, its NIC (a veth: 10000 Mb/s).
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    let described = meta["hosts"].as_array().unwrap();
    assert_eq!(described.len(), 3, "{meta}");
    for h in described {
        assert!(h["facts"]["cores"].as_u64().unwrap() >= 1, "{h}");
        assert!(h["facts"]["nics"].as_array().unwrap().len() == 1, "one veth in each namespace: {h}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains(&format!("- {} (load): ", url(2))), "{report}");
    assert!(report.contains(&format!("- {} (server, front): ", url(0))), "{report}");
    assert!(report.contains(" cores, Linux "), "{report}");
    let rows = std::fs::read_to_string(out.join("points.csv")).unwrap();
    assert_eq!(rows.lines().count(), 3, "{rows}");
    // `modus direct` on a host before the backend there: the load went to it, and through it.
    let fronted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("raw/direct-c5-p0-u0-r1.json")).unwrap())
            .unwrap();
    let through = &fronted["load"];
    assert_eq!(through["generators"].as_array().map(Vec::len), Some(2), "{through}");
    assert!(through["status"]["200"].as_u64().is_some_and(|n| n > 0), "{through}");
    let backend = fronted["hosts"].as_array().unwrap().iter().find(|h| h["role"] == "server").unwrap();
    assert!(backend["status"]["requests_total"].as_u64().unwrap() > 0, "{backend}");
    for h in records {
        eprintln!(
            "{} {}: CPU {:.0} %, {} KiB used",
            h["role"], h["host"], h["cpu_pct"], h["memory_used_kib"]
        );
    }
    eprintln!("{report}");
    eprintln!(
        "merged: {} requests, p99 {} µs; generators: {generators:?}",
        load["requests"], load["latency_us"]["p99"]
    );
    // Nothing left behind on the hosts (their /tmp is this one).
    assert_eq!(lab_dirs(), dirs_before);
    drop(hosts);
}

/// A host that does not answer: the run stops at once and names it (no
/// root needed: ssh to a closed port on loopback).
#[test]
fn an_unreachable_host_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("gone.toml");
    std::fs::write(
        &spec,
        r#"name = "gone"
description = "a server on a host that does not answer"
docroot = "fixed"
path = "/500b.bin"
duration = "300ms"
[hosts]
server = "ssh://nobody@127.0.0.1:1"
ssh-options = ["ConnectTimeout=5", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"]
[sweep]
clients = [1]
[[server]]
model = "event"
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(BIN, ["lab", "run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()], LIMIT);
    assert!(!r.status.success(), "{}", r.stdout);
    assert!(r.stderr.contains("ssh://nobody@127.0.0.1:1"), "{}", r.stderr);
    assert!(!out.join("points.csv").exists(), "nothing measured");
}
