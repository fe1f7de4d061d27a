//! Where an experiment's roles run (`[hosts]`): the server, the load
//! generators, the front and the backends each on the lab's own machine
//! (the default) or on a host reached with the system `ssh`
//! (`ssh://[USER@]HOST[:PORT]`), what each host is (CPU model, cores,
//! kernel, NIC speeds from `/sys/class/net`) and how busy it was over a
//! point (`/proc/stat`, `/proc/meminfo`). `remote.rs` runs the commands.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Value};

/// A generator host this busy (% of all its CPUs) over a point was the
/// limit, or close enough to it that its numbers are the generator's.
pub const GENERATOR_LIMIT_PCT: f64 = 90.0;

/// `[hosts]`: each role's host; a role not named runs on the lab's machine.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HostsSpec {
    /// The server (every backend of a server, unless `backends` names hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The load generators: one or several, splitting the users (closed
    /// loop) or the rate (open loop) between them.
    #[serde(default, deserialize_with = "one_or_many", skip_serializing_if = "Vec::is_empty")]
    pub load: Vec<String>,
    /// The front (`front = "direct"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front: Option<String>,
    /// The backends behind a front, backend i on host i (round robin).
    #[serde(default, deserialize_with = "one_or_many", skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<String>,
    /// `ssh -o` options for every host (`"StrictHostKeyChecking=accept-new"`);
    /// `MODUS_LAB_SSH_OPTS` adds more, and `~/.ssh/config` applies as ever.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_options: Vec<String>,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// An `ssh://[USER@]HOST[:PORT]` address (HOST may be an alias of
/// `~/.ssh/config`, or `[v6]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SshUrl {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl SshUrl {
    pub fn parse(s: &str) -> Result<SshUrl> {
        let Some(rest) = s.strip_prefix("ssh://") else {
            bail!("host {s:?}: expected ssh://[USER@]HOST[:PORT]");
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') {
            bail!("host {s:?}: a host has no path or query");
        }
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) if !u.is_empty() => (Some(u.to_string()), h),
            Some(_) => bail!("host {s:?}: empty user"),
            None => (None, rest),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, after) =
                v6.split_once(']').ok_or_else(|| anyhow::anyhow!("host {s:?}: unclosed ["))?;
            (host, after.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() || host.starts_with('-') {
            bail!("host {s:?}: no host name");
        }
        let port = match port {
            Some(p) => Some(p.parse::<u16>().map_err(|_| anyhow::anyhow!("host {s:?}: bad port {p:?}"))?),
            None => None,
        };
        Ok(SshUrl { user: user.filter(|u| !u.starts_with('-')), host: host.to_string(), port })
    }

    /// `ssh`'s destination: `USER@HOST`.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

impl std::fmt::Display for SshUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        match &self.user {
            Some(u) => write!(f, "ssh://{u}@{host}{port}"),
            None => write!(f, "ssh://{host}{port}"),
        }
    }
}

/// The hosts of `[hosts]`, parsed: each distinct host once.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    pub server: Option<SshUrl>,
    pub load: Vec<SshUrl>,
    pub front: Option<SshUrl>,
    pub backends: Vec<SshUrl>,
    pub ssh_options: Vec<String>,
}

impl Placement {
    pub fn from_spec(spec: &HostsSpec) -> Result<Placement> {
        let one = |s: &Option<String>| s.as_deref().map(SshUrl::parse).transpose();
        let many = |v: &[String]| v.iter().map(|s| SshUrl::parse(s)).collect::<Result<Vec<_>>>();
        let mut ssh_options = spec.ssh_options.clone();
        if let Ok(extra) = std::env::var("MODUS_LAB_SSH_OPTS") {
            ssh_options.extend(extra.split_whitespace().map(str::to_string));
        }
        for o in &ssh_options {
            if !o.contains('=') || o.starts_with('-') {
                bail!("ssh option {o:?}: expected NAME=VALUE (as `ssh -o` takes it)");
            }
        }
        let load = many(&spec.load)?;
        let mut seen = load.clone();
        seen.sort_by_key(|u| u.to_string());
        seen.dedup();
        if seen.len() != load.len() {
            bail!("[hosts] load names a host twice: one generator per host");
        }
        Ok(Placement {
            server: one(&spec.server)?,
            load,
            front: one(&spec.front)?,
            backends: many(&spec.backends)?,
            ssh_options,
        })
    }

