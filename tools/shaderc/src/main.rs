//! Compile the shaders of `kernels/glsl/` into `kernels/spirv/<name>.spv` and write
//! `kernels/spirv/MANIFEST`: the SHA-256 of each GLSL source (includes too), of each variant
//! (its defines together with its source) and of each module, so the test suite can tell when
//! a shader or the variant table changed without the modules being recompiled.
//!
//! Modules: every `*.comp` that the variant table ([`variants::VARIANTS`], as ggml's
//! vulkan-shaders-gen lists its variants) does not name as a source becomes the module of its
//! own name; a source it names is compiled once per variant, with the variant's defines.
//!
//! Run from the checkout's root: `cargo run --release --manifest-path tools/shaderc/Cargo.toml`
//! (with `CARGO_TARGET_DIR` pointing at a warm build of shaderc-sys if there is one). It works
//! on the `kernels/` of the current directory, so one prebuilt binary serves every checkout;
//! elsewhere it falls back to the checkout it was built from.
//!
//! Target environment, per module: Vulkan 1.2 (SPIR-V 1.5), except shaders that enable
//! `GL_KHR_cooperative_matrix`, which need Vulkan 1.3 (SPIR-V 1.6). The module's SPIR-V
//! version word says which one it was built for (tests/shaders.rs validates each with it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sha2::{Digest, Sha256};

#[allow(dead_code)] // `Variant::define` serves kinema's tests.
mod variants;

use variants::{VARIANTS, Variant};

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Sorted files of `dir` whose names end with one of `exts`.
fn files(dir: &Path, exts: &[&str]) -> Result<Vec<PathBuf>, String> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e))
        })
        .collect();
    v.sort();
    Ok(v)
}

fn name(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("?")
}

fn run() -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let root = if cwd.join("kernels/glsl").is_dir() {
        cwd
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    };
    let glsl = root.join("kernels/glsl");
    let spirv = root.join("kernels/spirv");
    std::fs::create_dir_all(&spirv).map_err(|e| format!("{}: {e}", spirv.display()))?;

    let compiler = shaderc::Compiler::new().map_err(|e| format!("shaderc: {e}"))?;
    let options = |env: shaderc::EnvVersion,
                   defines: &[(&str, &str)]|
     -> Result<shaderc::CompileOptions<'static>, String> {
        let mut opts = shaderc::CompileOptions::new().map_err(|e| format!("shaderc: {e}"))?;
        opts.set_target_env(shaderc::TargetEnv::Vulkan, env as u32);
        opts.set_optimization_level(shaderc::OptimizationLevel::Performance);
        opts.set_warnings_as_errors();
        for &(name, value) in defines {
            opts.add_macro_definition(name, (!value.is_empty()).then_some(value));
        }
        let include_dir = glsl.clone();
        opts.set_include_callback(move |requested, _kind, _from, _depth| {
            let path = include_dir.join(requested);
            let content =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(shaderc::ResolvedInclude {
                resolved_name: path.display().to_string(),
                content,
            })
        });
        Ok(opts)
    };

    // The newest SPIR-V version the compiler knows, as its version word (0x00MMmm00).
    let (word, _) = shaderc::get_spirv_version();
    let mut manifest = format!(
        "# Written by tools/shaderc (cargo run --release --manifest-path tools/shaderc/Cargo.toml);\n\
         # tests/shaders.rs checks it. Compiler: shaderc crate 0.10 (glslang built from source,\n\
         # SPIR-V up to {}.{}), target Vulkan 1.2, or 1.3 for cooperative-matrix shaders;\n\
         # optimisation: performance.\n\
         # sha256 then path relative to kernels/ (the format of sha256sum); a variant/<module>\n\
         # line hashes the variant's name, source and defines (tools/shaderc/src/variants.rs)\n\
         # followed by its source.\n",
        (word >> 16) & 0xff,
        (word >> 8) & 0xff
    );
    for src in files(&glsl, &["comp", "glsl"])? {
        let text = std::fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let _ = writeln!(manifest, "{}  glsl/{}", hex(&text), name(&src));
    }

    // Every module: (name, source, defines), the variants' sources compiled only as them.
    let sources = files(&glsl, &["comp"])?;
    let mut modules: Vec<(String, PathBuf, &[(&str, &str)])> = Vec::new();
    for v in VARIANTS {
        let src = glsl.join(v.source);
        if !sources.contains(&src) {
            return Err(format!("variant {}: no source {}", v.name, src.display()));
        }
        let text = std::fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let mut hashed = v.identity().into_bytes();
        hashed.extend_from_slice(&text);
        let _ = writeln!(manifest, "{}  variant/{}", hex(&hashed), v.name);
        modules.push((v.name.to_string(), src, v.defines));
    }
    for src in sources {
        if !VARIANTS
            .iter()
            .any(|v: &Variant| glsl.join(v.source) == src)
        {
            let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
            modules.push((stem.to_string(), src.clone(), &[]));
        }
    }
    modules.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = modules.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!("two modules named {}", w[0].0));
    }

    let mut old: Vec<PathBuf> = files(&spirv, &["spv"])?;
    for (stem, src, defines) in modules {
        let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let env = if text.contains("GL_KHR_cooperative_matrix") {
            shaderc::EnvVersion::Vulkan1_3
        } else {
            shaderc::EnvVersion::Vulkan1_2
        };
        let art = compiler
            .compile_into_spirv(
                &text,
                shaderc::ShaderKind::Compute,
                name(&src),
                "main",
                Some(&options(env, defines)?),
            )
            .map_err(|e| format!("{stem} ({}): {e}", src.display()))?;
        let out = spirv.join(format!("{stem}.spv"));
        std::fs::write(&out, art.as_binary_u8()).map_err(|e| format!("{}: {e}", out.display()))?;
        let _ = writeln!(manifest, "{}  spirv/{stem}.spv", hex(art.as_binary_u8()));
        old.retain(|p| p != &out);
        println!(
            "{}{} -> spirv/{stem}.spv ({} bytes)",
            name(&src),
            defines
                .iter()
                .map(|(n, v)| if v.is_empty() {
                    format!(" {n}")
                } else {
                    format!(" {n}={v}")
                })
                .collect::<String>(),
            art.as_binary_u8().len()
        );
    }
    for stale in old {
        std::fs::remove_file(&stale).map_err(|e| format!("{}: {e}", stale.display()))?;
        println!("removed stale {}", name(&stale));
    }
    let m = spirv.join("MANIFEST");
    std::fs::write(&m, manifest).map_err(|e| format!("{}: {e}", m.display()))?;
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kinema-shaderc: {e}");
            ExitCode::FAILURE
        }
    }
}
