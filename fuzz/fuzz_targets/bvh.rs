//! BVH: parse arbitrary text, evaluate every joint's rotation and position on every frame, and
//! read it as a SOMA motion (the importer refuses what is not SOMA77 with an error).
#![no_main]

use kinema::models::kimodo::export::bvh;
use kinema::models::kimodo::import;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(b) = bvh::parse(text) else {
        return;
    };
    assert_eq!(b.values.len(), b.frames * b.channels_per_frame);
    for t in 0..b.frames {
        for j in 0..b.joints.len() {
            let r = b.rotation(t, j);
            assert!(r.iter().all(|v| v.is_finite()));
            let _ = b.position(t, j);
        }
    }
    let _ = import::motion_from_bvh(&b);
});
