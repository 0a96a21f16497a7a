//! PEFT's `adapter_config.json`: the LoRA settings the merge depends on.

use super::*;

// ---------------------------------------------------------------------------------------
// adapter_config.json
// ---------------------------------------------------------------------------------------

const ADAPTER: &str = "adapter_config.json";

/// Which modules a LoRA adapter targets, as PEFT matches them
/// (`huggingface/peft@v0.18.1:src/peft/tuners/tuners_utils.py` `check_target_module_exists`:
/// a list matches a module whose name equals an entry or ends with `.` + an entry; a string is
/// a regular expression that must match the whole module name; `"all-linear"` is every linear
/// layer but the output layer).
#[derive(Clone, Debug, PartialEq)]
pub enum TargetModules {
    List(Vec<String>),
    Regex(String),
    AllLinear,
}

/// A PEFT LoRA adapter's configuration, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    pub base_model_name_or_path: String,
    pub r: usize,
    pub lora_alpha: f64,
    pub use_rslora: bool,
    pub fan_in_fan_out: bool,
    pub target_modules: TargetModules,
}

impl LoraConfig {
    /// Parse and check an `adapter_config.json`. Refused: another PEFT type, DoRA, LoRA
    /// biases, per-module rank or alpha patterns, layer selections, modules saved whole,
    /// targeted parameters, and a rank of zero.
    pub fn parse(bytes: &[u8]) -> Result<LoraConfig> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| bad(ADAPTER, format!("not a JSON object: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad(ADAPTER, "not a JSON object"))?;
        let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
        match get("peft_type").and_then(Value::as_str) {
            Some("LORA") => {}
            other => {
                return Err(unsupported(
                    ADAPTER,
                    format!("peft_type {other:?} (kinema merges LoRA adapters, \"LORA\")"),
                ));
            }
        }
        let base_model_name_or_path = get("base_model_name_or_path")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(ADAPTER, "no base_model_name_or_path string"))?
            .to_string();
        let r = get("r")
            .and_then(Value::as_u64)
            .filter(|&r| r > 0 && r <= MAX_DIM as u64)
            .ok_or_else(|| bad(ADAPTER, "r is missing or not a positive whole number"))?
            as usize;
        let lora_alpha = get("lora_alpha")
            .and_then(Value::as_f64)
            .filter(|a| a.is_finite())
            .ok_or_else(|| bad(ADAPTER, "lora_alpha is missing or not a number"))?;
        let flag = |k: &str| -> Result<bool> {
            match get(k) {
                None => Ok(false),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| bad(ADAPTER, format!("{k} is not true or false"))),
            }
        };
        let use_rslora = flag("use_rslora")?;
        let fan_in_fan_out = flag("fan_in_fan_out")?;
        for k in ["use_dora", "lora_bias", "use_qalora"] {
            if flag(k)? {
                return Err(unsupported(
                    ADAPTER,
                    format!("{k} = true (plain LoRA only)"),
                ));
            }
        }
        if let Some(b) = get("bias")
            && b.as_str() != Some("none")
        {
            return Err(unsupported(ADAPTER, format!("bias {b} (only \"none\")")));
        }
        let nonempty = |v: &Value| match v {
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::String(s) => !s.is_empty(),
            _ => true,
        };
        for k in [
            "rank_pattern",
            "alpha_pattern",
            "layers_to_transform",
            "layers_pattern",
            "modules_to_save",
            "target_parameters",
            "trainable_token_indices",
            "exclude_modules",
        ] {
            if let Some(v) = get(k)
                && nonempty(v)
            {
                return Err(unsupported(
                    ADAPTER,
                    format!(
                        "{k} is set ({}); kinema merges uniform LoRA adapters",
                        preview(v)
                    ),
                ));
            }
        }
        let target_modules = match get("target_modules") {
            Some(Value::String(s)) if s == "all-linear" => TargetModules::AllLinear,
            Some(Value::String(s)) => TargetModules::Regex(s.clone()),
            Some(Value::Array(a)) if !a.is_empty() => TargetModules::List(
                a.iter()
                    .map(|x| {
                        x.as_str().map(str::to_string).ok_or_else(|| {
                            bad(ADAPTER, format!("target_modules entry {x} is not a string"))
                        })
                    })
                    .collect::<Result<_>>()?,
            ),
            _ => {
                return Err(bad(
                    ADAPTER,
                    "target_modules is missing or not a non-empty list or string",
                ));
            }
        };
        Ok(LoraConfig {
            base_model_name_or_path,
            r,
            lora_alpha,
            use_rslora,
            fan_in_fan_out,
            target_modules,
        })
    }

    /// The factor of `B @ A` (`huggingface/peft@v0.18.1:src/peft/tuners/lora/layer.py`
    /// `update_layer`: `lora_alpha / r`, or `lora_alpha / sqrt(r)` with rsLoRA), as the f32
    /// torch multiplies by.
    pub fn scale(&self) -> f32 {
        if self.use_rslora {
            (self.lora_alpha / (self.r as f64).sqrt()) as f32
        } else {
            (self.lora_alpha / self.r as f64) as f32
        }
    }

    /// Which projections of `layer` the adapter targets (PEFT's matching on the module names
    /// of the LLM2Vec Llama, `layers.{i}.{block}.{proj}`, and the same under `model.`).
    /// Refuses a target that names no Llama projection (PEFT refuses a target it finds
    /// nowhere; one that names another module, `lm_head` or `embed_tokens`, cannot be merged
    /// into this encoder).
    pub fn targets(&self, layers: usize) -> Result<Vec<Vec<bool>>> {
        let names = |i: usize, proj: &str, block: &str| {
            [
                format!("layers.{i}.{block}.{proj}"),
                format!("model.layers.{i}.{block}.{proj}"),
            ]
        };
        match &self.target_modules {
            TargetModules::AllLinear => Ok(vec![vec![true; PROJECTIONS.len()]; layers]),
            TargetModules::List(list) => {
                for t in list {
                    let hits = PROJECTIONS.iter().any(|(p, b)| {
                        names(0, p, b)
                            .iter()
                            .any(|n| n == t || n.ends_with(&format!(".{t}")))
                    });
                    if !hits {
                        return Err(unsupported(
                            ADAPTER,
                            format!(
                                "target module {t:?} is not one of the Llama projections \
                                 (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"
                            ),
                        ));
                    }
                }
                Ok((0..layers)
                    .map(|i| {
                        PROJECTIONS
                            .iter()
                            .map(|(p, b)| {
                                names(i, p, b).iter().any(|n| {
                                    list.iter().any(|t| n == t || n.ends_with(&format!(".{t}")))
                                })
                            })
                            .collect()
                    })
                    .collect())
            }
            TargetModules::Regex(re) => {
                let full = regex::Regex::new(&format!("^(?:{re})$")).map_err(|e| {
                    unsupported(ADAPTER, format!("target_modules regex {re:?}: {e}"))
                })?;
                let t: Vec<Vec<bool>> = (0..layers)
                    .map(|i| {
                        PROJECTIONS
                            .iter()
                            .map(|(p, b)| names(i, p, b).iter().any(|n| full.is_match(n)))
                            .collect()
                    })
                    .collect();
                if !t.iter().flatten().any(|&x| x) {
                    return Err(unsupported(
                        ADAPTER,
                        format!("target_modules regex {re:?} matches no Llama projection"),
                    ));
                }
                Ok(t)
            }
        }
    }
}
