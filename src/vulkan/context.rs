//! Instance, device selection, the compute queue, the timeline semaphore that orders host
//! access with submitted work, and the device limits kernels must respect.

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ash::vk;
use gpu_allocator::AllocationSizes;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use super::loader::{self, OpenError};
use super::probe::{
    COOPMAT2_NAME, CoopMatShape, Coopmat2Features, Coopmat2Properties, coopmat_shapes,
};
use super::{VulkanError, vk_error};

/// Longest wait for submitted work before it is reported as a hang.
const WAIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Push constants kinema shaders may use: the spec's guaranteed minimum (lavapipe's actual
/// limit), whatever the device allows.
pub(crate) const MAX_PUSH_CONSTANTS: u32 = 128;

/// The device limits kernels read (never assume them).
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub subgroup_size: u32,
    /// Compute shaders may use subgroup arithmetic (`subgroupAdd`, `subgroupMax`): the row
    /// reductions of fast mode.
    pub subgroup_arithmetic: bool,
    pub max_shared_memory: u32,
    /// `min(maxPushConstantsSize, 128)`.
    pub max_push_constants: u32,
    /// Largest storage-buffer binding in bytes: `maxStorageBufferRange`, or less when
    /// overridden (`KINEMA_VK_MAX_BINDING`, for tests).
    pub max_binding: u64,
    pub min_storage_offset_align: u64,
    pub max_workgroup_count: [u32; 3],
    pub max_workgroup_size: [u32; 3],
    pub max_workgroup_invocations: u32,
    pub timestamp_period_ns: f32,
    /// 0 when the queue cannot write timestamps.
    pub timestamp_valid_bits: u32,
}

/// Whether the environment variable `name` is set to something other than empty or `0`
/// (the Vulkan backend's on/off switches).
pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

pub(crate) struct Context {
    // Kept so the loader stays open while the instance lives.
    _entry: ash::Entry,
    pub instance: ash::Instance,
    pub device: ash::Device,
    queue: Mutex<vk::Queue>,
    pub queue_family: u32,
    /// `VK_KHR_push_descriptor` when present and not disabled.
    pub push_descriptor: Option<ash::khr::push_descriptor::Device>,
    timeline: vk::Semaphore,
    /// Timeline value of the newest submission (0: none yet).
    last_submitted: AtomicU64,
    lost: AtomicBool,
    allocator: ManuallyDrop<Mutex<Allocator>>,
    /// Bytes of every live buffer made through `allocator` (their capacities).
    buffer_bytes: AtomicU64,
    /// The most `buffer_bytes` reached since the last [`Context::reset_buffer_peak`].
    buffer_peak: AtomicU64,
    pub limits: Limits,
    /// The f16 x f16 + f32 -> f32 subgroup cooperative-matrix shape fast-mode GEMMs use, when
    /// the device has `VK_KHR_cooperative_matrix`, Vulkan 1.3 and shaderFloat16 (both
    /// enabled at creation then).
    pub coopmat: Option<CoopMatShape>,
    /// Workgroup-scope cooperative matrices (`VK_NV_cooperative_matrix2`) for fast-mode
    /// GEMMs: present when `coopmat` is, the device offers the extension with every feature
    /// `linear_cm2.comp` uses and 16-bit storage buffers, and they were not refused
    /// (`KINEMA_VK_NO_COOPMAT2`); enabled at creation then.
    pub coopmat2: Option<Coopmat2>,
    /// The largest buffer the backend asks for: `maxMemoryAllocationSize`, `maxBufferSize`
    /// (Vulkan 1.3) and the largest memory heap, whichever is smallest. A larger request is
    /// refused with [`VulkanError::OutOfDeviceMemory`] before it reaches the driver (which
    /// may fail it, or on a CPU driver commit host memory it then has to zero-fill).
    pub max_allocation: u64,
    pub name: String,
    pub index: usize,
    pub kind: vk::PhysicalDeviceType,
    /// vendor, device, driver version and pipeline-cache UUID: what a pipeline cache is
    /// valid for.
    pub cache_key: String,
    /// `VK_KHR_pipeline_executable_properties`, enabled only under
    /// `KINEMA_VK_PIPELINE_STATS=1` on a device that offers it: every pipeline is then created
    /// with its statistics captured, and they are printed (registers, spills, shared memory,
    /// as the driver names them).
    pub pipeline_stats: Option<ash::khr::pipeline_executable_properties::Device>,
}

