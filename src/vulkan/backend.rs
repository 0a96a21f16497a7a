//! [`VulkanBackend`]: the dispatch trait on a Vulkan device. Ops are checked when recorded
//! (the same checks as the CPU backend, `crate::backend::check`) and recorded into a
//! [`VulkanRecording`]; `submit` queues its command buffer, `read`/`write`/`sync` wait for it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::context::Context;
use super::memory::{Memory, VulkanBuffer};
use super::pipeline::Pipelines;
use super::profile::{self, ProfileRow};
use super::recording::VulkanRecording;
use super::{VulkanError, backend_error, kernels};
use crate::backend::check::{self, BufferInfo, byte_range};
use crate::backend::{Backend, BackendInfo, BufRef, Precision};
use crate::error::{Error, Result};
use crate::ops::*;
use crate::tensor::{DType, HostTensor};

/// The ops that have no Vulkan kernel yet: recording one returns an error.
pub const MISSING_KERNELS: &[&str] = &[
    "conv1d",
    "upsample_nearest2x",
    "embedding",
    "mean_pool",
    "argmax",
    "gumbel",
    "posenc",
];

fn no_kernel(op: &str) -> Error {
    backend_error(format!("{op} has no Vulkan kernel yet"))
}

/// How to set up a [`VulkanBackend`]. [`VulkanOptions::from_env`] reads the `KINEMA_*`
/// variables named on each field.
#[derive(Clone, Debug, PartialEq)]
pub struct VulkanOptions {
    pub precision: Precision,
    /// A device index as `kinema info` lists them (`KINEMA_VK_DEVICE`); `None` picks a
    /// discrete GPU first.
    pub device: Option<usize>,
    /// A cap in bytes on one storage-buffer binding below the device's
    /// `maxStorageBufferRange` (`KINEMA_VK_MAX_BINDING`), to exercise split paths.
    pub max_binding: Option<u64>,
    /// Descriptor pools even where `VK_KHR_push_descriptor` exists
    /// (`KINEMA_VK_NO_PUSH_DESCRIPTOR=1`).
    pub descriptor_pools: bool,
    /// Timestamps around every dispatch and a per-op table on stderr after each submission
    /// (`KINEMA_PROFILE=1`).
    pub profile: bool,
    /// Directory of the on-disk pipeline cache (`KINEMA_VK_PIPELINE_CACHE`: a directory, or
    /// `off`); by default `$XDG_CACHE_HOME/kinema` or `~/.cache/kinema`.
    pub pipeline_cache_dir: Option<PathBuf>,
}

fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("kinema"))
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

impl VulkanOptions {
    /// Defaults, ignoring the environment (no disk cache).
    pub fn new(precision: Precision) -> VulkanOptions {
        VulkanOptions {
            precision,
            device: None,
            max_binding: None,
            descriptor_pools: false,
            profile: false,
            pipeline_cache_dir: None,
        }
    }

    /// Options from the `KINEMA_*` environment variables (see the fields).
    pub fn from_env(precision: Precision) -> Result<VulkanOptions> {
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
            precision,
            device: number("KINEMA_VK_DEVICE")?.map(|d| d as usize),
            max_binding,
            descriptor_pools: env_flag("KINEMA_VK_NO_PUSH_DESCRIPTOR"),
            profile: env_flag("KINEMA_PROFILE"),
            pipeline_cache_dir: match std::env::var_os("KINEMA_VK_PIPELINE_CACHE") {
                Some(v) if v == "off" => None,
                Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
                _ => default_cache_dir(),
            },
        })
    }
}

/// What every recording and buffer of one backend shares.
pub(crate) struct Shared {
    pub ctx: Arc<Context>,
    pub pipelines: Pipelines,
    pub memory: Memory,
    /// Bound for absent optional operands.
    pub dummy: VulkanBuffer,
    pub profile: bool,
}

pub struct VulkanBackend {
    shared: Arc<Shared>,
    precision: Precision,
    last_profile: Mutex<Vec<ProfileRow>>,
}

impl VulkanBackend {
    /// The device and settings from the environment ([`VulkanOptions::from_env`]).
    pub fn new(precision: Precision) -> Result<VulkanBackend> {
        VulkanBackend::with_options(VulkanOptions::from_env(precision)?)
    }

