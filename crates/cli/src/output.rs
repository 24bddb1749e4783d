//! Human-readable formatting of sizes, rates and lists of failures, and [`safe`], through
//! which every text that comes from mail data or a repository passes on its way to a
//! terminal.

use mailvault_core::error::FailureKind;
use mailvault_core::report::Failure;
use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every character that could act on a terminal or reorder what it shows made
/// visible: C0 controls (newlines and tabs too), DEL and C1 controls as `\x1b`, bidi
/// embeddings, overrides, isolates and marks as `\u{202e}`. Mail decoded from hostile
/// headers (`ESC]2;...` sets the window title, `ESC[2J` clears the screen) then prints as
/// text. JSON output needs none of this: serde escapes controls there. Credentials in URLs
/// are taken out on the way ([`redact`]): errors and warnings quote
/// locations.
pub fn safe(s: &str) -> Cow<'_, str> {
    let s = redact(s);
    if !s.chars().any(unsafe_char) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if u32::from(c) < 0x100 {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    Cow::Owned(out)
}

/// Log events as the commands' own lines: `warning: message` (`error: message`), no
/// timestamp or module, control characters escaped as [`safe`] does.
pub struct PlainEvents;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for PlainEvents
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            _ => "debug",
        };
        let mut fields = String::new();
        tracing_subscriber::fmt::FormatFields::format_fields(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut fields),
            event,
        )?;
        writeln!(writer, "{level}: {}", safe(&fields))
    }
}

/// `text` with the user information of every URL in it removed
/// (`s3:https://key:secret@host/b` gives `s3:https://host/b`, `imap://u:p@h` gives
/// `imap://h`): errors and log lines quote locations, and a location may carry
/// credentials the user typed into it.
pub fn redact(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first '/', '?', '#' or anything that cannot be in a URL.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        // A user name alone (`imap://bob@example.org@mx`, an IMAP source's label) is no
        // secret and stays; `user:password@` goes whole.
        match authority.rfind('@') {
            Some(at) if authority[..at].contains(':') => out.push_str(&authority[at + 1..]),
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

fn unsafe_char(c: char) -> bool {
    c.is_control() // C0, DEL, C1
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// `n` things: "1 hard link", "3 hard links".
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub use mailvault_core::report::{human_bytes as bytes, utc_time as time};

pub fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}x"))
}

/// Items of a long list shown in the text output (`--json` has them all).
pub const SHOWN: usize = 5;

/// The first [`SHOWN`] items of a list, one indented line each (`line` gives its text),
/// then how many more there are.
pub fn print_some<T>(items: &[T], line: impl Fn(&T) -> String) {
    for i in items.iter().take(SHOWN) {
        println!("  {}", line(i));
    }
    if items.len() > SHOWN {
        println!(
            "  ... and {} more (`--json` lists them all)",
            items.len() - SHOWN
        );
    }
}

/// The failures of a run, one line each, under a header that counts the lines (one line
/// may stand for a message, a folder, a file or a subscription: their number need not be
/// the items-failed figure).
pub fn print_failures(failures: &[Failure]) {
    if failures.is_empty() {
        return;
    }
    // Once the storage was given up on, every item left failed for that one reason, which
    // the command's error says: counted here, not listed.
    let (not_sent, failures): (Vec<&Failure>, Vec<&Failure>) = failures
        .iter()
        .partition(|f| f.kind == FailureKind::NotTried);
    let n = failures.len();
    if n > 0 {
        println!("{n} {}:", if n == 1 { "failure" } else { "failures" });
    }
    for f in &failures {
        let hint = match f.kind {
            FailureKind::Transient => " (may pass: run the command again later)",
            _ => "",
        };
        println!("  {}: {}{hint}", safe(&f.item), safe(&f.error));
    }
    let conflicts = failures.iter().filter(|f| f.kind == FailureKind::Conflict);
    let conflicts = conflicts.count() as u64;
    if conflicts > 0 {
        println!(
            "{} something else where the item goes: nothing was overwritten (move it away, or restore elsewhere)",
            count(conflicts, "conflict:", "conflicts:")
        );
    }
    if !not_sent.is_empty() {
        println!(
            "{} not done: the storage was given up on (below)",
            count(not_sent.len() as u64, "item", "items")
        );
    }
}

/// Prints a command's result as one JSON object; what the storage was asked during the
/// run is added to it as `storage`.
pub fn json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    let mut v = serde_json::to_value(v)?;
    if let (Some(obj), Some(usage)) = (v.as_object_mut(), crate::repo::usage()) {
        obj.insert("storage".into(), serde_json::to_value(usage)?);
    }
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// One line saying what the storage was asked: requests by verb, bytes each way.
pub fn usage_line(u: &mailvault_core::store::StoreUsage) -> String {
    let r = &u.requests;
    let mut line = format!(
        "storage: {} requests (GET {}, PUT {}, LIST {}, HEAD {}, DELETE {}), {} up, {} down",
        r.total(),
        r.get,
        r.put,
        r.list,
        r.head,
        r.delete,
        bytes(r.bytes_up),
        bytes(r.bytes_down)
    );
    if let Some(r) = u.retries.filter(|r| r.total > 0) {
        let _ = write!(line, "; {} retried", r.total);
    }
    if let Some(c) = &u.cache {
        let _ = write!(line, "; cache {} hits, {} misses", c.hits, c.misses);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::{redact, safe};

    #[test]
    fn formats() {
        assert_eq!(super::bytes(1023), "1023 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::time(0), "1970-01-01 00:00:00");
        assert_eq!(super::time(1_700_000_000), "2023-11-14 22:13:20");
    }

    #[test]
    fn controls_are_made_visible() {
        use super::safe;
        assert_eq!(safe("Gesch\u{e4}ft & Co"), "Gesch\u{e4}ft & Co");
        assert_eq!(
            safe("\u{1b}]2;pwned\u{7}\u{1b}[2J"),
            "\\x1b]2;pwned\\x07\\x1b[2J"
        );
        assert_eq!(safe("a\tb\r\nc\u{7f}"), "a\\x09b\\x0d\\x0ac\\x7f");
        assert_eq!(safe("\u{9b}31m"), "\\x9b31m");
        assert_eq!(safe("abc\u{202e}fdp.exe"), "abc\\u{202e}fdp.exe");
        assert_eq!(safe("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
    }

    #[test]
    fn user_information_is_removed_from_every_url() {
        assert_eq!(
            redact("repository \"s3:http://AK:SECRET@minio:9000/b\": bad; also imap://u:p@h:143 and imaps://bob@mx/"),
            "repository \"s3:http://minio:9000/b\": bad; also imap://h:143 and imaps://bob@mx/"
        );
        assert_eq!(
            redact("imap://bob@example.org@mail.example.org:993"),
            "imap://bob@example.org@mail.example.org:993"
        );
        assert_eq!(
            redact("mail a@b.org at https://x/y"),
            "mail a@b.org at https://x/y"
        );
        assert_eq!(redact("no url, a@b"), "no url, a@b");
        assert_eq!(redact("s3:https://k:s@h"), "s3:https://h");
        assert!(!safe("x s3:http://k:sec\u{1b}ret@h/b").contains("sec"));
    }
}
