//! The MotionBricks navigation agent's exported functions (see the conventions in
//! [`super`]): create it on a model with a `clips.npz`, push commands, step or poll frames
//! into the caller's buffer.

use std::ffi::{c_char, c_void};

use super::*;
use crate::api::AgentFrames;

const AGENT_OPTIONS: &[(u32, usize)] = &[(1, std::mem::size_of::<mb_agent_options>())];
const AGENT_COMMAND: &[(u32, usize)] = &[(1, std::mem::size_of::<mb_agent_command>())];
const AGENT_FRAMES: &[(u32, usize)] = &[(1, std::mem::size_of::<mb_agent_frames>())];

/// G1 qpos values per frame.
const QPOS: usize = 36;

/// Fills `options` with the defaults (argmax) and this header's `size` and `version`.
///
/// # Safety
/// `options` is null or points to a writable `mb_agent_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_agent_options_init(options: *mut mb_agent_options) -> i32 {
    // SAFETY: the caller's promise on `options`; no error buffer.
    unsafe {
        entry(std::ptr::null_mut(), 0, None, || {
            *out_slot(options, "options")? = mb_agent_options {
                size: std::mem::size_of::<mb_agent_options>() as u32,
                version: KINEMA_ABI_VERSION,
                argmax: 1,
            };
            Ok(())
        })
    }
}

/// Fills `command` with the defaults (style null: set it; movement and facing (1, 0), the
/// style's speed, no waypoint, seed 0) and this header's `size` and `version`.
///
/// # Safety
/// `command` is null or points to a writable `mb_agent_command`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_agent_command_init(command: *mut mb_agent_command) -> i32 {
    // SAFETY: the caller's promise on `command`; no error buffer.
    unsafe {
        entry(std::ptr::null_mut(), 0, None, || {
            *out_slot(command, "command")? = mb_agent_command {
                size: std::mem::size_of::<mb_agent_command>() as u32,
                version: KINEMA_ABI_VERSION,
                style: std::ptr::null(),
                movement: [1.0, 0.0],
                facing: [1.0, 0.0],
                has_speed: 0,
                speed: 0.0,
                has_waypoint: 0,
                waypoint: [0.0, 0.0],
                waypoint_heading: 0.0,
                seed: 0,
            };
            Ok(())
        })
    }
}

/// An agent on `model` with the style clips of the file `clips` (`kinema agent --clips`),
/// standing idle; `options` null = the defaults. On success `*out` holds it (free with
/// [`mb_agent_free`]); it keeps the model alive.
///
/// # Safety
/// `model` null or live; `clips` null or a NUL-terminated string; `options` null or a
/// readable options struct; `out` a writable pointer slot; `error` null or `capacity`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_agent_create(
    model: *const mb_model,
    clips: *const c_char,
    options: *const mb_agent_options,
    out: *mut *mut mb_agent,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_new(model, "model", out, error, capacity, |m, out| {
            let mut o = AgentOptions::default();
            if !options.is_null() {
                let c = versioned(options, AGENT_OPTIONS, "mb_agent_options")?;
                if c.argmax == 0 {
                    o.sampling = Sampling::Gumbel;
                }
            }
            let agent = Agent::open(m.model.clone(), c_path(clips, "clips")?, o)?;
            boxed(
                out,
                mb_agent {
                    agent,
                    last: m.last.clone(),
                },
            );
            Ok(())
        })
    }
}

/// Frees an agent (null is ignored).
///
/// # Safety
/// `agent` is null or an agent not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_agent_free(agent: *mut mb_agent) {
    // SAFETY: the caller's promise.
    unsafe { free(agent) }
}

/// Makes `command` the one the agent follows from its next frame on. A command the clips
/// cannot serve is an error naming the field and changes nothing.
///
/// # Safety
/// `agent` null or live and not in use by another thread; `command` null or a readable
/// command whose `style` is null or NUL-terminated; `error` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_agent_push_command(
    agent: *mut mb_agent,
    command: *const mb_agent_command,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(agent, "agent", error, capacity, |a| {
            if command.is_null() {
                return Err(arg("command is null"));
            }
            let c = versioned(command, AGENT_COMMAND, "mb_agent_command")?;
            let style = c_str(c.style, "command.style")?
                .to_str()
                .map_err(|_| arg("command.style is not UTF-8"))?;
            a.agent.push(&AgentCommand {
                style: style.to_owned(),
                movement: c.movement,
                facing: c.facing,
                speed: (c.has_speed != 0).then_some(c.speed),
                waypoint: (c.has_waypoint != 0).then_some((c.waypoint, c.waypoint_heading)),
                seed: c.seed,
            })
        })
    }
}

