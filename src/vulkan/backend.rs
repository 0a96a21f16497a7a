//! [`VulkanBackend`]: the dispatch trait on a Vulkan device. Ops are checked when recorded
//! (the same checks as the CPU backend, `crate::backend::check`) and recorded into a
//! [`VulkanRecording`]; `submit` queues its command buffer, `read`/`write`/`sync` wait for it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::context::{Context, Coopmat2, env_flag};
use super::memory::{Memory, VulkanBuffer};
use super::pipeline::Pipelines;
use super::probe::CoopMatShape;
use super::profile::{self, ProfileRow};
use super::recording::{RunCheck, VulkanRecording};
use super::shared::Shared;
use super::{VulkanError, backend_error, kernels};
use crate::backend::check::{BufferInfo, Checked, read_range, write_range};
use crate::backend::{Backend, BackendInfo, BufRef, MemoryUse, Precision, PrecisionChoice};
use crate::error::{Error, Result};
use crate::ops::*;
use crate::tensor::{DType, HostTensor};

/// How far the Vulkan gumbel noise `g(u) = -ln(max(-ln(max(u, 1e-20)), 1e-20))` may lie from
/// the CPU backend's, in ulp of the CPU's value beyond 2^-22 absolute: each `ln` is within
/// 0.82 ulp on either side (FreeBSD's logf on the device, glibc's on the CPU; neither is
/// correctly rounded), and the outer one also carries the inner one's relative error.
pub const GUMBEL_NOISE_ULP: f32 = 2.0;

/// How far the Vulkan posenc values may lie from the CPU backend's, absolute (both are in
/// [-1, 1]): the angles are identical, the device's sin/cos are within 7.5e-8 of the true
/// values (`kernels/glsl/posenc.comp`) and the CPU's libm within about half an ulp (3e-8).
pub const POSENC_ABS: f32 = 2.4e-7;

/// How far the Vulkan root bridge's heading velocity may lie from the CPU backend's,
/// absolute, for the statistics of the released models (local scales >= 0.17): the device's
/// atan2, sin and cos are within a few ulp, so the angle difference carries about 1e-7 rad,
/// times fps 30 over the scale. The velocities and the height are exact (bit for bit).
pub const ROOT_BRIDGE_ABS: f32 = 5e-5;

/// How to set up a [`VulkanBackend`]. [`VulkanOptions::from_env`] reads the `KINEMA_*`
/// variables named on each field.
#[derive(Clone, Debug, PartialEq)]
pub struct VulkanOptions {
    /// `Auto` becomes fast on a device with cooperative matrices, strict otherwise.
    pub precision: PrecisionChoice,
    /// A device index as `kinema info` lists them (`KINEMA_VK_DEVICE`); `None` picks a
    /// discrete GPU first.
    pub device: Option<usize>,
    /// A cap in bytes on one storage-buffer binding below the device's
    /// `maxStorageBufferRange` (`KINEMA_VK_MAX_BINDING`), to exercise split paths.
    pub max_binding: Option<u64>,
    /// Descriptor pools even where `VK_KHR_push_descriptor` exists
    /// (`KINEMA_VK_NO_PUSH_DESCRIPTOR=1`).
    pub descriptor_pools: bool,
    /// Host transfers through the staging buffer even where device memory is mapped
    /// (`KINEMA_VK_FORCE_STAGING=1`): the path of discrete GPUs, testable on lavapipe.
    pub force_staging: bool,
    /// Timestamps around every dispatch and a per-op table on stderr after each submission
    /// (`KINEMA_PROFILE=1`).
    pub profile: bool,
    /// Directory of the on-disk pipeline cache (`KINEMA_VK_PIPELINE_CACHE`: a directory, or
    /// `off`); by default `$XDG_CACHE_HOME/kinema` or `~/.cache/kinema`.
    pub pipeline_cache_dir: Option<PathBuf>,
    /// Use `VK_NV_cooperative_matrix2` for fast-mode GEMMs and attention where the device has
    /// it; false keeps the subgroup-scope `VK_KHR_cooperative_matrix` kernels
    /// (`KINEMA_VK_NO_COOPMAT2=1`).
    pub coopmat2: bool,
}

fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("kinema"))
}

impl VulkanOptions {
    /// Defaults, ignoring the environment (no disk cache).
    pub fn new(precision: impl Into<PrecisionChoice>) -> VulkanOptions {
        VulkanOptions {
            precision: precision.into(),
            device: None,
            max_binding: None,
            descriptor_pools: false,
            force_staging: false,
            profile: false,
            pipeline_cache_dir: None,
            coopmat2: true,
        }
    }

    /// Options from the `KINEMA_*` environment variables (see the fields).
    pub fn from_env(precision: impl Into<PrecisionChoice>) -> Result<VulkanOptions> {
        let number = |name: &str| -> Result<Option<u64>> {
            match std::env::var(name) {
                Err(_) => Ok(None),
                Ok(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
                    Error::InvalidArgument(format!("{name} must be a whole number, got {v:?}"))
                }),
            }
        };
        let max_binding = number("KINEMA_VK_MAX_BINDING")?;
        if max_binding.is_some_and(|m| m < 1024) {
            return Err(Error::InvalidArgument(
                "KINEMA_VK_MAX_BINDING must be at least 1024 bytes".into(),
            ));
        }
        Ok(VulkanOptions {
            precision: precision.into(),
            device: number("KINEMA_VK_DEVICE")?.map(|d| d as usize),
            max_binding,
            descriptor_pools: env_flag("KINEMA_VK_NO_PUSH_DESCRIPTOR"),
            force_staging: env_flag("KINEMA_VK_FORCE_STAGING"),
            profile: env_flag("KINEMA_PROFILE"),
            pipeline_cache_dir: match std::env::var_os("KINEMA_VK_PIPELINE_CACHE") {
                Some(v) if v == "off" => None,
                Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
                _ => default_cache_dir(),
            },
            coopmat2: !env_flag("KINEMA_VK_NO_COOPMAT2"),
        })
    }
}

pub struct VulkanBackend {
    shared: Arc<Shared>,
    /// The resolved mode.
    precision: Precision,
    last_profile: Mutex<Vec<ProfileRow>>,
    /// The status checks of submitted runs, in submission order, until a host wait sees the
    /// run finish ([`VulkanBackend::take_errors`]).
    pending: Mutex<Vec<PendingRun>>,
    /// Fast mode on a device whose B fragment layout is the one the lane-loading streaming
    /// linears assume ([`VulkanBackend::probe_lane_layout`]).
    lane: bool,
}

/// A submitted run whose status words are still to be read.
struct PendingRun {
    /// Timeline value of the submission.
    value: u64,
    /// The thread that submitted it: its errors go to that thread's `sync` and `read`, not
    /// to other threads sharing the backend.
    thread: std::thread::ThreadId,
    checks: Vec<RunCheck>,
}

/// Whether a device runs split precision: it has f16 cooperative matrices and workgroup-scope
/// ones (`VK_NV_cooperative_matrix2`).
fn split_supported(ctx: &Context) -> bool {
    ctx.coopmat.is_some() && ctx.coopmat2.is_some()
}

impl VulkanBackend {
    /// The device and settings from the environment ([`VulkanOptions::from_env`]).
    pub fn new(precision: impl Into<PrecisionChoice>) -> Result<VulkanBackend> {
        VulkanBackend::with_options(VulkanOptions::from_env(precision)?)
    }

