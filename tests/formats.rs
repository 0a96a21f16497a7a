//! File-format tests: round trips for every format and dtype, numpy compatibility against
//! bytes numpy wrote, real upstream files (when `../shared` is beside the checkout), and
//! hostile input (every truncation, lying sizes, bad types, random corruption) that must
//! come back as an error, never a panic.

use std::path::PathBuf;

#[path = "common/shared_data.rs"]
mod shared_data;

use half::{bf16, f16};
use kinema::formats::gguf::{ALIGNMENT_KEY, MAX_ARRAY_DEPTH};
use kinema::formats::{
    FormatError, GgufArray, GgufFile, GgufValue, GgufWriter, NpyArray, NpyDType, NpzReader,
    NpzWriter, SafeDType, SafeTensors, npy,
};
use kinema::tensor::{HostData, Q8_0_BLOCK_BYTES, q8_0_quantize_block};
use kinema::{DType, Error, HostTensor};

// ---------------------------------------------------------------------------------------------
// Helpers

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn format_err(e: &Error) -> &FormatError {
    match e {
        Error::Format(f) => f,
        other => panic!("expected a format error, got {other:?}"),
    }
}

/// Deterministic xorshift for the corruption loops.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Overwrite 1-4 random bytes with random values, `rounds` times; `parse` must not panic.
fn corrupt_loop(valid: &[u8], rounds: usize, seed: u64, parse: impl Fn(Vec<u8>)) {
    let mut rng = Rng(seed);
    for _ in 0..rounds {
        let mut b = valid.to_vec();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(b.len());
            b[i] = rng.next() as u8;
        }
        parse(b);
    }
}

fn shared_dir() -> Option<PathBuf> {
    shared_data::upstream_dir("")
}

/// Parse a GGUF from memory and read every tensor.
fn touch_gguf(b: Vec<u8>) -> kinema::Result<()> {
    let f = GgufFile::parse(b)?;
    for t in f.tensors() {
        let h = f.tensor(&t.name)?;
        match t.quant {
            None => assert_eq!(h.bytes().len(), t.size),
            Some(q) => assert_eq!(q.bytes_for(h.numel()), Some(t.size)),
        }
    }
    Ok(())
}

fn touch_safetensors(b: Vec<u8>) -> kinema::Result<()> {
    let f = SafeTensors::parse(b)?;
    for t in f.tensors() {
        if t.dtype.to_dtype().is_some() {
            f.tensor(&t.name)?;
        }
        if matches!(
            t.dtype,
            SafeDType::F32 | SafeDType::F64 | SafeDType::F16 | SafeDType::BF16
        ) {
            f.tensor_f32(&t.name)?;
        }
    }
    Ok(())
}

