//! Crash-safe file output: write a temporary file beside the destination, flush it to disk,
//! then rename it over the destination, so a reader (or a crash) never sees a partial file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// Write `path` atomically: `write` fills a buffered temporary file in the same directory,
/// which is then fsynced and renamed onto `path` (replacing any existing file). On any error
/// the temporary file is removed and `path` is left as it was. Errors name `path`.
pub fn write_atomic(
    path: impl AsRef<Path>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let path = path.as_ref();
    let (tmp_path, file) = create_temp(path).map_err(|e| Error::io(path, e))?;
    let mut guard = RemoveOnDrop(Some(tmp_path.clone()));
    fill(file, write)
        .and_then(|()| fs::rename(&tmp_path, path))
        .map_err(|e| Error::io(path, e))?;
    guard.0 = None;
    sync_dir(path);
    Ok(())
}

/// Removes the temporary file unless disarmed, also when the writer closure panics.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            // The write already failed; a leftover temporary file is the lesser problem, so
            // a failure to remove it is not reported over the original error.
            let _ = fs::remove_file(p);
        }
    }
}

fn fill(file: File, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, file);
    write(&mut w)?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()
}

/// Create `.<name>.<pid>.<n>.tmp` beside `path` with `create_new`, so two writers never share
/// a temporary file.
fn create_temp(path: &Path) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file")
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last_err = None;
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.{n}{nanos:x}.tmp", std::process::id()));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

/// Make the rename durable where the platform allows syncing a directory. Best effort: the
/// file itself is already complete and in place.
fn sync_dir(path: &Path) {
    #[cfg(unix)]
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_nothing_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        write_atomic(&p, |w| w.write_all(b"first")).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"first");
        write_atomic(&p, |w| w.write_all(b"second")).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second");
        let err = write_atomic(&p, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("boom"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        assert_eq!(fs::read(&p).unwrap(), b"second");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "a temporary file was left behind");
        let missing = dir.path().join("no/such/dir/x");
        assert!(write_atomic(&missing, |w| w.write_all(b"x")).is_err());
    }
}
