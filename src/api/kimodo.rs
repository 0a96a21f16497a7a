//! [`Kimodo`]: text feature in, skeleton motion out, through the same
//! [`run_model`] as `kinema generate`.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use super::engine::Engine;
use super::text::{TextEncoder, TextOptions};
use super::{ProgressFn, Stage, report};
use crate::backend::Backend;
use crate::device::BackendVisitor;
use crate::formats::write_atomic;
use crate::models::kimodo::constraints::{self, Conditions, Constraint};
use crate::models::kimodo::generate::{Generation, check_embedding_scale, npz_bytes, run_model};
use crate::models::kimodo::multiprompt::{self, MultiOptions, MultiSample};
use crate::models::kimodo::sampler::{Diagnostics, SampleOptions};
use crate::models::kimodo::{KimodoConfig, KimodoModel, Skeleton};
use crate::models::llm2vec::prompt_cache::check_fits;
use crate::{Error, Result};

/// What a generation is conditioned on (`non_exhaustive`: more inputs may join).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TextInput {
    /// One text feature of the model's width ([`Kimodo::embedding_dim`], 4096 for LLM2Vec),
    /// as upstream's LLM2Vec encoder returns it for the prompt.
    Embedding(Vec<f32>),
    /// A prompt, embedded by the text encoder the model was given
    /// ([`Kimodo::with_text_encoder`]) with its options, as [`TextEncoder::encode`] does.
    Prompt(String),
}

/// Where the initial noise `x_T` comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Noise {
    /// Drawn from this seed: SplitMix64 uniforms through Box-Muller
    /// ([`crate::models::kimodo::sampler::gaussian_noise`]), as `kinema generate --seed`.
    Seed(u64),
    /// Given: `[frames, feature_dim]` floats (for parity with a PyTorch run, as `--noise`).
    Values(Vec<f32>),
}

/// One Kimodo generation. Build it with [`GenerateRequest::new`] and struct update:
/// `GenerateRequest { steps: 50, ..GenerateRequest::new(embedding, 120) }`.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    /// The text condition.
    pub text: TextInput,
    /// Frames at the model's frame rate (30 fps), 2 to the model's maximum (4948).
    pub frames: usize,
    /// DDIM steps, 1 to the model's base steps (upstream's default 100).
    pub steps: usize,
    /// The initial noise (default: seed 0).
    pub noise: Noise,
    /// Text guidance weight; `None` takes the model's (2).
    pub cfg_text: Option<f32>,
    /// Constraint guidance weight; `None` takes the model's (2).
    pub cfg_constraint: Option<f32>,
    /// Guidance rows: 2 (the exact shortcut without constraints) or 3 (upstream's
    /// `[text, constraint, uncond]`); `None` (the default) takes 2, or 3 with `constraints`,
    /// as `kinema generate` does. 2 with constraints is refused.
    pub cfg_rows: Option<usize>,
    /// Upstream's kinematic constraints (`constraints.json`, [`Constraints`]), applied as
    /// `kinema generate --constraints` applies them: the constraint guidance row (3 rows) and
    /// the post-processing's constraint clean-up. With `segments` they span the whole
    /// stitched motion, as with `--timeline`. `None` (the default): unconstrained.
    pub constraints: Option<Constraints>,
    /// First heading angle in radians (default 0).
    pub heading: f32,
    /// Keep the first step's stage outputs and guided prediction ([`Motion::diagnostics`]).
    pub diagnostics: bool,
    /// More segments of the SAME motion after `text` and `frames` (upstream's multi-prompt,
    /// [`crate::models::kimodo::multiprompt`]): each continues the motion through upstream's
    /// transition. Empty (the default): one segment. With segments the noise must be
    /// [`Noise::Seed`] (each segment draws the next values of the seed's stream) and
    /// `diagnostics` false; `cfg_rows` applies to the first segment, the others run 3 rows.
    pub segments: Vec<Segment>,
    /// Frames pinned and blended at each transition (upstream's `num_transition_frames`,
    /// default 5).
    pub transition_frames: usize,
    /// Post-process the motion (upstream's foot-skate cleanup by trajectory correction and
    /// IK, [`crate::models::kimodo::postprocess`]) where upstream's CLI does: every model but
    /// G1's. Default `true`, as `kinema generate` (`--no-postprocess` clears it).
    pub postprocess: bool,
}

/// One more segment of a multi-prompt motion ([`GenerateRequest::segments`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Its text condition.
    pub text: TextInput,
    /// Its frames in the motion (at least 1).
    pub frames: usize,
}

