//! Kimodo's exports and imports: BVH, MuJoCo CSV, AMASS npz and the skinned GLB against fixtures
//! from the real upstream exporters (`reference/capture_kimodo_exports.py`), write -> parse
//! round trips, the 16 shipped demo clips read back and converted to every format their
//! skeleton allows, and `kinema convert motion` end to end.

use std::path::{Path, PathBuf};

#[path = "common/shared_data.rs"]
mod shared_data;

#[path = "common/kimodo_fixture.rs"]
mod kimodo_fixture;

use kinema::formats::{NpzReader, npy};
use kinema::models::kimodo::export::bvh::{self, SomaBvhRest, change_tpose};
use kinema::models::kimodo::export::rot::{max_rotation_distance, rotation_distance};
use kinema::models::kimodo::export::{Exports, Format, amass, csv, glb_skinned};
use kinema::models::kimodo::import::{self, Imported};
use kinema::models::kimodo::{Motion, Skeleton, SkeletonKind};

/// Rotation angle (radians, between the nearest rotations: f32 matrices down SOMA's long chains
/// are orthonormal only to ~1e-5) and metres after a write -> parse round trip through six
/// decimals of degrees and centimetres.
const ROUNDTRIP_TOL: f32 = 1e-5;
/// Against upstream's f32 torch results: same formulas, different summation order and libm
/// (atan2, sqrt) in the last bits. Measured maxima are printed by each test.
const PARITY_TOL: f32 = 2e-6;

fn fixture(name: &str) -> npy::NpyArray {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kimodo/exports")
        .join(name);
    npy::read_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The 16 shipped clips: `(name, imported motion)`.
fn clips() -> Vec<(String, Imported)> {
    let Some(dir) = shared_data::upstream_dir("kimodo/assets/demo/examples") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for model in ["kimodo-soma-rp", "kimodo-g1-rp"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir.join(model))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for d in names {
            let m = import::read_motion(&d.join("motion.npz")).unwrap();
            out.push((
                format!("{model}/{}", d.file_name().unwrap().to_string_lossy()),
                m,
            ));
        }
    }
    assert_eq!(out.len(), 16);
    out
}

fn skin_path() -> Option<PathBuf> {
    shared_data::upstream_dir("kimodo/assets/skeletons/somaskel77")
        .map(|d| d.join("skin_standard.npz"))
}

#[test]
fn demo_clips_import_with_their_joints() {
    for (name, m) in clips() {
        let x = &m.motion;
        // The demo npz holds posed_joints and global_rot_mats: FK of the derived locals at the
        // derived roots must give the stored joints back (kimodo.md §6 item 1: <= 1.6e-6 m).
        let sk = Skeleton::load(x.skeleton).unwrap();
        let (_, posed) = sk
            .fk(&x.local_rot_mats, &x.root_positions, x.frames)
            .unwrap();
        let d = max_diff(&posed, &x.posed_joints);
        println!(
            "{name}: {} frames of {}, FK vs stored {d:.2e} m",
            x.frames,
            x.skeleton.name()
        );
        assert!(d <= 1e-5, "{name}: {d}");
        assert!(
            m.present.foot_contacts && !m.present.smooth_root_pos && !m.present.global_root_heading
        );
        assert!(matches!(
            x.skeleton,
            SkeletonKind::Soma30 | SkeletonKind::G1
        ));
    }
}

#[test]
fn bvh_rotations_match_upstream_from_standard_tpose() {
    let Some((_, clip)) = clips().into_iter().find(|(n, _)| n.contains("soma-rp/01")) else {
        return;
    };
    let want = fixture("soma_bvh_locals.npy");
    let frames = want.shape[0];
    let m77 = bvh::soma77_of(&clip.motion).unwrap();
    let sk = Skeleton::load(SkeletonKind::Soma77).unwrap();
    let rest = SomaBvhRest::load().unwrap();
    let got = change_tpose(
        &sk,
        &m77.local_rot_mats[..frames * 77 * 9],
        frames,
        &rest.tpose_offsets,
        true,
    )
    .unwrap();
    let d = max_diff(&got, &want.to_f32().unwrap());
    println!("from_standard_tpose vs upstream: {d:.2e}");
    assert!(d <= PARITY_TOL, "{d}");
}

