//! Crash-safe file output: write a temporary file beside each destination, flush it to disk,
//! then rename it over the destination, so a reader (or a crash) never sees a partial file.
//! [`AtomicSet`] does this for several files that belong together: nothing is renamed until
//! every file of the set is written, and a rename that fails puts back the files the set had
//! already replaced.
//!
//! Why not a crate: `tempfile`'s `NamedTempFile::persist` and `atomicwrites` commit one file
//! at a time; what a run needs is its whole set of outputs landing together (or not at all,
//! with the replaced files put back), which neither offers. The single-file part that they
//! share with this module (an `O_EXCL` temporary beside the destination, fsync, rename,
//! removal on error or panic) is under 40 lines here.

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
    let mut set = AtomicSet::new();
    set.write(path.as_ref(), write)?;
    set.commit()
}

/// Files written to temporaries beside their destinations and renamed over them together by
/// [`AtomicSet::commit`]. Until then no destination changes; a set dropped without a commit
/// (an error, a panic) removes its temporaries.
#[derive(Debug, Default)]
pub struct AtomicSet {
    staged: Vec<Staged>,
}

#[derive(Debug)]
struct Staged {
    dest: PathBuf,
    tmp: PathBuf,
}

impl AtomicSet {
    /// An empty set.
    pub fn new() -> AtomicSet {
        AtomicSet::default()
    }

    /// The destinations staged so far, in order.
    pub fn destinations(&self) -> impl Iterator<Item = &Path> {
        self.staged.iter().map(|s| s.dest.as_path())
    }

