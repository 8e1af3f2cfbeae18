//! The developers' guide's house rules, checked on the source tree. No function in src/
//! runs over [`MAX_FN_LINES`] lines (header to closing brace): a long function is split
//! along its ideas. And
//! test code leaves the temporary directory as it found it: its scratch files live in
//! directories removed when the test ends ([`HAND_MADE_TEMP`]).

use std::fs;
use std::path::Path;

const MAX_FN_LINES: usize = 100;

use super::layering::{rust_files, src};

/// The name of the function a line declares (`pub(crate) const fn name<…>(`), if it does.
fn declared_fn(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if rest.starts_with("//") {
        return None;
    }
    loop {
        let before = rest;
        for word in ["pub ", "const ", "unsafe ", "async ", "extern \"C\" "] {
            rest = rest.strip_prefix(word).unwrap_or(rest).trim_start();
        }
        if let Some(after) = rest.strip_prefix("pub(") {
            rest = after.split_once(')')?.1.trim_start();
        }
        if rest == before {
            break;
        }
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name
        .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| &name[..end])
}

/// The braces of a line's code: comments, string and character literals left out.
fn braces(line: &str) -> (usize, usize, bool) {
    let (mut open, mut close) = (0, 0);
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut code = String::new();
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => break,
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
            }
            '\'' if chars.get(i + 2) == Some(&'\'') && chars.get(i + 1) != Some(&'\\') => i += 2,
            '\'' if chars.get(i + 1) == Some(&'\\') && chars.get(i + 3) == Some(&'\'') => i += 3,
            '{' => open += 1,
            '}' => close += 1,
            ch => code.push(ch),
        }
        i += 1;
    }
    (open, close, code.trim_end().ends_with(';'))
}

/// Every function body in `text`: (name, first line, lines from header to closing brace).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = declared_fn(line) else {
            continue;
        };
        let (mut depth, mut started) = (0usize, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            let (open, close, ends_in_semicolon) = braces(l);
            started |= open > 0;
            depth = (depth + open).saturating_sub(close);
            if started && depth == 0 {
                out.push((name.to_string(), i + 1, j - i + 1));
                break;
            }
            if !started && ends_in_semicolon {
                break;
            }
        }
    }
    out
}

#[test]
fn no_function_in_src_is_over_the_limit() {
    let root = src();
    let mut over = Vec::new();
    for file in rust_files(&root) {
        let text = fs::read_to_string(&file).expect("readable source");
        let rel = file.strip_prefix(&root).expect("under src");
        let rel = rel.to_string_lossy().replace('\\', "/");
        for (name, line, len) in functions(&text) {
            if len > MAX_FN_LINES {
                over.push(format!("src/{rel}:{line} {name}: {len} lines"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them along their ideas):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_scanner_measures_what_it_should() {
    let text = "pub(crate) fn outer(x: u8) -> u8 {\n    let s = \"}\"; // }\n    let c = '{';\n    x\n}\nfn decl();\n";
    assert_eq!(functions(text), vec![("outer".to_string(), 1, 5)]);
}

/// A scratch path built by hand on the system's temporary directory outlives its test (a
/// failed test skips any removal written at its end). Test code takes its scratch space
/// from `common::scratch` (tests/) or `tempfile::Builder` (src/'s test modules) instead,
/// whose directories are removed when dropped. Spelled in pieces so this file is no hit.
const HAND_MADE_TEMP: &[&str] = &[concat!("temp_", "dir()"), concat!("\"/", "tmp")];

/// The test code of a source file as (first line number, text): all of a file under tests/
/// or named `tests.rs`, else the text from its first `#[cfg(test)]` on (the crate keeps
/// its test module last), or nothing.
fn test_code<'a>(rel: &str, text: &'a str) -> (usize, &'a str) {
    if rel.starts_with("tests/") || rel.ends_with("/tests.rs") {
        return (1, text);
    }
    match text.find("#[cfg(test)]") {
        Some(at) => (text[..at].lines().count() + 1, &text[at..]),
        None => (1, ""),
    }
}

/// The lines of `code` (numbered from `first`) that build a temporary path by hand.
fn hand_made_temp(first: usize, code: &str) -> Vec<(usize, String)> {
    code.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| HAND_MADE_TEMP.iter().any(|p| line.contains(p)))
        .map(|(i, line)| (first + i, line.trim().to_string()))
        .collect()
}

#[test]
fn test_code_keeps_its_scratch_files_in_self_removing_directories() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in ["src", "tests"] {
        for file in rust_files(&root.join(dir)) {
            let text = fs::read_to_string(&file).expect("readable source");
            let rel = file.strip_prefix(root).expect("under the crate");
            let rel = rel.to_string_lossy().replace('\\', "/");
            let (first, code) = test_code(&rel, &text);
            for (line, hit) in hand_made_temp(first, code) {
                found.push(format!("{rel}:{line}: {hit}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "test code building temporary paths by hand (take a directory from \
         common::scratch in tests/, tempfile::Builder in src/, so it goes when the test \
         ends):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_temp_scanner_sees_test_code_only() {
    let hit = concat!("    let d = std::env::temp_", "dir().join(\"x\");");
    let text = format!(
        "fn run() {{\n{hit}\n}}\n#[cfg(test)]\nmod tests {{\n    // temp_{}\n{hit}\n}}\n",
        "dir()"
    );
    let (first, code) = test_code("src/a.rs", &text);
    assert_eq!(
        hand_made_temp(first, code),
        vec![(7, hit.trim().to_string())]
    );
    let (first, code) = test_code("src/a/tests.rs", &text);
    assert_eq!(hand_made_temp(first, code).len(), 2);
    assert_eq!(test_code("src/b.rs", "fn f() {}\n"), (1, ""));
}
