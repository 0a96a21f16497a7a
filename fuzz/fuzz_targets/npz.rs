//! npz: parse arbitrary bytes as a zip archive and read (inflate, CRC-check, parse) every
//! member.
#![no_main]

use kinema::formats::NpzReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(z) = NpzReader::from_bytes(data.to_vec()) else {
        return;
    };
    for name in z.names() {
        if let Ok(a) = z.array(name) {
            let _ = a.to_f64();
        }
    }
});