    /// Writes the new content of `path` into a temporary file beside it and flushes it to
    /// disk; `path` itself is untouched until [`AtomicSet::commit`]. On an error the temporary
    /// file is removed (the set's other temporaries stay until it is dropped). Errors name
    /// `path`.
    pub fn write(
        &mut self,
        path: &Path,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<()> {
        if self.staged.iter().any(|s| s.dest == path) {
            return Err(Error::InvalidArgument(format!(
                "{} is written twice in one output set",
                path.display()
            )));
        }
        let (tmp, file) = create_temp(path, "tmp").map_err(|e| Error::io(path, e))?;
        let guard = RemoveOnDrop::one(tmp.clone());
        fill(file, write).map_err(|e| Error::io(path, e))?;
        guard.disarm();
        self.staged.push(Staged {
            dest: path.to_path_buf(),
            tmp,
        });
        Ok(())
    }

    /// Renames every temporary over its destination, in the order written. When more than one
    /// file is staged, each destination that exists is first kept as a hard link beside it,
    /// so that if a later rename fails the earlier destinations get their previous content
    /// back (a destination that did not exist is removed again) and the error is returned:
    /// the set lands whole or not at all.
    pub fn commit(mut self) -> Result<()> {
        let staged = std::mem::take(&mut self.staged);
        let mut temps = RemoveOnDrop::many(staged.iter().map(|s| s.tmp.clone()));
        let mut backups: Vec<Option<PathBuf>> = Vec::with_capacity(staged.len());
        let mut backup_guard = RemoveOnDrop::many(std::iter::empty());
        if staged.len() > 1 {
            for s in &staged {
                let b = backup(&s.dest).map_err(|e| Error::io(&s.dest, e))?;
                backup_guard.0.push(b.clone());
                backups.push(b);
            }
        } else {
            backups.push(None);
        }
        for (i, s) in staged.iter().enumerate() {
            if let Err(e) = fs::rename(&s.tmp, &s.dest) {
                for (done, b) in staged[..i].iter().zip(&backups).rev() {
                    // Best effort: the original error is the one to report.
                    let _ = match b {
                        Some(b) => fs::rename(b, &done.dest),
                        None => fs::remove_file(&done.dest),
                    };
                }
                return Err(Error::io(&s.dest, e));
            }
            temps.0[i] = None;
        }
        drop(backup_guard);
        let mut dirs: Vec<&Path> = Vec::new();
        for s in &staged {
            let d = parent_dir(&s.dest);
            if !dirs.contains(&d) {
                sync_dir(d);
                dirs.push(d);
            }
        }
        Ok(())
    }
}

impl Drop for AtomicSet {
    fn drop(&mut self) {
        for s in &self.staged {
            // The run already failed; a leftover temporary file is the lesser problem, so a
            // failure to remove it is not reported over the original error.
            let _ = fs::remove_file(&s.tmp);
        }
    }
}

/// A hard link to `dest` beside it, or `None` when `dest` does not exist or the file system
/// cannot link (then that destination cannot be restored if a later rename fails).
fn backup(dest: &Path) -> io::Result<Option<PathBuf>> {
    match fs::symlink_metadata(dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    let (path, file) = create_temp(dest, "bak")?;
    drop(file);
    fs::remove_file(&path)?;
    match fs::hard_link(dest, &path) {
        Ok(()) => Ok(Some(path)),
        Err(_) => Ok(None),
    }
}

/// Removes the paths it holds unless disarmed, also when a writer closure panics.
struct RemoveOnDrop(Vec<Option<PathBuf>>);

impl RemoveOnDrop {
    fn one(p: PathBuf) -> RemoveOnDrop {
        RemoveOnDrop(vec![Some(p)])
    }

    fn many(paths: impl Iterator<Item = PathBuf>) -> RemoveOnDrop {
        RemoveOnDrop(paths.map(Some).collect())
    }

    /// Keeps the paths: returns the (first) one.
    fn disarm(mut self) -> Option<PathBuf> {
        self.0.drain(..).next().flatten()
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in self.0.iter().flatten() {
            // See `AtomicSet::drop`: cleanup after a failure is best effort.
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

/// The directory a path lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The prefix of every temporary file beside `path`: `.<name>.<pid>.`.
fn temp_prefix(path: &Path) -> Option<std::ffi::OsString> {
    let mut s = std::ffi::OsString::from(".");
    s.push(path.file_name()?);
    s.push(format!(".{}.", std::process::id()));
    Some(s)
}

/// Create `.<name>.<pid>.<n>.<ext>` beside `path` with `create_new`, so two writers never
/// share a temporary file.
fn create_temp(path: &Path, ext: &str) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = temp_prefix(path).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file")
    })?;
    let dir = parent_dir(path);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last_err = None;
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tmp_name = prefix.clone();
        tmp_name.push(format!("{n}{nanos:x}.{ext}"));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

/// Checks that a new file can be created in `path`'s directory by creating and removing an
/// empty temporary there (nothing else is touched).
pub fn probe_writable(path: &Path) -> io::Result<()> {
    let (tmp, file) = create_temp(path, "probe")?;
    drop(file);
    fs::remove_file(tmp)
}

/// Make the renames durable where the platform allows syncing a directory. Best effort: the
/// files themselves are already complete and in place.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

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
        assert_eq!(names(dir.path()), ["out.bin"], "a temporary file was left");
        let missing = dir.path().join("no/such/dir/x");
        assert!(write_atomic(&missing, |w| w.write_all(b"x")).is_err());
    }

    #[test]
    fn a_set_lands_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        fs::write(&a, b"old a").unwrap();
        // `c` is a directory: its rename fails after `a` and `b` were renamed, and both are
        // put back (`a` to its old content, `b` removed, as it did not exist).
        fs::create_dir(&c).unwrap();
        fs::write(c.join("inside"), b"x").unwrap();
        let mut set = AtomicSet::new();
        set.write(&a, |w| w.write_all(b"new a")).unwrap();
        set.write(&b, |w| w.write_all(b"new b")).unwrap();
        set.write(&c, |w| w.write_all(b"new c")).unwrap();
        assert_eq!(
            fs::read(&a).unwrap(),
            b"old a",
            "nothing lands before commit"
        );
        let err = set.commit().unwrap_err();
        assert!(err.to_string().contains('c'), "{err}");
        assert_eq!(fs::read(&a).unwrap(), b"old a");
        assert!(!b.exists());
        assert_eq!(names(dir.path()), ["a", "c"], "temporaries or backups left");

        fs::remove_dir_all(&c).unwrap();
        let mut set = AtomicSet::new();
        set.write(&a, |w| w.write_all(b"new a")).unwrap();
        set.write(&b, |w| w.write_all(b"new b")).unwrap();
        assert!(set.write(&a, |w| w.write_all(b"again")).is_err());
        set.commit().unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"new a");
        assert_eq!(fs::read(&b).unwrap(), b"new b");
        assert_eq!(names(dir.path()), ["a", "b"]);

        // A set dropped without a commit leaves the destinations and no temporaries.
        let mut set = AtomicSet::new();
        set.write(&a, |w| w.write_all(b"dropped")).unwrap();
        drop(set);
        assert_eq!(fs::read(&a).unwrap(), b"new a");
        assert_eq!(names(dir.path()), ["a", "b"]);
    }
}