    pub fn with_options(o: VulkanOptions) -> Result<VulkanBackend> {
        let ctx = Arc::new(Context::new(o.device, o.max_binding, !o.descriptor_pools)?);
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
        let memory = Memory::new(ctx.clone())?;
        let dummy = memory.alloc(16, true)?;
        Ok(VulkanBackend {
            shared: Arc::new(Shared {
                ctx,
                pipelines,
                memory,
                dummy,
                profile,
            }),
            precision: o.precision,
            last_profile: Mutex::new(Vec::new()),
        })
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

    fn rec_check(&self, rec: &VulkanRecording) -> Result<()> {
        if !rec.belongs_to(&self.shared) {
            return Err(backend_error(
                "the recording was begun on another Vulkan backend",
            ));
        }
        Ok(())
    }
}

impl Backend for VulkanBackend {
    type Buffer = VulkanBuffer;
    type Recording = VulkanRecording;

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "vulkan",
            device: self.shared.ctx.name.clone(),
            precision: self.precision,
            threads: 1,
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
        let bytes = t.bytes();
        let buf = self.shared.memory.alloc(bytes.len() as u64, true)?;
        self.shared.memory.write(&buf, 0, bytes)?;
        Ok(buf)
    }

    fn write(&self, dst: &BufRef<VulkanBuffer>, bytes: &[u8]) -> Result<()> {
        self.own("write", &dst.buf)?;
        let (s, l) = byte_range("write", dst)?;
        if bytes.len() != l {
            return Err(Error::Shape(format!(
                "write: {} bytes given for a {l}-byte range",
                bytes.len()
            )));
        }
        if dst.buf.is_read_only() {
            return Err(Error::InvalidArgument(
                "write: the buffer is a read-only host buffer".into(),
            ));
        }
        Ok(self.shared.memory.write(&dst.buf, s as u64, bytes)?)
    }

    fn read(&self, src: &BufRef<VulkanBuffer>, out: &mut [u8]) -> Result<()> {
        self.own("read", &src.buf)?;
        let (s, l) = byte_range("read", src)?;
        if out.len() != l {
            return Err(Error::Shape(format!(
                "read: {}-byte destination for a {l}-byte range",
                out.len()
            )));
        }
        Ok(self.shared.memory.read(&src.buf, s as u64, out)?)
    }

    fn begin(&self) -> Result<VulkanRecording> {
        VulkanRecording::new(self.shared.clone())
    }

    fn submit(&self, rec: &VulkanRecording) -> Result<()> {
        self.rec_check(rec)?;
        rec.finish()?;
        rec.submit()?;
        if self.shared.profile {
            let rows = rec.profile()?;
            eprint!("{}", profile::table(&self.shared.ctx.name, &rows));
            *self.last_profile.lock().unwrap_or_else(|e| e.into_inner()) = rows;
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let ctx = &self.shared.ctx;
        ctx.wait(ctx.last_submitted())
            .map_err(|e: VulkanError| e.into())
    }

    fn linear(
        &self,
        rec: &mut VulkanRecording,
        p: &LinearParams,
        x: &BufRef<VulkanBuffer>,
        w: &BufRef<VulkanBuffer>,
        bias: Option<&BufRef<VulkanBuffer>>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, w, bias, y) = check::linear(p, x, w, bias, y)?;
        kernels::linear(rec, p, &x, &w, bias.as_ref(), &y)
    }

    fn batched_matmul(
        &self,
        rec: &mut VulkanRecording,
        p: &BatchedMatmulParams,
        a: &BufRef<VulkanBuffer>,
        b: &BufRef<VulkanBuffer>,
        c: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (a, b, c) = check::batched_matmul(p, a, b, c)?;
        kernels::batched_matmul(rec, p, &a, &b, &c)
    }

