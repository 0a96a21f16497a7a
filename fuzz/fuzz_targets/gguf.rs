//! GGUF: parse arbitrary bytes, read every tensor and metadata value, and check that a file
//! that parses is written back by `GgufWriter` to bytes that parse to the same file.
#![no_main]

use kinema::formats::{GgufFile, GgufWriter};
use libfuzzer_sys::fuzz_target;

fn rewrite(f: &GgufFile) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.add_metadata(k.clone(), v.clone())
            .expect("a parsed key is writable");
    }
    for t in f.tensors() {
        let h = f.tensor(&t.name).expect("a parsed tensor is readable");
        w.add_tensor(t.name.clone(), &h)
            .expect("a parsed tensor is writable");
    }
    let mut out = Vec::new();
    w.write_to(&mut out).expect("writing to memory succeeds");
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::parse(data.to_vec()) else {
        return;
    };
    for (k, _) in f.metadata() {
        let _ = (f.get_u64(k), f.get_f64(k), f.get_str(k), f.get_array(k));
    }
    for t in f.tensors() {
        let h = f.tensor(&t.name).expect("a parsed tensor is readable");
        match t.quant {
            // Stored as its dtype: borrowed or copied byte for byte.
            None => assert_eq!(h.bytes(), f.tensor_bytes(&t.name).unwrap()),
            // A llama.cpp block format: dequantised to f32 at load.
            Some(q) => assert_eq!(
                q.bytes_for(h.numel()),
                Some(f.tensor_bytes(&t.name).unwrap().len())
            ),
        }
        if h.dtype.is_float() {
            assert_eq!(h.to_f32_vec().unwrap().len(), h.numel());
        }
    }
    // Round trip: the rewritten file parses, and rewriting it again is a fixed point.
    let once = rewrite(&f);
    let g = GgufFile::parse(once.clone()).expect("the rewritten file parses");
    assert_eq!(g.tensors().len(), f.tensors().len());
    assert_eq!(rewrite(&g), once);
});
