//! Opening the Vulkan loader and creating an instance, for the backend's context and for
//! `probe`, with the driver kept loaded for the life of the process.
//!
//! Every `vkCreateInstance` makes the loader `dlopen` the driver and the last
//! `vkDestroyInstance` `dlclose`s it. NVIDIA's driver (580 on the H200) has a library with
//! static TLS (`libnvidia-tls.so`), and after 20-40 such cycles in one process glibc can no
//! longer place it ("cannot allocate memory in static TLS block"): the loader then finds no
//! driver and every later backend fails to start. A host that creates and drops engines (a
//! game loading levels, a test suite) hit this. So the first call here creates one more
//! instance that is never destroyed: the driver stays loaded, and later instances reuse it.

use std::sync::OnceLock;

use ash::vk;

/// Why no instance could be created.
pub(crate) enum OpenError {
    /// `libvulkan.so.1` could not be opened.
    NoLoader(String),
    /// The loader is there; `vkCreateInstance` failed.
    CreateInstance(vk::Result),
}

/// The instance that keeps the driver loaded (`None` when it could not be created: then the
/// caller's own instance fails the same way and says why).
static KEEPER: OnceLock<Option<(ash::Entry, ash::Instance)>> = OnceLock::new();

/// The loader and a new instance (Vulkan 1.3 as the application's maximum, no layers or
/// extensions). The caller destroys the instance, and keeps the entry until it has.
pub(crate) fn open() -> Result<(ash::Entry, ash::Instance), OpenError> {
    let app = vk::ApplicationInfo::default()
        .application_name(c"kinema")
        // 1.3 so that devices which have it can run the SPIR-V 1.6 cooperative-matrix
        // shaders; 1.2 devices are still used (the application version is a maximum).
        .api_version(vk::API_VERSION_1_3);
    let ci = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: loading the system Vulkan loader runs its initialisers; this is the documented
    // way to use Vulkan without linking it (ash `Entry::load`).
    let load = || unsafe { ash::Entry::load() };
    KEEPER.get_or_init(|| {
        let entry = load().ok()?;
        // SAFETY: the create info and what it points to outlive the call; the instance is
        // never destroyed (see the module documentation).
        let instance = unsafe { entry.create_instance(&ci, None) }.ok()?;
        Some((entry, instance))
    });
    let entry = load().map_err(|e| OpenError::NoLoader(e.to_string()))?;
    // SAFETY: the create info and what it points to outlive the call.
    let instance =
        unsafe { entry.create_instance(&ci, None) }.map_err(OpenError::CreateInstance)?;
    Ok((entry, instance))
}