    /// The host of backend `i`, if not the lab's machine.
    pub fn backend(&self, i: usize) -> Option<&SshUrl> {
        match self.backends.len() {
            0 => self.server.as_ref(),
            n => Some(&self.backends[i % n]),
        }
    }

    /// Every host with its roles, each once, in the order named.
    pub fn roles(&self) -> Vec<(SshUrl, Vec<&'static str>)> {
        let mut out: Vec<(SshUrl, Vec<&'static str>)> = Vec::new();
        let named = self.server.iter().map(|u| ("server", u));
        let named = named.chain(self.load.iter().map(|u| ("load", u)));
        let named = named.chain(self.front.iter().map(|u| ("front", u)));
        for (role, url) in named.chain(self.backends.iter().map(|u| ("backend", u))) {
            match out.iter_mut().find(|(u, _)| u == url) {
                Some((_, roles)) if !roles.contains(&role) => roles.push(role),
                Some(_) => {}
                None => out.push((url.clone(), vec![role])),
            }
        }
        out
    }
}

/// The shell script that says what a host is, one `key=value` a line.
pub const FACTS_SCRIPT: &str = r#"echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "cores=$(getconf _NPROCESSORS_ONLN)"
echo "kernel=$(uname -sr)"
echo "hostname=$(uname -n)"
echo "memory_kib=$(awk '/^MemTotal:/{print $2}' /proc/meminfo)"
for n in /sys/class/net/*; do
  [ "${n##*/}" = lo ] && continue
  echo "nic=${n##*/} $(cat "$n/speed" 2>/dev/null || echo '?')"
done
echo "rsync=$(command -v rsync >/dev/null && echo yes || echo no)"
"#;

/// What a host is, from [`FACTS_SCRIPT`]'s output.
pub fn parse_facts(text: &str) -> Value {
    let mut facts = serde_json::Map::new();
    let mut nics = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else { continue };
        let value = value.trim();
        match key {
            "nic" => {
                let (name, speed) = value.split_once(' ').unwrap_or((value, "?"));
                // `speed` is Mb/s; -1 or unreadable: the driver does not say (a virtual NIC, a link down).
                let speed = speed.parse::<i64>().ok().filter(|s| *s > 0);
                nics.push(json!({"name": name, "speed_mbit": speed}));
            }
            "cores" | "memory_kib" => {
                facts.insert(key.into(), value.parse::<u64>().map_or(Value::Null, Value::from));
            }
            "rsync" => {
                facts.insert(key.into(), json!(value == "yes"));
            }
            _ => {
                facts.insert(key.into(), json!(value));
            }
        }
    }
    facts.insert("nics".into(), json!(nics));
    Value::Object(facts)
}

/// One line describing a host's facts, for the report.
pub fn describe(facts: &Value) -> String {
    let nics: Vec<String> = facts["nics"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let speed =
                n["speed_mbit"].as_i64().map_or_else(|| "speed unknown".into(), |s| format!("{s} Mb/s"));
            format!("{} {speed}", n["name"].as_str().unwrap_or("?"))
        })
        .collect();
    format!(
        "{} ({}), {} cores, {}, {} MiB, NIC {}",
        facts["cpu"].as_str().filter(|c| !c.is_empty()).unwrap_or("CPU model unknown"),
        facts["hostname"].as_str().unwrap_or("?"),
        facts["cores"].as_u64().map_or_else(|| "?".into(), |c| c.to_string()),
        facts["kernel"].as_str().unwrap_or("?"),
        facts["memory_kib"].as_u64().map_or_else(|| "?".into(), |k| (k / 1024).to_string()),
        if nics.is_empty() { "none".into() } else { nics.join(", ") },
    )
}

/// The script that samples a host's CPU and memory: `/proc/stat`'s
/// `cpu` line and `/proc/meminfo`'s total and available.
pub const SAMPLE_SCRIPT: &str = "head -n1 /proc/stat; grep -E '^(MemTotal|MemAvailable):' /proc/meminfo";

