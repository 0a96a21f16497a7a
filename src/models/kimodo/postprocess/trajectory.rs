//! Upstream's `TrajectoryCorrector` (`MotionCorrection/src/cpp/AnimProcessing/
//! TrajectoryCorrector.cpp`): warp a 1-D or 2-D trajectory so that it hits given values on
//! pinned frames and stays within a margin of given values on margin frames, while keeping
//! its positions, velocities and accelerations as close as possible to the original's.
//!
//! `E(x) = 1/2 (x - x_t)ᵀ N (x - x_t)` with `N = k_p I + k_v VᵀV + k_a AᵀA` (`V` the N-1
//! forward differences, `A` the N-2 second differences), subject to `x_i = o_i` on pinned
//! frames and `|x_i - o_i| <= margin_i` on margin frames, solved by 100 ADMM iterations
//! (`TrajectoryCorrector.cpp#L129-253`, #L256-312). All in f64 as upstream (Eigen doubles).
//!
//! Upstream factors the reduced system with Eigen's `SparseLU`. The matrix is symmetric
//! positive definite and pentadiagonal (removing pinned rows and columns keeps the band), so
//! this port factors it as a banded `L D Lᵀ`: the same solution, with round-off of order
//! 1e-16 relative, far below the f32 the results are stored in.
//!
//! Upstream quirk kept: the velocity weights passed to the constructor have no effect, since
//! `multVelWeights` (#L46-71) builds the weighted triplets and never stores them.

/// How a frame is constrained (`margins[i]` upstream: `< 0`, `== 0`, `> 0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Margin {
    Free,
    Pinned,
    Within(f64),
}

impl Margin {
    /// Upstream's encoding: negative free, zero pinned, positive a margin.
    pub fn from_value(m: f64) -> Margin {
        if m > 0.0 {
            Margin::Within(m)
        } else if m == 0.0 {
            Margin::Pinned
        } else {
            Margin::Free
        }
    }
}

/// The symmetric pentadiagonal `N`: `diag[i]`, `off1[i] = N(i, i+1)`, `off2[i] = N(i, i+2)`.
struct Band {
    diag: Vec<f64>,
    off1: Vec<f64>,
    off2: Vec<f64>,
}

impl Band {
    fn get(&self, i: usize, j: usize) -> f64 {
        let (a, b) = if i <= j { (i, j) } else { (j, i) };
        match b - a {
            0 => self.diag[a],
            1 => self.off1[a],
            2 => self.off2[a],
            _ => 0.0,
        }
    }
}

/// A prepared corrector for trajectories of `margins.len()` frames.
pub struct TrajectoryCorrector {
    n: Band,
    margin_locs: Vec<usize>,
    margin_vals: Vec<f64>,
    pinned: Vec<usize>,
    free: Vec<usize>,
    /// ADMM step size, an f32 as upstream (`m_admm_stepsize`).
    rho: f32,
    /// `L D Lᵀ` of the free rows and columns of `N + rho Sᵀ S`: unit lower band `l1`, `l2`
    /// and the diagonal `d`, indexed by position in `free`.
    l1: Vec<f64>,
    l2: Vec<f64>,
    d: Vec<f64>,
    admm_iters: usize,
}

impl TrajectoryCorrector {
    /// `TrajectoryCorrector::TrajectoryCorrector` (`TrajectoryCorrector.cpp#L129-253`). The
    /// weights are f32 as upstream passes them, widened to f64 where Eigen multiplies.
    pub fn new(margins: &[f64], pos_weight: f32, vel_weight: f32, acc_weight: f32) -> Self {
        let frames = margins.len();
        let mut margin_locs = Vec::new();
        let mut margin_vals = Vec::new();
        let mut pinned = Vec::new();
        let mut free = Vec::new();
        for (i, &m) in margins.iter().enumerate() {
            match Margin::from_value(m) {
                Margin::Within(v) => {
                    margin_locs.push(i);
                    margin_vals.push(v);
                    free.push(i);
                }
                Margin::Pinned => pinned.push(i),
                Margin::Free => free.push(i),
            }
        }
        let n = normal_matrix(frames, pos_weight, vel_weight, acc_weight);
        // #L213-218: the step size from the largest diagonal entry, in f32.
        let diag_max = n.diag.iter().fold(0.0f64, |m, &v| m.max(v));
        let rho = 0.5f32 * (diag_max as f32).sqrt();
        let mut c = TrajectoryCorrector {
            n,
            margin_locs,
            margin_vals,
            pinned,
            free,
            rho,
            l1: Vec::new(),
            l2: Vec::new(),
            d: Vec::new(),
            admm_iters: 100,
        };
        c.factor();
        c
    }

