//! Criterion benches of every Vulkan kernel at the models' shapes (`kinema::bench`'s default
//! list), timed on the GPU: each sample sums the per-op timestamp-query times of the submitted
//! recordings (`VulkanOptions::profile`), so host submission overhead is not counted.
//! Throughput is FLOP/s for compute-bound ops and bytes/s for the others. Every op runs in
//! strict mode; the ops fast mode runs differently ([`FAST_OPS`]: the GEMMs and attention on
//! cooperative matrices where the device has them, the row reductions with subgroup
//! arithmetic) again in fast mode. Without a Vulkan device the bench says why and measures
//! nothing.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kinema::Precision;
use kinema::backend::Backend;
use kinema::bench::{case_op, default_cases, parse_shape, record};
use kinema::ops::OpKind;
use kinema::vulkan::{VulkanBackend, VulkanOptions};

fn vulkan_kernels(c: &mut Criterion) {
    for precision in [Precision::Strict, Precision::Fast] {
        vulkan_kernels_in(c, precision);
    }
}

/// The ops whose fast-mode kernels differ from the strict ones.
const FAST_OPS: [OpKind; 6] = [
    OpKind::Linear,
    OpKind::BatchedMatmul,
    OpKind::Attention,
    OpKind::LayerNorm,
    OpKind::RmsNorm,
    OpKind::Softmax,
];

fn vulkan_kernels_in(c: &mut Criterion, precision: Precision) {
    let mut o = match VulkanOptions::from_env(precision) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("vulkan bench skipped: {e}");
            return;
        }
    };
    o.profile = true;
    let b = match VulkanBackend::with_options(o) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("vulkan bench skipped: {e}");
            return;
        }
    };
    let device = b.device_name().to_string();
    let mode = if b.info().cooperative_matrix {
        "fast, cooperative matrix"
    } else {
        precision.name()
    };
    for (op, shape, dtype) in default_cases() {
        if precision == Precision::Fast && !case_op(op).is_some_and(|k| FAST_OPS.contains(&k)) {
            continue;
        }
        let Ok(dims) = parse_shape(&shape) else {
            continue;
        };
        let r = match record(&b, op, &dims, dtype) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("vulkan bench: {op} {shape} skipped: {e}");
                continue;
            }
        };
        let (unit, tp) = if r.flops > 0.0 {
            ("FLOP/s", Throughput::Elements(r.flops as u64))
        } else {
            ("bytes/s", Throughput::Bytes(r.bytes as u64))
        };
        let mut g = c.benchmark_group(format!("{op}/vulkan {mode} ({unit}, GPU time)"));
        g.sample_size(10)
            .measurement_time(Duration::from_secs(1))
            .warm_up_time(Duration::from_millis(300))
            .throughput(tp);
        g.bench_function(format!("{shape} {dtype} {device}"), |bch| {
            bch.iter_custom(|iters| {
                let mut gpu = 0.0;
                for _ in 0..iters {
                    b.submit(&r.rec).expect("submit");
                    b.sync().expect("sync");
                    gpu += b.last_profile().iter().map(|p| p.total_ms).sum::<f64>() / 1e3;
                }
                Duration::from_secs_f64(gpu)
            })
        });
        g.finish();
    }
}

criterion_group!(benches, vulkan_kernels);
criterion_main!(benches);
