//! Graph tests: shape checks name the node, pruning, buffer reuse from liveness, weights
//! borrowed from a memory map, and re-running one compiled graph with new inputs.

mod common;

use std::io::Write;
use std::sync::Arc;

use common::*;
use kinema::Error;
use kinema::backend::{Backend, Precision};
use kinema::cpu::{self, CpuBackend, Weights};
use kinema::graph::Graph;
use kinema::ops::*;
use kinema::tensor::{DType, HostTensor};

fn cpu() -> CpuBackend {
    CpuBackend::new(Precision::Strict).unwrap()
}

/// A two-layer MLP with LayerNorm, checked against the scalar references, run three times with
/// different inputs through the same compiled graph.
#[test]
fn mlp_matches_references_and_reruns_with_new_inputs() {
    let (m, k, h, n) = (5, 24, 40, 7);
    let mut r = Rng(11);
    let w1 = r.vec(h * k, -0.5, 0.5);
    let b1 = r.vec(h, -0.5, 0.5);
    let w2 = r.vec(n * h, -0.5, 0.5);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[m, k]).unwrap();
    let w1t = g
        .weight("w1", HostTensor::from_f32(&[h, k], &w1).unwrap())
        .unwrap();
    let b1t = g
        .weight("b1", HostTensor::from_f32(&[h], &b1).unwrap())
        .unwrap();
    let w2t = g
        .weight("w2", HostTensor::from_f32(&[n, h], &w2).unwrap())
        .unwrap();
    let a = g.linear(x, w1t, Some(b1t), Activation::Gelu).unwrap();
    let a = g.layer_norm(a, None, None, 1e-5).unwrap();
    let y = g.linear(a, w2t, None, Activation::None).unwrap();
    g.output(y);
    let b = cpu();
    let exe = g.compile(&b).unwrap();
    for run in 0..3 {
        let xv = r.vec(m * k, -2.0, 2.0);
        exe.write_f32(x, &xv).unwrap();
        exe.run().unwrap();
        let got = exe.read_f32(y).unwrap();
        let mut h1 = vec![0f32; m * h];
        cpu::matmul::reference::linear(
            &LinearParams {
                m,
                n: h,
                k,
                activation: Activation::Gelu,
            },
            &xv,
            Weights::F32(&w1),
            Some(&b1),
            &mut h1,
        );
        let mut h2 = vec![0f32; m * h];
        cpu::norm::reference::layer_norm(
            &NormParams {
                rows: m,
                cols: h,
                eps: 1e-5,
            },
            &h1,
            None,
            None,
            &mut h2,
        );
        let mut want = vec![0f32; m * n];
        cpu::matmul::reference::linear(
            &LinearParams {
                m,
                n,
                k: h,
                activation: Activation::None,
            },
            &h2,
            Weights::F32(&w2),
            None,
            &mut want,
        );
        assert_close(&format!("run {run}"), &got, &want, 1e-4, 1e-5);
    }
}

