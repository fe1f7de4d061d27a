//! Durations, byte sizes and listen addresses as people type them, parsed
//! one way by every command (`serve`, `direct`, `monitor`, `load`) and by
//! the configuration file, so `--max-body 10MiB` means the same everywhere.
//!
//! * [`Dur`]: `500ms`, `5s`, `2m`, `1h 30m` (humantime), or a bare number of
//!   seconds (`30`, as nginx reads `keepalive_timeout 30`).
//! * [`Size`]: `4096`, `512k`, `64MiB`, `1G`; every unit is a power of 1024
//!   (`k`, `K`, `KB`, `KiB` alike, as nginx reads `client_max_body_size 10m`).
//! * [`listen_addr`]: `HOST:PORT`, `[V6]:PORT`, `:PORT` (every interface, as
//!   in Go and Caddy) or a bare `PORT` (on the default host, loopback).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A duration: `500ms`, `5s`, `2m`, `1h 30m`, or a bare number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Dur, String> {
        let t = s.trim();
        if let Ok(seconds) = t.parse::<u64>() {
            return Ok(Dur(Duration::from_secs(seconds)));
        }
        humantime::parse_duration(t)
            .map(Dur)
            .map_err(|e| format!("invalid duration {s:?}: {e} (try 500ms, 5s, 2m, or seconds: 30)"))
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

/// A byte count: `1048576`, `512k`, `64MiB`, `1G` (binary multiples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        let bad = || format!("invalid size {s:?} (try 4096, 512k, 64MiB, 1G)");
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        n.checked_mul(1 << shift).map(Size).ok_or_else(|| format!("size {s:?} is too large"))
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            n if n >= 1 << 30 && n % (1 << 30) == 0 => write!(f, "{}GiB", n >> 30),
            n if n >= 1 << 20 && n % (1 << 20) == 0 => write!(f, "{}MiB", n >> 20),
            n if n >= 1 << 10 && n % (1 << 10) == 0 => write!(f, "{}KiB", n >> 10),
            n => write!(f, "{n}"),
        }
    }
}

/// Both as strings in a configuration file; a bare number is read as the
/// command line would read it (seconds, bytes).
macro_rules! string_serde {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Raw {
                    Text(String),
                    Number(u64),
                }
                match Raw::deserialize(d)? {
                    Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
                    Raw::Number(n) => n.to_string().parse().map_err(serde::de::Error::custom),
                }
            }
        }
    };
}
string_serde!(Dur);
string_serde!(Size);

/// The host a bare `PORT` listens on: loopback, so that changing the port
/// never opens the server to the network by surprise.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// A listen address as typed, in `HOST:PORT` form: a bare `PORT` gets
/// [`DEFAULT_HOST`], `:PORT` every interface (`0.0.0.0`, as `:8080` means
/// in Go and Caddy); `HOST:PORT` and `[V6]:PORT` pass unchanged. Host
/// names are resolved by the caller.
pub fn listen_addr(s: &str) -> Result<String, String> {
    let t = s.trim();
    let port_ok = |p: &str| p.parse::<u16>().is_ok();
    if port_ok(t) {
        return Ok(format!("{DEFAULT_HOST}:{t}"));
    }
    if let Some(port) = t.strip_prefix(':') {
        if port_ok(port) {
            return Ok(format!("0.0.0.0:{port}"));
        }
    }
    match t.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port_ok(port) => Ok(t.to_string()),
        _ => Err(format!(
            "invalid address {s:?}: want HOST:PORT (127.0.0.1:8080, [::1]:8080), :PORT (every interface) \
             or PORT (on {DEFAULT_HOST})"
        )),
    }
}

/// `addr` with its port replaced by `port` (`--port` beside `--listen`).
pub fn with_port(addr: &str, port: u16) -> Result<String, String> {
    let full = listen_addr(addr)?;
    let (host, _) = full.rsplit_once(':').expect("listen_addr gives HOST:PORT");
    Ok(format!("{host}:{port}"))
}

/// The closest of `known` to `word` within a small edit distance: the
/// "did you mean" of a mistyped key or flag.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (edit_distance(word, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb)).min(row[j] + 1).min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_multiples() {
        assert_eq!("64MiB".parse::<Size>(), Ok(Size(64 << 20)));
        assert_eq!("10MB".parse::<Size>(), Ok(Size(10 << 20)));
        assert_eq!("512k".parse::<Size>(), Ok(Size(512 << 10)));
        assert_eq!("1G".parse::<Size>(), Ok(Size(1 << 30)));
        assert_eq!("4096".parse::<Size>(), Ok(Size(4096)));
        assert!("12q".parse::<Size>().unwrap_err().contains("try 4096"));
        assert!("99999999999G".parse::<Size>().unwrap_err().contains("too large"));
        assert_eq!(Size(64 << 20).to_string(), "64MiB");
    }

    #[test]
    fn durations_parse_with_units_or_as_seconds() {
        assert_eq!("1500ms".parse::<Dur>(), Ok(Dur(Duration::from_millis(1500))));
        assert_eq!("2m".parse::<Dur>(), Ok(Dur(Duration::from_secs(120))));
        assert_eq!("30".parse::<Dur>(), Ok(Dur(Duration::from_secs(30))));
        assert_eq!("0".parse::<Dur>(), Ok(Dur(Duration::ZERO)));
        assert!("5 parsecs".parse::<Dur>().unwrap_err().contains("try 500ms"));
        assert_eq!(Dur(Duration::from_millis(1500)).to_string(), "1s 500ms");
    }

    #[test]
    fn a_config_file_reads_them_as_the_command_line_does() {
        #[derive(Deserialize)]
        struct File {
            size: Size,
            wait: Dur,
        }
        let f: File = toml::from_str("size = \"10MiB\"\nwait = 30\n").unwrap();
        assert_eq!((f.size, f.wait), (Size(10 << 20), Dur(Duration::from_secs(30))));
    }

    #[test]
    fn listen_addresses_as_people_type_them() {
        assert_eq!(listen_addr("8080").as_deref(), Ok("127.0.0.1:8080"));
        assert_eq!(listen_addr(":8080").as_deref(), Ok("0.0.0.0:8080"));
        assert_eq!(listen_addr("10.0.0.1:80").as_deref(), Ok("10.0.0.1:80"));
        assert_eq!(listen_addr("[::1]:0").as_deref(), Ok("[::1]:0"));
        assert_eq!(listen_addr("localhost:9000").as_deref(), Ok("localhost:9000"));
        assert!(listen_addr("localhost").unwrap_err().contains("want HOST:PORT"));
        assert!(listen_addr("70000").is_err());
        assert_eq!(with_port("0.0.0.0:8080", 9000).as_deref(), Ok("0.0.0.0:9000"));
        assert_eq!(with_port("[::1]:1", 2).as_deref(), Ok("[::1]:2"));
    }

    #[test]
    fn did_you_mean() {
        let keys = ["cache-size", "max-body", "listen"];
        assert_eq!(closest("cahce-size", keys), Some("cache-size"));
        assert_eq!(closest("lisen", keys), Some("listen"));
        assert_eq!(closest("threads", keys), None);
    }
}
