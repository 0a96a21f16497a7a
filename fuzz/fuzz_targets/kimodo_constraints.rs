//! Kimodo `constraints.json`: parse arbitrary bytes as `kinema generate --constraints` does,
//! and build the observed motion and mask of whatever parses, on each model skeleton.
#![no_main]

use kinema::models::kimodo::constraints::{build_conditions, parse};
use kinema::models::kimodo::{MotionStats, Skeleton, SkeletonKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(list) = parse(data) else {
        return;
    };
    for kind in SkeletonKind::TRAINED {
        let skel = Skeleton::load(kind).expect("embedded skeleton");
        let body = kind.motion_dim() - 5;
        let stats = MotionStats {
            global_mean: [0.0; 5],
            global_std: [1.0; 5],
            local_mean: [0.0; 4],
            local_std: [1.0; 4],
            body_mean: vec![0.0; body],
            body_std: vec![1.0; body],
        };
        // A short motion: most fuzzed frame indices fall outside it (an error), some inside.
        let _ = build_conditions(&list, &skel, &stats, 1 + data.len() % 64);
    }
});
