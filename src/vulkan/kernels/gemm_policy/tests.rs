//! Every branch of the tile and kernel choice, on device limits written out (no device).

use super::super::{test_h200 as h200, test_h200_coopmat2 as h200_coopmat2, test_limits as limits};
use super::*;

fn none() -> Forced {
    Forced::default()
}

fn forced_gemm(v: &str) -> Forced {
    Forced {
        gemm_tile: Some(v.into()),
        ..none()
    }
}

#[test]
fn tiles_respect_limits() {
    for t in CONV_TILES {
        assert_eq!(t.bm % t.tm, 0);
        assert_eq!(t.bn % t.tn, 0);
    }
    assert!(TILE_TINY.fits(&limits(128, 16384)));
    // What gemm_f32.glsl needs of a tile.
    for GemmTile(t) in GEMM_TILES {
        assert_eq!((t.tm % 4, t.tn % 4), (0, 0), "{t:?}");
        assert_eq!((t.bm % t.tm, t.bn % t.tn), (0, 0), "{t:?}");
        let wg = GemmTile(t).invocations();
        assert_eq!((t.bm * t.bk % wg, t.bn * t.bk % wg), (0, 0), "{t:?}");
    }
    let smallest = GEMM_TILES[GEMM_TILES.len() - 1];
    assert!(smallest.fits(&limits(128, 16384)));
}

#[test]
fn conv_tiles_follow_the_device() {
    let t = |l: &Limits| conv_tile(l, &none());
    assert_eq!(t(&limits(1024, 32768)), CONV_TILES[0]);
    // 256 invocations of the first tile do not fit 128.
    assert_eq!(t(&limits(128, 32768)), TILE_TINY);
    // 12 KiB of shared memory do not fit 8.
    assert_eq!(t(&limits(1024, 8192)), TILE_TINY);
    // Nothing fits: the tiny tile (within every device's guaranteed minimums) still runs.
    assert_eq!(t(&limits(16, 1024)), TILE_TINY);
    assert_eq!(CONV_TILES[0].spec(), [256, 16, 32, 64, 1, 2]);
    assert_eq!(CONV_TILES[0].shared_bytes(), 12288);
}

#[test]
fn a_forced_conv_tile_wins_only_when_valid_and_fitting() {
    let l = limits(1024, 32768);
    let f = |v: &str| Forced {
        conv_tile: Some(v.into()),
        ..none()
    };
    let old = LinearTile {
        bm: 32,
        bn: 32,
        bk: 16,
        tm: 2,
        tn: 2,
    };
    assert_eq!(conv_tile(&l, &f("32x32x16x2x2")), old);
    // Malformed, a zero, rows not in whole TM, too large for the device.
    for bad in [
        "",
        "32x32x16x2",
        "32x32x0x2x2",
        "32x32x16x0x2",
        "30x32x16x4x2",
        "64x64x64x1x1",
    ] {
        assert_eq!(conv_tile(&l, &f(bad)), CONV_TILES[0], "{bad:?}");
    }
}

