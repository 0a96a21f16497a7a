#version 450
// Fast-mode linear on cooperative matrices with a tile fixed at compile time, compiled only as
// the linear_cm_* variants of tools/shaderc's variant table, which define BM, BN, BK (the
// workgroup's output tile and k step) and WM, WN (each subgroup's block).
// Same contract and rounding as linear_coopmat.comp (f16 operands, f32 accumulation; x and
// f32/bf16 weights rounded to the nearest f16, f16 weights exact), for devices whose subgroup
// has 32 invocations and which offer the 16 x 16 x 16 f16 -> f32 shape (the host checks).
//
// Why a fixed tile: linear_coopmat.comp sizes its register and cooperative-matrix arrays and
// bounds its loops with specialization constants, which glslang cannot unroll; here every
// array index is a literal after unrolling. On the H200 at 4096^3 (bf16 weights) that alone
// took the same algorithm from 27.1 to 70.7 TFLOP/s.
//
// Tile t + 1 is stored to the other shared buffer while tile t is multiplied (its global
// loads were issued before the products): one barrier per k step. Operands move in groups of 4 k: 16-byte
// (x, f32 weights) or 8-byte (f16, bf16 weights) loads when k and the offsets allow it,
// element loads otherwise (and for q8_0). Weights stay raw in registers until they are stored,
// so the conversions do not wait for the loads before the products. Results leave through a
// per-subgroup 16 x 16 f32 staging block, where bias, activation and the m/n edges are applied.
//
// With STREAM defined (the linear_cm_stream_* variants) it is the fast-mode twin of
// linear_stream.comp for few rows and large weights (LLM2Vec's projections at 16-64 tokens):
// the same bindings, push block and split-k contract (workgroup (x, y) = column tile x, split
// y of k; one split writes y through the epilogue, several write partial sums
// part[split][m][n] for linear_stream_reduce.comp, or fold them as linear_stream.comp does),
// and BM is a row block that the workgroup walks over m (m > BM reads the weights again; the
// DIRECT variants take row block z of the grid's third dimension instead). At
// 32 rows every weight feeds 32 products: f32 FMA cannot keep up with the memory there (the
// H200 would need ~140 TFLOP/s to stream bf16 weights at 4.3 TB/s; its f32 peak is ~67), the
// tensor cores can.
//
// With DIRECT as well (the linear_cm_direct_* variants, which need k and n multiples of 16 and
// weights starting on a 16-byte boundary: the host checks) the weights skip shared memory:
// each subgroup owns WN columns and every row of the block (WM = BM), and loads its B
// fragments straight from the weight buffer (column j of B is weight row j, so the fragment is
// column-major with stride k), UNROLL k steps of them at a time before their products, with no
// barrier between k steps. Only x goes through shared memory, as f16, BK k at a time (one
// chunk per split when ks <= BK). bf16 weights are loaded as f16 bit patterns and widened
// element by element (the same round-to-nearest f16 as the staged path, so the bits agree with
// it for a given split).
//
// With LANE as well (the linear_cm_lane_* variants; f16, bf16, and q8_0 where k is a multiple
// of 16 UNROLL, so that every window is read by lane loads) each
// invocation loads its own B elements instead of coopMatLoad: the host has probed the device's
// B fragment layout (coopmat_layout.comp) and runs these variants only where it is the one
// assumed here, NVIDIA's: element e of invocation i holds column (i / 4) + 8 (e / 4) and row
// 2 (i % 4) + (e % 2) + 8 ((e / 2) % 2). Within each window of 64 k (4 k steps) the k order is
// permuted so that invocation i's 16 k of a weight row are 32 contiguous bytes: two 16-byte
// loads per row and window, where coopMatLoad issued eight 4-byte ones. x is staged in shared
// memory in the same permuted order, so every product pairs the same x and w as before
// (windows that the k range does not fill keep the plain order and coopMatLoad).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#define CM 16u
#define SG 32u
#define WARPS_N (BN / WN)
#define WARPS ((BM / WM) * WARPS_N)
#define NT (WARPS * SG)
#define FM (WM / CM)
#define FN (WN / CM)
// Shared rows in f16vec4 units: BK + 8 halves, so the 16-byte row pieces of the matrix loads
// of 8 consecutive rows fall on distinct banks.
#define ST4 (BK / 4u + 2u)
#define KQ (BK / 4u)
#define A_LOADS (BM * KQ / NT)
#define B_LOADS (BN * KQ / NT)

