//! Vocabulary: names, domains, list names, subjects and body text. Words are drawn with a
//! Zipf-like frequency so bodies compress about as well as real mail text does.

use std::sync::OnceLock;

use rand::Rng as _;

use crate::rng::{chance, Rng};

/// Common English words, most frequent first.
pub(crate) const WORDS: &[&str] = &[
    "the",
    "to",
    "and",
    "of",
    "a",
    "in",
    "is",
    "that",
    "for",
    "it",
    "we",
    "on",
    "with",
    "this",
    "be",
    "you",
    "are",
    "have",
    "not",
    "as",
    "at",
    "will",
    "can",
    "if",
    "but",
    "or",
    "from",
    "by",
    "so",
    "all",
    "they",
    "was",
    "there",
    "would",
    "about",
    "which",
    "an",
    "do",
    "one",
    "should",
    "just",
    "some",
    "our",
    "more",
    "what",
    "when",
    "also",
    "think",
    "need",
    "time",
    "new",
    "like",
    "any",
    "now",
    "out",
    "up",
    "use",
    "then",
    "see",
    "been",
    "only",
    "get",
    "could",
    "other",
    "make",
    "how",
    "know",
    "has",
    "us",
    "them",
    "than",
    "into",
    "because",
    "me",
    "no",
    "work",
    "first",
    "please",
    "way",
    "people",
    "last",
    "still",
    "next",
    "week",
    "thanks",
    "change",
    "before",
    "after",
    "over",
    "may",
    "where",
    "well",
    "back",
    "same",
    "each",
    "good",
    "much",
    "here",
    "those",
    "these",
    "want",
    "team",
    "data",
    "release",
    "build",
    "test",
    "issue",
    "question",
    "problem",
    "meeting",
    "project",
    "server",
    "update",
    "version",
    "support",
    "report",
    "customer",
    "review",
    "plan",
    "patch",
    "code",
    "list",
    "file",
    "system",
    "process",
    "user",
    "message",
    "mail",
    "account",
    "access",
    "point",
    "right",
    "since",
    "while",
    "both",
    "few",
    "already",
    "again",
    "really",
    "sure",
    "without",
    "though",
    "between",
    "something",
    "anything",
    "maybe",
    "probably",
    "actually",
    "around",
    "case",
    "fix",
    "bug",
    "feature",
    "config",
    "option",
    "default",
    "support",
    "network",
    "storage",
    "backup",
    "disk",
    "memory",
    "performance",
    "latency",
    "client",
    "request",
    "response",
    "error",
    "warning",
    "log",
    "output",
    "input",
    "result",
    "number",
    "value",
    "budget",
    "quarter",
    "invoice",
    "contract",
    "schedule",
    "deadline",
    "draft",
    "proposal",
    "agenda",
    "minutes",
    "decision",
    "action",
    "item",
    "owner",
    "status",
    "progress",
    "risk",
    "design",
    "document",
    "spec",
    "section",
    "page",
    "comment",
    "feedback",
    "idea",
    "option",
    "approach",
    "solution",
    "example",
    "detail",
    "summary",
    "note",
    "call",
    "tomorrow",
    "today",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "morning",
    "afternoon",
    "office",
    "remote",
    "travel",
    "flight",
    "hotel",
    "conference",
    "talk",
    "slides",
    "demo",
    "launch",
    "price",
    "order",
    "shipping",
    "delivery",
    "payment",
    "receipt",
    "refund",
    "policy",
    "legal",
    "security",
    "password",
    "certificate",
    "domain",
    "migration",
    "upgrade",
    "rollback",
    "deploy",
    "production",
    "staging",
    "cluster",
    "node",
    "database",
    "index",
    "query",
    "cache",
    "queue",
    "worker",
    "thread",
    "kernel",
    "driver",
    "package",
    "library",
    "module",
    "interface",
    "function",
    "method",
    "struct",
    "pointer",
    "buffer",
    "stream",
    "parser",
    "format",
    "header",
    "body",
    "attachment",
    "folder",
    "mailbox",
    "inbox",
    "archive",
    "filter",
    "rule",
    "spam",
    "quota",
    "limit",
    "size",
    "rate",
    "speed",
    "slow",
    "fast",
    "large",
    "small",
    "simple",
    "complex",
    "important",
    "urgent",
    "possible",
    "likely",
    "clear",
    "different",
    "better",
    "worse",
    "least",
    "most",
    "several",
    "many",
    "every",
    "another",
    "whole",
    "part",
    "half",
    "full",
    "open",
    "closed",
    "done",
    "pending",
    "blocked",
    "ready",
    "missing",
    "broken",
    "fixed",
    "merged",
    "reverted",
    "tested",
    "reviewed",
    "approved",
    "agreed",
    "discussed",
    "mentioned",
    "suggested",
    "proposed",
    "noticed",
    "found",
    "tried",
    "checked",
    "looked",
    "seems",
    "looks",
    "means",
    "makes",
    "takes",
    "gives",
    "keeps",
    "comes",
    "goes",
    "runs",
    "fails",
    "works",
    "helps",
    "moves",
    "starts",
    "stops",
    "finish",
    "continue",
    "forward",
    "reply",
    "send",
    "receive",
    "attach",
    "share",
    "schedule",
    "confirm",
    "cancel",
];

