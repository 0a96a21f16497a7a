//! MotionBricks through the host API: load a model, ask for a plan that walks to a keyframe,
//! with argmax and with seeded Gumbel sampling.
//!
//! ```sh
//! cargo run --example tiny_models -- /tmp/kinema-tiny
//! cargo run --example motionbricks -- /tmp/kinema-tiny/motionbricks-tiny.gguf
//! ```

use kinema::{Draws, Engine, EngineOptions, MotionBricks, Sampling};

fn main() -> kinema::Result<()> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: motionbricks MODEL.gguf");
        std::process::exit(2);
    };
    let engine = Engine::new(EngineOptions::default())?;
    let mb = MotionBricks::load(&engine, &path)?;

    // One plan: the root at the origin now and 1.5 m ahead at the last keyframe; the model
    // chooses the length.
    let mut request = mb.request(1)?;
    let keyframes = 2 * mb.config().frames_per_token();
    let mut root = vec![0.0f32; keyframes * 5];
    root[(keyframes - 1) * 5] = 1.5;
    let mut given = vec![false; keyframes];
    given[0] = true;
    given[keyframes - 1] = true;
    request.set_floats("global_root_values", &root)?;
    request.set_flags("has_global_root_values", &given)?;

    for (sampling, draws) in [
        (Sampling::Argmax, Draws::Seed(0)),
        (Sampling::Gumbel, Draws::Seed(7)),
    ] {
        request.sampling = sampling;
        request.draws = draws;
        let plan = mb.plan(&request)?;
        let frames = plan.num_tokens()[0] as usize * mb.config().frames_per_token();
        let q = &plan.qpos()[(frames - 1) * 36..][..3];
        println!(
            "{sampling}: {} tokens ({frames} frames); first tokens {:?}; the root ends at \
             ({:.3}, {:.3}, {:.3})",
            plan.num_tokens()[0],
            &plan.pose_tokens()[..plan.token_shape().1],
            q[0],
            q[1],
            q[2]
        );
    }
    Ok(())
}
