//! The graph's diffusion and motion ops: positional encoding, the DDIM step, classifier-free
//! guidance and Kimodo's root bridge.

use super::*;

impl Graph {
    /// Sinusoidal positional-encoding rows `start..start+len` of width `dim`.
    pub fn posenc(&mut self, start: usize, len: usize, dim: usize) -> Result<TensorId> {
        if !dim.is_multiple_of(2) {
            return Err(self.err("posenc", format!("dim {dim} must be even")));
        }
        self.push(
            Op::PosEnc(PosEncParams { start, len, dim }),
            &[],
            DType::F32,
            &[len, dim],
        )
    }

    /// One DDIM update; `coef` is an f32 `[4]` tensor (usually an input written every step).
    pub fn ddim(&mut self, x_t: TensorId, x0: TensorId, coef: TensorId) -> Result<TensorId> {
        const OP: &str = "ddim";
        let xs = self.check(OP, "x_t", x_t, &[DType::F32])?.shape.clone();
        let x0s = self.check(OP, "x0", x0, &[DType::F32])?.shape.clone();
        if xs != x0s {
            return Err(self.err(OP, format!("x_t {xs:?} and x0 {x0s:?} differ")));
        }
        self.check_vec(OP, "coef", coef, 4)?;
        self.push(
            Op::Ddim(DdimParams {
                n: xs.iter().product(),
            }),
            &[Some(x_t), Some(x0), Some(coef)],
            DType::F32,
            &xs,
        )
    }

    /// Classifier-free guidance over `rows [r, ..]` (r = 2 or 3): output `rows.shape[1..]`.
    pub fn cfg(&mut self, rows: TensorId, w_text: f32, w_constraint: f32) -> Result<TensorId> {
        const OP: &str = "cfg";
        let rs = self.check(OP, "rows", rows, &[DType::F32])?.shape.clone();
        if rs.len() < 2 || !(rs[0] == 2 || rs[0] == 3) {
            return Err(self.err(OP, format!("rows {rs:?} must be [2 or 3, ..]")));
        }
        let p = CfgParams {
            n: rs[1..].iter().product(),
            rows: rs[0],
            w_text,
            w_constraint,
        };
        self.push(Op::Cfg(p), &[Some(rows)], DType::F32, &rs[1..])
    }

    /// Kimodo's global-to-local root bridge (see [`RootBridgeParams`]): `x [p.rows,
    /// p.frames, 5]` -> `[p.rows, p.frames, 4]`.
    pub fn root_bridge(&mut self, x: TensorId, p: &RootBridgeParams) -> Result<TensorId> {
        const OP: &str = "root_bridge";
        let xs = self.check(OP, "x", x, &[DType::F32])?.shape.clone();
        if xs != [p.rows, p.frames, 5] {
            return Err(self.err(
                OP,
                format!("x {xs:?} must be [{}, {}, 5]", p.rows, p.frames),
            ));
        }
        if p.frames < 2 {
            return Err(self.err(
                OP,
                format!(
                    "{} frame(s); the root velocities need at least 2 frames",
                    p.frames
                ),
            ));
        }
        self.push(
            Op::RootBridge(*p),
            &[Some(x)],
            DType::F32,
            &[p.rows, p.frames, 4],
        )
    }
}
