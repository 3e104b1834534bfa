//! The code's shape: no import cycle between the files of jobenv or of the bootstrap, so that each
//! concept has one home and a file can be understood (and tested) from what it imports.
//!
//! Each crate's `src/` is read as text (comments and literals blanked out) and every path it
//! names is resolved to the file of the module it leads into: a file depends on another if it
//! names `crate::…`, `super::…`, `self::…`, a child module (`tree::guard::…` in `run/mod.rs`) or a
//! module it imported under a name (`use crate::record::store;` then `store::file::…`; `use
//! super::*` brings `super`'s children), in a `use` (groups like `use crate::{a, b::{c, d as e}}`
//! included) or anywhere in an expression or a type (`crate::plan::plan(…)`). A path leads to the
//! longest module it names: `a/b.rs` and `a/b/mod.rs` are the module `a::b`, `lib.rs` the crate;
//! an inline `mod tests { use super::*; }` is part of its file. A `mod x;` declaration is not a
//! dependency. The binary's `main.rs` is a crate of its own that nothing in the library can name,
//! so it cannot be on a cycle and is left out.
//!
//! One kind of cycle is not one: a module with its own parts. A folder's `mod.rs` declares its
//! parts and is their face (it re-exports and drives them), and its parts use what it defines for
//! all of them (`run/tree/mod.rs` ↔ `run/tree/cgroup.rs`): a cycle all of whose files are the
//! module of one of them and its parts is allowed. Every other cycle fails: between two parts
//! (`input/keys.rs` ↔ `input/names.rs`), between folders (`record/` ↔ `run/mod.rs`), or out of a
//! folder and back into its face through a file that is not its part.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every `.rs` file of a crate's library under `src`, by its path relative to `src`.
fn sources(src: &str) -> BTreeMap<String, String> {
    let root = repo().join(src);
    let mut files = BTreeMap::new();
    for entry in walkdir::WalkDir::new(&root).sort_by_file_name() {
        let entry = entry.expect("src/ is readable");
        let path = entry.path();
        if !entry.file_type().is_file() || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        if relative == "main.rs" {
            continue;
        }
        files.insert(relative, std::fs::read_to_string(path).unwrap());
    }
    assert!(files.contains_key("lib.rs"), "{src} has no lib.rs");
    files
}

// ---- reading a file's tokens ----------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// The tokens that matter for paths; comments, strings, chars and numbers are skipped (a doc
/// comment's `[crate::x]` link is not an import, nor is a message that names a path).
fn tokens(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i);
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                // An escaped char ('\n', '\'', '\u{..}'): up to the closing quote.
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime: its name is read as an identifier that no path starts with.
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && (at(i) == '"' || at(i) == '#') {
                // A raw string: r"…", r#"…"#.
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                if at(i) == '"' {
                    i += 1;
                    loop {
                        if i >= chars.len() {
                            break;
                        }
                        if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                            i += 1 + hashes;
                            break;
                        }
                        i += 1;
                    }
                }
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&chars, i);
            } else {
                out.push(Tok::Ident(word));
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Tok::Sep);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Tok::Punct(c));
            }
            i += 1;
        }
    }
    out
}

/// Past the string that starts at `chars[i] == '"'`.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    i += 1;
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

// ---- paths ----------------------------------------------------------------------------------

/// One path as written, a `use` tree expanded: `use a::{b, c::d as e}` is `a::b` and `a::c::d`
/// (imported as `e`).
#[derive(Debug)]
struct Written {
    segments: Vec<String>,
    alias: Option<String>,
    glob: bool,
    from_use: bool,
    /// The inline modules (`mod tests { … }`) it is written in.
    inline: Vec<String>,
}