    /// Banded `L D Lᵀ` of `M = (N + rho diag(margin frames))` restricted to the free frames
    /// (#L226-252). Entries between free frames more than 2 apart are zero in `N`.
    fn factor(&mut self) {
        let k = self.free.len();
        let mut is_margin = vec![false; self.n.diag.len()];
        for &i in &self.margin_locs {
            is_margin[i] = true;
        }
        let m = |a: usize, b: usize| -> f64 {
            let (ia, ib) = (self.free[a], self.free[b]);
            let mut v = self.n.get(ia, ib);
            if ia == ib && is_margin[ia] {
                v += f64::from(self.rho);
            }
            v
        };
        let mut d = vec![0.0; k];
        let mut l1 = vec![0.0; k];
        let mut l2 = vec![0.0; k];
        for i in 0..k {
            // L(i, i-2) and L(i, i-1) from M(i, i-2), M(i, i-1).
            if i >= 2 {
                l2[i] = m(i, i - 2) / d[i - 2];
            }
            if i >= 1 {
                let mut v = m(i, i - 1);
                if i >= 2 {
                    v -= l2[i] * d[i - 2] * l1[i - 1];
                }
                l1[i] = v / d[i - 1];
            }
            let mut di = m(i, i);
            if i >= 1 {
                di -= l1[i] * l1[i] * d[i - 1];
            }
            if i >= 2 {
                di -= l2[i] * l2[i] * d[i - 2];
            }
            d[i] = di;
        }
        self.l1 = l1;
        self.l2 = l2;
        self.d = d;
    }

    fn solve(&self, rhs: &mut [f64]) {
        let k = rhs.len();
        for i in 0..k {
            if i >= 1 {
                rhs[i] -= self.l1[i] * rhs[i - 1];
            }
            if i >= 2 {
                rhs[i] -= self.l2[i] * rhs[i - 2];
            }
        }
        for (r, d) in rhs.iter_mut().zip(&self.d) {
            *r /= d;
        }
        for i in (0..k).rev() {
            if i + 1 < k {
                rhs[i] -= self.l1[i + 1] * rhs[i + 1];
            }
            if i + 2 < k {
                rhs[i] -= self.l2[i + 2] * rhs[i + 2];
            }
        }
    }

    /// `TrajectoryCorrector::Interpolate` (#L256-312) on `cols` interleaved channels
    /// (`x[frame * cols + c]`): `reference` is the trajectory to preserve, `observations`
    /// the values to hit (read on pinned and margin frames only).
    pub fn interpolate(&self, observations: &[f64], reference: &[f64], cols: usize) -> Vec<f64> {
        if self.pinned.is_empty() && self.margin_locs.is_empty() {
            return reference.to_vec();
        }
        let nm = self.margin_locs.len();
        let mut x = reference.to_vec();
        if nm == 0 {
            self.x_update(&mut x, &[], &[], reference, observations, cols);
            return x;
        }
        let mut z = vec![0.0; nm * cols];
        let mut z_t = vec![0.0; nm * cols];
        let mut u = vec![0.0; nm * cols];
        for (i, &f) in self.margin_locs.iter().enumerate() {
            for j in 0..cols {
                z_t[i * cols + j] = observations[f * cols + j];
                z[i * cols + j] = reference[f * cols + j];
            }
        }
        for _ in 0..self.admm_iters {
            self.x_update(&mut x, &z, &u, reference, observations, cols);
            self.z_update(&mut z, &x, &z_t, &u, cols);
            // #L507-523: u += S x - z.
            for (i, &f) in self.margin_locs.iter().enumerate() {
                for j in 0..cols {
                    u[i * cols + j] += x[f * cols + j] - z[i * cols + j];
                }
            }
        }
        x
    }

