//! The upstream data beside the checkout (`../shared/data/upstream/`, which stays out of our
//! history). Include it from an integration test with
//! `#[path = "common/shared_data.rs"] mod shared_data;`.

use std::path::PathBuf;

/// `../shared/data/upstream/<rel>` when it is a folder, else `None` with a printed reason so
/// the test skips. CI has `../shared` beside the checkout and sets `KINEMA_REQUIRE_SHARED=1`,
/// so there a missing folder fails instead of skipping.
pub fn upstream_dir(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/upstream")
        .join(rel);
    if p.is_dir() {
        return Some(p);
    }
    let required = std::env::var("KINEMA_REQUIRE_SHARED").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "KINEMA_REQUIRE_SHARED=1 but {} is missing",
        p.display()
    );
    println!("skipping: {} is missing", p.display());
    None
}