#if (BM * BK / 4) % ((BM / WM) * (BN / WN) * 32) != 0 || (BN * BK / 4) % ((BM / WM) * (BN / WN) * 32) != 0
#error "each invocation must load whole groups of the A and B tiles"
#endif
#if defined(DIRECT) && (!defined(STREAM) || WM != BM || !defined(UNROLL))
#error "DIRECT is a STREAM tile whose subgroups cover every row, with UNROLL k steps in flight"
#endif
#if defined(LANE) && (!defined(DIRECT) || UNROLL % 4 != 0)
#error "LANE is a DIRECT tile with whole windows of 4 k steps in flight"
#endif
#if WM % 16 != 0 || WN % 16 != 0 || BK % 16 != 0
#error "subgroup blocks and the k step must be multiples of the 16 x 16 x 16 shape"
#endif

// The workgroup size is specialization constant 0 as in every shader; the host passes NT.
layout(local_size_x_id = 0) in;
// 0 f32, 1 f16, 2 bf16, 3 q8_0
layout(constant_id = 6) const uint W_DTYPE = 0;
// 1 when bindings start on 16-byte boundaries (minStorageBufferOffsetAlignment a multiple of
// 16), so the vector views below are aligned with the scalar ones.
layout(constant_id = 11) const uint VEC_OK = 1;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
// The same bindings viewed as vectors, for the aligned loads.
layout(set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer W4 { uvec4 w4[]; };
layout(set = 0, binding = 1) readonly buffer W2 { uvec2 w2[]; };
layout(set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };
#ifdef STREAM
// The partial sums [split][m][n] (several splits).
layout(set = 0, binding = 4) coherent buffer Part { float part[]; };
// One arrival counter per column tile (`fold` 1): zero between runs.
layout(set = 0, binding = 5) coherent buffer Count { uint count[]; };
#endif

layout(push_constant) uniform Push {
    uint x_off;
    // elements for f32/f16/bf16, bytes for q8_0
    uint w_off;
    uint b_off;
    uint y_off;
#ifdef STREAM
    uint part_off;
    uint count_off;
#endif
    uint m;
    uint n;
    uint k;
    // elements between rows of y (the full n when the op is split over output columns)
    uint ldy;
#ifdef STREAM
    // k per split: a multiple of BK (every split but the last is whole)
    uint ks;
    // 1: add the bias, activate and write y; 0: write partial sums [split][m][n]
    uint epilogue;
#endif
    uint has_bias;
    uint act;
    float slope;
#ifdef STREAM
    // with epilogue 0: 1 = the last workgroup of each column tile reduces the splits
    uint fold;
#endif
} p;

#define Y_INDEX(row, col) (p.y_off + (row) * p.ldy + (col))

#ifdef DIRECT
// One chunk of x; the weights bypass shared memory.
shared f16vec4 as_[BM * ST4];
#else
shared f16vec4 as_[2u * BM * ST4];
shared f16vec4 bs_[2u * BN * ST4];
#endif
shared float stage[WARPS * CM * CM];

#ifdef STREAM
// The staging blocks are done with when the splits fold.
#define FOLD_FLAG stage[0]
#include "stream_fold.glsl"
#endif

// The end of the k range this workgroup reduces over (k, or the end of its split).
uint kend;

vec4 a_reg[A_LOADS];
#ifndef DIRECT
// f32 bits, or two words of four f16/bf16 (b_half()).
uvec4 b_reg[B_LOADS];
#endif

float load_w(uint e) {
    if (W_DTYPE == 0u) {
        return uintBitsToFloat(w[p.w_off + e]);
    } else if (W_DTYPE == 1u) {
        return LOAD_F16(w, p.w_off + e);
    } else if (W_DTYPE == 2u) {
        return LOAD_BF16(w, p.w_off + e);
    }
    return LOAD_Q8_0(w, p.w_off, e);
}

// Whether the groups of 4 k can be read as vectors (k and the offsets multiples of 4).
bool a_vec() {
    return VEC_OK != 0u && p.k % 4u == 0u && p.x_off % 4u == 0u;
}

bool b_vec() {
    return VEC_OK != 0u && W_DTYPE <= 2u && p.k % 4u == 0u && p.w_off % 4u == 0u;
}

// Whether b_reg holds raw 16-bit weights (else f32 bits).
bool b_half() {
    return b_vec() && (W_DTYPE == 1u || W_DTYPE == 2u);
}

vec4 load_a4(uint gr, uint gk) {
    if (gr >= p.m) {
        return vec4(0.0);
    }
    uint e = p.x_off + gr * p.k + gk;
    if (a_vec()) {
        return gk < kend ? x4[e >> 2u] : vec4(0.0);
    }
    vec4 v;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        v[c] = gk + c < kend ? x[e + c] : 0.0;
    }
    return v;
}

