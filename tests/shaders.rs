//! The committed SPIR-V is what `tools/shaderc` makes from the committed GLSL and its variant
//! table: every source under `kernels/glsl/`, every variant (its defines with its source) and
//! every module under `kernels/spirv/` matches the SHA-256 recorded in
//! `kernels/spirv/MANIFEST`, and every module passes `spirv-val` (skipped with a message when
//! spirv-tools is not installed). No shader compiler is needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The shader tool's variant table.
#[path = "../tools/shaderc/src/variants.rs"]
#[allow(dead_code)] // `Variant::define` serves the library's tests.
mod variants;

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn kernels() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels")
}

/// `dir/name` -> sha256 of every file of `kernels/<dir>` ending in one of `exts`.
fn hashes(dir: &str, exts: &[&str]) -> BTreeMap<String, String> {
    std::fs::read_dir(kernels().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e))
        })
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            (format!("{dir}/{name}"), hex(&std::fs::read(&p).unwrap()))
        })
        .collect()
}

#[test]
fn spirv_is_up_to_date_with_the_glsl() {
    let manifest = std::fs::read_to_string(kernels().join("spirv/MANIFEST")).unwrap();
    let recorded: BTreeMap<String, String> = manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (hash, path) = l.split_once("  ").expect("`<sha256>  <path>` lines");
            (path.to_string(), hash.to_string())
        })
        .collect();
    let regenerate = "a shader source changed without regenerating the SPIR-V: run \
                      `cargo run --release --manifest-path tools/shaderc/Cargo.toml` and commit \
                      kernels/spirv";
    let mut actual = hashes("glsl", &["comp", "glsl"]);
    actual.extend(hashes("spirv", &["spv"]));
    // A variant's line: its name, source and defines, then the source's bytes.
    for v in variants::VARIANTS {
        let source = kernels().join("glsl").join(v.source);
        let text = std::fs::read(&source)
            .unwrap_or_else(|e| panic!("variant {}: {}: {e}", v.name, source.display()));
        let mut hashed = v.identity().into_bytes();
        hashed.extend_from_slice(&text);
        actual.insert(format!("variant/{}", v.name), hex(&hashed));
    }
    for (path, hash) in &actual {
        match recorded.get(path) {
            Some(h) if h == hash => {}
            Some(_) => panic!("{path} differs from kernels/spirv/MANIFEST: {regenerate}"),
            None => panic!("{path} is not in kernels/spirv/MANIFEST: {regenerate}"),
        }
    }
    for path in recorded.keys() {
        assert!(
            actual.contains_key(path),
            "{path} is in kernels/spirv/MANIFEST but missing: {regenerate}"
        );
    }
    // The modules the tool makes: every variant, and every compute shader that is not a
    // variant's source under its own name; nothing else.
    let mut want: Vec<String> = variants::VARIANTS
        .iter()
        .map(|v| format!("spirv/{}.spv", v.name))
        .collect();
    for path in actual.keys() {
        if let Some(file) = path.strip_prefix("glsl/")
            && let Some(stem) = file.strip_suffix(".comp")
            && !variants::VARIANTS.iter().any(|v| v.source == file)
        {
            want.push(format!("spirv/{stem}.spv"));
        }
    }
    want.sort();
    let have: Vec<&String> = actual.keys().filter(|p| p.starts_with("spirv/")).collect();
    assert_eq!(
        have,
        want.iter().collect::<Vec<_>>(),
        "modules: {regenerate}"
    );
}

/// The variant table is well formed: unique module names, sources that exist, defines that
/// are identifiers, and no variant named as a stand-alone shader.
#[test]
fn variants_are_well_formed() {
    let mut names: Vec<&str> = variants::VARIANTS.iter().map(|v| v.name).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "two variants share a name");
    for v in variants::VARIANTS {
        assert!(
            kernels().join("glsl").join(v.source).is_file(),
            "{}: no source {}",
            v.name,
            v.source
        );
        let own = kernels().join("glsl").join(format!("{}.comp", v.name));
        assert!(
            format!("{}.comp", v.name) == v.source || !own.exists(),
            "{}: a variant and a shader of that name",
            v.name
        );
        for (name, _) in v.defines {
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{}: define {name:?}",
                v.name
            );
        }
    }
}

#[test]
fn every_module_passes_spirv_val() {
    let modules: Vec<PathBuf> = std::fs::read_dir(kernels().join("spirv"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "spv"))
        .collect();
    assert!(!modules.is_empty());
    for m in modules {
        // SPIR-V 1.6 modules (cooperative-matrix shaders, compiled for Vulkan 1.3) are
        // validated as such, the others (SPIR-V 1.5) under Vulkan 1.2.
        let bytes = std::fs::read(&m).unwrap();
        let version = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
        let env = if version >= 0x0001_0600 {
            "vulkan1.3"
        } else {
            "vulkan1.2"
        };
        let out = match std::process::Command::new("spirv-val")
            .args(["--target-env", env])
            .arg(&m)
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("skipping spirv-val (install spirv-tools to run it): {e}");
                return;
            }
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Debian 12's spirv-tools (2023.1) predates SPV_KHR_cooperative_matrix and
        // SPV_NV_cooperative_matrix2 and rejects their capabilities (6022, 5431, ...) as
        // unknown: such a module cannot be checked by that validator.
        if !out.status.success() && text.contains("Invalid capability operand") {
            eprintln!(
                "skipping spirv-val of {}: this spirv-val does not know \
                 the cooperative-matrix extensions ({})",
                m.display(),
                text.trim()
            );
            continue;
        }
        assert!(
            out.status.success(),
            "spirv-val rejects {}: {}{}",
            m.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
