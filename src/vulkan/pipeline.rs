//! Compute pipelines, created on first use and keyed by (shader, specialization constants);
//! their layouts (one per binding count and push-constant size); and the on-disk pipeline
//! cache, keyed by device, driver and a hash of the embedded SPIR-V.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;

use super::context::Context;
use super::shaders::Shader;
use super::{VulkanError, vk_error};

/// A descriptor-set layout of `bindings` storage buffers and the pipeline layout around it.
pub(crate) struct Layout {
    ctx: Arc<Context>,
    pub set_layout: vk::DescriptorSetLayout,
    pub raw: vk::PipelineLayout,
}

impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: pipelines and recordings using the layout hold an Arc to it, so none is left.
        unsafe {
            self.ctx.device.destroy_pipeline_layout(self.raw, None);
            self.ctx
                .device
                .destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

pub(crate) struct Pipeline {
    ctx: Arc<Context>,
    pub raw: vk::Pipeline,
    pub layout: Arc<Layout>,
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // SAFETY: recordings that bind the pipeline hold an Arc to it, so none is left.
        unsafe { self.ctx.device.destroy_pipeline(self.raw, None) };
    }
}

/// A shader and its specialization constants.
type PipelineKey = (Shader, Vec<u32>);

pub(crate) struct Pipelines {
    ctx: Arc<Context>,
    push_descriptor: bool,
    cache: vk::PipelineCache,
    cache_file: Option<PathBuf>,
    /// Whether pipelines were created since the cache was loaded (so it is worth saving).
    grew: AtomicBool,
    layouts: Mutex<HashMap<(u32, u32), Arc<Layout>>>,
    pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
}

