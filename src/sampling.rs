//! The scalar definitions of the sampling ops, shared by the CPU kernels' references, the host
//! math of the models and the tests: a neutral floor, so a model's host code never reaches
//! into `cpu/` for them (the GLSL shaders implement the same formulas).

/// Index of the first maximum of `row`; the first NaN wins over any number (as
/// `torch.argmax`).
pub fn argmax_row(row: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in row.iter().enumerate().skip(1) {
        let b = row[best];
        if b.is_nan() {
            break;
        }
        if v.is_nan() || v > b {
            best = i;
        }
    }
    best as u32
}

/// `ln(max(x, 1e-20))`: MotionBricks' `log` helper clamps its argument
/// (`motionbricks/motion_backbone/models/sampling.py#L4-6`).
pub fn log_safe(x: f32) -> f32 {
    x.max(1e-20).ln()
}

/// `-log_safe(-log_safe(u))`, both clamps kept (`sampling.py#L8-9`).
pub fn gumbel_noise(u: f32) -> f32 {
    -log_safe(-log_safe(u))
}
