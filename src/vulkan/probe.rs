//! Finding Vulkan devices without requiring Vulkan: `ash::Entry::load` opens the loader at
//! run time and every failure becomes a reason string for `kinema info`.

use std::ffi::CStr;

use ash::vk;

use super::loader::{self, OpenError};

/// One physical device as `kinema info` reports it.
#[derive(Clone, Debug)]
pub struct DeviceSummary {
    pub index: usize,
    pub name: String,
    pub kind: &'static str,
    pub api_version: String,
    pub subgroup_size: u32,
    pub max_shared_memory: u32,
    pub max_push_constants: u32,
    pub max_storage_buffer_range: u32,
    /// `VK_KHR_cooperative_matrix` is listed.
    pub cooperative_matrix: bool,
    /// What vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR reports, as
    /// `CoopMatShape::describe` writes it (empty without the extension).
    pub cooperative_matrix_shapes: Vec<String>,
    /// Every device extension, sorted.
    pub extensions: Vec<String>,
}

/// One cooperative-matrix configuration a device offers: an `m x k` A times a `k x n` B plus
/// C, each with its component type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopMatShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub a: vk::ComponentTypeKHR,
    pub b: vk::ComponentTypeKHR,
    pub c: vk::ComponentTypeKHR,
    pub result: vk::ComponentTypeKHR,
    pub subgroup_scope: bool,
}

fn component_name(t: vk::ComponentTypeKHR) -> String {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => "f16".into(),
        vk::ComponentTypeKHR::FLOAT32 => "f32".into(),
        vk::ComponentTypeKHR::FLOAT64 => "f64".into(),
        vk::ComponentTypeKHR::SINT8 => "i8".into(),
        vk::ComponentTypeKHR::SINT16 => "i16".into(),
        vk::ComponentTypeKHR::SINT32 => "i32".into(),
        vk::ComponentTypeKHR::SINT64 => "i64".into(),
        vk::ComponentTypeKHR::UINT8 => "u8".into(),
        vk::ComponentTypeKHR::UINT16 => "u16".into(),
        vk::ComponentTypeKHR::UINT32 => "u32".into(),
        vk::ComponentTypeKHR::UINT64 => "u64".into(),
        // VK_KHR_shader_bfloat16, newer than ash's headers.
        t if t.as_raw() == 1_000_141_000 => "bf16".into(),
        t => format!("type {}", t.as_raw()),
    }
}

impl CoopMatShape {
    /// NVIDIA's 16 x 16 x 16 f16 * f16 + f32 -> f32 subgroup shape, for tests of the kernel
    /// choice.
    #[cfg(test)]
    pub(crate) fn f16_16x16x16() -> CoopMatShape {
        use vk::ComponentTypeKHR as T;
        CoopMatShape {
            m: 16,
            n: 16,
            k: 16,
            a: T::FLOAT16,
            b: T::FLOAT16,
            c: T::FLOAT32,
            result: T::FLOAT32,
            subgroup_scope: true,
        }
    }

    /// `16x16x16 f16*f16+f32->f32 subgroup` (m x n x k).
    pub fn describe(&self) -> String {
        format!(
            "{}x{}x{} {}*{}+{}->{} {}",
            self.m,
            self.n,
            self.k,
            component_name(self.a),
            component_name(self.b),
            component_name(self.c),
            component_name(self.result),
            if self.subgroup_scope {
                "subgroup"
            } else {
                "other scope"
            }
        )
    }
}

/// The cooperative-matrix configurations of `pd` (empty when the extension is missing or the
/// query fails).
pub(crate) fn coopmat_shapes(
    entry: &ash::Entry,
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    has_extension: bool,
) -> Vec<CoopMatShape> {
    if !has_extension {
        return Vec::new();
    }
    let ext = ash::khr::cooperative_matrix::Instance::new(entry, instance);
    // SAFETY: `pd` belongs to `instance`, which lists the extension for it.
    let props = unsafe { ext.get_physical_device_cooperative_matrix_properties(pd) };
    props
        .unwrap_or_default()
        .iter()
        .map(|p| CoopMatShape {
            m: p.m_size,
            n: p.n_size,
            k: p.k_size,
            a: p.a_type,
            b: p.b_type,
            c: p.c_type,
            result: p.result_type,
            subgroup_scope: p.scope == vk::ScopeKHR::SUBGROUP,
        })
        .collect()
}

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV` (`VK_NV_cooperative_matrix2`), declared here
/// because ash 0.38's headers predate the extension (layout from the Vulkan registry).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Coopmat2Features {
    s_type: vk::StructureType,
    p_next: *mut std::ffi::c_void,
    pub workgroup_scope: vk::Bool32,
    pub flexible_dimensions: vk::Bool32,
    pub reductions: vk::Bool32,
    pub conversions: vk::Bool32,
    pub per_element_operations: vk::Bool32,
    pub tensor_addressing: vk::Bool32,
    pub block_loads: vk::Bool32,
}

impl Default for Coopmat2Features {
    fn default() -> Self {
        Coopmat2Features {
            s_type: vk::StructureType::from_raw(1_000_593_000),
            p_next: std::ptr::null_mut(),
            workgroup_scope: vk::FALSE,
            flexible_dimensions: vk::FALSE,
            reductions: vk::FALSE,
            conversions: vk::FALSE,
            per_element_operations: vk::FALSE,
            tensor_addressing: vk::FALSE,
            block_loads: vk::FALSE,
        }
    }
}

impl Coopmat2Features {
    /// What `linear_cm2.comp` (and `attention_cm2.comp`) use: workgroup-scope matrices sized
    /// by specialization constants, accumulator-to-operand conversions, per-element operations
    /// and tensor-layout loads and stores. The context enables `reductions` too where offered
    /// (the attention's row maxima and sums); it is not required.
    pub fn used() -> Self {
        Coopmat2Features {
            workgroup_scope: vk::TRUE,
            flexible_dimensions: vk::TRUE,
            conversions: vk::TRUE,
            per_element_operations: vk::TRUE,
            tensor_addressing: vk::TRUE,
            ..Default::default()
        }
    }

    /// Whether every feature [`Coopmat2Features::used`] enables is offered.
    pub fn has_used(&self) -> bool {
        [
            self.workgroup_scope,
            self.flexible_dimensions,
            self.conversions,
            self.per_element_operations,
            self.tensor_addressing,
        ]
        .iter()
        .all(|&f| f == vk::TRUE)
    }
}

// SAFETY: the struct begins with sType and pNext like every Vulkan structure, and the registry
// lists it as extending VkPhysicalDeviceFeatures2 and VkDeviceCreateInfo.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Coopmat2Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Coopmat2Features {}

/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`, declared here for the same reason.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Coopmat2Properties {
    s_type: vk::StructureType,
    p_next: *mut std::ffi::c_void,
    pub workgroup_scope_max_workgroup_size: u32,
    pub flexible_dimensions_max_dimension: u32,
    pub workgroup_scope_reserved_shared_memory: u32,
}

