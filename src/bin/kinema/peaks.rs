//! The rows of the kernel table that only one backend has: the CPU's register-only FMA (and
//! AVX-512 BF16) peaks, the Vulkan device's cooperative-matrix peak, and GPU time from device
//! timestamps. The generic measurement (`kinema::bench`) knows neither backend.

use std::time::Duration;

use kinema::Backend;
use kinema::bench::{self, Measurement, Recorded};
use kinema::cpu::{Isa, peak};
use kinema::tensor::DType;
use kinema::vulkan::VulkanBackend;

/// Add the median GPU time of `samples` submissions of the op to `m`, from `b`'s timestamps
/// (`b` must be a Vulkan backend created with profiling on).
pub fn add_gpu_time(
    m: &mut Measurement,
    b: &VulkanBackend,
    dtype: DType,
    samples: usize,
) -> kinema::Result<()> {
    let d = bench::parse_shape(&m.shape)?;
    let Recorded { rec, flops, .. } = bench::record(b, &m.op, &d, dtype)?;
    b.submit(&rec)?;
    b.sync()?;
    let mut times = Vec::with_capacity(samples.max(1));
    for _ in 0..samples.max(1) {
        b.submit(&rec)?;
        b.sync()?;
        let rows = b.last_profile();
        if rows.is_empty() {
            return Ok(());
        }
        times.push(rows.iter().map(|r| r.total_ms).sum::<f64>() / 1e3);
    }
    times.sort_by(f64::total_cmp);
    let gpu = times[times.len() / 2];
    m.gpu_s = Some(gpu);
    m.gpu_gflops = (flops > 0.0 && gpu > 0.0).then(|| flops / gpu / 1e9);
    Ok(())
}

/// The machine's f32 FMA peak for `isa` on `threads` threads (a register-only loop; see
/// `kinema::cpu::peak`), reported as a measurement with op `fma_peak`, and the AVX-512 BF16
/// dot-product peak as `bf16_dot_peak` where the CPU has it.
pub fn cpu_peaks(isa: Isa, threads: usize) -> Vec<Measurement> {
    let d = Duration::from_millis(500);
    let mk = |op: &str, dtype: &str, g: f64| Measurement {
        op: op.to_string(),
        shape: "registers".to_string(),
        dtype: dtype.to_string(),
        backend: "cpu".to_string(),
        isa: isa.name().to_string(),
        threads,
        precision: "strict".to_string(),
        cooperative_matrix: false,
        median_s: d.as_secs_f64(),
        min_s: d.as_secs_f64(),
        samples: 1,
        iters_per_sample: 1,
        gflops: Some(g),
        gbps: None,
        gpu_s: None,
        gpu_gflops: None,
    };
    let mut v = vec![mk(
        "fma_peak",
        "f32",
        peak::fma_peak_gflops(isa, threads, d),
    )];
    if isa == Isa::Avx512
        && let Some(g) = peak::bf16_dot_peak_gflops(threads, d)
    {
        v.push(mk("bf16_dot_peak", "bf16", g));
    }
    v
}

/// The Vulkan device's cooperative-matrix multiply-add peak
/// ([`VulkanBackend::coopmat_peak_gflops`]) as a measurement with op
/// `coopmat_peak`; `None` on a device without 16 x 16 x 16 f16 cooperative matrices.
pub fn coopmat_peak(b: &VulkanBackend) -> kinema::Result<Option<Measurement>> {
    let Some(g) = b.coopmat_peak_gflops()? else {
        return Ok(None);
    };
    let info = b.info();
    Ok(Some(Measurement {
        op: "coopmat_peak".to_string(),
        shape: "registers".to_string(),
        dtype: "f16".to_string(),
        backend: info.kind.to_string(),
        isa: info.device,
        threads: 1,
        precision: info.precision.name().to_string(),
        cooperative_matrix: true,
        median_s: 0.0,
        min_s: 0.0,
        samples: 3,
        iters_per_sample: 1,
        gflops: Some(g),
        gbps: None,
        gpu_s: None,
        gpu_gflops: None,
    }))
}

/// The Vulkan device's global-memory read bandwidth ([`VulkanBackend::read_peak_gbps`]) as
/// measurements with op `read_peak`: contiguous reads (shape `<size>MiB`), then the lane
/// linears' pattern over rows of 8 KiB, a Llama-3-8B bf16 weight row (shape `<size>MiB/8KiB-rows`).
pub fn read_peak(b: &VulkanBackend) -> kinema::Result<Vec<Measurement>> {
    let info = b.info();
    let mut v = Vec::new();
    for rows in [None, Some(8192)] {
        let (bytes, g) = b.read_peak_gbps(rows)?;
        let shape = match rows {
            None => format!("{}MiB", bytes >> 20),
            Some(r) => format!("{}MiB/{}KiB-rows", bytes >> 20, r >> 10),
        };
        v.push(Measurement {
            op: "read_peak".to_string(),
            shape,
            dtype: "u32".to_string(),
            backend: info.kind.to_string(),
            isa: info.device.clone(),
            threads: 1,
            precision: info.precision.name().to_string(),
            cooperative_matrix: info.cooperative_matrix,
            median_s: 0.0,
            min_s: 0.0,
            samples: 5,
            iters_per_sample: 1,
            gflops: None,
            gbps: Some(g),
            gpu_s: None,
            gpu_gflops: None,
        });
    }
    Ok(v)
}
