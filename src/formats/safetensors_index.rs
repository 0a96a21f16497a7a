//! A Hugging Face checkpoint folder: one `model.safetensors`, or shards listed by
//! `model.safetensors.index.json` (`{"metadata": {...}, "weight_map": {tensor: shard file}}`,
//! as `transformers`' `save_pretrained` writes it). Every shard is memory-mapped; a tensor is
//! read when asked for, so a 16 GB checkpoint is never held in memory.
//!
//! The index is hostile input like any file: its size is capped, duplicate keys are refused
//! (serde's map keeps the last silently), shard names must be plain file names in the folder
//! (no separator, no `..`), and the index and the shards must agree exactly: every listed
//! tensor is in its shard and every shard tensor is listed, in that shard.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::FormatError;
use super::safetensors::{Entries, SafeTensorInfo, SafeTensors};
use super::source::read_capped;
use crate::error::{Error, Result};

const FORMAT: &str = "safetensors index";

/// The single-file checkpoint's name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The shard index's name.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Largest index accepted (Llama-3-8B's is 24 KB; a 400 B model's about 1 MB).
pub const MAX_INDEX_BYTES: u64 = 16 << 20;

/// The `weight_map` of a shard index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardIndex {
    /// Tensor name -> shard file name, in file order.
    pub weight_map: Vec<(String, String)>,
    /// The shard file names, each once, in order of first mention.
    pub shards: Vec<String>,
}

fn invalid(msg: impl Into<String>) -> Error {
    FormatError::invalid(FORMAT, msg).into()
}

/// Whether `name` is a plain file name inside the folder (not a path, not `.` or `..`).
fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.contains(':')
}

/// The index's top level: the `weight_map` entries in file order (duplicates kept so they
/// can be refused), the other keys checked for duplicates and skipped.
struct Top {
    weight_map: Option<Entries>,
    duplicate: Option<String>,
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Top, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Top, A::Error> {
                let mut top = Top {
                    weight_map: None,
                    duplicate: None,
                };
                let mut seen: Vec<String> = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    if seen.contains(&k) && top.duplicate.is_none() {
                        top.duplicate = Some(k.clone());
                    }
                    if k == "weight_map" {
                        top.weight_map = Some(m.next_value::<Entries>()?);
                    } else {
                        m.next_value::<IgnoredAny>()?;
                    }
                    seen.push(k);
                }
                Ok(top)
            }
        }
        d.deserialize_map(V)
    }
}

/// Parse a `model.safetensors.index.json` held in memory.
pub fn parse_index(bytes: &[u8]) -> Result<ShardIndex> {
    let top: Top = serde_json::from_slice(bytes).map_err(|e| {
        invalid(format!(
            "not an index (a JSON object with a weight_map): {e}"
        ))
    })?;
    if let Some(k) = top.duplicate {
        return Err(FormatError::Duplicate {
            format: FORMAT,
            what: "key",
            name: k,
        }
        .into());
    }
    let Some(entries) = top.weight_map else {
        return Err(invalid("no \"weight_map\" object"));
    };
    let mut weight_map = Vec::with_capacity(entries.0.len());
    let mut names: HashMap<String, ()> = HashMap::with_capacity(entries.0.len());
    let mut shards: Vec<String> = Vec::new();
    for (tensor, file) in entries.0 {
        let Value::String(file) = file else {
            return Err(invalid(format!(
                "weight_map entry {tensor:?} is not a file name string"
            )));
        };
        if !plain_file_name(&file) {
            return Err(invalid(format!(
                "weight_map entry {tensor:?} names {file:?}, which is not a file name in the \
                 checkpoint folder"
            )));
        }
        if names.insert(tensor.clone(), ()).is_some() {
            return Err(FormatError::Duplicate {
                format: FORMAT,
                what: "weight_map entry",
                name: tensor,
            }
            .into());
        }
        if !shards.contains(&file) {
            shards.push(file.clone());
        }
        weight_map.push((tensor, file));
    }
    if weight_map.is_empty() {
        return Err(invalid("the weight_map is empty"));
    }
    Ok(ShardIndex { weight_map, shards })
}

/// A checkpoint folder's tensors across its safetensors files.
pub struct Checkpoint {
    dir: PathBuf,
    /// Each file's name in the folder and its parsed, memory-mapped content.
    files: Vec<(String, SafeTensors)>,
    /// Tensor name -> index into `files`.
    index: HashMap<String, usize>,
    /// Tensor names in file order (shards in index order).
    order: Vec<String>,
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.dir)
            .field("files", &self.files.len())
            .field("tensors", &self.order.len())
            .finish()
    }
}

