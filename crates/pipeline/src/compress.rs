//! Content codings (RFC 9110 §8.4): `--compress` and `--precompressed`.
//! Which codings a client accepts (`Accept-Encoding`, §12.5.3, q-values
//! and `identity;q=0` included), which files are worth encoding, and the
//! encoders themselves — the `flate2`, `brotli` and `zstd` crates.
//!
//! A cached file is encoded once per coding and the result kept beside
//! its bytes in the cache entry (`cache::Entry::variant`), so a hot file
//! costs the same per request encoded as not.

use std::io::{self, Write as _};

/// A content coding modus can send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    /// Brotli (RFC 7932).
    Br,
    /// Zstandard (RFC 8878).
    Zstd,
    /// gzip (RFC 1952).
    Gzip,
}

impl Coding {
    /// Every coding, in the order of `--precompressed`'s preference.
    pub const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// Its name in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The suffix of a precompressed file (`FILE.br`, as nginx's
    /// `gzip_static` and Caddy's `precompressed` look for).
    pub fn extension(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }

    /// Its slot in a cache entry's variants.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The coding `name` stands for (`x-gzip` is gzip, RFC 9110 §8.4.1.3).
    pub fn from_token(name: &str) -> Option<Coding> {
        Some(match name.to_ascii_lowercase().as_str() {
            "br" => Coding::Br,
            "zstd" => Coding::Zstd,
            "gzip" | "x-gzip" => Coding::Gzip,
            _ => return None,
        })
    }

    /// `data` encoded. Levels are chosen for content encoded once and
    /// served many times: brotli 9 and zstd 12 are within a few percent of
    /// their maximum ratio at a small fraction of its time (a 50 KB page
    /// takes about a millisecond at either), gzip 6 is zlib's default.
    pub fn encode(self, data: &[u8]) -> io::Result<Vec<u8>> {
        let out = Vec::with_capacity(data.len() / 3 + 64);
        match self {
            Coding::Gzip => {
                let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::new(6));
                encoder.write_all(data)?;
                encoder.finish()
            }
            Coding::Br => {
                let params = brotli::enc::BrotliEncoderParams {
                    quality: 9,
                    lgwin: 22,
                    size_hint: data.len(),
                    ..Default::default()
                };
                let mut out = out;
                brotli::BrotliCompress(&mut &data[..], &mut out, &params)?;
                Ok(out)
            }
            Coding::Zstd => zstd::bulk::compress(data, 12),
        }
    }
}

/// What `--compress` and `--precompressed` ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compression {
    /// Codings encoded on the fly, in the server's order of preference
    /// (for a client that likes several equally); empty: `--compress` off.
    pub codings: Vec<Coding>,
    /// Serve `FILE.br`, `FILE.zst`, `FILE.gz` when present and not older.
    pub precompressed: bool,
    /// Media types worth encoding: `text/*`, `application/json`, or
    /// `*+xml` (a structured-syntax suffix).
    pub types: Vec<String>,
    /// Smaller files are sent as they are: the coding's own framing
    /// would eat most of the gain (Caddy's `minimum_length`).
    pub min_size: u64,
    /// The pipeline runs on an event loop's thread, where encoding a large
    /// file would stall every connection of the loop: files past
    /// [`ENCODE_INLINE_MAX`] are encoded by the background encoder, and
    /// sent as they are until it is done.
    pub aside: bool,
}

/// Past this size a file's first encoding on an event loop is made aside
/// (brotli at quality 9 takes a few milliseconds per 16 KiB; the 912 KB
/// JSON of issue 32 took 0.28–0.45 s, every other connection waiting).
pub const ENCODE_INLINE_MAX: u64 = 16 << 10;