uvec4 load_b4(uint gc, uint gk) {
    if (gc >= p.n) {
        return uvec4(0u);
    }
    uint e = gc * p.k + gk;
    if (b_vec()) {
        if (gk >= kend) {
            return uvec4(0u);
        }
        if (W_DTYPE == 0u) {
            return w4[(p.w_off + e) >> 2u];
        }
        return uvec4(w2[(p.w_off + e) >> 2u], 0u, 0u);
    }
    vec4 v;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        v[c] = gk + c < kend ? load_w(e + c) : 0.0;
    }
    return floatBitsToUint(v);
}

f16vec4 b_to_half(uvec4 r) {
    if (b_half()) {
        if (W_DTYPE == 1u) {
            return f16vec4(unpackFloat2x16(r.x), unpackFloat2x16(r.y));
        }
        // bf16: the top half of an f32 (element 2j is the low half of word j).
        return f16vec4(uintBitsToFloat(uvec4(r.x << 16u, r.x & 0xffff0000u, r.y << 16u,
                                             r.y & 0xffff0000u)));
    }
    return f16vec4(uintBitsToFloat(r));
}

void load_a_tile(uint m0, uint k0) {
    [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * NT;
        a_reg[l] = load_a4(m0 + i / KQ, k0 + 4u * (i % KQ));
    }
}

#ifdef LANE
// x of the chunk at kc (loaded by load_a_tile) into shared memory, each window of 64 k that the
// lane loads read (whole groups of UNROLL k steps; the chunk holds `steps` k steps) in the
// permuted order: physical k 16 t + 4 u + c of a window is logical k 16 u + 2 t + c (c = 0, 1)
// or 16 u + 2 t + 8 + c - 2 (c = 2, 3).
void store_a_tile_lane(uint steps) {
    uint windows = (steps / UNROLL) * (UNROLL / 4u);
    [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * NT;
        uint kr = 4u * (i % KQ);
        uint row = (i / KQ) * ST4;
        f16vec4 v = f16vec4(a_reg[l]);
        if (kr / 64u < windows) {
            uint t = (kr % 64u) / 16u;
            // The window's base + 16 u + 2 t, in halves; the second pair is 8 halves on.
            uint lo = (kr & ~63u) + 16u * ((kr % 16u) / 4u) + 2u * t;
            uint hi = lo + 8u;
            if ((lo & 2u) == 0u) {
                as_[row + lo / 4u].xy = v.xy;
                as_[row + hi / 4u].xy = v.zw;
            } else {
                as_[row + lo / 4u].zw = v.xy;
                as_[row + hi / 4u].zw = v.zw;
            }
        } else {
            as_[row + i % KQ] = v;
        }
    }
}
#endif

void store_a_tile(uint buf) {
    [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * NT;
        as_[buf * BM * ST4 + (i / KQ) * ST4 + i % KQ] = f16vec4(a_reg[l]);
    }
}

#ifndef DIRECT
void load_tile(uint m0, uint n0, uint k0) {
    load_a_tile(m0, k0);
    [[unroll]] for (uint l = 0u; l < B_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * NT;
        b_reg[l] = load_b4(n0 + i / KQ, k0 + 4u * (i % KQ));
    }
}

void store_tile(uint buf) {
    store_a_tile(buf);
    [[unroll]] for (uint l = 0u; l < B_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * NT;
        bs_[buf * BN * ST4 + (i / KQ) * ST4 + i % KQ] = b_to_half(b_reg[l]);
    }
}
#endif