#[test]
fn gemm_tiles_follow_the_device_and_the_shape() {
    let h200 = limits(1024, 49152);
    let lavapipe = limits(1024, 32768);
    for l in [&h200, &lavapipe] {
        assert_eq!(gemm_tile(4096, 4096, 1, l, &none()), GEMM_TILES[0]);
    }
    // 5 x 48 tiles of 128 x 64 would leave much of a large GPU idle.
    assert_eq!(gemm_tile(606, 3072, 1, &h200, &none()).0.bm, 64);
    // The batch counts: 202 x 202 attention scores, 12, 24 or 48 of them.
    assert_eq!(gemm_tile(202, 202, 12, &h200, &none()).0.bm, 32);
    assert_eq!(gemm_tile(202, 202, 24, &h200, &none()).0.bm, 64);
    assert_eq!(gemm_tile(202, 202, 48, &h200, &none()).0.bm, 128);
    // A few rows take the shortest tile.
    assert_eq!(gemm_tile(3, 1 << 20, 1, &h200, &none()).0.bm, 16);
    // Too few workgroups for any tile: the smallest that fits.
    assert_eq!(gemm_tile(1, 1, 1, &h200, &none()), GEMM_TILES[4]);
    // 64 invocations: the 128 x 64 and 64 x 64 tiles do not fit.
    assert_eq!(
        gemm_tile(4096, 4096, 1, &limits(64, 16384), &none()),
        GemmTile::new(16, 64, 16, 4, 4)
    );
    // No tile fits: the smallest still runs.
    assert_eq!(
        gemm_tile(4096, 4096, 1, &limits(16, 1024), &none()),
        GEMM_TILES[4]
    );
    for (m, n, b) in [(1, 1, 1), (202, 202, 24), (4096, 4096, 1)] {
        for l in [&h200, &lavapipe, &limits(128, 16384)] {
            assert!(gemm_tile(m, n, b, l, &none()).fits(l), "{m}x{n}x{b}");
        }
    }
}

#[test]
fn a_forced_gemm_tile_wins_only_when_valid_and_fitting() {
    let l = limits(1024, 49152);
    let default = gemm_tile(4096, 4096, 1, &l, &none());
    let t = |v: &str| gemm_tile(4096, 4096, 1, &l, &forced_gemm(v));
    assert_eq!(t("64x128x8x4x8"), GemmTile::new(64, 128, 8, 4, 8));
    // Not five numbers, or a zero, or outputs not in vec4s, or loads that do not divide.
    for bad in [
        "",
        "64x64x16x4",
        "64x64x16x4x4x4",
        "64x64x16x0x4",
        "64x64x16x2x4",
    ] {
        assert_eq!(t(bad), default, "{bad:?}");
    }
    assert_eq!(t("64x66x16x4x4"), default, "bn not a multiple of tn");
    assert_eq!(t("64x64x1x4x4"), default, "a 64 x 1 tile in 256 loads");
    // Valid but too large for the device.
    assert_eq!(t("256x256x16x4x4"), default);
}

#[test]
fn workgroup_scope_tile_only_for_large_outputs_on_devices_that_fit_it() {
    let h200 = h200();
    let c2 = h200_coopmat2();
    let tile = |m, n, c2: &Coopmat2, l: &Limits| cm2_tile(m, n, c2, l, &none());
    assert_eq!(tile(4096, 4096, &c2, &h200), Some(CM2_TILE));
    // 16 x 32 = 512 workgroups; Kimodo's 606 x 3072 gives 60, 4096 x 1024 only 128.
    assert_eq!(tile(606, 3072, &c2, &h200), None);
    assert_eq!(tile(4096, 1024, &c2, &h200), None);
    assert_eq!(tile(2048, 8192, &c2, &h200), Some(CM2_TILE));
    // A device whose workgroup-scope matrices allow fewer invocations keeps the
    // subgroup-scope kernels, as does one whose workgroups are smaller.
    let small = Coopmat2 {
        max_workgroup_size: 128,
        reductions: true,
    };
    assert_eq!(tile(4096, 4096, &small, &h200), None);
    let mut l128 = h200.clone();
    l128.max_workgroup_invocations = 128;
    assert_eq!(tile(4096, 4096, &c2, &l128), None);
    // A forced tile that fits wins, even for small outputs; one that does not (not whole
    // subgroups, too many invocations, a zero, malformed) leaves the default.
    let forced = |v: &str| Forced {
        cm2_tile: Some(v.into()),
        ..none()
    };
    let t64 = Cm2Tile {
        bm: 64,
        bn: 64,
        bk: 16,
        wg: 128,
    };
    assert_eq!(
        cm2_tile(606, 3072, &c2, &h200, &forced("64x64x16x128")),
        Some(t64)
    );
    for bad in ["64x64x16x100", "64x64x16x512", "0x64x16x128", "64x64x16"] {
        let f = forced(bad);
        assert_eq!(cm2_tile(606, 3072, &c2, &h200, &f), None, "{bad}");
        assert_eq!(
            cm2_tile(4096, 4096, &c2, &h200, &f),
            Some(CM2_TILE),
            "{bad}"
        );
    }
}