#[test]
fn shape_errors_name_the_node() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[3, 8]).unwrap();
    let y = g.activation(x, Activation::Relu).unwrap();
    let w = g
        .weight("w", HostTensor::from_f32(&[4, 9], &[0.0; 36]).unwrap())
        .unwrap();
    match g.linear(y, w, None, Activation::None) {
        Err(Error::Graph { node, op, msg }) => {
            assert_eq!((node, op), (1, "linear"));
            assert!(msg.contains("[3, 8]") && msg.contains("[4, 9]"), "{msg}");
        }
        other => panic!("expected a graph error, got {other:?}"),
    }
    let ids = g.input("ids", DType::F32, &[3]).unwrap();
    let e = g.embedding(ids, w).unwrap_err().to_string();
    assert!(
        e.contains("embedding") && e.contains("f32") && e.contains("u32"),
        "{e}"
    );
    // The fused residual norm wants a residual of x's shape and gamma/beta of its width.
    let r = g.input("r", DType::F32, &[3, 9]).unwrap();
    let e = g
        .add_layer_norm(x, r, None, None, 1e-5)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("add_layer_norm") && e.contains("[3, 8]") && e.contains("[3, 9]"),
        "{e}"
    );
    let gamma = g.input("gamma", DType::F32, &[9]).unwrap();
    let e = g.add_layer_norm(x, y, Some(gamma), None, 1e-5).unwrap_err();
    assert!(e.to_string().contains("gamma"), "{e}");
    assert!(g.add_layer_norm(x, y, None, None, 1e-5).is_ok());
    // The masked chain wants a mask and a residual of x's shape.
    let e = g
        .masked_act(x, r, None, Activation::Relu, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("masked_act") && e.contains("m [3, 9]") && e.contains("[3, 8]"),
        "{e}"
    );
    let e = g
        .masked_act(x, y, Some(r), Activation::None, false)
        .unwrap_err();
    assert!(e.to_string().contains("r [3, 9]"), "{e}");
    assert!(g.masked_act(x, y, Some(y), Activation::Relu, true).is_ok());
    assert!(g.reshape(x, &[5, 5]).is_err());
    assert!(g.concat(&[x, w], 0).is_err());
    let empty = Graph::new();
    assert!(empty.compile(&cpu()).is_err());
}

/// A chain of 12 elementwise ops needs two buffers, not twelve.
#[test]
fn liveness_reuses_buffers() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[1000]).unwrap();
    let mut t = x;
    for i in 0..12 {
        t = if i % 2 == 0 {
            g.scale(t, 2.0).unwrap()
        } else {
            g.activation(t, Activation::Relu).unwrap()
        };
    }
    g.output(t);
    let b = cpu();
    let exe = g.compile(&b).unwrap();
    assert_eq!(exe.plan().values, 12);
    assert_eq!(exe.plan().slot_bytes.len(), 2, "{:?}", exe.plan());
    let xv: Vec<f32> = (0..1000).map(|i| i as f32 - 500.0).collect();
    exe.write_f32(x, &xv).unwrap();
    exe.run().unwrap();
    let want: Vec<f32> = xv.iter().map(|v| (v * 64.0).max(0.0)).collect();
    assert_eq!(exe.read_f32(t).unwrap(), want);
    // Intermediate values are not readable: their buffers were reused.
    assert!(exe.read_f32(x).is_err());
}

/// Nodes the outputs do not need are not run (this dead branch would fail if it ran).
#[test]
fn unneeded_nodes_are_pruned() {
    let mut g = Graph::new();
    let ids = g.input("ids", DType::U32, &[2]).unwrap();
    let table = g
        .weight("t", HostTensor::from_f32(&[2, 3], &[0.0; 6]).unwrap())
        .unwrap();
    let x = g.input("x", DType::F32, &[4]).unwrap();
    let _dead = g.embedding(ids, table).unwrap();
    let y = g.scale(x, 3.0).unwrap();
    g.output(y);
    let b = cpu();
    let exe = g.compile(&b).unwrap();
    assert_eq!(exe.plan().live_nodes, vec![1]);
    exe.write_f32(x, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    exe.run().unwrap();
    assert_eq!(exe.read_f32(y).unwrap(), vec![3.0, 6.0, 9.0, 12.0]);
}

/// Views: slice, transpose, concat and reshape give the same values as index arithmetic.
#[test]
fn views_and_concat() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[2, 3, 4]).unwrap();
    let b_ = g.input("b", DType::F32, &[2, 1, 4]).unwrap();
    let c = g.concat(&[a, b_], 1).unwrap();
    let t = g.transpose(c, 1, 2).unwrap();
    let s = g.slice(t, 2, 1, 2).unwrap();
    let r = g.reshape(s, &[16]).unwrap();
    let z = g.scale(r, 1.0).unwrap();
    g.output(c);
    g.output(z);
    let be = cpu();
    let exe = g.compile(&be).unwrap();
    let av: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let bv: Vec<f32> = (100..108).map(|v| v as f32).collect();
    exe.write_f32(a, &av).unwrap();
    exe.write_f32(b_, &bv).unwrap();
    exe.run().unwrap();
    let cv = exe.read_f32(c).unwrap();
    let at = |i: usize, j: usize, k: usize| {
        if j < 3 {
            av[i * 12 + j * 4 + k]
        } else {
            bv[i * 4 + k]
        }
    };
    for i in 0..2 {
        for j in 0..4 {
            for k in 0..4 {
                assert_eq!(cv[i * 16 + j * 4 + k], at(i, j, k));
            }
        }
    }
    let zv = exe.read_f32(z).unwrap();
    // t[i, k, j] = c[i, j, k]; s = t[:, :, 1..3] -> [2, 4, 2].
    for i in 0..2 {
        for k in 0..4 {
            for jj in 0..2 {
                assert_eq!(zv[i * 8 + k * 2 + jj], at(i, jj + 1, k));
            }
        }
    }
}

