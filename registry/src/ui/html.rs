//! The HTML of the web pages: an escaping writer ([`Html`]), the escaping wrappers for text
//! ([`Esc`]) and URL query values ([`Q`]), and the page frame ([`page`]) with its inline style.
//!
//! A hand-written helper rather than a template crate (maud, askama): the pages are a few
//! tables and forms, the helper is a hundred lines with no proc-macro to compile, and every
//! value still goes through one escaping function. The rule that keeps it safe: values are only
//! ever written through [`Esc`] (text and attribute values) or [`Q`] (query values inside an
//! attribute); `raw` takes `&'static str` only, so nothing from a request or the store can
//! reach the page unescaped.

use std::fmt::{self, Display, Write as _};

/// Text escaped for HTML element content and double-quoted attribute values.
pub(crate) struct Esc<'a>(pub &'a str);

impl Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// A URL query value: percent-encoded, then HTML-escaped (for `href="...?q={Q}"`).
pub(crate) struct Q<'a>(pub &'a str);

impl Display for Q<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let enc: String = form_urlencoded::byte_serialize(self.0.as_bytes()).collect();
        Esc(&enc).fmt(f)
    }
}

/// A page being written. `raw` takes only static markup; values go through `write!` with
/// [`Esc`] or [`Q`].
#[derive(Default)]
pub(crate) struct Html(String);

impl Html {
    /// Static markup.
    pub fn raw(&mut self, s: &'static str) -> &mut Self {
        self.0.push_str(s);
        self
    }

    /// Escaped text.
    pub fn text(&mut self, s: &str) -> &mut Self {
        let _ = write!(self.0, "{}", Esc(s));
        self
    }

    /// The markup so far.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Write for Html {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.push_str(s);
        Ok(())
    }
}

/// The inline style: no fonts, images or other fetches. Tables scroll sideways inside their
/// wrapper on a narrow screen; links and fields show a thick outline on keyboard focus.
const STYLE: &str = "
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1b1f24;background:#fff}
header{background:#7a1f1f;color:#fff;padding:.5rem 1rem;display:flex;flex-wrap:wrap;gap:.25rem 1.25rem;align-items:center}
header a{color:#fff}
header .brand{font-weight:700;text-decoration:none;margin-right:auto}
main{padding:1rem;max-width:80rem;margin:0 auto}
h1{font-size:1.4rem;margin:.5rem 0 1rem;overflow-wrap:anywhere}
h2{font-size:1.15rem;margin:1.5rem 0 .5rem}
a{color:#0b57a4}
a:focus-visible,button:focus-visible,input:focus-visible{outline:3px solid #e8a317;outline-offset:2px}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;border:1px solid #d0d7de;border-radius:4px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #d0d7de;vertical-align:top}
th{background:#f6f8fa;white-space:nowrap}
td{overflow-wrap:anywhere}
td ul{margin:0;padding-left:1.1rem}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
form{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;margin:0 0 1rem}
label{display:flex;flex-direction:column;font-size:.9rem}
input{font:inherit;padding:.3rem .5rem;border:1px solid #8c959f;border-radius:4px;min-width:12rem}
button{font:inherit;padding:.3rem .9rem;border:1px solid #7a1f1f;background:#7a1f1f;color:#fff;border-radius:4px;cursor:pointer}
.badge{display:inline-block;padding:0 .4rem;border-radius:3px;background:#1a7f37;color:#fff;font-size:.8rem}
.muted{color:#57606a}
a.kind{display:inline-block;padding:0 .4rem;margin:0 .2rem .1rem 0;border:1px solid #0b57a4;border-radius:3px;font-size:.8rem;text-decoration:none}
tr.tag td{border-bottom:0}
tr.pull td{padding-top:0;font-size:.85rem}
ul.pull{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:.1rem 1.25rem}
.copy{user-select:all;-webkit-user-select:all;background:#f6f8fa;padding:0 .25rem;border-radius:3px;overflow-wrap:anywhere}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0}
dt{font-weight:600}
dd{margin:0;overflow-wrap:anywhere}
nav.pages{margin:1rem 0}
.skip{position:absolute;left:-100vw;top:0;background:#fff;color:#0b57a4;padding:.5rem}
.skip:focus{left:0;z-index:1}
@media (max-width:40rem){dl{grid-template-columns:1fr}dd{margin-bottom:.4rem}}
";

/// A whole page: `title` in the tab and the heading, `who` (the logged-in user) in the header
/// with a login link when anonymous under `[auth]`, then `body`.
pub(crate) fn page(title: &str, who: Who<'_>, body: &str) -> String {
    let mut h = Html::default();
    h.raw("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<meta name=\"referrer\" content=\"no-referrer\"><title>");
    h.text(title).raw(" · rdctl registry</title><style>");
    h.raw(STYLE)
        .raw("</style></head><body><header>")
        .raw("<a class=\"brand\" href=\"/ui/\">rdctl registry</a>")
        .raw("<a href=\"/ui/\">Repositories</a><a href=\"/ui/search\">Package search</a>");
    match who {
        Who::Open => {}
        Who::Anonymous => {
            h.raw("<a href=\"/ui/login\">Log in</a>");
        }
        Who::User(u) => {
            let _ = write!(h, "<span>Signed in as <strong>{}</strong></span>", Esc(u));
        }
    }
    h.raw("</header><main id=\"main\"><h1>");
    h.text(title).raw("</h1>");
    let _ = h.write_str(body);
    h.raw("</main></body></html>\n");
    h.into_string()
}

/// Who is looking, for the page header.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Who<'a> {
    /// No `[auth]`: no login.
    Open,
    /// Anonymous under `[auth]`.
    Anonymous,
    /// A user.
    User(&'a str),
}

/// Bytes as `12.3 MiB`.
pub(crate) fn size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// How long ago `then` (seconds since 1970) was, from `now`: `5 minutes ago`, `3 days ago`.
pub(crate) fn age(then: u64, now: u64) -> String {
    validator::age(then as i64, now as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_text_and_attributes() {
        assert_eq!(
            Esc("<script>alert('x') & \"y\"</script>").to_string(),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
        assert_eq!(Esc("plain").to_string(), "plain");
        assert_eq!(Q("a b&c=<d>").to_string(), "a+b%26c%3D%3Cd%3E");
        let p = page("<b>", Who::User("<i>"), "");
        assert!(p.contains("<title>&lt;b&gt; ·"), "{p}");
        assert!(p.contains("<strong>&lt;i&gt;</strong>"), "{p}");
        assert!(p.contains("name=\"viewport\""), "{p}");
        assert!(!p.contains("http://") && !p.contains("https://"), "{p}");
    }

    #[test]
    fn sizes_and_ages() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(5 << 20), "5.0 MiB");
        assert_eq!(age(100, 100), "just now");
        assert_eq!(age(0, 120), "2 minutes ago");
        assert_eq!(age(0, 3600), "1 hour ago");
        assert_eq!(age(0, 86_400 * 3), "3 days ago");
        assert_eq!(age(200, 100), "in the future");
    }
}
