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
// The including shader defines, before including this file: the spec constants BM, BN, BK,
// TM, TN (TM and TN multiples of 4; BM * BK and BN * BK multiples of WORKGROUP_SIZE =
// (BM / TM) (BN / TN)), the bool constant B_K_CONTIGUOUS (whether consecutive k of one column
// of B are adjacent in memory, so loads walk k fastest for coalescing), and the functions
// `float load_a(uint row, uint kk)` and `float load_b(uint col, uint kk)` (tile-relative row
// or column, absolute kk; both return 0 outside the matrix), and the uint `p.k`.

const uint ROWS = BM / TM;
const uint COLS = BN / TN;
const uint AS4 = BM / 4u + 1u;
const uint BS4 = BN / 4u + 1u;
const uint A_LOADS = BM * BK / WORKGROUP_SIZE;
const uint B_LOADS = BN * BK / WORKGROUP_SIZE;

shared vec4 as4[2u * BK * AS4];
shared vec4 bs4[2u * BK * BS4];

float acc[TM * TN];
float a_reg[A_LOADS];
float b_reg[B_LOADS];

// Tile element `l` of this invocation: (row or column, kk) within the tile.
uvec2 a_slot(uint l) {
    uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
    return uvec2(i / BK, i % BK);
}

uvec2 b_slot(uint l) {
    uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
    return B_K_CONTIGUOUS ? uvec2(i / BK, i % BK) : uvec2(i % BN, i / BN);
}

void load_tile(uint k0) {
    [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
        uvec2 s = a_slot(l);
        a_reg[l] = load_a(s.x, k0 + s.y);
    }
    [[unroll]] for (uint l = 0u; l < B_LOADS; l++) {
        uvec2 s = b_slot(l);
        b_reg[l] = load_b(s.x, k0 + s.y);
    }
}

void store_tile(uint buf) {
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

void multiply_tile(uint buf, uint tr, uint tc) {
    [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
        vec4 a[TM / 4u];
        vec4 b[TN / 4u];
        [[unroll]] for (uint i = 0u; i < TM / 4u; i++) {
            a[i] = as4[(buf * BK + kk) * AS4 + i * ROWS + tr];
        }
        [[unroll]] for (uint j = 0u; j < TN / 4u; j++) {
            b[j] = bs4[(buf * BK + kk) * BS4 + j * COLS + tc];
        }
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                acc[i * TN + j] = fma(a[i >> 2u][i & 3u], b[j >> 2u][j & 3u], acc[i * TN + j]);
            }
        }
    }
}

// Fills acc; output acc[i * TN + j] is row gemm_row(i, tr), column gemm_col(j, tc) of the tile.
void gemm_tile(uint tr, uint tc) {
    [[unroll]] for (uint i = 0u; i < TM * TN; i++) {
        acc[i] = 0.0;
    }
    uint tiles = (p.k + BK - 1u) / BK;
    if (tiles == 0u) {
        return;
    }
    load_tile(0u);
    store_tile(0u);
    barrier();
    for (uint t = 0u; t < tiles; t++) {
        uint cur = t & 1u;
        bool more = t + 1u < tiles;
        if (more) {
            load_tile((t + 1u) * BK);
        }
        multiply_tile(cur, tr, tc);
        if (more) {
            store_tile(cur ^ 1u);
        }
        barrier();
    }
}

uint gemm_row(uint i, uint tr) {
    return ((i >> 2u) * ROWS + tr) * 4u + (i & 3u);
}

uint gemm_col(uint j, uint tc) {
    return ((j >> 2u) * COLS + tc) * 4u + (j & 3u);
}