    pub fn with_options(o: VulkanOptions) -> Result<VulkanBackend> {
        let ctx = Arc::new(Context::new(
            o.device,
            o.max_binding,
            !o.descriptor_pools,
            o.coopmat2,
        )?);
        let profile = o.profile && ctx.limits.timestamp_valid_bits > 0;
        if o.profile && !profile {
            eprintln!(
                "kinema: {} cannot write timestamps; profiling is off",
                ctx.name
            );
        }
        let pipelines = Pipelines::new(
            ctx.clone(),
            ctx.push_descriptor.is_some(),
            o.pipeline_cache_dir.as_deref(),
        )?;
        let memory = Memory::new(ctx.clone(), o.force_staging)?;
        let dummy = memory.alloc(16, true)?;
        let shared_coopmat = ctx.coopmat.is_some();
        let split = split_supported(&ctx);
        let mut b = VulkanBackend {
            shared: Arc::new(Shared {
                ctx,
                pipelines,
                memory,
                dummy,
                profile,
            }),
            precision: o.precision.resolve(shared_coopmat, split),
            last_profile: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            lane: false,
        };
        if b.gemm_coopmat().is_some() {
            b.lane = b.probe_lane_layout()?;
        }
        Ok(b)
    }

    /// Whether fast-mode linears may run the lane-loading streaming variants here (fast mode,
    /// and [`VulkanBackend::probe_lane_layout`] agreed when the backend started).
    pub fn lane_fragment_layout(&self) -> bool {
        self.lane
    }

    /// Whether the device's 16 x 16 f16 B fragments keep their elements where the lane-loading
    /// streaming linears (`linear_cm_lane_*`) assume: `coopmat_layout.comp` loads a fragment
    /// whose elements are their own positions and the table it writes is checked
    /// (`lane_layout_matches` in the GEMM policy). `false` without the 16 x 16 x 16 shape,
    /// 32-invocation subgroups, or bindings that start on 16-byte boundaries (the lane loads
    /// read every weight dtype through 16-byte views). `KINEMA_VK_DEBUG_LAYOUT=1` prints the
    /// table.
    pub fn probe_lane_layout(&self) -> Result<bool> {
        let ctx = &self.shared.ctx;
        let l = &ctx.limits;
        match ctx.coopmat {
            Some(s)
                if (s.m, s.n, s.k) == (16, 16, 16)
                    && l.subgroup_size == 32
                    && l.min_storage_offset_align.is_multiple_of(16) => {}
            _ => return Ok(false),
        }
        let len = 1 + 256;
        let y = BufRef::new(self.alloc(DType::F32, len)?, DType::F32, len);
        let mut rec = self.begin()?;
        kernels::coopmat_layout(&mut rec, &y)?;
        self.submit(&rec)?;
        self.sync()?;
        let mut bytes = vec![0u8; 4 * len];
        self.read(&y, &mut bytes)?;
        let table: Vec<f32> = bytemuck::cast_slice(&bytes).to_vec();
        if env_flag("KINEMA_VK_DEBUG_LAYOUT") {
            eprintln!("kinema: B fragment layout (length, then per invocation): {table:?}");
        }
        Ok(kernels::gemm_policy::lane_layout_matches(&table))
    }

    pub fn device_name(&self) -> &str {
        &self.shared.ctx.name
    }

    /// The device's index as `kinema info` lists it.
    pub fn device_index(&self) -> usize {
        self.shared.ctx.index
    }

    /// Whether the device is a CPU implementation (lavapipe / llvmpipe).
    pub fn is_cpu_device(&self) -> bool {
        self.shared.ctx.kind == ash::vk::PhysicalDeviceType::CPU
    }

    /// Whether descriptors are pushed (`VK_KHR_push_descriptor`) rather than pool-allocated.
    pub fn uses_push_descriptors(&self) -> bool {
        self.shared.ctx.push_descriptor.is_some()
    }

    /// The largest storage-buffer binding ops may use, in bytes.
    pub fn max_binding(&self) -> u64 {
        self.shared.ctx.limits.max_binding
    }

    /// Subgroup size of the device (kernels never assume it).
    pub fn subgroup_size(&self) -> u32 {
        self.shared.ctx.limits.subgroup_size
    }

    /// Whether the device offers the f16 cooperative matrices fast-mode GEMMs use (whatever
    /// the precision of this backend), and their shape (`16x16x16 f16*f16+f32->f32 ...`),
    /// followed by `; NV cooperative_matrix2 workgroup scope` where workgroup-scope matrices
    /// are used, and ` with reductions` where their row reductions are too (the fast
    /// attention's).
    pub fn cooperative_matrix(&self) -> Option<String> {
        let ctx = &self.shared.ctx;
        ctx.coopmat.map(|s| match ctx.coopmat2 {
            Some(c) if c.reductions => format!(
                "{}; NV cooperative_matrix2 workgroup scope with reductions",
                s.describe()
            ),
            Some(_) => format!("{}; NV cooperative_matrix2 workgroup scope", s.describe()),
            None => s.describe(),
        })
    }

