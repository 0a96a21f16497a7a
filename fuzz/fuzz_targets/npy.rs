//! npy: parse arbitrary bytes, convert the array every way, and check that writing it back
//! reads back the same array.
#![no_main]

use kinema::formats::npy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = npy::read(data) else {
        return;
    };
    let _ = (
        a.to_f32(),
        a.to_f64(),
        a.to_i64(),
        a.to_strings(),
        a.to_tensor(),
    );
    let bytes = npy::to_bytes(&a).expect("a parsed array is writable");
    assert_eq!(npy::read(&bytes).expect("the written array parses"), a);
});
