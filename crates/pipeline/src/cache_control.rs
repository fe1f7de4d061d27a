//! `--cache-control`: which `Cache-Control` the site's files are served
//! with, by rules on their paths, in the order given (the first that
//! matches wins), as Caddy's and nginx's per-location `expires` /
//! `add_header Cache-Control` are used. An HTTP/1.0 client, which may know
//! only `Expires`, gets one derived from `max-age` (RFC 9111 §5.3). A 304
//! carries the same field as the 200 it stands for (RFC 9110 §15.4.5).

use std::time::{Duration, SystemTime};

/// One rule: a pattern and the field's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// `*` (any run of characters) and `?` (one); a pattern with a `/` is
    /// matched against the whole URL path, one without against the file
    /// name (`*.css`).
    pattern: String,
    /// The `Cache-Control` value.
    value: String,
    /// Its `max-age`, for `Expires`.
    max_age: Option<u64>,
}

impl Rule {
    /// The `Cache-Control` value.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// `Expires` for a response sent at `now`, if the rule has a `max-age`.
    pub fn expires(&self, now: SystemTime) -> Option<String> {
        self.max_age.map(|age| h1::format_http_date(now + Duration::from_secs(age)))
    }
}

/// The rules, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    rules: Vec<Rule>,
}

impl CacheControl {
    /// Rules as typed: `PATTERN=VALUE` each, e.g. `*.css=max-age=31536000,
    /// immutable`. A value that could break the response head (control
    /// characters) is refused.
    pub fn parse<S: AsRef<str>>(rules: &[S]) -> Result<CacheControl, String> {
        let rules = rules
            .iter()
            .map(|rule| {
                let rule = rule.as_ref();
                let (pattern, value) = rule
                    .split_once('=')
                    .ok_or_else(|| format!("{rule:?}: want PATTERN=VALUE, e.g. *.css=max-age=31536000"))?;
                let (pattern, value) = (pattern.trim(), value.trim());
                if pattern.is_empty() || value.is_empty() {
                    return Err(format!("{rule:?}: want PATTERN=VALUE, e.g. *.html=no-cache"));
                }
                if value.chars().any(|c| c.is_control()) {
                    return Err(format!("{rule:?}: control characters in the value"));
                }
                let max_age = value.split(',').find_map(|directive| {
                    let (name, age) = directive.trim().split_once('=')?;
                    name.trim().eq_ignore_ascii_case("max-age").then(|| age.trim().parse().ok())?
                });
                Ok(Rule { pattern: pattern.to_string(), value: value.to_string(), max_age })
            })
            .collect::<Result<_, _>>()?;
        Ok(CacheControl { rules })
    }

    /// Whether there are no rules (nothing is added to any response).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule for the file at URL path `path` (a directory's path names
    /// its `index.html`).
    pub fn for_path(&self, path: &str) -> Option<&Rule> {
        if self.rules.is_empty() {
            return None;
        }
        let indexed;
        let path = if path.ends_with('/') {
            indexed = format!("{path}index.html");
            indexed.as_str()
        } else {
            path
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        self.rules.iter().find(|rule| {
            let subject = if rule.pattern.contains('/') { path } else { name };
            glob(rule.pattern.as_bytes(), subject.as_bytes())
        })
    }

    /// The rules as typed, for `--print-config`.
    pub fn to_strings(&self) -> Vec<String> {
        self.rules.iter().map(|r| format!("{}={}", r.pattern, r.value)).collect()
    }
}

/// `*` and `?` wildcards, iteratively (no backtracking blow-up).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> CacheControl {
        CacheControl::parse(list).unwrap()
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let cc = rules(&["/static/*=max-age=31536000, immutable", "*.html=no-cache", "*=max-age=60"]);
        let value = |path: &str| cc.for_path(path).map(Rule::value);
        assert_eq!(value("/static/app.css"), Some("max-age=31536000, immutable"));
        assert_eq!(value("/static/deep/x.html"), Some("max-age=31536000, immutable"), "first match");
        assert_eq!(value("/about.html"), Some("no-cache"));
        assert_eq!(value("/docs/"), Some("no-cache"), "a directory serves its index.html");
        assert_eq!(value("/logo.png"), Some("max-age=60"));
        assert_eq!(CacheControl::default().for_path("/a"), None);
    }

    #[test]
    fn patterns_without_a_slash_match_the_file_name() {
        let cc = rules(&["*.css=a", "?.js=b"]);
        assert_eq!(cc.for_path("/x/y/site.css").map(Rule::value), Some("a"));
        assert_eq!(cc.for_path("/x/a.js").map(Rule::value), Some("b"));
        assert_eq!(cc.for_path("/x/ab.js"), None);
        assert_eq!(cc.for_path("/css/site.cssx"), None);
    }

    #[test]
    fn max_age_gives_expires() {
        let cc = rules(&["*=public, Max-Age=3600", "*.txt=no-store"]);
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(cc.for_path("/a").unwrap().expires(at).as_deref(), Some("Sun, 06 Nov 1994 09:49:37 GMT"));
        let cc = rules(&["*=no-store"]);
        assert_eq!(cc.for_path("/a").unwrap().expires(at), None);
    }

    #[test]
    fn bad_rules_are_refused_with_the_form() {
        assert!(CacheControl::parse(&["*.css"]).unwrap_err().contains("PATTERN=VALUE"));
        assert!(CacheControl::parse(&["=x"]).is_err());
        assert!(CacheControl::parse(&["*.css="]).is_err());
        assert!(CacheControl::parse(&["*=a\r\nSet-Cookie: x"]).unwrap_err().contains("control"));
    }

    #[test]
    fn glob_needs_no_backtracking_blow_up() {
        let text = "a".repeat(10_000);
        assert!(!glob(b"*a*a*a*a*a*b", text.as_bytes()));
        assert!(glob(b"*a*a*", text.as_bytes()));
        assert!(glob(b"", b"") && !glob(b"", b"x") && glob(b"*", b""));
    }
}
