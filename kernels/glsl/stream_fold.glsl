// The `fold` tail of the split-k streaming linears (linear_stream.comp, linear_cm.comp with
// STREAM): after a workgroup has written its partial sums part[split][m][n] for the columns
// n0 .. n0 + ncw, it counts itself in on its column group's arrival counter, and the last of
// the group's splits to arrive sums the group's columns over the splits in ascending split
// order (linear_stream_reduce.comp's order, so the bits are the same), adds the bias, applies
// the activation, writes y and resets the counter to zero for the next run. The counter and
// the partial sums are `coherent` (read from where the other workgroups' writes land).
//
// The including shader declares the push block `p` (part_off, count_off, b_off, m, n,
// has_bias, act, slope, epilogue, fold), the buffers part[], count[], bias[] and y[],
// Y_INDEX(row, col), and FOLD_FLAG: a shared float that nothing reads or writes once the
// partial sums are written, where invocation 0 tells the others whether the workgroup arrived
// last (1.0) or not. (A shared variable of its own would push a tile that fills the device's
// shared memory, as linear_stream.comp's 48 KiB tile on the H200 does, past the limit.)

// Rows r0 .. r1 are this workgroup's (every row where it walks them all; its row block where
// the grid's third dimension walks the row blocks): the counter is per column group and row
// block.
#define FOLD_COUNTER (gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x)

void fold_splits(uint n0, uint ncw, uint r0, uint r1) {
    if (p.epilogue != 0u || p.fold == 0u) {
        return;
    }
    uint tid = gl_LocalInvocationID.x;
    // This workgroup's partial sums are written (and visible device-wide) before it counts
    // itself in.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        uint before = atomicAdd(count[p.count_off + FOLD_COUNTER], 1u);
        FOLD_FLAG = before + 1u == gl_NumWorkGroups.y ? 1.0 : 0.0;
    }
    barrier();
    if (FOLD_FLAG == 0.0) {
        return;
    }
    memoryBarrierBuffer();
    uint splits = gl_NumWorkGroups.y;
    uint cols = min(ncw, p.n - n0);
    for (uint i = tid; i < (r1 - r0) * cols; i += WORKGROUP_SIZE) {
        uint row = r0 + i / cols;
        uint col = n0 + i % cols;
        float v = 0.0;
        for (uint s = 0u; s < splits; s++) {
            v += part[p.part_off + (s * p.m + row) * p.n + col];
        }
        if (p.has_bias != 0u) {
            v += bias[p.b_off + col];
        }
        y[Y_INDEX(row, col)] = activate(p.act, p.slope, v);
    }
    if (tid == 0u) {
        count[p.count_off + FOLD_COUNTER] = 0u;
    }
}