/// Upstream's kinematic constraints for [`GenerateRequest::constraints`]: the entries of a
/// `constraints.json` (a JSON array of `{type, frame_indices, ...}` objects: `root2d`,
/// `fullbody`, `left-hand`, `right-hand`, `left-foot`, `right-foot`, `end-effector`; see
/// [`crate::models::kimodo::constraints`]), each checked for structure when parsed. Frames and
/// joint counts are checked against the model and the request when it runs, with the errors
/// of `kinema generate --constraints`.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraints {
    list: Vec<Constraint>,
    source: Option<PathBuf>,
}

impl Constraints {
    /// Parses upstream's constraint JSON text (what `kinema generate --constraints FILE`
    /// reads). An error names the entry and what is wrong with it.
    pub fn from_json(json: &str) -> Result<Constraints> {
        Constraints::from_json_bytes(json.as_bytes())
    }

    /// [`Constraints::from_json`] from bytes (UTF-8 JSON).
    pub fn from_json_bytes(json: &[u8]) -> Result<Constraints> {
        Ok(Constraints {
            list: constraints::parse(json)?,
            source: None,
        })
    }

    /// Reads and parses a `constraints.json`; errors about its content start with the path,
    /// as the command line's do.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Constraints> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let c = Constraints {
            list: constraints::parse(&bytes).map_err(|e| with_source(e, Some(path)))?,
            source: Some(path.to_path_buf()),
        };
        Ok(c)
    }

    /// Already parsed entries.
    pub fn new(list: Vec<Constraint>) -> Constraints {
        Constraints { list, source: None }
    }

    /// The entries in file order.
    pub fn as_slice(&self) -> &[Constraint] {
        &self.list
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none (an empty list still runs the constraint row, as an empty file
    /// does on the command line).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The file they were read from ([`Constraints::from_path`]).
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// The observed motion and mask for `frames` frames on `skel` (normalised with `model`'s
    /// statistics), as `kinema generate` builds them.
    fn conditions(
        &self,
        model: &KimodoModel,
        skel: &Skeleton,
        frames: usize,
    ) -> Result<Conditions> {
        constraints::build_conditions(&self.list, skel, &model.stats, frames)
            .map_err(|e| with_source(e, self.source()))
    }

    /// The unnormalised conditions over a stitched timeline of `frames` frames (the
    /// multi-prompt route), as `kinema generate --timeline` builds them.
    fn raw_conditions(&self, skel: &Skeleton, frames: usize) -> Result<Conditions> {
        constraints::build_raw(&self.list, skel, frames).map_err(|e| with_source(e, self.source()))
    }
}

impl From<Vec<Constraint>> for Constraints {
    fn from(list: Vec<Constraint>) -> Constraints {
        Constraints::new(list)
    }
}

impl std::str::FromStr for Constraints {
    type Err = Error;
    fn from_str(s: &str) -> Result<Constraints> {
        Constraints::from_json(s)
    }
}

/// A constraint error prefixed with the file it came from (as [`constraints::load`] does).
fn with_source(e: Error, source: Option<&Path>) -> Error {
    match (e, source) {
        (Error::InvalidArgument(m), Some(p)) => {
            Error::InvalidArgument(format!("{}: {m}", p.display()))
        }
        (e, _) => e,
    }
}

impl GenerateRequest {
    /// `frames` frames from one text feature, with `kinema generate`'s defaults: 100 steps,
    /// seed 0, the model's guidance weights, 2 rows, no constraints, heading 0, no diagnostics,
    /// post-processing on (where upstream's CLI has it on).
    pub fn new(embedding: impl Into<Vec<f32>>, frames: usize) -> GenerateRequest {
        GenerateRequest {
            text: TextInput::Embedding(embedding.into()),
            frames,
            steps: 100,
            noise: Noise::Seed(0),
            cfg_text: None,
            cfg_constraint: None,
            cfg_rows: None,
            constraints: None,
            heading: 0.0,
            diagnostics: false,
            segments: Vec::new(),
            transition_frames: crate::models::kimodo::multiprompt::TRANSITION_FRAMES,
            postprocess: true,
        }
    }

    /// [`GenerateRequest::new`] from a prompt ([`TextInput::Prompt`]): the model must have a
    /// text encoder ([`Kimodo::with_text_encoder`]).
    pub fn from_prompt(prompt: impl Into<String>, frames: usize) -> GenerateRequest {
        GenerateRequest {
            text: TextInput::Prompt(prompt.into()),
            ..GenerateRequest::new(Vec::new(), frames)
        }
    }
}

/// A generated motion: upstream's arrays (the npz keys of `kinema generate`, batch dropped)
/// and the normalised features. SOMA30 models return SOMA77 motion, as upstream does.
#[derive(Clone, Debug)]
pub struct Motion {
    motion: crate::models::kimodo::Motion,
    features: Vec<f32>,
    feature_dim: usize,
    fps: f32,
    cfg_rows: usize,
    diagnostics: Option<Diagnostics>,
    conditions: Option<Conditions>,
    postprocessed: bool,
}

impl Motion {
    /// Whether post-processing ran ([`GenerateRequest::postprocess`] and a model upstream's
    /// CLI post-processes).
    pub fn postprocessed(&self) -> bool {
        self.postprocessed
    }

    /// Frames T.
    pub fn frames(&self) -> usize {
        self.motion.frames
    }

    /// Joints J of the output skeleton.
    pub fn joints(&self) -> usize {
        self.motion.num_joints()
    }

    /// Frames per second.
    pub fn fps(&self) -> f32 {
        self.fps
    }

    /// The output skeleton's name (`soma77`, `g1`, `smplx22`).
    pub fn skeleton(&self) -> &'static str {
        self.motion.skeleton.name()
    }

    /// `[T, J, 3, 3]` local joint rotations.
    pub fn local_rot_mats(&self) -> &[f32] {
        &self.motion.local_rot_mats
    }

    /// `[T, J, 3, 3]` global joint rotations.
    pub fn global_rot_mats(&self) -> &[f32] {
        &self.motion.global_rot_mats
    }

    /// `[T, J, 3]` joint positions in metres, Y up.
    pub fn posed_joints(&self) -> &[f32] {
        &self.motion.posed_joints
    }

    /// `[T, 3]` root positions.
    pub fn root_positions(&self) -> &[f32] {
        &self.motion.root_positions
    }

    /// `[T, 3]` smoothed root positions.
    pub fn smooth_root_pos(&self) -> &[f32] {
        &self.motion.smooth_root_pos
    }

    /// `[T, 4]` foot contacts: left heel, left toe, right heel, right toe.
    pub fn foot_contacts(&self) -> &[bool] {
        &self.motion.foot_contacts
    }

    /// `[T, 2]` the raw predicted heading (cos, sin).
    pub fn global_root_heading(&self) -> &[f32] {
        &self.motion.global_root_heading
    }

    /// `[T, feature_dim]` the sampler's normalised features.
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// The model's motion feature width.
    pub fn feature_dim(&self) -> usize {
        self.feature_dim
    }

    /// The first step's intermediate values when the request asked for them.
    pub fn diagnostics(&self) -> Option<&Diagnostics> {
        self.diagnostics.as_ref()
    }

    /// The constraints' observed motion and mask the constraint row saw (normalised,
    /// `[T, feature_dim]`), for a single-segment request with constraints.
    pub fn conditions(&self) -> Option<&Conditions> {
        self.conditions.as_ref()
    }

    /// The decoded motion as the internals hold it (for drift studies and the GLB writer).
    pub fn inner(&self) -> &crate::models::kimodo::Motion {
        &self.motion
    }

    /// Takes the motion apart without copying its arrays (for hosts that hand them on, such as
    /// the Python binding's numpy arrays).
    pub fn into_parts(self) -> MotionParts {
        MotionParts {
            motion: self.motion,
            features: self.features,
            diagnostics: self.diagnostics,
            conditions: self.conditions,
        }
    }

    /// The npz `kinema generate` writes for the same request, byte for byte: upstream's keys,
    /// `features`, and the diagnostics when asked for (with constraints, also
    /// `constraint_features` and `constraint_mask`).
    pub fn npz_bytes(&self) -> Result<Vec<u8>> {
        npz_bytes(
            &self.motion,
            &self.features,
            self.diagnostics.as_ref(),
            self.conditions.as_ref(),
            self.feature_dim,
            self.cfg_rows,
        )
    }

    /// Writes [`Motion::npz_bytes`] to `path` atomically (never a partial file).
    pub fn write_npz(&self, path: impl AsRef<Path>) -> Result<()> {
        let bytes = self.npz_bytes()?;
        write_atomic(path, |w| w.write_all(&bytes))
    }
}