#[test]
fn coop_tiles_follow_the_device_and_the_shape() {
    let s = CoopMatShape::f16_16x16x16();
    let mut h200 = h200();
    let kernel = |m, n, s: &CoopMatShape, l: &Limits| coop_kernel(m, n, s, l, &none());
    let fixed = |v: CoopFixed| Some((v.shader, v.tile));
    assert_eq!(kernel(4096, 4096, &s, &h200), fixed(COOP_FIXED[0]));
    assert_eq!(kernel(606, 3072, &s, &h200), fixed(COOP_FIXED[0]));
    assert_eq!(kernel(404, 3072, &s, &h200), fixed(COOP_FIXED[0]));
    assert_eq!(kernel(606, 1024, &s, &h200), fixed(COOP_FIXED[1]));
    for v in COOP_FIXED {
        assert!(v.fits(&s, &h200), "{v:?}");
    }
    // The generic shader's tiles also fit the H200.
    for t in COOP_TILES {
        assert!(t.fits(&s, &h200, 1), "{t:?}");
    }
    // Another subgroup size or shape takes the generic shader, its small tile for outputs
    // that give too few workgroups of the large one.
    let mut wave64 = h200.clone();
    wave64.subgroup_size = 64;
    let generic = |t: CoopTile| Some((Shader::LinearCoopmat, t));
    assert_eq!(kernel(4096, 4096, &s, &wave64), generic(COOP_TILES[0]));
    assert_eq!(kernel(606, 3072, &s, &wave64), generic(COOP_TILES[1]));
    let s16x8 = CoopMatShape { n: 8, ..s };
    assert_eq!(kernel(4096, 4096, &s16x8, &h200), generic(COOP_TILES[0]));
    // 128-invocation devices take the 4-subgroup tiles; none fits 8 KiB of shared memory.
    h200.max_workgroup_invocations = 128;
    assert_eq!(kernel(4096, 4096, &s, &h200), fixed(COOP_FIXED[1]));
    let mut small = limits(1024, 8192);
    small.subgroup_size = 32;
    assert_eq!(kernel(4096, 4096, &s, &small), None);
}

#[test]
fn forced_coop_kernels_win_when_they_fit() {
    let s = CoopMatShape::f16_16x16x16();
    let l = h200();
    let forced = |shader: Option<&str>, tile: Option<&str>| Forced {
        coop_shader: shader.map(String::from),
        coop_tile: tile.map(String::from),
        ..none()
    };
    let small_name = COOP_FIXED[1].shader.info().name;
    let big_name = COOP_FIXED[0].shader.info().name;
    let fixed = |v: CoopFixed| Some((v.shader, v.tile));
    let generic = |t: CoopTile| Some((Shader::LinearCoopmat, t));
    // A fixed variant that fits, where the default would take the other.
    let f = forced(Some(small_name), None);
    assert_eq!(coop_kernel(4096, 4096, &s, &l, &f), fixed(COOP_FIXED[1]));
    // One that does not fit (256 invocations of 128), or an unknown name: the default.
    let mut l128 = l.clone();
    l128.max_workgroup_invocations = 128;
    let f = forced(Some(big_name), None);
    assert_eq!(coop_kernel(4096, 4096, &s, &l128, &f), fixed(COOP_FIXED[1]));
    let f = forced(Some("linear_cm_nope"), None);
    assert_eq!(coop_kernel(4096, 4096, &s, &l, &f), fixed(COOP_FIXED[0]));
    // The generic shader by name, over its default tiles or a forced one that fits.
    let f = forced(Some("linear_coopmat"), None);
    assert_eq!(coop_kernel(4096, 4096, &s, &l, &f), generic(COOP_TILES[0]));
    let t = CoopTile::new(64, 128, 32, 32, 64);
    let f = forced(Some("linear_coopmat"), Some("64x128x32x32x64"));
    assert_eq!(coop_kernel(4096, 4096, &s, &l, &f), generic(t));
    // A forced generic tile alone does not displace a fixed variant...
    let f = forced(None, Some("64x128x32x32x64"));
    assert_eq!(coop_kernel(4096, 4096, &s, &l, &f), fixed(COOP_FIXED[0]));
    // ...but is taken where no fixed variant runs.
    let mut wave64 = l.clone();
    wave64.subgroup_size = 64;
    let t64 = CoopTile::new(128, 128, 32, 64, 64);
    let f = forced(None, Some("128x128x32x64x64"));
    assert_eq!(coop_kernel(4096, 4096, &s, &wave64, &f), generic(t64));
    // A forced tile that is invalid or does not fit leaves the default tiles.
    for bad in [
        "128x128x30x64x32",
        "128x100x32x64x32",
        "128x128x32",
        "512x512x32x16x16",
    ] {
        let f = forced(Some("linear_coopmat"), Some(bad));
        assert_eq!(
            coop_kernel(4096, 4096, &s, &l, &f),
            generic(COOP_TILES[0]),
            "{bad}"
        );
    }
}

