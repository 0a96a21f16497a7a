//! Widths of the motion representation (`motionbricks.md` section 4.1): fixed by the G1
//! skeleton (34 joints) and the `GlobalRootGlobalJoints` features, not by the model.

/// Global root `[x, y, z, cos, sin]`.
pub const GLOBAL_ROOT: usize = 5;
/// Local root `[rot_vel, vel_x, vel_z, y]`.
pub const LOCAL_ROOT: usize = 4;
/// The pose feature every model reads: hip height, 99 ric, 204 6-D rotations.
pub const POSE: usize = 304;
/// The external pose format of `predict`: the pose feature without the hip height.
pub const EXTERNAL_POSE: usize = 303;
/// The pose model's root condition per frame (`root_without_hip_height` of the global
/// rep: x, z, cos, sin).
pub const POSE_ROOT_COND: usize = 4;
/// The VQ decoder's external condition per frame (local root XZ velocity).
pub const DECODER_EXTERNAL: usize = 2;
/// The local representation the VQ decoder outputs.
pub const LOCAL_REP: usize = 413;
/// The global representation `predict` returns.
pub const GLOBAL_REP: usize = 414;
/// The dual statistics files.
pub const STATS: usize = 418;
/// MuJoCo qpos of the G1: root xyz, root quat wxyz, 29 hinges.
pub const QPOS: usize = 36;
