//! `kinema info`: CPU ISAs, threads, Vulkan devices (or why there are none), and what
//! `--backend auto` picks.

use kinema::Backend;
use kinema::cpu::{Isa, ThreadPool, isa};
use kinema::device::{BackendChoice, Selection};
use kinema::precision::PrecisionChoice;
use kinema::vulkan::VulkanBackend;

/// Prints the report, as text or one JSON object.
pub fn run(json: bool) -> kinema::Result<()> {
    let selected = Isa::select();
    let available: Vec<&str> = Isa::available().iter().map(|i| i.name()).collect();
    let threads = ThreadPool::default_threads()?;
    let vk = kinema::vulkan::probe();
    if json {
        let devices: Vec<serde_json::Value> = match &vk {
            Ok(ds) => ds
                .iter()
                .map(|d| {
                    serde_json::json!({
                        "index": d.index, "name": d.name, "type": d.kind, "api": d.api_version,
                        "subgroup_size": d.subgroup_size, "max_shared_memory": d.max_shared_memory,
                        "max_push_constants": d.max_push_constants,
                        "max_storage_buffer_range": d.max_storage_buffer_range,
                        "cooperative_matrix": d.cooperative_matrix,
                        "cooperative_matrix_shapes": d.cooperative_matrix_shapes,
                        "extensions": d.extensions,
                    })
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        let v = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "cpu": {
                "arch": std::env::consts::ARCH,
                "isas_available": available,
                "isa_selected": selected.as_ref().map(|i| i.name()).map_err(|e| e.to_string()),
                "features": isa::feature_report().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
                "avx512_bf16_dot": isa::has_avx512_bf16(),
                "threads": threads,
            },
            "vulkan": {
                "devices": devices,
                "unavailable_because": vk.as_ref().err(),
                "backend": backend_json(),
            },
            "auto_backend": auto_choice(),
        });
        println!("{v:#}");
        return Ok(());
    }
    println!("kinema {}", env!("CARGO_PKG_VERSION"));
    println!("CPU ({})", std::env::consts::ARCH);
    println!("  kernels available : {}", available.join(", "));
    match &selected {
        Ok(i) => println!(
            "  kernels selected  : {}{}",
            i.name(),
            if std::env::var_os("KINEMA_CPU_ISA").is_some() {
                " (forced by KINEMA_CPU_ISA)"
            } else {
                ""
            }
        ),
        Err(e) => println!("  kernels selected  : error: {e}"),
    }
    let feats: Vec<String> = isa::feature_report()
        .iter()
        .map(|(n, on)| format!("{n}{}", if *on { "+" } else { "-" }))
        .collect();
    println!("  features          : {}", feats.join(" "));
    println!(
        "  bf16 dot products : {}",
        if isa::has_avx512_bf16() {
            "yes (avx512_bf16, used in --precision fast)"
        } else {
            "no"
        }
    );
    println!(
        "  threads           : {threads}{}",
        if std::env::var_os("KINEMA_THREADS").is_some() {
            " (KINEMA_THREADS)"
        } else {
            " (available_parallelism)"
        }
    );
    println!("Vulkan");
    match vk {
        Ok(devs) => {
            for d in devs {
                println!(
                    "  [{}] {} ({}, Vulkan {}), subgroup {}, shared memory {} KiB, push constants {} B, max binding {} MiB, cooperative matrix {}",
                    d.index,
                    d.name,
                    d.kind,
                    d.api_version,
                    d.subgroup_size,
                    d.max_shared_memory / 1024,
                    d.max_push_constants,
                    d.max_storage_buffer_range / (1024 * 1024),
                    if d.cooperative_matrix { "yes" } else { "no" }
                );
            }
            match VulkanBackend::new(PrecisionChoice::Auto) {
                Ok(b) => {
                    println!(
                        "  backend uses      : [{}] {} ({}; binding limit {} MiB){}",
                        b.device_index(),
                        b.device_name(),
                        if b.uses_push_descriptors() {
                            "push descriptors"
                        } else {
                            "descriptor pools"
                        },
                        b.max_binding() >> 20,
                        if std::env::var_os("KINEMA_VK_DEVICE").is_some() {
                            " (KINEMA_VK_DEVICE)"
                        } else {
                            ""
                        }
                    );
                    println!(
                        "  cooperative matrix: {}",
                        b.cooperative_matrix()
                            .unwrap_or_else(|| "none (fast mode runs the strict GEMMs)".into())
                    );
                    println!("  --precision auto  : {}", b.info().precision.name());
                    let split = if b.split_available() {
                        "split"
                    } else {
                        "strict (no VK_NV_cooperative_matrix2)"
                    };
                    println!("  --precision split : {split}");
                }
                Err(e) => println!("  backend           : unusable: {e}"),
            }
        }
        Err(why) => println!("  unavailable: {why}"),
    }
    println!("--backend auto     : {}", auto_choice());
    Ok(())
}

/// The Vulkan backend `--backend vulkan` would use, or why it cannot.
fn backend_json() -> serde_json::Value {
    match VulkanBackend::new(PrecisionChoice::Auto) {
        Ok(b) => serde_json::json!({
            "device_index": b.device_index(), "device": b.device_name(),
            "push_descriptors": b.uses_push_descriptors(), "max_binding": b.max_binding(),
            "subgroup_size": b.subgroup_size(),
            "cooperative_matrix": b.cooperative_matrix(),
            "auto_precision": b.info().precision.name(),
            "split_precision": b.split_available(),
        }),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

/// What `--backend auto` picks, and why.
fn auto_choice() -> String {
    match BackendChoice::Auto.select(PrecisionChoice::Auto) {
        Ok(Selection {
            backend,
            vulkan_unavailable,
        }) => {
            let i = backend.info();
            let mode = format!(
                "precision {}{}",
                i.precision.name(),
                if i.cooperative_matrix {
                    ", cooperative matrix"
                } else {
                    ""
                }
            );
            match vulkan_unavailable {
                Some(why) => format!("{} ({}, {mode}), because {why}", i.kind, i.device),
                None => format!("{} ({}, {mode})", i.kind, i.device),
            }
        }
        Err(e) => format!("error: {e}"),
    }
}
