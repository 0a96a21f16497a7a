//! The text encoder's functions and generation from a prompt (see the conventions in
//! [`super`]).

use std::ffi::c_char;

use super::ffi::{GENERATE_OPTIONS, generate_request};
use super::*;

const TEXT_OPTIONS: &[(u32, usize)] = &[(1, std::mem::size_of::<kinema_text_options>())];

/// A C string as UTF-8, or an error naming it.
///
/// # Safety
/// As [`c_str`].
unsafe fn utf8<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    // SAFETY: forwarded.
    let s = unsafe { c_str(p, what) }?;
    s.to_str().map_err(|e| {
        arg(format!(
            "{what} is not UTF-8 (invalid byte sequence at byte {}); pass UTF-8 text",
            e.valid_up_to()
        ))
    })
}

/// Fills `options` with the defaults (the chat template as the model file says, long
/// prompts cut as upstream does) and this header's `size` and `version`.
///
/// # Safety
/// `options` is null or points to a writable `kinema_text_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_text_options_init(options: *mut kinema_text_options) -> i32 {
    // SAFETY: the caller's promise on `options`; no error buffer.
    unsafe {
        entry(std::ptr::null_mut(), 0, None, || {
            *out_slot(options, "options")? = kinema_text_options {
                size: std::mem::size_of::<kinema_text_options>() as u32,
                version: KINEMA_ABI_VERSION,
                chat_template: KINEMA_CHAT_TEMPLATE_AUTO,
                long_text: KINEMA_LONG_TEXT_TRIM,
            };
            Ok(())
        })
    }
}

/// Loads an LLM2Vec text encoder (`kinema convert llm2vec`, or a llama.cpp `llama` GGUF);
/// `options` null = the defaults. On success `*out` holds it (free with
/// [`kinema_text_encoder_free`]).
///
/// # Safety
/// `engine` null or live; `path` null or NUL-terminated; `options` null or a readable options
/// struct; `out` a writable slot; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_text_encoder_load(
    engine: *const kinema_engine,
    path: *const c_char,
    options: *const kinema_text_options,
    out: *mut *mut kinema_text_encoder,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(engine, "engine", out, error, capacity, |e, out| {
            let path = c_path(path, "path")?;
            let mut opts = TextOptions::default();
            if !options.is_null() {
                let o = versioned(options, TEXT_OPTIONS, "kinema_text_options")?;
                opts.chat_template = match o.chat_template {
                    KINEMA_CHAT_TEMPLATE_AUTO => ChatTemplate::Auto,
                    KINEMA_CHAT_TEMPLATE_ON => ChatTemplate::On,
                    KINEMA_CHAT_TEMPLATE_OFF => ChatTemplate::Off,
                    t => {
                        return Err(arg(format!(
                            "kinema_text_options.chat_template = {t}: expected \
                             KINEMA_CHAT_TEMPLATE_AUTO (0), _ON (1) or _OFF (2)"
                        )));
                    }
                };
                opts.long_text = match o.long_text {
                    KINEMA_LONG_TEXT_TRIM => LongText::Trim,
                    KINEMA_LONG_TEXT_REFUSE => LongText::Refuse,
                    l => {
                        return Err(arg(format!(
                            "kinema_text_options.long_text = {l}: expected \
                             KINEMA_LONG_TEXT_TRIM (0) or _REFUSE (1)"
                        )));
                    }
                };
            }
            let encoder = TextEncoder::load_with(&e.engine, path, opts)?;
            boxed(
                out,
                kinema_text_encoder {
                    encoder,
                    last: e.last.clone(),
                },
            );
            Ok(())
        })
    }
}

/// Frees a text encoder (null is ignored). Kimodo models given it keep their own reference.
///
/// # Safety
/// `encoder` is null or an encoder not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_text_encoder_free(encoder: *mut kinema_text_encoder) {
    // SAFETY: the caller's promise.
    unsafe { free(encoder) }
}

/// The width of an embedding (the model's hidden size); 0 for a null encoder.
///
/// # Safety
/// `encoder` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_text_encoder_dim(encoder: *const kinema_text_encoder) -> usize {
    // SAFETY: the caller's promise.
    unsafe { encoder.as_ref() }.map_or(0, |e| e.encoder.dim())
}