/// Checks the output buffer and view before a call plays anything.
///
/// # Safety
/// `view` null or writable with its `size` and `version` set.
unsafe fn frames_out<'a>(
    qpos: *mut f32,
    qpos_len: usize,
    want: usize,
    view: *mut mb_agent_frames,
) -> Result<&'a mut mb_agent_frames> {
    // SAFETY: the caller's promise on `view`.
    let v = unsafe { out_slot(view, "frames") }?;
    // SAFETY: `v` is a writable view.
    unsafe { versioned(v, AGENT_FRAMES, "mb_agent_frames") }?;
    if qpos_len < want * QPOS {
        return Err(Error::Shape(format!(
            "qpos: {qpos_len} values of room, {} needed ({want} frames x {QPOS})",
            want * QPOS
        )));
    }
    if want > 0 && qpos.is_null() {
        return Err(arg("qpos is null"));
    }
    if !qpos.is_aligned() {
        return Err(arg("qpos is not aligned for float"));
    }
    Ok(v)
}

/// Copies `out` into the caller's buffer and view.
///
/// # Safety
/// `qpos` holds room for `out.qpos.len()` floats (checked by [`frames_out`]).
unsafe fn write_frames(out: &AgentFrames, qpos: *mut f32, v: &mut mb_agent_frames) {
    if !out.qpos.is_empty() {
        // SAFETY: `frames_out` checked the room, non-null and alignment.
        unsafe { std::ptr::copy_nonoverlapping(out.qpos.as_ptr(), qpos, out.qpos.len()) };
    }
    let last = out.plans.last();
    *v = mb_agent_frames {
        size: v.size,
        version: v.version,
        frames: out.frames(),
        first_frame: out.first_frame,
        plans: out.plans.len(),
        last_plan_frame: last.map_or(0, |p| p.frame),
        last_plan_style: last.map_or(0, |p| p.style as u32),
        last_plan_tokens: last.map_or(0, |p| p.num_tokens),
        last_plan_ms: last.map_or(0.0, |p| p.ms),
        last_plan_predict_ms: last.map_or(0.0, |p| p.predict_ms),
    };
}

/// Plays `frames` 30 fps frames (planning whenever one is due) into `qpos`, which has room
/// for `qpos_len` floats (at least `frames x 36`: G1 MuJoCo qpos, root xyz, quaternion
/// w x y z, 29 hinges), and fills `view`. `progress` (null for none) is called with `"plan"`
/// before (0 of 1) and after (1 of 1) each plan; a cancel, like any error, leaves the agent
/// as it was and writes nothing.
///
/// # Safety
/// `agent` null or live and not in use by another thread; `qpos` null or `qpos_len` writable
/// floats; `view` null or writable with `size` and `version` set; `error` null or `capacity`
/// writable bytes; `progress` null or a function that does not unwind.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // a flat C signature: buffer, view, callback, error
pub unsafe extern "C" fn mb_agent_step(
    agent: *mut mb_agent,
    frames: usize,
    qpos: *mut f32,
    qpos_len: usize,
    view: *mut mb_agent_frames,
    progress: kinema_progress_fn,
    progress_user: *mut c_void,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(agent, "agent", error, capacity, |a| {
            if frames > 1 << 20 {
                return Err(arg(format!(
                    "frames {frames}: at most {} in one call",
                    1 << 20
                )));
            }
            let v = frames_out(qpos, qpos_len, frames, view)?;
            let mut p = progress_of(progress, progress_user);
            let out = a.agent.step_with_progress(frames, &mut p)?;
            write_frames(&out, qpos, v);
            Ok(())
        })
    }
}

/// Plays frames up to and including the next one that plans (at most 16, so `qpos` needs
/// room for `16 x 36` floats) and fills `view`.
///
/// # Safety
/// As [`mb_agent_step`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mb_agent_poll(
    agent: *mut mb_agent,
    qpos: *mut f32,
    qpos_len: usize,
    view: *mut mb_agent_frames,
    error: *mut c_char,
    capacity: usize,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe {
        entry_mut(agent, "agent", error, capacity, |a| {
            let v = frames_out(qpos, qpos_len, 16, view)?;
            let out = a.agent.poll()?;
            write_frames(&out, qpos, v);
            Ok(())
        })
    }
}
