//! The engine's layout, held to the rules docs/architecture.md states: the modules of
//! `crates/core/src` import each other one way (no circles), no file holds more than
//! [`MAX_FILE_LINES`] lines of code and no function is longer than [`MAX_FN_LINES`] lines.
//! Test code (`#[cfg(test)]` items and the files they declare) is left out.
//!
//! The graph is read from the code with `syn`: every `use` tree and every path in the code
//! that starts with `crate::`, `super::`, `self::` or the name of a child module, resolved to
//! the file that defines the module it names. A module's face (`pub use child::Item`, which
//! hands a child's name on) is not an import of the parent's; paths inside macro invocations
//! are not read.
#![allow(clippy::unwrap_used)] // a test: a failed step fails it

use proc_macro2::Span;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// Lines of code (not blank, not only a comment) a file of the engine may hold.
const MAX_FILE_LINES: usize = 900;
/// Lines a function may span, from `fn` to its closing brace.
const MAX_FN_LINES: usize = 100;

/// One source file of the crate.
struct File {
    path: PathBuf,
    /// The module path of the file (`["repo", "pack"]`); empty for lib.rs.
    module: Vec<String>,
    syntax: syn::File,
    text: String,
}

struct Crate {
    files: Vec<File>,
    /// Module path -> index of the file that holds it (inline modules map to their file).
    modules: BTreeMap<Vec<String>, usize>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

fn line(s: Span) -> usize {
    s.start().line
}

fn end_line(s: Span) -> usize {
    s.end().line
}

/// Reads lib.rs and every module file it declares, leaving out `#[cfg(test)]` modules.
fn read_crate() -> Crate {
    let mut c = Crate {
        files: Vec::new(),
        modules: BTreeMap::new(),
    };
    read_file(&mut c, src().join("lib.rs"), Vec::new());
    c
}

fn read_file(c: &mut Crate, path: PathBuf, module: Vec<String>) {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let idx = c.files.len();
    // A file's child modules live beside it (lib.rs, mod.rs) or in a folder of its name.
    let dir = match path.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => path.parent().unwrap().to_path_buf(),
        _ => path.with_extension(""),
    };
    let mut children = Vec::new();
    collect_modules(c, idx, &syntax.items, &module, &dir, &mut children);
    c.modules.insert(module.clone(), idx);
    c.files.push(File {
        path,
        module,
        syntax,
        text,
    });
    for (file, m) in children {
        read_file(c, file, m);
    }
}

fn collect_modules(
    c: &mut Crate,
    idx: usize,
    items: &[syn::Item],
    module: &[String],
    dir: &Path,
    children: &mut Vec<(PathBuf, Vec<String>)>,
) {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if is_cfg_test(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let mut sub = module.to_vec();
        sub.push(name.clone());
        match &m.content {
            Some((_, inner)) => {
                c.modules.insert(sub.clone(), idx);
                collect_modules(c, idx, inner, &sub, &dir.join(&name), children);
            }
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(&name).join("mod.rs");
                let file = if flat.exists() { flat } else { nested };
                children.push((file, sub));
            }
        }
    }
}

/// Line ranges of `#[cfg(test)]` items anywhere in a file.
fn test_ranges(f: &syn::File) -> Vec<(usize, usize)> {
    struct V(Vec<(usize, usize)>);
    impl<'a> Visit<'a> for V {
        fn visit_item(&mut self, i: &'a syn::Item) {
            let attrs: &[syn::Attribute] = match i {
                syn::Item::Fn(x) => &x.attrs,
                syn::Item::Mod(x) => &x.attrs,
                syn::Item::Impl(x) => &x.attrs,
                syn::Item::Use(x) => &x.attrs,
                syn::Item::Struct(x) => &x.attrs,
                syn::Item::Enum(x) => &x.attrs,
                syn::Item::Const(x) => &x.attrs,
                syn::Item::Static(x) => &x.attrs,
                syn::Item::Trait(x) => &x.attrs,
                syn::Item::Type(x) => &x.attrs,
                _ => &[],
            };
            if is_cfg_test(attrs) {
                self.0.push((line(i.span()), end_line(i.span())));
            } else {
                syn::visit::visit_item(self, i);
            }
        }
        fn visit_impl_item_fn(&mut self, i: &'a syn::ImplItemFn) {
            if is_cfg_test(&i.attrs) {
                self.0.push((line(i.span()), end_line(i.span())));
            } else {
                syn::visit::visit_impl_item_fn(self, i);
            }
        }
    }
    let mut v = V(Vec::new());
    v.visit_file(f);
    v.0
}

fn in_ranges(ranges: &[(usize, usize)], l: usize) -> bool {
    ranges.iter().any(|&(a, b)| a <= l && l <= b)
}

