//! Device buffers and host transfers. Every buffer is a storage buffer that can also be copied
//! to and from. Memory that is host-visible and coherent (lavapipe and other UMA devices, where
//! all memory is) is mapped once and written with `memcpy`; otherwise transfers go through
//! growable staging buffers and copies on the queue. Host access through a mapping waits on the
//! timeline value of the last submission that used the buffer, so it is ordered with in-flight
//! work.
//!
//! Staged writes are deferred: each is a `memcpy` into the current upload staging buffer, and
//! all pending ones are copied on the queue by one command buffer submitted just before the
//! next submission ([`Memory::flush_uploads`]), with no host wait. There are two upload staging
//! buffers, used in turn: while the queue copies one out, the host fills the other (a model's
//! weights, gigabytes written in a row, stream at the pace of the slower of the two instead of
//! their sum). Large copies between host memory and a mapping are split over the host's cores
//! ([`copy_parallel`]); queue order and the full barriers
//! at both ends of every command buffer order them after earlier work that used the buffers and
//! before later work. Staged reads are one copy submission and one wait, however many ranges
//! are read together ([`Memory::read_many`]). On a discrete GPU this turns a graph run with
//! dozens of inputs and several outputs into three submissions and one host wait.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};

use super::context::Context;
use super::{VulkanError, vk_error};
use crate::backend::check::BufferInfo;

/// Copies at least this large are split over the host's cores ([`copy_parallel`]).
const PARALLEL_COPY_BYTES: usize = 8 << 20;

/// Threads a large copy uses at most.
const PARALLEL_COPY_THREADS: usize = 8;

/// `src` copied to `dst`: in pieces on up to [`PARALLEL_COPY_THREADS`] scoped threads when it
/// is at least [`PARALLEL_COPY_BYTES`] long (one core's `memcpy` from a file's memory map into
/// write-combined staging memory is what limits a model's upload), else in one `memcpy`.
///
/// # Safety
/// `dst` is valid for `src.len()` bytes of writes, does not overlap `src`, and nothing else
/// accesses those bytes during the call.
unsafe fn copy_parallel(src: &[u8], dst: *mut u8) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(PARALLEL_COPY_THREADS)
        .min(src.len() / (PARALLEL_COPY_BYTES / PARALLEL_COPY_THREADS).max(1));
    if src.len() < PARALLEL_COPY_BYTES || threads <= 1 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        return;
    }
    // Pieces of a whole number of 4 KiB, one per thread.
    let piece = src.len().div_ceil(threads).next_multiple_of(4096);
    let dst = dst as usize;
    std::thread::scope(|s| {
        for (i, part) in src.chunks(piece).enumerate() {
            s.spawn(move || {
                // SAFETY: piece i lands at dst + i * piece, inside the caller's range and
                // disjoint from every other piece.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        part.as_ptr(),
                        (dst + i * piece) as *mut u8,
                        part.len(),
                    )
                };
            });
        }
    });
}

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

/// Staged writes waiting for the next submission (see the module doc).
#[derive(Default)]
struct Uploads {
    /// The two staging buffers, filled in turn.
    staging: [Option<VulkanBuffer>; 2],
    /// The one being filled.
    cur: usize,
    /// Bytes at the start of `staging[cur]` that pending copies read.
    used: u64,
    /// The pending copies: destination and region (the source offset is in `staging[cur]`).
    copies: Vec<(VulkanBuffer, vk::BufferCopy)>,
    /// Copy command buffers submitted, with the timeline value after which each is freed.
    submitted: Vec<(vk::CommandBuffer, u64)>,
}

/// The first upload staging buffer (it grows to what one batch of writes needs).
const UPLOAD_STAGING_MIN: u64 = 1 << 20;

/// Buffer creation and host transfers for one device.
pub(crate) struct Memory {
    ctx: Arc<Context>,
    /// Never map device buffers, so host transfers take the staging path of discrete GPUs.
    force_staging: bool,
    pool: Mutex<vk::CommandPool>,
    uploads: Mutex<Uploads>,
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
            uploads: Mutex::new(Uploads::default()),
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