#ifdef DIRECT
// The products of k step `kk` (within the staged chunk of x) for the B fragments b[u FN ..].
#define DIRECT_STEP(b, u, kk)                                                                  \
    {                                                                                          \
        coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseA> a[FM];                     \
        [[unroll]] for (uint i = 0u; i < FM; i++) {                                            \
            coopMatLoad(a[i], as_, (i * CM) * ST4 + (kk) / 4u, ST4,                            \
                        gl_CooperativeMatrixLayoutRowMajor);                                   \
        }                                                                                      \
        [[unroll]] for (uint i = 0u; i < FM; i++) {                                            \
            [[unroll]] for (uint j = 0u; j < FN; j++) {                                        \
                acc[i * FN + j] = coopMatMulAdd(a[i], b[(u) * FN + j], acc[i * FN + j]);       \
            }                                                                                  \
        }                                                                                      \
    }

// Weight rows col .. col + 16 at k .. k + 16 as a column-major B fragment, from the 16-byte
// view (the host guarantees w_off and k are multiples of 8 halves); bf16 bit patterns are
// widened in place.
#define DIRECT_LOAD(frag, col, kk)                                                             \
    {                                                                                          \
        coopMatLoad(frag, w4, (p.w_off + (col) * p.k + (kk)) >> 3u, p.k >> 3u,                 \
                    gl_CooperativeMatrixLayoutColumnMajor);                                    \
        if (W_DTYPE == 2u) {                                                                   \
            for (int e = 0; e < frag.length(); e++) {                                          \
                uint bits = packFloat2x16(f16vec2(frag[e], float16_t(0.0)));                   \
                frag[e] = float16_t(uintBitsToFloat(bits << 16u));                             \
            }                                                                                  \
        }                                                                                      \
    }
#endif

#ifdef LANE
// Two 16-bit weights (the low half first) as f16: f16 as is, bf16 rounded to the nearest.
f16vec2 lane_pair(uint bits) {
    if (W_DTYPE == 2u) {
        return f16vec2(uintBitsToFloat(uvec2(bits << 16u, bits & 0xffff0000u)));
    }
    return unpackFloat2x16(bits);
}

// Two q8_0 quants as f16, times the block's scale d: `pair` holds them biased to unsigned
// (q + 128) in bits 0-7 and 16-23 (the low one first). Or'ed into the mantissa of f16 1024
// (0x6400, where the f16 step is 1) each is exactly 1024 + 128 + q, and 1152 less exactly q:
// the float16_t(q) * d of an int-to-float conversion per quant, in two integer and two packed
// f16 operations per pair (3% off the q8_0 kernel on the H200: BENCHMARKS.md, 2026-12-04).
f16vec2 q8_pair(uint pair, float16_t d) {
    return (unpackFloat2x16(pair | 0x64006400u) - f16vec2(1152.0)) * d;
}

// This invocation's raw words of weight row `r` in the window at k `kw` (zeros past n), loaded
// before any of them is converted so that every load of a group of windows is in flight at
// once. 16-bit weights: its 16 k, 32 contiguous bytes, in two 16-byte loads. q8_0 (k a multiple
// of 64, so a window is two whole blocks): half of a block's 32 quants, 16 bytes on a 2-byte
// boundary, as the 5 words that hold them (lo, hi.x), the word holding the block's scale
// (hi.y), and whether the bytes start at the middle of a word (hi.z).
void lane_load(uint r, uint kw, out uvec4 lo, out uvec4 hi) {
    lo = uvec4(0u);
    hi = uvec4(0u);
    if (r >= p.n) {
        return;
    }
    uint t = gl_SubgroupInvocationID % 4u;
    if (W_DTYPE == 3u) {
        uint blk = p.w_off + (r * (p.k / 32u) + kw / 32u + t / 2u) * Q8_0_BLOCK_BYTES;
        uint a = blk + 2u + 16u * (t % 2u);
        uint wi = a >> 2u;
        lo = uvec4(w[wi], w[wi + 1u], w[wi + 2u], w[wi + 3u]);
        // The fifth word only where the bytes start mid-word (else it may lie past the
        // tensor's last block).
        uint tail = (a & 2u) != 0u ? w[wi + 4u] : 0u;
        hi = uvec4(tail, w[blk >> 2u] >> ((blk & 2u) << 3u), a & 2u, 0u);
        return;
    }
    uint e = (p.w_off + r * p.k + kw + 16u * t) >> 3u;
    lo = w4[e];
    hi = w4[e + 1u];
}

