//! The user manual against the code (issue 24, item 2).
//!
//! - Every relative link in README.md and docs/**/*.md leads to a file that is there, and
//!   every `#anchor` to a heading of the file it names.
//! - Every command (as the built binary's `--help` lists them, subcommands of subcommands
//!   too) has a section in docs/manual/commands.md, headed `mailvault COMMAND`; every long
//!   flag of its own is named in that section, and the options every command takes in the
//!   section `Options every command takes`.
//! - Every `--flag` a section names exists for its command, and so does every flag written
//!   after `mailvault COMMAND` anywhere in README.md or docs/.
//! - `mailvault generate man` writes a page for every command and `generate completions`
//!   a bash completion that knows every command.
//!
//! Which command a `--flag` belongs to: inside a code span or a line of a code block, the
//! command it starts with (`mailvault restore …`, or a command's bare name: `restore
//! --message`); a span or line that starts with another program (`cargo run --release`,
//! `systemctl enable --now`) is not checked; anything else belongs to the section's command.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// README.md and every Markdown file below docs/.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
    out
}

/// A line of a Markdown file: its number, its text, whether it is inside a fenced code
/// block (lines continued with `\` in a code block are joined into the first).
struct Line {
    number: usize,
    text: String,
    code: bool,
}

fn lines(text: &str) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    let mut fenced = false;
    let mut continued = false;
    for (i, l) in text.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continued = false;
            continue;
        }
        // A code block's line continued with `\`, or a code span that goes on on the next
        // line of a paragraph.
        let open_span = |t: &str| t.matches('`').count() % 2 == 1;
        let joins = if fenced {
            continued
        } else {
            out.last()
                .is_some_and(|p| !p.code && open_span(&p.text) && !l.trim().is_empty())
        };
        if joins {
            let last = out.last_mut().unwrap();
            last.text.push(' ');
            last.text.push_str(l.trim().trim_end_matches('\\'));
        } else {
            out.push(Line {
                number: i + 1,
                text: l.trim_end_matches('\\').to_string(),
                code: fenced,
            });
        }
        continued = fenced && l.trim_end().ends_with('\\');
    }
    out
}

/// A heading line's level and text.
fn heading(l: &Line) -> Option<(usize, &str)> {
    if l.code {
        return None;
    }
    let level = l.text.chars().take_while(|&c| c == '#').count();
    let rest = &l.text[level..];
    (level > 0 && rest.starts_with(' ')).then(|| (level, rest.trim()))
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation other than `-`
/// and `_` dropped; a repeated anchor gets `-1`, `-2`…
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for l in lines(text) {
        let Some((_, h)) = heading(&l) else { continue };
        let slug: String = h
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The text of a line outside its code spans, and its code spans.
fn split_spans(line: &str) -> (String, Vec<String>) {
    let mut prose = String::new();
    let mut spans = Vec::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            prose.push_str(part);
            prose.push(' ');
        } else {
            spans.push(part.to_string());
        }
    }
    (prose, spans)
}

