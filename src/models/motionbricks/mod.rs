//! MotionBricks (NVIDIA GR00T-WholeBodyControl, `motionbricks/`): a root model, a masked-token
//! pose model and a VQ pose decoder that plan G1 robot motion from keyframes. The study of
//! the upstream code this port follows is `../shared/docs/upstream/motionbricks.md`; citations
//! are into `NVlabs/GR00T-WholeBodyControl` at commit `1983e888`.

pub mod agent;
pub mod config;
pub mod convert;
pub mod dims;
pub mod g1;
pub mod harness;
pub mod model;
pub mod plan;
pub mod run;
pub mod sampler;
pub mod synthetic;

pub use harness::MotionBricks;
pub use sampler::Sampling;
