//! Output files: every file this crate writes goes through [`write_output`] —
//! chapter 9's `anatomy logits --out` and the figures of every chapter.
//! (Inputs are read by [`crate::error::read_file`], [`crate::error::read_json`] and
//! [`crate::error::open_regular`], which refuse what is not a regular file.)
//!
//! The output path decides:
//!
//! | path is                         | what happens                                            |
//! |---------------------------------|---------------------------------------------------------|
//! | absent                          | written to a temporary file beside it, renamed into place |
//! | a regular file                  | the same: replaced atomically, its permissions kept      |
//! | a character device (`/dev/null`)| written through, never replaced                          |
//! | a FIFO                          | written through if a process reads it, else refused      |
//! | a symbolic link to a device/FIFO| written through (`/dev/stdout` is one)                   |
//! | any other symbolic link         | refused: neither the link nor its target is replaced     |
//! | a directory, block device, socket | refused                                                |
//!
//! A rename never follows a symbolic link, so even a link that appears after the check is
//! replaced itself, never its target. A failed write (a full disk, `/dev/full`) is
//! [`Error::Write`] (exit code 1); a refused path is bad input (exit code 2).

use crate::error::{Error, FileProblem, Result, kind_name};
use std::fs::{File, Metadata, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

// ------------------------------------------------------------------------ output

fn file_error(path: &Path, problem: FileProblem) -> Error {
    Error::File {
        path: path.to_path_buf(),
        problem,
    }
}

fn write_error(path: &Path, source: std::io::Error) -> Error {
    Error::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes an output file with `write` (which should write everything it has; it is given a
/// buffered writer), following the table in the module documentation: a new path or a
/// regular file is replaced atomically, a device or FIFO is written through, anything else
/// is refused.
pub fn write_output(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => replace_atomically(path, None, write),
        Err(e) => Err(write_error(path, e)),
        Ok(m) if m.file_type().is_symlink() => {
            let target = std::fs::read_link(path)
                .ok()
                .map(|t| t.display().to_string());
            match std::fs::metadata(path) {
                Ok(t) if is_device_or_fifo(&t) => write_through(path, write),
                _ => Err(file_error(path, FileProblem::OutputLink { target })),
            }
        }
        Ok(m) if m.is_file() => replace_atomically(path, Some(m), write),
        Ok(m) if is_device_or_fifo(&m) => write_through(path, write),
        Ok(m) => Err(file_error(
            path,
            FileProblem::OutputKind(kind_name(m.file_type())),
        )),
    }
}

/// A character device or a FIFO: written through, never replaced.
fn is_device_or_fifo(m: &Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        t.is_char_device() || t.is_fifo()
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        false
    }
}

/// Distinguishes the temporary files of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes a temporary file beside `path` (created new, so it cannot be a link someone
/// planted), then renames it over `path`: a reader sees the old file or the new one, never
/// half of one. `old` is the file being replaced, whose permissions the new one keeps.
fn replace_atomically(
    path: &Path,
    old: Option<Metadata>,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| write_error(path, std::io::Error::other("not a file name")))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".tmp-{}-{n}", std::process::id()));
    let temp = dir.join(temp_name);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| write_error(path, e))?;
    let result = (|| {
        let mut w = std::io::BufWriter::new(file);
        write(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        if let Some(old) = &old {
            file.set_permissions(old.permissions())?;
        }
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        write_error(path, e)
    })
}

/// Writes into an existing character device or FIFO without creating, truncating or
/// replacing anything. A FIFO that nobody reads is refused instead of blocking forever.
fn write_through(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let mut opts = OpenOptions::new();
    opts.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Opening a FIFO for writing blocks until a reader comes; non-blocking, it fails
        // with ENXIO instead.
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = match opts.open(path) {
        Ok(f) => f,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(file_error(path, FileProblem::NoReader));
        }
        Err(e) => return Err(write_error(path, e)),
    };
    #[cfg(unix)]
    set_blocking(&file).map_err(|e| write_error(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    write(&mut w)
        .and_then(|()| w.flush())
        .map_err(|e| write_error(path, e))
}

/// Clears `O_NONBLOCK` on an open file, so writes wait for a slow reader instead of
/// failing with `EAGAIN`.
#[cfg(unix)]
fn set_blocking(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is a valid descriptor owned by `file`, which outlives both calls;
    // F_GETFL / F_SETFL read and set its status flags and touch no memory of ours.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("anatomy-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn outputs_replace_regular_files_and_refuse_links() {
        let d = tmp("write");
        let out = d.join("out.bin");
        write_output(&out, |w| w.write_all(b"one")).unwrap();
        write_output(&out, |w| w.write_all(b"two")).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"two");
        #[cfg(unix)]
        {
            let link = d.join("link");
            std::os::unix::fs::symlink(&out, &link).unwrap();
            let err = write_output(&link, |w| w.write_all(b"x")).unwrap_err();
            assert!(matches!(err, Error::File { .. }), "{err}");
            assert_eq!(std::fs::read(&out).unwrap(), b"two", "target untouched");
            assert!(
                std::fs::symlink_metadata(&link)
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
            write_output(Path::new("/dev/null"), |w| w.write_all(b"x")).unwrap();
        }
        // A failed write leaves no temporary file behind.
        let err = write_output(&out, |_| Err(std::io::Error::other("boom"))).unwrap_err();
        assert!(matches!(err, Error::Write { .. }));
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            if cfg!(unix) { 2 } else { 1 }
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