/// Weights memory-mapped from a file are bound without a copy and computed with in place.
#[test]
fn mapped_weights_are_borrowed_not_copied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.bin");
    let w: Vec<f32> = (0..64).map(|v| v as f32 * 0.25).collect();
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&[0u8; 64]).unwrap();
    f.write_all(bytemuck::cast_slice(&w)).unwrap();
    drop(f);
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: the test owns the file and nothing modifies it while mapped.
    let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap());
    let host = HostTensor::from_mmap(DType::F32, &[8, 8], map.clone(), 64).unwrap();
    assert!(host.data.is_mapped());
    let b = cpu();
    let buf = b.bind_host(&host).unwrap();
    assert!(buf.is_borrowed_host());
    assert!(
        HostTensor::from_mmap(DType::F32, &[8, 8], map.clone(), 66).is_err(),
        "misaligned"
    );
    assert!(
        HostTensor::from_mmap(DType::F32, &[8, 9], map, 64).is_err(),
        "past the end"
    );

    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[1, 8]).unwrap();
    let wt = g.weight("w", host).unwrap();
    let y = g.linear(x, wt, None, Activation::None).unwrap();
    g.output(y);
    let exe = g.compile(&b).unwrap();
    exe.write_f32(x, &[1.0; 8]).unwrap();
    exe.run().unwrap();
    let got = exe.read_f32(y).unwrap();
    for (n, v) in got.iter().enumerate() {
        let want: f32 = w[n * 8..(n + 1) * 8].iter().sum();
        assert_eq!(*v, want);
    }
}

/// A DDIM-style loop: one compiled graph, the per-step coefficients written as an input before
/// each of many runs, and the state carried by the host.
#[test]
fn diffusion_loop_reuses_one_recording() {
    let n = 64;
    let mut g = Graph::new();
    let xt = g.input("x_t", DType::F32, &[n]).unwrap();
    let coef = g.input("coef", DType::F32, &[4]).unwrap();
    let x0 = g.scale(xt, 0.5).unwrap();
    let next = g.ddim(xt, x0, coef).unwrap();
    g.output(next);
    let b = cpu();
    let exe = g.compile(&b).unwrap();
    let mut state: Vec<f32> = (0..n).map(|i| i as f32 / 7.0).collect();
    for step in 0..100 {
        let c = [1.0 + step as f32 * 0.01, 0.5, 0.9, 0.1];
        exe.write_f32(coef, &c).unwrap();
        exe.write_f32(xt, &state).unwrap();
        exe.run().unwrap();
        let got = exe.read_f32(next).unwrap();
        let x0v: Vec<f32> = state.iter().map(|v| v * 0.5).collect();
        let mut want = vec![0f32; n];
        cpu::diffusion::reference::ddim(&DdimParams { n }, &state, &x0v, &c, &mut want);
        assert_eq!(got, want, "step {step}");
        state = got;
    }
}

