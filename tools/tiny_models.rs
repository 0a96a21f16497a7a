//! Writes the tiny models the host-API examples and the C example run on (a fixture tool,
//! not an API example): `cargo run --example tiny_models -- DIR` leaves
//! `DIR/kimodo-soma30-tiny.gguf` (the Kimodo SOMA30 parity checkpoint, converted) and
//! `DIR/motionbricks-tiny.gguf` (MotionBricks at the parity fixtures' reduced widths with
//! synthetic weights), `DIR/llm2vec-tiny.gguf` (a seeded random bidirectional Llama whose
//! embeddings are 48 wide, the tiny Kimodo model's text-feature width) and `DIR/clips.npz`
//! (the agent's synthetic style clips), and prints their paths in that order.

#[path = "../tests/common/tiny_llama.rs"]
mod tiny_llama;
#[path = "../tests/common/tiny_models.rs"]
mod tiny_models;

/// The text model's file name in DIR.
const TEXT: &str = "llm2vec-tiny.gguf";

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: tiny_models DIR");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    let made = std::fs::create_dir_all(&dir)
        .map_err(|e| kinema::Error::io(&dir, e))
        .and_then(|()| tiny_models::write(&dir))
        .and_then(|(k, m)| Ok((k, m, tiny_models::write_clips(&dir)?)));
    match made {
        Ok((k, m, c)) => {
            let text = dir.join(TEXT);
            tiny_llama::write(
                &text,
                &tiny_llama::Spec {
                    hidden: 48,
                    ..tiny_llama::Spec::default()
                },
            );
            println!(
                "{}\n{}\n{}\n{}",
                k.display(),
                m.display(),
                text.display(),
                c.display()
            )
        }
        Err(e) => {
            eprintln!("tiny_models: {e}");
            std::process::exit(1);
        }
    }
}