/// A [`Motion`]'s arrays, owned ([`Motion::into_parts`]).
#[derive(Clone, Debug)]
pub struct MotionParts {
    /// Upstream's arrays ([`Motion::local_rot_mats`] and the others).
    pub motion: crate::models::kimodo::Motion,
    /// `[T, feature_dim]` ([`Motion::features`]).
    pub features: Vec<f32>,
    /// [`Motion::diagnostics`].
    pub diagnostics: Option<Diagnostics>,
    /// [`Motion::conditions`].
    pub conditions: Option<Conditions>,
}

/// A loaded Kimodo model on an [`Engine`]. `Send + Sync`: requests may run from several
/// threads at once.
pub struct Kimodo {
    engine: Engine,
    model: KimodoModel,
    path: PathBuf,
    text: Option<TextEncoder>,
}

impl Kimodo {
    /// Opens a model written by `kinema convert kimodo` (memory-mapped and checked). In fast
    /// precision, f32 weight matrices are narrowed to the engine's 16-bit type, as
    /// `kinema generate` does.
    pub fn load(engine: &Engine, path: impl AsRef<Path>) -> Result<Kimodo> {
        let path = path.as_ref();
        let model = KimodoModel::load(path)?.for_backend(&engine.info())?;
        Ok(Kimodo {
            engine: engine.clone(),
            model,
            path: path.to_path_buf(),
            text: None,
        })
    }

