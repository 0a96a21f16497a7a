//! Reading an upstream Hydra `config.yaml`: a size-capped read, a loader that refuses YAML
//! aliases (a few lines of nested aliases expand exponentially), and a key search over the
//! whole tree with Hydra's absolute interpolations `${a.b}` resolved.

use std::path::Path;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::{Yaml, YamlLoader};

use super::meta::invalid;
use crate::formats::FormatError;
use crate::{Error, Result};

/// Interpolations followed in a chain before giving up (a cycle, or a config no one writes).
pub const MAX_INTERPOLATION_DEPTH: usize = 16;

fn yaml_err(msg: String) -> Error {
    FormatError::Invalid {
        format: "yaml",
        msg,
    }
    .into()
}

/// The text of `path`, refused when it is larger than `limit` bytes.
pub fn read_capped(path: &Path, limit: u64) -> Result<String> {
    // A regular file of at most `limit` bytes, read no further than that.
    let bytes = crate::formats::read_capped(path, limit, "yaml")?;
    String::from_utf8(bytes).map_err(|_| {
        FormatError::Invalid {
            format: "yaml",
            msg: format!("{} is not UTF-8 text", path.display()),
        }
        .into()
    })
}

/// The single document of `text` when it is a mapping; `None` for an empty document. Aliases
/// are refused before loading (`what` names the file kind in that error: "a Kimodo config").
pub fn load_mapping(text: &str, what: &str) -> Result<Option<Yaml>> {
    let mut parser = Parser::new_from_str(text);
    loop {
        match parser.next_token() {
            Ok((Event::StreamEnd, _)) => break,
            Ok((Event::Alias(_), mark)) => {
                return Err(yaml_err(format!(
                    "line {}: aliases (*name) are not accepted in {what}",
                    mark.line()
                )));
            }
            Ok(_) => {}
            Err(e) => return Err(yaml_err(e.to_string())),
        }
    }
    let mut docs = YamlLoader::load_from_str(text).map_err(|e| yaml_err(e.to_string()))?;
    match docs.as_slice() {
        [] | [Yaml::Null] => Ok(None),
        [Yaml::Hash(_)] => Ok(docs.pop()),
        [_] => Err(yaml_err("the document is not a mapping".into())),
        _ => Err(yaml_err("more than one YAML document".into())),
    }
}

/// A value as written in the config, for messages.
pub fn show(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => format!("{s:?}"),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Real(r) => r.clone(),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::Null => "null".into(),
        other => format!("{other:?}"),
    }
}

/// Key search over a parsed config, with Hydra's absolute interpolations `${a.b}` resolved.
/// Errors are format errors prefixed with `format`.
pub struct Lookup<'a> {
    pub root: &'a Yaml,
    pub format: &'static str,
}

impl<'a> Lookup<'a> {
    fn bad(&self, msg: String) -> Error {
        invalid(self.format, msg)
    }

    /// Every value stored under `key` anywhere in the tree, interpolations resolved; one
    /// value when all agree, an error naming both when two differ.
    pub fn find(&self, key: &str) -> Result<Option<&'a Yaml>> {
        let mut found: Vec<&'a Yaml> = Vec::new();
        collect(self.root, key, &mut found, 0);
        let mut resolved: Option<&'a Yaml> = None;
        for v in found {
            let v = self.resolve(key, v)?;
            match resolved {
                Some(prev) if prev != v => {
                    return Err(self.bad(format!(
                        "{key} has conflicting values {} and {}",
                        show(prev),
                        show(v)
                    )));
                }
                _ => resolved = Some(v),
            }
        }
        Ok(resolved)
    }

    /// The value at the dotted `path` from the root (`model.args.down_t`), interpolations
    /// resolved; `None` when the path does not exist.
    pub fn at(&self, path: &str) -> Result<Option<&'a Yaml>> {
        let mut node = self.root;
        for part in path.split('.') {
            node = match node {
                Yaml::Hash(h) => match h.get(&Yaml::String(part.into())) {
                    Some(v) => v,
                    None => return Ok(None),
                },
                _ => return Ok(None),
            };
        }
        self.resolve(path, node).map(Some)
    }

    fn resolve(&self, key: &str, mut v: &'a Yaml) -> Result<&'a Yaml> {
        for _ in 0..MAX_INTERPOLATION_DEPTH {
            let Some(path) = v
                .as_str()
                .and_then(|s| s.strip_prefix("${"))
                .and_then(|s| s.strip_suffix('}'))
            else {
                return Ok(v);
            };
            let unresolved = || {
                self.bad(format!(
                    "{key}: cannot resolve the interpolation ${{{path}}}"
                ))
            };
            let mut node = self.root;
            for part in path.split('.') {
                node = match node {
                    Yaml::Hash(h) => h.get(&Yaml::String(part.into())).ok_or_else(unresolved)?,
                    _ => return Err(unresolved()),
                };
            }
            v = node;
        }
        Err(self.bad(format!(
            "{key}: interpolations nest deeper than {MAX_INTERPOLATION_DEPTH}"
        )))
    }

    /// A positive integer under `key`.
    pub fn usize(&self, key: &str) -> Result<Option<usize>> {
        self.find(key)?
            .map(|v| as_usize(self.format, key, v))
            .transpose()
    }

    /// A finite number under `key`, as f32.
    pub fn f32(&self, key: &str) -> Result<Option<f32>> {
        self.find(key)?
            .map(|v| as_f32(self.format, key, v))
            .transpose()
    }

    /// `true` or `false` under `key`.
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.find(key)?
            .map(|v| {
                v.as_bool().ok_or_else(|| {
                    self.bad(format!("{key} is {}, expected true or false", show(v)))
                })
            })
            .transpose()
    }
}

fn collect<'a>(node: &'a Yaml, key: &str, out: &mut Vec<&'a Yaml>, depth: usize) {
    // yaml-rust2 bounds nesting while parsing; this bound only keeps the walk finite.
    if depth > 256 {
        return;
    }
    match node {
        Yaml::Hash(h) => {
            for (k, v) in h {
                if k.as_str() == Some(key) {
                    out.push(v);
                }
                collect(v, key, out, depth + 1);
            }
        }
        Yaml::Array(a) => {
            for v in a {
                collect(v, key, out, depth + 1);
            }
        }
        _ => {}
    }
}

/// A positive integer.
pub fn as_usize(format: &'static str, key: &str, v: &Yaml) -> Result<usize> {
    match v {
        Yaml::Integer(i) if *i > 0 => usize::try_from(*i)
            .map_err(|_| invalid(format, format!("{key} = {i} does not fit this machine"))),
        _ => Err(invalid(
            format,
            format!("{key} is {}, expected a positive integer", show(v)),
        )),
    }
}

/// A number that is finite in f32.
pub fn as_f32(format: &'static str, key: &str, v: &Yaml) -> Result<f32> {
    let x = match v {
        Yaml::Integer(i) => Some(*i as f64),
        Yaml::Real(_) => v.as_f64(),
        _ => None,
    };
    match x {
        Some(x) if x.is_finite() && (x as f32).is_finite() => Ok(x as f32),
        _ => Err(invalid(
            format,
            format!("{key} is {}, expected a finite number", show(v)),
        )),
    }
}
