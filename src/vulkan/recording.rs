//! [`VulkanRecording`]: one command buffer that holds a whole graph, with a barrier only where
//! an op touches bytes an earlier op wrote (or writes bytes an earlier op read) since the last
//! barrier, as ggml's `ggml_vk_build_graph`. The command buffer is ended at its first submission
//! and can then be re-submitted any number of times.
//!
//! [`VulkanRecording::dispatch`] is the one way ops record work; see [`Dispatch`].

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ash::vk;
use bytemuck::Pod;

use super::memory::{VulkanBuffer, full_barrier};
use super::pipeline::Pipeline;
use super::profile::{self, ProfileRow};
use super::shaders::Shader;
use super::shared::Shared;
use super::{VulkanError, backend_error, vk_error};
use crate::backend::BufRef;
use crate::backend::check::byte_range;
use crate::error::{Error, Result};
use crate::tensor::DType;

/// One operand of a dispatch. Operands are bound as storage buffers at bindings `0..n` in
/// the order given.
pub(crate) enum Arg<'a> {
    /// Read by the shader.
    In(&'a BufRef<VulkanBuffer>),
    /// Written (and possibly read) by the shader.
    Out(&'a BufRef<VulkanBuffer>),
    /// An optional operand that is not there: a small dummy buffer is bound, and the op tells
    /// the shader with a flag in its push constants.
    Absent,
}

/// One compute dispatch, as every op records it.
///
/// - `spec`: specialization constants `0..`; constant 0 is the workgroup size
///   (`layout(local_size_x_id = 0) in;`).
/// - `args`: the operands in binding order. Each is bound from its byte offset rounded down to
///   `minStorageBufferOffsetAlignment`, so the shader gets the operand's offset inside the
///   binding in the first `args.len()` u32 words of the push constants (in elements of the
///   operand's dtype; in bytes for q8_0). Leave those words zero in `push`: they are filled in.
/// - `push`: the shader's push-constant struct (`shaders::push::*`, at most 128 bytes).
/// - `groups`: workgroup counts (see [`VulkanRecording::grid`] for 1-D work). A zero count
///   records nothing.
pub(crate) struct Dispatch<'a, P> {
    /// Op name, for errors and the profile.
    pub op: &'static str,
    pub shader: Shader,
    pub spec: &'a [u32],
    pub args: &'a [Arg<'a>],
    pub push: P,
    pub groups: [u32; 3],
}

/// The status words of an op that checks its data while running, where a shader cannot raise
/// an error: embedding ids outside the table (`kernels/glsl/embedding.comp`). The shader sets
/// them only when it meets bad data; the backend reads them after every run of the recording
/// and turns them into the error the CPU backend gives.
#[derive(Clone)]
pub(crate) struct RunCheck {
    /// Three u32 words from `Memory::alloc_mapped`, all zero while no id was bad:
    /// `[bad tokens, !first bad position, largest bad id]`.
    pub status: VulkanBuffer,
    /// Rows of the table.
    pub vocab: usize,
}

impl RunCheck {
    pub const STATUS_WORDS: usize = 3;

    /// The error the status words record, if any (read after the run finished).
    pub fn error(&self) -> Option<Error> {
        let count = self.status.mapped_word(0);
        if count == 0 {
            return None;
        }
        let first = !self.status.mapped_word(1);
        let id = self.status.mapped_word(2);
        let vocab = self.vocab;
        if count == 1 {
            return Some(crate::backend::check::bad_id(id, first as usize, vocab));
        }
        let msg = format!(
            "{count} token ids are outside the {vocab}-row table: the first at position \
             {first}, the largest {id}"
        );
        Some(Error::Kernel {
            op: "embedding",
            msg,
        })
    }
}

/// A storage-buffer binding of one operand.
struct Binding {
    buf: VulkanBuffer,
    offset: u64,
    range: u64,
    /// Offset of the operand inside the binding, for the shader.
    elem_offset: u32,
    /// Bytes the op touches, widened to whole 4-byte words: `(buffer id, start, end)`.
    touched: Option<(u64, u64, u64)>,
    write: bool,
}