/// The fixed-tile table agrees with the variants' defines (`tools/shaderc`'s variant
/// table).
#[test]
fn fixed_tiles_match_their_defines() {
    let streaming = stream::CM_STREAM.iter().map(|v| (*v, true, false, false));
    let direct = stream::CM_DIRECT.iter().map(|v| (*v, true, true, false));
    let lane = stream::CM_LANE.iter().map(|v| (*v, true, true, true));
    let fixed = COOP_FIXED.iter().map(|v| (*v, false, false, false));
    for (v, stream, direct, lane) in fixed.chain(streaming).chain(direct).chain(lane) {
        let name = v.shader.info().name;
        let variant = super::super::shader_variants::VARIANTS
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} is not in the variant table"));
        assert_eq!(variant.source, "linear_cm.comp");
        assert_eq!(variant.define("STREAM").is_some(), stream, "{name}: STREAM");
        assert_eq!(variant.define("DIRECT").is_some(), direct, "{name}: DIRECT");
        assert_eq!(variant.define("LANE").is_some(), lane, "{name}: LANE");
        // The q8_0 lane variants read one window of 64 k at a time over 32-row blocks.
        if stream::CM_LANE_Q8.iter().any(|q| q.shader == v.shader) {
            assert_eq!(variant.define("UNROLL"), Some("4"), "{name}");
            assert_eq!(v.tile.bm, 32, "{name}");
        }
        if direct {
            // The unroll ends the name.
            let unroll = variant
                .define("UNROLL")
                .expect("DIRECT variants set UNROLL");
            assert!(
                name.ends_with(&format!("_u{unroll}")),
                "{name}: UNROLL {unroll}"
            );
        }
        let t = v.tile;
        for (define, value) in [
            ("BM", t.bm),
            ("BN", t.bn),
            ("BK", t.bk),
            ("WM", t.wm),
            ("WN", t.wn),
        ] {
            let want = value.to_string();
            assert_eq!(
                variant.define(define),
                Some(want.as_str()),
                "{name}: {define}"
            );
        }
    }
}

