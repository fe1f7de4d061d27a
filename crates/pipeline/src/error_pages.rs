//! `--error-page STATUS=PATH`: the site's own page for an error status, as
//! nginx's `error_page 404 /errors/404.html` — served with the original
//! status; when the page itself cannot be served, the built-in one is.

/// The configured pages, by status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorPages {
    pages: Vec<(u16, String)>,
}

impl ErrorPages {
    /// Rules as typed: `404=/errors/404.html` each; the status is a
    /// client or server error (400–599), the path a plain URL path of
    /// the site. A status named twice keeps its first page.
    pub fn parse<S: AsRef<str>>(rules: &[S]) -> Result<ErrorPages, String> {
        let mut pages: Vec<(u16, String)> = Vec::new();
        for rule in rules {
            let rule = rule.as_ref();
            let (status, path) = rule
                .split_once('=')
                .ok_or_else(|| format!("{rule:?}: want STATUS=PATH, e.g. 404=/404.html"))?;
            let status: u16 = status
                .trim()
                .parse()
                .ok()
                .filter(|s| (400..=599).contains(s))
                .ok_or_else(|| format!("{rule:?}: the status must be an error, 400 to 599"))?;
            let path = path.trim();
            if crate::resolve::normalize(path).ok().as_deref() != Some(path) {
                return Err(format!(
                    "{rule:?}: {path:?} is not a plain URL path of the site (/errors/404.html)"
                ));
            }
            if !pages.iter().any(|(s, _)| *s == status) {
                pages.push((status, path.to_string()));
            }
        }
        Ok(ErrorPages { pages })
    }

    /// Every configured page: its status and its URL path.
    pub fn pages(&self) -> impl Iterator<Item = (u16, &str)> {
        self.pages.iter().map(|(s, p)| (*s, p.as_str()))
    }

    /// The page for `status`, if one is configured.
    pub fn for_status(&self, status: u16) -> Option<&str> {
        self.pages.iter().find(|(s, _)| *s == status).map(|(_, p)| p.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let pages =
            ErrorPages::parse(&["404=/errors/404.html", " 500 = /oops.html", "404=/other.html"]).unwrap();
        assert_eq!(pages.for_status(404), Some("/errors/404.html"));
        assert_eq!(pages.for_status(500), Some("/oops.html"));
        assert_eq!(pages.for_status(403), None);
        for bad in ["404", "200=/x.html", "abc=/x.html", "404=x.html", "404=/../x.html", "404=/a//b.html"] {
            assert!(ErrorPages::parse(&[bad]).is_err(), "{bad}");
        }
    }
}