pub(crate) const FIRST_NAMES: &[&str] = &[
    "alice", "bob", "carol", "david", "emma", "frank", "grace", "henry", "irene", "jack", "karen",
    "liam", "maria", "nina", "oscar", "paula", "quentin", "rachel", "samuel", "tina", "ulrich",
    "vera", "walter", "xenia", "yusuf", "zoe", "ahmed", "beatriz", "chen", "dmitri", "elena",
    "fatima", "giorgio", "hana", "ivan", "julia", "kenji", "leila", "mateo", "noor", "olga",
    "pedro", "rosa", "sven", "tomas", "ursula", "viktor", "wei", "yara", "amir",
];

pub(crate) const LAST_NAMES: &[&str] = &[
    "smith",
    "jones",
    "garcia",
    "miller",
    "davis",
    "martin",
    "bernard",
    "dubois",
    "rossi",
    "ferrari",
    "schmidt",
    "schneider",
    "fischer",
    "weber",
    "meyer",
    "wagner",
    "novak",
    "horvat",
    "kowalski",
    "nowak",
    "ivanov",
    "petrov",
    "tanaka",
    "suzuki",
    "kim",
    "lee",
    "park",
    "wang",
    "li",
    "zhang",
    "singh",
    "kumar",
    "silva",
    "santos",
    "oliveira",
    "costa",
    "jensen",
    "nielsen",
    "hansen",
    "larsen",
    "berg",
    "lindqvist",
    "virtanen",
    "murphy",
    "kelly",
    "walsh",
    "obrien",
    "moreau",
    "laurent",
    "fontaine",
];

/// Role mailboxes: often the biggest accounts on a real server.
pub(crate) const ROLE_NAMES: &[&str] = &[
    "info", "support", "sales", "billing", "office", "hr", "admin", "jobs",
];

pub(crate) const COMPANY_STEMS: &[&str] = &[
    "northwind",
    "contoso",
    "fabrikam",
    "tailspin",
    "wingtip",
    "litware",
    "proseware",
    "lucerne",
    "alpine",
    "coho",
    "datum",
    "woodgrove",
    "southridge",
    "trey",
    "humongous",
    "adatum",
    "bluewave",
    "greenleaf",
    "ironbridge",
    "redrock",
];

pub(crate) const EXTERNAL_DOMAINS: &[&str] = &[
    "mail.example.com",
    "example.net",
    "isp.example",
    "university.example.edu",
    "shop.example",
    "bank.example",
    "travel.example",
    "news.example.org",
    "cloud.example",
    "freemail.example",
    "partner.example",
    "supplier.example",
    "agency.example",
    "research.example.org",
];

pub(crate) const LIST_NAMES: &[(&str, &str)] = &[
    ("rust-dev", "Rust development"),
    ("postgres-general", "PostgreSQL general discussion"),
    ("debian-devel", "Debian developers"),
    ("dovecot", "Dovecot mailing list"),
    ("postfix-users", "Postfix users"),
    ("linux-fsdevel", "Linux filesystem development"),
    ("announce", "Project announcements"),
    ("security-alerts", "Security advisories"),
    ("python-ideas", "Python ideas"),
    ("nginx", "nginx users"),
    ("openbsd-misc", "OpenBSD misc"),
    ("imap-protocol", "IMAP protocol discussion"),
    ("kde-devel", "KDE development"),
    ("gnome-list", "GNOME general"),
    ("users", "Users of the project"),
    ("photography", "Photography club"),
];

pub(crate) const INTERNAL_LISTS: &[&str] = &["all-staff", "team", "engineering", "office"];

pub(crate) const TITLES: &[&str] = &[
    "Software Engineer",
    "Project Manager",
    "Sales Director",
    "Systems Administrator",
    "Accountant",
    "Office Manager",
    "Head of Operations",
    "Product Designer",
    "Research Fellow",
    "Support Engineer",
];

pub(crate) const MAILERS: &[&str] = &[
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:115.0) Gecko/20100101 Thunderbird/115.6.0",
    "X-Mailer: Apple Mail (2.3731.700.6)",
    "X-Mailer: Microsoft Outlook 16.0",
    "User-Agent: Roundcube Webmail/1.6.5",
    "User-Agent: Mutt/2.2.9 (2022-11-12)",
    "X-Mailer: Evolution 3.46.4-2",
];

