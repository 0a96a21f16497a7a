//! MotionBricks inputs: `kinema plan`'s `inputs.npz` reader (`run::read_inputs_npz`) for a
//! reduced model (2 frames per token, plans of 1..=4 tokens, as the synthetic test model),
//! and, for UTF-8 input, the YAML loader MotionBricks' converter reads its configs with
//! (`kit::yaml::load_mapping`: alias refusal, one mapping).
#![no_main]

use kinema::formats::NpzReader;
use kinema::models::kit::yaml::load_mapping;
use kinema::models::motionbricks::config::dims;
use kinema::models::motionbricks::run::read_inputs_npz;
use libfuzzer_sys::fuzz_target;

const FRAMES_PER_TOKEN: usize = 2;
const MIN_TOKENS: usize = 1;
const MAX_TOKENS: usize = 4;

fuzz_target!(|data: &[u8]| {
    if let Ok(z) = NpzReader::from_bytes(data.to_vec()) {
        if let Ok(p) = read_inputs_npz(&z, FRAMES_PER_TOKEN, MIN_TOKENS, MAX_TOKENS) {
            let k = 2 * FRAMES_PER_TOKEN;
            assert_eq!(p.global_root_values.len(), p.batch * k * dims::GLOBAL_ROOT);
            assert_eq!(p.has_global_root_values.len(), p.batch * k);
            assert_eq!(p.num_tokens.len(), p.batch);
            assert_eq!(
                p.allowed_pred_num_tokens.len(),
                p.batch * (MAX_TOKENS - MIN_TOKENS + 1)
            );
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = load_mapping(text, "a MotionBricks config");
    }
});
