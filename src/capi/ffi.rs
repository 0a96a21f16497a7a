//! The exported functions (see the conventions in [`super`]).

use std::ffi::{c_char, c_void};

use super::*;

const ENGINE_OPTIONS: &[(u32, usize)] = &[(1, std::mem::size_of::<kinema_engine_options>())];
pub(super) const GENERATE_OPTIONS: &[(u32, usize)] =
    &[(1, std::mem::size_of::<kimodo_generate_options>())];
const MOTION_VIEW: &[(u32, usize)] = &[(1, std::mem::size_of::<kimodo_motion_view>())];
const PLAN_OPTIONS: &[(u32, usize)] = &[(1, std::mem::size_of::<mb_plan_options>())];
const PLAN_VIEW: &[(u32, usize)] = &[(1, std::mem::size_of::<mb_plan_view>())];

/// Fills `options` with the defaults (auto backend and precision, default threads and
/// device) and this header's `size` and `version`.
///
/// # Safety
/// `options` is null or points to a writable `kinema_engine_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_engine_options_init(options: *mut kinema_engine_options) -> i32 {
    // SAFETY: the caller's promise on `options`; no error buffer.
    unsafe {
        entry(std::ptr::null_mut(), 0, None, || {
            *out_slot(options, "options")? = kinema_engine_options {
                size: std::mem::size_of::<kinema_engine_options>() as u32,
                version: KINEMA_ABI_VERSION,
                backend: KINEMA_BACKEND_AUTO,
                precision: KINEMA_PRECISION_AUTO,
                threads: 0,
                device: -1,
            };
            Ok(())
        })
    }
}

/// Builds an engine; `options` null = the defaults. On success `*out` holds it (free with
/// [`kinema_engine_destroy`]).
///
/// # Safety
/// `options` is null or a readable options struct; `out` a writable pointer slot; `error`
/// null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_engine_create(
    options: *const kinema_engine_options,
    out: *mut *mut kinema_engine,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry(error, capacity, None, || {
            let out = out_slot(out, "out")?;
            *out = std::ptr::null_mut();
            let mut opts = EngineOptions::default();
            if !options.is_null() {
                let o = versioned(options, ENGINE_OPTIONS, "kinema_engine_options")?;
                opts.backend = match o.backend {
                    KINEMA_BACKEND_AUTO => BackendChoice::Auto,
                    KINEMA_BACKEND_CPU => BackendChoice::Cpu,
                    KINEMA_BACKEND_VULKAN => BackendChoice::Vulkan,
                    b => {
                        return Err(arg(format!(
                            "kinema_engine_options.backend = {b}: expected KINEMA_BACKEND_AUTO \
                             (0), _CPU (1) or _VULKAN (2)"
                        )));
                    }
                };
                opts.precision = match o.precision {
                    KINEMA_PRECISION_AUTO => PrecisionChoice::Auto,
                    KINEMA_PRECISION_STRICT => PrecisionChoice::Strict,
                    KINEMA_PRECISION_FAST => PrecisionChoice::Fast,
                    KINEMA_PRECISION_SPLIT => PrecisionChoice::Split,
                    p => {
                        return Err(arg(format!(
                            "kinema_engine_options.precision = {p}: expected \
                             KINEMA_PRECISION_AUTO (0), _STRICT (1), _FAST (2) or _SPLIT (3)"
                        )));
                    }
                };
                opts.threads = (o.threads != 0).then_some(o.threads as usize);
                opts.device = match o.device {
                    -1 => None,
                    d if d >= 0 => Some(d as usize),
                    d => {
                        return Err(arg(format!(
                            "kinema_engine_options.device = {d}: expected a device index or -1"
                        )));
                    }
                };
            }
            let engine = Engine::new(opts)?;
            boxed(
                out,
                kinema_engine {
                    engine,
                    last: LastError::default(),
                },
            );
            Ok(())
        })
    }
}

/// Frees an engine (null is ignored). Models loaded on it stay usable.
///
/// # Safety
/// `engine` is null or an engine not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_engine_destroy(engine: *mut kinema_engine) {
    // SAFETY: the caller's promise.
    unsafe { free(engine) }
}

