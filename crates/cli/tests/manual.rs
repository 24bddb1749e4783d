//! The user manual against the code (issue 24, item 2): every relative link in README.md
//! and docs/ leads to a file there and every `#anchor` to one of its headings; every
//! command's flags (as `mailvault COMMAND --help` lists them) are written in its section
//! of docs/manual/commands.md (`## mailvault COMMAND`), the options every command takes in
//! its section `## Options every command takes`, and every `--flag` a section names exists.
//! Everywhere in README.md and docs/, a command line written `mailvault COMMAND --flag…`
//! (in a code block or a code span) uses flags that COMMAND takes. `mailvault generate`
//! writes a man page for every command and subcommand, naming each of its flags, and
//! completions that know every command.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

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

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation other than `-`
/// and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for line in without_code_blocks(text) {
        if let Some(h) = line.strip_prefix('#') {
            let s = slug(h.trim_start_matches('#'));
            let n = seen.entry(s.clone()).or_default();
            out.insert(if *n == 0 {
                s.clone()
            } else {
                format!("{s}-{n}")
            });
            *n += 1;
        }
    }
    out
}

fn without_code_blocks(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The targets of the inline links `[text](target)` of a line (code spans left out).
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let plain: String = line
        .split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(" ");
    let mut rest = plain.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(
            after[..end]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string(),
        );
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in without_code_blocks(&text) {
            for target in links(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let dest = match path {
                    "" => file.clone(),
                    p => file.parent().unwrap().join(p),
                };
                if !dest.exists() {
                    broken.push(format!("{}: {target}: no such file", file.display()));
                    continue;
                }
                if let Some(a) = anchor.filter(|_| dest.is_file()) {
                    let there = std::fs::read_to_string(&dest).unwrap_or_default();
                    if !anchors(&there).contains(a) {
                        broken.push(format!("{}: {target}: no heading #{a}", file.display()));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mailvault"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// The long flags an option list of `--help` shows (`--flag` at the start of an entry).
fn flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("-")
                .filter(|_| !l.starts_with("--"))
                .map_or(l, |s| s.split_once(", ").map_or(s, |(_, rest)| rest));
            let name = l.strip_prefix("--")?;
            let end = name
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(name.len());
            Some(format!("--{}", &name[..end]))
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// The commands `mailvault --help` lists.
fn commands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

/// The sections of the commands chapter, by heading (`## ...`), with their text.
fn sections(text: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            current = Some(h.trim().to_string());
            out.entry(h.trim().to_string()).or_default();
        } else if let Some(c) = &current {
            let s = out.get_mut(c).unwrap();
            s.push_str(line);
            s.push('\n');
        }
    }
    out
}

/// The `--flags` a text names.
fn named_flags(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(j) = text[i..].find("--") {
        let start = i + j;
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'-');
        let name: String = text[start + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        // `--keep-*` stands for a family of flags, not one.
        let family = text[start + 2 + name.len()..].starts_with('*');
        if before_ok && !family && name.len() > 1 && name.as_bytes()[0].is_ascii_lowercase() {
            out.insert(format!("--{}", name.trim_end_matches('-')));
        }
        i = start + 2 + name.len();
    }
    out
}

#[test]
fn every_flag_is_in_the_manual_and_every_flag_there_exists() {
    let chapter = root().join("docs/manual/commands.md");
    let text =
        std::fs::read_to_string(&chapter).unwrap_or_else(|e| panic!("{}: {e}", chapter.display()));
    let sections = sections(&text);
    let top = help(&[]);
    let global = flags(&top);
    let global_text = sections
        .get("Options every command takes")
        .expect("a section `## Options every command takes`");
    let mut wrong = Vec::new();
    for f in &global {
        if !named_flags(global_text).contains(f) {
            wrong.push(format!(
                "{f} (an option of every command) is not in `## Options every command takes`"
            ));
        }
    }
    for f in named_flags(global_text) {
        if !global.contains(&f) && f != "--help" && f != "--version" {
            wrong.push(format!(
                "`## Options every command takes` names {f}, which is no global option"
            ));
        }
    }
    for cmd in commands(&top) {
        let heading = format!("mailvault {cmd}");
        let Some(section) = sections.get(&heading) else {
            wrong.push(format!("no section `## {heading}`"));
            continue;
        };
        // A command's own flags, with those of its subcommands (`repair index`).
        let cmd_help = help(&[&cmd]);
        let mut all = flags(&cmd_help);
        for sub in commands(&cmd_help) {
            all.extend(flags(&help(&[&cmd, &sub])));
        }
        let own: BTreeSet<String> = all.difference(&global).cloned().collect();
        let named = named_flags(section);
        for f in own.difference(&named) {
            wrong.push(format!("{f} of `mailvault {cmd}` is not in `## {heading}`"));
        }
        for f in named.difference(&own) {
            if !global.contains(f) && f != "--help" && f != "--version" {
                wrong.push(format!(
                    "`## {heading}` names {f}, which `mailvault {cmd}` does not take"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the manual and the CLI disagree ({}):\n{}",
        chapter.display(),
        wrong.join("\n")
    );
}

/// Every command and subcommand `--help` lists (`["repair", "index"]`), `mailvault` itself
/// (`[]`) first.
fn command_paths() -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    let mut i = 0;
    while i < out.len() {
        let path = out[i].clone();
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        for sub in commands(&help(&args)) {
            let mut p = path.clone();
            p.push(sub);
            out.push(p);
        }
        i += 1;
    }
    out
}

/// The flags `mailvault PATH` takes: its own and the options every command takes.
fn flags_of(path: &[String]) -> BTreeSet<String> {
    let args: Vec<&str> = path.iter().map(String::as_str).collect();
    let mut f = flags(&help(&args));
    f.extend(flags(&help(&[])));
    f.extend(["--help".to_string(), "--version".to_string()]);
    f
}

/// The command lines of a Markdown text that start with `mailvault `: each line of a code
/// block (lines continued with `\` joined, a `# comment` left out) and each code span, with
/// the line number they start on.
fn command_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut fenced = false;
    let mut continued = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continued = false;
            continue;
        }
        if fenced {
            let code = line.split(" # ").next().unwrap_or("");
            let code = code.trim().trim_end_matches('\\').trim_start_matches("$ ");
            if continued {
                let last = out.last_mut().unwrap();
                last.1.push(' ');
                last.1.push_str(code);
            } else {
                out.push((i + 1, code.to_string()));
            }
            continued = line.trim_end().ends_with('\\');
        } else {
            for span in line.split('`').skip(1).step_by(2) {
                out.push((i + 1, span.to_string()));
            }
        }
    }
    out.retain(|(_, l)| l.starts_with("mailvault "));
    out
}

#[test]
fn every_command_line_in_the_docs_uses_flags_its_command_takes() {
    let paths = command_paths();
    assert!(paths.iter().any(|p| p == &["repair", "index"]), "{paths:?}");
    let mut known: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in command_lines(&text) {
            // The command: the longest run of words after `mailvault` (options every
            // command takes may come first) that names one.
            let words: Vec<&str> = line.split_whitespace().skip(1).collect();
            let mut path: Vec<String> = Vec::new();
            for w in words.iter().filter(|w| !w.starts_with('-')) {
                let mut p = path.clone();
                p.push(w.to_string());
                if paths.contains(&p) {
                    path = p;
                } else if !path.is_empty() {
                    break;
                }
            }
            let takes = known.entry(path.clone()).or_insert_with(|| flags_of(&path));
            // `[--a | --b]`, `--flag=value`: the flag's name only.
            let line = line.replace(['[', ']', '|', '(', ')', '='], " ");
            for f in named_flags(&line).difference(takes) {
                wrong.push(format!(
                    "{}:{n}: `mailvault {}` does not take {f} (not in its --help): {line}",
                    file.strip_prefix(root()).unwrap_or(&file).display(),
                    path.join(" ")
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn man_pages_and_completions_cover_every_command() {
    let t = tempfile::tempdir().unwrap();
    for what in ["man", "completions"] {
        let o = Command::new(env!("CARGO_BIN_EXE_mailvault"))
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
    let global = flags(&help(&[]));
    let bash = std::fs::read_to_string(t.path().join("completions/mailvault.bash")).unwrap();
    let zsh = std::fs::read_to_string(t.path().join("completions/_mailvault")).unwrap();
    let fish = std::fs::read_to_string(t.path().join("completions/mailvault.fish")).unwrap();
    let mut missing = Vec::new();
    for path in command_paths() {
        let mut name = vec!["mailvault".to_string()];
        name.extend(path.iter().cloned());
        let page = t.path().join("man").join(format!("{}.1", name.join("-")));
        let Ok(text) = std::fs::read_to_string(&page) else {
            missing.push(format!(
                "no man page {} for `{}`",
                page.display(),
                name.join(" ")
            ));
            continue;
        };
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let own = flags(&help(&args));
        let own = if path.is_empty() { own } else { &own - &global };
        for f in own {
            // roff escapes every `-`.
            if !text.contains(&f.replace('-', "\\-")) {
                missing.push(format!("{}: no {f}", page.display()));
            }
        }
        if let Some(last) = path.last() {
            if !bash.contains(&format!("{last})")) {
                missing.push(format!(
                    "the bash completion does not complete `{}`",
                    name.join(" ")
                ));
            }
        }
        if path.len() == 1 && !(zsh.contains(&path[0]) && fish.contains(&path[0])) {
            missing.push(format!("the zsh or fish completion lacks `{}`", path[0]));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
