//! The backend's layers, kept by a test rather than by prose. Each source
//! file of `backend/src` is parsed (syn), and every path it names through
//! `crate::` or `super::` (in `use` items and in code alike, test code left
//! out) becomes an arrow to the module it names. The test fails on:
//! - an arrow between top-level modules that [`FLOORS`] forbids: a module
//!   may use only modules on floors below its own;
//! - a circle of files (a file that, through others, uses itself);
//! - a library used outside its owner ([`OWNERS`]);
//! - a file longer than [`MAX_LINES`] before its tests, but for the few
//!   still being taken apart ([`LONG_FILES`]), which may only shrink;
//! - a function longer than [`MAX_FN_LINES`] in the backend, the UI or the
//!   wire types, but for those listed in [`LONG_FNS`], which may only shrink.
//!
//! [`FLOORS`] is the architecture in one place; ARCHITECTURE.md describes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The backend's top-level modules, bottom floor first. A module may use the
/// modules of the floors below its own, never one on its own floor or above.
const FLOORS: &[&[&str]] = &[
    // Time and the secret-name rules: used by everything, using nothing.
    &["clock", "redact"],
    // Who a process is; the live sample hub; tokens and roles.
    &["identity", "hub", "auth"],
    // Settings as data.
    &["config"],
    // What reads, keeps and acts: NVML and /proc, SQLite, processes and signals.
    &["telemetry", "store", "supervisor"],
    // The serving benchmark; the HTTP pieces the API and the hub share.
    &["bench", "http"],
    // What the managed server's own /metrics says.
    &["scrape"],
    // The guarded restart.
    &["restart"],
    // Unattended campaigns; the command-line client.
    &["campaign", "cli"],
    // The agent's HTTP API and the UI; the hub over many hosts.
    &["api", "fleet"],
    // The whole agent put together.
    &["startup"],
];

/// Libraries (or calls) only one top-level module may use: (what, where).
const OWNERS: &[(&str, &str)] = &[
    ("rusqlite", "store"),
    ("nvml_wrapper", "telemetry"),
    ("signals", "supervisor"),
];

/// The most lines a source file may have before its `#[cfg(test)]` part.
const MAX_LINES: usize = 600;

/// Files still longer than [`MAX_LINES`], each with the length it may not
/// exceed: the list only shrinks (a file that comes under the limit is taken
/// off it).
const LONG_FILES: &[(&str, usize)] = &[];

/// The most lines a function may have, from its `fn` line to its closing
/// brace (the code is rustfmt's: a function ends at the first `}` at its
/// own indentation).
const MAX_FN_LINES: usize = 100;

/// Functions still longer than [`MAX_FN_LINES`]: (file below the repository,
/// name, the length it may not exceed). The list only shrinks.
const LONG_FNS: &[(&str, &str, usize)] = &[];

/// The files of the binary: above every floor (they parse the command line
/// and start the library).
const BINARY: [&str; 2] = ["main.rs", "args.rs"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../backend/src")
}

/// One source file: its module path (`["store", "bench"]`) and what it names.
#[derive(Debug)]
struct File {
    path: PathBuf,
    module: Vec<String>,
    /// Every `crate::`/`super::` path named, made absolute (without `crate`).
    uses: BTreeSet<Vec<String>>,
    /// Every path whose first segment is another crate (`rusqlite::…`).
    external: BTreeSet<Vec<String>>,
    /// Its lines before its inline tests.
    lines: usize,
    /// Its functions that return `Result<_, String>`.
    string_errors: Vec<String>,
}

/// The module path of a file below `src`: `store/bench.rs` → store::bench,
/// `store/mod.rs` → store, `lib.rs` → (the crate).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

fn is_test_attr(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                l.tokens
                    .to_string()
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "test")
            })
    })
}

struct Collector<'a> {
    module: &'a [String],
    uses: BTreeSet<Vec<String>>,
    external: BTreeSet<Vec<String>>,
    /// Functions that return `Result<_, String>`.
    string_errors: Vec<String>,
}