// The words of lane_load as 8 pairs of f16, pair i holding physical k 2 i and 2 i + 1 of the
// invocation's 16.
void lane_convert(uvec4 lo, uvec4 hi, out f16vec2 pr[8]) {
    if (W_DTYPE == 3u) {
        uint q[5] = uint[5](lo.x, lo.y, lo.z, lo.w, hi.x);
        uint qb[4];
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            qb[j] = hi.z != 0u ? (q[j] >> 16u) | (q[j + 1u] << 16u) : q[j];
        }
        float16_t d = unpackFloat2x16(hi.y).x;
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            uint u = qb[j] ^ 0x80808080u;
            pr[2u * j] = q8_pair((u & 0xffu) | ((u << 8u) & 0xff0000u), d);
            pr[2u * j + 1u] = q8_pair(((u >> 16u) & 0xffu) | ((u >> 8u) & 0xff0000u), d);
        }
        return;
    }
    uint words[8] = uint[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        pr[i] = lane_pair(words[i]);
    }
}

// The B fragments b[base + u FN + j], u = 0..3, of one window (k steps in its permuted order)
// from the converted pairs of weight rows g (ra) and g + 8 (rc) of fragment column j.
#define LANE_FILL(b, base, j, ra, rc)                                                          \
    [[unroll]] for (uint u_ = 0u; u_ < 4u; u_++) {                                             \
        b[(base) + u_ * FN + (j)][0] = ra[2u * u_].x;                                          \
        b[(base) + u_ * FN + (j)][1] = ra[2u * u_].y;                                          \
        b[(base) + u_ * FN + (j)][2] = ra[2u * u_ + 1u].x;                                     \
        b[(base) + u_ * FN + (j)][3] = ra[2u * u_ + 1u].y;                                     \
        b[(base) + u_ * FN + (j)][4] = rc[2u * u_].x;                                          \
        b[(base) + u_ * FN + (j)][5] = rc[2u * u_].y;                                          \
        b[(base) + u_ * FN + (j)][6] = rc[2u * u_ + 1u].x;                                     \
        b[(base) + u_ * FN + (j)][7] = rc[2u * u_ + 1u].y;                                     \
    }
#endif

// The BM x BN output block at (m0, n0) over k in [kbeg, kend): its products, then the bias
// and activation into y, or (STREAM, `epilogue` 0) its partial sums for split `split`.
void block(uint m0, uint n0, uint kbeg, uint split) {
    uint warp = gl_SubgroupID;
    uint wm = (warp / WARPS_N) * WM;
    uint wn = (warp % WARPS_N) * WN;

    coopmat<float, gl_ScopeSubgroup, CM, CM, gl_MatrixUseAccumulator> acc[FM * FN];
    [[unroll]] for (uint i = 0u; i < FM * FN; i++) {
        acc[i] = coopmat<float, gl_ScopeSubgroup, CM, CM, gl_MatrixUseAccumulator>(0.0);
    }

#ifdef DIRECT
    // Subgroups whose columns are past n (n is a multiple of 16) still stage x with the rest.
    bool live = n0 + wn < p.n;
    for (uint kc = kbeg; kc < kend; kc += BK) {
        load_a_tile(m0, kc);
        // The previous chunk's products are done with as_.
        uint steps = (min(kend, kc + BK) - kc) / CM;
        barrier();
#ifdef LANE
        store_a_tile_lane(steps);
#else
        store_a_tile(0u);
#endif
        barrier();
        if (live) {
            uint s = 0u;
            for (; s + UNROLL <= steps; s += UNROLL) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseB> b[UNROLL * FN];
#ifdef LANE
                // Every load of the UNROLL / 4 windows first, then the conversions.
                uvec4 raw[UNROLL / 2u * FN * 2u];
                uint g = n0 + wn + gl_SubgroupInvocationID / 4u;
                [[unroll]] for (uint v = 0u; v < UNROLL / 4u; v++) {
                    [[unroll]] for (uint j = 0u; j < FN; j++) {
                        [[unroll]] for (uint h = 0u; h < 2u; h++) {
                            uint i = ((v * FN + j) * 2u + h) * 2u;
                            lane_load(g + j * CM + 8u * h, kc + (s + 4u * v) * CM, raw[i],
                                      raw[i + 1u]);
                        }
                    }
                }
                [[unroll]] for (uint v = 0u; v < UNROLL / 4u; v++) {
                    [[unroll]] for (uint j = 0u; j < FN; j++) {
                        uint i = (v * FN + j) * 4u;
                        f16vec2 ra[8], rc[8];
                        lane_convert(raw[i], raw[i + 1u], ra);
                        lane_convert(raw[i + 2u], raw[i + 3u], rc);
                        LANE_FILL(b, 4u * v * FN, j, ra, rc)
                    }
                }
#else
                [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
                    [[unroll]] for (uint j = 0u; j < FN; j++) {
                        DIRECT_LOAD(b[u * FN + j], n0 + wn + j * CM, kc + (s + u) * CM)
                    }
                }
#endif
                [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
                    DIRECT_STEP(b, u, (s + u) * CM)
                }
            }
            for (; s < steps; s++) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseB> b[FN];
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    DIRECT_LOAD(b[j], n0 + wn + j * CM, kc + s * CM)
                }
                DIRECT_STEP(b, 0u, s * CM)
            }
        }
    }
