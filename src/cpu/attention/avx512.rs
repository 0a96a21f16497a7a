//! AVX-512: panels of 32 keys, packed with the AVX2 8 x 8 transposes.

use super::super::simd::avx512::Avx512;
use super::avx2::x86_packers;
use super::entries;

entries!(Avx512, "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c");
x86_packers!(Avx512, 32);