/// A host's CPU counters (in clock ticks) and memory at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub busy_ticks: u64,
    pub total_ticks: u64,
    pub mem_total_kib: u64,
    pub mem_available_kib: u64,
}

impl Sample {
    /// From [`SAMPLE_SCRIPT`]'s output (a `cpu` line may come alone).
    pub fn parse(text: &str) -> Option<Sample> {
        let mut sample = Sample::default();
        let mut cpu = false;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("cpu") => {
                    let ticks: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
                    // user nice system idle iowait irq softirq steal (guest is in user).
                    let total: u64 = ticks.iter().take(8).sum();
                    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
                    (sample.total_ticks, sample.busy_ticks, cpu) = (total, total.saturating_sub(idle), true);
                }
                Some("MemTotal:") => sample.mem_total_kib = words.next()?.parse().ok()?,
                Some("MemAvailable:") => sample.mem_available_kib = words.next()?.parse().ok()?,
                _ => {}
            }
        }
        cpu.then_some(sample)
    }

    /// The host's CPU busy over `self` → `later`, % of all its CPUs.
    pub fn busy_pct(&self, later: &Sample) -> f64 {
        let total = later.total_ticks.saturating_sub(self.total_ticks);
        if total == 0 {
            return f64::NAN;
        }
        later.busy_ticks.saturating_sub(self.busy_ticks) as f64 / total as f64 * 100.0
    }

    /// CPU time (ns) the host spent busy over `self` → `later`, all CPUs.
    pub fn busy_ns(&self, later: &Sample) -> u64 {
        let tick_ns = 1_000_000_000 / rustix::param::clock_ticks_per_second();
        later.busy_ticks.saturating_sub(self.busy_ticks) * tick_ns
    }

    pub fn mem_used_kib(&self) -> u64 {
        self.mem_total_kib.saturating_sub(self.mem_available_kib)
    }
}

/// The warnings of a run whose generator hosts were the limit: one per
/// host, with the points at which its CPU was at [`GENERATOR_LIMIT_PCT`]
/// or more (from the points' raw records' `hosts`).
pub fn generator_warnings(records: &[Value]) -> Vec<String> {
    let mut by_host: Vec<(String, usize, f64)> = Vec::new();
    for record in records {
        for h in record["hosts"].as_array().into_iter().flatten() {
            let cpu = h["cpu_pct"].as_f64().unwrap_or(0.0);
            if h["role"] != "load" || cpu < GENERATOR_LIMIT_PCT {
                continue;
            }
            let url = h["host"].as_str().unwrap_or("?").to_string();
            match by_host.iter_mut().find(|(u, _, _)| *u == url) {
                Some((_, n, max)) => (*n, *max) = (*n + 1, max.max(cpu)),
                None => by_host.push((url, 1, cpu)),
            }
        }
    }
    by_host
        .into_iter()
        .map(|(url, n, max)| {
            format!(
                "load generator host {url} was the limit at {n} point(s): its CPU up to {max:.0} % \
                 (≥ {GENERATOR_LIMIT_PCT:.0} %); add a generator host or give it more cores"
            )
        })
        .collect()
}

