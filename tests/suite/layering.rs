//! The layout rules of shared/design.md, checked on the source tree: imports flow one way
//! through four floors — (0) kernels, checkpoint, gguf, quant, error, json, rand; (1) the
//! chapter modules; (2) the engine, qwen3 and train; (3) claims, figures, bench and the CLI —
//! no two top-level modules depend on each other through any chain, no two sibling files
//! import each other, and no source file is over 800 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The floor of every top-level module. A new module must be given one here.
const FLOORS: &[(&str, usize)] = &[
    ("kernels", 0),
    ("checkpoint", 0),
    ("gguf", 0),
    ("quant", 0),
    ("error", 0),
    ("json", 0),
    ("rand", 0),
    ("output", 0),
    ("limits", 0),
    ("position", 1),
    ("long_context", 1),
    ("tokenizer", 1),
    ("moe", 1),
    ("params", 1),
    ("optim", 1),
    ("chat", 1),
    ("qwen3", 2),
    ("train", 2),
    ("claims", 3),
    ("figures", 3),
    ("bench", 3),
    ("serve", 3),
];

const MAX_LINES: usize = 800;

pub(crate) fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, sorted.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("readable src dir") {
            let path = entry.expect("readable entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The top-level module a file belongs to (`src/moe/layer.rs` → `moe`), or None for
/// lib.rs and the binaries.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).expect("under src");
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (name != "lib" && name != "bin").then_some(name)
}

/// The source without comments, so that prose naming a module is not an import.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Identifiers following `prefix` in `code`: `crate::a::b` gives `a`; `crate::{a, b::c}`
/// gives `a` and `b`.
fn referenced(code: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        // `foo_crate::x` is not `crate::x`.
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn floor(module: &str) -> usize {
    FLOORS
        .iter()
        .find(|(m, _)| *m == module)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("module `{module}` has no floor in tests/layering.rs"))
}

/// module → (module it imports → the files that import it).
fn module_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in rust_files(&src()) {
        let Some(module) = module_of(&file) else {
            continue;
        };
        let text = fs::read_to_string(&file).expect("readable source");
        let deps = graph.entry(module.clone()).or_default();
        for dep in referenced(&code(&text), "crate::") {
            if dep != module && FLOORS.iter().any(|(m, _)| *m == dep) {
                let rel = file.strip_prefix(src()).unwrap().display().to_string();
                deps.entry(dep).or_default().insert(rel);
            }
        }
    }
    graph
}

#[test]
fn every_module_has_a_floor() {
    for file in rust_files(&src()) {
        if let Some(m) = module_of(&file) {
            floor(&m);
        }
    }
}

#[test]
fn no_import_runs_up_the_floors() {
    let mut bad = Vec::new();
    for (module, deps) in module_graph() {
        for (dep, files) in deps {
            if floor(&dep) > floor(&module) {
                bad.push(format!(
                    "{module} (floor {}) imports {dep} (floor {}) in {files:?}",
                    floor(&module),
                    floor(&dep)
                ));
            }
        }
    }
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

#[test]
fn no_cycle_between_modules() {
    let graph = module_graph();
    // Depth-first search from every module; a path that comes back to its start is a cycle.
    fn visit(
        graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        path: &mut Vec<String>,
        cycles: &mut Vec<String>,
    ) {
        let here = path.last().unwrap().clone();
        for dep in graph.get(&here).into_iter().flat_map(|d| d.keys()) {
            if *dep == path[0] {
                cycles.push(format!("{} -> {dep}", path.join(" -> ")));
            } else if !path.contains(dep) {
                path.push(dep.clone());
                visit(graph, path, cycles);
                path.pop();
            }
        }
    }
    let mut cycles = Vec::new();
    for m in graph.keys() {
        visit(&graph, &mut vec![m.clone()], &mut cycles);
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

/// Two files of one folder (other than mod.rs, which declares them) that import each other.
#[test]
fn no_two_sibling_files_import_each_other() {
    let mut by_dir: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for file in rust_files(&src()) {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        if name != "mod" && name != "lib" {
            by_dir
                .entry(file.parent().unwrap().to_path_buf())
                .or_default()
                .push(file);
        }
    }
    let mut bad = Vec::new();
    for (dir, files) in by_dir {
        let module_path: Vec<String> = dir
            .strip_prefix(src())
            .unwrap()
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let stem = |f: &Path| f.file_stem().unwrap().to_string_lossy().into_owned();
        let imports = |f: &Path| -> BTreeSet<String> {
            let text = code(&fs::read_to_string(f).expect("readable source"));
            let mut names = referenced(&text, "super::");
            if !module_path.is_empty() {
                names.extend(referenced(
                    &text,
                    &format!("crate::{}::", module_path.join("::")),
                ));
            }
            names
        };
        let deps: Vec<(String, BTreeSet<String>)> =
            files.iter().map(|f| (stem(f), imports(f))).collect();
        for (a, da) in &deps {
            for (b, db) in &deps {
                if a < b && da.contains(b) && db.contains(a) {
                    bad.push(format!("{}: {a}.rs and {b}.rs", dir.display()));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "sibling files importing each other:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_source_file_is_over_800_lines() {
    let mut long = Vec::new();
    for file in rust_files(&src()) {
        let n = fs::read_to_string(&file).expect("readable").lines().count();
        if n > MAX_LINES {
            long.push(format!("{} has {n} lines", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// Every top-level module says which chapter it is (or which chapters it serves), and a
/// chapter module which section of the sources it follows.
#[test]
fn every_module_doc_names_its_chapter() {
    let mut bad = Vec::new();
    for (module, f) in FLOORS {
        let dir = src().join(module).join("mod.rs");
        let file = if dir.is_file() {
            dir
        } else {
            src().join(format!("{module}.rs"))
        };
        let Ok(text) = fs::read_to_string(&file) else {
            continue; // a floor reserved for a module that has not landed yet
        };
        let doc: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join(" ");
        let names_chapter = doc.to_lowercase().contains("chapter");
        let names_source = ["S0", "S1", "source"].iter().any(|s| doc.contains(s));
        let chapter_floor = (1..=2).contains(f);
        if !names_chapter || (chapter_floor && !names_source) {
            bad.push(format!("{}", file.strip_prefix(src()).unwrap().display()));
        }
    }
    assert!(
        bad.is_empty(),
        "module docs that do not name their chapter (and, for chapters, the source section): {bad:?}"
    );
}

/// The checker itself: grouped imports and prefixes inside longer names.
#[test]
fn references_are_read_right() {
    let text =
        "use crate::{kernels::dot, moe};\nlet x = my_crate::params::f();\ncrate::qwen3::Model";
    let got: Vec<String> = referenced(text, "crate::").into_iter().collect();
    assert_eq!(got, ["kernels", "moe", "qwen3"]);
    assert_eq!(code("a // crate::x\nb"), "a \nb");
}
