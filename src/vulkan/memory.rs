//! Device buffers and host transfers. Every buffer is a storage buffer that can also be copied
//! to and from. Memory that is host-visible and coherent (lavapipe and other UMA devices, where
//! all memory is) is mapped once and written with `memcpy`; otherwise transfers go through one
//! growable staging buffer and a copy on the queue. Host access waits on the timeline value of
//! the last submission that used the buffer, so it is ordered with in-flight work.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};

use super::context::Context;
use super::{VulkanError, vk_error};
use crate::backend::check::BufferInfo;

/// Buffers at least this large get their own device memory allocation.
const DEDICATED_BYTES: u64 = 64 << 20;
/// Largest staging buffer; bigger transfers go in chunks.
const STAGING_MAX: u64 = 64 << 20;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct BufferInner {
    pub(crate) ctx: Arc<Context>,
    /// Unique per buffer (hazard tracking compares ids, not handles that may be reused).
    pub id: u64,
    pub raw: vk::Buffer,
    /// Bytes the buffer was created for (what ops may address).
    pub bytes: u64,
    /// Bytes of the Vulkan buffer: `bytes` rounded up to whole 4-byte words, at least 16.
    pub capacity: u64,
    allocation: Mutex<Option<Allocation>>,
    /// The persistent mapping when the memory is host-visible and coherent.
    mapped: Option<NonNull<u8>>,
    /// Whether reading through the mapping is fast (host-cached memory).
    cached: bool,
    read_only: bool,
    /// Timeline value of the last submission that used this buffer.
    pub last_use: AtomicU64,
}

// SAFETY: `mapped` points into device memory owned by `allocation`, which lives as long as
// this struct; writes through it are ordered by `last_use` waits and the backend's contract
// that ops never write what another op reads without a barrier.
unsafe impl Send for BufferInner {}
// SAFETY: as above.
unsafe impl Sync for BufferInner {}

impl Drop for BufferInner {
    fn drop(&mut self) {
        // A one-shot transfer may still be using it; recordings hold their own references.
        let _ = self.ctx.wait(self.last_use.load(Ordering::SeqCst));
        // SAFETY: no pending work uses the buffer any more (waited above, or the device is
        // lost and nothing will run).
        unsafe { self.ctx.device.destroy_buffer(self.raw, None) };
        if let Some(a) = self
            .allocation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = self.ctx.allocator().free(a);
            self.ctx.buffer_freed(self.capacity);
        }
    }
}

/// A Vulkan buffer handle: reference counted, cheap to clone.
#[derive(Clone)]
pub struct VulkanBuffer(pub(crate) Arc<BufferInner>);

impl VulkanBuffer {
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.0.bytes
    }
    /// Whether the host reads and writes it through a mapping (no staging copy).
    pub fn is_mapped(&self) -> bool {
        self.0.mapped.is_some()
    }

    /// 32-bit word `i` of a buffer from [`Memory::alloc_mapped`], read through the mapping
    /// whether or not the memory is host-cached (a few words: no staging copy). The caller
    /// waited for the work that writes it.
    pub(crate) fn mapped_word(&self, i: usize) -> u32 {
        let p = self.0.mapped.expect("a buffer from Memory::alloc_mapped");
        assert!(
            (i + 1) * 4 <= self.0.capacity as usize,
            "word {i} outside the buffer"
        );
        // SAFETY: the word lies inside the mapping (asserted) and is 4-byte aligned (the
        // mapping is, and buffer offsets in memory are multiples of the buffer's alignment);
        // volatile because the device writes it.
        unsafe { std::ptr::read_volatile(p.as_ptr().cast::<u32>().add(i)) }
    }
}

impl std::fmt::Debug for VulkanBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VulkanBuffer#{}({} bytes)", self.0.id, self.0.bytes)
    }
}

impl BufferInfo for VulkanBuffer {
    fn byte_len(&self) -> usize {
        self.0.bytes as usize
    }
    fn same(&self, other: &VulkanBuffer) -> bool {
        self.0.id == other.0.id
    }
    fn is_read_only(&self) -> bool {
        self.0.read_only
    }
}

