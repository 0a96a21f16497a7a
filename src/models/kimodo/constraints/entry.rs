//! One entry of a constraints file as [`super::parse`] returns it.

/// The constraint types upstream knows (`TYPE_TO_CLASS`, `kimodo/constraints.py`).
pub const TYPES: [&str; 7] = [
    "root2d",
    "fullbody",
    "left-hand",
    "right-hand",
    "left-foot",
    "right-foot",
    "end-effector",
];

/// The end-effector names `expand_joint_names` accepts (`kimodo/skeleton/base.py#L135-173`).
pub const END_EFFECTORS: [&str; 5] = ["LeftFoot", "RightFoot", "LeftHand", "RightHand", "Hips"];

/// What one entry constrains.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintKind {
    /// The smooth root's (x, z) and optionally the heading.
    Root2d {
        /// `[K]` (cos, sin) pairs as given.
        heading: Option<Vec<[f32; 2]>>,
    },
    /// Every joint's position, the root and the heading (no rotations: upstream leaves them
    /// out, `kimodo_motionrep.py#L246` and `constraints.py` `update_constraints`).
    FullBody,
    /// The chains of the named end effectors (`END_EFFECTORS`).
    EndEffector { joint_names: Vec<String> },
}

/// One entry of a constraints file, checked for shape and finiteness but not yet against a
/// skeleton.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    /// Position in the file's array.
    pub index: usize,
    /// The `type` string as written.
    pub type_name: String,
    pub kind: ConstraintKind,
    pub frame_indices: Vec<usize>,
    /// `[K]` (x, z); required for `root2d`, optional otherwise.
    pub smooth_root_2d: Option<Vec<[f32; 2]>>,
    /// Joints per frame of `local_joints_rot` (0 for `root2d`).
    pub num_joints: usize,
    /// `[K, J, 3]` axis-angle.
    pub local_joints_rot: Vec<f32>,
    /// `[K, 3]`.
    pub root_positions: Vec<[f32; 3]>,
}

impl Constraint {
    /// `entry N (type)`, the prefix of every error about this entry.
    pub fn label(&self) -> String {
        format!("entry {} ({})", self.index, self.type_name)
    }
}
