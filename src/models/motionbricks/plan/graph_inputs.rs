//! Writing the graph inputs that depend only on the chosen lengths, and the convolution
//! head's dense conditions.

use std::cell::RefCell;

use super::super::config::ConvDecoderConfig;
use super::super::model::ConvDecoderInputs;
use crate::Result;
use crate::backend::Backend;
use crate::graph::Executable;

/// Write the inputs that depend only on the chosen lengths `ns` with `write`, unless `cache`
/// says they hold them already.
pub(super) fn write_for_lengths(
    cache: &RefCell<Option<Vec<usize>>>,
    ns: &[usize],
    write: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let mut c = cache.borrow_mut();
    if c.as_deref() == Some(ns) {
        return Ok(());
    }
    *c = None;
    write()?;
    *c = Some(ns.to_vec());
    Ok(())
}

/// Expand per-frame 0/1 flags `[batch, frames]` to `(has, 1 - has)` over `width`.
pub(super) fn has_pair(flags: &[bool], width: usize) -> (Vec<f32>, Vec<f32>) {
    let mut a = Vec::with_capacity(flags.len() * width);
    let mut b = Vec::with_capacity(flags.len() * width);
    for &f in flags {
        let (x, y) = if f { (1.0, 0.0) } else { (0.0, 1.0) };
        a.extend(std::iter::repeat_n(x, width));
        b.extend(std::iter::repeat_n(y, width));
    }
    (a, b)
}

/// A token mask `[batch, channels, len]` with 1 where position `< n * scale` (positions
/// counted in units of `len / max_tokens`).
fn channel_mask(ns: &[usize], channels: usize, len: usize, max_tokens: usize) -> Vec<f32> {
    let per = len / max_tokens;
    let mut v = Vec::with_capacity(ns.len() * channels * len);
    for &n in ns {
        for _ in 0..channels {
            v.extend((0..len).map(|p| if p < n * per { 1.0 } else { 0.0 }));
        }
    }
    v
}

/// The convolution head's masks, which depend only on the chosen lengths `ns`.
pub(super) fn write_conv_masks<B: Backend>(
    x: &Executable<'_, B>,
    inp: &ConvDecoderInputs,
    c: &ConvDecoderConfig,
    ns: &[usize],
    max_tokens: usize,
) -> Result<()> {
    x.write_f32(
        inp.in_mask,
        &channel_mask(ns, c.input, max_tokens, max_tokens),
    )?;
    for (i, &m) in inp.masks.iter().enumerate() {
        x.write_f32(m, &channel_mask(ns, c.width, max_tokens << i, max_tokens))?;
    }
    x.write_f32(
        inp.out_mask,
        &channel_mask(ns, c.output, max_tokens << c.down_t, max_tokens),
    )
}

/// The convolution head's dense conditions.
pub(super) fn write_conv_conditions<B: Backend>(
    x: &Executable<'_, B>,
    inp: &ConvDecoderInputs,
    c: &ConvDecoderConfig,
    target: &[f32],
    has: &[bool],
    external: &[f32],
) -> Result<()> {
    x.write_f32(inp.target, target)?;
    for (i, &(h, nh)) in inp.has.iter().enumerate() {
        let (a, b) = has_pair(has, c.width >> (c.down_t - i));
        x.write_f32(h, &a)?;
        x.write_f32(nh, &b)?;
    }
    x.write_f32(inp.external, external)
}