#[test]
fn bvh_layout_and_roundtrip_on_every_soma_clip() {
    for (name, clip) in clips()
        .into_iter()
        .filter(|(_, c)| c.motion.skeleton == SkeletonKind::Soma30)
    {
        let want = bvh::soma77_of(&clip.motion).unwrap();
        for standard in [false, true] {
            let text = bvh::bvh_text(&clip.motion, 30.0, standard).unwrap();
            let parsed = bvh::parse(&text).unwrap();
            // Upstream's layout: the Root wrapper, Hips with 6 channels, 76 joints with 3.
            assert_eq!(parsed.joints.len(), 78);
            assert_eq!(parsed.joints[0].name, "Root");
            assert_eq!(parsed.joints[1].name, "Hips");
            assert_eq!(parsed.joints[1].channels.len(), 6);
            assert!(parsed.joints[2..].iter().all(|j| j.channels.len() == 3));
            assert_eq!(parsed.channels_per_frame, 6 + 6 + 76 * 3);
            assert_eq!(parsed.frames, clip.motion.frames);
            assert!((parsed.frame_time - 1.0 / 30.0).abs() < 1e-12);
            if !standard {
                // Offsets are bvh_joints.p differences in centimetres.
                let rest = SomaBvhRest::load().unwrap();
                let sk = Skeleton::load(SkeletonKind::Soma77).unwrap();
                let j = sk.joint_index("LeftArm").unwrap();
                let p = sk.parents[j].unwrap();
                let bj = parsed.joints.iter().find(|b| b.name == "LeftArm").unwrap();
                for k in 0..3 {
                    let cm = (rest.bvh_joints[j][k] - rest.bvh_joints[p][k]) * 100.0;
                    assert!(
                        (bj.offset[k] - cm).abs() <= 5e-7,
                        "{} vs {cm}",
                        bj.offset[k]
                    );
                }
            }
            // What the file holds: the rotations given to the writer, read back from the text.
            let written = if standard {
                want.local_rot_mats.clone()
            } else {
                let sk = Skeleton::load(SkeletonKind::Soma77).unwrap();
                let rest = SomaBvhRest::load().unwrap();
                change_tpose(
                    &sk,
                    &want.local_rot_mats,
                    want.frames,
                    &rest.tpose_offsets,
                    true,
                )
                .unwrap()
            };
            let sk = Skeleton::load(SkeletonKind::Soma77).unwrap();
            let mut df = 0.0f64;
            for t in 0..parsed.frames {
                for (j, name) in sk.names.iter().enumerate() {
                    let bj = parsed.joints.iter().position(|b| &b.name == name).unwrap();
                    let r = parsed.rotation(t, bj);
                    let w: [f64; 9] =
                        std::array::from_fn(|k| f64::from(written[(t * 77 + j) * 9 + k]));
                    df = df.max(rotation_distance(&r, &w));
                }
            }
            assert!(
                df <= f64::from(ROUNDTRIP_TOL),
                "{name}: file rotations {df}"
            );
            let back = import::motion_from_bvh(&parsed).unwrap();
            assert_eq!(back.bvh_rest, !standard);
            let dr =
                max_rotation_distance(&back.motion.local_rot_mats, &want.local_rot_mats) as f32;
            let dp = max_diff(&back.motion.root_positions, &want.root_positions);
            println!(
                "{name} standard_tpose={standard}: file rotations {df:.2e}, back in Kimodo's rest \
                 {dr:.2e}, root {dp:.2e} m"
            );
            assert!(
                dr <= ROUNDTRIP_TOL && dp <= ROUNDTRIP_TOL,
                "{name}: {dr} {dp}"
            );
        }
    }
}

#[test]
fn bvh_parser_refuses_bad_files() {
    let msg = |t: &str| bvh::parse(t).unwrap_err().to_string();
    assert!(msg("").contains("HIERARCHY"));
    assert!(msg("HIERARCHY ROOT a { OFFSET 0 0 0 CHANNELS 7").contains("at most 6"));
    assert!(msg("HIERARCHY ROOT a { OFFSET 0 0 x").contains("not a finite number"));
    assert!(
        msg("HIERARCHY ROOT a { OFFSET 0 0 0 CHANNELS 1 Wrotation").contains("unknown channel")
    );
    let head = "HIERARCHY ROOT a { OFFSET 0 0 0 CHANNELS 1 Xrotation } MOTION Frames: ";
    assert!(msg(&format!("{head}2 Frame Time: 0.1 1")).contains("ends"));
    assert!(msg(&format!("{head}1 Frame Time: 0.1 1 2")).contains("after the last"));
    assert!(msg(&format!("{head}99999999999 Frame Time: 0.1 1")).contains("cannot fit"));
    assert!(msg(&format!("{head}1 Frame Time: 0 1")).contains("not positive"));
    let ok = bvh::parse(&format!("{head}1 Frame Time: 0.1 90")).unwrap();
    let r = ok.rotation(0, 0);
    assert!(
        (r[5] + 1.0).abs() < 1e-12 && (r[7] - 1.0).abs() < 1e-12,
        "{r:?}"
    );
    // Deep nesting is walked without recursion.
    let deep = "JOINT j { OFFSET 0 0 0 CHANNELS 0 ".repeat(5000);
    assert!(
        msg(&format!(
            "HIERARCHY ROOT a {{ OFFSET 0 0 0 CHANNELS 0 {deep}"
        ))
        .contains("joints")
    );
    // A non-SOMA BVH is refused by the importer, naming the joint.
    let e = import::motion_from_bvh(&ok).unwrap_err().to_string();
    assert!(e.contains("'Hips'"), "{e}");
}