    /// Whether this device runs [`Precision::Split`] (workgroup-scope cooperative matrices,
    /// `VK_NV_cooperative_matrix2`), whatever the precision of this backend: `--precision
    /// split` resolves to strict elsewhere.
    pub fn split_available(&self) -> bool {
        split_supported(&self.shared.ctx)
    }

    /// Whether the row reductions (norms, softmax) may use subgroup arithmetic: fast mode only
    /// (strict mode keeps fixed trees whose order does not depend on the device).
    fn fast_rows(&self) -> bool {
        self.precision == Precision::Fast
    }

    /// Whether layer_norm, rms_norm and softmax run their subgroup-reduction variants: fast
    /// mode on a device whose compute shaders have subgroup arithmetic.
    pub fn subgroup_reductions(&self) -> bool {
        self.fast_rows() && self.shared.ctx.limits.subgroup_arithmetic
    }

    /// The cooperative-matrix shape linear runs on: in fast mode on a device that has one.
    fn gemm_coopmat(&self) -> Option<CoopMatShape> {
        match self.precision {
            Precision::Fast => self.shared.ctx.coopmat,
            Precision::Strict | Precision::Split => None,
        }
    }

    /// The workgroup-scope cooperative matrices the split-precision linears run on: in split
    /// precision (which resolves so only on a device that has them).
    fn split_gemm(&self) -> Option<Coopmat2> {
        match self.precision {
            Precision::Split => self.shared.ctx.coopmat2,
            Precision::Strict | Precision::Fast => None,
        }
    }