fn touch_npz(b: Vec<u8>) -> kinema::Result<()> {
    let z = NpzReader::from_bytes(b)?;
    for n in z.names() {
        z.array(n)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// GGUF

fn all_metadata() -> Vec<(String, GgufValue)> {
    let nested = GgufArray::Array(vec![
        GgufArray::I32(vec![1, -2, 3]),
        GgufArray::String(vec!["x".into(), String::new()]),
        GgufArray::Array(vec![GgufArray::F64(vec![0.5]), GgufArray::Bool(vec![])]),
        GgufArray::U8(vec![]),
    ]);
    vec![
        ("general.architecture".into(), "llm2vec".into()),
        ("t.u8".into(), GgufValue::U8(200)),
        ("t.i8".into(), GgufValue::I8(-100)),
        ("t.u16".into(), GgufValue::U16(60000)),
        ("t.i16".into(), GgufValue::I16(-30000)),
        ("t.u32".into(), GgufValue::U32(4_000_000_000)),
        ("t.i32".into(), GgufValue::I32(-2_000_000_000)),
        ("t.f32".into(), GgufValue::F32(-1.25e-3)),
        ("t.bool".into(), GgufValue::Bool(true)),
        ("t.string".into(), "héllo ✓".into()),
        ("t.u64".into(), GgufValue::U64(u64::MAX)),
        ("t.i64".into(), GgufValue::I64(i64::MIN)),
        ("t.f64".into(), GgufValue::F64(std::f64::consts::PI)),
        ("a.u8".into(), GgufArray::U8(vec![0, 255]).into()),
        ("a.i8".into(), GgufArray::I8(vec![-128, 127]).into()),
        ("a.u16".into(), GgufArray::U16(vec![1, 65535]).into()),
        ("a.i16".into(), GgufArray::I16(vec![-1]).into()),
        ("a.u32".into(), GgufArray::U32(vec![7; 5]).into()),
        ("a.i32".into(), GgufArray::I32(vec![]).into()),
        (
            "a.f32".into(),
            GgufArray::F32(vec![1.0, -0.0, f32::MAX]).into(),
        ),
        (
            "a.bool".into(),
            GgufArray::Bool(vec![true, false, true]).into(),
        ),
        (
            "a.string".into(),
            GgufArray::String(vec!["<s>".into(), "▁the".into()]).into(),
        ),
        ("a.u64".into(), GgufArray::U64(vec![u64::MAX, 0]).into()),
        ("a.i64".into(), GgufArray::I64(vec![i64::MIN]).into()),
        ("a.f64".into(), GgufArray::F64(vec![1e300, -1e-300]).into()),
        ("a.nested".into(), nested.into()),
    ]
}

fn q8_tensor(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
        .collect();
    let mut bytes = vec![0u8; n / 32 * Q8_0_BLOCK_BYTES];
    for (x, b) in vals.chunks(32).zip(bytes.chunks_mut(Q8_0_BLOCK_BYTES)) {
        q8_0_quantize_block(x, b);
    }
    HostTensor::from_bytes(DType::Q8_0, shape, &bytes).unwrap()
}

fn all_tensors() -> Vec<(String, HostTensor)> {
    let f32s: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
    let f16s: Vec<f16> = (0..5).map(|i| f16::from_f32(i as f32 - 2.5)).collect();
    let bf16s: Vec<bf16> = (0..6).map(|i| bf16::from_f32(i as f32 * 3.0)).collect();
    vec![
        (
            "w.f32".into(),
            HostTensor::from_f32(&[2, 3], &f32s).unwrap(),
        ),
        ("w.f16".into(), HostTensor::from_f16(&[5], &f16s).unwrap()),
        (
            "w.bf16".into(),
            HostTensor::from_bf16(&[1, 2, 3], &bf16s).unwrap(),
        ),
        (
            "w.i32".into(),
            HostTensor::from_i32(&[4], &[1, -1, i32::MAX, i32::MIN]).unwrap(),
        ),
        ("w.q8_0".into(), q8_tensor(&[3, 64])),
        (
            "w.scalar".into(),
            HostTensor::from_f32(&[], &[42.0]).unwrap(),
        ),
        (
            "w.empty".into(),
            HostTensor::from_f32(&[0, 4], &[]).unwrap(),
        ),
        (
            "w.rank6".into(),
            HostTensor::from_f32(&[1, 2, 1, 2, 1, 2], &[7.0; 8]).unwrap(),
        ),
    ]
}

fn build_gguf(meta: &[(String, GgufValue)], tensors: &[(String, HostTensor)]) -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for (n, t) in tensors {
        w.add_tensor(n.clone(), t).unwrap();
    }
    w
}

fn check_gguf(
    f: &GgufFile,
    meta: &[(String, GgufValue)],
    tensors: &[(String, HostTensor)],
    mapped: bool,
) {
    assert_eq!(f.version(), 3);
    assert_eq!(f.metadata(), meta);
    assert_eq!(f.tensors().len(), tensors.len());
    for ((name, t), info) in tensors.iter().zip(f.tensors()) {
        assert_eq!(&info.name, name);
        assert_eq!(info.dtype, t.dtype);
        assert_eq!(info.shape, t.shape);
        assert_eq!(info.offset % f.alignment() as usize, 0);
        let got = f.tensor(name).unwrap();
        assert_eq!(got.dtype, t.dtype);
        assert_eq!(got.shape, t.shape);
        assert_eq!(got.bytes(), t.bytes(), "{name}");
        assert_eq!(f.tensor_bytes(name).unwrap(), t.bytes());
        assert_eq!(
            matches!(got.data, HostData::Mapped { .. }),
            mapped,
            "{name}: mapped should be {mapped}"
        );
    }
}

#[test]
fn gguf_round_trip_every_value_and_tensor_type() {
    let meta = all_metadata();
    let tensors = all_tensors();
    let w = build_gguf(&meta, &tensors);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    w.write(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert!(f.is_mapped());
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset() % 32, 0);
    check_gguf(&f, &meta, &tensors, true);

    let mut mem = Vec::new();
    w.write_to(&mut mem).unwrap();
    assert_eq!(
        mem,
        std::fs::read(&path).unwrap(),
        "write and write_to differ"
    );
    let g = GgufFile::parse(mem).unwrap();
    check_gguf(&g, &meta, &tensors, false);
    // The q8_0 tensor dequantises like the original blocks.
    let q = g.tensor("w.q8_0").unwrap().to_f32_vec().unwrap();
    assert_eq!(q.len(), 192);
    // Only the temporary-file-free result is left in the directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn gguf_shape_is_reversed_ne_on_disk() {
    let mut w = GgufWriter::new();
    w.add_tensor("t", &HostTensor::from_f32(&[2, 3], &[0.0; 6]).unwrap())
        .unwrap();
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    // magic, version, counts (24 bytes), name (8 + 1), n_dims (4), then ne[0], ne[1].
    let ne0 = u64::from_le_bytes(b[37..45].try_into().unwrap());
    let ne1 = u64::from_le_bytes(b[45..53].try_into().unwrap());
    assert_eq!((ne0, ne1), (3, 2));
}

#[test]
fn gguf_custom_alignment_and_unaligned_fallback() {
    for align in [1u32, 2, 64, 4096] {
        let meta = vec![(ALIGNMENT_KEY.to_string(), GgufValue::U32(align))];
        let tensors = vec![
            (
                "a".to_string(),
                HostTensor::from_f16(&[3], &[f16::ONE; 3]).unwrap(),
            ),
            (
                "b".to_string(),
                HostTensor::from_f32(&[3], &[1.0, 2.0, 3.0]).unwrap(),
            ),
            ("c".to_string(), HostTensor::from_i32(&[1], &[5]).unwrap()),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.gguf");
        build_gguf(&meta, &tensors).write(&path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.alignment(), align);
        for (name, t) in &tensors {
            let got = f.tensor(name).unwrap();
            assert_eq!(got.bytes(), t.bytes());
            let addr_ok = (f.data_offset() + f.tensor_info(name).unwrap().offset)
                .is_multiple_of(t.dtype.align());
            // Borrowed exactly when the data is aligned for its dtype, copied otherwise.
            assert_eq!(got.data.is_mapped(), addr_ok, "align {align} tensor {name}");
        }
    }
}

#[test]
fn gguf_typed_getters() {
    let mut w = GgufWriter::new();
    w.add_metadata("n", GgufValue::U64(7)).unwrap();
    w.add_metadata("neg", GgufValue::I32(-3)).unwrap();
    w.add_metadata("big", GgufValue::U64(1 << 40)).unwrap();
    w.add_metadata("x", GgufValue::F32(0.5)).unwrap();
    w.add_metadata("d", GgufValue::F64(0.25)).unwrap();
    w.add_metadata("s", "name").unwrap();
    w.add_metadata("b", true).unwrap();
    w.add_metadata("v", GgufArray::from(vec![1.0f32, 2.0]))
        .unwrap();
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    let f = GgufFile::parse(b).unwrap();
    assert_eq!(f.get_u32("n").unwrap(), 7);
    assert_eq!(f.get_u64("n").unwrap(), 7);
    assert_eq!(f.get_i64("neg").unwrap(), -3);
    assert_eq!(f.get_u64("big").unwrap(), 1 << 40);
    assert_eq!(f.get_f32("x").unwrap(), 0.5);
    assert_eq!(f.get_f64("x").unwrap(), 0.5);
    assert_eq!(f.get_f64("d").unwrap(), 0.25);
    assert_eq!(f.get_str("s").unwrap(), "name");
    assert!(f.get_bool("b").unwrap());
    assert_eq!(f.get_array("v").unwrap(), &GgufArray::F32(vec![1.0, 2.0]));
    assert!(f.get("nope").is_none());
    for (key, e) in [
        ("neg", f.get_u32("neg").unwrap_err()),
        ("big", f.get_u32("big").unwrap_err()),
        ("s", f.get_f32("s").unwrap_err()),
        ("d", f.get_f32("d").unwrap_err()),
    ] {
        assert!(
            matches!(format_err(&e), FormatError::WrongType { key: k, .. } if k == key),
            "{e}"
        );
    }
    let e = f.get_str("nope").unwrap_err();
    assert!(
        matches!(format_err(&e), FormatError::MissingKey { .. }),
        "{e}"
    );
    let e = f.tensor("nope").unwrap_err();
    assert!(
        matches!(format_err(&e), FormatError::MissingTensor { .. }),
        "{e}"
    );
}

#[test]
fn gguf_writer_refusals() {
    let mut w = GgufWriter::new();
    let u = HostTensor::from_u32(&[2], &[1, 2]).unwrap();
    let e = w.add_tensor("u", &u).unwrap_err();
    assert!(
        e.to_string().contains("u32") && e.to_string().contains("\"u\""),
        "{e}"
    );
    let t = HostTensor::from_f32(&[1], &[1.0]).unwrap();
    w.add_tensor("t", &t).unwrap();
    let e = w.add_tensor("t", &t).unwrap_err();
    assert!(
        matches!(format_err(&e), FormatError::Duplicate { .. }),
        "{e}"
    );
    w.add_metadata("k", 1u32).unwrap();
    let e = w.add_metadata("k", 2u32).unwrap_err();
    assert!(
        matches!(format_err(&e), FormatError::Duplicate { .. }),
        "{e}"
    );
    for bad in [
        GgufValue::U32(0),
        GgufValue::U32(48),
        GgufValue::U64(32),
        GgufValue::U32(1 << 21),
    ] {
        assert!(w.add_metadata(ALIGNMENT_KEY, bad).is_err());
    }
    // q8_0 rows must be whole blocks: [64, 32] works, [32, 64]^T as [64, 32]... but not [2, 48].
    let q = q8_tensor(&[64, 32]);
    w.add_tensor("q", &q).unwrap();
    let bad_q = HostTensor::from_bytes(DType::Q8_0, &[2, 48], &[0; 3 * 34]).unwrap();
    assert!(w.add_tensor("bad_q", &bad_q).is_err());
    let mut deep = GgufArray::U8(vec![1]);
    for _ in 0..MAX_ARRAY_DEPTH {
        deep = GgufArray::Array(vec![deep]);
    }
    let e = w.add_metadata("deep", deep).unwrap_err();
    assert!(matches!(format_err(&e), FormatError::Limit { .. }), "{e}");
    let e = w
        .add_tensor("r7", &HostTensor::from_f32(&[1; 7], &[1.0]).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("rank 7"), "{e}");
    // A failing write leaves nothing behind.
    let dir = tempfile::tempdir().unwrap();
    assert!(w.write(dir.path().join("missing/x.gguf")).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A little-endian byte builder for hand-made hostile files.
#[derive(Default, Clone)]
struct B(Vec<u8>);
impl B {
    fn raw(mut self, b: &[u8]) -> B {
        self.0.extend_from_slice(b);
        self
    }
    fn u8(self, v: u8) -> B {
        self.raw(&[v])
    }
    fn u32(self, v: u32) -> B {
        self.raw(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> B {
        self.raw(&v.to_le_bytes())
    }
    fn s(self, v: &str) -> B {
        self.u64(v.len() as u64).raw(v.as_bytes())
    }
    fn pad(mut self, align: usize) -> B {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
}

fn gguf_head(tensors: u64, kvs: u64) -> B {
    B::default().raw(b"GGUF").u32(3).u64(tensors).u64(kvs)
}

/// A file with one f32 tensor of `dims` (ne order) at `offset`, data of `data_len` bytes.
fn gguf_one_tensor(name: &str, dims: &[u64], ty: u32, offset: u64, data_len: usize) -> Vec<u8> {
    let mut b = gguf_head(1, 0).s(name).u32(dims.len() as u32);
    for &d in dims {
        b = b.u64(d);
    }
    b.u32(ty).u64(offset).pad(32).raw(&vec![0; data_len]).0
}

/// llama.cpp's Q4_0 and Q4_1 blocks read as f32 (`dequantize_row_q4_{0,1}`): value `j` in the
/// low nibble of byte `j`, value `j + 16` in its high nibble.
#[test]
fn gguf_q4_tensors_are_dequantised_at_load() {
    let h = |x: f32| f16::from_f32(x).to_le_bytes();
    let qs: Vec<u8> = (0..16u8).map(|j| (15 - j) << 4 | j).collect();
    let q4_0 = [&h(2.0)[..], &qs].concat();
    let q4_1 = [&h(0.5)[..], &h(-3.0), &qs].concat();
    for (ty, block, want) in [
        (2u32, q4_0, (|q: f32| (q - 8.0) * 2.0) as fn(f32) -> f32),
        (3, q4_1, |q: f32| q * 0.5 - 3.0),
    ] {
        let bytes = gguf_head(1, 0)
            .s("w")
            .u32(2)
            .u64(32)
            .u64(2)
            .u32(ty)
            .u64(0)
            .pad(32)
            .raw(&[block.clone(), block].concat())
            .0;
        let f = GgufFile::parse(bytes).unwrap();
        let info = &f.tensors()[0];
        assert_eq!((info.dtype, info.shape.clone()), (DType::F32, vec![2, 32]));
        assert_eq!(info.size, 2 * (block_len(ty)));
        let t = f.tensor("w").unwrap();
        assert_eq!(t.dtype, DType::F32);
        let v = t.to_f32_vec().unwrap();
        for row in v.chunks(32) {
            for j in 0..16 {
                assert_eq!(row[j], want(j as f32), "type {ty} value {j}");
                assert_eq!(
                    row[j + 16],
                    want((15 - j) as f32),
                    "type {ty} value {}",
                    j + 16
                );
            }
        }
    }
}

fn block_len(ggml_type: u32) -> usize {
    if ggml_type == 2 { 18 } else { 20 }
}

fn gguf_err(bytes: Vec<u8>) -> String {
    match touch_gguf(bytes) {
        Ok(()) => panic!("hostile GGUF was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gguf_every_truncation_fails() {
    let w = build_gguf(&all_metadata(), &all_tensors());
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    let full = GgufFile::parse(b.clone()).unwrap();
    let needed = full
        .tensors()
        .iter()
        .map(|t| full.data_offset() + t.offset + t.size)
        .max()
        .unwrap();
    for len in 0..b.len() {
        let r = touch_gguf(b[..len].to_vec());
        if len < needed {
            assert!(r.is_err(), "prefix of {len} bytes parsed");
        } else {
            // Only the trailing padding of the last tensor is missing.
            r.unwrap();
        }
    }
}

#[test]
fn gguf_hostile_headers() {
    let ok = gguf_one_tensor("t", &[4], 0, 0, 16);
    touch_gguf(ok.clone()).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "bad magic",
            B::default().raw(b"GGUG").u32(3).u64(0).u64(0).0,
            "bad magic",
        ),
        (
            "version 1",
            B::default().raw(b"GGUF").u32(1).u64(0).u64(0).0,
            "version 1",
        ),
        (
            "version 4",
            B::default().raw(b"GGUF").u32(4).u64(0).u64(0).0,
            "unknown version 4",
        ),
        (
            "big-endian",
            B::default()
                .raw(b"GGUF")
                .u32(3u32.swap_bytes())
                .u64(0)
                .u64(0)
                .0,
            "big-endian",
        ),
        ("huge tensor count", gguf_head(1 << 60, 0).0, "truncated"),
        ("huge kv count", gguf_head(0, u64::MAX).0, "truncated"),
        (
            "huge key length",
            gguf_head(0, 1).u64(u64::MAX).0,
            "truncated",
        ),
        (
            "huge string value",
            gguf_head(0, 1).s("k").u32(8).u64(1 << 62).0,
            "truncated",
        ),
        (
            "huge array",
            gguf_head(0, 1)
                .s("k")
                .u32(9)
                .u32(4)
                .u64(1 << 62)
                .raw(&[0; 64])
                .0,
            "truncated",
        ),
        (
            "huge string array",
            gguf_head(0, 1).s("k").u32(9).u32(8).u64(u64::MAX).0,
            "truncated",
        ),
        (
            "unknown value type",
            gguf_head(0, 1).s("k").u32(13).u32(0).0,
            "unknown value type id 13",
        ),
        (
            "unknown array type",
            gguf_head(0, 1).s("k").u32(9).u32(99).u64(0).0,
            "unknown array element type id 99",
        ),
        (
            "bad bool",
            gguf_head(0, 1).s("k").u32(7).u8(2).0,
            "bool byte is 2",
        ),
        (
            "bad bool in array",
            gguf_head(0, 1).s("k").u32(9).u32(7).u64(2).u8(1).u8(9).0,
            "bool byte is 9",
        ),
        (
            "bad utf-8 key",
            gguf_head(0, 1).u64(2).raw(&[0xff, 0xfe]).u32(0).u8(0).0,
            "UTF-8",
        ),
        (
            "bad utf-8 value",
            gguf_head(0, 1).s("k").u32(8).u64(1).u8(0x80).0,
            "UTF-8",
        ),
        (
            "duplicate key",
            gguf_head(0, 2).s("k").u32(0).u8(1).s("k").u32(0).u8(2).0,
            "duplicate metadata key",
        ),
        (
            "alignment type",
            gguf_head(0, 1).s(ALIGNMENT_KEY).u32(10).u64(32).0,
            "power of two",
        ),
        (
            "alignment zero",
            gguf_head(0, 1).s(ALIGNMENT_KEY).u32(4).u32(0).0,
            "power of two",
        ),
        (
            "alignment three",
            gguf_head(0, 1).s(ALIGNMENT_KEY).u32(4).u32(3).0,
            "power of two",
        ),
        (
            "alignment 2^31",
            gguf_head(0, 1).s(ALIGNMENT_KEY).u32(4).u32(1 << 31).0,
            "power of two up to",
        ),
        (
            "misaligned offset",
            gguf_one_tensor("t", &[4], 0, 4, 32),
            "not a multiple of the alignment",
        ),
        (
            "offset overflow",
            gguf_one_tensor("t", &[4], 0, !31, 16),
            "truncated",
        ),
        (
            "data past the end",
            gguf_one_tensor("t", &[5], 0, 0, 16),
            "truncated",
        ),
        (
            "dims overflow",
            gguf_one_tensor("t", &[1 << 40, 1 << 40], 0, 0, 16),
            "overflow",
        ),
        (
            "dims overflow bytes",
            gguf_one_tensor("t", &[1 << 62], 0, 0, 16),
            "overflow",
        ),
        (
            "q5_0 tensor",
            gguf_one_tensor("blk.0", &[32], 6, 0, 22),
            "ggml type 6 (Q5_0)",
        ),
        (
            "q4_1 partial rows",
            gguf_one_tensor("q", &[16, 2], 3, 0, 20),
            "Q4_1 tensor \"q\" of shape [2, 16]: the innermost dimension must be a multiple of 32",
        ),
        (
            "unknown tensor type",
            gguf_one_tensor("x", &[1], 77, 0, 4),
            "ggml type 77",
        ),
        ("rank 7", gguf_one_tensor("t", &[1; 7], 0, 0, 4), "rank 7"),
        (
            "q8_0 partial rows",
            gguf_one_tensor("q", &[16, 2], 8, 0, 34),
            "multiple of 32",
        ),
    ];
    for (what, bytes, needle) in cases {
        let e = gguf_err(bytes);
        assert!(e.contains(needle), "{what}: {e:?} lacks {needle:?}");
    }
    // Deep nesting: arrays of arrays past the limit.
    let mut b = gguf_head(0, 1).s("deep").u32(9);
    for _ in 0..=MAX_ARRAY_DEPTH {
        b = b.u32(9).u64(1);
    }
    let e = gguf_err(b.u32(0).u64(0).0);
    assert!(e.contains("nesting depth"), "{e}");
    // Duplicate and overlapping tensors.
    let two = |n2: &str, off2: u64| {
        gguf_head(2, 0)
            .s("a")
            .u32(1)
            .u64(16)
            .u32(0)
            .u64(0)
            .s(n2)
            .u32(1)
            .u64(8)
            .u32(0)
            .u64(off2)
            .pad(32)
            .raw(&[0; 128])
            .0
    };
    touch_gguf(two("b", 64)).unwrap();
    assert!(gguf_err(two("a", 64)).contains("duplicate tensor"));
    assert!(gguf_err(two("b", 32)).contains("overlap"));
}

#[test]
fn gguf_random_corruption_never_panics() {
    let w = build_gguf(&all_metadata(), &all_tensors());
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    corrupt_loop(&b, 3000, 0x5eed, |c| {
        let _ = touch_gguf(c);
    });
}

// ---------------------------------------------------------------------------------------------
// safetensors

/// A safetensors file from `(name, dtype, shape, data)`, tensors laid out in order; the
/// header is padded with spaces to `header_len` bytes when given.
fn st_file(entries: &[(&str, &str, &[usize], Vec<u8>)], header_len: Option<usize>) -> Vec<u8> {
    // Written by hand: serde_json's map would sort the keys, and order is part of the test.
    let mut parts = vec![r#""__metadata__":{"format":"pt","note":"x"}"#.to_string()];
    let mut off = 0;
    for (name, dtype, shape, data) in entries {
        parts.push(format!(
            r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{off},{}]}}"#,
            off + data.len()
        ));
        off += data.len();
    }
    let mut header = format!("{{{}}}", parts.join(","));
    if let Some(n) = header_len {
        assert!(n >= header.len());
        header.extend(std::iter::repeat_n(' ', n - header.len()));
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for (.., data) in entries {
        out.extend_from_slice(data);
    }
    out
}

fn st_raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

fn st_entries() -> Vec<(&'static str, &'static str, &'static [usize], Vec<u8>)> {
    // Ordered so that every tensor is aligned for its dtype when the data starts aligned.
    vec![
        ("empty", "F32", &[0, 3], vec![]),
        (
            "f32",
            "F32",
            &[2, 2],
            le(&[1.0f32, -2.0, 3.5, 0.0], f32::to_le_bytes),
        ),
        ("f64", "F64", &[2], le(&[0.25f64, -1e10], f64::to_le_bytes)),
        ("i64", "I64", &[1], le(&[-1i64], i64::to_le_bytes)),
        ("i32", "I32", &[2], le(&[-7i32, 9], i32::to_le_bytes)),
        ("u32", "U32", &[1], le(&[u32::MAX], u32::to_le_bytes)),
        (
            "f16",
            "F16",
            &[3],
            le(&[f16::from_f32(0.5), f16::MAX, f16::MIN], |x| {
                x.to_le_bytes()
            }),
        ),
        (
            "bf16",
            "BF16",
            &[1, 2],
            le(&[bf16::from_f32(-1.5), bf16::from_f32(256.0)], |x| {
                x.to_le_bytes()
            }),
        ),
    ]
}

#[test]
fn safetensors_reads_every_dtype_zero_copy() {
    // A header of 8k bytes - 8 puts the data at 8192: every tensor lands aligned.
    let entries = st_entries();
    let bytes = st_file(&entries, Some(8184));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    std::fs::write(&path, &bytes).unwrap();
    let f = SafeTensors::open(&path).unwrap();
    assert_eq!(
        f.names(),
        ["empty", "f32", "f64", "i64", "i32", "u32", "f16", "bf16"]
    );
    assert_eq!(
        f.metadata(),
        [
            ("format".to_string(), "pt".to_string()),
            ("note".into(), "x".into())
        ]
    );
    let info = f.info("bf16").unwrap();
    assert_eq!(
        (info.dtype, info.shape.as_slice()),
        (SafeDType::BF16, &[1usize, 2][..])
    );
    for (name, dtype, shape, data) in &entries {
        assert_eq!(f.tensor_bytes(name).unwrap(), data.as_slice());
        match SafeDType::parse(dtype).unwrap().to_dtype() {
            Some(d) => {
                let t = f.tensor(name).unwrap();
                assert_eq!((t.dtype, t.shape.as_slice()), (d, *shape));
                assert_eq!(t.bytes(), data.as_slice());
                assert!(t.data.is_mapped(), "{name} should be borrowed");
            }
            None => {
                let e = f.tensor(name).unwrap_err();
                assert!(e.to_string().contains(dtype), "{e}");
            }
        }
    }
    assert_eq!(
        f.tensor_f32("f32").unwrap(),
        (vec![2, 2], vec![1.0, -2.0, 3.5, 0.0])
    );
    assert_eq!(f.tensor_f32("f64").unwrap().1, vec![0.25, -1e10]);
    assert_eq!(f.tensor_f32("f16").unwrap().1, vec![0.5, 65504.0, -65504.0]);
    assert_eq!(f.tensor_f32("bf16").unwrap().1, vec![-1.5, 256.0]);
    assert!(f.tensor_f32("i32").unwrap_err().to_string().contains("I32"));
    assert!(matches!(
        format_err(&f.tensor("nope").unwrap_err()),
        FormatError::MissingTensor { .. }
    ));
}

#[test]
fn safetensors_misaligned_data_is_copied() {
    // A 3-byte u8 tensor first leaves the f32 after it at an odd address.
    let entries: Vec<(&str, &str, &[usize], Vec<u8>)> = vec![
        ("u8", "U8", &[3], vec![1, 2, 3]),
        ("f32", "F32", &[2], le(&[1.5f32, 2.5], f32::to_le_bytes)),
    ];
    let bytes = st_file(&entries, Some(200));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    std::fs::write(&path, &bytes).unwrap();
    let f = SafeTensors::open(&path).unwrap();
    let t = f.tensor("f32").unwrap();
    assert!(!t.data.is_mapped());
    assert_eq!(t.to_f32_vec().unwrap(), vec![1.5, 2.5]);
}

#[test]
fn safetensors_reads_files_of_the_reference_crate() {
    use safetensors::tensor::{Dtype, TensorView};
    let a = le(&[1.0f32, 2.0, 3.0], f32::to_le_bytes);
    let b = le(&[bf16::from_f32(4.0)], |x| x.to_le_bytes());
    let views = vec![
        ("a", TensorView::new(Dtype::F32, vec![3], &a).unwrap()),
        ("b", TensorView::new(Dtype::BF16, vec![1, 1], &b).unwrap()),
    ];
    let bytes = safetensors::serialize(views, None).unwrap();
    let f = SafeTensors::parse(bytes).unwrap();
    assert_eq!(f.tensor_f32("a").unwrap().1, vec![1.0, 2.0, 3.0]);
    assert_eq!(f.tensor_f32("b").unwrap(), (vec![1, 1], vec![4.0]));
}

#[test]
fn safetensors_every_truncation_fails() {
    let bytes = st_file(&st_entries(), None);
    touch_safetensors(bytes.clone()).unwrap();
    for len in 0..bytes.len() {
        assert!(
            touch_safetensors(bytes[..len].to_vec()).is_err(),
            "prefix {len}"
        );
    }
}

#[test]
fn safetensors_hostile_headers() {
    let t = |o: &str| format!(r#"{{"t":{{"dtype":"F32","shape":[2],"data_offsets":{o}}}}}"#);
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    // Offsets summing to near usize::MAX: the header-length addition in the reference crate
    // (safetensors 0.8 `read_metadata`) overflows here.
    let step = (1u64 << 61) - 1;
    let mut lying = String::from("{");
    for i in 0..8u64 {
        lying += &format!(
            r#""t{i}":{{"dtype":"U8","shape":[{step}],"data_offsets":[{},{}]}},"#,
            i * step,
            (i + 1) * step
        );
    }
    lying.pop();
    lying.push('}');
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("huge header", huge, "header length"),
        ("not json", st_raw("{nope", &[]), "JSON"),
        ("not an object", st_raw("[1,2]", &[]), "JSON"),
        (
            "bad utf-8",
            st_raw("{\"\u{7f}\":1}", &[])
                .into_iter()
                .map(|b| if b == 0x7f { 0xff } else { b })
                .collect(),
            "UTF-8",
        ),
        (
            "duplicate",
            st_raw(
                &format!("{{{0},{0}}}", &t("[0,8]")[1..t("[0,8]").len() - 1]),
                &[0; 8],
            ),
            "duplicate",
        ),
        (
            "entry not object",
            st_raw(r#"{"t":3}"#, &[]),
            "not an object",
        ),
        (
            "unknown dtype",
            st_raw(
                r#"{"t":{"dtype":"F128","shape":[],"data_offsets":[0,16]}}"#,
                &[0; 16],
            ),
            "unknown dtype",
        ),
        (
            "negative dim",
            st_raw(
                r#"{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}"#,
                &[],
            ),
            "negative",
        ),
        (
            "float dim",
            st_raw(
                r#"{"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
            "non-integer",
        ),
        (
            "missing offsets",
            st_raw(r#"{"t":{"dtype":"F32","shape":[1]}}"#, &[0; 4]),
            "data_offsets",
        ),
        (
            "reversed offsets",
            st_raw(&t("[8,0]"), &[0; 8]),
            "begin <= end",
        ),
        ("size mismatch", st_raw(&t("[0,12]"), &[0; 12]), "needs 8"),
        ("past the end", st_raw(&t("[0,8]"), &[0; 4]), "truncated"),
        (
            "hole at start",
            st_raw(&t("[4,12]"), &[0; 12]),
            "expected 0",
        ),
        (
            "trailing bytes",
            st_raw(&t("[0,8]"), &[0; 9]),
            "cover 8 bytes",
        ),
        (
            "shape overflow",
            st_raw(
                r#"{"t":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#,
                &[],
            ),
            "overflow",
        ),
        ("huge offsets", st_raw(&lying, &[0; 16]), "truncated"),
        (
            "bad metadata",
            st_raw(r#"{"__metadata__":{"a":1}}"#, &[]),
            "not a string",
        ),
        (
            "sub-byte",
            st_raw(
                r#"{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}"#,
                &[0],
            ),
            "whole number of bytes",
        ),
    ];
    for (what, bytes, needle) in cases {
        let e = touch_safetensors(bytes).expect_err(what).to_string();
        assert!(e.contains(needle), "{what}: {e:?} lacks {needle:?}");
    }
    // Overlapping tensors.
    let two = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    assert!(touch_safetensors(st_raw(two, &[0; 8])).is_err());
}

#[test]
fn safetensors_random_corruption_never_panics() {
    let bytes = st_file(&st_entries(), None);
    corrupt_loop(&bytes, 3000, 0xbeef, |c| {
        let _ = touch_safetensors(c);
    });
}

// ---------------------------------------------------------------------------------------------
// npy

fn npy_err(bytes: &[u8]) -> String {
    match npy::read(bytes) {
        Ok(a) => panic!("hostile npy accepted: {a:?}"),
        Err(e) => e.to_string(),
    }
}

/// A version-1 file with this header text (padded as numpy pads) and data.
fn npy_with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_reads_numpy_files() {
    let a = npy::read(&hex(F32_2X3)).unwrap();
    assert_eq!(
        (a.dtype, a.shape.as_slice()),
        (NpyDType::F32, &[2usize, 3][..])
    );
    assert_eq!(a.to_f32().unwrap(), vec![-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]);
    let a = npy::read(&hex(F64_3)).unwrap();
    assert_eq!(a.to_f64().unwrap(), vec![1.5, -2.25, 1e300]);
    assert_eq!(a.to_f32().unwrap()[2], f32::INFINITY);
    let a = npy::read(&hex(F16_2X2)).unwrap();
    assert_eq!(a.dtype, NpyDType::F16);
    assert_eq!(a.to_f32().unwrap(), vec![1.0, -2.0, 0.5, 65504.0]);
    let a = npy::read(&hex(I32_4)).unwrap();
    assert_eq!(
        a.to_i64().unwrap(),
        vec![1, -2, i32::MAX.into(), i32::MIN.into()]
    );
    let a = npy::read(&hex(I64_2X2)).unwrap();
    assert_eq!(a.to_i64().unwrap(), vec![1, -2, 1 << 40, -(1 << 62)]);
    let a = npy::read(&hex(U8_3)).unwrap();
    assert_eq!(a.to_i64().unwrap(), vec![0, 7, 255]);
    let a = npy::read(&hex(I8_3)).unwrap();
    assert_eq!(
        (a.dtype, a.to_f64().unwrap()),
        (NpyDType::I8, vec![0.0, -7.0, 127.0])
    );
    let a = npy::read(&hex(BOOL_2X2)).unwrap();
    assert_eq!(a.dtype, NpyDType::Bool);
    assert_eq!(a.to_f32().unwrap(), vec![1.0, 0.0, 0.0, 1.0]);
    let a = npy::read(&hex(F32_SCALAR)).unwrap();
    assert_eq!((a.shape.len(), a.to_f32().unwrap()), (0, vec![3.25]));
    let a = npy::read(&hex(F32_0X3)).unwrap();
    assert_eq!((a.shape.as_slice(), a.data.len()), (&[0usize, 3][..], 0));
    let a = npy::read(&hex(UNICODE_2)).unwrap();
    assert_eq!(a.dtype, NpyDType::Unicode(5));
    assert_eq!(a.to_strings().unwrap(), ["ab", "héllo"]);
}

#[test]
fn npy_fortran_order_becomes_c_order() {
    let a = npy::read(&hex(F32_FORTRAN_2X3X2)).unwrap();
    assert_eq!(a.shape, [2, 3, 2]);
    let want: Vec<f32> = (0..12).map(|i| i as f32).collect();
    assert_eq!(a.to_f32().unwrap(), want);
    // Written back, it is a plain C-order file.
    let b = npy::read(&npy::to_bytes(&a).unwrap()).unwrap();
    assert_eq!(a, b);
    // A Fortran-order 1-d array and a transposed 2-d one built by hand.
    let f = npy_with_header(
        "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
        &le(&[0i32, 3, 1, 4, 2, 5], i32::to_le_bytes),
    );
    assert_eq!(
        npy::read(&f).unwrap().to_i64().unwrap(),
        vec![0, 1, 2, 3, 4, 5]
    );
}

#[test]
fn npy_refuses_big_endian_object_and_structured() {
    assert!(npy_err(&hex(BIG_ENDIAN_F4)).contains("big-endian"));
    assert!(npy_err(&hex(OBJECT)).contains("object/pickled arrays are not supported"));
    assert!(npy_err(&hex(STRUCTURED)).contains("structured"));
    for descr in [
        "<c8",
        "<u4",
        "<M8[ns]",
        "|S3",
        "|V4",
        "=f4",
        "f4",
        "<U0",
        "<U99999999999999999999",
    ] {
        let f = npy_with_header(
            &format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (0,), }}"),
            &[],
        );
        let e = npy_err(&f);
        assert!(e.contains("unsupported"), "{descr}: {e}");
    }
}

#[test]
fn npy_writer_matches_numpy_bytes() {
    for (name, h) in [
        ("F32_2X3", F32_2X3),
        ("F64_3", F64_3),
        ("F16_2X2", F16_2X2),
        ("I32_4", I32_4),
        ("I64_2X2", I64_2X2),
        ("U8_3", U8_3),
        ("I8_3", I8_3),
        ("BOOL_2X2", BOOL_2X2),
        ("F32_SCALAR", F32_SCALAR),
        ("F32_0X3", F32_0X3),
        ("UNICODE_2", UNICODE_2),
    ] {
        let bytes = hex(h);
        let a = npy::read(&bytes).unwrap();
        assert_eq!(npy::to_bytes(&a).unwrap(), bytes, "{name}");
        let mut w = Vec::new();
        npy::write(&a, &mut w).unwrap();
        assert_eq!(w, bytes, "{name}");
    }
}

#[test]
fn npy_round_trip_every_dtype() {
    let arrays = vec![
        NpyArray::from_f32(&[2, 2], &[1.0, -0.0, f32::MIN_POSITIVE, f32::NAN]).unwrap(),
        NpyArray::from_f64(&[3], &[1e-300, 2.0, -3.0]).unwrap(),
        NpyArray::from_f16(&[1, 1, 2], &[f16::ONE, f16::NEG_INFINITY]).unwrap(),
        NpyArray::from_i32(&[2], &[i32::MIN, 5]).unwrap(),
        NpyArray::from_i64(&[], &[i64::MAX]).unwrap(),
        NpyArray::from_u8(&[4], &[0, 1, 128, 255]).unwrap(),
        NpyArray::from_i8(&[2], &[-128, 127]).unwrap(),
        NpyArray::from_bool(&[3], &[true, false, true]).unwrap(),
        NpyArray::from_f32(&[0, 5], &[]).unwrap(),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, a) in arrays.iter().enumerate() {
        let p = dir.path().join(format!("{i}.npy"));
        npy::write_file(&p, a).unwrap();
        let b = npy::read_file(&p).unwrap();
        assert_eq!(a, &b);
        // numpy pads the header so the data starts at a multiple of 64.
        assert!((std::fs::read(&p).unwrap().len() - a.data.len()).is_multiple_of(64));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), arrays.len());
    assert!(NpyArray::from_f32(&[2, 2], &[1.0]).is_err());
    assert!(NpyArray::new(NpyDType::I64, &[2], vec![0; 15]).is_err());
}

#[test]
fn npy_conversions_and_tensors() {
    let f = NpyArray::from_f32(&[2], &[1.5, -2.0]).unwrap();
    assert!(f.to_i64().is_err());
    assert!(f.to_strings().is_err());
    let t = f.to_tensor().unwrap();
    assert_eq!(
        (t.dtype, t.to_f32_vec().unwrap()),
        (DType::F32, vec![1.5, -2.0])
    );
    assert_eq!(NpyArray::from_tensor(&t).unwrap(), f);
    let i = NpyArray::from_i32(&[1], &[7]).unwrap().to_tensor().unwrap();
    assert_eq!(i.dtype, DType::I32);
    let h = NpyArray::from_f16(&[1], &[f16::ONE])
        .unwrap()
        .to_tensor()
        .unwrap();
    assert_eq!(h.dtype, DType::F16);
    assert!(
        NpyArray::from_f64(&[1], &[1.0])
            .unwrap()
            .to_tensor()
            .is_err()
    );
    let bf = HostTensor::from_bf16(&[1], &[bf16::ONE]).unwrap();
    assert!(NpyArray::from_tensor(&bf).is_err());
    let s = npy::read(&hex(UNICODE_2)).unwrap();
    assert!(s.to_f32().is_err() && s.to_i64().is_err());
    // An invalid code point in a string array.
    let bad = NpyArray::new(NpyDType::Unicode(1), &[1], 0xD800u32.to_le_bytes().to_vec()).unwrap();
    assert!(bad.to_strings().is_err());
}

#[test]
fn npy_versions_2_and_3() {
    let v1 = hex(F32_2X3);
    let hlen = u16::from_le_bytes([v1[8], v1[9]]) as usize;
    for version in [2u8, 3] {
        let mut f = b"\x93NUMPY".to_vec();
        f.extend_from_slice(&[version, 0]);
        f.extend_from_slice(&(hlen as u32).to_le_bytes());
        f.extend_from_slice(&v1[10..]);
        assert_eq!(npy::read(&f).unwrap(), npy::read(&v1).unwrap());
    }
    for (major, minor) in [(4u8, 0u8), (1, 1), (0, 0)] {
        let mut f = v1.clone();
        f[6] = major;
        f[7] = minor;
        assert!(npy_err(&f).contains("version"));
    }
    let mut f = v1.clone();
    f[0] = b'x';
    assert!(npy_err(&f).contains("magic"));
    // A header too long for version 1 makes the writer use version 2.
    let big = NpyArray::new(NpyDType::U8, &[1; 64], vec![7]).unwrap();
    let b = npy::to_bytes(&big).unwrap();
    assert_eq!(npy::read(&b).unwrap(), big);
}

#[test]
fn npy_header_grammar_is_strict() {
    let data = le(&[1.0f32, 2.0], f32::to_le_bytes);
    let ok = [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,)}",
        "{'shape': (2L,), 'fortran_order': False, 'descr': '<f4'}",
        "{ 'descr' : '<f4' ,\n 'fortran_order' : False , 'shape' : ( 2 , ) , }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2,), }",
    ];
    for h in ok {
        let a = npy::read(&npy_with_header(h, &data)).unwrap_or_else(|e| panic!("{h}: {e}"));
        assert_eq!(a.to_f32().unwrap(), vec![1.0, 2.0]);
    }
    let bad = [
        "",
        "{}",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (02,)}",
        "{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
        "['descr', '<f4']",
        "{descr: '<f4', 'fortran_order': False, 'shape': (2,)}",
    ];
    for h in bad {
        let e = npy_err(&npy_with_header(h, &data));
        assert!(e.starts_with("npy"), "{h}: {e}");
    }
    let rank65 = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}",
        "1, ".repeat(65)
    );
    assert!(npy_err(&npy_with_header(&rank65, &[0; 4])).contains("rank"));
    // Data length must match the shape exactly.
    let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    assert!(npy_err(&npy_with_header(h, &data[..7])).contains("truncated"));
    let mut long = data.clone();
    long.push(0);
    assert!(npy_err(&npy_with_header(h, &long)).contains("follow"));
    let huge = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
    assert!(npy_err(&npy_with_header(huge, &[])).contains("overflows"));
}

#[test]
fn npy_every_truncation_fails() {
    for h in [F32_2X3, UNICODE_2, F32_FORTRAN_2X3X2, F32_SCALAR] {
        let b = hex(h);
        for len in 0..b.len() {
            assert!(npy::read(&b[..len]).is_err(), "prefix {len}");
        }
    }
}

#[test]
fn npy_random_corruption_never_panics() {
    for (seed, h) in [F32_FORTRAN_2X3X2, UNICODE_2, I64_2X2]
        .into_iter()
        .enumerate()
    {
        corrupt_loop(&hex(h), 2000, seed as u64 + 1, |c| {
            if let Ok(a) = npy::read(&c) {
                let _ = (a.to_f32(), a.to_f64(), a.to_i64(), a.to_strings());
            }
        });
    }
}

#[test]
fn npy_reads_upstream_stats() {
    let Some(dir) = shared_dir() else { return };
    let p = dir.join("motionbricks/out/motionbricks_pose/version_1/stats/motion/mean.npy");
    let a = npy::read_file(&p).unwrap();
    assert_eq!(
        (a.dtype, a.shape.as_slice()),
        (NpyDType::F64, &[418usize][..])
    );
    let v = a.to_f64().unwrap();
    assert!((v[1] - 0.727_747_78).abs() < 1e-8, "{}", v[1]);
    assert!((v.iter().sum::<f64>() - 51.072_239_306_881_27).abs() < 1e-9);
    let p = dir.join("kimodo/assets/skeletons/somaskel77/relaxed_hands_rest_pose.npy");
    let a = npy::read_file(&p).unwrap();
    assert_eq!(
        (a.dtype, a.shape.as_slice()),
        (NpyDType::F32, &[77usize, 3, 3][..])
    );
    // Written back, the file is byte-identical to what numpy wrote.
    assert_eq!(npy::to_bytes(&a).unwrap(), std::fs::read(&p).unwrap());
}

// ---------------------------------------------------------------------------------------------
// npz

fn npz_err(bytes: Vec<u8>) -> String {
    match touch_npz(bytes) {
        Ok(()) => panic!("hostile npz accepted"),
        Err(e) => e.to_string(),
    }
}

fn u16_at(b: &[u8], i: usize) -> usize {
    u16::from_le_bytes([b[i], b[i + 1]]) as usize
}
fn u32_at(b: &[u8], i: usize) -> usize {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize
}
fn set_u32(b: &mut [u8], i: usize, v: u32) {
    b[i..i + 4].copy_from_slice(&v.to_le_bytes());
}

/// Offsets of the end record and of each central directory entry (archives without a comment).
fn zip_layout(b: &[u8]) -> (usize, Vec<usize>) {
    let eocd = b.len() - 22;
    assert_eq!(u32_at(b, eocd), 0x0605_4b50);
    let mut at = u32_at(b, eocd + 16);
    let mut entries = Vec::new();
    for _ in 0..u16_at(b, eocd + 10) {
        entries.push(at);
        at += 46 + u16_at(b, at + 28) + u16_at(b, at + 30) + u16_at(b, at + 32);
    }
    (eocd, entries)
}

fn sample_arrays() -> Vec<(&'static str, NpyArray)> {
    vec![
        (
            "posed_joints",
            NpyArray::from_f32(&[2, 1, 3], &[0.5, 1.0, 1.5, 2.0, 2.5, 3.0]).unwrap(),
        ),
        (
            "foot_contacts",
            NpyArray::from_bool(&[2, 2], &[true, false, false, true]).unwrap(),
        ),
        ("ids", NpyArray::from_i64(&[2], &[-1, 1 << 50]).unwrap()),
        (
            "half",
            NpyArray::from_f16(&[1], &[f16::from_f32(0.25)]).unwrap(),
        ),
        ("d", NpyArray::from_f64(&[], &[2.5]).unwrap()),
        ("i", NpyArray::from_i32(&[3], &[1, 2, 3]).unwrap()),
        ("u", NpyArray::from_u8(&[0], &[]).unwrap()),
        ("s", npy::read(&hex(UNICODE_2)).unwrap()),
    ]
}

fn sample_npz() -> Vec<u8> {
    let mut w = NpzWriter::new();
    for (n, a) in sample_arrays() {
        w.add(n, &a).unwrap();
    }
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    b
}

#[test]
fn npz_reads_numpy_archives() {
    let z = NpzReader::from_bytes(hex(NPZ_STORED)).unwrap();
    assert_eq!(z.names(), ["a", "b"]);
    assert_eq!(z.array("a").unwrap().to_f32().unwrap(), vec![0.0, 1.0, 2.0]);
    let b = z.array("b.npy").unwrap();
    assert_eq!(
        (b.shape.as_slice(), b.to_i64().unwrap()),
        (&[1usize, 2][..], vec![1, 2])
    );
    assert!(matches!(
        format_err(&z.array("c").unwrap_err()),
        FormatError::MissingTensor { .. }
    ));
    let z = NpzReader::from_bytes(hex(NPZ_DEFLATED)).unwrap();
    assert_eq!(z.names(), ["a", "flags"]);
    let want: Vec<f32> = (0..40).map(|i| i as f32).collect();
    assert_eq!(z.array("a").unwrap().to_f32().unwrap(), want);
    assert_eq!(z.array("flags").unwrap().to_i64().unwrap(), vec![1, 0, 1]);
}

#[test]
fn npz_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.npz");
    let mut w = NpzWriter::new();
    for (n, a) in sample_arrays() {
        w.add(n, &a).unwrap();
    }
    w.write(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), sample_npz());
    let z = NpzReader::open(&path).unwrap();
    let names: Vec<&str> = sample_arrays().iter().map(|(n, _)| *n).collect();
    assert_eq!(z.names(), names);
    for (n, a) in sample_arrays() {
        assert_eq!(z.array(n).unwrap(), a, "{n}");
    }
    let e = w.add("ids", &sample_arrays()[0].1).unwrap_err();
    assert!(
        matches!(format_err(&e), FormatError::Duplicate { .. }),
        "{e}"
    );
    assert!(w.add("", &sample_arrays()[0].1).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn npz_numpy_reads_our_archives() {
    let have_numpy = std::process::Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_numpy {
        println!("skipping: python3 with numpy is not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ours.npz");
    std::fs::write(&path, sample_npz()).unwrap();
    let script = r#"
import sys, zipfile, numpy as np
assert zipfile.ZipFile(sys.argv[1]).testzip() is None
z = np.load(sys.argv[1], allow_pickle=False)
assert z.files == ['posed_joints', 'foot_contacts', 'ids', 'half', 'd', 'i', 'u', 's'], z.files
assert z['posed_joints'].shape == (2, 1, 3) and z['posed_joints'][1, 0, 2] == 3.0
assert z['foot_contacts'].dtype == bool and z['foot_contacts'][1, 1]
assert z['ids'][1] == 2**50 and z['half'].dtype == np.float16 and z['d'].shape == ()
assert list(z['s']) == ['ab', 'héllo']
print('numpy ok')
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn npz_every_truncation_fails() {
    for b in [hex(NPZ_STORED), hex(NPZ_DEFLATED), sample_npz()] {
        touch_npz(b.clone()).unwrap();
        for len in 0..b.len() {
            assert!(touch_npz(b[..len].to_vec()).is_err(), "prefix {len}");
        }
    }
}

#[test]
fn npz_lying_sizes_and_bad_entries() {
    let good = sample_npz();
    let (eocd, cd) = zip_layout(&good);
    let first = cd[0];
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        npz_err(b)
    };
    // Central directory fields: flags +8, method +10, crc +16, csize +20, usize +24, local +42.
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "usize+1",
            edit(&|b| {
                let v = u32_at(b, first + 24) as u32 + 1;
                set_u32(b, first + 24, v)
            }),
            "compressed size",
        ),
        (
            "both+1000",
            edit(&|b| {
                let v = u32_at(b, first + 24) as u32 + 1000;
                set_u32(b, first + 20, v);
                set_u32(b, first + 24, v);
            }),
            "overlap",
        ),
        ("crc", edit(&|b| b[first + 16] ^= 1), "CRC-32"),
        (
            "method",
            edit(&|b| b[first + 10] = 12),
            "compression method 12",
        ),
        ("encrypted", edit(&|b| b[first + 8] |= 1), "encrypted"),
        (
            "local offset",
            edit(&|b| set_u32(b, first + 42, 0x7fff_ffff)),
            "outside",
        ),
        (
            "local sig",
            edit(&|b| b[0] = b'Q'),
            "local header signature",
        ),
        ("local name", edit(&|b| b[30] = b'Q'), "names another file"),
        (
            "count",
            edit(&|b| {
                b[eocd + 8..eocd + 12].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
            }),
            "cannot fit",
        ),
        (
            "cd offset",
            edit(&|b| set_u32(b, eocd + 16, 0xffff_fff0)),
            "outside",
        ),
        (
            "cd size",
            edit(&|b| set_u32(b, eocd + 12, 0xffff)),
            "outside",
        ),
        ("multi-disk", edit(&|b| b[eocd + 4] = 1), "multi-disk"),
        ("no eocd", edit(&|b| b[eocd] = 0), "not a zip file"),
        (
            "zip64 without extra",
            edit(&|b| set_u32(b, first + 24, u32::MAX)),
            "zip64",
        ),
        ("cd sig", edit(&|b| b[first] = 0), "signature"),
        ("name utf-8", edit(&|b| b[first + 46] = 0xff), "UTF-8"),
        (
            "npy inside",
            edit(&|b| {
                let i = 30 + u16_at(b, 26) + 1;
                b[i] = b'X'
            }),
            "posed_joints",
        ),
    ];
    for (what, e, needle) in cases {
        assert!(e.contains(needle), "{what}: {e:?} lacks {needle:?}");
    }

    // Deflated member: lying declared sizes.
    let d = hex(NPZ_DEFLATED);
    let (_, dcd) = zip_layout(&d);
    let real = u32_at(&d, dcd[0] + 24) as u32;
    for (usize_, needle) in [
        (0x7fff_ffff, "above the limit"),
        // The member's npy header is inflated first and must agree with the directory.
        (real + 1, "its npy header declares"),
        (real - 1, "its npy header declares"),
    ] {
        let mut b = d.clone();
        set_u32(&mut b, dcd[0] + 24, usize_);
        let e = npz_err(b);
        assert!(e.contains(needle), "{usize_}: {e:?} lacks {needle:?}");
    }
    let mut b = d.clone();
    let data = 30 + u16_at(&d, 26) + u16_at(&d, 28);
    b[data + 5] ^= 0x55;
    npz_err(b);
}

#[test]
fn npz_duplicate_and_overlapping_entries() {
    let mut w = NpzWriter::new();
    w.add("a", &NpyArray::from_u8(&[1], &[1]).unwrap()).unwrap();
    let mut one = Vec::new();
    w.write_to(&mut one).unwrap();
    let (eocd, cd) = zip_layout(&one);
    let entry = one[cd[0]..eocd].to_vec();
    // The same directory entry twice: both point at one local header.
    let mut twice = one[..eocd].to_vec();
    twice.extend_from_slice(&entry);
    let mut end = one[eocd..].to_vec();
    end[8..10].copy_from_slice(&2u16.to_le_bytes());
    end[10..12].copy_from_slice(&2u16.to_le_bytes());
    end[12..16].copy_from_slice(&(2 * entry.len() as u32).to_le_bytes());
    twice.extend_from_slice(&end);
    assert!(npz_err(twice).contains("overlap"));
    // Two members named "a.npy": rename "b.npy" in its local header and directory entry.
    let mut w = NpzWriter::new();
    w.add("a", &NpyArray::from_u8(&[1], &[1]).unwrap()).unwrap();
    w.add("b", &NpyArray::from_u8(&[1], &[2]).unwrap()).unwrap();
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    let (_, cd) = zip_layout(&b);
    let local_b = u32_at(&b, cd[1] + 42);
    b[local_b + 30] = b'a';
    b[cd[1] + 46] = b'a';
    assert!(npz_err(b).contains("duplicate"));
}

/// Rewrite a one-member archive of ours with zip64 records: the directory entry's sizes and
/// offset as 0xFFFFFFFF with a zip64 extra field, and a zip64 end record plus locator.
fn zip64ify(b: &[u8]) -> Vec<u8> {
    let (eocd, cd) = zip_layout(b);
    let e = cd[0];
    let name_len = u16_at(b, e + 28);
    let (csize, usize_, local) = (u32_at(b, e + 20), u32_at(b, e + 24), u32_at(b, e + 42));
    let mut out = b[..e].to_vec();
    let mut entry = b[e..e + 46 + name_len].to_vec();
    set_u32(&mut entry, 20, u32::MAX);
    set_u32(&mut entry, 24, u32::MAX);
    set_u32(&mut entry, 42, u32::MAX);
    entry[30..32].copy_from_slice(&28u16.to_le_bytes());
    entry.extend_from_slice(&1u16.to_le_bytes());
    entry.extend_from_slice(&24u16.to_le_bytes());
    for v in [usize_, csize, local] {
        entry.extend_from_slice(&(v as u64).to_le_bytes());
    }
    out.extend_from_slice(&entry);
    let z64 = out.len() as u64;
    let z = B::default()
        .u32(0x0606_4b50)
        .u64(44)
        .u32(0x002d_002d)
        .u32(0)
        .u32(0)
        .u64(1)
        .u64(1)
        .u64(entry.len() as u64)
        .u64(e as u64)
        .u32(0x0706_4b50)
        .u32(0)
        .u64(z64)
        .u32(1);
    out.extend_from_slice(&z.0);
    let mut end = b[eocd..].to_vec();
    end[8..12].copy_from_slice(&[0xff; 4]);
    end[12..20].copy_from_slice(&[0xff; 8]);
    out.extend_from_slice(&end);
    out
}

#[test]
fn npz_zip64_records() {
    let mut w = NpzWriter::new();
    let a = NpyArray::from_f32(&[3], &[1.0, 2.0, 3.0]).unwrap();
    w.add("x", &a).unwrap();
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    let z = zip64ify(&b);
    assert_eq!(
        NpzReader::from_bytes(z.clone())
            .unwrap()
            .array("x")
            .unwrap(),
        a
    );
    for len in 0..z.len() {
        assert!(touch_npz(z[..len].to_vec()).is_err(), "prefix {len}");
    }
    // A locator pointing past the end, and a zip64 record with a bad signature.
    let loc = z.len() - 22 - 20;
    let mut bad = z.clone();
    bad[loc + 8..loc + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(npz_err(bad).contains("outside"));
    let mut bad = z.clone();
    bad[loc - 56] = 0;
    assert!(npz_err(bad).contains("zip64 end record"));
    corrupt_loop(&z, 2000, 64, |c| {
        let _ = touch_npz(c);
    });
}

/// An npy v1 header (preamble, dict, padding) for a little-endian f32 array of `shape`.
fn npy_f32_header(shape: &str) -> Vec<u8> {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    let pad = (64 - (10 + dict.len() + 1) % 64) % 64;
    let text = format!("{dict}{}\n", " ".repeat(pad));
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&(text.len() as u16).to_le_bytes());
    h.extend_from_slice(text.as_bytes());
    h
}

/// A raw deflate stream of `prefix` then `mib` MiB of zeros: one compressed MiB repeated
/// (every chunk ends on a sync flush, so chunks concatenate), as a zip bomb is built.
fn deflate_zeros(prefix: &[u8], mib: usize) -> Vec<u8> {
    use miniz_oxide::deflate::core::{
        CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
    };
    let mut c = CompressorOxide::new(create_comp_flags_from_zip_params(9, -15, 0));
    let mut buf = vec![0u8; 4 << 20];
    let mut chunk = |c: &mut CompressorOxide, data: &[u8], flush| -> Vec<u8> {
        let (status, read, written) = compress(c, data, &mut buf, flush);
        assert!(matches!(status, TDEFLStatus::Okay | TDEFLStatus::Done));
        assert_eq!(read, data.len());
        buf[..written].to_vec()
    };
    let zeros = vec![0u8; 1 << 20];
    let mut out = chunk(&mut c, prefix, TDEFLFlush::Sync);
    // The first MiB may reach back into the prefix; the second has only zeros behind it,
    // so it can follow any MiB of zeros.
    let first = chunk(&mut c, &zeros, TDEFLFlush::Sync);
    let steady = chunk(&mut c, &zeros, TDEFLFlush::Sync);
    if mib > 0 {
        out.extend_from_slice(&first);
    }
    for _ in 1..mib {
        out.extend_from_slice(&steady);
    }
    out.extend(chunk(&mut c, &[], TDEFLFlush::Finish));
    out
}

/// A zip of one deflated member `x.npy` whose directory declares `declared` bytes (with a
/// zip64 extra field when that needs it) and the CRC `crc`.
fn zip_deflated(stream: &[u8], declared: u64, crc: u32) -> Vec<u8> {
    let name = b"x.npy";
    let zip64 = declared >= u64::from(u32::MAX);
    let mut z = Vec::new();
    z.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    z.extend_from_slice(&45u16.to_le_bytes()); // version needed
    z.extend_from_slice(&0u16.to_le_bytes()); // flags
    z.extend_from_slice(&8u16.to_le_bytes()); // deflate
    z.extend_from_slice(&[0; 4]); // time, date
    z.extend_from_slice(&crc.to_le_bytes());
    z.extend_from_slice(&u32::MAX.to_le_bytes());
    z.extend_from_slice(&u32::MAX.to_le_bytes());
    z.extend_from_slice(&(name.len() as u16).to_le_bytes());
    z.extend_from_slice(&0u16.to_le_bytes());
    z.extend_from_slice(name);
    z.extend_from_slice(stream);
    let cd_start = z.len() as u32;
    z.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
    z.extend_from_slice(&45u16.to_le_bytes()); // made by
    z.extend_from_slice(&45u16.to_le_bytes()); // needed
    z.extend_from_slice(&0u16.to_le_bytes());
    z.extend_from_slice(&8u16.to_le_bytes());
    z.extend_from_slice(&[0; 4]);
    z.extend_from_slice(&crc.to_le_bytes());
    z.extend_from_slice(&(stream.len() as u32).to_le_bytes());
    let small = if zip64 { u32::MAX } else { declared as u32 };
    z.extend_from_slice(&small.to_le_bytes());
    z.extend_from_slice(&(name.len() as u16).to_le_bytes());
    z.extend_from_slice(&(if zip64 { 12u16 } else { 0 }).to_le_bytes());
    z.extend_from_slice(&[0; 14]); // comment length, disk, attributes, local offset 0
    z.extend_from_slice(name);
    if zip64 {
        z.extend_from_slice(&1u16.to_le_bytes());
        z.extend_from_slice(&8u16.to_le_bytes());
        z.extend_from_slice(&declared.to_le_bytes());
    }
    let cd_size = z.len() as u32 - cd_start;
    z.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    z.extend_from_slice(&[0; 4]);
    z.extend_from_slice(&1u16.to_le_bytes());
    z.extend_from_slice(&1u16.to_le_bytes());
    z.extend_from_slice(&cd_size.to_le_bytes());
    z.extend_from_slice(&cd_start.to_le_bytes());
    z.extend_from_slice(&0u16.to_le_bytes());
    z
}

/// Issue 10 defect 6: a 12.5 MB npz whose member honestly inflates to 12 GiB (within
/// deflate's ratio) used to abort the process on allocation. It is refused up front by the
/// total-size cap; above a raised cap, a member whose npy header declares a shape that
/// disagrees with the directory's size is refused before its buffer is allocated; a stream
/// running past its declared size is refused.
#[test]
fn npz_zip_bomb_is_an_error_not_an_abort() {
    // The builder itself: three MiB inflate to exactly the prefix and three MiB of zeros.
    let small = deflate_zeros(b"abc", 3);
    let inflated = miniz_oxide::inflate::decompress_to_vec(&small).unwrap();
    assert_eq!(inflated.len(), 3 + (3 << 20));
    assert!(inflated[3..].iter().all(|&b| b == 0));

    const GIB12: u64 = 12 << 30;
    let elems = GIB12 / 4;
    let header = npy_f32_header(&format!("({elems},)"));
    let stream = deflate_zeros(&header, (GIB12 >> 20) as usize);
    assert!(stream.len() < 14 << 20, "{} bytes", stream.len());
    let declared = header.len() as u64 + GIB12;
    // An honest ratio: the deflate-ratio check does not refuse it.
    assert!(stream.len() as u64 * kinema::formats::npz::MAX_DEFLATE_RATIO >= declared);
    let bomb = zip_deflated(&stream, declared, 0);
    let e = NpzReader::from_bytes(bomb.clone()).unwrap_err();
    assert!(
        matches!(format_err(&e), FormatError::Limit { value, what, .. }
            if *value == declared && what.contains("deflated members")),
        "{e}"
    );
    // Above a raised cap the directory parses; the member's header agrees with its size, so
    // only the cap stood between it and a 12 GiB allocation: open with a cap below it.
    assert!(NpzReader::from_bytes_with_limit(bomb, declared - 1).is_err());

    // A header declaring 4 floats in a member declaring 12 GiB: refused after inflating the
    // header, before the 12 GiB buffer.
    let header = npy_f32_header("(4,)");
    let stream = deflate_zeros(&header, (GIB12 >> 20) as usize);
    let liar = zip_deflated(&stream, header.len() as u64 + GIB12, 0);
    let z = NpzReader::from_bytes_with_limit(liar, u64::MAX).unwrap();
    let e = z.array("x").unwrap_err().to_string();
    assert!(e.contains("its npy header declares 144 bytes"), "{e}");

    // A member declaring its true npy size (144 bytes) whose stream goes on for a MiB.
    let stream = deflate_zeros(&header, 1);
    let e = NpzReader::from_bytes(zip_deflated(&stream, 144, 0))
        .unwrap()
        .array("x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("runs past the declared 144 bytes"), "{e}");
    // The same stream declared at its full length: the header disagrees.
    let full = 128 + (1u64 << 20);
    let e = NpzReader::from_bytes(zip_deflated(&stream, full, 0))
        .unwrap()
        .array("x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("declares 144 bytes, the directory"), "{e}");
    // A stream that ends before the size its header and directory agree on.
    let stream = deflate_zeros(&header, 0);
    let e = NpzReader::from_bytes(zip_deflated(&stream, 144, 0))
        .unwrap()
        .array("x")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("inflates to 128 bytes, the directory declares 144"),
        "{e}"
    );
}

#[test]
fn npz_random_corruption_never_panics() {
    for (seed, b) in [hex(NPZ_STORED), hex(NPZ_DEFLATED), sample_npz()]
        .into_iter()
        .enumerate()
    {
        corrupt_loop(&b, 2000, 100 + seed as u64, |c| {
            let _ = touch_npz(c);
        });
    }
}

#[test]
fn npz_reads_upstream_archives() {
    let Some(dir) = shared_dir() else { return };
    let z = NpzReader::open(
        dir.join("kimodo/assets/demo/examples/kimodo-g1-rp/01_single_text_prompt/motion.npz"),
    )
    .unwrap();
    assert_eq!(
        z.names(),
        ["posed_joints", "global_rot_mats", "foot_contacts"]
    );
    let p = z.array("posed_joints").unwrap();
    assert_eq!(p.shape, [150, 34, 3]);
    let v = p.to_f32().unwrap();
    assert!((v[1] - 0.785_094_86).abs() < 1e-7);
    let sum: f64 = v.iter().map(|&x| x as f64).sum();
    assert!((sum - 16921.059).abs() < 0.01, "{sum}");
    assert_eq!(z.array("global_rot_mats").unwrap().shape, [150, 34, 3, 3]);
    let fc = z.array("foot_contacts").unwrap();
    assert_eq!(fc.dtype, NpyDType::Bool);
    assert_eq!(fc.to_i64().unwrap().iter().sum::<i64>(), 331);

    // Deflated members, with int64, int32 and unicode arrays.
    let z =
        NpzReader::open(dir.join("kimodo/assets/skeletons/somaskel77/skin_standard.npz")).unwrap();
    let names = z.array("rig_joint_names").unwrap().to_strings().unwrap();
    assert_eq!(names.len(), 77);
    assert_eq!(&names[..3], ["Hips", "Spine1", "Spine2"]);
    let faces = z.array("faces").unwrap();
    assert_eq!(
        (faces.dtype, faces.shape.as_slice()),
        (NpyDType::I64, &[36108usize, 3][..])
    );
    assert_eq!(&faces.to_i64().unwrap()[..3], [4505, 41, 4602]);
    assert_eq!(z.array("lbs_indices").unwrap().dtype, NpyDType::I32);

    // Every upstream npz and npy parses.
    let mut stack = vec![dir];
    let mut n = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            match p.extension().and_then(|e| e.to_str()) {
                _ if p.is_dir() => stack.push(p),
                Some("npz") => {
                    let z = NpzReader::open(&p).unwrap();
                    for name in z.names() {
                        z.array(name)
                            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                    }
                    n += 1;
                }
                Some("npy") => {
                    npy::read_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                    n += 1;
                }
                _ => {}
            }
        }
    }
    assert!(n >= 20, "found only {n} upstream numpy files");
}