/// (MIME type, file extension, file stem) of attachments.
pub(crate) const ATTACHMENT_KINDS: &[(&str, &str, &str)] = &[
    ("application/pdf", "pdf", "report-"),
    ("image/jpeg", "jpg", "IMG_"),
    ("image/png", "png", "screenshot-"),
    ("application/zip", "zip", "logs-"),
    (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "docx",
        "proposal-v",
    ),
    (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "xlsx",
        "budget-",
    ),
    ("application/octet-stream", "bin", "dump-"),
];

/// Raw UTF-8 names and subjects for the 8-bit-header odd case.
pub(crate) const EIGHT_BIT_NAMES: &[&str] =
    &["Jürgen Müller", "Zoë Ångström", "Łukasz Żółw", "José Peña"];
pub(crate) const EIGHT_BIT_SUBJECTS: &[&str] = &[
    "Grüße aus München",
    "Réunion de l'équipe – ordre du jour",
    "Überweisung für März",
    "Año nuevo, señales nuevas",
];

/// Time zones (minutes east of UTC) senders write their `Date:` in.
pub(crate) const ZONES: &[i32] = &[0, 0, 60, 60, 60, 120, -300, -240, -420, 330, 540, 600, 480];

/// 4096-entry lookup table: uniform index -> word index with Zipf(1) frequencies.
fn word_table() -> &'static [u16] {
    static TABLE: OnceLock<Vec<u16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let weights: Vec<f64> = (0..WORDS.len()).map(|r| 1.0 / (r as f64 + 2.0)).collect();
        let total: f64 = weights.iter().sum();
        let mut table = Vec::with_capacity(4096);
        let mut acc = 0.0;
        for (i, w) in weights.iter().enumerate() {
            acc += w;
            let upto = ((acc / total) * 4096.0).round() as usize;
            while table.len() < upto.min(4096) {
                table.push(i as u16);
            }
        }
        while table.len() < 4096 {
            table.push((WORDS.len() - 1) as u16);
        }
        table
    })
}

pub(crate) fn word(rng: &mut Rng) -> &'static str {
    let table = word_table();
    WORDS[usize::from(table[(rng.gen::<u32>() >> 20) as usize])]
}

/// Capitalises an ASCII word.
pub(crate) fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

/// Appends wrapped paragraphs (72 columns, blank line between paragraphs) of at least
/// about `target` bytes; ends with a line end.
pub(crate) fn body_text(rng: &mut Rng, target: usize, out: &mut Vec<u8>) {
    let start = out.len();
    while out.len() - start < target {
        let sentences = rng.gen_range(2..7);
        let mut col = 0usize;
        for _ in 0..sentences {
            let words = rng.gen_range(5..22);
            for i in 0..words {
                let w = word(rng);
                let extra = if i + 1 == words || chance(rng, 0.06) {
                    1
                } else {
                    0
                };
                if col > 0 && col + 1 + w.len() + extra > 72 {
                    out.push(b'\n');
                    col = 0;
                } else if col > 0 {
                    out.push(b' ');
                    col += 1;
                }
                if i == 0 {
                    let mut first = w.as_bytes().to_vec();
                    first[0] = first[0].to_ascii_uppercase();
                    out.extend_from_slice(&first);
                } else {
                    out.extend_from_slice(w.as_bytes());
                }
                col += w.len();
                if i + 1 == words {
                    out.push(if chance(rng, 0.1) { b'?' } else { b'.' });
                    col += 1;
                } else if extra == 1 {
                    out.push(b',');
                    col += 1;
                }
            }
        }
        out.extend_from_slice(b"\n\n");
    }
    // One line end, not a blank line, at the very end.
    out.pop();
}

/// A subject line (without `Re:` and list tags).
pub(crate) fn subject(rng: &mut Rng) -> String {
    let a = word(rng);
    let b = word(rng);
    let c = word(rng);
    match rng.gen_range(0..8) {
        0 => format!("{} {} {}", capitalize(a), b, c),
        1 => format!("Meeting notes: {} {}", b, c),
        2 => format!("Question about the {} {}", b, c),
        3 => format!("Invoice {:06}", rng.gen_range(1000..999_999)),
        4 => format!(
            "[{}] {} {} needs {}",
            capitalize(a),
            capitalize(b),
            c,
            word(rng)
        ),
        5 => format!("Weekly {} update", b),
        6 => format!("{} {} for {}", capitalize(a), b, capitalize(c)),
        _ => format!("Re-planning the {} {} ({})", b, c, rng.gen_range(2..40)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::rng_for;

    #[test]
    fn text_wraps_and_is_ascii() {
        let mut rng = rng_for(1, 1);
        let mut out = Vec::new();
        body_text(&mut rng, 3000, &mut out);
        assert!(out.len() >= 3000 && out.len() < 5000, "{}", out.len());
        let text = String::from_utf8(out).expect("ascii");
        assert!(text.lines().all(|l| l.len() <= 80));
        assert!(text.ends_with(".\n") || text.ends_with("?\n"));
        assert!(!text.ends_with("\n\n"));
    }
}
