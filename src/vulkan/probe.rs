//! Finding Vulkan devices without requiring Vulkan: `ash::Entry::load` opens the loader at
//! run time and every failure becomes a reason string for `kinema info`.

use ash::vk;

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
    pub cooperative_matrix: bool,
}

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
    // SAFETY: loading the system Vulkan loader runs its initialisers; this is the documented
    // way to use Vulkan without linking it (ash `Entry::load`).
    let entry = unsafe { ash::Entry::load() }
        .map_err(|e| format!("no Vulkan loader (libvulkan.so.1) could be opened: {e}"))?;
    let app = vk::ApplicationInfo::default()
        .application_name(c"kinema")
        .api_version(vk::API_VERSION_1_2);
    let ci = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: the create info and what it points to outlive the call.
    let instance = unsafe { entry.create_instance(&ci, None) }
        .map_err(|e| format!("the Vulkan loader is present but vkCreateInstance failed: {e} (is a driver / ICD installed?)"))?;
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
                    let coop = exts.iter().any(|e| {
                        e.extension_name_as_c_str()
                            .is_ok_and(|n| n == ash::khr::cooperative_matrix::NAME)
                    });
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
