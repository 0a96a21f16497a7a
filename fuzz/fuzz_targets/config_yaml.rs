//! Kimodo `config.yaml`: parse arbitrary text as `kinema convert` does (alias refusal, the
//! Hydra key search, `${a.b}` interpolation chains, every value kinema reads checked).
#![no_main]

use kinema::models::kimodo::convert::parse_config_yaml;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_config_yaml(text);
    }
});
