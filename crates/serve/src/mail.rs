//! A message for its page: decoded by core ([`decode`], the one message parser path of
//! mailvault, bounded on hostile structure), and its HTML part sanitized for the
//! sandboxed frame.
//!
//! The HTML goes through ammonia (an allow-list sanitizer on html5ever, the parser
//! browsers' behaviour is specified by): no scripts, no event handlers, no forms, no
//! `<style>`, `<meta>`, `<svg>`, `<iframe>` or `<object>`; no URL at all except a
//! same-document anchor (`href="#..."`), so nothing remote is ever loaded and no link
//! leaves; a `style` attribute only when it cannot load anything (no `url(`, `image`,
//! `@`, `\` escapes or comments). The frame's own CSP (`headers::FRAME_CSP`) forbids
//! loading anything but inline `data:` images whatever the sanitizer lets through.

pub use mailvault_core::search::show::decode;
use std::collections::HashSet;

/// The HTML body of `raw`, sanitized ([`sanitize`]); `None` when it has none. Parsed as
/// everything in mailvault parses a message ([`mailvault_core::search::show::html_body`]:
/// bounded on hostile structure).
pub fn html(raw: &[u8]) -> Option<String> {
    mailvault_core::search::show::html_body(raw).map(|h| sanitize(&h))
}

/// Whether a `style` attribute's value can load nothing: none of what CSS fetches with
/// (`url(`, `image(`/`image-set(`, `@import`), escapes that could spell them, comments
/// that could split them, or old IE's `expression(`/`behavior`.
fn inert_style(v: &str) -> bool {
    let v = v.to_ascii_lowercase();
    ![
        "url",
        "image",
        "@",
        "\\",
        "/*",
        "expression",
        "behavior",
        "binding",
        "src",
    ]
    .iter()
    .any(|bad| v.contains(bad))
}

/// Keeps a relative URL only when it is a same-document anchor.
struct AnchorsOnly;

impl ammonia::UrlRelativeEvaluate<'static> for AnchorsOnly {
    fn evaluate<'url>(&self, url: &'url str) -> Option<std::borrow::Cow<'url, str>> {
        url.starts_with('#')
            .then_some(std::borrow::Cow::Borrowed(url))
    }
}

/// `html` with everything that could run, load or send removed (see the module's doc).
pub fn sanitize(html: &str) -> String {
    let mut b = ammonia::Builder::default();
    // No scheme is allowed: every absolute URL goes; relative ones only when they are a
    // same-document anchor.
    b.url_schemes(HashSet::new());
    b.url_relative(ammonia::UrlRelative::Custom(Box::new(AnchorsOnly)));
    b.rm_tags(["img"]);
    b.add_generic_attributes(["style"]);
    b.attribute_filter(|_element, attribute, value| match attribute {
        "style" => inert_style(value).then(|| value.into()),
        "href" => value.starts_with('#').then(|| value.into()),
        // Whatever else could name a URL, whether or not the allow-list has it.
        "src" | "srcset" | "action" | "formaction" | "background" | "poster" | "cite"
        | "longdesc" | "usemap" | "lowsrc" | "dynsrc" | "data" | "xlink:href" | "ping" => None,
        _ => Some(value.into()),
    });
    b.clean(html).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = r##"<html><head><meta http-equiv="refresh" content="0;url=http://evil.example/">
<style>body{background:url(http://evil.example/bg.png)}</style>
<link rel="stylesheet" href="http://evil.example/x.css"><base href="http://evil.example/"></head>
<body onload="alert(1)"><p>hello <b>world</b></p>
<script>alert('x')</script><img src="http://evil.example/track.gif" onerror="alert(2)">
<a href="javascript:alert(3)">js</a> <a href="data:text/html,<script>alert(4)</script>">data</a>
<a href="http://evil.example/">out</a> <a href="//evil.example/">proto-relative</a>
<a href="#top">anchor</a>
<div style="background-image: url(http://evil.example/i.png)">css</div>
<div style="background: u\72l(http://evil.example/e.png)">escaped</div>
<div style="color: red">red</div>
<svg><script>alert(5)</script><image href="http://evil.example/s.png"/></svg>
<form action="http://evil.example/"><input name="p"><button>go</button></form>
<iframe src="http://evil.example/"></iframe><object data="http://evil.example/o"></object>
<video poster="http://evil.example/p.png"></video><table background="http://evil.example/t.png"><tr><td>t</td></tr></table>
</body></html>"##;

    #[test]
    fn hostile_html_keeps_its_text_and_loses_everything_active() {
        let out = sanitize(HOSTILE);
        let low = out.to_ascii_lowercase();
        for bad in [
            "<script",
            "onload",
            "onerror",
            "javascript:",
            "data:",
            "evil.example",
            "<meta",
            "<style",
            "<link",
            "<base",
            "<svg",
            "<image",
            "<form",
            "<input",
            "<button",
            "<iframe",
            "<object",
            "<img",
            "url(",
            "\\72",
            "alert",
            "poster",
            "background",
        ] {
            assert!(!low.contains(bad), "{bad} left in:\n{out}");
        }
        for good in [
            "hello",
            "<b>world</b>",
            "href=\"#top\"",
            "color: red",
            ">t</td>",
        ] {
            assert!(out.contains(good), "{good} missing from:\n{out}");
        }
    }

    #[test]
    fn a_message_is_decoded() {
        let raw = "From: =?utf-8?q?J=C3=BCrgen?= <j@example.org>\r\nTo: a@example.org\r\n\
            Subject: =?utf-8?b?R3LDvMOfZQ==?=\r\nMIME-Version: 1.0\r\n\
            Content-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\nContent-Type: text/plain\r\n\r\n\
            body text\r\n--B\r\nContent-Type: text/html\r\n\r\n<p onclick=x()>hi</p>\r\n\
            --B\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; \
            filename=\"../../x.html\"\r\n\r\nPDF\r\n--B--\r\n";
        let d = decode(raw.as_bytes());
        assert_eq!(d.from, "Jürgen <j@example.org>");
        assert_eq!(d.subject, "Grüße");
        assert_eq!(d.text.trim(), "body text");
        assert!(d
            .attachments
            .iter()
            .any(|a| a.name.as_deref() == Some("../../x.html")));
        assert!(decode(b"").subject.is_empty());
    }
}