    /// [`Kimodo::load`] and [`TextEncoder::load_with`] on one engine, joined by
    /// [`Kimodo::with_text_encoder`] (which checks that they fit).
    pub fn load_with_text(
        engine: &Engine,
        motion: impl AsRef<Path>,
        text: impl AsRef<Path>,
        options: TextOptions,
    ) -> Result<Kimodo> {
        let kimodo = Kimodo::load(engine, motion)?;
        let text = TextEncoder::load_with(engine, text, options)?;
        kimodo.with_text_encoder(text)
    }

    /// Gives the model a text encoder for [`TextInput::Prompt`] requests (it may run on
    /// another engine). Refused unless it fits: its embeddings must have the width the
    /// motion model takes, and it must be an LLM2Vec encoder (bidirectional attention), not
    /// a causal language model. The motion file records no more about the encoder it was
    /// trained with, so these are the checks there are.
    pub fn with_text_encoder(mut self, text: TextEncoder) -> Result<Kimodo> {
        check_fits(
            text.model(),
            text.path(),
            "TextEncoder",
            self.model.config.llm_dim,
        )?;
        self.text = Some(text);
        Ok(self)
    }

    /// The text encoder given with [`Kimodo::with_text_encoder`].
    pub fn text_encoder(&self) -> Option<&TextEncoder> {
        self.text.as_ref()
    }

    /// The width of the text feature the model takes (4096 for LLM2Vec).
    pub fn embedding_dim(&self) -> usize {
        self.model.config.llm_dim
    }