    /// `x_update` (#L314-459): `r = N (x_t - x_o on pinned frames) + rho (z - u)` on margin
    /// frames, solve on the free frames, copy the observations onto the pinned ones.
    fn x_update(&self, x: &mut [f64], z: &[f64], u: &[f64], x_t: &[f64], x_o: &[f64], cols: usize) {
        let frames = self.n.diag.len();
        let mut diffs = x_t.to_vec();
        for &i in &self.pinned {
            for j in 0..cols {
                diffs[i * cols + j] -= x_o[i * cols + j];
            }
        }
        // Sparse (column-major) times dense: each row sums its entries in column order.
        let mut r = vec![0.0; frames * cols];
        for i in 0..frames {
            for j in 0..cols {
                let mut acc = 0.0;
                for k in i.saturating_sub(2)..(i + 3).min(frames) {
                    acc += self.n.get(i, k) * diffs[k * cols + j];
                }
                r[i * cols + j] = acc;
            }
        }
        let rho = f64::from(self.rho);
        for (m, &f) in self.margin_locs.iter().enumerate() {
            for j in 0..cols {
                r[f * cols + j] += rho * (z[m * cols + j] - u[m * cols + j]);
            }
        }
        let mut col = vec![0.0; self.free.len()];
        for j in 0..cols {
            for (k, &f) in self.free.iter().enumerate() {
                col[k] = r[f * cols + j];
            }
            self.solve(&mut col);
            for (k, &f) in self.free.iter().enumerate() {
                x[f * cols + j] = col[k];
            }
        }
        for &i in &self.pinned {
            for j in 0..cols {
                x[i * cols + j] = x_o[i * cols + j];
            }
        }
    }

    /// `z_update` (#L461-505): project `S x + u` onto the ball of radius `margin` around the
    /// target.
    fn z_update(&self, z: &mut [f64], x: &[f64], z_t: &[f64], u: &[f64], cols: usize) {
        for (i, &f) in self.margin_locs.iter().enumerate() {
            let row = i * cols;
            for j in 0..cols {
                z[row + j] = x[f * cols + j] + u[row + j] - z_t[row + j];
            }
            let mut norm = 0.0f64;
            for j in 0..cols {
                norm += z[row + j] * z[row + j];
            }
            let norm = norm.sqrt();
            if norm > self.margin_vals[i] {
                for j in 0..cols {
                    z[row + j] = z[row + j] * self.margin_vals[i] / norm;
                }
            }
            for j in 0..cols {
                z[row + j] += z_t[row + j];
            }
        }
    }
}

