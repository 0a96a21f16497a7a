//! Kimodo through the host API: load a model, generate a motion from a text feature, write
//! the npz `kinema generate` writes.
//!
//! ```sh
//! cargo run --example tiny_models -- /tmp/kinema-tiny
//! cargo run --example kimodo -- /tmp/kinema-tiny/kimodo-soma30-tiny.gguf [OUTPUT.npz]
//! ```
//!
//! A real run passes the LLM2Vec embedding of the prompt; this example makes a synthetic text
//! feature of the model's width so that it runs on the tiny test model.

use kinema::{Engine, EngineOptions, GenerateRequest, Kimodo, Noise, Progress};

fn main() -> kinema::Result<()> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: kimodo MODEL.gguf [OUTPUT.npz]");
        std::process::exit(2);
    };
    let engine = Engine::new(EngineOptions::default())?;
    let kimodo = Kimodo::load(&engine, &path)?;
    println!("{engine:?}");

    let embedding: Vec<f32> = (0..kimodo.embedding_dim())
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let request = GenerateRequest {
        steps: 10,
        noise: Noise::Seed(42),
        ..GenerateRequest::new(embedding, 60)
    };
    let motion = kimodo.generate_with_progress(&request, &mut |stage, step, total| {
        eprint!("\r{} {step}/{total}", stage.name());
        Progress::Continue
    })?;
    eprintln!();
    let (t, j) = (motion.frames(), motion.joints());
    let last = &motion.posed_joints()[(t - 1) * j * 3..][..3];
    println!(
        "{t} frames of {} ({j} joints) at {} fps; the root ends at ({:.3}, {:.3}, {:.3}) m",
        motion.skeleton(),
        motion.fps(),
        last[0],
        last[1],
        last[2]
    );
    if let Some(out) = std::env::args().nth(2) {
        motion.write_npz(&out)?;
        println!("wrote {out}");
    }
    Ok(())
}