/// Lines that are neither blank nor only a comment, outside test items.
fn code_lines(f: &File) -> usize {
    let tests = test_ranges(&f.syntax);
    f.text
        .lines()
        .enumerate()
        .filter(|(i, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with("//") && !in_ranges(&tests, i + 1)
        })
        .count()
}

/// Every function (free, in an impl or a trait's default) with its first and last line.
fn functions(f: &File) -> Vec<(String, usize, usize)> {
    struct V(Vec<(String, usize, usize)>);
    impl<'a> Visit<'a> for V {
        fn visit_item_fn(&mut self, i: &'a syn::ItemFn) {
            let span = i.sig.fn_token.span;
            self.0.push((
                i.sig.ident.to_string(),
                line(span),
                end_line(i.block.brace_token.span.close()),
            ));
            syn::visit::visit_item_fn(self, i);
        }
        fn visit_impl_item_fn(&mut self, i: &'a syn::ImplItemFn) {
            self.0.push((
                i.sig.ident.to_string(),
                line(i.sig.fn_token.span),
                end_line(i.block.brace_token.span.close()),
            ));
            syn::visit::visit_impl_item_fn(self, i);
        }
        fn visit_trait_item_fn(&mut self, i: &'a syn::TraitItemFn) {
            if let Some(b) = &i.default {
                self.0.push((
                    i.sig.ident.to_string(),
                    line(i.sig.fn_token.span),
                    end_line(b.brace_token.span.close()),
                ));
            }
            syn::visit::visit_trait_item_fn(self, i);
        }
    }
    let tests = test_ranges(&f.syntax);
    let mut v = V(Vec::new());
    v.visit_file(&f.syntax);
    v.0.retain(|(_, a, _)| !in_ranges(&tests, *a));
    v.0
}

/// The module paths a file names (absolute, from the crate root), with the line of each.
fn references(c: &Crate, f: &File) -> Vec<(Vec<String>, usize)> {
    struct V<'c> {
        c: &'c Crate,
        module: Vec<String>,
        out: Vec<(Vec<String>, usize)>,
        tests: Vec<(usize, usize)>,
    }
    impl V<'_> {
        fn resolve(&mut self, segs: Vec<String>, l: usize) {
            if in_ranges(&self.tests, l) || segs.is_empty() {
                return;
            }
            let mut abs = self.module.clone();
            let mut rest = segs.as_slice();
            match rest[0].as_str() {
                "crate" => {
                    abs.clear();
                    rest = &rest[1..];
                }
                "self" => rest = &rest[1..],
                "super" => {
                    while rest.first().is_some_and(|s| s == "super") {
                        abs.pop();
                        rest = &rest[1..];
                    }
                }
                first => {
                    let mut child = abs.clone();
                    child.push(first.to_string());
                    if !self.c.modules.contains_key(&child) {
                        return; // another crate, a local name or an item in scope
                    }
                }
            }
            abs.extend(rest.iter().cloned());
            self.out.push((abs, l));
        }
        fn use_tree(&mut self, prefix: &mut Vec<String>, t: &syn::UseTree, l: usize) {
            match t {
                syn::UseTree::Path(p) => {
                    prefix.push(p.ident.to_string());
                    self.use_tree(prefix, &p.tree, l);
                    prefix.pop();
                }
                syn::UseTree::Name(n) => {
                    let mut p = prefix.clone();
                    if n.ident != "self" {
                        p.push(n.ident.to_string());
                    }
                    self.resolve(p, l);
                }
                syn::UseTree::Rename(r) => {
                    let mut p = prefix.clone();
                    if r.ident != "self" {
                        p.push(r.ident.to_string());
                    }
                    self.resolve(p, l);
                }
                syn::UseTree::Glob(_) => self.resolve(prefix.clone(), l),
                syn::UseTree::Group(g) => {
                    for t in &g.items {
                        self.use_tree(prefix, t, l);
                    }
                }
            }
        }
    }
    impl<'a> Visit<'a> for V<'_> {
        fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
            // A module's face: `pub use child::Item` hands a child's name on; the parent's
            // code does not depend on it (and the child may use the parent's items).
            let face = !matches!(u.vis, syn::Visibility::Inherited)
                && match &u.tree {
                    syn::UseTree::Path(p) => {
                        let mut child = self.module.clone();
                        child.push(p.ident.to_string());
                        p.ident == "self" || self.c.modules.contains_key(&child)
                    }
                    _ => false,
                };
            if !face {
                self.use_tree(&mut Vec::new(), &u.tree, line(u.span()));
            }
        }
        fn visit_item_mod(&mut self, m: &'a syn::ItemMod) {
            if let Some((_, items)) = &m.content {
                self.module.push(m.ident.to_string());
                for i in items {
                    self.visit_item(i);
                }
                self.module.pop();
            }
        }
        fn visit_path(&mut self, p: &'a syn::Path) {
            if p.segments.len() > 1 {
                let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
                self.resolve(segs, line(p.span()));
            }
            syn::visit::visit_path(self, p);
        }
    }
    let mut v = V {
        c,
        module: f.module.clone(),
        out: Vec::new(),
        tests: test_ranges(&f.syntax),
    };
    v.visit_file(&f.syntax);
    v.out
}

