// Argmax of one row per workgroup, shared by argmax.comp and gumbel.comp. Include after
// common.glsl and `layout(local_size_x_id = 0) in;`. WORKGROUP_SIZE must be a power of two.
//
// Candidates (v, i) are ordered totally: a NaN beats every number and the lower index wins
// among NaNs; otherwise the larger value wins and the lower index wins a tie (so -0 and +0
// tie). Each invocation scans columns tid, tid + WORKGROUP_SIZE, ... in ascending order, then
// a shared-memory tree combines the candidates; the order is total, so the result is the
// first index of the maximum (torch.argmax, `cpu::argmax::reference::argmax_row`) on any
// device and subgroup size.

shared float am_v[WORKGROUP_SIZE];
shared uint am_i[WORKGROUP_SIZE];

// NaN test on the bits: drivers may fold isnan() away under relaxed float rules.
bool am_isnan(float v) {
    return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u;
}

// Whether candidate (vb, ib) beats (va, ia).
bool am_beats(float vb, uint ib, float va, uint ia) {
    bool na = am_isnan(va);
    bool nb = am_isnan(vb);
    if (na || nb) {
        return nb && (!na || ib < ia);
    }
    return vb > va || (vb == va && ib < ia);
}

// Fold candidate (v, i) into the running best (bv, bi).
void am_fold(inout float bv, inout uint bi, float v, uint i) {
    if (am_beats(v, i, bv, bi)) {
        bv = v;
        bi = i;
    }
}

// The winning index over every invocation's (bv, bi); valid in invocation 0. Every
// invocation of the workgroup must call it (it has barriers).
uint am_reduce(float bv, uint bi) {
    uint tid = gl_LocalInvocationID.x;
    am_v[tid] = bv;
    am_i[tid] = bi;
    barrier();
    for (uint s = WORKGROUP_SIZE / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            float v = am_v[tid + s];
            uint i = am_i[tid + s];
            if (am_beats(v, i, am_v[tid], am_i[tid])) {
                am_v[tid] = v;
                am_i[tid] = i;
            }
        }
        barrier();
    }
    return am_i[0];
}

// Flat index of this workgroup over a 2-D grid (rows may exceed one grid dimension).
uint am_row() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}