#[test]
fn linear_kernels_follow_precision_dtype_and_shape() {
    let s = CoopMatShape::f16_16x16x16();
    let l = h200();
    let c2 = h200_coopmat2();
    let k = |[m, n]: [usize; 2], w, s, c2| linear_kernel([m, n, 1024], w, s, c2, &l, &none());
    // Strict: the f32 GEMM, W_DTYPE last.
    let strict = k([606, 3072], DType::BF16, None, None);
    let t = gemm_tile(606, 3072, 1, &l, &none());
    assert_eq!(strict.shader, Shader::Linear);
    assert_eq!((strict.bm, strict.bn), (t.0.bm, t.0.bn));
    let mut spec = t.spec().to_vec();
    spec.push(2);
    assert_eq!(strict.spec, spec);
    // Even with workgroup-scope matrices, strict mode has no cooperative matrices.
    assert_eq!(
        k([4096, 4096], DType::F16, None, Some(c2)).shader,
        Shader::Linear
    );
    // Fast mode, subgroup scope: the fixed variant and its constants.
    let fast = k([606, 3072], DType::Q8_0, Some(s), None);
    assert_eq!(fast.shader, COOP_FIXED[0].shader);
    assert_eq!(
        fast.spec,
        [256, 128, 128, 32, 64, 32, 3, 16, 16, 16, 32, 1].to_vec()
    );
    // VEC_OK is 0 when bindings may start off a 16-byte boundary.
    let mut l4 = l.clone();
    l4.min_storage_offset_align = 4;
    let v = linear_kernel([606, 3072, 1024], DType::F16, Some(s), None, &l4, &none());
    assert_eq!(v.spec[11], 0);
    // Workgroup scope for large f32 and f16 weights only.
    for w in [DType::F32, DType::F16] {
        let cm2 = k([4096, 4096], w, Some(s), Some(c2));
        assert_eq!(cm2.shader, Shader::LinearCm2);
        let code = float_dtype_code(w);
        assert_eq!(cm2.spec, [256, 128, 128, 32, 0, 0, code, 1].to_vec());
        assert_eq!((cm2.bm, cm2.bn), (128, 128));
        assert!(cm2.x16, "x as f16 by default");
        let f32x = Forced {
            cm2_x: Some("f32".into()),
            ..none()
        };
        let v = linear_kernel([4096, 4096, 4096], w, Some(s), Some(c2), &l, &f32x);
        assert_eq!((v.shader, v.spec[7], v.x16), (Shader::LinearCm2, 0, false));
    }
    for w in [DType::BF16, DType::Q8_0] {
        let v = k([4096, 4096], w, Some(s), Some(c2));
        assert_eq!(v.shader, COOP_FIXED[0].shader, "{w:?}");
    }
    assert_eq!(
        k([606, 3072], DType::F16, Some(s), Some(c2)).shader,
        COOP_FIXED[0].shader
    );
    // A cooperative-matrix shape no kernel fits: the strict GEMM.
    let mut tiny = limits(1024, 8192);
    tiny.subgroup_size = 32;
    let v = linear_kernel(
        [4096, 4096, 1024],
        DType::F16,
        Some(s),
        Some(c2),
        &tiny,
        &none(),
    );
    assert_eq!(v.shader, Shader::Linear);
}

#[test]
fn skinny_tiles_follow_the_rows_the_columns_and_the_device() {
    let h200 = h200();
    let lavapipe = limits(1024, 32768);
    let t = |m, n, l: &Limits| skinny_tile(m, n, l, &none());
    let tile = |wg, mmax, nc| Some(SkinnyTile { wg, mmax, nc });
    // Rows per block: m rounded up to a power of two, at most 16.
    assert_eq!(t(1, 4096, &h200), tile(128, 1, 4));
    assert_eq!(t(7, 4096, &h200), tile(128, 8, 4));
    assert_eq!(t(16, 4096, &h200), tile(128, 16, 4));
    assert_eq!(t(64, 14336, &h200), tile(128, 16, 4));
    // Columns per workgroup: 4 while n / 4 gives 132 workgroups, else 2, else 1.
    assert_eq!(t(8, 525, &h200), tile(128, 8, 4));
    assert_eq!(t(8, 524, &h200), tile(128, 8, 2));
    assert_eq!(t(8, 263, &h200), tile(128, 8, 2));
    assert_eq!(t(8, 262, &h200), tile(128, 8, 1));
    // 128 invocations of 16 x 4 partials (33 KiB) exceed lavapipe's 32 KiB: 64.
    assert_eq!(t(64, 4096, &lavapipe), tile(64, 16, 4));
    assert_eq!(t(8, 4096, &lavapipe), tile(128, 8, 4));
    // 32-invocation workgroups where 64 do not fit; none below that.
    assert_eq!(t(16, 4096, &limits(32, 32768)), tile(32, 16, 4));
    assert_eq!(t(16, 4096, &limits(16, 32768)), None);
    assert_eq!(t(16, 4096, &limits(1024, 1024)), None);
    for (m, n) in [(1, 1), (64, 1024), (33, 14336)] {
        for l in [&h200, &lavapipe] {
            let s = t(m, n, l).unwrap();
            assert!(
                s.fits(l) && s.shared_bytes() <= l.max_shared_memory,
                "{s:?}"
            );
        }
    }
}