    /// Copy `data` into `buf` at byte `offset`, after any submitted work that uses it: at once
    /// through a mapping, else at the next submission (see the module doc).
    pub fn write(&self, buf: &VulkanBuffer, offset: u64, data: &[u8]) -> Result<(), VulkanError> {
        let b = &buf.0;
        if let Some(p) = b.mapped {
            self.ctx.wait(b.last_use.load(Ordering::SeqCst))?;
            // SAFETY: `offset + data.len() <= bytes` (checked by the caller) and no submitted
            // work uses the buffer any more.
            unsafe { copy_parallel(data, p.as_ptr().add(offset as usize)) };
            return Ok(());
        }
        let mut up = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        for (i, chunk) in data.chunks(STAGING_MAX as usize).enumerate() {
            let len = chunk.len() as u64;
            let dst_offset = offset + (i as u64) * STAGING_MAX;
            // Copies in one command buffer are unordered: a write over bytes that a pending
            // copy writes goes into the next one.
            let overlaps = up.copies.iter().any(|(d, r)| {
                d.0.id == b.id
                    && r.dst_offset < dst_offset + len
                    && dst_offset < r.dst_offset + r.size
            });
            let fits = up.staging[up.cur]
                .as_ref()
                .is_some_and(|s| up.used + len <= s.0.capacity);
            // The staging bytes this write needs: when a batch of writes outgrew the buffer,
            // what the batch needed (up to the limit), so that it settles at one flush per
            // submission.
            let mut need = len;
            if overlaps || !fits {
                if !fits {
                    need = (up.used + len).min(STAGING_MAX).max(len);
                }
                self.flush_locked(&mut up)?;
            }
            let cur = up.cur;
            if up.staging[cur].as_ref().is_none_or(|s| s.0.capacity < need) {
                let size = match &up.staging[cur] {
                    Some(s) => (2 * s.0.capacity).max(need),
                    None => UPLOAD_STAGING_MIN.max(need),
                };
                let size = size.next_power_of_two().min(STAGING_MAX).max(len);
                // Dropping the old buffer waits for the copies that read it (warm-up only:
                // the buffer grows to what one batch of writes needs).
                up.staging[cur] = None;
                let s = self.create(size, MemoryLocation::CpuToGpu, false)?;
                if s.0.mapped.is_none() {
                    return Err(VulkanError::Unavailable(
                        "no host-visible coherent memory for staging".into(),
                    ));
                }
                up.staging[cur] = Some(s);
            }
            let s = up.staging[cur].clone().expect("just filled");
            if up.used == 0 {
                // Reused from the start: the copies of the flush before last (the last one
                // read the other buffer) must have read it.
                self.ctx.wait(s.0.last_use.load(Ordering::SeqCst))?;
            }
            let sp = s.0.mapped.expect("staging memory is mapped");
            let at = up.used;
            // SAFETY: `at + len <= capacity` (made to fit above) and no submitted copy reads
            // these bytes (the copies that read this buffer finished before the wait above).
            unsafe { copy_parallel(chunk, sp.as_ptr().add(at as usize)) };
            up.copies.push((
                buf.clone(),
                vk::BufferCopy {
                    src_offset: at,
                    dst_offset,
                    size: len,
                },
            ));
            up.used = (at + len).next_multiple_of(16);
        }
        Ok(())
    }

    /// Submit the pending staged writes (one command buffer, no host wait); a backend calls
    /// this before every submission and host read.
    pub fn flush_uploads(&self) -> Result<(), VulkanError> {
        let mut up = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        self.flush_locked(&mut up)
    }

    fn flush_locked(&self, up: &mut Uploads) -> Result<(), VulkanError> {
        if up.copies.is_empty() {
            return Ok(());
        }
        let copies = std::mem::take(&mut up.copies);
        up.used = 0;
        let staging = up.staging[up.cur]
            .clone()
            .expect("pending copies have a staging buffer");
        let what = "uploading to buffers";
        let d = &self.ctx.device;
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let done = self.ctx.completed();
        let (finished, running): (Vec<_>, Vec<_>) =
            up.submitted.drain(..).partition(|&(_, v)| v <= done);
        up.submitted = running;
        if !finished.is_empty() {
            let cmds: Vec<vk::CommandBuffer> = finished.iter().map(|&(c, _)| c).collect();
            // SAFETY: these command buffers finished (their timeline values were reached);
            // the pool is externally synchronised by its lock.
            unsafe { d.free_command_buffers(*pool, &cmds) };
        }
        // The pool is externally synchronised by its lock.
        let cmd = allocate_command_buffer(d, *pool, what)?;
        let run = || -> Result<u64, VulkanError> {
            record_one_time(d, cmd, what, || {
                for (dst, region) in &copies {
                    // SAFETY: `cmd` is recording; the region lies inside both buffers (the
                    // caller of `write` checked the destination range).
                    unsafe { d.cmd_copy_buffer(cmd, staging.0.raw, dst.0.raw, &[*region]) };
                }
            })?;
            self.ctx.submit_with(cmd, |value| {
                staging.0.last_use.fetch_max(value, Ordering::SeqCst);
                for (dst, _) in &copies {
                    dst.0.last_use.fetch_max(value, Ordering::SeqCst);
                }
            })
        };
        match run() {
            Ok(value) => {
                up.submitted.push((cmd, value));
                // The host fills the other buffer while the queue copies this one out.
                up.cur ^= 1;
                Ok(())
            }
            Err(e) => {
                // SAFETY: the command buffer was never submitted.
                unsafe { d.free_command_buffers(*pool, &[cmd]) };
                Err(e)
            }
        }
    }

    /// Copy `out.len()` bytes from byte `offset` of `buf`, after submitted work that uses it.
    pub fn read(&self, buf: &VulkanBuffer, offset: u64, out: &mut [u8]) -> Result<(), VulkanError> {
        self.read_many(&mut [(buf, offset, out)])
    }