/// Byte ranges read and written since the last barrier.
#[derive(Default)]
struct Hazards {
    reads: Vec<(u64, u64, u64)>,
    writes: Vec<(u64, u64, u64)>,
}

fn overlaps(set: &[(u64, u64, u64)], r: &(u64, u64, u64)) -> bool {
    set.iter().any(|s| s.0 == r.0 && s.1 < r.2 && r.1 < s.2)
}

impl Hazards {
    /// Read-after-write, write-after-write or write-after-read against work since the last
    /// barrier.
    fn conflict(&self, b: &[Binding]) -> bool {
        b.iter()
            .filter_map(|b| b.touched.map(|t| (t, b.write)))
            .any(|(t, w)| overlaps(&self.writes, &t) || (w && overlaps(&self.reads, &t)))
    }
    fn add(&mut self, b: &[Binding]) {
        for b in b {
            if let Some(t) = b.touched {
                if b.write {
                    self.writes.push(t);
                } else {
                    self.reads.push(t);
                }
            }
        }
    }
}

/// Dispatches per timestamp query pool (two queries each).
const DISPATCHES_PER_QUERY_POOL: u32 = 512;
/// Descriptor sets per pool when VK_KHR_push_descriptor is not used.
const SETS_PER_DESCRIPTOR_POOL: u32 = 256;
const BUFFERS_PER_SET: u32 = 16;

/// Recorded Vulkan work: a command buffer and everything it references.
pub struct VulkanRecording {
    dev: Arc<Shared>,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    ended: Cell<bool>,
    /// Timeline value of the latest submission (0: never submitted).
    last_submit: Cell<u64>,
    buffers: HashMap<u64, VulkanBuffer>,
    pipelines: HashMap<vk::Pipeline, Arc<Pipeline>>,
    descriptor_pools: Vec<vk::DescriptorPool>,
    hazards: Hazards,
    barriers: usize,
    dispatches: usize,
    /// The shader module of each dispatch, in order.
    shaders: Vec<&'static str>,
    /// Timestamp query pools and the op name of each dispatch, when profiling.
    query_pools: Vec<vk::QueryPool>,
    profiled_ops: Vec<&'static str>,
    /// Status words the backend checks after every run.
    checks: Vec<RunCheck>,
    /// The scratch buffer of [`VulkanRecording::scratch_f32`] and its length in f32.
    scratch: Option<(VulkanBuffer, usize)>,
    /// The counters of [`VulkanRecording::counters`]: the current chunk, words handed out of
    /// it, and its length in words.
    counters: Option<(VulkanBuffer, usize, usize)>,
}

impl VulkanRecording {
    pub(crate) fn new(dev: Arc<Shared>) -> Result<VulkanRecording> {
        let ctx = &dev.ctx;
        ctx.check_lost("beginning a recording")?;
        let d = &ctx.device;
        let ci = vk::CommandPoolCreateInfo::default().queue_family_index(ctx.queue_family);
        // SAFETY: valid device and create info.
        let pool = unsafe { d.create_command_pool(&ci, None) }
            .map_err(|e| vk_error("creating a command pool", e))?;
        let ai = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool was just created and is used by this recording alone.
        let cmd = match unsafe { d.allocate_command_buffers(&ai) } {
            Ok(c) => c[0],
            Err(e) => {
                // SAFETY: the pool is unused.
                unsafe { d.destroy_command_pool(pool, None) };
                return Err(vk_error("allocating a command buffer", e).into());
            }
        };
        let rec = VulkanRecording {
            dev: dev.clone(),
            pool,
            cmd,
            ended: Cell::new(false),
            last_submit: Cell::new(0),
            buffers: HashMap::new(),
            pipelines: HashMap::new(),
            descriptor_pools: Vec::new(),
            hazards: Hazards::default(),
            barriers: 0,
            dispatches: 0,
            shaders: Vec::new(),
            query_pools: Vec::new(),
            profiled_ops: Vec::new(),
            checks: Vec::new(),
            scratch: None,
            counters: None,
        };
        // Not one-time: the buffer is submitted again and again once ended.
        let bi = vk::CommandBufferBeginInfo::default();
        // SAFETY: `cmd` is freshly allocated.
        unsafe { d.begin_command_buffer(cmd, &bi) }
            .map_err(|e| vk_error("beginning a command buffer", e))?;
        // Orders this submission after everything submitted before it (host uploads, the
        // previous run of this same recording).
        full_barrier(d, cmd);
        Ok(rec)
    }