/// Copies the engine's last error (of any call through it or its models) into `buffer` and
/// returns its full length in bytes (0: none, or a null engine).
///
/// # Safety
/// `engine` is null or a live engine; `buffer` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_engine_last_error(
    engine: *const kinema_engine,
    buffer: *mut c_char,
    capacity: usize,
) -> usize {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's promise.
        let Some(e) = (unsafe { engine.as_ref() }) else {
            return 0;
        };
        let msg = e.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // SAFETY: the caller's promise on `buffer`.
        unsafe { write_message(buffer, capacity, &msg) };
        msg.len()
    }))
    .unwrap_or(0)
}

/// Loads a Kimodo model (`kinema convert kimodo`) and, when `text_path` is not null, the
/// LLM2Vec text encoder for [`kimodo_generate`] with the default text options (the chat
/// template as the file says). The encoder must fit the motion model: embeddings of the
/// width it takes, from an LLM2Vec (bidirectional) encoder, not a causal language model;
/// otherwise nothing is loaded and the error names the mismatch. With a null `text_path`,
/// give text features to [`kimodo_generate_embedding`] (or use
/// [`kimodo_model_load_with_text`] with an encoder loaded with other options).
///
/// # Safety
/// `engine` null or live; the paths null or NUL-terminated; `out` a writable slot; `error`
/// null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_model_load(
    engine: *const kinema_engine,
    motion_path: *const c_char,
    text_path: *const c_char,
    out: *mut *mut kimodo_model,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(engine, "engine", out, error, capacity, |e, out| {
            let path = c_path(motion_path, "motion_path")?;
            let model = if text_path.is_null() {
                Kimodo::load(&e.engine, path)?
            } else {
                let text = c_path(text_path, "text_path")?;
                Kimodo::load_with_text(&e.engine, path, text, TextOptions::default())?
            };
            boxed(
                out,
                kimodo_model {
                    model,
                    last: e.last.clone(),
                },
            );
            Ok(())
        })
    }
}

/// Frees a Kimodo model (null is ignored).
///
/// # Safety
/// `model` is null or a model not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_model_free(model: *mut kimodo_model) {
    // SAFETY: the caller's promise.
    unsafe { free(model) }
}

/// The text-feature width the model takes (4096 for LLM2Vec); 0 for a null model.
///
/// # Safety
/// `model` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_model_embedding_dim(model: *const kimodo_model) -> usize {
    // SAFETY: the caller's promise.
    unsafe { model.as_ref() }.map_or(0, |m| m.model.embedding_dim())
}

/// The motion feature width (the noise's row width); 0 for a null model.
///
/// # Safety
/// `model` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_model_feature_dim(model: *const kimodo_model) -> usize {
    // SAFETY: the caller's promise.
    unsafe { model.as_ref() }.map_or(0, |m| m.model.config().motion_dim)
}

/// Fills `options` with `kinema generate`'s defaults for `frames` frames (100 steps, seed 0,
/// the model's guidance weights, default rows (2, or 3 with constraints), heading 0, no
/// noise, no progress, no constraints, the model's default post-processing).
///
/// # Safety
/// `options` is null or a writable `kimodo_generate_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_generate_options_init(
    options: *mut kimodo_generate_options,
    frames: u32,
) -> i32 {
    // SAFETY: the caller's promise on `options`; no error buffer.
    unsafe {
        entry(std::ptr::null_mut(), 0, None, || {
            *out_slot(options, "options")? = kimodo_generate_options {
                size: std::mem::size_of::<kimodo_generate_options>() as u32,
                version: KINEMA_ABI_VERSION,
                frames,
                steps: 100,
                seed: 0,
                noise: std::ptr::null(),
                noise_len: 0,
                has_cfg_text: 0,
                cfg_text: 0.0,
                has_cfg_constraint: 0,
                cfg_constraint: 0.0,
                cfg_rows: 0,
                heading: 0.0,
                progress: None,
                progress_user: std::ptr::null_mut(),
                constraints_json: std::ptr::null(),
                postprocess: KIMODO_POSTPROCESS_DEFAULT,
            };
            Ok(())
        })
    }
}