/// The prepare pass: nodes fed only by weights and constants run once, and again only after a
/// constant is rewritten; their values keep their buffers while the per-run part reuses
/// slots. A carry moves the state into the per-run input at the end of every run.
#[test]
fn prepare_pass_and_carried_state() {
    let mut g = Graph::new();
    let w = g
        .weight(
            "w",
            HostTensor::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap(),
        )
        .unwrap();
    let c = g.constant("c", DType::F32, &[1, 2]).unwrap();
    let x = g.input("x", DType::F32, &[1, 2]).unwrap();
    let p = g.linear(c, w, None, Activation::None).unwrap();
    let pe = g.posenc(0, 1, 2).unwrap();
    let p = g.add(p, pe).unwrap();
    let t = g.scale(x, 1.0).unwrap();
    let y = g.add(t, p).unwrap();
    g.carry(y, x).unwrap();
    g.output(y);
    let b = cpu();
    let exe = g.compile(&b).unwrap();
    let prepared: Vec<&str> = exe
        .plan()
        .live_nodes
        .iter()
        .filter(|&&i| exe.plan().prepared[i])
        .map(|&i| exe.graph().nodes()[i].op.name())
        .collect();
    assert_eq!(prepared, ["linear", "posenc", "binary"]);
    // PE row 0 is [sin 0, cos 0] = [0, 1]; c . w^T = [1*1 + 1*2, 1*3 + 1*4] = [3, 7].
    exe.write_f32(c, &[1.0, 1.0]).unwrap();
    exe.write_f32(x, &[0.0, 0.0]).unwrap();
    for run in 1..=3 {
        exe.run().unwrap();
        let r = run as f32;
        assert_eq!(exe.read_f32(y).unwrap(), [3.0 * r, 8.0 * r]);
        assert_eq!(exe.read_f32(x).unwrap(), [3.0 * r, 8.0 * r]);
    }
    exe.write_f32(c, &[0.0, 0.0]).unwrap();
    exe.run().unwrap();
    assert_eq!(exe.read_f32(y).unwrap(), [9.0, 25.0]);
    // A carry must land in a per-run input of the same size.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[3]).unwrap();
    let k = g.constant("k", DType::F32, &[2]).unwrap();
    let e = g.carry(x, k).unwrap_err().to_string();
    assert!(e.contains("not a per-run input"), "{e}");
    let y = g.slice(x, 0, 0, 2).unwrap();
    let e = g.carry(y, x).unwrap_err().to_string();
    assert!(e.contains("does not fit"), "{e}");
}

/// Attention on a fused QKV projection equals attention on the three column blocks copied
/// out, bit for bit (same kernel, same values, other strides).
#[test]
fn attention_on_fused_qkv_reads_column_blocks_in_place() {
    let (batch, len, heads, hd) = (2, 7, 2, 8);
    let d = heads * hd;
    let mut r = Rng(5);
    let v = r.vec(batch * len * 3 * d, -1.0, 1.0);
    let mut g = Graph::new();
    let qkv = g.input("qkv", DType::F32, &[batch, len, 3 * d]).unwrap();
    let fused = g
        .attention_qkv(qkv, None, heads, heads, MaskKind::None)
        .unwrap();
    let q = g.slice(qkv, 2, 0, d).unwrap();
    let k = g.slice(qkv, 2, d, d).unwrap();
    let vv = g.slice(qkv, 2, 2 * d, d).unwrap();
    let split = g
        .attention(q, k, vv, None, heads, heads, MaskKind::None)
        .unwrap();
    g.output(fused);
    g.output(split);
    let b = cpu();
    let exe = g.compile(&b).unwrap();
    exe.write_f32(qkv, &v).unwrap();
    exe.run().unwrap();
    let (a, b) = (exe.read_f32(fused).unwrap(), exe.read_f32(split).unwrap());
    assert_eq!(a.len(), batch * len * d);
    assert_eq!(a, b);
    let mut g = Graph::new();
    let bad = g.input("qkv", DType::F32, &[1, 3, 10]).unwrap();
    let e = g
        .attention_qkv(bad, None, 2, 2, MaskKind::None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("attention_qkv"), "{e}");
}
