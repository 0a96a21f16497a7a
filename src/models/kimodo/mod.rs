//! Kimodo (NVIDIA text-to-motion): a two-stage transformer denoiser run for `steps` DDIM steps
//! with separated classifier-free guidance, decoded into skeleton motion. The study of the
//! upstream code this port follows is `../shared/docs/upstream/kimodo.md`; citations are into
//! `nv-tlabs/kimodo` at commit `7330e7e`.

pub mod bench;
pub mod config;
pub mod constraints;
pub mod convert;
pub mod denoiser;
pub mod drift;
pub mod export;
pub mod generate;
pub mod glb;
mod harness;
pub mod import;
mod model;
pub mod motion;
pub mod multiprompt;
pub mod postprocess;
pub mod sampler;
pub mod schedule;
pub mod skeleton;
pub mod synthetic;

pub use config::{KimodoConfig, KimodoModel, MotionStats, SkeletonKind};
pub use harness::Kimodo;
pub use motion::Motion;
pub use skeleton::{Skeleton, Soma77Expansion};