// ---------------------------------------------------------------------------------------------
// Reference bytes, written once by numpy 2.4 (`np.save` / `np.savez` / `np.savez_compressed`):
//   F32_2X3 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
//   F64_3 = np.array([1.5, -2.25, 1e300]);  F16_2X2 = np.array([[1, -2], [0.5, 65504]], np.float16)
//   I32_4 = np.array([1, -2, 2**31 - 1, -2**31], np.int32)
//   I64_2X2 = np.array([[1, -2], [2**40, -2**62]], np.int64)
//   U8_3 = [0, 7, 255] uint8;  I8_3 = [0, -7, 127] int8;  BOOL_2X2 = [[True, False], [False, True]]
//   F32_SCALAR = np.float32(3.25);  F32_0X3 = np.zeros((0, 3), np.float32)
//   F32_FORTRAN_2X3X2 = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(2, 3, 2))
//   UNICODE_2 = np.array(["ab", "héllo"]);  BIG_ENDIAN_F4 = np.array([1.0, 2.0], ">f4")
//   OBJECT = np.array([{"a": 1}, None], dtype=object) saved with allow_pickle=True
//   STRUCTURED = np.zeros(2, dtype=[("x", "<f4"), ("y", "<i4")])
//   NPZ_STORED = np.savez(a=np.arange(3, dtype=np.float32), b=np.array([[1, 2]], np.int64))
//   NPZ_DEFLATED = np.savez_compressed(a=np.arange(40, dtype=np.float32),
//                                      flags=np.array([True, False, True]))