/// Whether `ty` is `Result<_, String>` (an error that is only words).
fn is_string_result(ty: &syn::Type) -> bool {
    let syn::Type::Path(p) = ty else { return false };
    let Some(last) = p.path.segments.last() else {
        return false;
    };
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return false;
    };
    let types: Vec<&syn::Type> = (args.args.iter())
        .filter_map(|a| match a {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    last.ident == "Result"
        && matches!(types.get(1), Some(syn::Type::Path(e))
            if e.path.segments.len() == 1 && e.path.segments[0].ident == "String")
}

impl Collector<'_> {
    /// Records `segments` (as written) from this file's module.
    fn record(&mut self, segments: Vec<String>) {
        let Some(first) = segments.first() else {
            return;
        };
        match first.as_str() {
            "crate" => {
                self.uses.insert(segments[1..].to_vec());
            }
            "super" | "self" => {
                let mut base = self.module.to_vec();
                let mut rest = segments.as_slice();
                while let Some(s) = rest.first() {
                    match s.as_str() {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                self.uses.insert(base);
            }
            _ => {
                self.external.insert(segments);
            }
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.record(full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                full.push(r.ident.to_string());
                self.record(full);
            }
            syn::UseTree::Glob(_) => self.record(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_attr(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_signature(&mut self, sig: &'ast syn::Signature) {
        if let syn::ReturnType::Type(_, ty) = &sig.output
            && is_string_result(ty)
        {
            self.string_errors.push(sig.ident.to_string());
        }
        syn::visit::visit_signature(self, sig);
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            self.record(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Paths inside macro calls (`format!`, `tracing::info!`) are tokens:
        // read them as words, `crate :: a :: b`.
        let text = m.tokens.to_string();
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut i = 0;
        while i < words.len() {
            if matches!(words[i], "crate" | "libc" | "rusqlite" | "nvml_wrapper")
                && words.get(i + 1) == Some(&"::")
            {
                let mut path = vec![words[i].to_owned()];
                let mut j = i + 2;
                while let Some(w) = words.get(j) {
                    path.push((*w).to_owned());
                    if words.get(j + 1) != Some(&"::") {
                        break;
                    }
                    j += 2;
                }
                self.record(path);
                i = j;
            }
            i += 1;
        }
        syn::visit::visit_macro(self, m);
    }
}

/// Every non-test source file of the library, parsed.
fn files() -> Vec<File> {
    let root = src();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    stack.push(path);
                }
                continue;
            }
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            let rel = path.strip_prefix(&root).expect("below src").to_path_buf();
            // `tests.rs`, `machine_tests.rs`: modules behind `#[cfg(test)]`.
            if !name.ends_with(".rs")
                || name.ends_with("tests.rs")
                || (rel.components().count() == 1 && BINARY.contains(&name.as_str()))
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable");
            let ast = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{}: does not parse: {e}", path.display()));
            let module = module_of(&rel);
            let mut c = Collector {
                module: &module,
                uses: BTreeSet::new(),
                external: BTreeSet::new(),
                string_errors: Vec::new(),
            };
            c.visit_file(&ast);
            let (uses, external, string_errors) = (c.uses, c.external, c.string_errors);
            out.push(File {
                path: rel,
                module,
                uses,
                external,
                string_errors,
                lines: lines_before_tests(&text),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The file a used path lands in: the longest module prefix that is a file.
fn target<'a>(modules: &'a BTreeMap<Vec<String>, usize>, path: &[String]) -> Option<&'a usize> {
    (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]))
}

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

#[test]
fn every_module_uses_only_the_floors_below_it() {
    let files = files();
    let mut wrong = Vec::new();
    let mut unplaced = BTreeSet::new();
    for f in &files {
        let Some(from) = f.module.first() else {
            continue; // lib.rs: the crate's table of contents
        };
        let Some(own) = floor_of(from) else {
            unplaced.insert(from.clone());
            continue;
        };
        for used in &f.uses {
            let Some(to) = used.first() else {
                continue;
            };
            if to == from {
                continue;
            }
            match floor_of(to) {
                Some(floor) if floor < own => {}
                Some(_) => wrong.push(format!(
                    "{} uses {} (`{}`): {to} is not below {from}",
                    f.path.display(),
                    to,
                    used.join("::")
                )),
                None => {
                    unplaced.insert(to.clone());
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules on no floor of FLOORS (add them): {unplaced:?}"
    );
    assert!(
        wrong.is_empty(),
        "arrows that go up or across:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_file_uses_itself_through_others() {
    let files = files();
    let modules: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let edges: Vec<BTreeSet<usize>> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            f.uses
                .iter()
                .filter_map(|u| target(&modules, u).copied())
                // A parent's `mod` declarations and re-exports of its own
                // children are not uses of them in this sense.
                .filter(|&t| t != i && !files[t].module.starts_with(&f.module))
                .collect()
        })
        .collect();
    let circles = strongly_connected(&edges);
    let named: Vec<String> = circles
        .iter()
        .map(|c| {
            let names: Vec<String> = c
                .iter()
                .map(|&i| files[i].path.display().to_string())
                .collect();
            names.join(" → ")
        })
        .collect();
    assert!(named.is_empty(), "circles of files:\n{}", named.join("\n"));
}

#[test]
fn each_library_is_used_by_its_owner_only() {
    let mut wrong = Vec::new();
    for f in files() {
        let module = f.module.first().cloned().unwrap_or_default();
        for path in &f.external {
            let what = match path.first().map(String::as_str) {
                Some(lib @ ("rusqlite" | "nvml_wrapper")) => lib,
                Some("libc")
                    if path.iter().any(|s| {
                        matches!(
                            s.as_str(),
                            "kill" | "killpg" | "SYS_pidfd_send_signal" | "tgkill"
                        )
                    }) =>
                {
                    "signals"
                }
                Some("nix") if path.iter().any(|s| s == "signal") => "signals",
                _ => continue,
            };
            let owner = OWNERS
                .iter()
                .find(|(w, _)| *w == what)
                .map(|(_, o)| *o)
                .expect("an owner");
            if module != owner {
                wrong.push(format!(
                    "{} uses {what} (`{}`): only {owner}/ may",
                    f.path.display(),
                    path.join("::")
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Lines before the file's inline test module (`#[cfg(test)]` then
/// `mod … {`); all of them where it has none (an out-of-line `mod tests;`
/// is a line like any other).
fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim() != "#[cfg(test)]" {
            continue;
        }
        let next = lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.starts_with("#["));
        if next.is_some_and(|n| n.starts_with("mod ") && n.ends_with('{')) {
            return i;
        }
    }
    lines.len()
}

#[test]
fn no_file_is_longer_than_the_limit() {
    let mut wrong = Vec::new();
    let mut listed = Vec::new();
    for f in files() {
        let lines = f.lines;
        let name = f.path.to_string_lossy().into_owned();
        match LONG_FILES.iter().find(|(p, _)| *p == name) {
            Some(&(_, most)) => {
                listed.push(name.clone());
                if lines > most {
                    wrong.push(format!(
                        "{name}: {lines} lines, it may only shrink (at most {most})"
                    ));
                } else if lines <= MAX_LINES {
                    wrong.push(format!(
                        "{name}: {lines} lines, now under {MAX_LINES}: take it off LONG_FILES"
                    ));
                }
            }
            None if lines > MAX_LINES => {
                wrong.push(format!("{name}: {lines} lines, over {MAX_LINES}: split it"));
            }
            None => {}
        }
    }
    for (p, _) in LONG_FILES {
        if !listed.iter().any(|l| l == p) {
            wrong.push(format!("{p} is on LONG_FILES but not in backend/src"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reading works: it finds what it must (a control for the tests above).
#[test]
fn the_reader_sees_known_arrows() {
    let files = files();
    let find = |p: &str| {
        files
            .iter()
            .find(|f| f.path == Path::new(p))
            .unwrap_or_else(|| panic!("{p} is not read"))
    };
    // A `use crate::…` item, a path in code, and a library's path.
    assert!(
        find("startup.rs")
            .uses
            .iter()
            .any(|u| u.first().is_some_and(|m| m == "api"))
    );
    assert!(
        find("store/mod.rs")
            .external
            .iter()
            .any(|p| p[0] == "rusqlite")
    );
    assert!(
        find("supervisor/pidfd.rs")
            .external
            .iter()
            .any(|p| p.iter().any(|s| s == "SYS_pidfd_send_signal")),
        "{:?}",
        find("supervisor/pidfd.rs").external
    );
    // `super::` is resolved against the file's module.
    assert!(find("store/bench.rs").uses.contains(&vec![
        "store".to_owned(),
        "codec".to_owned(),
        "name".to_owned()
    ]));
    // A circle is found where there is one.
    assert_eq!(
        strongly_connected(&[BTreeSet::from([1]), BTreeSet::from([0]), BTreeSet::new()]),
        vec![vec![0, 1]]
    );
}

/// The circles of a directed graph (strongly connected components of more
/// than one node), each sorted.
fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    let graph = petgraph::graph::DiGraph::<(), ()>::from_edges(
        edges
            .iter()
            .enumerate()
            .flat_map(|(from, to)| to.iter().map(move |&t| (from as u32, t as u32))),
    );
    let mut out: Vec<Vec<usize>> = petgraph::algo::tarjan_scc(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut c: Vec<usize> = c.into_iter().map(|n| n.index()).collect();
            c.sort_unstable();
            c
        })
        .collect();
    out.sort();
    out
}

/// Every function of `text` before its tests: (name, lines from its `fn`
/// line to its closing brace).
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().take(lines_before_tests(text)).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut rest = body;
        if let Some(r) = rest.strip_prefix("pub") {
            rest = match r.strip_prefix('(') {
                Some(r) => r.split_once(") ").map_or("", |(_, r)| r),
                None => r.strip_prefix(' ').unwrap_or(""),
            };
        }
        for q in ["const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(q).unwrap_or(rest);
        }
        let Some(sig) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name: String = sig
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        // A declaration without a body (a trait's) has no closing line.
        if let Some(end) = lines[i..].iter().position(|l| *l == close) {
            let between = &lines[i..i + end];
            if !between.iter().any(|l| {
                l.trim_end().ends_with(';')
                    && l.starts_with(indent)
                    && l[indent.len()..].starts_with("fn ")
            }) {
                out.push((name, end + 1));
            }
        }
    }
    out
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for krate in ["backend/src", "frontend/src", "shared/src"] {
        let mut stack = vec![root.join(krate)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("a source folder").flatten() {
                let path = entry.path();
                let name = path.to_string_lossy().into_owned();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if !name.ends_with(".rs") || name.ends_with("tests.rs") {
                    continue;
                }
                let rel = path
                    .strip_prefix(&root)
                    .expect("below the root")
                    .to_string_lossy()
                    .into_owned();
                let text = std::fs::read_to_string(&path).expect("readable");
                for (f, n) in functions(&text) {
                    let listed = LONG_FNS.iter().find(|(p, g, _)| *p == rel && *g == f);
                    match listed {
                        Some(&(_, _, most)) => {
                            seen.push((rel.clone(), f.clone()));
                            if n > most {
                                wrong.push(format!(
                                    "{rel}: `{f}` is {n} lines, it may only shrink (at most {most})"
                                ));
                            } else if n <= MAX_FN_LINES {
                                wrong.push(format!("{rel}: `{f}` is {n} lines, now within {MAX_FN_LINES}: take it off LONG_FNS"));
                            }
                        }
                        None if n > MAX_FN_LINES => {
                            wrong.push(format!(
                                "{rel}: `{f}` is {n} lines, over {MAX_FN_LINES}: split it"
                            ));
                        }
                        None => {}
                    }
                }
            }
        }
    }
    for (p, f, _) in LONG_FNS {
        if !seen.iter().any(|(q, g)| q == p && g == f) {
            wrong.push(format!("{p}: `{f}` is on LONG_FNS but not found"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reader finds a function's end at its own indentation, past nested
/// blocks and a multi-line signature, and skips a body-less declaration.
#[test]
fn the_function_reader_measures_what_it_should() {
    let text = "pub(crate) fn a(\n    x: u32,\n) -> u32 {\n    if x > 1 {\n        x\n    } else {\n        0\n    }\n}\n\ntrait T {\n    fn b(&self);\n    fn c(&self) {\n    }\n}\n";
    assert_eq!(
        functions(text),
        vec![("a".to_owned(), 9), ("c".to_owned(), 2)]
    );
}

/// Errors are typed: no library function returns `Result<_, String>`
/// (words only become an answer's or a record's at the edge).
#[test]
fn no_function_returns_words_for_an_error() {
    let found: Vec<String> = (files().iter())
        .flat_map(|f| (f.string_errors.iter()).map(move |n| format!("{}: {n}", f.path.display())))
        .collect();
    assert!(
        found.is_empty(),
        "these return `Result<_, String>`; give their module a thiserror enum:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_error_reader_finds_words_for_an_error() {
    let text = "fn a() -> Result<u8, String> { Ok(1) }\nfn b() -> Result<String, E> { todo!() }\nimpl X { pub fn c(&self) -> std::result::Result<(), String> { Ok(()) } }\n#[cfg(test)]\nmod tests { fn d() -> Result<(), String> { Ok(()) } }\n";
    let ast = syn::parse_file(text).expect("parses");
    let mut c = Collector {
        module: &[],
        uses: BTreeSet::new(),
        external: BTreeSet::new(),
        string_errors: Vec::new(),
    };
    c.visit_file(&ast);
    assert_eq!(c.string_errors, ["a", "c"]);
}