/// What the device allows workgroup-scope cooperative matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Coopmat2 {
    /// `cooperativeMatrixWorkgroupScopeMaxWorkgroupSize`.
    pub max_workgroup_size: u32,
    /// `cooperativeMatrixReductions`: row reductions, which `attention_cm2.comp` needs (enabled
    /// at creation when offered).
    pub reductions: bool,
}

/// How a device is ranked when none is requested: discrete GPUs first, CPU devices last.
fn rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

fn device_name(p: &vk::PhysicalDeviceProperties) -> String {
    p.device_name_as_c_str()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unnamed device".into())
}

/// The device to use: `requested` (an index as `kinema info` lists them) or the best ranked
/// device with Vulkan 1.2.
fn choose(
    props: &[vk::PhysicalDeviceProperties],
    requested: Option<usize>,
) -> Result<usize, VulkanError> {
    let listing = || {
        props
            .iter()
            .enumerate()
            .map(|(i, p)| format!("[{i}] {}", device_name(p)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match requested {
        Some(i) if i >= props.len() => Err(VulkanError::Unavailable(format!(
            "Vulkan device {i} was requested (KINEMA_VK_DEVICE) but this machine has {} \
             device(s): {}",
            props.len(),
            listing()
        ))),
        Some(i) => Ok(i),
        None => (0..props.len())
            .filter(|&i| props[i].api_version >= vk::API_VERSION_1_2)
            .min_by_key(|&i| rank(props[i].device_type))
            .ok_or_else(|| {
                VulkanError::Unavailable(format!(
                    "no device supports Vulkan 1.2 (found {})",
                    listing()
                ))
            }),
    }
}

/// The cooperative-matrix shape for fast-mode GEMMs: f16 A and B, f32 C and result, subgroup
/// scope; 16 x 16 x 16 when offered (NVIDIA's native shape), else the first with every side
/// 8, 16 or 32 (what the shader's tiles divide).
fn choose_coopmat(shapes: &[CoopMatShape]) -> Option<CoopMatShape> {
    let f16 = vk::ComponentTypeKHR::FLOAT16;
    let f32 = vk::ComponentTypeKHR::FLOAT32;
    let usable: Vec<CoopMatShape> = shapes
        .iter()
        .copied()
        .filter(|s| s.subgroup_scope && s.a == f16 && s.b == f16 && s.c == f32 && s.result == f32)
        .filter(|s| [s.m, s.n, s.k].iter().all(|d| [8, 16, 32].contains(d)))
        .collect();
    usable
        .iter()
        .copied()
        .find(|s| (s.m, s.n, s.k) == (16, 16, 16))
        .or(usable.first().copied())
}

impl Context {
    /// Open the loader, pick a device and create it with one compute queue.
    pub fn new(
        requested: Option<usize>,
        max_binding: Option<u64>,
        use_push_descriptor: bool,
        use_coopmat2: bool,
    ) -> Result<Context, VulkanError> {
        let (entry, instance) = loader::open().map_err(|e| {
            VulkanError::Unavailable(match e {
                OpenError::NoLoader(e) => {
                    format!("no Vulkan loader (libvulkan.so.1) could be opened: {e}")
                }
                OpenError::CreateInstance(e) => {
                    format!("vkCreateInstance failed: {e} (is a driver / ICD installed?)")
                }
            })
        })?;
        // From here on the instance must be destroyed on every error path.
        // SAFETY: `instance` was just created and nothing else uses it yet.
        match unsafe {
            Self::with_instance(
                &entry,
                instance.clone(),
                requested,
                max_binding,
                use_push_descriptor,
                use_coopmat2,
            )
        } {
            Ok(c) => Ok(c),
            Err(e) => {
                // SAFETY: `with_instance` destroyed everything it created from the instance.
                unsafe { instance.destroy_instance(None) };
                Err(e)
            }
        }
    }

    /// # Safety
    /// `instance` must be valid; on error every object created from it has been destroyed.
    /// `entry` stays with the caller until the instance is destroyed (dropping the last
    /// `Entry` unloads the library the instance's functions live in).
    unsafe fn with_instance(
        entry: &ash::Entry,
        instance: ash::Instance,
        requested: Option<usize>,
        max_binding: Option<u64>,
        use_push_descriptor: bool,
        use_coopmat2: bool,
    ) -> Result<Context, VulkanError> {
        // SAFETY: `instance` is valid (caller).
        let devices = unsafe { instance.enumerate_physical_devices() }
            .map_err(|e| vk_error("enumerating physical devices", e))?;
        if devices.is_empty() {
            return Err(VulkanError::Unavailable(
                "the Vulkan loader found no physical devices".into(),
            ));
        }
        let props: Vec<vk::PhysicalDeviceProperties> = devices
            .iter()
            // SAFETY: each handle comes from this instance.
            .map(|&d| unsafe { instance.get_physical_device_properties(d) })
            .collect();
        let index = choose(&props, requested)?;
        let physical = devices[index];
        let name = device_name(&props[index]);
        let missing = |what: &str| VulkanError::MissingFeature {
            device: name.clone(),
            what: what.to_string(),
        };
        if props[index].api_version < vk::API_VERSION_1_2 {
            return Err(missing("Vulkan 1.2"));
        }

        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut subgroup)
            .push_next(&mut maint3);
        // SAFETY: `physical` belongs to the instance; the chain is well formed (both structs
        // are core in Vulkan 1.1, and the device has 1.2).
        unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
        let p = props2.properties;
        let max_buffer = if p.api_version >= vk::API_VERSION_1_3 {
            let mut maint4 = vk::PhysicalDeviceMaintenance4Properties::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maint4);
            // SAFETY: as above; the struct is core in Vulkan 1.3, which the device has.
            unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
            maint4.max_buffer_size
        } else {
            u64::MAX
        };
        // SAFETY: as above.
        let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
        let largest_heap = memory
            .memory_heaps_as_slice()
            .iter()
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        let max_allocation = maint3
            .max_memory_allocation_size
            .min(max_buffer)
            .min(largest_heap);
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f11)
            .push_next(&mut f12);
        // SAFETY: as above.
        unsafe { instance.get_physical_device_features2(physical, &mut f2) };
        if f12.timeline_semaphore == vk::FALSE {
            return Err(missing("timeline semaphores"));
        }

        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let compute =
            |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
        let family = families
            .iter()
            .position(|f| compute(f) && f.timestamp_valid_bits > 0)
            .or_else(|| families.iter().position(compute))
            .ok_or_else(|| missing("a compute queue"))?;
        // SAFETY: as above.
        let exts = unsafe { instance.enumerate_device_extension_properties(physical) }
            .map_err(|e| vk_error("listing device extensions", e))?;
        let has = |n: &CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(n));
        let push = use_push_descriptor && has(ash::khr::push_descriptor::NAME);
        let stats = env_flag("KINEMA_VK_PIPELINE_STATS")
            && has(ash::khr::pipeline_executable_properties::NAME)
            && {
                let mut fp = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
                let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut fp);
                // SAFETY: as above; the extension is listed, so its feature struct is known.
                unsafe { instance.get_physical_device_features2(physical, &mut f2) };
                fp.pipeline_executable_info == vk::TRUE
            };
        let coopmat =
            if props[index].api_version >= vk::API_VERSION_1_3 && f12.shader_float16 == vk::TRUE {
                let mut fc = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
                let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut fc);
                if has(ash::khr::cooperative_matrix::NAME) {
                    // SAFETY: as above; the extension is listed, so its feature struct is known.
                    unsafe { instance.get_physical_device_features2(physical, &mut f2) };
                }
                let shapes = coopmat_shapes(entry, &instance, physical, fc.cooperative_matrix != 0);
                choose_coopmat(&shapes)
            } else {
                None
            };
        let coopmat2 = if use_coopmat2
            && coopmat.is_some()
            && f11.storage_buffer16_bit_access == vk::TRUE
            && has(COOPMAT2_NAME)
        {
            let mut fc2 = Coopmat2Features::default();
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut fc2);
            // SAFETY: as above; the extension is listed, so its feature struct is known.
            unsafe { instance.get_physical_device_features2(physical, &mut f2) };
            let mut pc2 = Coopmat2Properties::default();
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut pc2);
            // SAFETY: as above.
            unsafe { instance.get_physical_device_properties2(physical, &mut p2) };
            fc2.has_used().then_some(Coopmat2 {
                max_workgroup_size: pc2.workgroup_scope_max_workgroup_size,
                reductions: fc2.reductions == vk::TRUE,
            })
        } else {
            None
        };

        let prio = [1.0f32];
        let qci = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family as u32)
            .queue_priorities(&prio)];
        let mut ext_names: Vec<*const std::ffi::c_char> = Vec::new();
        if push {
            ext_names.push(ash::khr::push_descriptor::NAME.as_ptr());
        }
        if coopmat.is_some() {
            ext_names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        }
        if coopmat2.is_some() {
            ext_names.push(COOPMAT2_NAME.as_ptr());
        }
        if stats {
            ext_names.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        let mut enable11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(coopmat2.is_some());
        // The cooperative-matrix shaders declare the Vulkan memory model (their scopes and
        // barriers are written with GL_KHR_memory_scope_semantics).
        let mut enable12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .shader_float16(coopmat.is_some())
            .vulkan_memory_model(coopmat.is_some() && f12.vulkan_memory_model == vk::TRUE);
        let mut enable_coop =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut enable_coop2 = Coopmat2Features::used();
        enable_coop2.reductions = vk::Bool32::from(coopmat2.is_some_and(|c| c.reductions));
        let mut dci = vk::DeviceCreateInfo::default()
            .queue_create_infos(&qci)
            .enabled_extension_names(&ext_names)
            .push_next(&mut enable11)
            .push_next(&mut enable12);
        if coopmat.is_some() {
            dci = dci.push_next(&mut enable_coop);
        }
        if coopmat2.is_some() {
            dci = dci.push_next(&mut enable_coop2);
        }
        let mut enable_stats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(true);
        if stats {
            dci = dci.push_next(&mut enable_stats);
        }
        // SAFETY: the create info and what it points to outlive the call.
        let device = unsafe { instance.create_device(physical, &dci, None) }
            .map_err(|e| vk_error("creating the logical device", e))?;
        // SAFETY: `device` was just created; on error it is destroyed before returning.
        match unsafe { Self::finish(&instance, &device, physical, family as u32) } {
            Ok((queue, timeline, allocator)) => {
                let limits = Limits {
                    subgroup_size: subgroup.subgroup_size.max(1),
                    subgroup_arithmetic: subgroup
                        .supported_operations
                        .contains(vk::SubgroupFeatureFlags::ARITHMETIC)
                        && subgroup
                            .supported_stages
                            .contains(vk::ShaderStageFlags::COMPUTE),
                    max_shared_memory: p.limits.max_compute_shared_memory_size,
                    max_push_constants: p.limits.max_push_constants_size.min(MAX_PUSH_CONSTANTS),
                    max_binding: max_binding
                        .map_or(u64::from(p.limits.max_storage_buffer_range), |m| {
                            m.min(u64::from(p.limits.max_storage_buffer_range))
                        }),
                    min_storage_offset_align: p.limits.min_storage_buffer_offset_alignment.max(4),
                    max_workgroup_count: p.limits.max_compute_work_group_count,
                    max_workgroup_size: p.limits.max_compute_work_group_size,
                    max_workgroup_invocations: p.limits.max_compute_work_group_invocations,
                    timestamp_period_ns: p.limits.timestamp_period,
                    timestamp_valid_bits: families[family].timestamp_valid_bits,
                };
                let uuid: String = p
                    .pipeline_cache_uuid
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                Ok(Context {
                    _entry: entry.clone(),
                    push_descriptor: push
                        .then(|| ash::khr::push_descriptor::Device::new(&instance, &device)),
                    pipeline_stats: stats.then(|| {
                        ash::khr::pipeline_executable_properties::Device::new(&instance, &device)
                    }),
                    instance,
                    device,
                    queue: Mutex::new(queue),
                    queue_family: family as u32,
                    timeline,
                    last_submitted: AtomicU64::new(0),
                    lost: AtomicBool::new(false),
                    allocator: ManuallyDrop::new(Mutex::new(allocator)),
                    buffer_bytes: AtomicU64::new(0),
                    buffer_peak: AtomicU64::new(0),
                    limits,
                    coopmat,
                    coopmat2,
                    max_allocation,
                    name,
                    index,
                    kind: p.device_type,
                    cache_key: format!(
                        "{:04x}-{:04x}-{:08x}-{uuid}",
                        p.vendor_id, p.device_id, p.driver_version
                    ),
                })
            }
            Err(e) => {
                // SAFETY: nothing created from the device is left.
                unsafe { device.destroy_device(None) };
                Err(e)
            }
        }
    }

    /// # Safety
    /// `device` must be valid; on error everything created here has been destroyed.
    unsafe fn finish(
        instance: &ash::Instance,
        device: &ash::Device,
        physical: vk::PhysicalDevice,
        family: u32,
    ) -> Result<(vk::Queue, vk::Semaphore, Allocator), VulkanError> {
        // SAFETY: queue 0 of `family` was requested at device creation.
        let queue = unsafe { device.get_device_queue(family, 0) };
        let mut tci = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let sci = vk::SemaphoreCreateInfo::default().push_next(&mut tci);
        // SAFETY: valid device and create info.
        let timeline = unsafe { device.create_semaphore(&sci, None) }
            .map_err(|e| vk_error("creating the timeline semaphore", e))?;
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.clone(),
            device: device.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: AllocationSizes::default(),
        });
        match allocator {
            Ok(a) => Ok((queue, timeline, a)),
            Err(e) => {
                // SAFETY: the semaphore is unused.
                unsafe { device.destroy_semaphore(timeline, None) };
                Err(VulkanError::Unavailable(format!(
                    "creating the memory allocator failed: {e}"
                )))
            }
        }
    }

    /// Counts a buffer of `bytes` made (the allocator's high-water mark follows).
    pub fn buffer_made(&self, bytes: u64) {
        let now = self.buffer_bytes.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.buffer_peak.fetch_max(now, Ordering::SeqCst);
    }

    /// Counts a buffer of `bytes` freed.
    pub fn buffer_freed(&self, bytes: u64) {
        self.buffer_bytes.fetch_sub(bytes, Ordering::SeqCst);
    }

    /// Bytes of live buffers now, and the most since the last reset.
    pub fn buffer_bytes(&self) -> (u64, u64) {
        (
            self.buffer_bytes.load(Ordering::SeqCst),
            self.buffer_peak.load(Ordering::SeqCst),
        )
    }

    /// Starts a new high-water mark at the bytes held now.
    pub fn reset_buffer_peak(&self) {
        self.buffer_peak
            .store(self.buffer_bytes.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    pub fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.allocator.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The typed error for a failed call; remembers a lost device.
    pub fn fail(&self, what: &str, result: vk::Result) -> VulkanError {
        if result == vk::Result::ERROR_DEVICE_LOST {
            self.lost.store(true, Ordering::SeqCst);
        }
        vk_error(what, result)
    }

    /// Refuse work once the device is lost.
    pub fn check_lost(&self, what: &str) -> Result<(), VulkanError> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(VulkanError::DeviceLost(what.to_string()));
        }
        Ok(())
    }

    /// Submit one command buffer; returns the timeline value that signals its completion.
    pub fn submit(&self, cmd: vk::CommandBuffer) -> Result<u64, VulkanError> {
        self.submit_with(cmd, |_| {})
    }

    /// As [`Context::submit`], calling `before(value)` first under the queue lock, so host
    /// code can mark what the submission uses before any other thread can wait for it.
    pub fn submit_with(
        &self,
        cmd: vk::CommandBuffer,
        before: impl FnOnce(u64),
    ) -> Result<u64, VulkanError> {
        self.check_lost("submitting work")?;
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let value = self.last_submitted.load(Ordering::SeqCst) + 1;
        before(value);
        let values = [value];
        let sems = [self.timeline];
        let cmds = [cmd];
        let mut tl = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
        let info = vk::SubmitInfo::default()
            .command_buffers(&cmds)
            .signal_semaphores(&sems)
            .push_next(&mut tl);
        // SAFETY: the queue is externally synchronised by the lock; the command buffer is
        // executable and its resources are kept alive by the caller until `value` completes.
        unsafe { self.device.queue_submit(*queue, &[info], vk::Fence::null()) }
            .map_err(|e| self.fail("submitting work", e))?;
        self.last_submitted.store(value, Ordering::SeqCst);
        Ok(value)
    }

    /// The newest timeline value submitted so far.
    pub fn last_submitted(&self) -> u64 {
        self.last_submitted.load(Ordering::SeqCst)
    }

    /// The newest timeline value the device has finished (0 when it cannot be read).
    pub fn completed(&self) -> u64 {
        // SAFETY: the semaphore belongs to this device.
        unsafe { self.device.get_semaphore_counter_value(self.timeline) }.unwrap_or(0)
    }

    /// Block until the submission with timeline `value` (and all before it) has finished.
    pub fn wait(&self, value: u64) -> Result<(), VulkanError> {
        // A value whose submission failed is never signalled: there is nothing to wait for.
        let value = value.min(self.last_submitted());
        if value == 0 {
            return Ok(());
        }
        self.check_lost("waiting for submitted work")?;
        // SAFETY: the semaphore belongs to this device.
        let done = unsafe { self.device.get_semaphore_counter_value(self.timeline) }
            .map_err(|e| self.fail("reading the timeline semaphore", e))?;
        if done >= value {
            return Ok(());
        }
        let sems = [self.timeline];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&sems)
            .values(&values);
        // SAFETY: as above.
        match unsafe {
            self.device
                .wait_semaphores(&info, WAIT_TIMEOUT.as_nanos() as u64)
        } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(VulkanError::Timeout {
                what: "waiting for submitted work".into(),
                secs: WAIT_TIMEOUT.as_secs(),
            }),
            Err(e) => Err(self.fail("waiting for submitted work", e)),
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every object created from the device holds an Arc of this context, so all
        // of them are gone; waiting for idle lets in-flight work finish before destruction.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_semaphore(self.timeline, None);
            // The allocator frees its memory blocks, so it goes before the device.
            ManuallyDrop::drop(&mut self.allocator);
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kinds: &[vk::PhysicalDeviceType]) -> Vec<vk::PhysicalDeviceProperties> {
        kinds
            .iter()
            .map(|&k| {
                let mut p = vk::PhysicalDeviceProperties {
                    device_type: k,
                    api_version: vk::API_VERSION_1_2,
                    ..Default::default()
                };
                p.device_name[0] = b'd' as std::ffi::c_char;
                p
            })
            .collect()
    }

    #[test]
    fn discrete_first_then_requested() {
        use vk::PhysicalDeviceType as T;
        let p = props(&[T::CPU, T::INTEGRATED_GPU, T::DISCRETE_GPU]);
        assert_eq!(choose(&p, None).unwrap(), 2);
        assert_eq!(choose(&p, Some(0)).unwrap(), 0);
        let p = props(&[T::CPU, T::INTEGRATED_GPU]);
        assert_eq!(choose(&p, None).unwrap(), 1);
        let e = choose(&p, Some(5)).unwrap_err().to_string();
        assert!(
            e.contains("device 5") && e.contains("2 device(s)") && e.contains("[1] d"),
            "{e}"
        );
    }

    #[test]
    fn old_devices_are_skipped() {
        let mut p = props(&[
            vk::PhysicalDeviceType::DISCRETE_GPU,
            vk::PhysicalDeviceType::CPU,
        ]);
        p[0].api_version = vk::API_VERSION_1_1;
        assert_eq!(choose(&p, None).unwrap(), 1);
        p[1].api_version = vk::API_VERSION_1_1;
        assert!(
            choose(&p, None)
                .unwrap_err()
                .to_string()
                .contains("Vulkan 1.2")
        );
    }
}