/// Generates one motion from a text feature of `kimodo_model_embedding_dim` floats. On
/// success `*out` holds it (free with [`kimodo_motion_free`]).
///
/// # Safety
/// `model` null or live; `embedding` `embedding_len` readable floats when that is the
/// model's width; `options` a readable options struct whose `noise`, when non-null, points
/// to `noise_len` floats; `out` a writable slot; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_generate_embedding(
    model: *const kimodo_model,
    embedding: *const f32,
    embedding_len: usize,
    options: *const kimodo_generate_options,
    out: *mut *mut kimodo_motion,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(model, "model", out, error, capacity, |m, out| {
            let k = &m.model;
            let e = slice(embedding, embedding_len, k.embedding_dim(), "embedding")?;
            if options.is_null() {
                return Err(arg("options is null: fill a kimodo_generate_options with \
                     kimodo_generate_options_init"));
            }
            let o = versioned(options, GENERATE_OPTIONS, "kimodo_generate_options")?;
            let req = generate_request(k, TextInput::Embedding(e.to_vec()), &o)?;
            let mut progress = progress_of(o.progress, o.progress_user);
            let motion = k.generate_with_progress(&req, &mut progress)?;
            let contacts = motion.foot_contacts().iter().map(|&c| c as u8).collect();
            boxed(out, kimodo_motion { motion, contacts });
            Ok(())
        })
    }
}

/// The request of `o` for `text` (the noise checked against the model's width, the
/// constraints parsed, the post-processing choice checked).
///
/// # Safety
/// `o.noise`, when non-null, points to `o.noise_len` floats when that is the noise's size;
/// `o.constraints_json` is null or NUL-terminated.
pub(super) unsafe fn generate_request(
    k: &Kimodo,
    text: TextInput,
    o: &kimodo_generate_options,
) -> Result<GenerateRequest> {
    let frames = o.frames as usize;
    let noise = if o.noise.is_null() {
        if o.noise_len != 0 {
            return Err(arg(format!(
                "kimodo_generate_options: noise is null but noise_len is {}",
                o.noise_len
            )));
        }
        Noise::Seed(o.seed)
    } else {
        let want = frames.saturating_mul(k.config().motion_dim);
        // SAFETY: the caller's promise on `noise`.
        Noise::Values(unsafe { slice(o.noise, o.noise_len, want, "noise") }?.to_vec())
    };
    let postprocess = match o.postprocess {
        KIMODO_POSTPROCESS_DEFAULT | KIMODO_POSTPROCESS_ON => true,
        KIMODO_POSTPROCESS_OFF => false,
        p => {
            return Err(arg(format!(
                "kimodo_generate_options: postprocess = {p}: expected -1 (the model's \
                 default), 0 (off) or 1 (on)"
            )));
        }
    };
    let constraints = if o.constraints_json.is_null() {
        None
    } else {
        // SAFETY: the caller's promise on `constraints_json`.
        let json = unsafe { c_str(o.constraints_json, "constraints_json") }?;
        Some(
            Constraints::from_json_bytes(json.to_bytes()).map_err(|e| match e {
                Error::InvalidArgument(m) => arg(format!("constraints_json: {m}")),
                e => e,
            })?,
        )
    };
    Ok(GenerateRequest {
        text,
        frames,
        steps: o.steps as usize,
        noise,
        cfg_text: (o.has_cfg_text != 0).then_some(o.cfg_text),
        cfg_constraint: (o.has_cfg_constraint != 0).then_some(o.cfg_constraint),
        cfg_rows: (o.cfg_rows != 0).then_some(o.cfg_rows as usize),
        constraints,
        postprocess,
        heading: o.heading,
        ..GenerateRequest::new(Vec::new(), frames)
    })
}

/// Fills `view` (whose `size` and `version` the caller sets) with the motion's sizes and
/// borrowed arrays.
///
/// # Safety
/// `motion` null or live; `view` null or a writable view; `error` null or `capacity` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_motion_get(
    motion: *const kimodo_motion,
    view: *mut kimodo_motion_view,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry(error, capacity, None, || {
            let m = handle(motion, "motion")?;
            let v = out_slot(view, "view")?;
            versioned(v, MOTION_VIEW, "kimodo_motion_view")?;
            let x = &m.motion;
            *v = kimodo_motion_view {
                size: v.size,
                version: v.version,
                frames: x.frames(),
                joints: x.joints(),
                feature_dim: x.feature_dim(),
                fps: x.fps(),
                local_rot_mats: x.local_rot_mats().as_ptr(),
                global_rot_mats: x.global_rot_mats().as_ptr(),
                posed_joints: x.posed_joints().as_ptr(),
                root_positions: x.root_positions().as_ptr(),
                smooth_root_pos: x.smooth_root_pos().as_ptr(),
                foot_contacts: m.contacts.as_ptr(),
                global_root_heading: x.global_root_heading().as_ptr(),
                features: x.features().as_ptr(),
            };
            Ok(())
        })
    }
}

