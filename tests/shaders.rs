//! The committed SPIR-V is what `tools/shaderc` makes from the committed GLSL: every source
//! under `kernels/glsl/` and every module under `kernels/spirv/` matches the SHA-256 recorded
//! in `kernels/spirv/MANIFEST`, and every module passes `spirv-val` (skipped with a message
//! when spirv-tools is not installed). No shader compiler is needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

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
            let digest = Sha256::digest(std::fs::read(&p).unwrap());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            (format!("{dir}/{name}"), hex)
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
    // Every compute shader has its module.
    for path in actual.keys() {
        if let Some(stem) = path
            .strip_prefix("glsl/")
            .and_then(|p| p.strip_suffix(".comp"))
        {
            assert!(
                actual.contains_key(&format!("spirv/{stem}.spv")),
                "{path} has no module"
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
