//! The optional network topology (`[network] netns = true`, root only):
//! the load generator, the front and each backend on hosts of their own —
//! network namespaces, each joined to one bridge by a veth pair, its
//! outgoing link optionally shaped with `tc … htb rate` — so a director in
//! front of backends (paper 002) crosses a real network path rather than
//! loopback. The recipe is bench/srpt.sh's (veth + htb; this machine has
//! no netem). Where it is not permitted (not root, no `ip netns`) the
//! experiment runs over loopback and the report says why — unless it
//! shapes a link (`rate`, paper 004's bottleneck): then it is skipped, with
//! the reason, as loopback would measure something else (lib.rs).

use std::process::Command;

use anyhow::{bail, Context, Result};

/// The hosts of a run: `hosts[0]` the load generator, `hosts[1]` the
/// front, `hosts[2..]` the backends.
#[derive(Debug)]
pub struct Network {
    bridge: String,
    pub hosts: Vec<Host>,
}

/// One host: its namespace and address.
#[derive(Clone, Debug)]
pub struct Host {
    pub ns: String,
    pub ip: String,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn tc(args: &[&str]) -> Result<()> {
    let out = Command::new("tc").args(args).output().context("running tc (iproute2)")?;
    if !out.status.success() {
        bail!("tc {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Network {
    /// Makes `backends` + 2 hosts on 10.201.N.0/24 (N from the lab's
    /// PID, or the next free, so parallel runs do not meet), each link shaped to `rate`
    /// (`tc` units: `100mbit`) when given. Undone when dropped.
    pub fn create(backends: usize, rate: Option<&str>) -> Result<Network> {
        if !rustix::process::geteuid().is_root() {
            bail!("network namespaces need root");
        }
        let id = std::process::id();
        // A subnet no other bridge has (another lab's, running alongside).
        let addrs =
            Command::new("ip").args(["-4", "-o", "addr"]).output().context("running ip (iproute2)")?;
        let addrs = String::from_utf8_lossy(&addrs.stdout);
        let subnet = (0..250)
            .map(|i| (id + i) % 250 + 1)
            .find(|n| !addrs.contains(&format!(" 10.201.{n}.")))
            .ok_or_else(|| anyhow::anyhow!("every 10.201.N.0/24 is taken"))?;
        let bridge = format!("mlab{id}");
        let mut net = Network { bridge: bridge.clone(), hosts: Vec::new() };
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("10.201.{subnet}.254/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for h in 0..backends + 2 {
            let ns = format!("mlab{id}-{h}");
            let (inside, outside) = (format!("mlab{id}i{h}"), format!("mlab{id}o{h}"));
            ip(&["netns", "add", &ns])?;
            net.hosts.push(Host { ns: ns.clone(), ip: format!("10.201.{subnet}.{}", h + 1) });
            ip(&["link", "add", &inside, "type", "veth", "peer", "name", &outside])?;
            ip(&["link", "set", &inside, "netns", &ns])?;
            ip(&["link", "set", &outside, "master", &bridge])?;
            ip(&["link", "set", &outside, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("10.201.{subnet}.{}/24", h + 1), "dev", &inside])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "link", "set", &inside, "up"])?;
            if let Some(rate) = rate {
                // bench/srpt.sh's link: the whole rate in 1:100, under it one
                // leaf per SRPT class — `--schedule srpt` sets SO_PRIORITY
                // 0x10001 + k, which htb maps to leaf 1:(k+1), served at
                // prio k — and 1:1, the top class, the default (handshakes,
                // ACKs, every unscheduled socket: FIFO has the whole link).
                tc(&[
                    "-n", &ns, "qdisc", "add", "dev", &inside, "root", "handle", "1:", "htb", "default", "1",
                ])?;
                tc(&[
                    "-n", &ns, "class", "add", "dev", &inside, "parent", "1:", "classid", "1:100", "htb",
                    "rate", rate, "ceil", rate, "quantum", "60000",
                ])?;
                for k in 0..8 {
                    let (leaf, prio) = (format!("1:{}", k + 1), k.to_string());
                    tc(&[
                        "-n", &ns, "class", "add", "dev", &inside, "parent", "1:100", "classid", &leaf,
                        "htb", "rate", "1mbit", "ceil", rate, "prio", &prio,
                    ])?;
                }
            }
        }
        Ok(net)
    }

    /// The host of the load generator.
    pub fn client(&self) -> &Host {
        &self.hosts[0]
    }

    /// The host of the front.
    pub fn front(&self) -> &Host {
        &self.hosts[1]
    }

    /// The host of backend `i` (0-based).
    pub fn backend(&self, i: usize) -> &Host {
        &self.hosts[2 + i]
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hosts reach each other over the bridge, and everything is gone after.
    #[test]
    fn hosts_reach_each_other_and_are_removed() {
        let net = match Network::create(1, Some("100mbit")) {
            Ok(net) => net,
            Err(e) => {
                eprintln!("skipped: no network namespaces here: {e:#}");
                return;
            }
        };
        let (client, backend) = (net.client().clone(), net.backend(0).clone());
        let listener = Command::new("ip")
            .args(["netns", "exec", &backend.ns, "python3", "-c"])
            .arg("import socket;s=socket.socket();s.bind(('0.0.0.0',18999));s.listen();s.settimeout(10);c,_=s.accept();c.sendall(b'hi')")
            .spawn();
        let Ok(mut listener) = listener else {
            eprintln!("skipped: no python3");
            return;
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        let script = format!(
            "import socket;print(socket.create_connection(('{}',18999),timeout=5).recv(2).decode())",
            backend.ip
        );
        let out = Command::new("ip")
            .args(["netns", "exec", &client.ns, "python3", "-c", &script])
            .output()
            .unwrap();
        let _ = listener.wait();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "hi",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let link = format!("mlab{}i2", std::process::id());
        let shaped =
            Command::new("tc").args(["-n", &backend.ns, "class", "show", "dev", &link]).output().unwrap();
        let shaped = String::from_utf8_lossy(&shaped.stdout);
        assert!(shaped.contains("htb 1:1 ") && shaped.contains("100Mbit"), "{shaped}");
        // One leaf per SRPT class, served in priority order (bench/srpt.sh's recipe).
        assert!(shaped.contains("htb 1:100 ") && shaped.contains("htb 1:8 parent 1:100 prio 7"), "{shaped}");
        let namespaces = [client.ns.clone(), backend.ns.clone()];
        drop(net);
        let list =
            String::from_utf8(Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).unwrap();
        assert!(namespaces.iter().all(|ns| !list.contains(ns.as_str())), "{list}");
    }
}