    /// Hazard barriers recorded between dispatches (the fixed barriers at the start and end of
    /// the command buffer are not counted).
    pub fn barriers(&self) -> usize {
        self.barriers
    }

    /// Dispatches recorded.
    pub fn dispatches(&self) -> usize {
        self.dispatches
    }

    /// The shader module (`kernels/spirv/<name>.spv`) of each dispatch recorded, in order:
    /// which kernel the policy picked for each op.
    pub fn shaders(&self) -> &[&'static str] {
        &self.shaders
    }

    pub(crate) fn belongs_to(&self, dev: &Arc<Shared>) -> bool {
        Arc::ptr_eq(&self.dev, dev)
    }

    /// Workgroup counts covering `n` invocations of `workgroup` each, spread over x and y
    /// when x alone cannot hold them (shaders index with `global_index()` and bounds-check).
    pub(crate) fn grid(&self, op: &'static str, n: u64, workgroup: u32) -> Result<[u32; 3]> {
        let groups = n.div_ceil(u64::from(workgroup));
        let [mx, my, _] = self.dev.ctx.limits.max_workgroup_count;
        let x = groups.min(u64::from(mx));
        let y = groups.div_ceil(x.max(1));
        if y > u64::from(my) {
            return Err(backend_error(format!(
                "{op}: {n} elements need more workgroups than this device can launch"
            )));
        }
        Ok([x as u32, y as u32, 1])
    }

    /// The workgroup size for 1-D elementwise shaders.
    pub(crate) fn elementwise_workgroup(&self) -> u32 {
        let l = &self.dev.ctx.limits;
        256.min(l.max_workgroup_size[0])
            .min(l.max_workgroup_invocations)
    }

    pub(crate) fn limits(&self) -> &super::context::Limits {
        &self.dev.ctx.limits
    }

    /// A read-only device buffer holding `v`: an op's constant table, uploaded now (at record
    /// time). The dispatch that binds it keeps it alive.
    pub(crate) fn constant_f32(&self, v: &[f32]) -> Result<BufRef<VulkanBuffer>> {
        let bytes: &[u8] = bytemuck::cast_slice(v);
        let buf = self.dev.memory.alloc(bytes.len() as u64, true)?;
        self.dev.memory.write(&buf, 0, bytes)?;
        Ok(BufRef::new(buf, DType::F32, v.len()))
    }

    /// A device buffer of at least `n` f32 for an op's intermediate results (the split-k
    /// partial sums of `linear_stream`), one per recording and shared by every op that asks:
    /// one op's use is ordered after the previous op's by the hazard barriers, as for any
    /// buffer. A larger request allocates a larger buffer now (at record time; the dispatches
    /// that bound the old one keep it alive).
    pub(crate) fn scratch_f32(&mut self, n: usize) -> Result<BufRef<VulkanBuffer>> {
        let n = n.max(1);
        if let Some((buf, cap)) = &self.scratch
            && *cap >= n
        {
            return Ok(BufRef::new(buf.clone(), DType::F32, n));
        }
        let buf = self.dev.memory.alloc(4 * n as u64, false)?;
        self.scratch = Some((buf.clone(), n));
        Ok(BufRef::new(buf, DType::F32, n))
    }

    /// `n` u32 words, zero when the recording first runs, that belong to one dispatch of this
    /// recording alone (kernels that count workgroups in on them reset them to zero before
    /// they finish, so they are zero again for the next run). Handed out of zero-filled
    /// device-local chunks of at least 4096 words.
    pub(crate) fn counters(&mut self, n: usize) -> Result<BufRef<VulkanBuffer>> {
        const CHUNK: usize = 4096;
        let n = n.max(1);
        let full = self
            .counters
            .as_ref()
            .is_none_or(|(_, used, cap)| used + n > *cap);
        if full {
            let cap = n.max(CHUNK);
            let buf = self.dev.memory.alloc(4 * cap as u64, false)?;
            self.counters = Some((buf, 0, cap));
        }
        let (buf, used, cap) = self.counters.as_mut().expect("set above");
        let r = BufRef::new(buf.clone(), DType::U32, *cap).slice(*used, n)?;
        *used += n;
        Ok(r)
    }

