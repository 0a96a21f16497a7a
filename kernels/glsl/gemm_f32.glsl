// The strict f32 GEMM tile shared by linear.comp and batched_matmul.comp: one workgroup
// computes a BM x BN tile of C = A . B (A is m x k, B is k x n), each invocation TM x TN
// outputs held in registers, k advancing BK at a time in ascending order, so every output
// sums its products in the same order on every device (no subgroup operations: any subgroup
// size). Design after the usual register-blocked SGEMM for NVIDIA GPUs:
// - A and B tiles are stored k-major in shared memory as vec4 rows, each row padded by one
//   vec4: an invocation reads its TM rows and TN columns of one k as TM/4 + TN/4 vec4 loads
//   (columns 4(j COLS + tc) .. +3, rows 4(i ROWS + tr) .. +3), and the padding spreads the
//   transposing stores of a k-contiguous operand over all banks;
// - two shared buffers: the global loads of tile t + 1 are issued into registers before the
//   products of tile t, then stored into the other buffer, one barrier per tile;
// - out-of-range elements of A and B read as zero, so edge tiles need no other care.
//
// Accumulators and prefetch registers are local to gemm_f32() (not module-scope arrays) and
// the accumulators are vec4 (one vector fma per 4 outputs), so a driver keeps them in
// registers.
//
// The including shader defines, before including this file: the spec constants BM, BN, BK,
// TM, TN (TM and TN multiples of 4; BM * BK and BN * BK multiples of WORKGROUP_SIZE =
// (BM / TM) (BN / TN)), the bool constant B_K_CONTIGUOUS (whether consecutive k of one column
// of B are adjacent in memory, so loads walk k fastest for coalescing), the functions
// `float load_a(uint row, uint kk)` and `float load_b(uint col, uint kk)` (tile-relative row
// or column, absolute kk; both return 0 outside the matrix) and
// `void store_c(uint row, uint col, float v)` (tile-relative; it checks the bounds), and the
// uint `p.k`. main() calls gemm_f32().

const uint ROWS = BM / TM;
const uint COLS = BN / TN;
const uint TN4 = TN / 4u;
const uint AS4 = BM / 4u + 1u;
const uint BS4 = BN / 4u + 1u;
const uint A_LOADS = BM * BK / WORKGROUP_SIZE;
const uint B_LOADS = BN * BK / WORKGROUP_SIZE;

shared vec4 as4[2u * BK * AS4];
shared vec4 bs4[2u * BK * BS4];

// Tile element `l` of this invocation: (row or column, kk) within the tile.
uvec2 a_slot(uint l) {
    uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
    return uvec2(i / BK, i % BK);
}

uvec2 b_slot(uint l) {
    uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
    return B_K_CONTIGUOUS ? uvec2(i / BK, i % BK) : uvec2(i % BN, i / BN);
}

void gemm_f32() {
    uint tr = gl_LocalInvocationID.x / COLS;
    uint tc = gl_LocalInvocationID.x % COLS;
    // acc[i * TN4 + j] holds row 4 ((i / 4) ROWS + tr) + i % 4, columns 4 (j COLS + tc) .. +3.
    vec4 acc[TM * TN4];
    float a_reg[A_LOADS];
    float b_reg[B_LOADS];
    [[unroll]] for (uint i = 0u; i < TM * TN4; i++) {
        acc[i] = vec4(0.0);
    }
    uint tiles = (p.k + BK - 1u) / BK;
    for (uint t = 0u; t <= tiles; t++) {
        // Step t loads tile t (if any) into registers, multiplies tile t - 1 (if any) from
        // buffer (t - 1) & 1, then stores tile t into buffer t & 1: one barrier per tile.
        if (t < tiles) {
            [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
                uvec2 s = a_slot(l);
                a_reg[l] = load_a(s.x, t * BK + s.y);
            }
            [[unroll]] for (uint l = 0u; l < B_LOADS; l++) {
                uvec2 s = b_slot(l);
                b_reg[l] = load_b(s.x, t * BK + s.y);
            }
        }
        if (t > 0u) {
            uint buf = (t - 1u) & 1u;
            [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
                vec4 a[TM / 4u];
                vec4 b[TN4];
                [[unroll]] for (uint i = 0u; i < TM / 4u; i++) {
                    a[i] = as4[(buf * BK + kk) * AS4 + i * ROWS + tr];
                }
                [[unroll]] for (uint j = 0u; j < TN4; j++) {
                    b[j] = bs4[(buf * BK + kk) * BS4 + j * COLS + tc];
                }
                [[unroll]] for (uint i = 0u; i < TM; i++) {
                    [[unroll]] for (uint j = 0u; j < TN4; j++) {
                        acc[i * TN4 + j] = fma(vec4(a[i >> 2u][i & 3u]), b[j], acc[i * TN4 + j]);
                    }
                }
            }
        }
        if (t < tiles) {
            uint buf = t & 1u;
            [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
                uvec2 s = a_slot(l);
                uint e = (buf * BK + s.y) * AS4 * 4u + s.x;
                as4[e >> 2u][e & 3u] = a_reg[l];
            }
            [[unroll]] for (uint l = 0u; l < B_LOADS; l++) {
                uvec2 s = b_slot(l);
                uint e = (buf * BK + s.y) * BS4 * 4u + s.x;
                bs4[e >> 2u][e & 3u] = b_reg[l];
            }
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < TM; i++) {
        uint row = ((i >> 2u) * ROWS + tr) * 4u + (i & 3u);
        [[unroll]] for (uint j = 0u; j < TN4; j++) {
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                store_c(row, (j * COLS + tc) * 4u + c, acc[i * TN4 + j][c]);
            }
        }
    }
}