/// The link targets of a line: inline `[text](target)` and reference definitions
/// `[label]: target`, outside code spans.
fn link_targets(line: &str) -> Vec<String> {
    let (prose, _) = split_spans(line);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    let t = prose.trim_start();
    if t.starts_with('[') {
        if let Some((_, target)) = t.split_once("]: ") {
            out.push(target.split_whitespace().next().unwrap_or("").to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_leads_to_a_file_and_a_heading() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for l in lines(&text).iter().filter(|l| !l.code) {
            for target in link_targets(&l.text) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                let place = format!("{}:{}: link {target:?}", rel(&file), l.number);
                if !dest.exists() {
                    broken.push(format!("{place}: no file {}", dest.display()));
                    continue;
                }
                if let Some(a) = anchor.filter(|_| dest.extension().is_some_and(|x| x == "md")) {
                    let there = anchors(&std::fs::read_to_string(&dest).unwrap());
                    if !there.contains(a) {
                        broken.push(format!(
                            "{place}: no heading #{a} in {} (its headings: {})",
                            rel(&dest.canonicalize().unwrap()),
                            there.into_iter().collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A command of the CLI: its path below `mailvault` (empty for `mailvault` itself) and the
/// long flags of its own (for `mailvault` itself: the options every command takes).
struct Cmd {
    path: Vec<String>,
    own: BTreeSet<String>,
    /// Every long flag it accepts, its own and every command's.
    all: BTreeSet<String>,
}

impl Cmd {
    fn name(&self) -> String {
        let mut n = String::from("mailvault");
        for p in &self.path {
            n.push(' ');
            n.push_str(p);
        }
        n
    }
}

/// `mailvault PATH --help`.
fn help(path: &[String]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_mailvault"))
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert!(o.status.success(), "mailvault {path:?} --help failed");
    String::from_utf8(o.stdout).unwrap()
}

/// The long flags a help text lists (the options' own lines, not their descriptions),
/// without --help and --version, and the subcommands it lists.
fn parse_help(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut flags = BTreeSet::new();
    let mut subs = Vec::new();
    let mut in_commands = false;
    for line in text.lines() {
        if line.ends_with(':') && !line.starts_with(' ') {
            in_commands = line == "Commands:";
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if in_commands && indent == 2 {
            let name = t.split_whitespace().next().unwrap_or("");
            if !name.is_empty() && name != "help" {
                subs.push(name.to_string());
            }
        } else if (2..=6).contains(&indent) {
            let t = t.strip_prefix('-').and_then(|t| {
                if t.starts_with('-') {
                    Some(t)
                } else {
                    t.split_once(", -").map(|(_, r)| r)
                }
            });
            if let Some(f) = t.and_then(|t| t.strip_prefix('-')) {
                let f: String = f
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if !f.is_empty() && f != "help" && f != "version" {
                    flags.insert(f);
                }
            }
        }
    }
    (flags, subs)
}

/// Every command of the built binary, `mailvault` itself first.
fn commands() -> Vec<Cmd> {
    let (global, _) = parse_help(&help(&[]));
    let mut out = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let (flags, subs) = parse_help(&help(&path));
        for s in subs {
            let mut p = path.clone();
            p.push(s);
            todo.push(p);
        }
        let own = if path.is_empty() {
            flags.clone()
        } else {
            flags.difference(&global).cloned().collect()
        };
        out.push(Cmd {
            path,
            own,
            all: flags
                .union(&global)
                .cloned()
                .chain(["help".to_string(), "version".to_string()])
                .collect(),
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Programs other than mailvault that the manual shows with their own flags.
const OTHER_PROGRAMS: &[&str] = &[
    "cargo",
    "scripts/test.sh",
    "scripts/deb.sh",
    "apt",
    "apt-get",
    "dpkg",
    "dpkg-deb",
    "man",
    "systemctl",
    "journalctl",
    "export",
    "sudo",
    "cp",
    "chmod",
    "restic",
    "borg",
    "doveadm",
    "python3",
    "git",
    "curl",
    "mc",
    "aws",
    "btrfs",
    "lvcreate",
    "zfs",
    "mount",
];

/// The `--flags` a piece of text names, and the command each belongs to: `Some(path)`, or
/// `None` for another program's flags.
fn flags_in(
    segment: &str,
    default: &[String],
    known: &[Cmd],
) -> Vec<(Option<Vec<String>>, String)> {
    let words: Vec<&str> = segment
        .split(|c: char| c.is_whitespace() || "[]()|,=".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    let is_cmd = |p: &[String]| known.iter().any(|c| c.path == p);
    // The command the words after `start` name, and how many words that took.
    let command_at = |start: usize| {
        let mut path: Vec<String> = Vec::new();
        let mut i = start;
        while let Some(w) = words.get(i) {
            let mut p = path.clone();
            p.push(w.to_string());
            if !is_cmd(&p) {
                break;
            }
            path = p;
            i += 1;
        }
        (path, i)
    };
    let mut ctx: Option<Vec<String>> = Some(default.to_vec());
    let mut first = 0;
    match words.first() {
        Some(&"mailvault") => {
            // Options before the command are the options every command takes.
            ctx = Some(Vec::new());
            first = 1;
        }
        Some(w) if OTHER_PROGRAMS.contains(w) || w.starts_with("scripts/") => ctx = None,
        Some(_) => {
            let (path, n) = command_at(0);
            if !path.is_empty() {
                ctx = Some(path);
                first = n;
            }
        }
        None => {}
    }
    let mut out = Vec::new();
    let mut i = first;
    while i < words.len() {
        let w = words[i];
        if ctx.as_ref().is_some_and(|c| c.is_empty()) && !w.starts_with('-') && first == 1 {
            let (path, n) = command_at(i);
            if !path.is_empty() {
                ctx = Some(path);
                i = n;
                continue;
            }
        }
        if let Some(f) = w.strip_prefix("--") {
            let name: String = f
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let wildcard = f[name.len()..].starts_with('*') || name.ends_with('-');
            if !name.is_empty() && !wildcard && name.starts_with(|c: char| c.is_ascii_alphabetic())
            {
                out.push((ctx.clone(), name));
            }
        }
        i += 1;
    }
    out
}

/// The `--flags` of a line of Markdown (prose, each code span, or a code block's line),
/// with the command each belongs to.
fn line_flags(l: &Line, default: &[String], known: &[Cmd]) -> Vec<(Option<Vec<String>>, String)> {
    if l.code {
        let t = l.text.trim_start().trim_start_matches("$ ");
        // A comment after the command is prose about it.
        let (cmd, comment) = t.split_once(" # ").unwrap_or((t, ""));
        let mut out = flags_in(cmd, default, known);
        out.extend(flags_in(comment, default, known));
        return out;
    }
    let (prose, spans) = split_spans(&l.text);
    let mut out = flags_in(&prose, default, known);
    for s in spans {
        out.extend(flags_in(&s, default, known));
    }
    out
}

fn dashed(path: &[String]) -> String {
    if path.is_empty() {
        "mailvault".into()
    } else {
        format!("mailvault {}", path.join(" "))
    }
}

const GLOBAL_SECTION: &str = "Options every command takes";

#[test]
fn the_manual_names_every_flag_of_every_command_and_no_other() {
    let known = commands();
    assert!(
        known.iter().any(|c| c.path == ["backup"])
            && known.iter().any(|c| c.path == ["repair", "index"]),
        "the commands were not read from --help"
    );
    let manual = root().join("docs/manual/commands.md");
    let text = std::fs::read_to_string(&manual).unwrap();
    let all = lines(&text);
    let mut problems = Vec::new();
    // Each command's section: from its heading to the next heading of its level or above,
    // or to the next command's heading.
    let mut sections: BTreeMap<Vec<String>, Vec<&Line>> = BTreeMap::new();
    let mut current: Option<(usize, Vec<String>)> = None;
    for l in &all {
        if let Some((level, h)) = heading(l) {
            let h = h.trim_matches('`');
            let path = if h == GLOBAL_SECTION {
                Some(Vec::new())
            } else {
                h.strip_prefix("mailvault ")
                    .map(|p| p.split_whitespace().map(String::from).collect::<Vec<_>>())
                    .filter(|p| known.iter().any(|c| &c.path == p))
            };
            match path {
                Some(p) => {
                    if sections.contains_key(&p) {
                        problems.push(format!(
                            "{}:{}: a second section for `{}`",
                            rel(&manual),
                            l.number,
                            dashed(&p)
                        ));
                    }
                    sections.entry(p.clone()).or_default();
                    current = Some((level, p));
                }
                None if current.as_ref().is_some_and(|(cl, _)| level <= *cl) => current = None,
                None => {}
            }
            continue;
        }
        if let Some((_, p)) = &current {
            sections.get_mut(p).unwrap().push(l);
        }
    }
    for cmd in &known {
        let title = if cmd.path.is_empty() {
            GLOBAL_SECTION.to_string()
        } else {
            cmd.name()
        };
        let Some(section) = sections.get(&cmd.path) else {
            problems.push(format!(
                "{}: no section `## {title}` for `{}` (flags: --{})",
                rel(&manual),
                cmd.name(),
                cmd.own.iter().cloned().collect::<Vec<_>>().join(", --")
            ));
            continue;
        };
        let mut named = BTreeSet::new();
        for l in section {
            for (ctx, flag) in line_flags(l, &cmd.path, &known) {
                if ctx.as_deref() == Some(&cmd.path[..]) {
                    named.insert(flag.clone());
                }
                let Some(ctx) = ctx else { continue };
                let target = known.iter().find(|c| c.path == ctx).unwrap();
                if !target.all.contains(&flag) {
                    problems.push(format!(
                        "{}:{}: section `{title}` names --{flag}, which `{}` does not take \
                         (not in `{} --help`)",
                        rel(&manual),
                        l.number,
                        target.name(),
                        target.name()
                    ));
                }
            }
        }
        for flag in cmd.own.difference(&named) {
            problems.push(format!(
                "{}: section `{title}` does not name --{flag}, which `{} --help` lists: \
                 document it there",
                rel(&manual),
                cmd.name()
            ));
        }
    }
    // `mailvault COMMAND --flag` anywhere else: the flag exists.
    for file in markdown_files().into_iter().filter(|f| *f != manual) {
        let text = std::fs::read_to_string(&file).unwrap();
        for l in lines(&text) {
            let segments: Vec<String> = if l.code {
                vec![l.text.split(" # ").next().unwrap_or("").to_string()]
            } else {
                split_spans(&l.text).1
            };
            for s in segments
                .iter()
                .filter(|s| s.trim_start().starts_with("mailvault "))
            {
                for (ctx, flag) in flags_in(s, &[], &known) {
                    let Some(ctx) = ctx else { continue };
                    let target = known.iter().find(|c| c.path == ctx).unwrap();
                    if !target.all.contains(&flag) {
                        problems.push(format!(
                            "{}:{}: `{}` does not take --{flag} (not in its --help)",
                            rel(&file),
                            l.number,
                            target.name()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the manual and the CLI disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn man_pages_and_completions_cover_every_command() {
    let known = commands();
    let t = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_mailvault");
    for what in ["man", "completions"] {
        let o = Command::new(bin)
            .args(["generate", what])
            .arg(t.path().join(what))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "generate {what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let mut missing = Vec::new();
    for cmd in &known {
        let page = t
            .path()
            .join("man")
            .join(format!("{}.1", cmd.name().replace(' ', "-")));
        match std::fs::read_to_string(&page) {
            Ok(text) => {
                for flag in &cmd.own {
                    if !text.contains(&format!("\\-\\-{}", flag.replace('-', "\\-"))) {
                        missing.push(format!("{}: no --{flag}", page.display()));
                    }
                }
            }
            Err(_) => missing.push(format!(
                "no man page {} for `{}`",
                page.display(),
                cmd.name()
            )),
        }
    }
    let bash = std::fs::read_to_string(t.path().join("completions/mailvault.bash")).unwrap();
    for cmd in known.iter().filter(|c| !c.path.is_empty()) {
        let name = cmd.path.last().unwrap();
        if !bash.contains(&format!("{name})")) {
            missing.push(format!(
                "the bash completion does not complete `{}`",
                cmd.name()
            ));
        }
    }
    for f in ["_mailvault", "mailvault.fish"] {
        let text = std::fs::read_to_string(t.path().join("completions").join(f)).unwrap();
        for cmd in known.iter().filter(|c| c.path.len() == 1) {
            if !text.contains(cmd.path[0].as_str()) {
                missing.push(format!("{f} does not complete `{}`", cmd.name()));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
