//! Shape and stride layout, kept apart from storage (as candle's `Layout`): a view over a
//! buffer is `(shape, strides, offset)` in elements.

use crate::error::{Error, Result};

/// Highest rank a layout may have. Kernels with strided loops (copy) support this many.
pub const MAX_RANK: usize = 6;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

impl Layout {
    /// A contiguous row-major layout.
    pub fn contiguous(shape: &[usize]) -> Result<Layout> {
        if shape.len() > MAX_RANK {
            return Err(Error::Shape(format!(
                "rank {} exceeds the maximum of {MAX_RANK}",
                shape.len()
            )));
        }
        let mut strides = vec![0; shape.len()];
        let mut acc: usize = 1;
        for i in (0..shape.len()).rev() {
            strides[i] = acc;
            acc = acc
                .checked_mul(shape[i])
                .ok_or_else(|| Error::Shape(format!("shape {shape:?} overflows usize")))?;
        }
        Ok(Layout {
            shape: shape.to_vec(),
            strides,
            offset: 0,
        })
    }

    /// A layout with explicit strides and offset (in elements).
    pub fn strided(shape: &[usize], strides: &[usize], offset: usize) -> Result<Layout> {
        if shape.len() != strides.len() || shape.len() > MAX_RANK {
            return Err(Error::Shape(format!(
                "shape {shape:?} and strides {strides:?} must have the same rank <= {MAX_RANK}"
            )));
        }
        let l = Layout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        };
        l.span()?;
        Ok(l)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn offset(&self) -> usize {
        self.offset
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// One past the highest element index this layout touches (0 when it is empty).
    pub fn span(&self) -> Result<usize> {
        if self.shape.contains(&0) {
            return Ok(self.offset);
        }
        let mut hi = self.offset;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            hi = (n - 1)
                .checked_mul(s)
                .and_then(|v| v.checked_add(hi))
                .ok_or_else(|| Error::Shape(format!("layout {self:?} overflows usize")))?;
        }
        Ok(hi + 1)
    }

    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != acc {
                return false;
            }
            acc *= self.shape[i];
        }
        true
    }

    /// Swap two dimensions without moving data.
    pub fn transpose(&self, a: usize, b: usize) -> Result<Layout> {
        if a >= self.rank() || b >= self.rank() {
            return Err(Error::Shape(format!(
                "transpose({a}, {b}) on a rank-{} layout",
                self.rank()
            )));
        }
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        Ok(l)
    }

    /// Reorder dimensions: new dim `i` is old dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        let mut seen = [false; MAX_RANK];
        if perm.len() != self.rank() {
            return Err(Error::Shape(format!(
                "permutation {perm:?} has the wrong rank for shape {:?}",
                self.shape
            )));
        }
        for &p in perm {
            if p >= self.rank() || seen[p] {
                return Err(Error::Shape(format!("{perm:?} is not a permutation")));
            }
            seen[p] = true;
        }
        Ok(Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }

    /// Restrict dimension `dim` to `start..start+len`.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Layout> {
        if dim >= self.rank() || start.checked_add(len).is_none_or(|e| e > self.shape[dim]) {
            return Err(Error::Shape(format!(
                "narrow(dim {dim}, {start}..{}) outside shape {:?}",
                start.saturating_add(len),
                self.shape
            )));
        }
        let mut l = self.clone();
        l.offset += start * self.strides[dim];
        l.shape[dim] = len;
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_and_views() {
        let l = Layout::contiguous(&[2, 3, 4]).unwrap();
        assert_eq!(l.strides(), &[12, 4, 1]);
        assert!(l.is_contiguous());
        assert_eq!(l.span().unwrap(), 24);
        let t = l.transpose(1, 2).unwrap();
        assert_eq!(t.shape(), &[2, 4, 3]);
        assert!(!t.is_contiguous());
        let n = l.narrow(2, 1, 2).unwrap();
        assert_eq!(n.offset(), 1);
        assert_eq!(n.span().unwrap(), 1 + 12 + 8 + 1 + 1);
        assert!(l.narrow(2, 3, 2).is_err());
        assert!(l.permute(&[0, 0, 1]).is_err());
        assert_eq!(l.permute(&[2, 0, 1]).unwrap().shape(), &[4, 2, 3]);
        assert!(Layout::contiguous(&[usize::MAX, 2]).is_err());
        assert!(Layout::contiguous(&[1; 7]).is_err());
    }
}