impl Checkpoint {
    /// Open the checkpoint in `dir`: the shards of `model.safetensors.index.json` when that
    /// file exists, else `model.safetensors`. A missing shard, a tensor the index lists but its
    /// shard lacks and a shard tensor the index does not list are errors naming the file and
    /// the tensor.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let index_path = dir.join(INDEX_FILE);
        let single = dir.join(SINGLE_FILE);
        if !index_path.exists() {
            if !single.exists() {
                return Err(Error::io(
                    dir,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("no {SINGLE_FILE} and no {INDEX_FILE} in the checkpoint folder"),
                    ),
                ));
            }
            let st = SafeTensors::open(&single).map_err(|e| in_file(&single, e))?;
            let order: Vec<String> = st.tensors().iter().map(|t| t.name.clone()).collect();
            let index = order.iter().map(|n| (n.clone(), 0)).collect();
            return Ok(Checkpoint {
                dir: dir.to_path_buf(),
                files: vec![(SINGLE_FILE.to_string(), st)],
                index,
                order,
            });
        }
        let bytes = read_capped(&index_path, MAX_INDEX_BYTES, FORMAT)?;
        let idx = parse_index(&bytes).map_err(|e| in_file(&index_path, e))?;
        let mut files = Vec::with_capacity(idx.shards.len());
        for shard in &idx.shards {
            let path = dir.join(shard);
            if !path.exists() {
                let example = idx
                    .weight_map
                    .iter()
                    .find(|(_, f)| f == shard)
                    .map(|(t, _)| t.as_str())
                    .unwrap_or_default();
                return Err(Error::io(
                    &path,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("missing shard: {INDEX_FILE} puts tensor {example:?} in this file"),
                    ),
                ));
            }
            let st = SafeTensors::open(&path).map_err(|e| in_file(&path, e))?;
            files.push((shard.clone(), st));
        }
        let mut index = HashMap::with_capacity(idx.weight_map.len());
        let mut order = Vec::with_capacity(idx.weight_map.len());
        for (tensor, shard) in &idx.weight_map {
            let i = idx
                .shards
                .iter()
                .position(|s| s == shard)
                .expect("every shard of the weight map is listed");
            if files[i].1.info(tensor).is_none() {
                return Err(in_file(
                    &dir.join(shard),
                    invalid(format!(
                        "{INDEX_FILE} puts tensor {tensor:?} in this shard, which lacks it"
                    )),
                ));
            }
            index.insert(tensor.clone(), i);
            order.push(tensor.clone());
        }
        for (i, (shard, st)) in files.iter().enumerate() {
            for t in st.tensors() {
                if index.get(&t.name) != Some(&i) {
                    return Err(in_file(
                        &dir.join(shard),
                        invalid(format!(
                            "tensor {:?} is in this shard but {INDEX_FILE} does not list it \
                             here",
                            t.name
                        )),
                    ));
                }
            }
        }
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            files,
            index,
            order,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The safetensors files read (names in the folder), in order.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|(n, _)| n.as_str())
    }

    /// Every tensor name, in file order.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// A tensor's header entry and the file that holds it.
    pub fn info(&self, name: &str) -> Option<(&str, &SafeTensorInfo)> {
        let &i = self.index.get(name)?;
        let (file, st) = &self.files[i];
        Some((file.as_str(), st.info(name)?))
    }

    /// A floating-point tensor converted to f32; errors name the file and the tensor.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let Some(&i) = self.index.get(name) else {
            return Err(FormatError::missing_tensor("safetensors", name));
        };
        let (file, st) = &self.files[i];
        st.tensor_f32(name)
            .map(|(_, v)| v)
            .map_err(|e| in_file(&self.dir.join(file), e))
    }
}

fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::Io { .. } => e,
        e => FormatError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        }
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_grammar() {
        let ok = br#"{"metadata": {"total_size": 8}, "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s1.safetensors"}}"#;
        let idx = parse_index(ok).unwrap();
        assert_eq!(idx.shards, ["s1.safetensors", "s2.safetensors"]);
        assert_eq!(idx.weight_map.len(), 3);
        for (bad, want) in [
            (
                &br#"{"weight_map": {"a": "x", "a": "y"}}"#[..],
                "duplicate weight_map entry",
            ),
            (br#"{"weight_map": {"a": "../x"}}"#, "not a file name"),
            (br#"{"weight_map": {"a": "d/x"}}"#, "not a file name"),
            (br#"{"weight_map": {"a": 3}}"#, "not a file name string"),
            (br#"{"weight_map": {}}"#, "empty"),
            (br#"{"metadata": {}}"#, "no \"weight_map\""),
            (br#"{"weight_map": {}, "weight_map": {}}"#, "duplicate key"),
            (br#"[1]"#, "not an index"),
            (br#"{"weight_map": [1]}"#, "not an index"),
        ] {
            let e = parse_index(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
