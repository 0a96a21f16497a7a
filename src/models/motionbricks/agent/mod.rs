//! The navigation agent (`full_navigation_agent`, `motion_backbone/demo/full_agent.py`;
//! `../shared/docs/upstream/motionbricks.md` sections 1.2-1.4 and 10.10): plays a scripted
//! sequence of commands by replanning every 16 frames from the last frames played.
//!
//! Per plan: canonicalise the context ([`canonical`]), qpos -> joint transforms
//! ([`kinematics`]), the critically damped spring for the start and target root keyframes
//! ([`spring`]), the style clip's target window and the context realignment ([`clips`]), the 8
//! keyframes ([`keyframes`]), one `predict` ([`crate::models::motionbricks::plan`]), features ->
//! qpos, un-canonicalisation and the 4-frame blend ([`canonical`]); the loop and the files are
//! in [`run`], the command script in [`commands`].

pub mod canonical;
pub mod clips;
pub mod commands;
pub mod keyframes;
pub mod kinematics;
pub mod math;
pub mod run;
pub mod spring;