impl Default for Coopmat2Properties {
    fn default() -> Self {
        Coopmat2Properties {
            s_type: vk::StructureType::from_raw(1_000_593_002),
            p_next: std::ptr::null_mut(),
            workgroup_scope_max_workgroup_size: 0,
            flexible_dimensions_max_dimension: 0,
            workgroup_scope_reserved_shared_memory: 0,
        }
    }
}

// SAFETY: as for Coopmat2Features; the registry lists it as extending
// VkPhysicalDeviceProperties2.
unsafe impl vk::ExtendsPhysicalDeviceProperties2 for Coopmat2Properties {}

/// The name of `VK_NV_cooperative_matrix2`.
pub(crate) const COOPMAT2_NAME: &CStr = c"VK_NV_cooperative_matrix2";

fn kind_name(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete GPU",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated GPU",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual GPU",
        vk::PhysicalDeviceType::CPU => "CPU",
        _ => "other",
    }
}

/// The Vulkan devices on this machine, or why there are none.
pub fn probe() -> Result<Vec<DeviceSummary>, String> {
    let (entry, instance) = loader::open().map_err(|e| match e {
        OpenError::NoLoader(e) => format!("no Vulkan loader (libvulkan.so.1) could be opened: {e}"),
        OpenError::CreateInstance(e) => format!(
            "the Vulkan loader is present but vkCreateInstance failed: {e} (is a driver / ICD \
             installed?)"
        ),
    })?;
    // SAFETY: `instance` is valid until destroyed below.
    let result = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| format!("vkEnumeratePhysicalDevices failed: {e}"))
        .map(|devs| {
            devs.iter()
                .enumerate()
                .map(|(index, &pd)| {
                    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
                    let mut props2 =
                        vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
                    // SAFETY: `pd` comes from this instance; props2's chain is well formed.
                    unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
                    let p = props2.properties;
                    // SAFETY: as above.
                    let exts = unsafe { instance.enumerate_device_extension_properties(pd) }
                        .unwrap_or_default();
                    let mut extensions: Vec<String> = exts
                        .iter()
                        .filter_map(|e| e.extension_name_as_c_str().ok())
                        .map(|n| n.to_string_lossy().into_owned())
                        .collect();
                    extensions.sort();
                    let coop = exts.iter().any(|e| {
                        e.extension_name_as_c_str()
                            .is_ok_and(|n| n == ash::khr::cooperative_matrix::NAME)
                    });
                    let shapes = coopmat_shapes(&entry, &instance, pd, coop)
                        .iter()
                        .map(CoopMatShape::describe)
                        .collect();
                    DeviceSummary {
                        index,
                        name: p
                            .device_name_as_c_str()
                            .map(|c| c.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        kind: kind_name(p.device_type),
                        api_version: format!(
                            "{}.{}.{}",
                            vk::api_version_major(p.api_version),
                            vk::api_version_minor(p.api_version),
                            vk::api_version_patch(p.api_version)
                        ),
                        subgroup_size: subgroup.subgroup_size,
                        max_shared_memory: p.limits.max_compute_shared_memory_size,
                        max_push_constants: p.limits.max_push_constants_size,
                        max_storage_buffer_range: p.limits.max_storage_buffer_range,
                        cooperative_matrix: coop,
                        cooperative_matrix_shapes: shapes,
                        extensions,
                    }
                })
                .collect::<Vec<_>>()
        });
    // SAFETY: no objects created from the instance remain.
    unsafe { instance.destroy_instance(None) };
    match result {
        Ok(v) if v.is_empty() => Err("the Vulkan loader found no physical devices".into()),
        r => r,
    }
}