/// The file that defines the longest module prefix of `path`.
fn file_of(c: &Crate, path: &[String]) -> Option<usize> {
    (0..=path.len())
        .rev()
        .find_map(|n| c.modules.get(&path[..n]).copied())
}

fn rel(p: &Path) -> String {
    p.strip_prefix(src())
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

/// Edges file -> file, each with the names it takes.
fn graph(c: &Crate) -> BTreeMap<(usize, usize), BTreeSet<String>> {
    let mut edges: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
    for (i, f) in c.files.iter().enumerate() {
        for (path, _) in references(c, f) {
            if let Some(j) = file_of(c, &path) {
                if j != i {
                    let name = path.last().cloned().unwrap_or_default();
                    edges.entry((i, j)).or_default().insert(name);
                }
            }
        }
    }
    edges
}

/// Strongly connected components with more than one file (Tarjan).
fn circles(n: usize, edges: &BTreeMap<(usize, usize), BTreeSet<String>>) -> Vec<Vec<usize>> {
    struct T<'e> {
        adj: Vec<Vec<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
        _e: std::marker::PhantomData<&'e ()>,
    }
    impl T<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on[v] = true;
            for w in self.adj[v].clone() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    self.out.push(comp);
                }
            }
        }
    }
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in edges.keys() {
        adj[a].push(b);
    }
    let mut t = T {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
        _e: std::marker::PhantomData,
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn no_import_circles() {
    let c = read_crate();
    let edges = graph(&c);
    let found = circles(c.files.len(), &edges);
    let mut report = String::new();
    for comp in &found {
        report.push_str("circle:\n");
        for ((a, b), names) in &edges {
            if comp.contains(a) && comp.contains(b) {
                let names: Vec<_> = names.iter().cloned().collect();
                report.push_str(&format!(
                    "  {} -> {}: {}\n",
                    rel(&c.files[*a].path),
                    rel(&c.files[*b].path),
                    names.join(", ")
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files that import each other in a loop:\n{report}"
    );
}

#[test]
fn no_file_over_the_limit() {
    let c = read_crate();
    let long: Vec<_> = c
        .files
        .iter()
        .map(|f| (rel(&f.path), code_lines(f)))
        .filter(|(_, n)| *n > MAX_FILE_LINES)
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines of code (tests apart): {long:?}"
    );
}

#[test]
fn no_function_over_the_limit() {
    let c = read_crate();
    let mut long = Vec::new();
    for f in &c.files {
        for (name, a, b) in functions(f) {
            if b + 1 - a > MAX_FN_LINES {
                long.push(format!("{}:{a} {name}: {} lines", rel(&f.path), b + 1 - a));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The checks can fail: a file that imports its importer is a circle, a long function is
/// found, and a test module is left out of the count.
#[test]
fn the_checks_see_what_they_look_for() {
    let a: syn::File = syn::parse_str("use crate::b::X; pub struct Y;").unwrap();
    let b: syn::File = syn::parse_str(
        "use crate::a::Y; pub struct X;\n#[cfg(test)]\nmod tests {\n use crate::c::Z;\n}",
    )
    .unwrap();
    let body = "fn long() {\n".to_string() + &"    let _x = 1;\n".repeat(MAX_FN_LINES) + "}\n";
    let long: syn::File = syn::parse_str(&body).unwrap();
    let mut c = Crate {
        files: Vec::new(),
        modules: BTreeMap::new(),
    };
    for (name, syntax, text) in [
        ("a", a, String::new()),
        ("b", b, String::new()),
        ("c", long, body.clone()),
    ] {
        c.modules.insert(vec![name.into()], c.files.len());
        c.files.push(File {
            path: PathBuf::from(name),
            module: vec![name.into()],
            syntax,
            text,
        });
    }
    let edges = graph(&c);
    assert_eq!(circles(3, &edges), vec![vec![1, 0]]);
    assert!(
        !edges.contains_key(&(1, 2)),
        "a test module's import counted"
    );
    let f = functions(&c.files[2]);
    assert_eq!(f[0].2 + 1 - f[0].1, MAX_FN_LINES + 2);
    assert_eq!(code_lines(&c.files[2]), MAX_FN_LINES + 2);
}