/// FNV-1a over every embedded module, so a cache never outlives the shaders it was made for.
fn spirv_hash() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for s in Shader::ALL {
        for w in s.info().words() {
            for b in w.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    h
}

/// The most pipeline-cache bytes read back from disk: real caches are a few MiB; a larger file
/// (or a FIFO, a device, a directory) is ignored as a cold cache instead of being read whole.
const MAX_PIPELINE_CACHE_BYTES: u64 = 256 << 20;

/// Reads a pipeline cache file if it is a regular file of at most
/// [`MAX_PIPELINE_CACHE_BYTES`]; anything else is a cold cache (`None`).
fn read_cache_file(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_PIPELINE_CACHE_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // `take` bounds the read even if the file grows after the size check.
    file.take(MAX_PIPELINE_CACHE_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

impl Pipelines {
    /// `cache_dir`: where the pipeline cache lives (`None`: no disk cache).
    pub fn new(
        ctx: Arc<Context>,
        push_descriptor: bool,
        cache_dir: Option<&Path>,
    ) -> Result<Pipelines, VulkanError> {
        let cache_file = cache_dir.map(|d| {
            d.join(format!(
                "pipelines-{}-{:016x}.bin",
                ctx.cache_key,
                spirv_hash()
            ))
        });
        // A missing or unreadable file just means a cold cache; the driver ignores data it
        // does not recognise (Vulkan spec, vkCreatePipelineCache).
        let initial = cache_file
            .as_ref()
            .and_then(|f| read_cache_file(f))
            .unwrap_or_default();
        let ci = vk::PipelineCacheCreateInfo::default().initial_data(&initial);
        // SAFETY: valid device and create info.
        let cache = match unsafe { ctx.device.create_pipeline_cache(&ci, None) } {
            Ok(c) => c,
            Err(_) if !initial.is_empty() => {
                let empty = vk::PipelineCacheCreateInfo::default();
                // SAFETY: as above.
                unsafe { ctx.device.create_pipeline_cache(&empty, None) }
                    .map_err(|e| vk_error("creating the pipeline cache", e))?
            }
            Err(e) => return Err(vk_error("creating the pipeline cache", e)),
        };
        Ok(Pipelines {
            ctx,
            push_descriptor,
            cache,
            cache_file,
            grew: AtomicBool::new(false),
            layouts: Mutex::new(HashMap::new()),
            pipelines: Mutex::new(HashMap::new()),
        })
    }

    /// How many pipelines exist (for tests and `info`).
    pub fn count(&self) -> usize {
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn layout(&self, bindings: u32, push_size: u32) -> Result<Arc<Layout>, VulkanError> {
        let mut layouts = self.layouts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = layouts.get(&(bindings, push_size)) {
            return Ok(l.clone());
        }
        let d = &self.ctx.device;
        let b: Vec<vk::DescriptorSetLayoutBinding> = (0..bindings)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let flags = if self.push_descriptor {
            vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR
        } else {
            vk::DescriptorSetLayoutCreateFlags::empty()
        };
        let ci = vk::DescriptorSetLayoutCreateInfo::default()
            .bindings(&b)
            .flags(flags);
        // SAFETY: valid device and create info.
        let set_layout = unsafe { d.create_descriptor_set_layout(&ci, None) }
            .map_err(|e| vk_error("creating a descriptor-set layout", e))?;
        let sets = [set_layout];
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(push_size)];
        let pci = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&sets)
            .push_constant_ranges(&ranges);
        // SAFETY: as above.
        let raw = match unsafe { d.create_pipeline_layout(&pci, None) } {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: the set layout is unused.
                unsafe { d.destroy_descriptor_set_layout(set_layout, None) };
                return Err(vk_error("creating a pipeline layout", e));
            }
        };
        let l = Arc::new(Layout {
            ctx: self.ctx.clone(),
            set_layout,
            raw,
        });
        layouts.insert((bindings, push_size), l.clone());
        Ok(l)
    }

    /// The pipeline of `shader` with specialization constants `spec` (constant `i` is
    /// `spec[i]`; constant 0 is the workgroup size), created on first use.
    pub fn get(&self, shader: Shader, spec: &[u32]) -> Result<Arc<Pipeline>, VulkanError> {
        let key = (shader, spec.to_vec());
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        let info = shader.info();
        let layout = self.layout(info.bindings, info.push_size)?;
        let d = &self.ctx.device;
        let mci = vk::ShaderModuleCreateInfo::default().code(info.words());
        // SAFETY: the words are a SPIR-V module validated by the test suite.
        let module = unsafe { d.create_shader_module(&mci, None) }
            .map_err(|e| vk_error(&format!("creating the {} shader module", info.name), e))?;
        let entries: Vec<vk::SpecializationMapEntry> = (0..spec.len() as u32)
            .map(|i| vk::SpecializationMapEntry {
                constant_id: i,
                offset: 4 * i,
                size: 4,
            })
            .collect();
        let data: &[u8] = bytemuck::cast_slice(spec);
        let si = vk::SpecializationInfo::default()
            .map_entries(&entries)
            .data(data);
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main")
            .specialization_info(&si);
        let flags = if self.ctx.pipeline_stats.is_some() {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let ci = [vk::ComputePipelineCreateInfo::default()
            .flags(flags)
            .stage(stage)
            .layout(layout.raw)];
        // SAFETY: the module, layout and cache are valid; the module is destroyed after the
        // pipeline exists (allowed by the spec).
        let r = unsafe { d.create_compute_pipelines(self.cache, &ci, None) };
        // SAFETY: no pipeline creation is using the module any more.
        unsafe { d.destroy_shader_module(module, None) };
        let raw = r.map_err(|(_, e)| {
            vk_error(
                &format!(
                    "creating the {} pipeline (spec constants {spec:?})",
                    info.name
                ),
                e,
            )
        })?[0];
        if let Some(pe) = &self.ctx.pipeline_stats {
            // SAFETY: `raw` was just created with its statistics captured.
            eprintln!("{}", unsafe {
                describe_statistics(pe, raw, info.name, spec)
            });
        }
        let p = Arc::new(Pipeline {
            ctx: self.ctx.clone(),
            raw,
            layout,
        });
        self.grew.store(true, Ordering::Relaxed);
        let mut map = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have created the same pipeline meanwhile; keep one.
        Ok(map.entry(key).or_insert(p).clone())
    }

    /// Write the pipeline cache to disk if pipelines were created since it was loaded.
    pub fn save(&self) -> crate::Result<()> {
        let Some(file) = &self.cache_file else {
            return Ok(());
        };
        if !self.grew.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        // SAFETY: the cache belongs to this device.
        let data = unsafe { self.ctx.device.get_pipeline_cache_data(self.cache) }
            .map_err(|e| vk_error("reading the pipeline cache", e))?;
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
        }
        crate::formats::write_atomic(file, |w| w.write_all(&data))
    }
}

impl Drop for Pipelines {
    fn drop(&mut self) {
        if let Err(e) = self.save() {
            eprintln!("kinema: could not save the Vulkan pipeline cache: {e}");
        }
        // SAFETY: pipelines created from the cache do not reference it after creation.
        unsafe { self.ctx.device.destroy_pipeline_cache(self.cache, None) };
    }
}

/// One line per executable of `pipeline` (a compute pipeline has one): `name` and its
/// specialization constants, then every statistic the driver reports for it, or why none could
/// be read.
///
/// # Safety
/// `pipeline` must be a live pipeline of `pe`'s device created with
/// `CAPTURE_STATISTICS_KHR`.
unsafe fn describe_statistics(
    pe: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
    name: &str,
    spec: &[u32],
) -> String {
    let head = format!("kinema: pipeline {name} (spec constants {spec:?})");
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: as the caller promises.
    let execs = match unsafe { pe.get_pipeline_executable_properties(&info) } {
        Ok(e) => e.len(),
        Err(e) => return format!("{head}: no executables ({e})"),
    };
    let mut out = Vec::new();
    for index in 0..execs as u32 {
        let ei = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(index);
        // SAFETY: as the caller promises; `index` is below the executable count.
        let stats = match unsafe { pe.get_pipeline_executable_statistics(&ei) } {
            Ok(s) => s,
            Err(e) => {
                out.push(format!("{head}: executable {index}: no statistics ({e})"));
                continue;
            }
        };
        let items: Vec<String> = stats
            .iter()
            .map(|s| {
                let n = s
                    .name_as_c_str()
                    .map_or_else(|_| "?".to_string(), |c| c.to_string_lossy().into_owned());
                // SAFETY: the union member read is the one `format` names.
                let v = unsafe {
                    match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            (s.value.b32 != 0).to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => {
                            format!("{:.3}", s.value.f64)
                        }
                        f => format!("(format {})", f.as_raw()),
                    }
                };
                format!("{n} = {v}")
            })
            .collect();
        out.push(format!("{head}: {}", items.join(", ")));
    }
    out.join("\n")
}

#[cfg(test)]
mod cache_file_tests {
    use super::{MAX_PIPELINE_CACHE_BYTES, read_cache_file};

    #[test]
    fn reads_a_small_regular_file_and_ignores_oversized_or_special_ones() {
        let dir = std::env::temp_dir().join(format!("kinema-pcache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small.bin");
        std::fs::write(&small, [1u8, 2, 3]).unwrap();
        assert_eq!(read_cache_file(&small), Some(vec![1, 2, 3]));
        // A sparse file one byte over the cap is never read.
        let big = dir.join("big.bin");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_PIPELINE_CACHE_BYTES + 1)
            .unwrap();
        assert_eq!(read_cache_file(&big), None);
        // A directory (and likewise a FIFO or a device) is a cold cache.
        assert_eq!(read_cache_file(&dir), None);
        assert_eq!(read_cache_file(&dir.join("missing.bin")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