/// The report's section on the hosts (`meta.json`'s `hosts`, `host_warnings`).
pub fn markdown(meta: &Value) -> String {
    let mut m = String::new();
    let Some(hosts) = meta["hosts"].as_array().filter(|h| !h.is_empty()) else { return m };
    let _ = writeln!(m, "Hosts:\n");
    for h in hosts {
        let roles: Vec<&str> =
            h["roles"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let _ = writeln!(
            m,
            "- {} ({}): {}",
            h["host"].as_str().unwrap_or("?"),
            roles.join(", "),
            describe(&h["facts"])
        );
    }
    m.push('\n');
    for w in meta["host_warnings"].as_array().into_iter().flatten() {
        let _ = writeln!(m, "**Warning: {}.**\n", w.as_str().unwrap_or("?"));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_urls_parse_with_user_port_and_v6() {
        let u = SshUrl::parse("ssh://bench@10.0.0.2").unwrap();
        assert_eq!((u.user.as_deref(), u.host.as_str(), u.port), (Some("bench"), "10.0.0.2", None));
        assert_eq!(u.destination(), "bench@10.0.0.2");
        let u = SshUrl::parse("ssh://gen1:2222/").unwrap();
        assert_eq!((u.user, u.host.as_str(), u.port), (None, "gen1", Some(2222)));
        let u = SshUrl::parse("ssh://root@[fd00::2]:22").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("fd00::2", Some(22)));
        assert_eq!(u.to_string(), "ssh://root@[fd00::2]:22");
        for bad in [
            "10.0.0.2",
            "http://x",
            "ssh://",
            "ssh://@x",
            "ssh://x:port",
            "ssh://-oProxyCommand=x",
            "ssh://x/dir",
        ] {
            assert!(SshUrl::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn hosts_spec_takes_one_or_many_and_places_backends() {
        let spec: HostsSpec = toml::from_str(
            "server = \"ssh://a@s\"\nload = [\"ssh://g1\", \"ssh://g2\"]\nbackends = \"ssh://b\"\nssh-options = [\"ConnectTimeout=5\"]",
        )
        .unwrap();
        assert_eq!(spec.load.len(), 2);
        assert_eq!(spec.backends, vec!["ssh://b".to_string()]);
        let p = Placement::from_spec(&spec).unwrap();
        assert_eq!(p.backend(3).unwrap().host, "b");
        let roles = p.roles();
        assert_eq!(roles.len(), 4);
        assert_eq!(roles[0].1, vec!["server"]);
        let p = Placement::from_spec(&HostsSpec { server: Some("ssh://s".into()), ..Default::default() })
            .unwrap();
        assert_eq!(p.backend(1).unwrap().host, "s");
        assert!(Placement::from_spec(&HostsSpec::default()).unwrap().backend(0).is_none());
        let twice = HostsSpec { load: vec!["ssh://g".into(), "ssh://g".into()], ..Default::default() };
        assert!(Placement::from_spec(&twice).is_err());
        let bad = HostsSpec { ssh_options: vec!["-oProxyCommand=x".into()], ..Default::default() };
        assert!(Placement::from_spec(&bad).is_err());
        assert!(toml::from_str::<HostsSpec>("servr = \"ssh://s\"").is_err());
    }

    #[test]
    fn samples_give_busy_share_and_memory() {
        let a = Sample::parse("cpu  100 0 100 700 100 0 0 0 0 0\nMemTotal: 1000 kB\nMemAvailable: 400 kB\n")
            .unwrap();
        let b = Sample::parse("cpu  250 0 150 750 150 0 0 0 0 0\n").unwrap();
        assert_eq!(a.mem_used_kib(), 600);
        // 200 busy ticks of 300.
        assert!((a.busy_pct(&b) - 200.0 / 300.0 * 100.0).abs() < 1e-9);
        assert!(Sample::parse("nothing").is_none());
        assert!(a.busy_pct(&a).is_nan());
    }

    #[test]
    fn facts_parse_and_describe_nic_speeds() {
        let f = parse_facts(
            "cpu=Intel(R) Xeon(R)\ncores=2\nkernel=Linux 6.1.0\nhostname=g1\nmemory_kib=2048000\nnic=eth0 10000\nnic=veth1 -1\nrsync=no\n",
        );
        assert_eq!(f["cores"], 2);
        assert_eq!(f["rsync"], false);
        let d = describe(&f);
        assert!(d.contains("Intel(R) Xeon(R) (g1), 2 cores, Linux 6.1.0, 2000 MiB"), "{d}");
        assert!(d.contains("eth0 10000 Mb/s, veth1 speed unknown"), "{d}");
    }

    #[test]
    fn a_busy_generator_host_is_warned_about_once() {
        let record = |cpu: f64| {
            json!({"hosts": [{"role": "load", "host": "ssh://g1", "cpu_pct": cpu},
                             {"role": "server", "host": "ssh://s", "cpu_pct": 99.0}]})
        };
        let w = generator_warnings(&[record(95.0), record(50.0), record(97.0)]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("ssh://g1 was the limit at 2 point(s): its CPU up to 97 %"), "{}", w[0]);
        assert!(generator_warnings(&[record(10.0)]).is_empty());
    }
}
