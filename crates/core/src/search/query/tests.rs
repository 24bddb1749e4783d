//! Tests of the query parser: every operator, field and value form, every error with its
//! column, and the bounds.
#![allow(clippy::unwrap_used)] // tests: a failed step fails the test

use super::*;

/// 2026-11-27T12:34:56Z, the `now` of every test.
fn now() -> Timestamp {
    "2026-11-27T12:34:56Z".parse().unwrap()
}

const NOW: i64 = 1_795_782_896;
const DAY: i64 = 86_400;

fn p(s: &str) -> Query {
    parse(s, now()).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// The query's readable form.
fn show(s: &str) -> String {
    p(s).to_string()
}

fn err(s: &str) -> QueryError {
    match parse(s, now()) {
        Ok(q) => panic!("{s:?} parsed as {q}"),
        Err(e) => e,
    }
}

fn text(field: TextField, text: &str, phrase: bool, prefix: bool) -> Query {
    Query::Term(Term::Text {
        field,
        text: text.into(),
        phrase,
        prefix,
    })
}

fn word(s: &str) -> Query {
    text(TextField::Any, s, false, false)
}

fn term(t: Term) -> Query {
    Query::Term(t)
}

fn date(from: Option<i64>, to: Option<i64>) -> Query {
    term(Term::Date { from, to })
}

#[test]
fn now_constant_matches() {
    assert_eq!(now().as_second(), NOW);
}

#[test]
fn empty_query_is_all() {
    assert_eq!(p(""), Query::All);
    assert_eq!(p("  \t "), Query::All);
}

#[test]
fn words_phrases_and_prefixes() {
    assert_eq!(p("invoice"), word("invoice"));
    assert_eq!(p("Invoice"), word("Invoice"), "text is kept as typed");
    assert_eq!(p("Zürich"), word("Zürich"));
    assert_eq!(
        p("\"quarterly report\""),
        text(TextField::Any, "quarterly report", true, false)
    );
    assert_eq!(p("invoi*"), text(TextField::Any, "invoi", false, true));
    assert_eq!(
        p("\"invoi*\""),
        text(TextField::Any, "invoi*", true, false),
        "a quoted * is not a prefix"
    );
    assert_eq!(p("in*voice"), word("in*voice"), "a * inside a word is kept");
    assert_eq!(p("e-mail"), word("e-mail"), "a dash inside a word is kept");
    assert_eq!(p("10:30"), word("10:30"), "a colon after digits is text");
    assert_eq!(p("alice@example.com"), word("alice@example.com"));
}

#[test]
fn spaces_and() {
    assert_eq!(
        p("a b c"),
        Query::And(vec![word("a"), word("b"), word("c")])
    );
    assert_eq!(p("a AND b"), p("a b"));
    assert_eq!(
        show("a (b c) d"),
        "(a AND b AND c AND d)",
        "nested ANDs flatten"
    );
    assert_eq!(show("\"a b\"c"), "(\"a b\" AND c)");
    assert_eq!(show("ab\"c d\""), "(ab AND \"c d\")");
}

#[test]
fn or_binds_tighter_than_and() {
    assert_eq!(p("a OR b"), Query::Or(vec![word("a"), word("b")]));
    assert_eq!(show("a b OR c"), "(a AND (b OR c))");
    assert_eq!(show("a OR b c"), "((a OR b) AND c)");
    assert_eq!(show("a AND b OR c"), "(a AND (b OR c))");
    assert_eq!(show("a OR b OR c"), "(a OR b OR c)");
    assert_eq!(show("(a b) OR c"), "((a AND b) OR c)");
    assert_eq!(show("a OR (b OR c)"), "(a OR b OR c)", "nested ORs flatten");
    assert_eq!(
        show("from:alice OR from:bob invoice"),
        "((from:alice OR from:bob) AND invoice)"
    );
}

#[test]
fn lower_case_operators_are_words() {
    assert_eq!(show("a or b"), "(a AND or AND b)");
    assert_eq!(show("a and b"), "(a AND and AND b)");
    assert_eq!(show("not a"), "(not AND a)");
    assert_eq!(show("Or"), "Or");
}

#[test]
fn negation() {
    assert_eq!(p("-spam"), Query::Not(Box::new(word("spam"))));
    assert_eq!(p("NOT spam"), p("-spam"));
    assert_eq!(show("a -b"), "(a AND -b)");
    assert_eq!(show("a NOT b"), "(a AND -b)");
    assert_eq!(show("-(a OR b)"), "-(a OR b)");
    assert_eq!(show("NOT(a b)"), "-(a AND b)");
    assert_eq!(show("-from:x"), "-from:x");
    assert_eq!(show("-\"a b\""), "-\"a b\"");
    assert_eq!(show("a OR -b"), "(a OR -b)");
    assert_eq!(show("a OR NOT b"), "(a OR -b)");
    assert_eq!(show("--a"), "--a");
    assert_eq!(show("-deleted"), "-deleted");
}

#[test]
fn text_fields() {
    assert_eq!(
        p("from:alice"),
        text(TextField::From, "alice", false, false)
    );
    assert_eq!(p("to:bob"), text(TextField::To, "bob", false, false));
    assert_eq!(
        p("subject:invoice"),
        text(TextField::Subject, "invoice", false, false)
    );
    assert_eq!(
        p("filename:report.pdf"),
        text(TextField::Filename, "report.pdf", false, false)
    );
    assert_eq!(
        p("subject:\"quarterly report\""),
        text(TextField::Subject, "quarterly report", true, false)
    );
    assert_eq!(
        p("subject:invoi*"),
        text(TextField::Subject, "invoi", false, true)
    );
    assert_eq!(p("FROM:alice"), p("from:alice"), "field names ignore case");
    assert_eq!(p("Subject:x"), p("subject:x"));
    assert_eq!(p("from:a:b"), text(TextField::From, "a:b", false, false));
    assert_eq!(show("(from:alice)"), "from:alice");
}

#[test]
fn name_fields() {
    assert_eq!(p("folder:INBOX"), term(Term::Folder("INBOX".into())));
    assert_eq!(
        p("folder:\"Sent Items\""),
        term(Term::Folder("Sent Items".into()))
    );
    assert_eq!(
        p("folder:INBOX/Work"),
        term(Term::Folder("INBOX/Work".into()))
    );
    assert_eq!(p("account:alice"), term(Term::Account("alice".into())));
    assert_eq!(p("keyword:$Label1"), term(Term::Keyword("$Label1".into())));
    assert_eq!(
        p("folder:\"a*\""),
        term(Term::Folder("a*".into())),
        "quoted * kept"
    );
    for q in ["folder:Arch*", "account:al*", "keyword:x*"] {
        assert!(
            matches!(err(q).kind, QueryErrorKind::PrefixNotAllowed { .. }),
            "{q}"
        );
    }
}

#[test]
fn deleted_flags_and_attachments() {
    assert_eq!(p("deleted"), term(Term::Deleted));
    assert_eq!(p("Deleted"), term(Term::Deleted));
    assert_eq!(
        p("\"deleted\""),
        text(TextField::Any, "deleted", true, false)
    );
    assert_eq!(p("deleted*"), text(TextField::Any, "deleted", false, true));
    assert_eq!(p("flag:deleted"), term(Term::Flag(Flag::Deleted)));
    let flags = [
        ("seen", Flag::Seen),
        ("FLAGGED", Flag::Flagged),
        ("Answered", Flag::Answered),
        ("deleted", Flag::Deleted),
        ("draft", Flag::Draft),
    ];
    for (name, f) in flags {
        assert_eq!(p(&format!("flag:{name}")), term(Term::Flag(f)));
    }
    assert_eq!(Flag::Seen.imap_name(), "\\Seen");
    assert_eq!(Flag::Draft.imap_name(), "\\Draft");
    let e = err("flag:recent");
    assert!(e.to_string().contains("seen, flagged"), "{e}");
    assert_eq!(p("has:attachment"), term(Term::HasAttachment));
    assert_eq!(p("has:ATTACHMENT"), term(Term::HasAttachment));
    assert!(matches!(
        err("has:pdf").kind,
        QueryErrorKind::InvalidValue { .. }
    ));
}

fn size(larger_than: Option<u64>, smaller_than: Option<u64>) -> Query {
    term(Term::Size {
        larger_than,
        smaller_than,
    })
}

#[test]
fn sizes() {
    assert_eq!(p("larger:100"), size(Some(100), None));
    assert_eq!(p("smaller:100"), size(None, Some(100)));
    assert_eq!(p("larger:10k"), size(Some(10 * 1024), None));
    assert_eq!(p("larger:10K"), p("larger:10k"));
    assert_eq!(p("larger:10kb"), p("larger:10k"));
    assert_eq!(p("larger:10M"), size(Some(10 << 20), None));
    assert_eq!(p("larger:10mb"), p("larger:10M"));
    assert_eq!(p("larger:10MB"), p("larger:10M"));
    assert_eq!(p("smaller:2G"), size(None, Some(2 << 30)));
    assert_eq!(p("smaller:2GB"), p("smaller:2G"));
    assert_eq!(p("larger:100b"), size(Some(100), None));
    assert_eq!(p("larger:0"), size(Some(0), None));
    for bad in [
        "k",
        "10x",
        "1.5M",
        "-1",
        "10 M",
        "M10",
        "b",
        "10kk",
        "99999999999999999999",
    ] {
        let q = format!("larger:{bad}");
        if let Ok(q2) = parse(&q, now()) {
            // "10 M" is `larger:10` and the word `M`: fine, not a size error.
            assert_eq!(bad, "10 M", "{q} parsed as {q2}");
            continue;
        }
        assert!(
            matches!(err(&q).kind, QueryErrorKind::InvalidValue { .. }),
            "{q}: {}",
            err(&q)
        );
    }
    assert!(err("larger:20000000000G").to_string().contains("too large"));
}

#[test]
fn absolute_dates() {
    let mar1 = 1_709_251_200; // 2024-03-01T00:00:00Z
    let apr1 = 1_711_929_600;
    assert_eq!(
        p("after:2024-03-01"),
        date(Some(mar1), None),
        "after: includes the day"
    );
    assert_eq!(
        p("before:2024-03-01"),
        date(None, Some(mar1)),
        "before: excludes it"
    );
    assert_eq!(p("on:2024-03-01"), date(Some(mar1), Some(mar1 + DAY)));
    assert_eq!(p("on:2024/03/01"), p("on:2024-03-01"));
    assert_eq!(p("on:2024-03"), date(Some(mar1), Some(apr1)));
    assert_eq!(p("after:2024-03"), date(Some(mar1), None));
    assert_eq!(p("before:2024-04"), date(None, Some(apr1)));
    assert_eq!(p("on:2024"), date(Some(1_704_067_200), Some(1_735_689_600)));
    assert_eq!(p("on:2024-02-29"), date(Some(1_709_164_800), Some(mar1)));
    assert_eq!(
        p("on:2023-12"),
        date(Some(1_701_388_800), Some(1_704_067_200))
    );
    assert_eq!(
        show("after:2024-03-01 before:2024-04-01"),
        "(date:[2024-03-01T00:00:00Z,..) AND date:[..,2024-04-01T00:00:00Z))"
    );
    assert_eq!(p("after:\"2024-03-01\""), p("after:2024-03-01"));
    assert_eq!(p("AFTER:2024"), p("after:2024"));
    assert_eq!(p("on:1970-01-01"), date(Some(0), Some(DAY)));
    assert_eq!(p("before:1969"), date(None, Some(-31_536_000)));
    // The last day jiff can give a next day for is open-ended past it.
    assert!(matches!(
        p("on:9999-12-30"),
        Query::Term(Term::Date { to: None, .. })
    ));
    for bad in [
        "2024-02-30",
        "2023-02-29",
        "2024-13",
        "2024-00",
        "2024-03-00",
        "24-03-01",
        "2024-3-1",
        "2024-03-01-02",
        "2024-03-",
        "yesterday",
        "20240301",
        "2024-03-01T10:00",
        "+2024",
        "９９９９",
    ] {
        let q = format!("on:{bad}");
        assert!(
            matches!(err(&q).kind, QueryErrorKind::InvalidValue { .. }),
            "{q}"
        );
    }
}

#[test]
fn relative_dates() {
    assert_eq!(p("after:30d"), date(Some(NOW - 30 * DAY), None));
    assert_eq!(p("before:30d"), date(None, Some(NOW - 30 * DAY)));
    assert_eq!(p("after:2w"), date(Some(NOW - 14 * DAY), None));
    assert_eq!(p("after:0d"), date(Some(NOW), None));
    // Calendar months and years: 2026-05-27T12:34:56Z, 2025-11-27T12:34:56Z.
    assert_eq!(p("after:6m"), date(Some(1_779_885_296), None));
    assert_eq!(p("after:1y"), date(Some(1_764_246_896), None));
    assert_eq!(p("before:12m"), p("before:1y"));
    // on: a relative date is the UTC day holding it: 2026-11-26.
    let day = 1_795_651_200;
    assert_eq!(p("on:1d"), date(Some(day), Some(day + DAY)));
    assert_eq!(p("on:0d"), date(Some(day + DAY), Some(day + 2 * DAY)));
    for bad in ["d", "-3d", "3D", "3h", "1.5d", "3 d"] {
        let q = format!("after:{bad}");
        if bad == "3 d" {
            assert!(matches!(err(&q).kind, QueryErrorKind::InvalidValue { .. }));
            continue;
        }
        assert!(
            matches!(err(&q).kind, QueryErrorKind::InvalidValue { .. }),
            "{q}"
        );
    }
    for far in [
        "after:99999999999999999999d",
        "after:20000y",
        "after:7000000d",
    ] {
        assert!(err(far).to_string().contains("too far back"), "{far}");
    }
}

#[test]
fn errors_name_their_column() {
    let e = err("invoice foo:bar");
    assert_eq!(
        e.kind,
        QueryErrorKind::UnknownField {
            field: "foo".into()
        }
    );
    assert_eq!((e.offset, e.column), (8, 9));
    let msg = e.to_string();
    assert!(msg.contains("column 9"), "{msg}");
    assert!(msg.contains("from, to, subject"), "{msg}");
    assert!(msg.contains("double quotes"), "{msg}");
    assert_eq!(err("a http://x").column, 3);
    assert_eq!(
        p("\"http://x\""),
        text(TextField::Any, "http://x", true, false)
    );
    // Columns count characters, not bytes.
    let e = err("é ü foo:x");
    assert_eq!((e.offset, e.column), (6, 5));

    let cases: &[(&str, QueryErrorKind, usize)] = &[
        (
            "from:",
            QueryErrorKind::MissingValue {
                field: "from".into(),
            },
            6,
        ),
        (
            "a from: b",
            QueryErrorKind::MissingValue {
                field: "from".into(),
            },
            8,
        ),
        (
            "from:(a b)",
            QueryErrorKind::MissingValue {
                field: "from".into(),
            },
            6,
        ),
        ("\"abc", QueryErrorKind::UnclosedQuote, 1),
        ("a from:\"abc", QueryErrorKind::UnclosedQuote, 8),
        ("a \"\" b", QueryErrorKind::EmptyQuotes, 3),
        ("(a b", QueryErrorKind::UnclosedGroup, 1),
        ("((a) b", QueryErrorKind::UnclosedGroup, 1),
        ("a)", QueryErrorKind::UnmatchedClose, 2),
        ("(a))", QueryErrorKind::UnmatchedClose, 4),
        (")", QueryErrorKind::UnmatchedClose, 1),
        ("a ()", QueryErrorKind::EmptyGroup, 3),
        ("OR a", QueryErrorKind::NothingBefore { op: "OR" }, 1),
        ("(OR a)", QueryErrorKind::NothingBefore { op: "OR" }, 2),
        ("a OR", QueryErrorKind::NothingAfter { op: "OR" }, 5),
        ("a OR OR b", QueryErrorKind::NothingAfter { op: "OR" }, 6),
        ("a OR AND b", QueryErrorKind::NothingAfter { op: "OR" }, 6),
        ("(a OR) b", QueryErrorKind::NothingAfter { op: "OR" }, 6),
        ("AND a", QueryErrorKind::NothingBefore { op: "AND" }, 1),
        ("a AND", QueryErrorKind::NothingAfter { op: "AND" }, 6),
        ("a AND AND b", QueryErrorKind::NothingAfter { op: "AND" }, 7),
        ("a AND OR b", QueryErrorKind::NothingAfter { op: "AND" }, 7),
        ("NOT", QueryErrorKind::NothingAfter { op: "NOT" }, 4),
        ("a NOT OR b", QueryErrorKind::NothingAfter { op: "NOT" }, 7),
        ("(NOT)", QueryErrorKind::NothingAfter { op: "NOT" }, 5),
        ("-", QueryErrorKind::NothingAfter { op: "-" }, 1),
        ("a - b", QueryErrorKind::NothingAfter { op: "-" }, 3),
        ("(a -)", QueryErrorKind::NothingAfter { op: "-" }, 4),
        ("*", QueryErrorKind::BarePrefix, 1),
        ("a **", QueryErrorKind::BarePrefix, 3),
        ("from:*", QueryErrorKind::BarePrefix, 6),
    ];
    for (q, kind, column) in cases {
        let e = err(q);
        assert_eq!((&e.kind, e.column), (kind, *column), "{q:?}: {e}");
    }
}

#[test]
fn length_is_bounded() {
    let ok = "a ".repeat(MAX_QUERY_LEN / 2);
    assert_eq!(ok.len(), MAX_QUERY_LEN);
    assert!(matches!(p(&ok), Query::And(v) if v.len() == MAX_QUERY_LEN / 2));
    let long = format!("{ok}b");
    let e = err(&long);
    assert_eq!(
        e.kind,
        QueryErrorKind::TooLong {
            len: MAX_QUERY_LEN + 1
        }
    );
}

#[test]
fn depth_is_bounded() {
    let nest = |n: usize| format!("{}a{}", "(".repeat(n), ")".repeat(n));
    assert_eq!(p(&nest(MAX_DEPTH)), word("a"));
    let e = err(&nest(MAX_DEPTH + 1));
    assert_eq!((e.kind, e.column), (QueryErrorKind::TooDeep, MAX_DEPTH + 1));

    let negs = |n: usize| format!("{}a", "-".repeat(n));
    assert!(p(&negs(MAX_DEPTH)).to_string().ends_with("-a"));
    assert_eq!(err(&negs(MAX_DEPTH + 1)).kind, QueryErrorKind::TooDeep);
    // Parentheses and negations count together.
    let mixed = format!("{}{}", "-(".repeat(MAX_DEPTH / 2 + 1), "a");
    assert_eq!(err(&mixed).kind, QueryErrorKind::TooDeep);
    // The deepest a bounded query can reach is refused without exhausting the stack.
    let deep = "(".repeat(MAX_QUERY_LEN);
    assert_eq!(err(&deep).kind, QueryErrorKind::TooDeep);
    let deep = "NOT ".repeat(MAX_QUERY_LEN / 4);
    assert_eq!(err(&deep).kind, QueryErrorKind::TooDeep);
}

#[test]
fn a_query_mixing_every_operator() {
    let q = "from:alice OR from:\"Bob Smith\" -subject:spam* (invoice OR \"bank transfer\") \
             after:2024 before:30d has:attachment larger:1M flag:seen NOT deleted \
             folder:INBOX account:alice keyword:$Work filename:report*";
    assert_eq!(
        show(q),
        "((from:alice OR from:\"Bob Smith\") AND -subject:spam* AND (invoice OR \"bank \
         transfer\") AND date:[2024-01-01T00:00:00Z,..) AND date:[..,2026-10-28T12:34:56Z) AND \
         has:attachment AND size:(1048576,..) AND flag:\\Seen AND -deleted AND \
         folder:\"INBOX\" AND account:\"alice\" AND keyword:\"$Work\" AND filename:report*)"
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Pieces of query syntax, glued at random.
    fn piece() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "(",
            ")",
            "-",
            "\"",
            " ",
            "a",
            "é",
            "OR",
            "AND",
            "NOT",
            "*",
            ":",
            "from:",
            "to:",
            "on:",
            "after:2024",
            "larger:",
            "10k",
            "flag:",
            "seen",
            "deleted",
            "x:",
            "30d",
            "\t",
            "\u{3000}",
            "has:attachment",
        ])
    }

    proptest! {
        #[test]
        fn never_panics_on_syntax_soup(parts in prop::collection::vec(piece(), 0..40)) {
            let q = parts.concat();
            match parse(&q, now()) {
                Ok(query) => { let _ = query.to_string(); }
                Err(e) => {
                    prop_assert!(e.offset <= q.len());
                    prop_assert!(q.is_char_boundary(e.offset));
                    prop_assert!(e.column <= q.chars().count() + 1);
                }
            }
        }

        #[test]
        fn never_panics_on_any_string(q in "\\PC{0,64}") {
            let _ = parse(&q, now());
        }
    }
}