    /// The most frames one generation may have.
    pub fn max_frames(&self) -> usize {
        self.model.config.max_frames()
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &KimodoConfig {
        &self.model.config
    }

    /// The model as the internals hold it (weights, statistics).
    pub fn model(&self) -> &KimodoModel {
        &self.model
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The engine it runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Generates one motion.
    pub fn generate(&self, req: &GenerateRequest) -> Result<Motion> {
        self.generate_with_progress(req, &mut |_, _, _| super::Progress::Continue)
    }

    /// [`Kimodo::generate`], calling `progress(Stage::Sample, step, steps)` after every DDIM
    /// step and `progress(Stage::Decode, 1, 1)` after the decode; a
    /// [`super::Progress::Cancel`] stops before the next step and returns
    /// [`Error::Cancelled`].
    pub fn generate_with_progress(
        &self,
        req: &GenerateRequest,
        progress: &mut ProgressFn<'_>,
    ) -> Result<Motion> {
        let c = &self.model.config;
        let embedding = self.text_feature(&req.text, "GenerateRequest.text", progress)?;
        let embedding: &[f32] = &embedding;
        if embedding.len() != c.llm_dim {
            return Err(Error::Shape(format!(
                "GenerateRequest.text: the embedding has {} values; this model takes text \
                 features of {} (an LLM2Vec embedding of the prompt)",
                embedding.len(),
                c.llm_dim
            )));
        }
        for (name, w) in [
            ("cfg_text", req.cfg_text),
            ("cfg_constraint", req.cfg_constraint),
        ] {
            if let Some(w) = w
                && !w.is_finite()
            {
                return Err(Error::InvalidArgument(format!(
                    "GenerateRequest.{name} = {w} is not a finite guidance weight"
                )));
            }
        }
        if req.steps == 0 {
            return Err(Error::InvalidArgument(
                "GenerateRequest.steps = 0: the sampler needs at least one DDIM step".into(),
            ));
        }
        let cfg_rows = cfg_rows(req)?;
        if !req.segments.is_empty() {
            return self.generate_segments(req, embedding, cfg_rows, progress);
        }
        if !(2..=c.max_frames()).contains(&req.frames) {
            return Err(Error::InvalidArgument(format!(
                "GenerateRequest.frames = {}: expected 2 to {} (the positional-encoding table \
                 holds 5000 tokens, {} of them the prefix; the root bridge needs two frames)",
                req.frames,
                c.max_frames(),
                c.prefix_len()
            )));
        }
        check_embedding_scale(&self.model, embedding, "GenerateRequest.text")?;
        let mut opts = SampleOptions::new(&self.model, req.frames);
        opts.steps = req.steps;
        opts.cfg_rows = cfg_rows;
        opts.heading = req.heading;
        opts.diagnostics = req.diagnostics;
        if let Some(w) = req.cfg_text {
            opts.cfg_text = w;
        }
        if let Some(w) = req.cfg_constraint {
            opts.cfg_constraint = w;
        }
        match &req.noise {
            Noise::Seed(s) => opts.seed = *s,
            Noise::Values(v) => opts.noise = Some(v.clone()),
        }
        // The constraint row and the post-processing's list, as `kinema generate
        // --constraints` builds them.
        let list = match &req.constraints {
            Some(cs) => {
                let skel = Skeleton::load(c.skeleton)?;
                opts.constraints = Some(cs.conditions(&self.model, &skel, req.frames)?);
                cs.as_slice()
            }
            None => &[],
        };
        let g = self.engine.backend().visit(Run {
            model: &self.model,
            embedding,
            opts: &opts,
            postprocess: req.postprocess.then_some(list),
            progress,
        })?;
        report(progress, Stage::Decode, 1, 1)?;
        Ok(Motion {
            motion: g.motion,
            features: g.sample.features,
            feature_dim: c.motion_dim,
            fps: c.fps,
            cfg_rows: opts.cfg_rows,
            diagnostics: g.sample.diagnostics,
            conditions: opts.constraints,
            postprocessed: g.postprocessed,
        })
    }
}

impl Kimodo {
    /// The text feature of `text`: the embedding as given, or the prompt embedded by this
    /// model's text encoder (reported as [`Stage::Encode`]).
    fn text_feature<'a>(
        &self,
        text: &'a TextInput,
        label: &str,
        progress: &mut ProgressFn<'_>,
    ) -> Result<std::borrow::Cow<'a, [f32]>> {
        match text {
            TextInput::Embedding(e) => Ok(std::borrow::Cow::Borrowed(e)),
            TextInput::Prompt(p) => {
                let Some(encoder) = &self.text else {
                    return Err(Error::InvalidArgument(format!(
                        "{label} is a prompt, but this Kimodo has no text encoder: give it one \
                         with Kimodo::with_text_encoder (or Kimodo::load_with_text), or pass an \
                         embedding"
                    )));
                };
                let encoded = encoder.encode(&[p.as_str()])?;
                report(progress, Stage::Encode, 1, 1)?;
                Ok(std::borrow::Cow::Owned(encoded.as_slice().to_vec()))
            }
        }
    }