#else
    uint tiles = (kend - kbeg + BK - 1u) / BK;
    if (tiles > 0u) {
        load_tile(m0, n0, kbeg);
        store_tile(0u);
        barrier();
    }
    for (uint t = 0u; t < tiles; t++) {
        uint cur = t & 1u;
        if (t + 1u < tiles) {
            load_tile(m0, n0, kbeg + (t + 1u) * BK);
        }
        [[unroll]] for (uint kk = 0u; kk < BK; kk += CM) {
            coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseA> a[FM];
            coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseB> b[FN];
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                coopMatLoad(a[i], as_, cur * BM * ST4 + (wm + i * CM) * ST4 + kk / 4u, ST4,
                            gl_CooperativeMatrixLayoutRowMajor);
            }
            // Column j of B is row j of the n-major tile.
            [[unroll]] for (uint j = 0u; j < FN; j++) {
                coopMatLoad(b[j], bs_, cur * BN * ST4 + (wn + j * CM) * ST4 + kk / 4u, ST4,
                            gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    acc[i * FN + j] = coopMatMulAdd(a[i], b[j], acc[i * FN + j]);
                }
            }
        }
        // The other buffer was last read before the previous barrier.
        if (t + 1u < tiles) {
            store_tile(cur ^ 1u);
        }
        barrier();
    }
#endif

    // One block at a time through the staging area, in a loop the compiler keeps rolled (the
    // bias and activation code once, not once per block and element); the accumulator is
    // picked by literal index so the accumulators stay in registers.
    uint base = warp * CM * CM;
    uint lane = gl_SubgroupInvocationID;
    [[dont_unroll]] for (uint blk = 0u; blk < FM * FN; blk++) {
        [[unroll]] for (uint c = 0u; c < FM * FN; c++) {
            if (c == blk) {
                coopMatStore(acc[c], stage, base, CM, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        uint r0 = m0 + wm + (blk / FN) * CM;
        uint c0 = n0 + wn + (blk % FN) * CM;
        [[dont_unroll]] for (uint e = lane; e < CM * CM; e += SG) {
            uint row = r0 + e / CM;
            uint col = c0 + e % CM;
            if (row < p.m && col < p.n) {
                float v = stage[base + e];
#ifdef STREAM
                if (p.epilogue == 0u) {
                    part[p.part_off + (split * p.m + row) * p.n + col] = v;
                    continue;
                }
#endif
                if (p.has_bias != 0u) {
                    v += bias[p.b_off + col];
                }
                y[Y_INDEX(row, col)] = activate(p.act, p.slope, v);
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
    }
}

void main() {
    uint n0 = gl_WorkGroupID.x * BN;
#ifdef STREAM
    uint split = gl_WorkGroupID.y;
    uint kbeg = split * p.ks;
    kend = min(p.k, kbeg + p.ks);
#ifdef DIRECT
    // Row blocks are the grid's third dimension: they run side by side, and read the same
    // weights at about the same time (from L2 after the first).
    uint m0 = gl_WorkGroupID.z * BM;
    block(m0, n0, kbeg, split);
    fold_splits(n0, BN, m0, min(p.m, m0 + BM));
#else
    for (uint m0 = 0u; m0 < p.m; m0 += BM) {
        block(m0, n0, kbeg, split);
    }
    fold_splits(n0, BN, 0u, p.m);
#endif
#else
    kend = p.k;
    block(gl_WorkGroupID.y * BM, n0, 0u, 0u);
#endif
}