#[test]
fn csv_qpos_matches_upstream_on_g1_clip() {
    let Some((_, clip)) = clips().into_iter().find(|(n, _)| n.contains("g1-rp/01")) else {
        return;
    };
    let want = fixture("g1_qpos.npy");
    let frames = want.shape[0];
    let mut m = clip.motion.clone();
    m.frames = frames;
    m.local_rot_mats.truncate(frames * 34 * 9);
    m.root_positions.truncate(frames * 3);
    let got = csv::qpos(&m).unwrap();
    let d = max_diff(&got, &want.to_f32().unwrap());
    println!("qpos vs upstream: {d:.2e} over {frames} frames");
    assert!(d <= PARITY_TOL, "{d}");
    let text = csv::csv_text(&m).unwrap();
    assert_eq!(text.lines().count(), frames);
    assert_eq!(text.lines().next().unwrap().split(',').count(), 36);
    assert_eq!(csv::parse_csv(&text).unwrap(), got);
    let e = csv::qpos(&bvh::soma77_of(&clips()[0].1.motion).unwrap()).unwrap_err();
    assert!(e.to_string().contains("G1"));
}

fn smplx_motion() -> Motion {
    let l = fixture("smplx_in_local_rot_mats.npy");
    let r = fixture("smplx_in_root_positions.npy");
    let frames = l.shape[0];
    let sk = Skeleton::load(SkeletonKind::Smplx22).unwrap();
    let local = l.to_f32().unwrap();
    let root = r.to_f32().unwrap();
    let (g, p) = sk.fk(&local, &root, frames).unwrap();
    Motion {
        skeleton: SkeletonKind::Smplx22,
        frames,
        local_rot_mats: local,
        global_rot_mats: g,
        posed_joints: p,
        root_positions: root,
        smooth_root_pos: vec![0.0; frames * 3],
        foot_contacts: vec![false; frames * 4],
        global_root_heading: vec![0.0; frames * 2],
    }
}

#[test]
fn amass_matches_upstream() {
    let m = smplx_motion();
    let (trans, root, body) = amass::amass_parameters(&m).unwrap();
    let dt = max_diff(&trans, &fixture("amass_trans.npy").to_f32().unwrap());
    let dr = max_diff(&root, &fixture("amass_root_orient.npy").to_f32().unwrap());
    let db = max_diff(&body, &fixture("amass_pose_body.npy").to_f32().unwrap());
    println!("amass vs upstream: trans {dt:.2e}, root_orient {dr:.2e}, pose_body {db:.2e}");
    assert!(dt == 0.0, "trans is exact arithmetic: {dt}");
    assert!(dr <= PARITY_TOL && db <= PARITY_TOL, "{dr} {db}");
    let mut bytes = Vec::new();
    amass::amass_npz(&m, 30.0)
        .unwrap()
        .write_to(&mut bytes)
        .unwrap();
    let npz = NpzReader::from_bytes(bytes).unwrap();
    assert_eq!(
        npz.names(),
        [
            "trans",
            "root_orient",
            "pose_body",
            "gender",
            "surface_model_type",
            "betas",
            "num_betas",
            "mocap_frame_rate",
            "pose_jaw",
            "pose_eye",
            "pose_hand",
            "mocap_time_length"
        ]
    );
    assert_eq!(
        npz.array("gender").unwrap().to_strings().unwrap(),
        ["neutral"]
    );
    assert_eq!(
        npz.array("surface_model_type")
            .unwrap()
            .to_strings()
            .unwrap(),
        ["smplx"]
    );
    assert_eq!(npz.array("num_betas").unwrap().to_i64().unwrap(), [16]);
    assert_eq!(npz.array("pose_hand").unwrap().shape, [m.frames, 90]);
    assert_eq!(
        npz.array("mocap_time_length").unwrap().to_f64().unwrap(),
        [m.frames as f64 / 30.0]
    );
}