/// `m_N = k_p I + k_v VᵀV + k_a AᵀA` (#L74-127, #L211), summed as Eigen evaluates the
/// expression: `(k_p I + k_v VᵀV) + k_a AᵀA`, each weight widened from f32. `V` keeps the
/// N-1 rows with two entries, `A` the N-2 rows with three (`removeRows`, #L9-44).
fn normal_matrix(frames: usize, pw: f32, vw: f32, aw: f32) -> Band {
    let (pw, vw, aw) = (f64::from(pw), f64::from(vw), f64::from(aw));
    let mut vtv = Band {
        diag: vec![0.0; frames],
        off1: vec![0.0; frames],
        off2: vec![0.0; frames],
    };
    let mut ata = Band {
        diag: vec![0.0; frames],
        off1: vec![0.0; frames],
        off2: vec![0.0; frames],
    };
    for i in 0..frames.saturating_sub(1) {
        // Row e_{i+1} - e_i.
        vtv.diag[i] += 1.0;
        vtv.diag[i + 1] += 1.0;
        vtv.off1[i] -= 1.0;
    }
    for i in 0..frames.saturating_sub(2) {
        // Row -e_i + 2 e_{i+1} - e_{i+2}.
        let row = [-1.0, 2.0, -1.0];
        for a in 0..3 {
            ata.diag[i + a] += row[a] * row[a];
            for b in a + 1..3 {
                let v = row[a] * row[b];
                if b - a == 1 {
                    ata.off1[i + a] += v;
                } else {
                    ata.off2[i + a] += v;
                }
            }
        }
    }
    let has_v = |i: usize, j: usize| i.max(j) < frames && frames >= 2 && j - i <= 1;
    let has_a = |i: usize, j: usize| i.max(j) < frames && frames >= 3 && j - i <= 2;
    let entry = |i: usize, j: usize, v: f64, a: f64| -> f64 {
        // Entries a matrix does not store are absent from Eigen's sum, not added as zeros.
        let mut s = if i == j { pw } else { 0.0 };
        if has_v(i, j) {
            s += vw * v;
        }
        if has_a(i, j) {
            s += aw * a;
        }
        s
    };
    let mut n = Band {
        diag: vec![0.0; frames],
        off1: vec![0.0; frames],
        off2: vec![0.0; frames],
    };
    for i in 0..frames {
        n.diag[i] = entry(i, i, vtv.diag[i], ata.diag[i]);
        if i + 1 < frames {
            n.off1[i] = entry(i, i + 1, vtv.off1[i], ata.off1[i]);
        }
        if i + 2 < frames {
            n.off2[i] = entry(i, i + 2, 0.0, ata.off2[i]);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_constraint_returns_the_reference() {
        let c = TrajectoryCorrector::new(&[-1.0; 6], 0.01, 1.0, 10.0);
        let r = [1.0, 2.0, 4.0, 3.0, 0.5, 0.25];
        assert_eq!(c.interpolate(&[0.0; 6], &r, 1), r.to_vec());
    }

    #[test]
    fn pins_hit_their_values_and_the_rest_follows_smoothly() {
        let mut m = vec![-1.0; 20];
        m[10] = 0.0;
        let c = TrajectoryCorrector::new(&m, 0.01, 1.0, 10.0);
        let reference: Vec<f64> = (0..20).map(|i| i as f64 * 0.1).collect();
        let mut obs = vec![0.0; 20];
        obs[10] = 2.0;
        let x = c.interpolate(&obs, &reference, 1);
        assert_eq!(x[10], 2.0);
        // The offset (+1 at the pin) spreads to the neighbours and decays away from it.
        assert!(x[9] - reference[9] > 0.5 && x[0] - reference[0] < x[9] - reference[9]);
        // The solution satisfies the normal equations on the free frames.
        let n = normal_matrix(20, 0.01, 1.0, 10.0);
        for i in (0..20).filter(|&i| i != 10) {
            let mut g = 0.0;
            for k in 0..20 {
                g += n.get(i, k) * (x[k] - reference[k]);
            }
            assert!(g.abs() < 1e-9, "gradient {g} at {i}");
        }
    }

    #[test]
    fn margins_keep_the_trajectory_inside_the_ball() {
        let mut m = vec![-1.0; 12];
        for v in m.iter_mut().skip(4).take(4) {
            *v = 0.04;
        }
        let c = TrajectoryCorrector::new(&m, 0.001, 1.0, 10.0);
        let reference = vec![0.0; 24];
        let mut obs = vec![0.0; 24];
        for f in 4..8 {
            obs[f * 2] = 0.3;
            obs[f * 2 + 1] = -0.2;
        }
        let x = c.interpolate(&obs, &reference, 2);
        for f in 4..8 {
            let d = ((x[f * 2] - 0.3).powi(2) + (x[f * 2 + 1] + 0.2).powi(2)).sqrt();
            assert!(d < 0.04 + 1e-3, "frame {f} is {d} from its target");
        }
    }
}