#[test]
fn a_forced_skinny_tile_wins_only_when_it_fits() {
    let l = limits(1024, 32768);
    let f = |v: &str| Forced {
        skinny_tile: Some(v.into()),
        ..none()
    };
    let default = skinny_tile(16, 4096, &l, &none());
    let t = |v: &str| skinny_tile(16, 4096, &l, &f(v));
    assert_eq!(
        t("256x2x8"),
        Some(SkinnyTile {
            wg: 256,
            mmax: 2,
            nc: 8
        })
    );
    // Malformed, a zero, more than 64 accumulators, or more shared memory than 32 KiB.
    for bad in [
        "",
        "128x8",
        "128x8x4x1",
        "0x8x4",
        "128x0x4",
        "64x16x8",
        "256x16x4",
    ] {
        assert_eq!(t(bad), default, "{bad:?}");
    }
}

#[test]
fn skinny_kernel_for_few_rows_only() {
    let s = CoopMatShape::f16_16x16x16();
    let l = h200();
    let lavapipe = limits(1024, 32768);
    let k = |m, coop, l: &Limits, f: &Forced| {
        linear_kernel([m, 4096, 1024], DType::F32, coop, None, l, f)
    };
    let skinny = Shader::LinearSkinny;
    // Strict: up to 32 rows; Kimodo's 404 and 606 rows stay on the tiled GEMM.
    for m in [1, 2, 7, 16, 32] {
        assert_eq!(k(m, None, &l, &none()).shader, skinny, "{m}");
        assert_eq!(k(m, None, &lavapipe, &none()).shader, skinny, "{m}");
    }
    for m in [33, 64, 404, 606] {
        assert_eq!(k(m, None, &l, &none()).shader, Shader::Linear, "{m}");
    }
    // x over SKINNY_MAX_X elements (read by every workgroup): tiled, even for few rows;
    // one row of a 14336-wide input is still skinny.
    let wide = |m, kk| linear_kernel([m, 4096, kk], DType::BF16, None, None, &l, &none());
    assert_eq!(wide(32, 4096).shader, Shader::Linear);
    assert_eq!(wide(8, 4096).shader, skinny);
    assert_eq!(wide(16, 4096).shader, Shader::Linear);
    assert_eq!(wide(1, 14336).shader, skinny);
    assert_eq!(wide(3, 14336).shader, Shader::Linear);
    // Fast mode with cooperative matrices: up to 16 rows.
    assert_eq!(k(16, Some(s), &l, &none()).shader, skinny);
    assert_eq!(k(17, Some(s), &l, &none()).shader, COOP_FIXED[1].shader);
    // The constants: workgroup, rows per block, columns, W_DTYPE, VEC_OK; one workgroup per
    // 4 columns for every row.
    let v = linear_kernel([7, 4096, 1024], DType::Q8_0, None, None, &l, &none());
    assert_eq!(v.spec, [128, 8, 4, 3, 1].to_vec());
    assert_eq!((v.bm, v.bn), (0, 4));
    let mut l4 = l.clone();
    l4.min_storage_offset_align = 4;
    let v = linear_kernel([7, 4096, 1024], DType::BF16, Some(s), None, &l4, &none());
    assert_eq!(v.spec, [128, 8, 4, 2, 0].to_vec());
    // KINEMA_VK_LINEAR overrides the row threshold either way; other values do not.
    let forced = |v: &str| Forced {
        linear: Some(v.into()),
        ..none()
    };
    assert_eq!(k(7, None, &l, &forced("tiled")).shader, Shader::Linear);
    assert_eq!(
        k(7, Some(s), &l, &forced("tiled")).shader,
        COOP_FIXED[1].shader
    );
    assert_eq!(k(606, None, &l, &forced("skinny")).shader, skinny);
    assert_eq!(k(606, Some(s), &l, &forced("skinny")).shader, skinny);
    assert_eq!(k(7, None, &l, &forced("fast")).shader, skinny);
    assert_eq!(k(606, None, &l, &forced("fast")).shader, Shader::Linear);
    // No skinny tile fits the device: the tiled GEMM.
    assert_eq!(
        k(7, None, &limits(16, 32768), &none()).shader,
        Shader::Linear
    );
}

