//! The embedded SPIR-V modules (compiled from `kernels/glsl/` by `tools/shaderc`, committed
//! under `kernels/spirv/`) and the push-constant struct of each. A test reads every module's
//! bindings and push-constant block back from the SPIR-V and compares them with this table.

use bytemuck::{Pod, Zeroable};

/// Bytes of an embedded module, aligned so they can be viewed as SPIR-V words.
#[repr(C, align(4))]
struct Aligned<B: ?Sized>(B);

macro_rules! spirv {
    ($name:literal) => {{
        static MODULE: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/kernels/spirv/",
            $name,
            ".spv"
        )));
        &MODULE.0
    }};
}

/// What the host needs to know about a shader.
pub(crate) struct ShaderInfo {
    /// The module's name: `kernels/spirv/<name>.spv`, compiled from `kernels/glsl/<name>.comp`
    /// or, for a variant, from the source `tools/shaderc`'s variant table names.
    pub name: &'static str,
    spirv: &'static [u8],
    /// Storage buffers at set 0, bindings `0..bindings`.
    pub bindings: u32,
    /// Size of the push-constant struct (the first `bindings` u32 are operand offsets).
    pub push_size: u32,
}

impl ShaderInfo {
    /// The module as SPIR-V words.
    pub fn words(&self) -> &'static [u32] {
        bytemuck::cast_slice(self.spirv)
    }
}

const fn info<P>(name: &'static str, spirv: &'static [u8], bindings: u32) -> ShaderInfo {
    ShaderInfo {
        name,
        spirv,
        bindings,
        push_size: size_of::<P>() as u32,
    }
}