/// Frees a motion (null is ignored); its views' pointers die with it.
///
/// # Safety
/// `motion` is null or a motion not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_motion_free(motion: *mut kimodo_motion) {
    // SAFETY: the caller's promise.
    unsafe { free(motion) }
}

/// Loads a MotionBricks model (`kinema convert motionbricks`).
///
/// # Safety
/// `engine` null or live; `path` null or NUL-terminated; `out` a writable slot; `error` null
/// or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_model_load(
    engine: *const kinema_engine,
    path: *const c_char,
    out: *mut *mut mb_model,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(engine, "engine", out, error, capacity, |e, out| {
            let model = Arc::new(MotionBricks::load(&e.engine, c_path(path, "path")?)?);
            boxed(
                out,
                mb_model {
                    model,
                    last: e.last.clone(),
                },
            );
            Ok(())
        })
    }
}

/// Frees a MotionBricks model (null is ignored).
///
/// # Safety
/// `model` is null or a model not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_model_free(model: *mut mb_model) {
    // SAFETY: the caller's promise.
    unsafe { free(model) }
}

/// A command for `batch` plans (1 to 64) that gives nothing: no keyframes, the length chosen
/// by the model among all lengths, Gumbel sampling from seed 0.
///
/// # Safety
/// `model` null or live; `out` a writable slot; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_create(
    model: *const mb_model,
    batch: usize,
    out: *mut *mut mb_command,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(model, "model", out, error, capacity, |m, out| {
            let request = m.model.request(batch)?;
            boxed(
                out,
                mb_command {
                    request,
                    seed: 0,
                    last: m.last.clone(),
                },
            );
            Ok(())
        })
    }
}

/// Frees a command (null is ignored).
///
/// # Safety
/// `command` is null or a command not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_free(command: *mut mb_command) {
    // SAFETY: the caller's promise.
    unsafe { free(command) }
}

/// Sets a float input by name (`global_root_values` `[B, 8, 5]`, `local_root_values`
/// `[B, 8, 4]`, `local_poses` `[B, 8, 303]`); `len` must be the input's size.
///
/// # Safety
/// `command` null or live; `name` null or NUL-terminated; `data` `len` readable floats when
/// `len` is the input's size; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_set_floats(
    command: *mut mb_command,
    name: *const c_char,
    data: *const f32,
    len: usize,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(command, "command", error, capacity, |c| {
            let name = c_str(name, "name")?
                .to_str()
                .map_err(|_| arg("name is not UTF-8"))?;
            let i = &c.request.inputs;
            let want = match name {
                "global_root_values" => i.global_root_values.len(),
                "local_root_values" => i.local_root_values.len(),
                "local_poses" => i.local_poses.len(),
                _ => return c.request.set_floats(name, &[]),
            };
            c.request.set_floats(name, slice(data, len, want, name)?)
        })
    }
}

/// Sets a flag input by name (`has_global_root_values`, `has_local_root_values`,
/// `has_local_poses` `[B, 8]`, `allowed_pred_num_tokens` `[B, 11]`): bytes 0 or 1.
///
/// # Safety
/// As [`mb_command_set_floats`], with `data` `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_set_flags(
    command: *mut mb_command,
    name: *const c_char,
    data: *const u8,
    len: usize,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(command, "command", error, capacity, |c| {
            let name = c_str(name, "name")?
                .to_str()
                .map_err(|_| arg("name is not UTF-8"))?;
            let i = &c.request.inputs;
            let want = match name {
                "has_global_root_values" => i.has_global_root_values.len(),
                "has_local_root_values" => i.has_local_root_values.len(),
                "has_local_poses" => i.has_local_poses.len(),
                "allowed_pred_num_tokens" => i.allowed_pred_num_tokens.len(),
                _ => return c.request.set_flags(name, &[]),
            };
            let bytes = slice(data, len, want, name)?;
            let flags = bytes
                .iter()
                .enumerate()
                .map(|(j, &b)| match b {
                    0 => Ok(false),
                    1 => Ok(true),
                    b => Err(arg(format!("{name}[{j}] = {b}: expected 0 or 1"))),
                })
                .collect::<Result<Vec<bool>>>()?;
            c.request.set_flags(name, &flags)
        })
    }
}

