//! safetensors: parse arbitrary bytes and read every tensor both ways.
#![no_main]

use kinema::formats::{SafeDType, SafeTensors};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = SafeTensors::parse(data.to_vec()) else {
        return;
    };
    for t in f.tensors() {
        let bytes = f.tensor_bytes(&t.name).expect("a parsed tensor has bytes");
        if t.dtype.to_dtype().is_some() {
            let h = f.tensor(&t.name).expect("a supported tensor is readable");
            assert_eq!(h.bytes(), bytes);
        }
        let float = matches!(
            t.dtype,
            SafeDType::F64 | SafeDType::F32 | SafeDType::F16 | SafeDType::BF16
        );
        assert_eq!(f.tensor_f32(&t.name).is_ok(), float);
    }
});
