//! Reading `constraints.json` as hostile input: structure, keys, lengths, finite numbers.

use serde_json::Value;

use super::entry::{Constraint, ConstraintKind, END_EFFECTORS, TYPES};
use crate::{Error, Result};

fn entry_err(index: usize, ty: &str, msg: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("constraints: entry {index} ({ty}): {msg}"))
}

/// Reads a JSON number as upstream's `torch.tensor(list)` does: float32 (the f64 JSON value
/// rounded once). Non-finite values (Python's `NaN` and `Infinity` tokens, which [`parse`]
/// turns into strings so that the entry can be named, or a number beyond f32) are refused.
fn number(v: &Value, what: &str, index: usize, ty: &str) -> Result<f32> {
    if let Value::String(s) = v
        && NON_FINITE.contains(&s.as_str())
    {
        return Err(entry_err(
            index,
            ty,
            format!("{what}: {s} is not a finite number"),
        ));
    }
    let x = v
        .as_f64()
        .ok_or_else(|| entry_err(index, ty, format!("{what}: {v} is not a number")))?;
    let f = x as f32;
    if !f.is_finite() {
        return Err(entry_err(
            index,
            ty,
            format!("{what}: {x} is not a finite float32"),
        ));
    }
    Ok(f)
}

/// A `[n, W]` array of numbers, any `n`.
fn any_rows<const W: usize>(v: &Value, key: &str, index: usize, ty: &str) -> Result<Vec<[f32; W]>> {
    let arr = v
        .as_array()
        .ok_or_else(|| entry_err(index, ty, format!("{key} is not an array")))?;
    arr.iter()
        .enumerate()
        .map(|(i, row)| {
            let r = row
                .as_array()
                .filter(|r| r.len() == W)
                .ok_or_else(|| entry_err(index, ty, format!("{key}[{i}] is not {W} numbers")))?;
            let mut out = [0.0f32; W];
            for (o, x) in out.iter_mut().zip(r) {
                *o = number(x, &format!("{key}[{i}]"), index, ty)?;
            }
            Ok(out)
        })
        .collect()
}

/// A `[k, W]` array of numbers, one row per constrained frame.
fn rows<const W: usize>(
    v: &Value,
    key: &str,
    k: usize,
    index: usize,
    ty: &str,
) -> Result<Vec<[f32; W]>> {
    let r = any_rows::<W>(v, key, index, ty)?;
    if r.len() != k {
        return Err(entry_err(
            index,
            ty,
            format!(
                "{key} holds {} rows; frame_indices holds {k} frames",
                r.len()
            ),
        ));
    }
    Ok(r)
}

/// The non-finite tokens Python's `json.dump` writes (and upstream's `json.load` reads).
const NON_FINITE: [&str; 3] = ["NaN", "Infinity", "-Infinity"];

/// Quotes the bare tokens `NaN`, `Infinity` and `-Infinity` outside strings, so that the JSON
/// parser accepts them as strings and [`number`] can refuse them naming the entry.
fn quote_non_finite(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let (mut i, mut in_str, mut escaped) = (0, false, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_str {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_str = false;
            }
        } else if b == b'"' {
            in_str = true;
        } else if let Some(tok) = NON_FINITE
            .iter()
            .rev()
            .find(|t| bytes[i..].starts_with(t.as_bytes()))
        {
            out.push(b'"');
            out.extend_from_slice(tok.as_bytes());
            out.push(b'"');
            i += tok.len();
            continue;
        }
        out.push(b);
        i += 1;
    }
    out
}

/// Parses a constraints file (JSON bytes). Checks the structure of every entry: known type,
/// known keys, non-empty integer `frame_indices`, arrays whose lengths agree, finite numbers,
/// the same joint count on every frame. Frames and joint counts are checked against the
/// model later, by [`build_conditions`](super::build_conditions).
pub fn parse(bytes: &[u8]) -> Result<Vec<Constraint>> {
    let v: Value = serde_json::from_slice(&quote_non_finite(bytes))
        .map_err(|e| Error::InvalidArgument(format!("constraints: not valid JSON: {e}")))?;
    let list = v.as_array().ok_or_else(|| {
        Error::InvalidArgument(
            "constraints: the file must hold a JSON array of {type, frame_indices, ...} objects"
                .into(),
        )
    })?;
    list.iter()
        .enumerate()
        .map(|(i, e)| parse_entry(i, e))
        .collect()
}

