//! The output plan of a run: every file a command will write, checked together before any
//! work, then written to temporaries and renamed into place together once the whole run has
//! succeeded (`kinema generate`: the npz, its JSON sidecar and the GLB; `kinema convert`: the
//! GGUF).
//!
//! [`OutputPlan::check`] refuses, before minutes of sampling or conversion:
//! - two outputs that name the same file (`-o x.json`, whose sidecar is `x.json` too);
//! - an output that names one of the run's inputs (`convert kimodo c -o c/model.safetensors`),
//!   compared by device and inode, so links and `..` do not hide it;
//! - an output that exists and is not a regular file (a directory, a character device such as
//!   `/dev/null`, a FIFO, a socket): kinema replaces regular files only;
//! - an output whose directory is missing or does not accept a new file.
//!
//! The same checks run on inputs that exist: an input that is not a regular file (a directory,
//! `/dev/zero`) is refused with its flag named, instead of an operating-system error later.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::formats::{AtomicSet, kind_of, probe_writable};
use crate::{Error, Result};

/// One planned file: its path and what names it on the command line (`--output`, `--glb`,
/// `the JSON sidecar`).
#[derive(Clone, Debug)]
struct Entry {
    path: PathBuf,
    what: String,
}

/// The inputs and outputs of one run. Build it with [`OutputPlan::input`] and
/// [`OutputPlan::output`], then [`OutputPlan::check`] it before any work.
#[derive(Clone, Debug, Default)]
pub struct OutputPlan {
    inputs: Vec<Entry>,
    outputs: Vec<Entry>,
}

/// A checked plan: write each output with [`Outputs::write`] once the run has its results,
/// then [`Outputs::commit`] them together. Dropped without a commit, it removes what it
/// staged and leaves every destination as it was.
#[derive(Debug)]
pub struct Outputs {
    planned: Vec<Entry>,
    set: AtomicSet,
}

/// A file's identity on disk: device and inode where the platform has them, else its
/// canonical path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    Path(PathBuf),
}

#[cfg(unix)]
fn file_id(_path: &Path, meta: &fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    FileId::Inode(meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn file_id(path: &Path, _meta: &fs::Metadata) -> FileId {
    FileId::Path(fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// The directory a path lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn io_err(path: &Path, kind: io::ErrorKind, msg: String) -> Error {
    Error::io(path, io::Error::new(kind, msg))
}

impl OutputPlan {
    /// An empty plan.
    pub fn new() -> OutputPlan {
        OutputPlan::default()
    }

    /// A file the run reads, named by `what` (`--model`). If it exists it must be a regular
    /// file, and no output may name it. A missing input is left to the reader's own error.
    pub fn input(&mut self, path: &Path, what: &str) -> &mut OutputPlan {
        self.inputs.push(Entry {
            path: path.to_path_buf(),
            what: what.to_string(),
        });
        self
    }

    /// A file the run writes, named by `what` (`--output`, `the JSON sidecar`).
    pub fn output(&mut self, path: &Path, what: &str) -> &mut OutputPlan {
        self.outputs.push(Entry {
            path: path.to_path_buf(),
            what: what.to_string(),
        });
        self
    }

    /// Checks every input and output (see the module documentation); nothing is written
    /// except an empty probe file created and removed in each output directory.
    pub fn check(&self) -> Result<Outputs> {
        let mut seen: HashMap<FileId, &Entry> = HashMap::new();
        for e in &self.inputs {
            let meta = match fs::metadata(&e.path) {
                Ok(m) => m,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(Error::io(&e.path, err)),
            };
            if !meta.file_type().is_file() {
                return Err(io_err(
                    &e.path,
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} names {}, not a file to read",
                        e.what,
                        kind_of(meta.file_type())
                    ),
                ));
            }
            seen.insert(file_id(&e.path, &meta), e);
        }
        let inputs = seen.len();
        for e in &self.outputs {
            let id = self.check_output(e)?;
            if let Some(prev) = seen.get(&id) {
                let is_input = self.inputs.iter().any(|i| std::ptr::eq(i, *prev));
                return Err(Error::InvalidArgument(if is_input {
                    format!(
                        "{} {} is the input {} {}: the run would destroy its own input; \
                         choose another output path",
                        e.what,
                        e.path.display(),
                        prev.what,
                        prev.path.display()
                    )
                } else {
                    format!(
                        "{} {} and {} {} are the same file: one would overwrite the other; \
                         choose distinct paths",
                        prev.what,
                        prev.path.display(),
                        e.what,
                        e.path.display()
                    )
                }));
            }
            seen.insert(id, e);
        }
        debug_assert_eq!(seen.len(), inputs + self.outputs.len());
        Ok(Outputs {
            planned: self.outputs.clone(),
            set: AtomicSet::new(),
        })
    }

    /// One output's checks; returns its identity for the collision check.
    fn check_output(&self, e: &Entry) -> Result<FileId> {
        let path = &e.path;
        let Some(name) = path.file_name() else {
            return Err(io_err(
                path,
                io::ErrorKind::InvalidInput,
                format!("{} does not name a file", e.what),
            ));
        };
        let existing = match fs::metadata(path) {
            Ok(m) => Some(m),
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => return Err(Error::io(path, err)),
        };
        if let Some(m) = &existing {
            let ft = m.file_type();
            if ft.is_dir() {
                return Err(io_err(
                    path,
                    io::ErrorKind::IsADirectory,
                    format!("{}: the output path is a directory", e.what),
                ));
            }
            if !ft.is_file() {
                return Err(io_err(
                    path,
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: the output path exists and is {}; kinema replaces only regular \
                         files",
                        e.what,
                        kind_of(ft)
                    ),
                ));
            }
        }
        let dir = parent_dir(path);
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(io_err(
                    path,
                    io::ErrorKind::NotADirectory,
                    format!("the output directory {} is not a directory", dir.display()),
                ));
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(io_err(
                    path,
                    io::ErrorKind::NotFound,
                    format!("the output directory {} does not exist", dir.display()),
                ));
            }
            Err(err) => return Err(Error::io(dir, err)),
        }
        probe_writable(path).map_err(|err| Error::io(path, err))?;
        Ok(match &existing {
            Some(m) => file_id(path, m),
            None => {
                let dir = fs::canonicalize(dir).map_err(|err| Error::io(dir, err))?;
                FileId::Path(dir.join(name))
            }
        })
    }
}

