// The shader variant table of tools/shaderc (as ggml's vulkan-shaders-gen lists its
// variants): modules compiled from one `kernels/glsl/*.comp` source with preprocessor
// defines, instead of a wrapper `.comp` that `#define`s and `#include`s. A `.comp` named here as
// a source is compiled only as its variants; every other `.comp` becomes the module of its own
// name. Plain data, also read by kinema's tests (`tests/shaders.rs` recomputes each variant's
// MANIFEST hash; the host's tile tables are checked against the defines), so it is a file of
// its own.

/// One module compiled from a shared source with defines.
pub struct Variant {
    /// The module: `kernels/spirv/<name>.spv` (and the `Shader` table's name in
    /// `src/vulkan/shaders.rs`).
    pub name: &'static str,
    /// The source file under `kernels/glsl/`.
    pub source: &'static str,
    /// `(NAME, value)` defines, in the order given; an empty value defines the name alone.
    pub defines: &'static [(&'static str, &'static str)],
}

impl Variant {
    /// What the MANIFEST's `variant/<name>` line hashes, followed by the source's bytes: the
    /// name, the source file and every define, one a line.
    pub fn identity(&self) -> String {
        let mut s = format!("{}\n{}\n", self.name, self.source);
        for (name, value) in self.defines {
            s.push_str(&format!("{name}={value}\n"));
        }
        s
    }

    /// The value of define `name`, if it is one of this variant's.
    pub fn define(&self, name: &str) -> Option<&'static str> {
        self.defines.iter().find(|d| d.0 == name).map(|d| d.1)
    }
}

