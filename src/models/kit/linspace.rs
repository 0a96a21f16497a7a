//! `torch.linspace` in float32, as the upstreams' blends call it.

/// `torch.linspace(start, end, n)` in float32 as torch's CPU kernel computes it: `start +
/// step i` for the first half, `end - step (n - 1 - i)` for the rest, `step = (end - start) /
/// (n - 1)`; `[start]` for `n = 1`.
pub fn linspace_f32(start: f32, end: f32, n: usize) -> Vec<f32> {
    if n == 1 {
        return vec![start];
    }
    let step = (end - start) / (n - 1) as f32;
    let half = n / 2;
    (0..n)
        .map(|i| {
            if i < half {
                start + step * i as f32
            } else {
                end - step * (n - 1 - i) as f32
            }
        })
        .collect()
}
