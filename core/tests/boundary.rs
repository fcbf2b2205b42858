//! The plugin boundary, held by reading core's own source: no architecture is named in
//! core (architectures are plugins), and core's modules form no cycle (each layer can be
//! understood, and replaced, without the ones above it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn sources() -> BTreeMap<String, String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("core/src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().expect("stem").to_string_lossy().into_owned();
            out.insert(name, std::fs::read_to_string(&path).expect("source"));
        }
    }
    out
}

/// The code of a file without its comments (line comments and doc comments).
fn code(text: &str) -> String {
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

#[test]
fn core_names_no_architecture() {
    // "llama.cpp" is the program whose file format (GGUF) core reads, not an architecture;
    // "sentence_bert_config.json" is sentence-transformers' file of every encoder's length.
    let banned = ["llama", "qwen", "mistral", "gemma", "phi3", "bigram", "bert"];
    let mut found = Vec::new();
    for (file, text) in sources() {
        for (i, line) in text.lines().enumerate() {
            let lower = line
                .to_lowercase()
                .replace("llama.cpp", "")
                .replace("llama-vocab.cpp", "")
                .replace("sentence_bert_config", "");
            for word in banned {
                if lower.contains(word) {
                    found.push(format!("core/src/{file}.rs:{}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "core names an architecture:\n{}", found.join("\n"));
}

#[test]
fn core_modules_have_no_cycle() {
    let files = sources();
    let modules: BTreeSet<String> = files.keys().filter(|m| *m != "lib").cloned().collect();
    // Edges: `crate::m` in the code of a module (a path through the crate root's
    // re-exports, `crate::Name`, would hide an edge, so it is refused too).
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut hidden = Vec::new();
    for (m, text) in &files {
        if m == "lib" {
            continue;
        }
        let code = code(text);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if modules.contains(&name) {
                if &name != m {
                    edges.entry(m.clone()).or_default().insert(name);
                }
            } else if name.chars().next().is_some_and(char::is_uppercase) || name.is_empty() {
                hidden.push(format!("{m}: crate::{name}"));
            }
        }
    }
    assert!(hidden.is_empty(), "paths through the crate root hide module edges: {hidden:?}");
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let from = path.iter().position(|p| p == m).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(m.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in &modules {
        if let Some(cycle) = visit(m, &edges, &mut state, &mut Vec::new()) {
            panic!("module cycle in core: {}", cycle.join(" -> "));
        }
    }
}