/// Runs `job` on the background encoder: two threads at most, started on
/// first use, fed in order — first encodings are rare (once per file and
/// coding), and a bounded pool keeps a burst of them from taking the CPUs
/// the loops need.
pub(crate) fn in_background(job: Box<dyn FnOnce() + Send>) {
    type Job = Box<dyn FnOnce() + Send>;
    static QUEUE: std::sync::OnceLock<std::sync::mpsc::Sender<Job>> = std::sync::OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        for n in 0..2 {
            let rx = std::sync::Arc::clone(&rx);
            // A thread that cannot be started leaves the work to the other;
            // with neither, `send` fails below and the job runs here.
            let _ = std::thread::Builder::new().name(format!("encoder-{n}")).spawn(move || {
                // The encoders share the loops' CPUs (a server pinned to one
                // core pins them too): at nice 19 the scheduler gives a loop
                // that has work ~98 % of the core, an encoder the rest. On
                // Linux the nice value is the calling thread's alone.
                let _ = rustix::process::setpriority_process(None, 19);
                loop {
                    let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            });
        }
        tx
    });
    if let Err(std::sync::mpsc::SendError(job)) = queue.send(job) {
        job();
    }
}

impl Default for Compression {
    fn default() -> Compression {
        Compression {
            codings: Vec::new(),
            precompressed: false,
            types: Self::TYPES.iter().map(|t| t.to_string()).collect(),
            min_size: Self::MIN_SIZE,
            aside: false,
        }
    }
}

impl Compression {
    /// `--compress-types`' default: text, scripts, data and vector images.
    pub const TYPES: [&'static str; 8] = [
        "text/*",
        "application/javascript",
        "application/json",
        "application/xml",
        "application/wasm",
        "image/svg+xml",
        "*+json",
        "*+xml",
    ];

    /// `--compress-min-size`'s default (Caddy's).
    pub const MIN_SIZE: u64 = 512;

    /// Whether anything is ever encoded.
    pub fn is_on(&self) -> bool {
        !self.codings.is_empty() || self.precompressed
    }

    /// Parses `br,zstd,gzip` (any subset, in order of preference).
    pub fn parse_codings(list: &str) -> Result<Vec<Coding>, String> {
        let mut codings = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let coding = Coding::from_token(name)
                .ok_or_else(|| format!("{name:?}: not a coding modus sends (br, zstd, gzip)"))?;
            if !codings.contains(&coding) {
                codings.push(coding);
            }
        }
        Ok(codings)
    }

    /// Whether `content_type` (parameters allowed) is in `types`.
    pub fn compressible(&self, content_type: &str) -> bool {
        let essence = content_type.split(';').next().unwrap_or("").trim();
        self.types.iter().any(|pattern| type_matches(pattern, essence))
    }
}

fn type_matches(pattern: &str, essence: &str) -> bool {
    if let Some(main) = pattern.strip_suffix("/*") {
        return essence.split('/').next().is_some_and(|t| t.eq_ignore_ascii_case(main));
    }
    if let Some(suffix) = pattern.strip_prefix('*') {
        return essence.len() >= suffix.len()
            && essence[essence.len() - suffix.len()..].eq_ignore_ascii_case(suffix);
    }
    pattern.eq_ignore_ascii_case(essence)
}

/// What a client's `Accept-Encoding` allows, of the codings `offered`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The acceptable codings, best first (ties in the order offered).
    ranked: [Option<Coding>; 3],
}

impl Accepted {
    /// The acceptable codings, best first.
    pub fn codings(&self) -> impl Iterator<Item = Coding> + '_ {
        self.ranked.iter().map_while(|c| *c)
    }
}

