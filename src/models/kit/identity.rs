//! The identity sidecar of a run: which model file ran (size, converter, the SHA-256 of the
//! upstream files it was converted from), serialised with the run's report as JSON.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::convert::ProvenanceKeys;
use crate::formats::GgufFile;
use crate::{Error, Result};

/// A model file's identity, for a run's JSON sidecar.
#[derive(Clone, Debug, Serialize)]
pub struct ModelIdentity {
    pub path: String,
    pub bytes: u64,
    /// Model-specific facts (Kimodo: `skeleton`), serialised beside the others.
    #[serde(flatten)]
    pub details: BTreeMap<&'static str, String>,
    pub converter_version: Option<String>,
    /// SHA-256 of the upstream files the model was converted from.
    pub sources: Vec<(String, String)>,
}

impl ModelIdentity {
    /// The identity of the GGUF at `path`: its size, the converter recorded under
    /// `keys.version`, and the source hashes recorded under keys starting with
    /// `keys.sha256_prefix` (the key's rest is the source file), read again from the
    /// memory-mapped header.
    pub fn read(
        path: &Path,
        keys: &ProvenanceKeys,
        details: BTreeMap<&'static str, String>,
    ) -> Result<ModelIdentity> {
        let bytes = std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .len();
        let gguf = GgufFile::open(path)?;
        let sources = gguf
            .metadata()
            .iter()
            .filter_map(|(k, v)| {
                let file = k.strip_prefix(keys.sha256_prefix)?;
                Some((file.to_string(), v.as_str()?.to_string()))
            })
            .collect();
        Ok(ModelIdentity {
            path: path.display().to_string(),
            bytes,
            details,
            converter_version: gguf
                .get(keys.version)
                .and_then(|v| v.as_str())
                .map(str::to_string),
            sources,
        })
    }
}

/// A report as the pretty-printed JSON of a sidecar.
pub fn sidecar_json(report: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(report)
        .map_err(|e| Error::InvalidArgument(format!("JSON sidecar: {e}")))
}
