//! The C ABI with hostile arguments: null handles and pointers, lengths that are wrong or
//! huge (the buffers passed always hold what a correct length would read, so only the
//! library's checks stand between a wrong length and a bad read), unknown struct sizes and
//! versions, out-of-range enums and flags, tiny error buffers, cancelling progress callbacks.
//! Every call must return a status and leave the process intact; a successful call's results
//! must be readable and freeable. The tiny models (Kimodo, MotionBricks, a 48-wide LLM2Vec
//! text encoder) are written once per process; the engine is always the CPU one (options
//! given, never null), so nothing probes Vulkan.
#![no_main]

use std::ffi::{CString, c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

use kinema::ClipLibrary;
use kinema::capi::*;
use kinema::models::kimodo::convert::{ConvertOptions, convert};
use kinema::models::motionbricks::config::{ConvDecoderConfig, ConvShape, MotionBricksConfig};
use kinema::models::motionbricks::harness::{reduced, synthetic_model, write_model};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/tiny_llama.rs"]
#[allow(dead_code)]
mod tiny_llama;

struct World {
    engine: *mut kinema_engine,
    kimodo: *mut kimodo_model,
    mb: *mut mb_model,
    /// The agent's synthetic style clips.
    clips: CString,
    /// The tiny LLM2Vec encoder (48 wide, the tiny Kimodo model's text width).
    text: *mut kinema_text_encoder,
    /// The tiny Kimodo model with that encoder.
    kimodo_text: *mut kimodo_model,
}

// SAFETY: the handles are Send + Sync on the Rust side (the library's engines and models are
// shared between threads by design); the fuzzer only reads these pointers.
unsafe impl Send for World {}
// SAFETY: as above.
unsafe impl Sync for World {}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kinema-fuzz-capi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let k = dir.join("kimodo.gguf");
        convert(
            &root.join("tests/fixtures/kimodo/soma30/checkpoint"),
            &k,
            &ConvertOptions::default(),
            &mut |_| {},
        )
        .unwrap();
        let m = dir.join("mb.gguf");
        write_model(&synthetic_model(fuzz_config()).unwrap(), &m).unwrap();
        let t = dir.join("text.gguf");
        tiny_llama::write(
            &t,
            &tiny_llama::Spec {
                hidden: 48,
                ..tiny_llama::Spec::default()
            },
        );
        let c = dir.join("clips.npz");
        ClipLibrary::synthetic(1)
            .to_npz()
            .unwrap()
            .write(&c)
            .unwrap();
        let mut o = std::mem::MaybeUninit::<kinema_engine_options>::uninit();
        let mut w = World {
            engine: null_mut(),
            kimodo: null_mut(),
            mb: null_mut(),
            clips: cstr(&c),
            text: null_mut(),
            kimodo_text: null_mut(),
        };
        let (kp, mp, tp) = (cstr(&k), cstr(&m), cstr(&t));
        // SAFETY: valid pointers to writable slots and NUL-terminated paths.
        unsafe {
            assert_eq!(kinema_engine_options_init(o.as_mut_ptr()), KINEMA_OK);
            let mut o = o.assume_init();
            o.backend = KINEMA_BACKEND_CPU;
            o.precision = KINEMA_PRECISION_STRICT;
            o.threads = 1;
            assert_eq!(
                kinema_engine_create(&o, &mut w.engine, null_mut(), 0),
                KINEMA_OK
            );
            assert_eq!(
                kimodo_model_load(w.engine, kp.as_ptr(), null(), &mut w.kimodo, null_mut(), 0),
                KINEMA_OK
            );
            assert_eq!(
                mb_model_load(w.engine, mp.as_ptr(), &mut w.mb, null_mut(), 0),
                KINEMA_OK
            );
            // Options always given (never null): the engine is the CPU one above, so no
            // Vulkan probe happens here.
            let mut to = std::mem::zeroed::<kinema_text_options>();
            assert_eq!(kinema_text_options_init(&mut to), KINEMA_OK);
            assert_eq!(
                kinema_text_encoder_load(w.engine, tp.as_ptr(), &to, &mut w.text, null_mut(), 0),
                KINEMA_OK
            );
            assert_eq!(
                kimodo_model_load(
                    w.engine,
                    kp.as_ptr(),
                    tp.as_ptr(),
                    &mut w.kimodo_text,
                    null_mut(),
                    0
                ),
                KINEMA_OK
            );
        }
        w
    })
}

