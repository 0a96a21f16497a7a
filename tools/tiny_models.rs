//! Writes the tiny models the host-API examples and the C example run on (a fixture tool,
//! not an API example): `cargo run --example tiny_models -- DIR` leaves
//! `DIR/kimodo-soma30-tiny.gguf` (the Kimodo SOMA30 parity checkpoint, converted) and
//! `DIR/motionbricks-tiny.gguf` (MotionBricks at the parity fixtures' reduced widths with
//! synthetic weights) and `DIR/clips.npz` (the agent's synthetic style clips).

#[path = "../tests/common/tiny_models.rs"]
mod tiny_models;

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
        Ok((k, m, c)) => println!("{}\n{}\n{}", k.display(), m.display(), c.display()),
        Err(e) => {
            eprintln!("tiny_models: {e}");
            std::process::exit(1);
        }
    }
}