    fn layer_norm(
        &self,
        rec: &mut VulkanRecording,
        p: &NormParams,
        x: &BufRef<VulkanBuffer>,
        gamma: Option<&BufRef<VulkanBuffer>>,
        beta: Option<&BufRef<VulkanBuffer>>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, g, b, y) = check::layer_norm(p, x, gamma, beta, y)?;
        kernels::layer_norm(rec, p, &x, g.as_ref(), b.as_ref(), &y)
    }

    fn rms_norm(
        &self,
        rec: &mut VulkanRecording,
        p: &NormParams,
        x: &BufRef<VulkanBuffer>,
        gamma: Option<&BufRef<VulkanBuffer>>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, g, y) = check::rms_norm(p, x, gamma, y)?;
        kernels::rms_norm(rec, p, &x, g.as_ref(), &y)
    }

    fn softmax(
        &self,
        rec: &mut VulkanRecording,
        p: &SoftmaxParams,
        x: &BufRef<VulkanBuffer>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, y) = check::softmax(p, x, y)?;
        kernels::softmax(rec, p, &x, &y)
    }

    fn attention(
        &self,
        rec: &mut VulkanRecording,
        p: &AttentionParams,
        q: &BufRef<VulkanBuffer>,
        k: &BufRef<VulkanBuffer>,
        v: &BufRef<VulkanBuffer>,
        mask: Option<&BufRef<VulkanBuffer>>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (q, k, v, m, o) = check::attention(p, q, k, v, mask, out)?;
        kernels::attention(rec, p, &q, &k, &v, m.as_ref(), &o)
    }

    fn activation(
        &self,
        rec: &mut VulkanRecording,
        act: Activation,
        x: &BufRef<VulkanBuffer>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, y) = check::activation(x, y)?;
        kernels::activation(rec, act, &x, &y)
    }

    fn swiglu(
        &self,
        rec: &mut VulkanRecording,
        gate: &BufRef<VulkanBuffer>,
        up: &BufRef<VulkanBuffer>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (g, u, y) = check::swiglu(gate, up, y)?;
        kernels::swiglu(rec, &g, &u, &y)
    }

    fn rope(
        &self,
        rec: &mut VulkanRecording,
        p: &RopeParams,
        x: &BufRef<VulkanBuffer>,
        positions: &BufRef<VulkanBuffer>,
        inv_freq: &BufRef<VulkanBuffer>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, pos, f, y) = check::rope(p, x, positions, inv_freq, y)?;
        kernels::rope(rec, p, &x, &pos, &f, &y)
    }

    fn conv1d(
        &self,
        _rec: &mut VulkanRecording,
        p: &Conv1dParams,
        x: &BufRef<VulkanBuffer>,
        w: &BufRef<VulkanBuffer>,
        bias: Option<&BufRef<VulkanBuffer>>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        check::conv1d(p, x, w, bias, y)?;
        Err(no_kernel("conv1d"))
    }

    fn upsample_nearest2x(
        &self,
        _rec: &mut VulkanRecording,
        p: &UpsampleParams,
        x: &BufRef<VulkanBuffer>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        check::upsample_nearest2x(p, x, y)?;
        Err(no_kernel("upsample_nearest2x"))
    }

    fn binary(
        &self,
        rec: &mut VulkanRecording,
        p: &BinaryParams,
        a: &BufRef<VulkanBuffer>,
        b: &BufRef<VulkanBuffer>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (a, b, y) = check::binary(p, a, b, y)?;
        kernels::binary(rec, p, &a, &b, &y)
    }

    fn scale(
        &self,
        rec: &mut VulkanRecording,
        s: f32,
        x: &BufRef<VulkanBuffer>,
        y: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, y) = check::scale(x, y)?;
        kernels::scale(rec, s, &x, &y)
    }

    fn axpby(
        &self,
        rec: &mut VulkanRecording,
        a: f32,
        x: &BufRef<VulkanBuffer>,
        b: f32,
        y: &BufRef<VulkanBuffer>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (x, y, o) = check::axpby(x, y, out)?;
        kernels::axpby(rec, a, &x, b, &y, &o)
    }

    fn embedding(
        &self,
        _rec: &mut VulkanRecording,
        p: &EmbeddingParams,
        ids: &BufRef<VulkanBuffer>,
        table: &BufRef<VulkanBuffer>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        check::embedding(p, ids, table, out)?;
        Err(no_kernel("embedding"))
    }

    fn copy(
        &self,
        rec: &mut VulkanRecording,
        p: &CopyParams,
        src: &BufRef<VulkanBuffer>,
        dst: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (s, d) = check::copy(p, src, dst)?;
        kernels::copy(rec, p, &s, &d)
    }

    fn mean_pool(
        &self,
        _rec: &mut VulkanRecording,
        p: &MeanPoolParams,
        x: &BufRef<VulkanBuffer>,
        mask: &BufRef<VulkanBuffer>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        check::mean_pool(p, x, mask, out)?;
        Err(no_kernel("mean_pool"))
    }

    fn argmax(
        &self,
        _rec: &mut VulkanRecording,
        p: &ArgmaxParams,
        x: &BufRef<VulkanBuffer>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        check::argmax(p, x, out)?;
        Err(no_kernel("argmax"))
    }

    fn gumbel(
        &self,
        _rec: &mut VulkanRecording,
        p: &GumbelParams,
        logits: &BufRef<VulkanBuffer>,
        uniforms: Option<&BufRef<VulkanBuffer>>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        check::gumbel(p, logits, uniforms, out)?;
        Err(no_kernel("gumbel"))
    }

    fn posenc(
        &self,
        _rec: &mut VulkanRecording,
        p: &PosEncParams,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        check::posenc(p, out)?;
        Err(no_kernel("posenc"))
    }

    fn ddim(
        &self,
        rec: &mut VulkanRecording,
        p: &DdimParams,
        x_t: &BufRef<VulkanBuffer>,
        x0: &BufRef<VulkanBuffer>,
        coef: &BufRef<VulkanBuffer>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (xt, x0, c, o) = check::ddim(p, x_t, x0, coef, out)?;
        kernels::ddim(rec, p, &xt, &x0, &c, &o)
    }

    fn cfg(
        &self,
        rec: &mut VulkanRecording,
        p: &CfgParams,
        rows: &BufRef<VulkanBuffer>,
        out: &BufRef<VulkanBuffer>,
    ) -> Result<()> {
        self.rec_check(rec)?;
        let (r, o) = check::cfg(p, rows, out)?;
        kernels::cfg(rec, p, &r, &o)
    }
}