/// The released structure (token counts, 8 heads x 10 codes, layer kinds) at the smallest
/// widths and depths it takes: what the C API does with a model does not depend on its size,
/// and the reduced test model's 2048-wide feed-forwards would spend most of each execution in
/// matrix products (a third of the time in plans alone, measured), not at the boundary.
fn fuzz_config() -> MotionBricksConfig {
    let r = reduced();
    let conv = ConvShape {
        width: 16,
        depth: 1,
        dilation_growth_rate: 3,
        down_t: r.down_t,
    };
    MotionBricksConfig {
        root_n_embd: 16,
        root_ff: 32,
        root_layers_shared: 1,
        root_layers_token: 1,
        root_pose_feat: 16,
        root_local_feat: 8,
        root_global_feat: 8,
        root_conv: ConvDecoderConfig::root_head(16, conv),
        pose_n_embd: 16,
        pose_ff: 32,
        pose_layers: 1,
        pose_feat_width: 16,
        pose_root_width: 8,
        pose_length_width: 8,
        code_dim: 2,
        decoder: ConvDecoderConfig::vq_decoder(16, conv),
        ..r
    }
}

fn cstr(p: &std::path::Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

/// Reads the input front to back; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        (self.u32() as u64) << 32 | self.u32() as u64
    }
    /// A length: often right, sometimes off by one, sometimes anything.
    fn len(&mut self, right: usize) -> usize {
        match self.u8() % 4 {
            0 | 1 => right,
            2 => right.wrapping_add(self.u8() as usize).wrapping_sub(128),
            _ => self.u64() as usize,
        }
    }
    /// A struct size and version: usually right.
    fn layout(&mut self, size: usize) -> (u32, u32) {
        match self.u8() % 4 {
            0 | 1 => (size as u32, KINEMA_ABI_VERSION),
            2 => (self.u32(), KINEMA_ABI_VERSION),
            _ => (size as u32, self.u32()),
        }
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

/// `kimodo_generate_options.constraints_json`: none, fuzzed bytes (up to the first NUL), or a
/// well-formed root2d or full-body entry (30 joints, the tiny model's) at a fuzzed frame, so
/// that the constraint row and the post-processing run too. Keep the string alive through the
/// call.
fn constraints(i: &mut Input) -> Option<CString> {
    match i.u8() % 4 {
        0 => None,
        1 => {
            let n = i.u8() as usize;
            let b: Vec<u8> = i.bytes(n).into_iter().take_while(|&b| b != 0).collect();
            Some(CString::new(b).unwrap())
        }
        2 => Some(
            CString::new(format!(
                r#"[{{"type":"root2d","frame_indices":[{}],"smooth_root_2d":[[{},0.5]]}}]"#,
                i.u8() % 20,
                f32::from_bits(i.u32())
            ))
            .unwrap(),
        ),
        _ => Some(
            CString::new(format!(
                r#"[{{"type":"fullbody","frame_indices":[{}],"local_joints_rot":[[{}]],"root_positions":[[{},0.9,0]]}}]"#,
                i.u8() % 20,
                vec!["[0,0.1,0]"; 29 + i.u8() as usize % 3].join(","),
                i.u8() as f32 * 0.01
            ))
            .unwrap(),
        ),
    }
}

/// `kimodo_generate_options.postprocess`: mostly -1, 0 or 1, sometimes anything.
fn postprocess(i: &mut Input) -> i32 {
    match i.u8() % 8 {
        7 => i.u32() as i32,
        k => k as i32 % 3 - 1,
    }
}

/// An error buffer of a random small capacity (or null with a random capacity).
struct ErrorBuf(Vec<u8>, bool);

impl ErrorBuf {
    fn new(i: &mut Input) -> ErrorBuf {
        let cap = i.u8() as usize % 48;
        ErrorBuf(vec![0xAA; cap], i.u8() % 8 == 0)
    }
    fn ptr(&mut self) -> *mut c_char {
        if self.1 {
            null_mut()
        } else {
            self.0.as_mut_ptr().cast()
        }
    }
    fn cap(&self) -> usize {
        if self.1 { 999 } else { self.0.len() }
    }
    fn check(&self, status: i32) {
        assert!(
            (0..=KINEMA_ERROR_PANIC).contains(&status),
            "status {status}"
        );
        assert_ne!(status, KINEMA_ERROR_PANIC, "a panic reached the boundary");
        if !self.1 && !self.0.is_empty() {
            let nul = self.0.iter().position(|&b| b == 0).expect("NUL-terminated");
            std::str::from_utf8(&self.0[..nul]).expect("UTF-8");
        }
    }
}

unsafe extern "C" fn progress(user: *mut c_void, _: *const c_char, step: u64, _: u64) -> i32 {
    (step == user as u64) as i32
}

fn maybe<T>(i: &mut Input, p: *mut T) -> *mut T {
    if i.u8() % 6 == 0 { null_mut() } else { p }
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let mut i = Input(data);
    for _ in 0..8 {
        let mut e = ErrorBuf::new(&mut i);
        // SAFETY: every pointer passed is null or valid for what a correct call would read or
        // write; only lengths, sizes, versions, enums and handles' presence are hostile.
        unsafe {
            match i.u8() % 10 {
                0 => {
                    let mut o = std::mem::zeroed::<kinema_engine_options>();
                    kinema_engine_options_init(&mut o);
                    (o.size, o.version) = i.layout(std::mem::size_of::<kinema_engine_options>());
                    o.backend = [KINEMA_BACKEND_CPU, i.u32() as i32][i.u8() as usize % 2];
                    o.precision = i.u8() as i32 % 5 - 1;
                    o.threads = [1, 2, i.u32()][i.u8() as usize % 3];
                    o.device = [-1, i.u32() as i32][i.u8() as usize % 2];
                    if o.backend != KINEMA_BACKEND_CPU || o.device != -1 || o.threads > 4 {
                        o.size = o.size.wrapping_add(1); // keep Vulkan probes and big pools out
                    }
                    let mut out = null_mut();
                    // Never a null `options`: it means the defaults, whose `auto` backend
                    // probes Vulkan, and a Vulkan driver's own allocations (lavapipe leaks
                    // 128 bytes per instance) are not ours to fuzz. examples/c covers null.
                    let s = kinema_engine_create(&o, maybe(&mut i, &mut out), e.ptr(), e.cap());
                    e.check(s);
                    kinema_engine_destroy(out);
                }
                1 => {
                    let name = CString::new(
                        i.bytes(8)
                            .into_iter()
                            .filter(|&b| b != 0)
                            .collect::<Vec<_>>(),
                    )
                    .unwrap();
                    let text = if i.u8() % 2 == 0 {
                        name.as_ptr()
                    } else {
                        null()
                    };
                    let mut out = null_mut();
                    let s = kimodo_model_load(
                        maybe(&mut i, w.engine),
                        name.as_ptr(),
                        text,
                        &mut out,
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    assert!(s != KINEMA_OK);
                    let s = mb_model_load(
                        maybe(&mut i, w.engine),
                        maybe(&mut i, name.as_ptr() as *mut c_char),
                        &mut out.cast(),
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                }
                2 => {
                    let dim = kimodo_model_embedding_dim(w.kimodo);
                    let fdim = kimodo_model_feature_dim(w.kimodo);
                    let emb: Vec<f32> = (0..dim)
                        .map(|k| ((k as f32) * 0.37 + i.u8() as f32).sin())
                        .collect();
                    let mut o = std::mem::zeroed::<kimodo_generate_options>();
                    kimodo_generate_options_init(&mut o, 2 + i.u8() as u32 % 14);
                    (o.size, o.version) = i.layout(std::mem::size_of::<kimodo_generate_options>());
                    o.steps = i.u8() as u32 % 4;
                    o.seed = i.u64();
                    o.cfg_rows = i.u8() as u32 % 4;
                    let cons = constraints(&mut i);
                    o.constraints_json = cons.as_ref().map_or(null(), |c| c.as_ptr());
                    o.postprocess = postprocess(&mut i);
                    o.heading = f32::from_bits(i.u32());
                    o.has_cfg_text = (i.u8() % 2) as i32;
                    o.cfg_text = f32::from_bits(i.u32());
                    let noise: Vec<f32> = vec![0.5; 16 * fdim];
                    if i.u8() % 3 == 0 {
                        o.noise = noise.as_ptr();
                        o.noise_len = i.len(o.frames as usize * fdim);
                    }
                    if i.u8() % 2 == 0 {
                        o.progress = Some(progress);
                        o.progress_user = i.u8() as usize as *mut c_void;
                    }
                    let mut out = null_mut();
                    let s = kimodo_generate_embedding(
                        maybe(&mut i, w.kimodo),
                        emb.as_ptr(),
                        i.len(dim),
                        maybe(&mut i, &mut o),
                        &mut out,
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    if s == KINEMA_OK {
                        let mut v = std::mem::zeroed::<kimodo_motion_view>();
                        (v.size, v.version) = i.layout(std::mem::size_of::<kimodo_motion_view>());
                        let g = kimodo_motion_get(out, maybe(&mut i, &mut v), e.ptr(), e.cap());
                        e.check(g);
                        if g == KINEMA_OK {
                            // Every borrowed array is readable at its full length.
                            let (t, j) = (v.frames, v.joints);
                            let sum: f32 = std::slice::from_raw_parts(v.posed_joints, t * j * 3)
                                .iter()
                                .sum::<f32>()
                                + std::slice::from_raw_parts(v.features, t * v.feature_dim)
                                    .iter()
                                    .sum::<f32>()
                                + std::slice::from_raw_parts(v.foot_contacts, t * 4)
                                    .iter()
                                    .map(|&c| c as f32)
                                    .sum::<f32>();
                            std::hint::black_box(sum);
                        }
                    }
                    kimodo_motion_free(out);
                }
                3..=5 => {
                    let batch = [1, 2, i.u64() as usize][i.u8() as usize % 3];
                    let mut c = null_mut();
                    let s = mb_command_create(
                        maybe(&mut i, w.mb),
                        batch,
                        maybe(&mut i, &mut c),
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    let b = if s == KINEMA_OK { batch } else { 1 };
                    let floats = vec![0.25f32; b * 8 * 303];
                    let flags = i
                        .bytes(b * 11)
                        .iter()
                        .map(|x| if x % 5 == 0 { *x } else { x % 2 })
                        .chain(std::iter::repeat(1))
                        .take(b * 11)
                        .collect::<Vec<u8>>();
                    let ints: Vec<i64> = (0..b)
                        .map(|_| [18, 6, 16, i.u64() as i64][i.u8() as usize % 4])
                        .collect();
                    for _ in 0..i.u8() % 6 {
                        let e2 = &mut e;
                        let s = match i.u8() % 6 {
                            0 => {
                                let (name, n) = [
                                    ("global_root_values", 40),
                                    ("local_root_values", 32),
                                    ("local_poses", 8 * 303),
                                    ("bogus", 1),
                                ][i.u8() as usize % 4];
                                let name = CString::new(name).unwrap();
                                mb_command_set_floats(
                                    c,
                                    name.as_ptr(),
                                    floats.as_ptr(),
                                    i.len(b * n),
                                    e2.ptr(),
                                    e2.cap(),
                                )
                            }
                            1 => {
                                let (name, n) = [
                                    ("has_global_root_values", 8),
                                    ("has_local_poses", 8),
                                    ("allowed_pred_num_tokens", 11),
                                    ("", 0),
                                ][i.u8() as usize % 4];
                                let name = CString::new(name).unwrap();
                                mb_command_set_flags(
                                    c,
                                    name.as_ptr(),
                                    flags.as_ptr(),
                                    i.len(b * n),
                                    e2.ptr(),
                                    e2.cap(),
                                )
                            }
                            2 => mb_command_set_num_tokens(
                                c,
                                ints.as_ptr(),
                                i.len(b),
                                e2.ptr(),
                                e2.cap(),
                            ),
                            3 => mb_command_set_sampling_argmax(
                                maybe(&mut i, c),
                                [0, 1, i.u32() as i32][i.u8() as usize % 3],
                                e2.ptr(),
                                e2.cap(),
                            ),
                            4 => {
                                let mut a = -1;
                                let s = mb_command_get_sampling_argmax(
                                    c,
                                    maybe(&mut i, &mut a),
                                    e2.ptr(),
                                    e2.cap(),
                                );
                                assert!(s != KINEMA_OK || a == 0 || a == 1);
                                s
                            }
                            _ => mb_command_set_seed(maybe(&mut i, c), i.u64(), e2.ptr(), e2.cap()),
                        };
                        e2.check(s);
                    }
                    let mut po = std::mem::zeroed::<mb_plan_options>();
                    (po.size, po.version) = i.layout(std::mem::size_of::<mb_plan_options>());
                    po.progress = Some(progress);
                    po.progress_user = (i.u8() % 3) as usize as *mut c_void;
                    let opts = if i.u8() % 2 == 0 {
                        null()
                    } else {
                        &po as *const _
                    };
                    let mut plan = null_mut();
                    let s = mb_plan(maybe(&mut i, w.mb), c, opts, &mut plan, e.ptr(), e.cap());
                    e.check(s);
                    if s == KINEMA_OK {
                        let mut v = std::mem::zeroed::<mb_plan_view>();
                        (v.size, v.version) = i.layout(std::mem::size_of::<mb_plan_view>());
                        let g = mb_plan_result_get(plan, &mut v, e.ptr(), e.cap());
                        e.check(g);
                        if g == KINEMA_OK {
                            let n = std::slice::from_raw_parts(v.num_tokens, v.batch);
                            assert!(n.iter().all(|&t| (6..=16).contains(&t)));
                        }
                    }
                    mb_plan_result_free(plan);
                    mb_command_free(c);
                }
                6 => {
                    let mut buf = vec![0u8; i.u8() as usize % 32];
                    let p: *mut c_char = if i.u8() % 4 == 0 {
                        null_mut()
                    } else {
                        buf.as_mut_ptr().cast()
                    };
                    let cap = if p.is_null() {
                        i.u64() as usize
                    } else {
                        buf.len()
                    };
                    kinema_engine_last_error(maybe(&mut i, w.engine), p, cap);
                }
                7 => {
                    // Text: prompts of fuzzed bytes (invalid UTF-8 included), hostile counts
                    // and output lengths, fuzzed options; then a generation from a prompt.
                    let dim = kinema_text_encoder_dim(w.text);
                    let texts: Vec<CString> = (0..3)
                        .map(|_| {
                            let n = i.u8() as usize % 24;
                            CString::new(
                                i.bytes(n)
                                    .into_iter()
                                    .map(|b| if b == 0 { b' ' } else { b })
                                    .collect::<Vec<_>>(),
                            )
                            .unwrap()
                        })
                        .collect();
                    let ptrs: Vec<*const c_char> = texts.iter().map(|t| t.as_ptr()).collect();
                    // At most the prompts there are (a correct call reads `count` pointers);
                    // the output holds 3 rows, and only `count * dim` is a length accepted.
                    let right = 1 + i.u8() as usize % 3;
                    let count = i.len(right).min(ptrs.len());
                    let mut out = vec![0f32; 3 * dim];
                    let out_len = i.len(count * dim);
                    let encoder = maybe(&mut i, w.text);
                    let prompts = if i.u8() % 8 == 0 {
                        null()
                    } else {
                        ptrs.as_ptr()
                    };
                    let s = kinema_text_encode(
                        encoder,
                        prompts,
                        count,
                        maybe(&mut i, out.as_mut_ptr()),
                        out_len,
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    if s == KINEMA_OK {
                        assert!(out.iter().all(|x| x.is_finite()));
                    }
                    // Options of fuzzed layout and enums; the encoder load fails early on a
                    // bad layout or enum, else loads the file (no Vulkan: a CPU engine).
                    let mut to = std::mem::zeroed::<kinema_text_options>();
                    kinema_text_options_init(&mut to);
                    (to.size, to.version) = i.layout(std::mem::size_of::<kinema_text_options>());
                    to.chat_template = i.u8() as i32 % 5 - 1;
                    to.long_text = i.u8() as i32 % 4 - 1;
                    let name = if i.u8() % 2 == 0 {
                        texts[0].as_ptr()
                    } else {
                        null()
                    };
                    let mut enc = null_mut();
                    let s = kinema_text_encoder_load(
                        maybe(&mut i, w.engine),
                        name,
                        &to,
                        &mut enc,
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    kinema_text_encoder_free(enc);
                    let mut o = std::mem::zeroed::<kimodo_generate_options>();
                    kimodo_generate_options_init(&mut o, 2 + i.u8() as u32 % 6);
                    (o.size, o.version) = i.layout(std::mem::size_of::<kimodo_generate_options>());
                    o.steps = i.u8() as u32 % 3;
                    let cons = constraints(&mut i);
                    o.constraints_json = cons.as_ref().map_or(null(), |c| c.as_ptr());
                    o.postprocess = postprocess(&mut i);
                    let model = [w.kimodo_text, w.kimodo][i.u8() as usize % 2];
                    let mut m = null_mut();
                    let s = kimodo_generate(
                        maybe(&mut i, model),
                        maybe(&mut i, ptrs[0] as *mut c_char),
                        maybe(&mut i, &mut o),
                        maybe(&mut i, &mut m),
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    kimodo_motion_free(m);
                    let mut k = null_mut();
                    let s = kimodo_model_load_with_text(
                        maybe(&mut i, w.engine),
                        name,
                        maybe(&mut i, w.text),
                        &mut k,
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    kimodo_model_free(k);
                }
                8 => {
                    // The agent: hostile options, commands, lengths and views.
                    let mut ao = std::mem::zeroed::<mb_agent_options>();
                    mb_agent_options_init(&mut ao);
                    (ao.size, ao.version) = i.layout(std::mem::size_of::<mb_agent_options>());
                    ao.argmax = (i.u8() % 2) as i32;
                    let bad = CString::new("no-such-clips.npz").unwrap();
                    let clips = [w.clips.as_ptr(), bad.as_ptr(), null()][i.u8() as usize % 3];
                    let opts = if i.u8() % 3 == 0 {
                        null()
                    } else {
                        &ao as *const _
                    };
                    let mut agent = null_mut();
                    let s = mb_agent_create(
                        maybe(&mut i, w.mb),
                        clips,
                        opts,
                        maybe(&mut i, &mut agent),
                        e.ptr(),
                        e.cap(),
                    );
                    e.check(s);
                    for _ in 0..i.u8() % 4 {
                        let mut c = std::mem::zeroed::<mb_agent_command>();
                        mb_agent_command_init(&mut c);
                        (c.size, c.version) = i.layout(std::mem::size_of::<mb_agent_command>());
                        let junk = CString::new(
                            i.bytes(6)
                                .into_iter()
                                .filter(|&b| b != 0)
                                .collect::<Vec<_>>(),
                        )
                        .unwrap();
                        let styles = [c"walk".as_ptr(), c"idle".as_ptr(), c"walk_zombie".as_ptr()];
                        c.style = match i.u8() % 5 {
                            0 => junk.as_ptr(),
                            1 => null(),
                            k => styles[k as usize - 2],
                        };
                        let mut f = || f64::from_bits(i.u64()) % 8.0;
                        c.movement = [f(), f()];
                        c.facing = [f(), f()];
                        c.speed = f();
                        c.waypoint = [f(), f()];
                        c.waypoint_heading = f();
                        c.has_speed = (i.u8() % 2) as i32;
                        c.has_waypoint = (i.u8() % 2) as i32;
                        c.seed = [0, i.u64()][i.u8() as usize % 2];
                        let cp = if i.u8() % 6 == 0 {
                            null()
                        } else {
                            &c as *const _
                        };
                        let s = mb_agent_push_command(maybe(&mut i, agent), cp, e.ptr(), e.cap());
                        e.check(s);
                        let frames = i.u8() as usize % 40;
                        let mut q = vec![0f32; frames.max(16) * 36];
                        let mut v = std::mem::zeroed::<mb_agent_frames>();
                        (v.size, v.version) = i.layout(std::mem::size_of::<mb_agent_frames>());
                        let vp = maybe(&mut i, &mut v as *mut _);
                        let s = if i.u8() % 2 == 0 {
                            mb_agent_step(
                                maybe(&mut i, agent),
                                frames,
                                maybe(&mut i, q.as_mut_ptr()),
                                i.len(frames * 36),
                                vp,
                                Some(progress),
                                (i.u8() % 3) as usize as *mut c_void,
                                e.ptr(),
                                e.cap(),
                            )
                        } else {
                            let len = i.len(16 * 36);
                            mb_agent_poll(
                                maybe(&mut i, agent),
                                q.as_mut_ptr(),
                                len,
                                vp,
                                e.ptr(),
                                e.cap(),
                            )
                        };
                        e.check(s);
                        if s == KINEMA_OK {
                            assert!(v.frames <= 40 && v.plans <= 3);
                        }
                    }
                    mb_agent_free(agent);
                }
                _ => {
                    // Every function with null everywhere.
                    let (ep, ec) = (e.ptr(), e.cap());
                    e.check(kinema_text_encoder_load(
                        null(),
                        null(),
                        null(),
                        null_mut(),
                        ep,
                        ec,
                    ));
                    e.check(kinema_text_encode(
                        null(),
                        null(),
                        i.u64() as usize,
                        null_mut(),
                        i.u64() as usize,
                        ep,
                        ec,
                    ));
                    e.check(kimodo_generate(null(), null(), null(), null_mut(), ep, ec));
                    e.check(kimodo_model_load_with_text(
                        null(),
                        null(),
                        null(),
                        null_mut(),
                        ep,
                        ec,
                    ));
                    assert_eq!(kinema_text_encoder_dim(null()), 0);
                    assert_eq!(kimodo_model_has_text_encoder(null()), 0);
                    assert_eq!(kinema_text_options_init(null_mut()), KINEMA_ERROR_ARGUMENT);
                    kinema_text_encoder_free(null_mut());
                    e.check(mb_agent_create(null(), null(), null(), null_mut(), ep, ec));
                    e.check(mb_agent_push_command(null_mut(), null(), ep, ec));
                    e.check(mb_agent_step(
                        null_mut(),
                        i.u64() as usize,
                        null_mut(),
                        i.u64() as usize,
                        null_mut(),
                        None,
                        null_mut(),
                        ep,
                        ec,
                    ));
                    e.check(mb_agent_poll(null_mut(), null_mut(), 0, null_mut(), ep, ec));
                    assert_eq!(mb_agent_command_init(null_mut()), KINEMA_ERROR_ARGUMENT);
                    assert_eq!(mb_agent_options_init(null_mut()), KINEMA_ERROR_ARGUMENT);
                    e.check(kinema_engine_create(null(), null_mut(), ep, ec));
                    e.check(kimodo_model_load(
                        null(),
                        null(),
                        null(),
                        null_mut(),
                        ep,
                        ec,
                    ));
                    e.check(kimodo_generate_embedding(
                        null(),
                        null(),
                        i.u64() as usize,
                        null(),
                        null_mut(),
                        ep,
                        ec,
                    ));
                    e.check(kimodo_motion_get(null(), null_mut(), ep, ec));
                    e.check(mb_model_load(null(), null(), null_mut(), ep, ec));
                    e.check(mb_command_create(
                        null(),
                        i.u64() as usize,
                        null_mut(),
                        ep,
                        ec,
                    ));
                    e.check(mb_command_set_floats(
                        null_mut(),
                        null(),
                        null(),
                        i.u64() as usize,
                        ep,
                        ec,
                    ));
                    e.check(mb_command_set_flags(
                        null_mut(),
                        null(),
                        null(),
                        i.u64() as usize,
                        ep,
                        ec,
                    ));
                    e.check(mb_command_set_num_tokens(
                        null_mut(),
                        null(),
                        i.u64() as usize,
                        ep,
                        ec,
                    ));
                    e.check(mb_command_get_sampling_argmax(null(), null_mut(), ep, ec));
                    e.check(mb_plan(null(), null(), null(), null_mut(), ep, ec));
                    e.check(mb_plan_result_get(null(), null_mut(), ep, ec));
                    assert_eq!(kimodo_model_embedding_dim(null()), 0);
                    assert_eq!(
                        kinema_engine_options_init(null_mut()),
                        KINEMA_ERROR_ARGUMENT
                    );
                    kinema_engine_destroy(null_mut());
                    kimodo_model_free(null_mut());
                    kimodo_motion_free(null_mut());
                    mb_model_free(null_mut());
                    mb_command_free(null_mut());
                    mb_plan_result_free(null_mut());
                    mb_agent_free(null_mut());
                }
            }
        }
    }
});
