//! The layering of [`crate`] as a test: each top-level module may use only the modules below
//! it in [`LAYERS`] (and those before it in its own layer), so no import cycle spans two
//! top-level modules. Read from the `crate::` paths in each module's source (doc comments
//! included, so a doc link upwards counts too; `#[cfg(test)]` parts excluded).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The broker's modules, bottom to top. Keep in step with the module doc of `lib.rs` and the
/// layering section of `docs/design.md`.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "basics",
        &[
            "limits",
            "sync",
            "transform",
            "mappings",
            "imports",
            "stats",
            "identity",
            "options",
            "auth",
            "config_file",
            "flags",
            "tls",
            "priority",
            "latency",
            "trace",
        ],
    ),
    ("routing", &["router", "outbound", "client", "delivery"]),
    ("bus", &["bus", "account_links"]),
    ("subsystems", &["registry", "filter", "tokens", "agents", "sys_events", "connection", "websocket", "lame_duck"]),
    ("jetstream", &["jetstream"]),
    ("edges", &["dashboard", "monitor", "system", "server"]),
];

/// Test-only modules, outside the layering.
const UNLAYERED: &[&str] = &["architecture"];

fn rank_of(module: &str) -> Option<usize> {
    LAYERS.iter().flat_map(|(_, modules)| modules.iter()).position(|m| *m == module)
}

fn layer_of(module: &str) -> &'static str {
    LAYERS.iter().find(|(_, modules)| modules.contains(&module)).map_or("?", |(name, _)| name)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without its trailing `#[cfg(test)]` part (tests may reach anywhere).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |cut| &text[..cut])
}

/// The top-level modules `text` names after `crate::`, including inside `use crate::{a, b}`.
fn used_modules(text: &str) -> Vec<String> {
    let mut used = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            used.extend(group_heads(group));
        } else {
            used.push(identifier(rest));
        }
    }
    used.retain(|name| !name.is_empty());
    used
}

/// The first path segment of each item of a `{a::X, b::{Y, Z}, c}` group (`group` starts after
/// its `{`): only items at depth 0 count.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = vec![identifier(group.trim_start())];
    let mut depth = 0usize;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => heads.push(identifier(group[at + 1..].trim_start())),
            _ => {}
        }
    }
    heads
}

fn identifier(text: &str) -> String {
    text.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// (module, file) → the modules it may not use.
fn violations() -> BTreeMap<(String, String), Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut found = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&root).unwrap_or(&file);
        let top = relative.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned());
        let Some(top) = top.map(|t| t.trim_end_matches(".rs").to_string()) else { continue };
        let is_test_file = relative.file_name().is_some_and(|n| n.to_string_lossy().ends_with("tests.rs"));
        if matches!(top.as_str(), "lib" | "main") || UNLAYERED.contains(&top.as_str()) || is_test_file {
            continue;
        }
        let rank = rank_of(&top).unwrap_or_else(|| panic!("module {top} is missing from LAYERS"));
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let mut upward: Vec<String> = used_modules(without_tests(&text))
            .into_iter()
            .filter(|used| *used != top && used != "self" && used != "super")
            .filter(|used| rank_of(used).is_none_or(|other| other > rank))
            .map(|used| format!("{used} ({})", layer_of(&used)))
            .collect();
        upward.sort();
        upward.dedup();
        if !upward.is_empty() {
            found.insert((top, relative.display().to_string()), upward);
        }
    }
    found
}

#[test]
fn no_module_uses_a_module_above_it() {
    let found = violations();
    let report: Vec<String> = found
        .iter()
        .map(|((module, file), upward)| format!("{file} ({module}, {}) uses {}", layer_of(module), upward.join(", ")))
        .collect();
    assert!(report.is_empty(), "imports against the layering (see LAYERS):\n{}", report.join("\n"));
}

#[test]
fn every_module_has_a_layer() {
    let lib = include_str!("lib.rs");
    for line in lib.lines() {
        let Some(name) = line.strip_prefix("pub mod ").and_then(|rest| rest.strip_suffix(';')) else { continue };
        assert!(rank_of(name).is_some(), "module {name} is missing from LAYERS");
    }
}

#[test]
fn the_reader_sees_grouped_and_nested_paths() {
    let text = "use crate::{bus::{Bus, X}, limits};\nuse crate::jetstream::Services;\n let x = crate::sync::lock(&m);";
    assert_eq!(used_modules(text), ["bus", "limits", "jetstream", "sync"]);
}