    /// Zeroed status words for a [`RunCheck`], to bind as an output of the op's dispatch;
    /// register them with [`VulkanRecording::add_check`] once it is recorded.
    pub(crate) fn status_words(&self) -> Result<BufRef<VulkanBuffer>> {
        let n = RunCheck::STATUS_WORDS;
        let buf = self.dev.memory.alloc_mapped(4 * n as u64)?;
        Ok(BufRef::new(buf, DType::U32, n))
    }

    pub(crate) fn add_check(&mut self, check: RunCheck) {
        self.checks.push(check);
    }

    /// The status words to check after every run.
    pub(crate) fn checks(&self) -> &[RunCheck] {
        &self.checks
    }

    /// Timeline value of the latest submission (0: never submitted).
    pub(crate) fn last_submit(&self) -> u64 {
        self.last_submit.get()
    }

    fn bind(&self, op: &'static str, index: usize, arg: &Arg<'_>) -> Result<Binding> {
        let (r, write) = match arg {
            Arg::In(r) => (*r, false),
            Arg::Out(r) => (*r, true),
            Arg::Absent => {
                return Ok(Binding {
                    buf: self.dev.dummy.clone(),
                    offset: 0,
                    range: self.dev.dummy.0.capacity,
                    elem_offset: 0,
                    touched: None,
                    write: false,
                });
            }
        };
        if !Arc::ptr_eq(&r.buf.0.ctx, &self.dev.ctx) {
            return Err(backend_error(format!(
                "{op}: operand {index} is a buffer of another Vulkan backend"
            )));
        }
        let (start, len) = byte_range(op, r)?;
        let (start, len) = (start as u64, len as u64);
        if len == 0 {
            return self.bind(op, index, &Arg::Absent);
        }
        let limits = &self.dev.ctx.limits;
        let offset = start / limits.min_storage_offset_align * limits.min_storage_offset_align;
        let end = (start + len).next_multiple_of(4);
        let range = end - offset;
        if range > limits.max_binding {
            return Err(backend_error(format!(
                "{op}: operand {index} ({} bytes) needs a {range}-byte storage-buffer binding, \
                 more than this device's limit of {} bytes (maxStorageBufferRange, or \
                 KINEMA_VK_MAX_BINDING)",
                len, limits.max_binding
            )));
        }
        let unit = match r.dtype {
            DType::Q8_0 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
        };
        Ok(Binding {
            buf: r.buf.clone(),
            offset,
            range,
            elem_offset: ((start - offset) / unit) as u32,
            touched: Some((r.buf.0.id, start / 4 * 4, end)),
            write,
        })
    }

    /// Record one dispatch (see [`Dispatch`]) with the barrier its operands need.
    pub(crate) fn dispatch<P: Pod>(&mut self, d: Dispatch<'_, P>) -> Result<()> {
        let op = d.op;
        if self.ended.get() {
            return Err(backend_error(format!(
                "{op}: this recording was already submitted, so no ops can be added to it; \
                 begin a new one"
            )));
        }
        let info = d.shader.info();
        let push_size = size_of::<P>() as u32;
        if d.args.len() != info.bindings as usize || push_size != info.push_size {
            return Err(backend_error(format!(
                "{op}: the {} shader takes {} operands and {} bytes of push constants, \
                 given {} and {push_size}",
                info.name,
                info.bindings,
                info.push_size,
                d.args.len()
            )));
        }
        let limits = &self.dev.ctx.limits;
        if push_size > limits.max_push_constants {
            return Err(backend_error(format!(
                "{op}: {push_size} bytes of push constants exceed the {}-byte limit",
                limits.max_push_constants
            )));
        }
        if d.groups.contains(&0) {
            return Ok(());
        }
        for (i, (&g, &m)) in d.groups.iter().zip(&limits.max_workgroup_count).enumerate() {
            if g > m {
                return Err(backend_error(format!(
                    "{op}: {g} workgroups along axis {i}, more than this device's {m}"
                )));
            }
        }
        let bindings = d
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| self.bind(op, i, a))
            .collect::<Result<Vec<Binding>>>()?;
        let mut push = bytemuck::bytes_of(&d.push).to_vec();
        for (i, b) in bindings.iter().enumerate() {
            push[4 * i..4 * i + 4].copy_from_slice(&b.elem_offset.to_ne_bytes());
        }
        let pipeline = self.dev.pipelines.get(d.shader, d.spec)?;