fn is_ident(tok: Option<&Tok>) -> Option<&str> {
    match tok {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// Every path of a file that has at least two segments (`a::b`) or is a `use`.
fn written_paths(toks: &[Tok]) -> Vec<Written> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    // (name, the brace depth inside it)
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(word) if word == "mod" => {
                if let (Some(name), Some(Tok::Punct('{'))) = (is_ident(toks.get(i + 1)), toks.get(i + 2)) {
                    inline.push((name.to_string(), depth + 1));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(word) if word == "use" => {
                let scope: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                let mut leaves = Vec::new();
                i = use_tree(toks, i + 1, Vec::new(), &mut leaves);
                for (segments, alias, glob) in leaves {
                    out.push(Written {
                        segments,
                        alias,
                        glob,
                        from_use: true,
                        inline: scope.clone(),
                    });
                }
                continue;
            }
            Tok::Ident(first) => {
                let starts = i == 0 || !matches!(toks[i - 1], Tok::Sep | Tok::Punct('.'));
                if starts && toks.get(i + 1) == Some(&Tok::Sep) {
                    let mut segments = vec![first.clone()];
                    let mut j = i + 1;
                    while toks.get(j) == Some(&Tok::Sep) {
                        match is_ident(toks.get(j + 1)) {
                            Some(next) => {
                                segments.push(next.to_string());
                                j += 2;
                            }
                            // `Vec::<T>`, or the end of a path
                            None => break,
                        }
                    }
                    let scope = inline.iter().map(|(n, _)| n.clone()).collect();
                    out.push(Written {
                        segments,
                        alias: None,
                        glob: false,
                        from_use: false,
                        inline: scope,
                    });
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Reads one `use` tree from `toks[i]` (after `use`, or inside a group), its leaves into `out`
/// as (segments, alias, glob); returns the index past it (past the `;` at the top).
fn use_tree(
    toks: &[Tok],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>, bool)>,
) -> usize {
    let mut segments = prefix;
    loop {
        match toks.get(i) {
            Some(Tok::Sep) => i += 1,
            Some(Tok::Ident(s)) if s == "as" => {
                let alias = is_ident(toks.get(i + 1)).map(str::to_string);
                out.push((segments, alias, false));
                return finish(toks, i + 2);
            }
            Some(Tok::Ident(s)) => {
                segments.push(s.clone());
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                out.push((segments, None, true));
                return finish(toks, i + 1);
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while i < toks.len() && toks[i] != Tok::Punct('}') {
                    let next = use_tree(toks, i, segments.clone(), out);
                    // Past anything a group holds that is not a path (an attribute, say).
                    i = if next == i { i + 1 } else { next };
                }
                return finish(toks, i + 1);
            }
            _ => {
                out.push((segments, None, false));
                return finish(toks, i);
            }
        }
    }
}

/// Past a `,` or `;` that ends a use tree (but not past the `}` that ends its group).
fn finish(toks: &[Tok], i: usize) -> usize {
    match toks.get(i) {
        Some(Tok::Punct(',' | ';')) => i + 1,
        _ => i,
    }
}

// ---- the graph ------------------------------------------------------------------------------

/// The module a file is: `a/b.rs` and `a/b/mod.rs` are `a::b`, `lib.rs` is the crate.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// An edge's evidence: the first path that made it.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// The file-level import graph of one crate's files (path relative to `src` → text).
fn graph(files: &BTreeMap<String, String>) -> Graph {
    let modules: BTreeMap<Vec<String>, String> = files.keys().map(|f| (module_of(f), f.clone())).collect();
    let file_of = |module: &[String]| -> String {
        // The longest module that is a file (an inline module is part of its file).
        (0..=module.len())
            .rev()
            .find_map(|n| modules.get(&module[..n]).cloned())
            .expect("lib.rs is the crate")
    };
    let children = |module: &[String]| -> BTreeMap<String, Vec<String>> {
        modules
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| (m.last().unwrap().clone(), m.clone()))
            .collect()
    };
    let mut graph = Graph::new();
    for (file, text) in files {
        let here = module_of(file);
        let written = written_paths(&tokens(text));
        // The names that lead to a module: the file's children, what it imported whole, and
        // the children of what it glob-imported (`use super::*` brings `super`'s children).
        let mut names = children(&here);
        // The module a path leads into, and whether the whole path is modules (`use a::b;`).
        let resolve = |w: &Written, names: &BTreeMap<String, Vec<String>>| -> Option<(Vec<String>, bool)> {
            let current: Vec<String> = here.iter().chain(&w.inline).cloned().collect();
            let mut rest = w.segments.iter().peekable();
            let mut base = match rest.peek().map(|s| s.as_str()) {
                Some("crate") => {
                    rest.next();
                    Vec::new()
                }
                Some("self") => {
                    rest.next();
                    current
                }
                Some("super") => {
                    let mut base = current;
                    while rest.peek().is_some_and(|s| *s == "super") {
                        rest.next();
                        base.pop()?;
                    }
                    base
                }
                Some(name) => {
                    let module = names.get(name)?.clone();
                    rest.next();
                    module
                }
                None => return None,
            };
            for segment in rest.by_ref() {
                if segment == "self" {
                    continue;
                }
                let mut next = base.clone();
                next.push(segment.clone());
                if !modules.contains_key(&next) {
                    return Some((base, false));
                }
                base = next;
            }
            Some((base, true))
        };
        // Two passes: what a file imports under a name may be used above the `use`.
        for w in written.iter().filter(|w| w.from_use) {
            let Some((target, whole)) = resolve(w, &names) else {
                continue;
            };
            if w.glob {
                names.extend(children(&target));
            } else if whole && !target.is_empty() {
                let name = w.alias.clone().unwrap_or_else(|| target.last().unwrap().clone());
                if name != "_" {
                    names.insert(name, target);
                }
            }
        }
        let mut edges = BTreeMap::new();
        for w in &written {
            let Some((target, _)) = resolve(w, &names) else {
                continue;
            };
            let to = file_of(&target);
            if &to != file {
                edges.entry(to).or_insert_with(|| w.segments.join("::"));
            }
        }
        graph.insert(file.clone(), edges);
    }
    graph
}

/// Whether a cycle is a module with its own parts: one of its files is the module that every
/// other file on it belongs to (`run/tree/mod.rs` and `run/tree/cgroup.rs`).
fn within_one_module(files: &[&str]) -> bool {
    files.iter().any(|top| {
        let top = module_of(top);
        files.iter().all(|f| module_of(f).starts_with(&top))
    })
}

/// The graph's cycles that are not a module with its own parts, one entry per set of them that
/// share files: each shortest one (`a.rs -> b.rs (crate::b::X) -> a.rs (super::Y)`, with the
/// path that makes each step), then the files of them all.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for component in offending(graph, &graph.keys().cloned().collect()) {
        let mut found = Vec::new();
        let mut shown: Vec<BTreeSet<(&str, &str)>> = Vec::new();
        for start in &component {
            let Some(path) = shortest_cycle(graph, &component, start) else {
                continue;
            };
            if within_one_module(&path) {
                continue;
            }
            let edges: BTreeSet<(&str, &str)> = path.windows(2).map(|p| (p[0], p[1])).collect();
            if shown.contains(&edges) {
                continue;
            }
            shown.push(edges);
            let mut text = start.to_string();
            for pair in path.windows(2) {
                text += &format!(" -> {} ({})", pair[1], graph[pair[0]][pair[1]]);
            }
            found.push(text);
        }
        let all: Vec<&str> = component.iter().map(String::as_str).collect();
        found.push(format!("  (these cycles' files together: {})", all.join(", ")));
        out.push(found.join("\n  "));
    }
    out
}

/// The strongly connected sets of `files` that hold a cycle which is not a module with its own
/// parts. A set whose top file is the module of all the others is a module with its parts, and
/// may still hold such a cycle among the parts: it is looked at again without its top.
fn offending(graph: &Graph, files: &BTreeSet<String>) -> Vec<BTreeSet<String>> {
    let mut out = Vec::new();
    for component in strongly_connected(graph, files) {
        if component.len() < 2 {
            continue;
        }
        let names: Vec<&str> = component.iter().map(String::as_str).collect();
        let top = names.iter().find(|top| {
            let top = module_of(top);
            names.iter().all(|f| module_of(f).starts_with(&top))
        });
        match top {
            Some(top) => {
                let mut rest = component.clone();
                rest.remove(*top);
                out.extend(offending(graph, &rest));
            }
            None => out.push(component),
        }
    }
    out
}

/// The shortest cycle through `start` within `component`, by breadth-first search, as its files
/// from `start` back to `start`.
fn shortest_cycle<'a>(graph: &'a Graph, component: &BTreeSet<String>, start: &'a str) -> Option<Vec<&'a str>> {
    let mut before: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(file) = queue.pop_front() {
        for next in graph[file].keys() {
            if next == start {
                let mut path = vec![start, file];
                let mut at = file;
                while at != start {
                    at = before[at];
                    path.push(at);
                }
                path.reverse();
                return Some(path);
            }
            if component.contains(next) && !before.contains_key(next.as_str()) {
                before.insert(next, file);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Tarjan's algorithm, on the graph restricted to `files`.
fn strongly_connected(graph: &Graph, files: &BTreeSet<String>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a Graph,
        files: &'a BTreeSet<String>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph[v].keys().filter(|w| s.files.contains(*w)) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                component.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        graph,
        files,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in files {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn assert_no_cycle(src: &str) {
    let files = sources(src);
    let cycles = cycles(&graph(&files));
    assert!(
        cycles.is_empty(),
        "{src} has {} set(s) of import cycles; move the concept that two files share to where it belongs:\n  {}",
        cycles.len(),
        cycles.join("\n  ")
    );
}

#[test]
fn jobenv_has_no_import_cycle() {
    assert_no_cycle("jobenv/src");
}

#[test]
fn the_bootstrap_has_no_import_cycle() {
    assert_no_cycle("bootstrap/src");
}

// ---- the checker, against files built to have (or not have) a cycle ----------------------

fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
}

fn edges(graph: &Graph, from: &str) -> Vec<String> {
    graph[from].keys().cloned().collect()
}

#[test]
fn the_checker_finds_a_cycle_through_a_group_an_expression_and_super() {
    let set = files(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a/mod.rs", "pub mod inner;\n"),
        // a/inner.rs names b's child in a nested group...
        ("a/inner.rs", "use crate::{error, b::{deep::{self, Thing as T}}};\n"),
        ("b/mod.rs", "pub mod deep;\n"),
        // ...and b/deep.rs reaches a's file in an expression, through super::super.
        ("b/deep.rs", "pub fn f() { let x = super::super::a::inner::make(1); }\n"),
        ("error.rs", ""),
    ]);
    let graph = graph(&set);
    assert_eq!(edges(&graph, "a/inner.rs"), ["b/deep.rs", "error.rs"]);
    assert_eq!(edges(&graph, "b/deep.rs"), ["a/inner.rs"]);
    let cycles = cycles(&graph);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0]
            .starts_with("a/inner.rs -> b/deep.rs (crate::b::deep::self) -> a/inner.rs (super::super::a::inner::make)"),
        "{}",
        cycles[0]
    );
}

#[test]
fn the_checker_follows_child_modules_and_imported_modules() {
    let set = files(&[
        ("lib.rs", "pub mod run;\npub mod record;\n"),
        // A child module by its name, in an expression.
        ("run/mod.rs", "pub mod tree;\nfn f() { tree::guard::start(); }\n"),
        ("run/tree/mod.rs", "pub mod guard;\n"),
        // A module imported whole, then named through it; and one renamed.
        (
            "run/tree/guard.rs",
            "use crate::record::store;\nuse crate::record as r;\nfn g() -> store::file::F { r::X }\n",
        ),
        ("record/mod.rs", "pub mod store;\n"),
        ("record/store/mod.rs", "pub mod file;\n"),
        (
            "record/store/file.rs",
            "use crate::run::tree::*;\nfn h() { guard::stop() }\n",
        ),
    ]);
    let graph = graph(&set);
    assert_eq!(edges(&graph, "run/mod.rs"), ["run/tree/guard.rs"]);
    assert_eq!(
        edges(&graph, "run/tree/guard.rs"),
        ["record/mod.rs", "record/store/file.rs", "record/store/mod.rs"]
    );
    assert_eq!(
        edges(&graph, "record/store/file.rs"),
        ["run/tree/guard.rs", "run/tree/mod.rs"]
    );
    assert_eq!(cycles(&graph).len(), 1);
}

#[test]
fn comments_strings_declarations_and_a_files_own_tests_make_no_edge() {
    let set = files(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        // The parent declares and re-exports its child: the child names it back only in its
        // inline tests (which are part of the child's own file).
        ("a/mod.rs", "//! See [`crate::b::X`].\nmod child;\npub use child::Y;\n"),
        (
            "a/child.rs",
            "pub struct Y;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { let _ = Y; }\n}\n",
        ),
        (
            "b.rs",
            "/* crate::a::child */\nconst S: &str = \"crate::a::X\";\nconst R: &str = r#\"super::a\"#;\nconst C: char = '\"';\npub(crate) fn f<'a>(x: &'a str) {}\n",
        ),
    ]);
    let graph = graph(&set);
    assert_eq!(edges(&graph, "a/mod.rs"), ["a/child.rs"]);
    assert!(edges(&graph, "a/child.rs").is_empty(), "{:?}", graph["a/child.rs"]);
    assert!(edges(&graph, "b.rs").is_empty(), "{:?}", graph["b.rs"]);
    assert!(cycles(&graph).is_empty());
}

#[test]
fn a_module_and_its_parts_may_use_each_other_but_not_through_a_side_door() {
    // run/mod.rs and its part both ways, and a part of a part: a module with its own parts.
    let parts = [
        ("lib.rs", "pub mod run;\npub mod record;\n"),
        (
            "run/mod.rs",
            "pub mod tree;\npub mod spawn;\npub struct Outcome;\nfn f() { tree::stop(); }\n",
        ),
        (
            "run/tree/mod.rs",
            "pub mod cgroup;\npub fn stop() { cgroup::kill(super::Outcome) }\n",
        ),
        (
            "run/tree/cgroup.rs",
            "pub fn kill(o: crate::run::Outcome) { super::stop() }\n",
        ),
        ("run/spawn.rs", "use super::Outcome;\n"),
        ("record/mod.rs", ""),
    ];
    assert!(cycles(&graph(&files(&parts))).is_empty());

    // Two parts of run use each other: a cycle, though run/mod.rs is on a larger one with them.
    let mut siblings = parts;
    siblings[4] = ("run/spawn.rs", "use super::{Outcome, tree::cgroup::kill};\n");
    siblings[3] = (
        "run/tree/cgroup.rs",
        "pub fn kill(o: crate::run::Outcome) { crate::run::spawn::go() }\n",
    );
    let found = cycles(&graph(&files(&siblings)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("run/spawn.rs -> run/tree/cgroup.rs (super::tree::cgroup::kill) -> run/spawn.rs"),
        "{}",
        found[0]
    );

    // A part of run reaches run's face through record: record is not a part of run.
    let mut side_door = parts;
    side_door[3] = (
        "run/tree/cgroup.rs",
        "pub fn kill(o: crate::run::Outcome) { crate::record::note() }\n",
    );
    side_door[5] = ("record/mod.rs", "pub fn note() { crate::run::Outcome; }\n");
    let found = cycles(&graph(&files(&side_door)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("record/mod.rs -> run/mod.rs"), "{}", found[0]);
}

// ---- a job's path --------------------------------------------------------------------------

/// The files of a job's own path: the command's file and the spine (its unit tests aside).
const PATH: &[&str] = &["commands/run.rs", "job/mod.rs", "job/namespace.rs", "job/program.rs"];

/// The modules a job's path enters: every file that the path's own files import.
fn entered(graph: &Graph) -> BTreeSet<String> {
    PATH.iter()
        .flat_map(|file| graph[*file].keys())
        .filter(|to| !PATH.contains(&to.as_str()))
        .cloned()
        .collect()
}

/// A module's face: a file of its own at the crate's top, or a folder's `mod.rs`. A folder's
/// other files are its parts.
fn is_face(file: &str) -> bool {
    !file.contains('/') || file.ends_with("/mod.rs")
}

/// The faces that the architecture page's table of the modules a job's path enters names.
fn faces_on_the_page() -> (String, BTreeSet<String>) {
    let page = std::fs::read_to_string(repo().join("docs/maintainers/architecture.md")).unwrap();
    let table = page
        .split("| module | its face |")
        .nth(1)
        .expect("the architecture page has the table of the modules a job's path enters");
    let faces = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let face = line.split('|').nth(2).unwrap().trim().trim_matches('`');
            face.strip_prefix("jobenv/src/")
                .expect("a face in jobenv/src/")
                .to_string()
        })
        .collect();
    (page, faces)
}

#[test]
fn a_jobs_path_enters_each_module_once_through_its_face_as_the_architecture_page_lists() {
    let entered = entered(&graph(&sources("jobenv/src")));
    let parts: Vec<_> = entered.iter().filter(|f| !is_face(f)).collect();
    assert!(
        parts.is_empty(),
        "a job's path reaches into a folder's parts instead of its face (re-export what it needs from the folder's mod.rs): {parts:?}"
    );
    let (page, faces) = faces_on_the_page();
    assert_eq!(
        faces, entered,
        "the architecture page's modules of a job's path, against the code's"
    );
    let said = format!("A job's path crosses {} module boundaries", entered.len());
    assert!(page.contains(&said), "the architecture page does not say: {said}");
    // The issue that reshaped the path counted 26 crossings; it must not grow back.
    assert!(entered.len() < 26, "{} modules: {entered:?}", entered.len());
}

#[test]
fn a_path_that_reaches_into_a_folders_part_is_told_from_one_that_enters_its_face() {
    let graph = graph(&files(&[
        ("lib.rs", "mod commands;\nmod job;\nmod record;\n"),
        ("commands/mod.rs", "mod run;\n"),
        ("commands/run.rs", "fn f() { crate::job::run() }\n"),
        (
            "job/mod.rs",
            "mod namespace;\nmod program;\nuse crate::record::Journal;\n",
        ),
        ("job/namespace.rs", "use crate::record::locks::Held;\n"),
        ("job/program.rs", "use super::Run;\n"),
        (
            "record/mod.rs",
            "mod locks;\npub use locks::Held;\npub struct Journal;\n",
        ),
        ("record/locks.rs", "pub struct Held;\n"),
    ]));
    let entered = entered(&graph);
    assert_eq!(
        entered,
        BTreeSet::from(["record/locks.rs".to_string(), "record/mod.rs".to_string()])
    );
    let parts: Vec<_> = entered.iter().filter(|f| !is_face(f)).collect();
    assert_eq!(parts, ["record/locks.rs"]);
}
