//! No crate's top-level modules import each other in a circle: each crate reads as layers, a
//! module building only on the ones below it. Read from the sources of every crate of the
//! workspace (`crate::` paths outside comments and unit tests), so that a new cycle fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module -> the top-level modules it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn sources(path: &Path, found: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("a readable directory") {
            sources(&entry.expect("an entry").path(), found);
        }
    } else if path.extension().is_some_and(|extension| extension == "rs") {
        found.push(path.to_owned());
    }
}

/// The code of a source file, without comments and without its unit tests (which may reach
/// anywhere in the crate).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level modules `code` names through `crate::`, grouped imports included.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (index, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        named.insert(identifier(group[start..].trim_start()).to_owned());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        named.insert(identifier(group[start..].trim_start()).to_owned());
                        start = index + 1;
                    }
                    _ => {}
                }
            }
        } else {
            named.insert(identifier(rest).to_owned());
        }
    }
    named.retain(|name| name.starts_with(|c: char| c.is_ascii_lowercase()));
    named
}

fn graph_of(source_root: &Path) -> Graph {
    let mut files = Vec::new();
    sources(source_root, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(source_root).expect("under the root");
        let first = relative
            .components()
            .next()
            .expect("a component")
            .as_os_str()
            .to_string_lossy();
        if first == "lib.rs" || first == "main.rs" {
            continue;
        }
        let module = first.trim_end_matches(".rs").to_owned();
        let code = code_of(&std::fs::read_to_string(&file).expect("a readable source"));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(named_modules(&code).into_iter().filter(|m| *m != module));
    }
    graph
}

/// A cycle through `graph`, as the modules on it, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut found = path[start..].to_vec();
            found.push(module.to_owned());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_a_cycle_among_its_modules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).expect("the crates directory") {
        let source_root = entry.expect("an entry").path().join("src");
        if !source_root.is_dir() {
            continue;
        }
        checked += 1;
        if let Some(found) = cycle(&graph_of(&source_root)) {
            panic!(
                "{}: its modules import each other in a circle: {}",
                source_root.display(),
                found.join(" -> ")
            );
        }
    }
    assert!(checked >= 9, "only {checked} crates found under {crates:?}");
}

#[test]
fn a_cycle_is_found() {
    let graph: Graph = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_owned(), BTreeSet::from([to.to_owned()])))
        .collect();
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        named_modules(
            "use crate::{check::{Check, Verdict}, clock::Micros, Limit};\nlet x = crate::store::one();"
        ),
        BTreeSet::from(["check".into(), "clock".into(), "store".into()])
    );
}