/// Sets `num_tokens` `[B]`: a length in 6..=16 tokens, or 18 to let the model choose.
///
/// # Safety
/// As [`mb_command_set_floats`], with `data` `len` readable integers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_set_num_tokens(
    command: *mut mb_command,
    data: *const i64,
    len: usize,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(command, "command", error, capacity, |c| {
            let want = c.request.inputs.num_tokens.len();
            c.request
                .set_num_tokens(slice(data, len, want, "num_tokens")?)
        })
    }
}

/// Chooses the token sampling: 1 = argmax (what the demo agent uses), 0 = Gumbel (upstream
/// `predict`'s default). Other values and a null command are rejected.
///
/// # Safety
/// `command` null or live; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_set_sampling_argmax(
    command: *mut mb_command,
    argmax: i32,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(command, "command", error, capacity, |c| {
            c.request.sampling = match argmax {
                0 => Sampling::Gumbel,
                1 => Sampling::Argmax,
                v => {
                    return Err(arg(format!(
                        "argmax = {v}: expected 1 (argmax) or 0 (Gumbel, the default)"
                    )));
                }
            };
            Ok(())
        })
    }
}

/// Reads the token sampling into `*argmax`: 1 = argmax, 0 = Gumbel.
///
/// # Safety
/// `command` null or live; `argmax` null or writable; `error` null or `capacity` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_get_sampling_argmax(
    command: *const mb_command,
    argmax: *mut i32,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_on(command, "command", error, capacity, |c| {
            *out_slot(argmax, "argmax")? = (c.request.sampling == Sampling::Argmax) as i32;
            Ok(())
        })
    }
}

/// Sets the seed: with Gumbel sampling, plan `b` of the batch draws from its own SplitMix64
/// stream started at `seed + b`, so repeating model, command, seed and backend repeats the
/// draws. Argmax draws nothing.
///
/// # Safety
/// `command` null or live; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_command_set_seed(
    command: *mut mb_command,
    seed: u64,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(command, "command", error, capacity, |c| {
            c.seed = seed;
            c.request.draws = Draws::Seed(seed);
            Ok(())
        })
    }
}

/// Plans one batch; `options` null = no progress. On success `*out` holds the result (free
/// with [`mb_plan_result_free`]).
///
/// # Safety
/// `model` and `command` null or live; `options` null or a readable options struct; `out` a
/// writable slot; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_plan(
    model: *const mb_model,
    command: *const mb_command,
    options: *const mb_plan_options,
    out: *mut *mut mb_plan_result,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(model, "model", out, error, capacity, |m, out| {
            let c = handle(command, "command")?;
            let (f, user) = if options.is_null() {
                (None, std::ptr::null_mut::<c_void>())
            } else {
                let o = versioned(options, PLAN_OPTIONS, "mb_plan_options")?;
                (o.progress, o.progress_user)
            };
            let mut progress = progress_of(f, user);
            let plan = m.model.plan_with_progress(&c.request, &mut progress)?;
            boxed(out, mb_plan_result { plan });
            Ok(())
        })
    }
}

/// Fills `view` (whose `size` and `version` the caller sets) with the plan's sizes and
/// borrowed arrays.
///
/// # Safety
/// `plan` null or live; `view` null or writable; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_plan_result_get(
    plan: *const mb_plan_result,
    view: *mut mb_plan_view,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry(error, capacity, None, || {
            let p = &handle(plan, "plan")?.plan;
            let v = out_slot(view, "view")?;
            versioned(v, PLAN_VIEW, "mb_plan_view")?;
            let (max_tokens, heads) = p.token_shape();
            *v = mb_plan_view {
                size: v.size,
                version: v.version,
                batch: p.batch(),
                frames: p.frames(),
                max_tokens,
                heads,
                num_tokens: p.num_tokens().as_ptr(),
                pose_tokens: p.pose_tokens().as_ptr(),
                features: p.features().as_ptr(),
                qpos: p.qpos().as_ptr(),
            };
            Ok(())
        })
    }
}

/// Frees a plan result (null is ignored).
///
/// # Safety
/// `plan` is null or a result not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_plan_result_free(plan: *mut mb_plan_result) {
    // SAFETY: the caller's promise.
    unsafe { free(plan) }
}