fn parse_entry(index: usize, e: &Value) -> Result<Constraint> {
    let obj = e.as_object().ok_or_else(|| {
        Error::InvalidArgument(format!("constraints: entry {index} is not a JSON object"))
    })?;
    let ty = match obj.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Error::InvalidArgument(format!(
                "constraints: entry {index}: type {other} is not a string"
            )));
        }
        None => {
            return Err(Error::InvalidArgument(format!(
                "constraints: entry {index} has no type"
            )));
        }
    };
    if !TYPES.contains(&ty.as_str()) {
        return Err(entry_err(
            index,
            &ty,
            format!(
                "unknown constraint type; expected one of {}",
                TYPES.join(", ")
            ),
        ));
    }
    let is_root = ty == "root2d";
    let allowed: &[&str] = match ty.as_str() {
        "root2d" => &[
            "type",
            "frame_indices",
            "smooth_root_2d",
            "global_root_heading",
        ],
        "end-effector" => &[
            "type",
            "frame_indices",
            "local_joints_rot",
            "root_positions",
            "smooth_root_2d",
            "joint_names",
        ],
        _ => &[
            "type",
            "frame_indices",
            "local_joints_rot",
            "root_positions",
            "smooth_root_2d",
        ],
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(entry_err(
            index,
            &ty,
            format!(
                "unknown key '{k}'; this type takes {}",
                allowed[1..].join(", ")
            ),
        ));
    }
    let get = |key: &str| {
        obj.get(key)
            .ok_or_else(|| entry_err(index, &ty, format!("missing {key}")))
    };
    let frames = get("frame_indices")?
        .as_array()
        .ok_or_else(|| entry_err(index, &ty, "frame_indices is not an array"))?;
    if frames.is_empty() {
        return Err(entry_err(index, &ty, "frame_indices is empty"));
    }
    let frame_indices = frames
        .iter()
        .map(|f| {
            f.as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| {
                    entry_err(
                        index,
                        &ty,
                        format!("frame index {f} is not a non-negative integer"),
                    )
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    let k = frame_indices.len();
    let smooth_root_2d = match obj.get("smooth_root_2d") {
        Some(v) => Some(rows::<2>(v, "smooth_root_2d", k, index, &ty)?),
        None if is_root => return Err(entry_err(index, &ty, "missing smooth_root_2d")),
        None => None,
    };
    let mut c = Constraint {
        index,
        type_name: ty.clone(),
        kind: ConstraintKind::FullBody,
        frame_indices,
        smooth_root_2d,
        num_joints: 0,
        local_joints_rot: Vec::new(),
        root_positions: Vec::new(),
    };
    if is_root {
        let heading = match obj.get("global_root_heading") {
            Some(v) => Some(rows::<2>(v, "global_root_heading", k, index, &ty)?),
            None => None,
        };
        c.kind = ConstraintKind::Root2d { heading };
        return Ok(c);
    }
    c.root_positions = rows::<3>(get("root_positions")?, "root_positions", k, index, &ty)?;
    let rot = get("local_joints_rot")?
        .as_array()
        .ok_or_else(|| entry_err(index, &ty, "local_joints_rot is not an array"))?;
    if rot.len() != k {
        return Err(entry_err(
            index,
            &ty,
            format!(
                "local_joints_rot holds {} frames; frame_indices holds {k}",
                rot.len()
            ),
        ));
    }
    for (f, frame) in rot.iter().enumerate() {
        let r = any_rows::<3>(frame, &format!("local_joints_rot[{f}]"), index, &ty)?;
        if f == 0 {
            c.num_joints = r.len();
        } else if r.len() != c.num_joints {
            return Err(entry_err(
                index,
                &ty,
                format!(
                    "local_joints_rot[{f}] holds {} joints, frame 0 holds {}",
                    r.len(),
                    c.num_joints
                ),
            ));
        }
        c.local_joints_rot.extend(r.iter().flatten());
    }
    c.kind = match ty.as_str() {
        "fullbody" => ConstraintKind::FullBody,
        "left-hand" => ConstraintKind::EndEffector {
            joint_names: vec!["LeftHand".into()],
        },
        "right-hand" => ConstraintKind::EndEffector {
            joint_names: vec!["RightHand".into()],
        },
        "left-foot" => ConstraintKind::EndEffector {
            joint_names: vec!["LeftFoot".into()],
        },
        "right-foot" => ConstraintKind::EndEffector {
            joint_names: vec!["RightFoot".into()],
        },
        _ => {
            let names = get("joint_names")?
                .as_array()
                .ok_or_else(|| entry_err(index, &ty, "joint_names is not an array"))?;
            let joint_names = names
                .iter()
                .map(|n| {
                    let s = n.as_str().ok_or_else(|| {
                        entry_err(index, &ty, format!("joint name {n} is not a string"))
                    })?;
                    if !END_EFFECTORS.contains(&s) {
                        return Err(entry_err(
                            index,
                            &ty,
                            format!(
                                "unknown end effector '{s}'; expected one of {}",
                                END_EFFECTORS.join(", ")
                            ),
                        ));
                    }
                    Ok(s.to_string())
                })
                .collect::<Result<Vec<String>>>()?;
            ConstraintKind::EndEffector { joint_names }
        }
    };
    Ok(c)
}
