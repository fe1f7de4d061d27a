//! Directory listing pages, and the HTML escaping shared with error pages.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::SystemTime;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// One directory entry as shown in a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file name (one path segment, not encoded).
    pub name: String,
    /// Whether the entry is a directory; its link then ends in '/'.
    pub is_dir: bool,
    /// Size in bytes (not shown for directories).
    pub len: u64,
    /// Last modification time.
    pub modified: SystemTime,
}

/// Everything except RFC 3986 §2.3 unreserved characters is encoded. Being
/// stricter than the grammar needs costs nothing and means that a name such
/// as `a:b` cannot be read as a scheme (RFC 3986 §4.2), and that `#`, `?`,
/// `%`, quotes and `&` can neither end the path nor the HTML attribute.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em}\
table{border-collapse:collapse}\
th,td{padding:.2em 1em;text-align:left}\
td.size{text-align:right;font-variant-numeric:tabular-nums}\
tr:nth-child(even){background:#f4f4f4}\
.summary{color:#555}";

/// Renders an HTML5 page listing `entries` of the directory at `url_path`.
///
/// `url_path` is the decoded, normalised request path and ends with '/'.
/// The entries are sorted in place: directories first, then by name,
/// ignoring case (`a.txt`, `B.txt`, `c.txt`, as Caddy and file managers
/// sort; names equal but for case keep a stable order by their bytes).
/// Links are relative, so the page stays correct behind a path-rewriting
/// proxy. Under the title, a summary counts the directories and files and
/// adds up the files' sizes.
pub fn render(url_path: &str, entries: &mut [Entry]) -> String {
    entries.sort_by_cached_key(|e| (!e.is_dir, e.name.to_lowercase(), e.name.clone()));
    let dirs = entries.iter().filter(|e| e.is_dir).count();
    let files = entries.len() - dirs;
    let bytes: u64 = entries.iter().filter(|e| !e.is_dir).map(|e| e.len).sum();
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let summary = format!(
        "{}, {} ({})",
        plural(dirs, "directory", "directories"),
        plural(files, "file", "files"),
        human_size(bytes)
    );

    let title = html_escape(url_path);
    let mut page = String::with_capacity(512 + entries.len() * 160);
    // `write!` into a String cannot fail; the results are ignored for that reason.
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Index of {title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>Index of {title}</h1>\n<p class=\"summary\">{summary}</p>\n<table>\n\
         <thead><tr><th>Name</th><th>Size</th><th>Last modified (UTC)</th></tr></thead>\n<tbody>\n"
    );
    if url_path != "/" {
        page.push_str("<tr><td><a href=\"../\">../</a></td><td class=\"size\">-</td><td></td></tr>\n");
    }
    for entry in entries.iter() {
        // The href is percent-encoded down to unreserved characters and '%',
        // none of which is special in an HTML attribute, so it needs no
        // further escaping.
        let href = utf8_percent_encode(&entry.name, SEGMENT);
        let slash = if entry.is_dir { "/" } else { "" };
        let name = html_escape(&entry.name);
        let size = if entry.is_dir { Cow::Borrowed("-") } else { Cow::Owned(human_size(entry.len)) };
        let modified = httpdate::fmt_http_date(entry.modified);
        let _ = writeln!(
            page,
            "<tr><td><a href=\"{href}{slash}\">{name}{slash}</a></td>\
             <td class=\"size\">{size}</td><td>{modified}</td></tr>"
        );
    }
    page.push_str("</tbody>\n</table>\n</body>\n</html>\n");
    page
}

/// Escapes `&`, `<`, `>`, `"` and `'` so `s` is safe both as HTML text and
/// inside a quoted attribute. Borrows when nothing needs escaping.
pub fn html_escape(s: &str) -> Cow<'_, str> {
    let special = |c: char| matches!(c, '&' | '<' | '>' | '"' | '\'');
    let Some(first) = s.find(special) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 16);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Sizes in binary units with one decimal, as `ls -lh` and nginx's
/// `autoindex_exact_size off` show them.
fn human_size(len: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if len < 1024 {
        return format!("{len} B");
    }
    // f64 loses precision above 2^53 bytes, far below the one decimal shown.
    let mut value = len as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn entry(name: &str, is_dir: bool, len: u64) -> Entry {
        Entry { name: name.to_owned(), is_dir, len, modified: UNIX_EPOCH + Duration::from_secs(784_111_777) }
    }

    #[test]
    fn escape_borrows_when_clean() {
        assert!(matches!(html_escape("plain text é"), Cow::Borrowed(_)));
    }

    #[test]
    fn escape_specials() {
        assert_eq!(
            html_escape("<script>alert('x')</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
        );
        assert_eq!(html_escape("a \"b\" & c"), "a &quot;b&quot; &amp; c");
        assert_eq!(html_escape("&amp;"), "&amp;amp;");
    }

    #[test]
    fn names_are_escaped_in_text() {
        let mut entries = vec![entry("<script>x</script>", false, 1)];
        let page = render("/", &mut entries);
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;script&gt;x&lt;/script&gt;"));
    }

    #[test]
    fn title_is_escaped() {
        let page = render("/a&b<c>/", &mut []);
        assert!(page.contains("<title>Index of /a&amp;b&lt;c&gt;/</title>"));
    }

    #[test]
    fn hrefs_are_percent_encoded() {
        let cases = [
            ("a b.txt", "a%20b.txt"),
            ("x#y", "x%23y"),
            ("q?r", "q%3Fr"),
            ("100%", "100%25"),
            ("café", "caf%C3%A9"),
            ("say\"hi\"", "say%22hi%22"),
            ("it's&co", "it%27s%26co"),
            ("javascript:alert(1)", "javascript%3Aalert%281%29"),
            ("keep-._~", "keep-._~"),
        ];
        for (name, href) in cases {
            let page = render("/", &mut [entry(name, false, 1)]);
            assert!(page.contains(&format!("href=\"{href}\"")), "{name}: {page}");
        }
    }

    #[test]
    fn directories_get_trailing_slash() {
        let page = render("/", &mut [entry("sub dir", true, 0)]);
        assert!(page.contains("href=\"sub%20dir/\">sub dir/</a>"));
    }

    #[test]
    fn directories_first_then_by_name() {
        let mut entries = vec![
            entry("b.txt", false, 1),
            entry("z", true, 0),
            entry("a.txt", false, 1),
            entry("c", true, 0),
        ];
        render("/", &mut entries);
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["c", "z", "a.txt", "b.txt"]);
        let page = render("/", &mut entries);
        let pos = |s: &str| page.find(s).unwrap();
        assert!(pos(">c/<") < pos(">z/<"));
        assert!(pos(">z/<") < pos(">a.txt<"));
        assert!(pos(">a.txt<") < pos(">b.txt<"));
    }

    #[test]
    fn names_sort_ignoring_case_and_the_summary_counts() {
        let mut entries = vec![
            entry("b.txt", false, 1000),
            entry("Zeta", true, 0),
            entry("README", false, 2048),
            entry("alpha", true, 0),
            entry("a.txt", false, 24),
            entry("A.txt", false, 0),
        ];
        let page = render("/docs/", &mut entries);
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["alpha", "Zeta", "A.txt", "a.txt", "b.txt", "README"]);
        assert!(page.contains("<p class=\"summary\">2 directories, 4 files (3.0 KiB)</p>"), "{page}");
        let mut one = vec![entry("only", false, 5)];
        assert!(render("/", &mut one).contains(">0 directories, 1 file (5 B)<"));
    }

    #[test]
    fn parent_link_except_at_root() {
        assert!(!render("/", &mut []).contains("href=\"../\""));
        assert!(render("/docs/", &mut []).contains("href=\"../\""));
    }

    #[test]
    fn page_shape() {
        let page = render("/", &mut [entry("f", false, 1536)]);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<meta charset=\"utf-8\">"));
        assert!(page.contains("1.5 KiB"));
        assert!(page.contains("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert!(!page.contains("http://") && !page.contains("https://"));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KiB");
        assert_eq!(human_size(10 * 1024 * 1024 + 512 * 1024), "10.5 MiB");
        assert_eq!(human_size(u64::MAX), "16.0 EiB");
    }
}