/// Every clip in every format its skeleton allows, through the same path as the CLI (each
/// render re-reads its bytes), plus the npz round trip of the imported motion.
#[test]
fn demo_clips_convert_to_every_format() {
    let skin = skin_path().filter(|p| p.is_file());
    for (name, clip) in clips() {
        let kind = clip.motion.skeleton;
        let mut files = vec![(Format::Glb, PathBuf::from("x.glb"), "--glb".to_string())];
        if kind == SkeletonKind::G1 {
            files.push((Format::Csv, "x.csv".into(), "--csv".into()));
        } else {
            files.push((Format::Bvh, "x.bvh".into(), "--bvh".into()));
        }
        let ex = Exports {
            files: files.clone(),
            skin: if kind == SkeletonKind::G1 {
                None
            } else {
                skin.clone()
            },
            bvh_standard_tpose: false,
        };
        let prepared = ex.prepare(kind).unwrap();
        for (f, _, _) in &files {
            let b = prepared.render(*f, &clip.motion, 30.0).unwrap();
            println!("{name}: {} {} bytes", f.name(), b.len());
        }
        let mut b = Vec::new();
        import::imported_npz(&clip)
            .unwrap()
            .write_to(&mut b)
            .unwrap();
        let back = import::motion_from_npz(&NpzReader::from_bytes(b).unwrap(), "npz").unwrap();
        assert_eq!(back.motion.local_rot_mats, clip.motion.local_rot_mats);
        assert_eq!(back.motion.foot_contacts, clip.motion.foot_contacts);
        assert_eq!(back.present, clip.present);
        // The wrong skeleton is refused before any work, naming the flag.
        let wrong = if kind == SkeletonKind::G1 {
            Format::Bvh
        } else {
            Format::Csv
        };
        let e = Exports {
            files: vec![(wrong, "y".into(), "--y".into())],
            ..Default::default()
        };
        let msg = e.prepare(kind).err().unwrap().to_string();
        assert!(msg.contains("--y"), "{msg}");
    }
}

/// The skinned GLB of a SOMA clip: 4 normalised influences per vertex, and the reduction from
/// the skin's 8 reported. Written to `KINEMA_GLB_DIR` when set (CI's validator and three.js
/// check read it from there).
#[test]
fn skinned_glb_of_a_soma_clip() {
    let Some(skin) = skin_path() else { return };
    let Some((_, clip)) = clips().into_iter().find(|(n, _)| n.contains("soma-rp/01")) else {
        return;
    };
    let (mesh, red) = glb_skinned::load_skin(&skin).unwrap();
    println!(
        "skin: {} vertices, {} had more than 4 influences, largest dropped weight {:.4}",
        red.vertices, red.reduced_vertices, red.max_dropped_weight
    );
    assert_eq!(red.vertices, 18056);
    assert!(red.reduced_vertices > 0 && red.max_dropped_weight < 0.5);
    // Each row sums to exactly 1 in f32 (the largest weight absorbs the rounding).
    assert!(
        mesh.weights
            .chunks_exact(4)
            .all(|w| w.iter().sum::<f32>() == 1.0)
    );
    let bytes = glb_skinned::skinned_glb_bytes(&clip.motion, 30.0, &mesh).unwrap();
    import::check_glb(&bytes, &clip.motion, 30.0).unwrap();
    if let Some(dir) = std::env::var_os("KINEMA_GLB_DIR") {
        let p = Path::new(&dir).join("soma_skinned.glb");
        std::fs::write(&p, &bytes).unwrap();
        println!("wrote {}", p.display());
    }
}