        let dev = self.dev.clone();
        let ctx = &dev.ctx;
        let dv = &ctx.device;
        let cmd = self.cmd;
        if self.hazards.conflict(&bindings) {
            compute_barrier(dv, cmd);
            self.barriers += 1;
            self.hazards = Hazards::default();
        }
        self.hazards.add(&bindings);

        let stamp = if dev.profile {
            Some(self.next_timestamps(op)?)
        } else {
            None
        };
        if let Some((pool, q)) = stamp {
            // SAFETY: `cmd` is recording; the queries exist in `pool`.
            unsafe {
                dv.cmd_reset_query_pool(cmd, pool, q, 2);
                dv.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, pool, q);
            }
        }
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = bindings
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo {
                    buffer: b.buf.0.raw,
                    offset: b.offset,
                    range: b.range,
                }]
            })
            .collect();
        let mut writes: Vec<vk::WriteDescriptorSet> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        let layout = &pipeline.layout;
        // SAFETY: `cmd` is recording; the pipeline, layout, buffers and descriptor sets stay
        // alive as long as this recording (kept below).
        unsafe {
            dv.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
            match &ctx.push_descriptor {
                Some(pd) => pd.cmd_push_descriptor_set(
                    cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    layout.raw,
                    0,
                    &writes,
                ),
                None => {
                    let set = self.descriptor_set(layout.set_layout)?;
                    for w in &mut writes {
                        w.dst_set = set;
                    }
                    dv.update_descriptor_sets(&writes, &[]);
                    dv.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        layout.raw,
                        0,
                        &[set],
                        &[],
                    );
                }
            }
            dv.cmd_push_constants(cmd, layout.raw, vk::ShaderStageFlags::COMPUTE, 0, &push);
            dv.cmd_dispatch(cmd, d.groups[0], d.groups[1], d.groups[2]);
            if let Some((pool, q)) = stamp {
                dv.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, q + 1);
            }
        }
        self.dispatches += 1;
        self.shaders.push(info.name);
        self.pipelines.insert(pipeline.raw, pipeline);
        for b in bindings {
            self.buffers.entry(b.buf.0.id).or_insert(b.buf);
        }
        Ok(())
    }

    /// A descriptor set from this recording's pools (used without VK_KHR_push_descriptor).
    fn descriptor_set(&mut self, layout: vk::DescriptorSetLayout) -> Result<vk::DescriptorSet> {
        let d = &self.dev.ctx.device;
        let layouts = [layout];
        if let Some(&pool) = self.descriptor_pools.last() {
            let ai = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(pool)
                .set_layouts(&layouts);
            // SAFETY: the pool belongs to this recording.
            match unsafe { d.allocate_descriptor_sets(&ai) } {
                Ok(s) => return Ok(s[0]),
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL) => {}
                Err(e) => return Err(vk_error("allocating a descriptor set", e).into()),
            }
        }
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: SETS_PER_DESCRIPTOR_POOL * BUFFERS_PER_SET,
        }];
        let ci = vk::DescriptorPoolCreateInfo::default()
            .max_sets(SETS_PER_DESCRIPTOR_POOL)
            .pool_sizes(&sizes);
        // SAFETY: valid device and create info.
        let pool = unsafe { d.create_descriptor_pool(&ci, None) }
            .map_err(|e| vk_error("creating a descriptor pool", e))?;
        self.descriptor_pools.push(pool);
        let ai = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(pool)
            .set_layouts(&layouts);
        // SAFETY: as above.
        let s = unsafe { d.allocate_descriptor_sets(&ai) }
            .map_err(|e| vk_error("allocating a descriptor set", e))?;
        Ok(s[0])
    }

    /// The query pool and first query of the next dispatch's timestamp pair.
    fn next_timestamps(&mut self, op: &'static str) -> Result<(vk::QueryPool, u32)> {
        let i = self.profiled_ops.len() as u32;
        let slot = i % DISPATCHES_PER_QUERY_POOL;
        if slot == 0 {
            let ci = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(2 * DISPATCHES_PER_QUERY_POOL);
            // SAFETY: valid device and create info.
            let pool = unsafe { self.dev.ctx.device.create_query_pool(&ci, None) }
                .map_err(|e| vk_error("creating a timestamp query pool", e))?;
            self.query_pools.push(pool);
        }
        self.profiled_ops.push(op);
        Ok((*self.query_pools.last().expect("just created"), 2 * slot))
    }

    /// End the command buffer (once), so it can be submitted.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.ended.get() {
            return Ok(());
        }
        let d = &self.dev.ctx.device;
        // Makes every write visible to the host and to later submissions.
        full_barrier(d, self.cmd);
        // SAFETY: `cmd` is recording.
        unsafe { d.end_command_buffer(self.cmd) }
            .map_err(|e| vk_error("ending a command buffer", e))?;
        self.ended.set(true);
        Ok(())
    }

    /// Submit the (ended) command buffer once its previous run has finished, and mark every
    /// buffer it uses with the submission's timeline value before the queue sees it; `before`
    /// also gets that value first (so the backend lists the run's checks before any other
    /// thread can wait for it).
    pub(crate) fn submit(&self, before: impl FnOnce(u64)) -> Result<u64, VulkanError> {
        let ctx = &self.dev.ctx;
        ctx.wait(self.last_submit.get())?;
        let value = ctx.submit_with(self.cmd, |value| {
            for b in self.buffers.values() {
                b.0.last_use.fetch_max(value, Ordering::SeqCst);
            }
            before(value);
        })?;
        self.last_submit.set(value);
        Ok(value)
    }

    /// Per-op GPU time of the finished submission (profiling only).
    pub(crate) fn profile(&self) -> Result<Vec<ProfileRow>> {
        let ctx = &self.dev.ctx;
        ctx.wait(self.last_submit.get())?;
        let mut ticks = vec![0u64; 2 * self.profiled_ops.len()];
        let per_pool = 2 * DISPATCHES_PER_QUERY_POOL as usize;
        for (pool, chunk) in self.query_pools.iter().zip(ticks.chunks_mut(per_pool)) {
            // SAFETY: every query in the chunk was written by the finished submission.
            unsafe {
                ctx.device.get_query_pool_results(
                    *pool,
                    0,
                    chunk,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            }
            .map_err(|e| ctx.fail("reading timestamps", e))?;
        }
        Ok(profile::aggregate(
            &self.profiled_ops,
            &ticks,
            ctx.limits.timestamp_period_ns,
            ctx.limits.timestamp_valid_bits,
        ))
    }
}

impl Drop for VulkanRecording {
    fn drop(&mut self) {
        let ctx = &self.dev.ctx;
        // The command buffer may still be executing.
        let _ = ctx.wait(self.last_submit.get());
        // SAFETY: nothing pending uses these objects (waited above, or the device is lost).
        unsafe {
            for p in self.descriptor_pools.drain(..) {
                ctx.device.destroy_descriptor_pool(p, None);
            }
            for p in self.query_pools.drain(..) {
                ctx.device.destroy_query_pool(p, None);
            }
            ctx.device.destroy_command_pool(self.pool, None);
        }
    }
}

/// Compute writes before this point are visible to compute reads and writes after it.
fn compute_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let mb = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
    // SAFETY: `cmd` is recording (caller).
    unsafe {
        d.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::DependencyFlags::empty(),
            &mb,
            &[],
            &[],
        )
    };
}
