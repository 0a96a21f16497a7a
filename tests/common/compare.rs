//! Helpers shared by the LLM2Vec model tests. Include with
//! `#[path = "common/compare.rs"] mod compare;`.
#![allow(dead_code)]

use kinema::Precision;
use kinema::vulkan::VulkanBackend;

/// `||a - b|| / ||b||` in f64.
pub fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den).sqrt()
}

/// The strict Vulkan backend, or `None` (with a message) when no device is found; with
/// `KINEMA_REQUIRE_VULKAN=1` a missing device is a failure.
pub fn vulkan() -> Option<VulkanBackend> {
    if let Err(why) = kinema::vulkan::probe() {
        let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
        eprintln!("skipping the Vulkan backend: {why}");
        return None;
    }
    Some(VulkanBackend::new(Precision::Strict).unwrap())
}