#[test]
fn convert_motion_cli_writes_every_output_together() {
    let Some(dir) = shared_data::upstream_dir("kimodo/assets/demo/examples") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = |n: &str| tmp.path().join(n);
    let run = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kinema"))
            .args(["convert", "motion"])
            .args(args)
            .output()
            .unwrap()
    };
    let soma = dir.join("kimodo-soma-rp/03_full_body_keyframes/motion.npz");
    let o = run(&[
        soma.as_os_str(),
        "-o".as_ref(),
        out("a.bvh").as_os_str(),
        "--glb".as_ref(),
        out("a.glb").as_os_str(),
        "--quiet".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // BVH back to npz and GLB: the motion survives the text round trip.
    let o = run(&[
        out("a.bvh").as_os_str(),
        "-o".as_ref(),
        out("b.npz").as_os_str(),
        "--quiet".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a = import::read_motion(&out("a.bvh")).unwrap();
    let b = import::read_motion(&out("b.npz")).unwrap();
    assert_eq!(a.motion.local_rot_mats, b.motion.local_rot_mats);
    // G1 to CSV; asking for BVH on G1 fails before writing anything.
    let g1 = dir.join("kimodo-g1-rp/05_root_path/motion.npz");
    let o = run(&[
        g1.as_os_str(),
        "-o".as_ref(),
        out("g.csv").as_os_str(),
        "--quiet".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&[
        g1.as_os_str(),
        "-o".as_ref(),
        out("g2.csv").as_os_str(),
        "--bvh".as_ref(),
        out("g.bvh").as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--bvh") && err.contains("SOMA"),
        "{err}"
    );
    assert!(!out("g2.csv").exists() && !out("g.bvh").exists());
    // Two outputs naming one file are refused by the output plan.
    let o = run(&[
        soma.as_os_str(),
        "-o".as_ref(),
        out("c.glb").as_os_str(),
        "--glb".as_ref(),
        out("c.glb").as_os_str(),
    ]);
    assert!(!o.status.success());
    // An unknown extension asks for --format.
    let o = run(&[soma.as_os_str(), "-o".as_ref(), out("c.fbx").as_os_str()]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--format"));
}

/// `generate` with the extra export flags on the fixtures' small upstream checkpoints: each
/// file is the export of the motion the npz holds, and a format the model's skeleton does not
/// have is refused before any work, leaving no file.
#[test]
fn generate_writes_the_exports_of_its_motion() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let kinema = || std::process::Command::new(env!("CARGO_BIN_EXE_kinema"));
    let skin = skin_path().filter(|p| p.is_file());
    for (fx, flag, ext) in [
        ("g1", "--csv", "csv"),
        ("smplx22", "--amass", "npz"),
        ("soma30", "--bvh", "bvh"),
    ] {
        let f = kimodo_fixture::load(fx);
        let model = p(&format!("{fx}.gguf"));
        let o = kinema()
            .args(["convert", "kimodo", "--quiet"])
            .arg(f.checkpoint_dir())
            .arg("-o")
            .arg(&model)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (e, es) = f.f32("embedding");
        let emb = p(&format!("{fx}_emb.npy"));
        npy::write_file(&emb, &npy::NpyArray::from_f32(&es, &e).unwrap()).unwrap();
        let out = p(&format!("{fx}.npz"));
        let extra = p(&format!("{fx}_extra.{ext}"));
        let mut cmd = kinema();
        cmd.args([
            "generate",
            "--quiet",
            "--backend",
            "cpu",
            "--frames",
            "12",
            "--steps",
            "3",
        ])
        .arg("--model")
        .arg(&model)
        .arg("--embedding")
        .arg(&emb)
        .arg(flag)
        .arg(&extra)
        .arg("-o")
        .arg(&out);
        let glb = p(&format!("{fx}.glb"));
        if fx == "soma30"
            && let Some(s) = &skin
        {
            cmd.arg("--glb").arg(&glb).arg("--skin").arg(s);
        }
        let o = cmd.output().unwrap();
        assert!(
            o.status.success(),
            "{fx}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // The extra file is exactly the export of the motion in the npz.
        let m = import::read_motion(&out).unwrap().motion;
        let format = match fx {
            "g1" => Format::Csv,
            "smplx22" => Format::Amass,
            _ => Format::Bvh,
        };
        let ex = Exports {
            files: vec![(format, extra.clone(), flag.into())],
            skin: if fx == "soma30" { skin.clone() } else { None },
            bvh_standard_tpose: false,
        };
        let prepared = ex.prepare(m.skeleton).unwrap();
        assert_eq!(
            std::fs::read(&extra).unwrap(),
            prepared.render(format, &m, 30.0).unwrap(),
            "{fx}"
        );
        if fx == "soma30" && skin.is_some() {
            assert_eq!(
                std::fs::read(&glb).unwrap(),
                prepared.render(Format::Glb, &m, 30.0).unwrap()
            );
        }
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap();
        assert!(
            json["outputs"]
                .to_string()
                .contains(&format!("{fx}_extra.{ext}")),
            "{json}"
        );
        // A format of another skeleton: refused, naming the flag; nothing written.
        let wrong = p(&format!("{fx}_wrong.npz"));
        let bad_flag = if fx == "g1" { "--amass" } else { "--csv" };
        let o = kinema()
            .args([
                "generate",
                "--quiet",
                "--backend",
                "cpu",
                "--frames",
                "12",
                "--steps",
                "3",
            ])
            .arg("--model")
            .arg(&model)
            .arg("--embedding")
            .arg(&emb)
            .arg(bad_flag)
            .arg(p("bad.out"))
            .arg("-o")
            .arg(&wrong)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(bad_flag), "{fx}: {err}");
        assert!(!wrong.exists() && !p("bad.out").exists());
    }
}