/// Reads `Accept-Encoding` (RFC 9110 §12.5.3) against `offered`, the
/// server's codings in its order of preference. No field: any coding is
/// acceptable, identity preferred (none is chosen). A coding is acceptable
/// with q > 0, named or through `*`. A malformed q counts as 0 for its
/// coding. Identity is always sent when no coding is chosen, even after
/// `identity;q=0` (`reply::choose` says why).
pub fn accepted(header: Option<&str>, offered: &[Coding]) -> Accepted {
    let Some(header) = header else {
        return Accepted { ranked: [None; 3] };
    };
    let mut star: Option<u16> = None;
    let mut named: [Option<u16>; 3] = [None; 3];
    for member in header.split(',') {
        let mut params = member.split(';');
        let name = params.next().unwrap_or("").trim();
        if name.is_empty() {
            continue;
        }
        let q = params
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1000), |(_, v)| qvalue(v.trim()))
            .unwrap_or(0);
        if name == "*" {
            star = Some(q);
        } else if let Some(coding) = Coding::from_token(name) {
            let slot = &mut named[coding.index()];
            // A coding named twice keeps its better weight.
            *slot = Some(slot.map_or(q, |old| old.max(q)));
        }
    }
    // Per request, so no allocation: at most the three codings there are.
    let mut ranked = [(0u16, 0usize, Coding::Br); 3];
    let mut n = 0;
    for (order, &c) in offered.iter().enumerate().take(ranked.len()) {
        let q = named[c.index()].or(star).unwrap_or(0);
        if q > 0 {
            ranked[n] = (q, order, c);
            n += 1;
        }
    }
    ranked[..n].sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = [None; 3];
    for (slot, (_, _, c)) in out.iter_mut().zip(&ranked[..n]) {
        *slot = Some(*c);
    }
    Accepted { ranked: out }
}

/// A qvalue (RFC 9110 §12.4.2) in thousandths; `None` if malformed.
fn qvalue(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_value = format!("{frac:0<3}").parse::<u16>().ok()?;
    match int {
        "0" => Some(frac_value),
        "1" if frac_value == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    fn ranked(header: &str, offered: &[Coding]) -> Vec<Coding> {
        accepted(Some(header), offered).codings().collect()
    }

    #[test]
    fn q_values_order_and_exclude() {
        let all = [Br, Zstd, Gzip];
        assert_eq!(ranked("gzip, br", &all), [Br, Gzip], "ties: the server's order");
        assert_eq!(ranked("br;q=0.5, gzip", &all), [Gzip, Br]);
        assert_eq!(ranked("br;q=0, *", &all), [Zstd, Gzip]);
        assert_eq!(ranked("x-gzip", &all), [Gzip]);
        assert_eq!(ranked("GZIP;Q=1.000", &all), [Gzip]);
        assert_eq!(ranked("gzip;q=1.5, br;q=abc", &all), [], "malformed weights exclude");
        assert_eq!(ranked("", &all), [], "empty: identity only");
        assert_eq!(ranked("br", &[Gzip]), [], "only what is offered");
        assert_eq!(ranked("deflate, compress", &all), []);
        assert_eq!(ranked("gzip, identity;q=0", &all), [Gzip]);
        assert_eq!(ranked("*;q=0", &all), []);
        assert_eq!(ranked("identity;q=0.001", &all), []);
        assert!(accepted(None, &all).codings().next().is_none());
    }

    #[test]
    fn types() {
        let c = Compression::default();
        assert!(c.compressible("text/html; charset=utf-8"));
        assert!(c.compressible("application/javascript; charset=utf-8"));
        assert!(c.compressible("image/svg+xml"));
        assert!(c.compressible("application/ld+json"));
        assert!(!c.compressible("image/png"));
        assert!(!c.compressible("application/octet-stream"));
    }

    #[test]
    fn round_trips() {
        use std::io::Read;
        let data: Vec<u8> = (0..20_000u32).flat_map(|i| format!("line {} ", i % 97).into_bytes()).collect();
        for coding in Coding::ALL {
            let encoded = coding.encode(&data).unwrap();
            assert!(encoded.len() < data.len() / 4, "{coding:?} compresses");
            let mut decoded = Vec::new();
            match coding {
                Gzip => {
                    flate2::read::GzDecoder::new(&encoded[..]).read_to_end(&mut decoded).unwrap();
                }
                Br => {
                    brotli::Decompressor::new(&encoded[..], 4096).read_to_end(&mut decoded).unwrap();
                }
                Zstd => decoded = zstd::decode_all(&encoded[..]).unwrap(),
            }
            assert_eq!(decoded, data, "{coding:?}");
        }
    }
}