    /// A request with [`GenerateRequest::segments`]: the segments stitched into one motion.
    fn generate_segments(
        &self,
        req: &GenerateRequest,
        first: &[f32],
        cfg_rows: usize,
        progress: &mut ProgressFn<'_>,
    ) -> Result<Motion> {
        let c = &self.model.config;
        let Noise::Seed(seed) = req.noise else {
            return Err(Error::InvalidArgument(
                "GenerateRequest.noise: Noise::Values gives one sampling loop's x_T; a request \
                 with segments draws each segment's noise from Noise::Seed"
                    .into(),
            ));
        };
        if req.diagnostics {
            return Err(Error::InvalidArgument(
                "GenerateRequest.diagnostics: a request with segments runs one sampling loop \
                 per segment; diagnostics hold one"
                    .into(),
            ));
        }
        check_embedding_scale(&self.model, first, "GenerateRequest.text")?;
        let mut segs = vec![multiprompt::Segment {
            embedding: first.to_vec(),
            frames: req.frames,
        }];
        for (i, s) in req.segments.iter().enumerate() {
            let label = format!("GenerateRequest.segments[{i}].text");
            let e = self.text_feature(&s.text, &label, progress)?;
            if e.len() != c.llm_dim {
                return Err(Error::Shape(format!(
                    "{label}: the embedding has {} values; this model takes {}",
                    e.len(),
                    c.llm_dim
                )));
            }
            check_embedding_scale(&self.model, &e, &label)?;
            segs.push(multiprompt::Segment {
                embedding: e.into_owned(),
                frames: s.frames,
            });
        }
        let skel = Skeleton::load(c.skeleton)?;
        // Constraints span the whole stitched timeline, as with `kinema generate --timeline`.
        let total: usize = segs.iter().map(|s| s.frames).sum();
        let mut opts = MultiOptions::new(&self.model);
        if let Some(cs) = &req.constraints {
            cs.conditions(&self.model, &skel, total)?;
            opts.constraints = Some(cs.raw_conditions(&skel, total)?);
        }
        opts.steps = req.steps;
        opts.cfg_rows = cfg_rows;
        opts.heading = req.heading;
        opts.seed = seed;
        opts.transition = req.transition_frames;
        if let Some(w) = req.cfg_text {
            opts.cfg_text = w;
        }
        if let Some(w) = req.cfg_constraint {
            opts.cfg_constraint = w;
        }
        let ms = self.engine.backend().visit(MultiRun {
            model: &self.model,
            segments: &segs,
            opts: &opts,
            progress,
        })?;
        let list = req
            .constraints
            .as_ref()
            .map_or(&[][..], Constraints::as_slice);
        let (motion, postprocessed) = crate::models::kimodo::generate::decode_raw_motion(
            &ms.raw,
            ms.frames,
            &skel,
            req.postprocess.then_some(list),
        )?;
        let mut features = ms.raw;
        crate::models::kimodo::motion::normalize(&self.model.stats, &mut features)?;
        report(progress, Stage::Decode, 1, 1)?;
        Ok(Motion {
            motion,
            features,
            feature_dim: c.motion_dim,
            fps: c.fps,
            cfg_rows: opts.cfg_rows,
            diagnostics: None,
            conditions: None,
            postprocessed,
        })
    }
}

/// [`multiprompt::sample_segments`] on the engine's backend.
struct MultiRun<'a, 'p> {
    model: &'a KimodoModel,
    segments: &'a [multiprompt::Segment],
    opts: &'a MultiOptions,
    progress: &'a mut ProgressFn<'p>,
}

impl BackendVisitor for MultiRun<'_, '_> {
    type Output = Result<MultiSample>;
    fn visit<B: Backend>(self, b: &B) -> Result<MultiSample> {
        let progress = self.progress;
        let mut step = |done, n| match report(progress, Stage::Sample, done, n) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        };
        multiprompt::sample_segments(b, self.model, self.segments, self.opts, &mut step)
    }
}

/// The guidance rows of `req`: as given, or 2 (3 with constraints) as `kinema generate`
/// picks them; 2 with constraints is refused with the command line's reason.
fn cfg_rows(req: &GenerateRequest) -> Result<usize> {
    match (req.cfg_rows, &req.constraints) {
        (None, None) => Ok(2),
        (None, Some(_)) => Ok(3),
        (Some(2), Some(_)) => Err(Error::InvalidArgument(
            "GenerateRequest.cfg_rows = 2 with constraints: the 2-row shortcut is exact only \
             without constraints; constraints need upstream's 3 rows [text, constraint, uncond] \
             (leave cfg_rows None)"
                .into(),
        )),
        (Some(r), _) => Ok(r),
    }
}

impl std::fmt::Debug for Kimodo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kimodo")
            .field("path", &self.path)
            .field("engine", &self.engine)
            .field("text", &self.text)
            .finish()
    }
}

/// [`run_model`] on the engine's backend.
struct Run<'a, 'p> {
    model: &'a KimodoModel,
    embedding: &'a [f32],
    opts: &'a SampleOptions,
    postprocess: Option<&'a [Constraint]>,
    progress: &'a mut ProgressFn<'p>,
}

impl BackendVisitor for Run<'_, '_> {
    type Output = Result<Generation>;
    fn visit<B: Backend>(self, b: &B) -> Result<Generation> {
        let progress = self.progress;
        let mut step = |done, n| match report(progress, Stage::Sample, done, n) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        };
        run_model(
            b,
            self.model,
            self.embedding,
            self.opts,
            self.postprocess,
            &mut step,
        )
    }
}