/// Every variant, grouped by source.
pub const VARIANTS: &[Variant] = &[
    // Fast-mode fused attention, head dimension 128: 64 queries per workgroup of 4 subgroups
    // and 32 of 2, keys 32 at a time.
    Variant {
        name: "attention_cm_d128_q32_kv32",
        source: "attention_cm.comp",
        defines: &[("HD", "128"), ("BQ", "32"), ("BKV", "32")],
    },
    Variant {
        name: "attention_cm_d128_q64_kv32",
        source: "attention_cm.comp",
        defines: &[("HD", "128"), ("BQ", "64"), ("BKV", "32")],
    },
    // Fast-mode linear with compiled-in tiles: 128 x 128, k steps of 32, 8 subgroups of
    // 64 x 32; and 64 x 64 with 4 subgroups of 32 x 32.
    Variant {
        name: "linear_cm_128x128x32_64x32",
        source: "linear_cm.comp",
        defines: &[
            ("BM", "128"),
            ("BN", "128"),
            ("BK", "32"),
            ("WM", "64"),
            ("WN", "32"),
        ],
    },
    Variant {
        name: "linear_cm_64x64x32_32x32",
        source: "linear_cm.comp",
        defines: &[
            ("BM", "64"),
            ("BN", "64"),
            ("BK", "32"),
            ("WM", "32"),
            ("WN", "32"),
        ],
    },
    // The fast-mode streaming linear (STREAM: split k, linear_stream.comp's bindings and
    // push block) on row blocks of 32: 4 subgroups of 32 x 32 over 128 columns, 4 of 32 x 16
    // over 64 columns with k steps of 64, and 8 of 32 x 16 over 128 columns.
    Variant {
        name: "linear_cm_stream_32x128x32_32x32",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("BM", "32"),
            ("BN", "128"),
            ("BK", "32"),
            ("WM", "32"),
            ("WN", "32"),
        ],
    },
    Variant {
        name: "linear_cm_stream_32x64x64_32x16",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("BM", "32"),
            ("BN", "64"),
            ("BK", "64"),
            ("WM", "32"),
            ("WN", "16"),
        ],
    },
    Variant {
        name: "linear_cm_stream_32x128x32_32x16",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("BM", "32"),
            ("BN", "128"),
            ("BK", "32"),
            ("WM", "32"),
            ("WN", "16"),
        ],
    },
    // Fast-mode streaming with the weights loaded straight into cooperative matrices
    // (linear_cm.comp with STREAM and DIRECT): BK is the x chunk staged at a time, UNROLL the k
    // steps of B fragments in flight per subgroup.
    Variant {
        name: "linear_cm_direct_32x128x256_32x16_u4",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("BM", "32"),
            ("BN", "128"),
            ("BK", "256"),
            ("WM", "32"),
            ("WN", "16"),
            ("UNROLL", "4"),
        ],
    },
    Variant {
        name: "linear_cm_direct_32x128x256_32x32_u4",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("BM", "32"),
            ("BN", "128"),
            ("BK", "256"),
            ("WM", "32"),
            ("WN", "32"),
            ("UNROLL", "4"),
        ],
    },
    Variant {
        name: "linear_cm_direct_32x256x256_32x32_u4",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("BM", "32"),
            ("BN", "256"),
            ("BK", "256"),
            ("WM", "32"),
            ("WN", "32"),
            ("UNROLL", "4"),
        ],
    },
    // The same with each invocation loading its own B elements in a permuted k order (LANE),
    // where the probed fragment layout allows it.
    Variant {
        name: "linear_cm_lane_32x128x256_32x32_u4",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("LANE", ""),
            ("BM", "32"),
            ("BN", "128"),
            ("BK", "256"),
            ("WM", "32"),
            ("WN", "32"),
            ("UNROLL", "4"),
        ],
    },
    Variant {
        name: "linear_cm_lane_32x128x256_32x16_u4",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("LANE", ""),
            ("BM", "32"),
            ("BN", "128"),
            ("BK", "256"),
            ("WM", "32"),
            ("WN", "16"),
            ("UNROLL", "4"),
        ],
    },
    Variant {
        name: "linear_cm_lane_32x128x256_32x32_u8",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("LANE", ""),
            ("BM", "32"),
            ("BN", "128"),
            ("BK", "256"),
            ("WM", "32"),
            ("WN", "32"),
            ("UNROLL", "8"),
        ],
    },
    Variant {
        name: "linear_cm_lane_32x256x256_32x32_u4",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("LANE", ""),
            ("BM", "32"),
            ("BN", "256"),
            ("BK", "256"),
            ("WM", "32"),
            ("WN", "32"),
            ("UNROLL", "4"),
        ],
    },
    Variant {
        name: "linear_cm_lane_64x128x128_64x32_u4",
        source: "linear_cm.comp",
        defines: &[
            ("STREAM", ""),
            ("DIRECT", ""),
            ("LANE", ""),
            ("BM", "64"),
            ("BN", "128"),
            ("BK", "128"),
            ("WM", "64"),
            ("WN", "32"),
            ("UNROLL", "4"),
        ],
    },
    // The weight-streaming linear and its split-k reduce; with CONV, conv1d for few output
    // columns on the same kernel (im2col gathered while staging x, y in conv1d's layout).
    Variant {
        name: "linear_stream",
        source: "linear_stream.comp",
        defines: &[],
    },
    Variant {
        name: "conv1d_stream",
        source: "linear_stream.comp",
        defines: &[("CONV", "")],
    },
    Variant {
        name: "linear_stream_reduce",
        source: "linear_stream_reduce.comp",
        defines: &[],
    },
    Variant {
        name: "conv1d_stream_reduce",
        source: "linear_stream_reduce.comp",
        defines: &[("CONV", "")],
    },
    // Row ops: strict fixed-tree reductions, and the fast-mode variants on subgroup
    // arithmetic (rows.glsl).
    Variant {
        name: "layer_norm",
        source: "layer_norm.comp",
        defines: &[],
    },
    Variant {
        name: "layer_norm_sg",
        source: "layer_norm.comp",
        defines: &[("SUBGROUP_REDUCE", "")],
    },
    // add_layer_norm: LayerNorm of x + r (the residual at binding 1).
    Variant {
        name: "add_layer_norm",
        source: "layer_norm.comp",
        defines: &[("RESIDUAL", "")],
    },
    Variant {
        name: "add_layer_norm_sg",
        source: "layer_norm.comp",
        defines: &[("RESIDUAL", ""), ("SUBGROUP_REDUCE", "")],
    },
    Variant {
        name: "rms_norm",
        source: "rms_norm.comp",
        defines: &[],
    },
    Variant {
        name: "rms_norm_sg",
        source: "rms_norm.comp",
        defines: &[("SUBGROUP_REDUCE", "")],
    },
    Variant {
        name: "softmax",
        source: "softmax.comp",
        defines: &[],
    },
    Variant {
        name: "softmax_sg",
        source: "softmax.comp",
        defines: &[("SUBGROUP_REDUCE", "")],
    },
];