#[test]
fn split_kernels_follow_dtype_rows_and_workgroups() {
    let l = h200();
    let c2 = h200_coopmat2();
    let k = |[m, n, kk]: [usize; 3], w| split_kernel([m, n, kk], w, &c2, &l, &none());
    let tile = |v: &LinearKernel| (v.bm, v.bn, v.spec[0]);
    // f32 and f16 weights; SPLIT (constant 8) set, x's parts written as f16 first (X_DTYPE
    // 1), or split in the GEMM when KINEMA_VK_CM2_X=f32 says so.
    let f32x = Forced {
        cm2_x: Some("f32".into()),
        ..none()
    };
    for w in [DType::F32, DType::F16] {
        let v = k([4096, 4096, 4096], w).unwrap();
        assert_eq!(v.shader, Shader::LinearCm2);
        let code = float_dtype_code(w);
        assert_eq!(v.spec, [128, 64, 128, 32, 0, 0, code, 1, 1].to_vec());
        assert!(v.x16 && v.split);
        let v = split_kernel([4096, 4096, 4096], w, &c2, &l, &f32x).unwrap();
        assert_eq!((v.spec[7], v.x16, v.split), (0, false, true));
    }
    // bf16 and q8_0 weights stay strict.
    for w in [DType::BF16, DType::Q8_0] {
        assert_eq!(k([4096, 4096, 4096], w), None, "{w:?}");
    }
    // Few rows (the streaming and skinny kernels' shapes) stay strict.
    assert_eq!(k([32, 4096, 4096], DType::F32), None);
    assert_eq!(k([1, 1024, 1024], DType::F32), None);
    assert!(k([65, 4096, 4096], DType::F32).is_some());
    // 64 x 64 up to 396 of them, else 64 x 128: 404 x 3072 is 7 x 48 = 336, 606 x 3072 is
    // 10 x 48 = 480.
    assert_eq!(
        tile(&k([404, 3072, 1024], DType::F32).unwrap()),
        (64, 64, 128)
    );
    assert_eq!(
        tile(&k([606, 2048, 1024], DType::F32).unwrap()),
        (64, 64, 128)
    );
    assert_eq!(
        tile(&k([606, 3072, 1024], DType::F32).unwrap()),
        (64, 128, 128)
    );
    // A forced tile wins when the device fits it, and is ignored when it does not.
    let forced = |v: &str| Forced {
        cm2_tile: Some(v.into()),
        ..none()
    };
    let f = forced("32x64x16x64");
    let v = split_kernel([4096, 4096, 4096], DType::F32, &c2, &l, &f).unwrap();
    assert_eq!((v.bm, v.bn, v.spec[3], v.spec[0]), (32, 64, 16, 64));
    let f = forced("128x128x32x512");
    let v = split_kernel([4096, 4096, 4096], DType::F32, &c2, &l, &f).unwrap();
    assert_eq!(tile(&v), (64, 128, 128));
    // A device whose workgroup-scope matrices allow fewer invocations than the tile: strict.
    let small = Coopmat2 {
        max_workgroup_size: 64,
        reductions: false,
    };
    assert_eq!(
        split_kernel([4096, 4096, 4096], DType::F32, &small, &l, &none()),
        None
    );
}