struct Staging {
    buf: VulkanBuffer,
}

/// Buffer creation and host transfers for one device.
pub(crate) struct Memory {
    ctx: Arc<Context>,
    /// Never map device buffers, so host transfers take the staging path of discrete GPUs.
    force_staging: bool,
    pool: Mutex<vk::CommandPool>,
    upload: Mutex<Option<Staging>>,
    download: Mutex<Option<Staging>>,
}

impl Memory {
    pub fn new(ctx: Arc<Context>, force_staging: bool) -> Result<Memory, VulkanError> {
        let ci = vk::CommandPoolCreateInfo::default()
            .queue_family_index(ctx.queue_family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: valid device and create info.
        let pool = unsafe { ctx.device.create_command_pool(&ci, None) }
            .map_err(|e| vk_error("creating the transfer command pool", e))?;
        Ok(Memory {
            ctx,
            force_staging,
            pool: Mutex::new(pool),
            upload: Mutex::new(None),
            download: Mutex::new(None),
        })
    }

    /// A buffer of `bytes` bytes in `location`, not initialised.
    fn create(
        &self,
        bytes: u64,
        location: MemoryLocation,
        read_only: bool,
    ) -> Result<VulkanBuffer, VulkanError> {
        let ctx = &self.ctx;
        ctx.check_lost("allocating a buffer")?;
        let capacity = bytes.div_ceil(4).max(4) * 4;
        if capacity > ctx.max_allocation {
            return Err(VulkanError::OutOfDeviceMemory(format!(
                "allocating a {bytes}-byte buffer: larger than the {}-byte maximum of this \
                 device (its largest allocation, buffer or memory heap)",
                ctx.max_allocation
            )));
        }
        let ci = vk::BufferCreateInfo::default()
            .size(capacity)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid device and create info.
        let raw = unsafe { ctx.device.create_buffer(&ci, None) }
            .map_err(|e| vk_error(&format!("creating a {bytes}-byte buffer"), e))?;
        // SAFETY: `raw` was just created from this device.
        let requirements = unsafe { ctx.device.get_buffer_memory_requirements(raw) };
        let allocation = ctx
            .allocator()
            .allocate(&AllocationCreateDesc {
                name: "kinema",
                requirements,
                location,
                linear: true,
                allocation_scheme: if capacity >= DEDICATED_BYTES {
                    AllocationScheme::DedicatedBuffer(raw)
                } else {
                    AllocationScheme::GpuAllocatorManaged
                },
            })
            .map_err(|e| {
                // SAFETY: the buffer is unused.
                unsafe { ctx.device.destroy_buffer(raw, None) };
                match e {
                    gpu_allocator::AllocationError::OutOfMemory => {
                        VulkanError::OutOfDeviceMemory(format!("allocating a {bytes}-byte buffer"))
                    }
                    e => VulkanError::Unavailable(format!(
                        "allocating a {bytes}-byte buffer failed: {e}"
                    )),
                }
            })?;
        // SAFETY: the allocation satisfies the buffer's requirements; neither is bound yet.
        if let Err(e) = unsafe {
            ctx.device
                .bind_buffer_memory(raw, allocation.memory(), allocation.offset())
        } {
            // SAFETY: the buffer is unused.
            unsafe { ctx.device.destroy_buffer(raw, None) };
            let _ = ctx.allocator().free(allocation);
            return Err(vk_error("binding buffer memory", e));
        }
        let props = allocation.memory_properties();
        let coherent = props.contains(
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
        );
        let staged = self.force_staging && location == MemoryLocation::GpuOnly;
        let mapped = allocation
            .mapped_ptr()
            .filter(|_| coherent && !staged)
            .map(|p| p.cast::<u8>());
        ctx.buffer_made(capacity);
        Ok(VulkanBuffer(Arc::new(BufferInner {
            ctx: ctx.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            raw,
            bytes,
            capacity,
            allocation: Mutex::new(Some(allocation)),
            mapped,
            cached: props.contains(vk::MemoryPropertyFlags::HOST_CACHED),
            read_only,
            last_use: AtomicU64::new(0),
        })))
    }

    /// A zero-filled device buffer.
    pub fn alloc(&self, bytes: u64, read_only: bool) -> Result<VulkanBuffer, VulkanError> {
        let buf = self.create(bytes, MemoryLocation::GpuOnly, read_only)?;
        match buf.0.mapped {
            // SAFETY: the mapping covers `capacity` bytes and no work uses the new buffer.
            Some(p) => unsafe { std::ptr::write_bytes(p.as_ptr(), 0, buf.0.capacity as usize) },
            None => {
                let raw = buf.0.raw;
                let size = buf.0.capacity;
                let value = self.one_shot("zero-filling a buffer", |d, cmd| {
                    // SAFETY: `cmd` is recording; offset 0 and size are multiples of 4.
                    unsafe { d.cmd_fill_buffer(cmd, raw, 0, size, 0) };
                })?;
                buf.0.last_use.store(value, Ordering::SeqCst);
            }
        }
        Ok(buf)
    }

    /// A zero-filled buffer in host-visible coherent memory, which the host reads through its
    /// mapping without a staging copy ([`VulkanBuffer::mapped_word`]): for the status words
    /// that shaders set when they meet bad data, checked by the host after every run.
    pub fn alloc_mapped(&self, bytes: u64) -> Result<VulkanBuffer, VulkanError> {
        let buf = self.create(bytes, MemoryLocation::GpuToCpu, false)?;
        let Some(p) = buf.0.mapped else {
            return Err(VulkanError::Unavailable(
                "no host-visible coherent memory for status words".into(),
            ));
        };
        // SAFETY: the mapping covers `capacity` bytes and no work uses the new buffer.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, buf.0.capacity as usize) };
        Ok(buf)
    }

    /// Copy `data` into `buf` at byte `offset`, after any submitted work that uses it.
    pub fn write(&self, buf: &VulkanBuffer, offset: u64, data: &[u8]) -> Result<(), VulkanError> {
        let b = &buf.0;
        self.ctx.wait(b.last_use.load(Ordering::SeqCst))?;
        if let Some(p) = b.mapped {
            // SAFETY: `offset + data.len() <= bytes` (checked by the caller) and no submitted
            // work uses the buffer any more.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    p.as_ptr().add(offset as usize),
                    data.len(),
                )
            };
            return Ok(());
        }
        let mut staging = self.upload.lock().unwrap_or_else(|e| e.into_inner());
        for (i, chunk) in data.chunks(STAGING_MAX as usize).enumerate() {
            let s = self.staging(&mut staging, chunk.len() as u64, MemoryLocation::CpuToGpu)?;
            let sp = s.0.mapped.expect("staging memory is mapped");
            // SAFETY: the staging buffer holds at least `chunk.len()` bytes and the previous
            // copy out of it was waited for.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), sp.as_ptr(), chunk.len()) };
            let region = vk::BufferCopy {
                src_offset: 0,
                dst_offset: offset + (i as u64) * STAGING_MAX,
                size: chunk.len() as u64,
            };
            let (src, dst) = (s.0.raw, b.raw);
            let value = self.one_shot("uploading to a buffer", |d, cmd| {
                // SAFETY: `cmd` is recording; the region lies inside both buffers.
                unsafe { d.cmd_copy_buffer(cmd, src, dst, &[region]) };
            })?;
            b.last_use.store(value, Ordering::SeqCst);
            self.ctx.wait(value)?;
        }
        Ok(())
    }

    /// Copy `out.len()` bytes from byte `offset` of `buf`, after submitted work that uses it.
    pub fn read(&self, buf: &VulkanBuffer, offset: u64, out: &mut [u8]) -> Result<(), VulkanError> {
        let b = &buf.0;
        self.ctx.wait(b.last_use.load(Ordering::SeqCst))?;
        if let (Some(p), true) = (b.mapped, b.cached) {
            // SAFETY: the range is inside the buffer (checked by the caller) and no
            // submitted work writes it any more.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    p.as_ptr().add(offset as usize),
                    out.as_mut_ptr(),
                    out.len(),
                )
            };
            return Ok(());
        }
        let mut staging = self.download.lock().unwrap_or_else(|e| e.into_inner());
        for (i, chunk) in out.chunks_mut(STAGING_MAX as usize).enumerate() {
            let s = self.staging(&mut staging, chunk.len() as u64, MemoryLocation::GpuToCpu)?;
            let region = vk::BufferCopy {
                src_offset: offset + (i as u64) * STAGING_MAX,
                dst_offset: 0,
                size: chunk.len() as u64,
            };
            let (src, dst) = (b.raw, s.0.raw);
            let value = self.one_shot("reading back a buffer", |d, cmd| {
                // SAFETY: `cmd` is recording; the region lies inside both buffers.
                unsafe { d.cmd_copy_buffer(cmd, src, dst, &[region]) };
            })?;
            self.ctx.wait(value)?;
            let sp = s.0.mapped.expect("staging memory is mapped");
            // SAFETY: the copy finished (waited) and made its writes visible to the host.
            unsafe { std::ptr::copy_nonoverlapping(sp.as_ptr(), chunk.as_mut_ptr(), chunk.len()) };
        }
        Ok(())
    }

    /// The staging buffer, grown to hold `bytes`.
    fn staging<'a>(
        &self,
        slot: &'a mut Option<Staging>,
        bytes: u64,
        location: MemoryLocation,
    ) -> Result<&'a VulkanBuffer, VulkanError> {
        if slot.as_ref().is_none_or(|s| s.buf.0.capacity < bytes) {
            let size = bytes
                .next_power_of_two()
                .clamp(1 << 16, STAGING_MAX)
                .max(bytes);
            let buf = self.create(size, location, false)?;
            if buf.0.mapped.is_none() {
                return Err(VulkanError::Unavailable(
                    "no host-visible coherent memory for staging".into(),
                ));
            }
            *slot = Some(Staging { buf });
        }
        Ok(&slot.as_ref().expect("just filled").buf)
    }

    /// Record `f` into a one-time command buffer between full barriers (so it is ordered with
    /// earlier and later submissions on the queue), submit it, and return its timeline value.
    /// The command buffer is freed once the work has finished.
    fn one_shot(
        &self,
        what: &str,
        f: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<u64, VulkanError> {
        let d = &self.ctx.device;
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let ai = vk::CommandBufferAllocateInfo::default()
            .command_pool(*pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is externally synchronised by its lock.
        let cmd = unsafe { d.allocate_command_buffers(&ai) }.map_err(|e| vk_error(what, e))?[0];
        let run = || -> Result<u64, VulkanError> {
            let bi = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            // SAFETY: `cmd` was just allocated and is not in use.
            unsafe { d.begin_command_buffer(cmd, &bi) }.map_err(|e| vk_error(what, e))?;
            full_barrier(d, cmd);
            f(d, cmd);
            full_barrier(d, cmd);
            // SAFETY: `cmd` is recording.
            unsafe { d.end_command_buffer(cmd) }.map_err(|e| vk_error(what, e))?;
            let value = self.ctx.submit(cmd)?;
            self.ctx.wait(value)?;
            Ok(value)
        };
        let r = run();
        // SAFETY: the command buffer finished (waited) or was never submitted; a lost device
        // runs nothing more.
        unsafe { d.free_command_buffers(*pool, &[cmd]) };
        r
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // Staging buffers first (they wait for their last use), then the pool.
        self.upload
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.download
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let pool = *self.pool.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every one-shot command buffer was freed after finishing.
        unsafe { self.ctx.device.destroy_command_pool(pool, None) };
    }
}

/// One global barrier: all earlier commands (including earlier submissions on the queue) and
/// their writes happen before all later commands, and device writes become visible to the
/// host once the submission is waited for.
pub(crate) fn full_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let mb = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
        .dst_access_mask(
            vk::AccessFlags::MEMORY_READ
                | vk::AccessFlags::MEMORY_WRITE
                | vk::AccessFlags::HOST_READ,
        )];
    // SAFETY: `cmd` is in the recording state (callers).
    unsafe {
        d.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::PipelineStageFlags::ALL_COMMANDS | vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &mb,
            &[],
            &[],
        )
    };
}
