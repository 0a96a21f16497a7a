//! MotionBricks agent inputs: `kinema agent`'s `commands.json` (`agent::commands::parse`)
//! against a synthetic clip library lacking two styles, and, for npz input, the clip file
//! reader (`ClipLibrary::from_npz`). Parsed commands must name a clip the library has, hold
//! finite numbers and positive durations within the run limit.
#![no_main]

use std::sync::OnceLock;

use kinema::formats::NpzReader;
use kinema::models::motionbricks::agent::clips::ClipLibrary;
use kinema::models::motionbricks::agent::commands::{MAX_SECONDS, parse};
use libfuzzer_sys::fuzz_target;

fn library() -> &'static ClipLibrary {
    static L: OnceLock<ClipLibrary> = OnceLock::new();
    L.get_or_init(|| {
        let mut l = ClipLibrary::synthetic(0);
        l.clips[4] = None;
        l.clips[13] = None;
        l
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(cmds) = parse(text, library()) {
            assert!(!cmds.is_empty());
            let mut total = 0.0;
            for c in &cmds {
                assert!(library().clips[c.mode].is_some());
                assert!(c.duration > 0.0 && c.duration.is_finite());
                total += c.duration;
                let mut v = c.movement.to_vec();
                v.extend(c.facing);
                v.extend(c.speed);
                if let Some((p, h)) = c.waypoint {
                    v.extend(p);
                    v.push(h);
                }
                assert!(v.iter().all(|x| x.is_finite()));
                assert!(c.seed <= i64::MAX as u64);
            }
            assert!(total <= MAX_SECONDS);
        }
    }
    if let Ok(z) = NpzReader::from_bytes(data.to_vec()) {
        if let Ok(l) = ClipLibrary::from_npz(&z) {
            assert!(l.clips[0].is_some());
            for c in l.clips.iter().flatten() {
                assert_eq!(c.qpos.len(), c.frames * 36);
                assert_eq!(c.headings.len(), c.frames);
                assert!(c.frames >= 5);
            }
        }
    }
});
