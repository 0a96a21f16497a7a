//! The import rules of `ARCHITECTURE.md`, checked on the source text: each layer of `src/`
//! names only the layers below it. Unit-test modules at the end of a file (`#[cfg(test)]`)
//! are left out: a test may use a concrete backend.

use std::path::{Path, PathBuf};

/// (path prefix under `src/`, the `crate::` modules it must not name).
const RULES: &[(&str, &[&str])] = &[
    (
        "rng.rs",
        &[
            "backend", "cpu", "vulkan", "graph", "models", "device", "ops", "formats", "tensor",
        ],
    ),
    (
        "sampling.rs",
        &[
            "backend", "cpu", "vulkan", "graph", "models", "device", "ops", "formats", "tensor",
        ],
    ),
    (
        "precision.rs",
        &[
            "backend", "cpu", "vulkan", "graph", "models", "device", "ops", "formats",
        ],
    ),
    (
        "tensor/",
        &[
            "backend", "cpu", "vulkan", "graph", "models", "device", "ops", "formats",
        ],
    ),
    (
        "formats/",
        &[
            "backend", "cpu", "vulkan", "graph", "models", "device", "ops",
        ],
    ),
    ("ops.rs", &["cpu", "vulkan", "graph", "models", "device"]),
    (
        "backend.rs",
        &["cpu", "vulkan", "graph", "models", "device"],
    ),
    ("backend/", &["cpu", "vulkan", "graph", "models", "device"]),
    (
        "cpu/",
        &["vulkan", "graph", "models", "device", "bench", "drift"],
    ),
    (
        "vulkan/",
        &["cpu", "graph", "models", "device", "bench", "drift"],
    ),
    (
        "graph/",
        &["cpu", "vulkan", "models", "device", "bench", "drift"],
    ),
    ("bench.rs", &["cpu", "vulkan", "models", "device"]),
    ("drift.rs", &["cpu", "vulkan", "models", "device"]),
    ("models/", &["cpu", "vulkan", "device", "api", "capi"]),
    ("device.rs", &["models", "api", "capi"]),
    // The host API reaches a backend only through `device` (AnyBackend::visit).
    ("api/", &["cpu", "vulkan", "capi"]),
    // The C ABI wraps the host API and nothing below it.
    (
        "capi/",
        &[
            "backend", "cpu", "vulkan", "graph", "models", "device", "ops", "formats",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The `crate::NAME` modules a file's non-test code names (comments left out).
fn named_modules(text: &str) -> Vec<String> {
    let code = match text.find("\n#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    let code: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut v = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && !v.contains(&name) {
            v.push(name);
        }
    }
    v
}

#[test]
fn every_layer_imports_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut broken = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let Some((_, forbidden)) = RULES.iter().find(|(p, _)| rel.starts_with(p)) else {
            continue;
        };
        checked += 1;
        let text = std::fs::read_to_string(f).unwrap();
        for m in named_modules(&text) {
            if forbidden.contains(&m.as_str()) {
                broken.push(format!("src/{rel} names crate::{m}"));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} files matched a rule: is src/ laid out as ARCHITECTURE.md says?"
    );
    assert!(
        broken.is_empty(),
        "import rules broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_rule_check_sees_an_import() {
    let m = named_modules(
        "use crate::cpu::CpuBackend;\nfn f() { crate::vulkan::x(); }\n#[cfg(test)]\nmod tests { use crate::device; }\n",
    );
    assert_eq!(m, ["cpu", "vulkan"]);
}