/// The shader table: one line per module, `Variant = "module name", push struct, bindings;`.
/// It makes the [`Shader`] enum, [`Shader::ALL`] and [`Shader::info`] (with the module
/// embedded); a unit test checks each line's bindings and push-constant size against the
/// module's SPIR-V.
macro_rules! shaders {
    ($($(#[$doc:meta])* $shader:ident = $name:literal, $push:ident, $bindings:literal;)*) => {
        /// Every compute shader module.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum Shader {
            $($(#[$doc])* $shader,)*
        }

        impl Shader {
            /// Every shader, in table order.
            pub const ALL: &'static [Shader] = &[$(Shader::$shader,)*];

            pub fn info(self) -> &'static ShaderInfo {
                match self {
                    $(Shader::$shader => {
                        static INFO: ShaderInfo = info::<push::$push>($name, spirv!($name), $bindings);
                        &INFO
                    })*
                }
            }
        }
    };
}

shaders! {
    Activation = "activation", Activation, 2;
    /// `layer_norm` of `x + r` (`layer_norm.comp` with `RESIDUAL`), and its fast-mode variant.
    AddLayerNorm = "add_layer_norm", AddLayerNorm, 5;
    AddLayerNormSg = "add_layer_norm_sg", AddLayerNorm, 5;
    Argmax = "argmax", Argmax, 2;
    Attention = "attention", Attention, 5;
    /// Fast-mode attention on cooperative matrices (`attention_cm.comp`), head dimension 128,
    /// 64 or 32 queries per workgroup, keys 32 at a time.
    AttentionCmD128Q64Kv32 = "attention_cm_d128_q64_kv32", Attention, 5;
    AttentionCmD128Q32Kv32 = "attention_cm_d128_q32_kv32", Attention, 5;
    /// Fast-mode attention on workgroup-scope cooperative matrices (`VK_NV_cooperative_matrix2`).
    AttentionCm2 = "attention_cm2", Attention, 5;
    Axpby = "axpby", Axpby, 3;
    BatchedMatmul = "batched_matmul", BatchedMatmul, 3;
    Binary = "binary", Binary, 3;
    Cfg = "cfg", Cfg, 2;
    Conv1d = "conv1d", Conv1d, 4;
    /// `conv1d` for few output columns on the weight-streaming kernel (`linear_stream.comp`
    /// with `CONV`), and its split-k epilogue.
    Conv1dStream = "conv1d_stream", Conv1dStream, 6;
    Conv1dStreamReduce = "conv1d_stream_reduce", Conv1dStreamReduce, 3;
    /// The cooperative-matrix multiply-add peak (`kinema bench --op coopmat_peak`).
    CoopmatPeak = "coopmat_peak", CoopmatPeak, 1;
    /// The global-memory read bandwidth (`kinema bench --op read_peak`).
    ReadPeak = "read_peak", ReadPeak, 2;
    /// Where the device keeps a B fragment's elements (`coopmat_layout.comp`).
    CoopmatLayout = "coopmat_layout", CoopmatLayout, 1;
    /// x rounded to f16, two elements a word (fast mode's x for `linear_cm2`).
    CastF16 = "cast_f16", CastF16, 2;
    Copy = "copy", Copy, 2;
    Ddim = "ddim", Ddim, 4;
    Embedding = "embedding", Embedding, 4;
    Gumbel = "gumbel", Gumbel, 3;
    LayerNorm = "layer_norm", LayerNorm, 4;
    /// `layer_norm` with subgroup-arithmetic reductions (fast mode).
    LayerNormSg = "layer_norm_sg", LayerNorm, 4;
    Linear = "linear", Linear, 4;
    LinearCoopmat = "linear_coopmat", Linear, 4;
    /// Fast-mode linear with compiled-in tiles (`linear_cm.comp`).
    LinearCm128x128x32_64x32 = "linear_cm_128x128x32_64x32", Linear, 4;
    LinearCm64x64x32_32x32 = "linear_cm_64x64x32_32x32", Linear, 4;
    /// The fast-mode weight-streaming linear (`linear_cm.comp` with `STREAM`: split k,
    /// [`LinearStream`](push::LinearStream)'s contract) on compiled-in tiles.
    LinearCmStream32x128x32_32x32 = "linear_cm_stream_32x128x32_32x32", LinearStream, 6;
    LinearCmStream32x64x64_32x16 = "linear_cm_stream_32x64x64_32x16", LinearStream, 6;
    LinearCmStream32x128x32_32x16 = "linear_cm_stream_32x128x32_32x16", LinearStream, 6;
    /// The same with the weights loaded straight into cooperative matrices (`DIRECT`).
    LinearCmDirect32x128x256_32x16U4 = "linear_cm_direct_32x128x256_32x16_u4", LinearStream, 6;
    LinearCmDirect32x128x256_32x32U4 = "linear_cm_direct_32x128x256_32x32_u4", LinearStream, 6;
    LinearCmDirect32x256x256_32x32U4 = "linear_cm_direct_32x256x256_32x32_u4", LinearStream, 6;
    /// The same with each invocation loading its own B elements (`LANE`; the probed fragment
    /// layout must be the one the shader assumes).
    LinearCmLane32x128x256_32x32U4 = "linear_cm_lane_32x128x256_32x32_u4", LinearStream, 6;
    LinearCmLane32x128x256_32x16U4 = "linear_cm_lane_32x128x256_32x16_u4", LinearStream, 6;
    LinearCmLane32x128x256_32x32U8 = "linear_cm_lane_32x128x256_32x32_u8", LinearStream, 6;
    LinearCmLane32x256x256_32x32U4 = "linear_cm_lane_32x256x256_32x32_u4", LinearStream, 6;
    LinearCmLane64x128x128_64x32U4 = "linear_cm_lane_64x128x128_64x32_u4", LinearStream, 6;
    /// `linear` on workgroup-scope cooperative matrices (`VK_NV_cooperative_matrix2`).
    LinearCm2 = "linear_cm2", Linear, 4;
    /// `linear` for few rows: workgroups of a few output columns split k
    /// (`linear_skinny.comp`).
    LinearSkinny = "linear_skinny", Linear, 4;
    /// `linear` for few rows and large weights: each weight read once per dispatch, split k
    /// (`linear_stream.comp`).
    LinearStream = "linear_stream", LinearStream, 6;
    MaskedAct = "masked_act", MaskedAct, 4;
    /// The split-k epilogue of `linear_stream` (`linear_stream_reduce.comp`).
    LinearStreamReduce = "linear_stream_reduce", LinearStreamReduce, 3;
    MeanPool = "mean_pool", MeanPool, 3;
    PosEnc = "posenc", PosEnc, 2;
    RmsNorm = "rms_norm", RmsNorm, 3;
    RmsNormSg = "rms_norm_sg", RmsNorm, 3;
    RootBridge = "root_bridge", RootBridge, 2;
    Rope = "rope", Rope, 4;
    Scale = "scale", Scale, 2;
    Softmax = "softmax", Softmax, 2;
    SoftmaxSg = "softmax_sg", Softmax, 2;
    Swiglu = "swiglu", Swiglu, 3;
    UpsampleNearest2x = "upsample_nearest2x", Upsample, 2;
}

/// Push-constant structs, field for field the shaders' `push_constant` blocks (std430: u32
/// and f32 scalars, u32 arrays). Each starts with one offset per operand, in binding order,
/// which the dispatch helper fills in.
pub(crate) mod push {
    use super::*;

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Activation {
        pub off: [u32; 2],
        pub n: u32,
        pub act: u32,
        pub slope: f32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Binary {
        pub off: [u32; 3],
        pub n: u32,
        pub b_len: u32,
        /// 0 add, 1 mul.
        pub op: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct MaskedAct {
        pub off: [u32; 4],
        pub n: u32,
        pub act: u32,
        pub slope: f32,
        /// 1: multiply x by m before the activation.
        pub pre_mask: u32,
        /// 1: the residual r is bound.
        pub has_r: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct CoopmatPeak {
        pub off: [u32; 1],
        pub iters: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct ReadPeak {
        pub off: [u32; 2],
        pub words: u32,
        pub row_words: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct CoopmatLayout {
        pub off: [u32; 1],
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct CastF16 {
        pub off: [u32; 2],
        pub n: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Scale {
        pub off: [u32; 2],
        pub n: u32,
        pub s: f32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Axpby {
        pub off: [u32; 3],
        pub n: u32,
        pub a: f32,
        pub b: f32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Ddim {
        pub off: [u32; 4],
        pub n: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Cfg {
        pub off: [u32; 2],
        pub n: u32,
        pub rows: u32,
        pub w_text: f32,
        pub w_constraint: f32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Copy {
        pub off: [u32; 2],
        pub count: u32,
        pub rank: u32,
        pub shape: [u32; 6],
        pub src_stride: [u32; 6],
        pub dst_stride: [u32; 6],
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Linear {
        pub off: [u32; 4],
        pub m: u32,
        pub n: u32,
        pub k: u32,
        pub ldy: u32,
        pub has_bias: u32,
        pub act: u32,
        pub slope: f32,
    }

    /// `linear_stream.comp`: x, w, bias, y, the split-k partial sums, the arrival counters.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct LinearStream {
        pub off: [u32; 6],
        pub m: u32,
        pub n: u32,
        pub k: u32,
        pub ldy: u32,
        /// k per split.
        pub ks: u32,
        /// 1: bias, activation and y; 0: partial sums `[split][m][n]`.
        pub epilogue: u32,
        pub has_bias: u32,
        pub act: u32,
        pub slope: f32,
        /// With `epilogue` 0: 1 = the last workgroup of each column group sums the splits and
        /// writes y (no reduce dispatch).
        pub fold: u32,
    }

    /// `linear_stream_reduce.comp`: the partial sums, bias, y.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct LinearStreamReduce {
        pub off: [u32; 3],
        pub m: u32,
        pub n: u32,
        pub ldy: u32,
        pub splits: u32,
        pub has_bias: u32,
        pub act: u32,
        pub slope: f32,
    }

    /// `conv1d_stream`: [`LinearStream`] (m = batch out_len, n = c_out, k = c_in kernel)
    /// followed by the convolution's geometry.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Conv1dStream {
        pub linear: LinearStream,
        pub batch: u32,
        pub c_in: u32,
        pub len: u32,
        pub kernel: u32,
        pub padding: u32,
        pub dilation: u32,
        pub out_len: u32,
    }

    /// `conv1d_stream_reduce`: [`LinearStreamReduce`] and the output length.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Conv1dStreamReduce {
        pub linear: LinearStreamReduce,
        pub out_len: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Conv1d {
        pub off: [u32; 4],
        pub batch: u32,
        pub c_in: u32,
        pub c_out: u32,
        pub len: u32,
        pub kernel: u32,
        pub padding: u32,
        pub dilation: u32,
        pub out_len: u32,
        pub has_bias: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Upsample {
        pub off: [u32; 2],
        /// Output elements.
        pub n: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct MeanPool {
        pub off: [u32; 3],
        pub batch: u32,
        pub seq: u32,
        pub dim: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Embedding {
        pub off: [u32; 4],
        /// Tokens of this dispatch, and the position of its first.
        pub tokens: u32,
        pub t0: u32,
        pub vocab: u32,
        pub dim: u32,
        /// First table row of this dispatch's binding, and its row count.
        pub row0: u32,
        pub rows: u32,
        /// Whether this dispatch handles ids outside the table.
        pub check: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Argmax {
        pub off: [u32; 2],
        pub rows: u32,
        pub cols: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Gumbel {
        pub off: [u32; 3],
        pub rows: u32,
        pub cols: u32,
        /// `max(temperature, 1e-10)`.
        pub t: f32,
        /// The seed and counter as (low, high) 32-bit halves.
        pub seed: [u32; 2],
        pub counter: [u32; 2],
        pub has_uniforms: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct RootBridge {
        pub off: [u32; 2],
        pub rows: u32,
        pub frames: u32,
        pub fps: f32,
        /// f32 bits: global mean, global scale, local mean, local scale (5, 5, 4, 4).
        pub stats: [u32; 18],
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct PosEnc {
        pub off: [u32; 2],
        pub start: u32,
        pub len: u32,
        pub dim: u32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Attention {
        pub off: [u32; 5],
        pub q_len: u32,
        pub kv_len: u32,
        pub q_heads: u32,
        /// q_heads / kv_heads.
        pub group: u32,
        pub q_stride: u32,
        pub kv_stride: u32,
        pub scale: f32,
        /// 0 none, 1 key padding, 2 causal.
        pub mask_kind: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct BatchedMatmul {
        pub off: [u32; 3],
        pub m: u32,
        pub n: u32,
        pub k: u32,
        pub a_stride: u32,
        pub b_stride: u32,
        pub alpha: f32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct LayerNorm {
        pub off: [u32; 4],
        pub norm: LayerNormTail,
    }

    /// What follows the operand offsets in both LayerNorm shaders' push constants.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct LayerNormTail {
        pub rows: u32,
        pub cols: u32,
        pub eps: f32,
        pub has_gamma: u32,
        pub has_beta: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct AddLayerNorm {
        pub off: [u32; 5],
        pub norm: LayerNormTail,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct RmsNorm {
        pub off: [u32; 3],
        pub rows: u32,
        pub cols: u32,
        pub eps: f32,
        pub has_gamma: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Rope {
        pub off: [u32; 4],
        /// tokens * per_token invocations.
        pub count: u32,
        /// The pairs of a token's rotated heads, then the elements copied after them.
        pub per_token: u32,
        pub half_dim: u32,
        /// 0 rotate-half, 1 interleaved.
        pub interleaved: u32,
        /// Elements between tokens.
        pub row_stride: u32,
        /// heads * head_dim / 2.
        pub row_pairs: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Softmax {
        pub off: [u32; 2],
        pub rows: u32,
        pub cols: u32,
        pub scale: f32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
    pub struct Swiglu {
        pub off: [u32; 3],
        /// rows * cols.
        pub n: u32,
        pub cols: u32,
        /// Elements between the rows of gate and up.
        pub stride: u32,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::vulkan::context::MAX_PUSH_CONSTANTS;

    /// What a module declares, read from its SPIR-V.
    #[derive(Debug, Default)]
    struct Reflected {
        /// (set, binding) of every storage buffer.
        buffers: Vec<(u32, u32)>,
        push_size: u32,
        /// Whether the workgroup size comes from specialization constant 0.
        local_size_from_spec0: bool,
    }

    fn reflect(words: &[u32]) -> Reflected {
        const OP_TYPE_INT: u32 = 21;
        const OP_TYPE_FLOAT: u32 = 22;
        const OP_TYPE_ARRAY: u32 = 28;
        const OP_TYPE_STRUCT: u32 = 30;
        const OP_TYPE_POINTER: u32 = 32;
        const OP_CONSTANT: u32 = 43;
        const OP_SPEC_CONSTANT: u32 = 50;
        const OP_SPEC_CONSTANT_COMPOSITE: u32 = 51;
        const OP_VARIABLE: u32 = 59;
        const OP_DECORATE: u32 = 71;
        const OP_MEMBER_DECORATE: u32 = 72;
        const OP_EXECUTION_MODE_ID: u32 = 331;
        const DEC_SPEC_ID: u32 = 1;
        const DEC_ARRAY_STRIDE: u32 = 6;
        const DEC_BUILTIN: u32 = 11;
        const BUILTIN_WORKGROUP_SIZE: u32 = 25;
        const DEC_BINDING: u32 = 33;
        const DEC_SET: u32 = 34;
        const DEC_OFFSET: u32 = 35;
        const SC_PUSH_CONSTANT: u32 = 9;
        const SC_STORAGE_BUFFER: u32 = 12;
        const MODE_LOCAL_SIZE_ID: u32 = 38;

        assert_eq!(words[0], 0x0723_0203, "SPIR-V magic");
        let mut scalar = HashMap::new();
        let mut arrays = HashMap::new();
        let mut structs: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut pointers = HashMap::new();
        let mut constants = HashMap::new();
        let mut spec_ids = HashMap::new();
        let mut strides = HashMap::new();
        let mut offsets: HashMap<(u32, u32), u32> = HashMap::new();
        let mut bindings = HashMap::new();
        let mut sets = HashMap::new();
        let mut vars = Vec::new();
        let mut local_size_ids = Vec::new();
        let mut composites: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut workgroup_size = None;
        let mut i = 5;
        while i < words.len() {
            let (count, op) = ((words[i] >> 16) as usize, words[i] & 0xffff);
            let w = &words[i + 1..i + count];
            match op {
                OP_TYPE_INT | OP_TYPE_FLOAT => {
                    scalar.insert(w[0], w[1] / 8);
                }
                OP_TYPE_ARRAY => {
                    arrays.insert(w[0], (w[1], w[2]));
                }
                OP_TYPE_STRUCT => {
                    structs.insert(w[0], w[1..].to_vec());
                }
                OP_TYPE_POINTER => {
                    pointers.insert(w[0], (w[1], w[2]));
                }
                OP_CONSTANT | OP_SPEC_CONSTANT => {
                    constants.insert(w[1], w[2]);
                }
                OP_SPEC_CONSTANT_COMPOSITE => {
                    composites.insert(w[1], w[2..].to_vec());
                }
                OP_VARIABLE => vars.push((w[0], w[1], w[2])),
                OP_DECORATE => match w[1] {
                    DEC_SPEC_ID => {
                        spec_ids.insert(w[0], w[2]);
                    }
                    DEC_ARRAY_STRIDE => {
                        strides.insert(w[0], w[2]);
                    }
                    DEC_BINDING => {
                        bindings.insert(w[0], w[2]);
                    }
                    DEC_SET => {
                        sets.insert(w[0], w[2]);
                    }
                    DEC_BUILTIN if w[2] == BUILTIN_WORKGROUP_SIZE => workgroup_size = Some(w[0]),
                    _ => {}
                },
                OP_MEMBER_DECORATE if w[2] == DEC_OFFSET => {
                    offsets.insert((w[0], w[1]), w[3]);
                }
                OP_EXECUTION_MODE_ID if w[1] == MODE_LOCAL_SIZE_ID => {
                    local_size_ids.extend_from_slice(&w[2..]);
                }
                _ => {}
            }
            i += count.max(1);
        }
        let size_of = |t: u32| -> u32 {
            if let Some(&s) = scalar.get(&t) {
                return s;
            }
            let (elem, len) = arrays[&t];
            let stride = strides.get(&t).copied().unwrap_or_else(|| scalar[&elem]);
            stride * constants[&len]
        };
        let mut r = Reflected::default();
        for (ptr, id, class) in vars {
            let pointee = pointers[&ptr].1;
            match class {
                SC_STORAGE_BUFFER => r.buffers.push((sets[&id], bindings[&id])),
                SC_PUSH_CONSTANT => {
                    r.push_size = structs[&pointee]
                        .iter()
                        .enumerate()
                        .map(|(m, &t)| offsets[&(pointee, m as u32)] + size_of(t))
                        .max()
                        .unwrap_or(0);
                }
                _ => {}
            }
        }
        r.buffers.sort_unstable();
        // A binding may be declared twice (as scalars and as vectors).
        r.buffers.dedup();
        // SPIR-V 1.6 names the size with LocalSizeId; older versions with a WorkgroupSize
        // built-in made of specialization constants.
        let x = local_size_ids
            .first()
            .or_else(|| composites.get(&workgroup_size?)?.first());
        r.local_size_from_spec0 = x.is_some_and(|id| spec_ids.get(id) == Some(&0));
        r
    }

    #[test]
    fn table_matches_the_spirv() {
        for s in Shader::ALL {
            let info = s.info();
            let r = reflect(info.words());
            let want: Vec<(u32, u32)> = (0..info.bindings).map(|b| (0, b)).collect();
            assert_eq!(r.buffers, want, "{}: storage buffers", info.name);
            assert_eq!(
                r.push_size, info.push_size,
                "{}: push-constant size",
                info.name
            );
            assert!(
                info.push_size <= MAX_PUSH_CONSTANTS && info.push_size >= 4 * info.bindings,
                "{}: push constants must hold the operand offsets and fit in 128 bytes",
                info.name
            );
            assert!(
                r.local_size_from_spec0,
                "{}: the workgroup size must come from specialization constant 0",
                info.name
            );
        }
    }

    #[test]
    fn every_module_is_listed() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/spirv");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                (p.extension()? == "spv").then(|| p.file_stem()?.to_str().map(String::from))?
            })
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = Shader::ALL
            .iter()
            .map(|s| s.info().name.to_string())
            .collect();
        listed.sort();
        assert_eq!(on_disk, listed);
    }
}