    /// The cooperative-matrix attention shader (file stem) `attention` runs for `p` in fast
    /// or split precision, or `None` when it runs the strict f32 shader: strict mode, or a
    /// device, head dimension or `KINEMA_VK_ATTENTION_SHADER` no such variant fits.
    pub fn fast_attention_shader(&self, p: &AttentionParams) -> Option<&'static str> {
        let ctx = &self.shared.ctx;
        if let Some(c2) = self.split_gemm() {
            return kernels::attention_cm::split_attention_kernel(p, &c2, &ctx.limits)
                .map(|f| f.shader.info().name);
        }
        let s = self.gemm_coopmat()?;
        kernels::attention_cm::fast_attention_kernel(p, &s, ctx.coopmat2.as_ref(), &ctx.limits)
            .map(|f| f.shader.info().name)
    }

    /// The shortest wall time in seconds of `runs` submissions of `rec`, each waited for,
    /// after one untimed warm-up (the peak probes' timing).
    fn best_of(&self, rec: &VulkanRecording, runs: usize) -> Result<f64> {
        self.submit(rec)?;
        self.sync()?;
        let mut best = f64::INFINITY;
        for _ in 0..runs {
            let t = std::time::Instant::now();
            self.submit(rec)?;
            self.sync()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(best)
    }

    /// The device's cooperative-matrix multiply-add rate in GFLOP/s: 16 x 16 x 16 f16 x f16 +
    /// f32 products on operands held in registers (`coopmat_peak.comp`), the best of 3 timed
    /// runs of about 0.1 s on a fast GPU. `None` on a device without that shape.
    pub fn coopmat_peak_gflops(&self) -> Result<Option<f64>> {
        const GROUPS: u32 = 2048;
        const ITERS: u32 = 512;
        match self.shared.ctx.coopmat {
            Some(s) if (s.m, s.n, s.k) == (16, 16, 16) => {}
            _ => return Ok(None),
        }
        let len = GROUPS as usize * 4 * 256;
        let y = BufRef::new(self.alloc(DType::F32, len)?, DType::F32, len);
        let mut rec = self.begin()?;
        kernels::coopmat_peak(&mut rec, &y, GROUPS, ITERS)?;
        let best = self.best_of(&rec, 3)?;
        let flops = f64::from(GROUPS) * 4.0 * f64::from(ITERS) * 8.0 * 2.0 * 4096.0;
        Ok(Some(flops / best / 1e9))
    }

    /// The bytes read and the device's global-memory read bandwidth in GB/s: `read_peak.comp`
    /// reading a buffer of up to 512 MiB (the largest binding allows, far past the last-level
    /// cache of today's GPUs) in 16-byte words with 4 loads in flight per invocation, the best
    /// of 5 timed runs. `row_bytes` `None`: contiguously (each warp-wide load 512 bytes), the
    /// ceiling for the weight-streaming linears; `Some(b)`: as rows of `b` bytes (a multiple
    /// of 64), 64 contiguous bytes from each of 8 rows per load of 32 invocations, the access
    /// pattern of the lane-loading linears over a weight matrix with rows of `b` bytes.
    pub fn read_peak_gbps(&self, row_bytes: Option<u64>) -> Result<(u64, f64)> {
        let row_words = match row_bytes {
            None => 0,
            Some(b) if b >= 64 && b % 64 == 0 && b <= 1 << 20 => b / 16,
            Some(b) => {
                return Err(Error::InvalidArgument(format!(
                    "read_peak: rows of {b} bytes: a multiple of 64 up to 1 MiB"
                )));
            }
        };
        let max = self.shared.ctx.limits.max_binding;
        let mut bytes = (512u64 << 20).min(max & !15).max(16);
        if row_words > 0 {
            // Whole groups of 8 rows.
            bytes -= bytes % (128 * row_words);
            if bytes == 0 {
                return Err(Error::InvalidArgument(format!(
                    "read_peak: 8 rows of {} bytes exceed a binding of {max}",
                    16 * row_words
                )));
            }
        }
        let len = (bytes / 4) as usize;
        let s = BufRef::new(self.alloc(DType::F32, len)?, DType::F32, len);
        // Distinct words, so that a word read twice or not at all changes the xor of them all.
        let data: Vec<u32> = (0..len as u32)
            .map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i >> 7))
            .collect();
        let want = data.iter().fold(0u32, |a, w| a ^ w);
        self.write(&s, bytemuck::cast_slice(&data))?;
        drop(data);
        let words = bytes / 16;
        // Contiguous: enough invocations to keep every SM busy; rows: one group of 32 per 8 rows.
        // Both loops stride over the grid, so a device's workgroup-count limit only means more
        // work per invocation.
        let groups = match words.checked_div(row_words) {
            None => 8192,
            Some(rows) => (rows / 8 * 32).div_ceil(256).max(1),
        }
        .min(u64::from(self.shared.ctx.limits.max_workgroup_count[0])) as u32;
        let folds = 256 * groups as usize;
        let y = BufRef::new(self.alloc(DType::F32, folds)?, DType::F32, folds);
        let mut rec = self.begin()?;
        kernels::read_peak(&mut rec, &s, &y, [words as u32, row_words as u32], groups)?;
        let best = self.best_of(&rec, 5)?;
        let mut out = vec![0u8; 4 * folds];
        self.read(&y, &mut out)?;
        let got = bytemuck::cast_slice::<u8, u32>(&out)
            .iter()
            .fold(0u32, |a, w| a ^ w);
        if got != want {
            return Err(Error::Kernel {
                op: "read_peak",
                msg: format!(
                    "the words read fold to {got:#010x}, the buffer's to {want:#010x}: the \
                     probe did not read every word exactly once"
                ),
            });
        }
        Ok((bytes, bytes as f64 / best / 1e9))
    }

    /// Compute pipelines created so far (they are created on first use).
    pub fn pipelines_created(&self) -> usize {
        self.shared.pipelines.count()
    }

    /// The per-op table of the last profiled submission (empty unless profiling).
    pub fn last_profile(&self) -> Vec<ProfileRow> {
        self.last_profile
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Write the pipeline cache now (it is also written when the backend is dropped).
    pub fn save_pipeline_cache(&self) -> Result<()> {
        self.shared.pipelines.save()
    }

    fn own(&self, what: &str, b: &VulkanBuffer) -> Result<()> {
        if !Arc::ptr_eq(&b.0.ctx, &self.shared.ctx) {
            return Err(backend_error(format!(
                "{what}: the buffer belongs to another Vulkan backend"
            )));
        }
        Ok(())
    }

    /// Read the status words of the pending runs that `pick` selects, up to timeline value
    /// `done` (which the caller waited for), clear the words that recorded bad data, and
    /// return the error of the earliest such run. With good data this reads one mapped word
    /// per check.
    fn take_errors(&self, done: u64, pick: impl Fn(&PendingRun) -> bool) -> Result<()> {
        let finished: Vec<PendingRun> = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extract_if(.., |r| r.value <= done && pick(r))
            .collect();
        let mut first = None;
        for check in finished.iter().flat_map(|r| &r.checks) {
            if let Some(e) = check.error() {
                let zeros = [0u8; 4 * RunCheck::STATUS_WORDS];
                self.shared.memory.write(&check.status, 0, &zeros)?;
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn rec_check(&self, rec: &VulkanRecording) -> Result<()> {
        if !rec.belongs_to(&self.shared) {
            return Err(backend_error(
                "the recording was begun on another Vulkan backend",
            ));
        }
        Ok(())
    }
}

fn on_this_thread(r: &PendingRun) -> bool {
    r.thread == std::thread::current().id()
}

impl Backend for VulkanBackend {
    type Buffer = VulkanBuffer;
    type Recording = VulkanRecording;

    fn memory_use(&self) -> MemoryUse {
        let (current, peak) = self.shared.ctx.buffer_bytes();
        MemoryUse {
            what: "vulkan buffers",
            current_bytes: Some(current),
            peak_bytes: Some(peak),
        }
    }

    fn reset_peak_memory(&self) {
        self.shared.ctx.reset_buffer_peak();
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "vulkan",
            device: self.shared.ctx.name.clone(),
            precision: self.precision,
            threads: 1,
            cooperative_matrix: self.gemm_coopmat().is_some(),
            fast_weight_dtype: DType::F16,
            stacks_weights_in_place: true,
        }
    }

    fn alloc(&self, dtype: DType, len: usize) -> Result<VulkanBuffer> {
        let bytes = dtype.bytes_for(len).ok_or_else(|| {
            Error::Shape(format!(
                "{len} elements is not a whole number of {dtype} blocks"
            ))
        })?;
        Ok(self.shared.memory.alloc(bytes as u64, false)?)
    }

    fn bind_host(&self, t: &HostTensor) -> Result<VulkanBuffer> {
        self.bind_host_rows(std::slice::from_ref(t))
    }

    /// Each part's bytes uploaded into its place in one buffer: no host copy.
    fn bind_host_rows(&self, parts: &[HostTensor]) -> Result<VulkanBuffer> {
        let total = parts.iter().map(|p| p.bytes().len() as u64).sum();
        let buf = self.shared.memory.alloc(total, true)?;
        let mut at = 0;
        for p in parts {
            self.shared.memory.write(&buf, at, p.bytes())?;
            at += p.bytes().len() as u64;
        }
        Ok(buf)
    }

    fn write(&self, dst: &BufRef<VulkanBuffer>, bytes: &[u8]) -> Result<()> {
        self.own("write", &dst.buf)?;
        let (s, _) = write_range(dst, bytes.len())?;
        if dst.buf.is_read_only() {
            return Err(Error::InvalidArgument(
                "write: the buffer is a read-only host buffer".into(),
            ));
        }
        Ok(self.shared.memory.write(&dst.buf, s as u64, bytes)?)
    }

    /// Waits for the work that uses `src`, copies it out, then reports bad data that this
    /// thread's finished runs found, as `sync` does (`out` is filled either way).
    fn read(&self, src: &BufRef<VulkanBuffer>, out: &mut [u8]) -> Result<()> {
        self.own("read", &src.buf)?;
        let (s, _) = read_range(src, out.len())?;
        // The run that last used the buffer, and every run before it, have finished once the
        // read waited: report bad data they found.
        let used = src.buf.0.last_use.load(std::sync::atomic::Ordering::SeqCst);
        self.shared.memory.read(&src.buf, s as u64, out)?;
        self.take_errors(used, on_this_thread)
    }

    /// [`Backend::read`] for each range, with one copy submission and one wait for all the
    /// staged ones.
    fn read_many(&self, reads: &mut [(&BufRef<VulkanBuffer>, &mut [u8])]) -> Result<()> {
        let mut ranges = Vec::with_capacity(reads.len());
        let mut used = 0;
        for (src, out) in reads.iter_mut() {
            self.own("read", &src.buf)?;
            let (s, _) = read_range(src, out.len())?;
            used = used.max(src.buf.0.last_use.load(std::sync::atomic::Ordering::SeqCst));
            ranges.push((&src.buf, s as u64, &mut **out));
        }
        self.shared.memory.read_many(&mut ranges)?;
        self.take_errors(used, on_this_thread)
    }

    fn begin(&self) -> Result<VulkanRecording> {
        VulkanRecording::new(self.shared.clone())
    }

    fn submit(&self, rec: &VulkanRecording) -> Result<()> {
        self.rec_check(rec)?;
        rec.finish()?;
        // Host writes still in the staging buffer go first (one copy submission, no wait).
        self.shared.memory.flush_uploads()?;
        let checks = rec.checks();
        if let Some(own) = checks.first() {
            // The previous run of this recording wrote the same status words: check them
            // before this run reuses them, whichever thread submitted it.
            let prev = rec.last_submit();
            self.shared.ctx.wait(prev)?;
            self.take_errors(prev, |r| r.checks[0].status.same(&own.status))?;
        }
        rec.submit(|value| {
            if !checks.is_empty() {
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(PendingRun {
                        value,
                        thread: std::thread::current().id(),
                        checks: checks.to_vec(),
                    });
            }
        })?;
        if self.shared.profile {
            let rows = rec.profile()?;
            // Profiling asked for programmatically (benches) collects silently; the
            // environment variable also prints the table.
            if env_flag("KINEMA_PROFILE") {
                eprint!("{}", profile::table(&self.shared.ctx.name, &rows));
            }
            *self.last_profile.lock().unwrap_or_else(|e| e.into_inner()) = rows;
        }
        Ok(())
    }

    /// Waits for all submitted work, then reports bad data that the ops of this thread's
    /// runs found (embedding ids outside the table) as the CPU backend does.
    fn sync(&self) -> Result<()> {
        self.shared.memory.flush_uploads()?;
        let ctx = &self.shared.ctx;
        let last = ctx.last_submitted();
        ctx.wait(last).map_err(|e: VulkanError| Error::from(e))?;
        self.take_errors(last, on_this_thread)
    }

    /// Notes on what the device computes differently from the CPU:
    /// - `embedding`: an id outside the table gives a zero row and an [`Error::Kernel`] from
    ///   the next `sync` or `read` of the thread that submitted the run, or from the next
    ///   `submit` of this recording, whichever comes first.
    /// - `gumbel`: the uniforms, generated or injected, are the CPU backend's bit for bit;
    ///   the noise `g(u)` is within [`GUMBEL_NOISE_ULP`] ulp (plus 2^-22 absolute) of the
    ///   CPU's, because the two `ln`s are not correctly rounded alike. So a token equals the
    ///   CPU backend's whenever the best score of its row beats every other by more than
    ///   twice that error plus an ulp of the score; closer near-ties may resolve either way.
    /// - `posenc`: within [`POSENC_ABS`] of the CPU backend (which matches PyTorch bit for
    ///   bit): the angles are the CPU's, but sin and cos are not correctly rounded alike.
    /// - `root_bridge`: within [`ROOT_BRIDGE_ABS`] on the heading velocity.
    fn dispatch(&self, rec: &mut VulkanRecording, call: Checked<'_, VulkanBuffer>) -> Result<()> {
        self.rec_check(rec)?;
        let fast_rows = self.fast_rows();
        match call.into_call() {
            Call::Linear { p, x, w, bias, y } => {
                let coop = self.gemm_coopmat();
                let coop2 = coop.and(self.shared.ctx.coopmat2);
                let lane = self.lane && coop.is_some();
                let gemm = kernels::GemmUnits {
                    coopmat: coop,
                    coopmat2: coop2,
                    lane,
                    split: self.split_gemm(),
                };
                kernels::linear(rec, p, &x, &w, bias.as_ref(), &y, gemm)
            }
            Call::BatchedMatmul { p, a, b, c } => kernels::batched_matmul(rec, p, &a, &b, &c),
            Call::LayerNorm {
                p,
                x,
                gamma,
                beta,
                y,
            } => {
                let (g, b) = (gamma.as_ref(), beta.as_ref());
                kernels::layer_norm(rec, p, &x, g, b, &y, fast_rows)
            }
            Call::AddLayerNorm {
                p,
                x,
                r,
                gamma,
                beta,
                y,
            } => {
                let (g, b) = (gamma.as_ref(), beta.as_ref());
                kernels::add_layer_norm(rec, p, &x, &r, g, b, &y, fast_rows)
            }
            Call::RmsNorm { p, x, gamma, y } => {
                kernels::rms_norm(rec, p, &x, gamma.as_ref(), &y, fast_rows)
            }
            Call::Softmax { p, x, y } => kernels::softmax(rec, p, &x, &y, fast_rows),
            Call::Attention {
                p,
                q,
                k,
                v,
                mask,
                out,
            } => {
                let coop = self.gemm_coopmat();
                let coop2 = coop.and(self.shared.ctx.coopmat2);
                let split = self.split_gemm();
                kernels::attention(rec, p, &q, &k, &v, mask.as_ref(), &out, coop, coop2, split)
            }
            Call::Activation { p, x, y } => kernels::activation(rec, *p, &x, &y),
            Call::Swiglu { p, gate, up, y } => kernels::swiglu(rec, p, &gate, &up, &y),
            Call::Rope {
                p,
                x,
                positions,
                inv_freq,
                y,
            } => kernels::rope(rec, p, &x, &positions, &inv_freq, &y),
            Call::Conv1d { p, x, w, bias, y } => kernels::conv1d(rec, p, &x, &w, bias.as_ref(), &y),
            Call::Upsample { p, x, y } => kernels::upsample_nearest2x(rec, p, &x, &y),
            Call::Binary { p, a, b, y } => kernels::binary(rec, p, &a, &b, &y),
            Call::Scale { p, x, y } => kernels::scale(rec, p.s, &x, &y),
            Call::Axpby { p, x, y, out } => kernels::axpby(rec, p.a, &x, p.b, &y, &out),
            Call::MaskedAct { p, x, m, r, y } => {
                kernels::masked_act(rec, p, &x, &m, r.as_ref(), &y)
            }
            Call::Embedding { p, ids, table, out } => {
                kernels::embedding(rec, p, &ids, &table, &out)
            }
            Call::Copy { p, src, dst } => kernels::copy(rec, p, &src, &dst),
            Call::MeanPool { p, x, mask, out } => kernels::mean_pool(rec, p, &x, &mask, &out),
            Call::Argmax { p, x, out } => kernels::argmax(rec, p, &x, &out),
            Call::Gumbel {
                p,
                logits,
                uniforms,
                out,
            } => kernels::gumbel(rec, p, &logits, uniforms.as_ref(), &out),
            Call::PosEnc { p, out } => kernels::posenc(rec, p, &out),
            Call::Ddim {
                p,
                x_t,
                x0,
                coef,
                out,
            } => kernels::ddim(rec, p, &x_t, &x0, &coef, &out),
            Call::RootBridge { p, x, out } => kernels::root_bridge(rec, p, &x, &out),
            Call::Cfg { p, rows, out } => kernels::cfg(rec, p, &rows, &out),
        }
    }
}