impl Outputs {
    /// Writes the new content of the planned output `path` to a temporary beside it; the
    /// destination changes only at [`Outputs::commit`].
    pub fn write(
        &mut self,
        path: &Path,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<()> {
        if !self.planned.iter().any(|e| e.path == path) {
            return Err(Error::InvalidArgument(format!(
                "{} is not in the run's output plan",
                path.display()
            )));
        }
        self.set.write(path, write)
    }

    /// Renames every output into place together (see [`AtomicSet::commit`]). Every planned
    /// output must have been written.
    pub fn commit(self) -> Result<()> {
        let written: Vec<&Path> = self.set.destinations().collect();
        if let Some(e) = self
            .planned
            .iter()
            .find(|e| !written.contains(&e.path.as_path()))
        {
            return Err(Error::InvalidArgument(format!(
                "{} {} was planned but not written",
                e.what,
                e.path.display()
            )));
        }
        self.set.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(plan: &OutputPlan) -> String {
        plan.check().unwrap_err().to_string()
    }

    #[test]
    fn refuses_collisions_special_files_and_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let input = d.join("in.bin");
        fs::write(&input, b"input").unwrap();
        let out = d.join("out.npz");

        let mut p = OutputPlan::new();
        p.input(&input, "--model")
            .output(&out, "--output")
            .output(&d.join("sub/../out.npz"), "--glb");
        // `sub` does not exist, so the second path has no directory.
        assert!(err(&p).contains("does not exist"), "{}", err(&p));
        fs::create_dir(d.join("sub")).unwrap();
        let e = err(&p);
        assert!(e.contains("--output") && e.contains("--glb") && e.contains("same file"));

        let mut p = OutputPlan::new();
        p.input(&input, "--model")
            .output(&d.join("sub/../in.bin"), "--output");
        let e = err(&p);
        assert!(
            e.contains("destroy its own input") && e.contains("--model"),
            "{e}"
        );
        // A hard link is the same file under another name.
        fs::hard_link(&input, d.join("link.bin")).unwrap();
        let mut p = OutputPlan::new();
        p.input(&input, "--model")
            .output(&d.join("link.bin"), "--output");
        assert!(err(&p).contains("destroy its own input"));

        let mut p = OutputPlan::new();
        p.output(d, "--output");
        assert!(err(&p).contains("is a directory"));
        let mut p = OutputPlan::new();
        p.output(Path::new("/dev/null"), "--output");
        assert!(err(&p).contains("character device"), "{}", err(&p));
        let mut p = OutputPlan::new();
        p.input(Path::new("/dev/zero"), "--embedding");
        assert!(err(&p).contains("--embedding names a character device"));
        let mut p = OutputPlan::new();
        p.input(d, "--model");
        assert!(err(&p).contains("--model names a directory"));

        // A good plan writes nothing until the commit, then everything.
        fs::write(&out, b"old").unwrap();
        let mut p = OutputPlan::new();
        p.input(&input, "--model")
            .output(&out, "--output")
            .output(&d.join("out.json"), "the JSON sidecar");
        let mut o = p.check().unwrap();
        o.write(&out, |w| w.write_all(b"new")).unwrap();
        assert!(o.write(&input, |w| w.write_all(b"x")).is_err());
        assert_eq!(fs::read(&out).unwrap(), b"old");
        let mut o2 = p.check().unwrap();
        o2.write(&out, |w| w.write_all(b"new")).unwrap();
        assert!(o2.commit().unwrap_err().to_string().contains("sidecar"));
        assert_eq!(fs::read(&out).unwrap(), b"old");
        o.write(&d.join("out.json"), |w| w.write_all(b"{}"))
            .unwrap();
        o.commit().unwrap();
        assert_eq!(fs::read(&out).unwrap(), b"new");
        assert_eq!(fs::read(d.join("out.json")).unwrap(), b"{}");
    }
}