/// Embeds `count` prompts (NUL-terminated UTF-8; invalid UTF-8 is rejected) into `out`,
/// `count * kinema_text_encoder_dim` floats row-major, which `out_len` must be (checked
/// before anything is read). An empty prompt embeds to zeros, as upstream. Nothing is written
/// to `out` on an error.
///
/// # Safety
/// `encoder` null or live; `prompts` `count` readable pointers, each null or NUL-terminated,
/// when `count` is nonzero; `out` `out_len` writable floats when that is `count * dim`;
/// `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kinema_text_encode(
    encoder: *const kinema_text_encoder,
    prompts: *const *const c_char,
    count: usize,
    out: *mut f32,
    out_len: usize,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_on(encoder, "encoder", error, capacity, |t| {
            if count == 0 {
                return Err(arg("count = 0: give at least one prompt"));
            }
            // Both arrays must fit in an address space (at most isize::MAX bytes).
            let fits =
                |n: usize, size: usize| n.checked_mul(size).filter(|&b| b <= isize::MAX as usize);
            let want = count
                .checked_mul(t.encoder.dim())
                .filter(|&n| fits(n, 4).is_some() && fits(count, 8).is_some())
                .ok_or_else(|| arg(format!("count = {count} prompts overflow the output size")))?;
            if out_len != want {
                return Err(Error::Shape(format!(
                    "out: {out_len} floats given, {want} needed ({count} prompts x {})",
                    t.encoder.dim()
                )));
            }
            if out.is_null() {
                return Err(arg("out is null"));
            }
            if !out.is_aligned() {
                return Err(arg("out is not aligned for float"));
            }
            let ptrs = slice(prompts, count, count, "prompts")?;
            let texts = ptrs
                .iter()
                .enumerate()
                .map(|(i, &p)| utf8(p, &format!("prompts[{i}]")))
                .collect::<Result<Vec<&str>>>()?;
            let e = t.encoder.encode(&texts)?;
            // SAFETY: non-null, aligned, `out_len == want` writable floats (the caller's
            // promise); `e` holds exactly `want` values.
            std::slice::from_raw_parts_mut(out, want).copy_from_slice(e.as_slice());
            Ok(())
        })
    }
}

/// Loads a Kimodo model (`kinema convert kimodo`) given a text encoder already loaded (with
/// the text options wanted) for [`kimodo_generate`]; the encoder must fit as
/// [`kimodo_model_load`] says. The model keeps its own reference: the encoder may be freed.
///
/// # Safety
/// `engine` and `encoder` null or live; `motion_path` null or NUL-terminated; `out` a
/// writable slot; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_model_load_with_text(
    engine: *const kinema_engine,
    motion_path: *const c_char,
    encoder: *const kinema_text_encoder,
    out: *mut *mut kimodo_model,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(engine, "engine", out, error, capacity, |e, out| {
            let t = handle(encoder, "encoder")?;
            let path = c_path(motion_path, "motion_path")?;
            let model = Kimodo::load(&e.engine, path)?.with_text_encoder(t.encoder.clone())?;
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

/// Whether the model has a text encoder ([`kimodo_generate`] works): 1 or 0 (0 for null).
///
/// # Safety
/// `model` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_model_has_text_encoder(model: *const kimodo_model) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { model.as_ref() }.map_or(0, |m| i32::from(m.model.text_encoder().is_some()))
}

/// Generates one motion from a prompt (NUL-terminated UTF-8; invalid UTF-8 is rejected),
/// embedded by the model's text encoder (loaded with [`kimodo_model_load`]'s `text_path` or
/// [`kimodo_model_load_with_text`]); the progress callback hears `"encode"` once before the
/// steps. On success `*out` holds the motion (free with [`kimodo_motion_free`]).
///
/// # Safety
/// `model` null or live; `prompt` null or NUL-terminated; `options` a readable options struct
/// whose `noise`, when non-null, points to `noise_len` floats; `out` a writable slot; `error`
/// null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kimodo_generate(
    model: *const kimodo_model,
    prompt: *const c_char,
    options: *const kimodo_generate_options,
    out: *mut *mut kimodo_motion,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(model, "model", out, error, capacity, |m, out| {
            let k = &m.model;
            let prompt = utf8(prompt, "prompt")?;
            if k.text_encoder().is_none() {
                return Err(arg(
                    "this Kimodo model has no text encoder: load it with a text_path \
                     (kimodo_model_load) or kimodo_model_load_with_text, or give text features \
                     to kimodo_generate_embedding",
                ));
            }
            if options.is_null() {
                return Err(arg("options is null: fill a kimodo_generate_options with \
                     kimodo_generate_options_init"));
            }
            let o = versioned(options, GENERATE_OPTIONS, "kimodo_generate_options")?;
            let req = generate_request(k, TextInput::Prompt(prompt.to_string()), &o)?;
            let mut progress = progress_of(o.progress, o.progress_user);
            let motion = k.generate_with_progress(&req, &mut progress)?;
            let contacts = motion.foot_contacts().iter().map(|&c| c as u8).collect();
            boxed(out, kimodo_motion { motion, contacts });
            Ok(())
        })
    }
}