    /// Copy several ranges `(buffer, byte offset, destination)` out, after submitted work that
    /// uses them: mapped host-cached buffers with `memcpy`, the others with one copy
    /// submission and one wait for all of them (in chunks when they exceed the staging limit).
    pub fn read_many(
        &self,
        reads: &mut [(&VulkanBuffer, u64, &mut [u8])],
    ) -> Result<(), VulkanError> {
        self.flush_uploads()?;
        let mut staged = Vec::new();
        for (i, (buf, offset, out)) in reads.iter_mut().enumerate() {
            let b = &buf.0;
            match (b.mapped, b.cached) {
                (Some(p), true) => {
                    self.ctx.wait(b.last_use.load(Ordering::SeqCst))?;
                    // SAFETY: the range is inside the buffer (checked by the caller) and no
                    // submitted work writes it any more.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            p.as_ptr().add(*offset as usize),
                            out.as_mut_ptr(),
                            out.len(),
                        )
                    };
                }
                _ => staged.push(i),
            }
        }
        if staged.is_empty() {
            return Ok(());
        }
        let mut staging = self.download.lock().unwrap_or_else(|e| e.into_inner());
        // Pieces of at most STAGING_MAX bytes: (read, byte offset in it, length).
        let mut pieces = Vec::new();
        for &i in &staged {
            let n = reads[i].2.len() as u64;
            let mut at = 0;
            while at < n {
                let len = (n - at).min(STAGING_MAX);
                pieces.push((i, at, len));
                at += len;
            }
        }
        let mut next = 0;
        while next < pieces.len() {
            // As many pieces as fit in one staging buffer, 16-byte aligned inside it.
            let mut total = 0u64;
            let mut end = next;
            while end < pieces.len() {
                let t = total.next_multiple_of(16) + pieces[end].2;
                if end > next && t > STAGING_MAX {
                    break;
                }
                total = t;
                end += 1;
            }
            let s = self.staging(&mut staging, total, MemoryLocation::GpuToCpu)?;
            let mut regions: Vec<(vk::Buffer, vk::BufferCopy)> = Vec::with_capacity(end - next);
            let mut at = 0u64;
            for &(i, off, len) in &pieces[next..end] {
                at = at.next_multiple_of(16);
                regions.push((
                    reads[i].0.0.raw,
                    vk::BufferCopy {
                        src_offset: reads[i].1 + off,
                        dst_offset: at,
                        size: len,
                    },
                ));
                at += len;
            }
            let dst = s.0.raw;
            // Queue order and the command buffer's leading full barrier put the copies after
            // the work that writes the buffers: no wait before submitting.
            self.one_shot("reading back buffers", |d, cmd| {
                for (src, region) in &regions {
                    // SAFETY: `cmd` is recording; the region lies inside both buffers.
                    unsafe { d.cmd_copy_buffer(cmd, *src, dst, &[*region]) };
                }
            })?;
            let sp = s.0.mapped.expect("staging memory is mapped");
            for (&(i, off, len), (_, region)) in pieces[next..end].iter().zip(&regions) {
                let out = &mut reads[i].2[off as usize..(off + len) as usize];
                // SAFETY: the copy finished (waited) and made its writes visible to the host;
                // the region lies inside the staging buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        sp.as_ptr().add(region.dst_offset as usize),
                        out.as_mut_ptr(),
                        out.len(),
                    )
                };
            }
            next = end;
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
        // The pool is externally synchronised by its lock.
        let cmd = allocate_command_buffer(d, *pool, what)?;
        let run = || -> Result<u64, VulkanError> {
            record_one_time(d, cmd, what, || f(d, cmd))?;
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
        // Staging buffers first (they wait for their last use), then the pool. Pending writes
        // are dropped with their buffers; submitted copies finish first.
        let _ = self.ctx.wait(self.ctx.last_submitted());
        let up = std::mem::take(self.uploads.get_mut().unwrap_or_else(|e| e.into_inner()));
        drop(up);
        self.download
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let pool = *self.pool.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every one-shot command buffer was freed after finishing, and the upload
        // copies still allocated from the pool finished (waited above, or the device is lost).
        unsafe { self.ctx.device.destroy_command_pool(pool, None) };
    }
}

/// One primary command buffer from `pool`, which the caller holds the lock of.
fn allocate_command_buffer(
    d: &ash::Device,
    pool: vk::CommandPool,
    what: &str,
) -> Result<vk::CommandBuffer, VulkanError> {
    let ai = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: the caller holds the pool's lock (the pool is externally synchronised).
    Ok(unsafe { d.allocate_command_buffers(&ai) }.map_err(|e| vk_error(what, e))?[0])
}

/// Record `f`'s commands into `cmd` (just allocated, not in use) for one submission,
/// between full barriers.
fn record_one_time(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    what: &str,
    f: impl FnOnce(),
) -> Result<(), VulkanError> {
    let bi =
        vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
    // SAFETY: the caller's `cmd` was just allocated and is not in use.
    unsafe { d.begin_command_buffer(cmd, &bi) }.map_err(|e| vk_error(what, e))?;
    full_barrier(d, cmd);
    f();
    full_barrier(d, cmd);
    // SAFETY: `cmd` is recording.
    unsafe { d.end_command_buffer(cmd) }.map_err(|e| vk_error(what, e))?;
    Ok(())
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