const F32_2X3: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028322c2033292c207d202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a000020c00000c0bf000000bf0000003f",
    "0000c03f00002040",
);
const F64_3: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6638272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028332c292c207d2020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a000000000000f83f00000000000002c0",
    "9c7500883ce4377e",
);
const F16_2X2: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6632272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028322c2032292c207d202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a003c00c00038ff7b",
);
const I32_4: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6934272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028342c292c207d2020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a01000000feffffffffffff7f00000080",
);
const I64_2X2: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028322c2032292c207d202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a0100000000000000feffffffffffffff",
    "000000000001000000000000000000c0",
);
const U8_3: &str = concat!(
    "934e554d5059010076007b276465736372273a20277c7531272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028332c292c207d2020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a0007ff",
);
const I8_3: &str = concat!(
    "934e554d5059010076007b276465736372273a20277c6931272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028332c292c207d2020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a00f97f",
);
const BOOL_2X2: &str = concat!(
    "934e554d5059010076007b276465736372273a20277c6231272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028322c2032292c207d202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a01000001",
);
const F32_SCALAR: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028292c207d20202020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a00005040",
);
const F32_0X3: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028302c2033292c207d202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a",
);
const F32_FORTRAN_2X3X2: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572273a2054727565",
    "2c20277368617065273a2028322c20332c2032292c207d20202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a000000000000c0400000004000000041",
    "00008040000020410000803f0000e04000004040000010410000a04000003041",
);
const UNICODE_2: &str = concat!(
    "934e554d5059010076007b276465736372273a20273c5535272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028322c292c207d2020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a61000000620000000000000000000000",
    "0000000068000000e90000006c0000006c0000006f000000",
);
const BIG_ENDIAN_F4: &str = concat!(
    "934e554d5059010076007b276465736372273a20273e6634272c2027666f727472616e5f6f72646572273a2046616c73",
    "652c20277368617065273a2028322c292c207d2020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a3f80000040000000",
);
const OBJECT: &str = concat!(
    "934e554d5059010076007b276465736372273a20277c4f272c2027666f727472616e5f6f72646572273a2046616c7365",
    "2c20277368617065273a2028322c292c207d202020202020202020202020202020202020202020202020202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a80049594000000000000008c166e756d",
    "70792e5f636f72652e6d756c74696172726179948c0c5f7265636f6e7374727563749493948c056e756d7079948c076e",
    "6461727261799493944b0085944301629487945294284b014b02859468038c0564747970659493948c024f3894898887",
    "945294284b038c017c944e4e4e4affffffff4affffffff4b3f749462895d94287d948c0161944b01734e657494622e",
);
const STRUCTURED: &str = concat!(
    "934e554d5059010076007b276465736372273a205b282778272c20273c663427292c20282779272c20273c693427295d",
    "2c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c292c207d202020202020",
    "202020202020202020202020202020202020202020202020202020202020200a00000000000000000000000000000000",
);
const NPZ_STORED: &str = concat!(
    "504b03042d000000000000002100b68c8653ffffffffffffffff05001400612e6e7079010010008c000000000000008c",
    "00000000000000934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572",
    "273a2046616c73652c20277368617065273a2028332c292c207d20202020202020202020202020202020202020202020",
    "20202020202020202020202020202020202020202020202020202020202020202020202020200a000000000000803f00",
    "000040504b03042d000000000000002100c9bc68d6ffffffffffffffff05001400622e6e707901001000900000000000",
    "00009000000000000000934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72",
    "646572273a2046616c73652c20277368617065273a2028312c2032292c207d2020202020202020202020202020202020",
    "20202020202020202020202020202020202020202020202020202020202020202020202020202020200a010000000000",
    "00000200000000000000504b01022d032d000000000000002100b68c86538c0000008c00000005000000000000000000",
    "0000800100000000612e6e7079504b01022d032d000000000000002100c9bc68d6900000009000000005000000000000",
    "00000000008001c3000000622e6e7079504b05060000000002000200660000008a0100000000",
);
const NPZ_DEFLATED: &str = concat!(
    "504b03042d00000008000000210035d238d7ffffffffffffffff05001400612e6e7079010010002001000000000000a7",
    "000000000000009dc8af0f01611cc7f1af4d30130441109ef6b05db82099cd8fa0b12b82c48de72618f69c2966bb28da",
    "14511445f1a2288a174551f4e64ff0d9f7f5d9be9f43afdff5062959cb464f4c38b6baa6743da86a47e9606157d69f0f",
    "177662be7bc79f85863d9cfa4bc35faeba4ec5515bf57fb2f24bd4a09a1c229c102381b444f25070d18487119688b0c3",
    "1e479c70c60557c4b8e18e07123cf1c21bd2164923831cf228a08852fb03504b03042d00000008000000210016938cbb",
    "ffffffffffffffff09001400666c6167732e6e707901001000830000000000000047000000000000009bec17ea1b10c9",
    "c850c650ad9e925a9c5ca46ea5a05e9364a8aea3a09e965f54529498179f5f94920a12774bcc294e058a17672416a402",
    "f91ac63a9a3a0ab50a14002e46064600504b01022d032d00000008000000210035d238d7a70000002001000005000000",
    "0000000000000000800100000000612e6e7079504b01022d032d00000008000000210016938cbb470000008300000009",
    "00000000000000000000008001de000000666c6167732e6e7079504b050600000000020002006a000000600100000000",
);

/// The fuzz seed corpus stays valid input, so fuzzing starts from files that parse.
#[test]
fn fuzz_seeds_parse() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let read = |sub: &str| -> Vec<Vec<u8>> {
        let files: Vec<_> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(!files.is_empty(), "no {sub} seeds");
        files
    };
    for b in read("gguf") {
        touch_gguf(b).unwrap();
    }
    for b in read("safetensors") {
        touch_safetensors(b).unwrap();
    }
    for b in read("npy") {
        npy::read(&b).unwrap();
    }
    for b in read("npz") {
        touch_npz(b).unwrap();
    }
    for b in read("config_yaml") {
        let text = String::from_utf8(b).unwrap();
        kinema::models::kimodo::convert::parse_config_yaml(&text).unwrap();
    }
}
