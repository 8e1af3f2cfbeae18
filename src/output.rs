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
//! replaced itself, never its target. A log ([`open_log`], `train_log.jsonl`) is stricter:
//! only an absent path or a regular file, replaced by a fresh file it then appends to. An
//! output directory ([`create_dir`]) must be a directory or absent. A failed write (a full
//! disk, `/dev/full`) is [`Error::Write`] (exit code 1); a refused path, or one through
//! something that is not a directory (`/dev/null/x`), is bad input (exit code 2).

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
        Err(e) => Err(path_error(path, e)),
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

/// An error from creating or inspecting `path`: a path through something that is not a
/// directory (`/dev/null/x`, `file.txt/out`) is bad input, naming what is in the way; any
/// other failure is the machine's.
fn path_error(path: &Path, e: std::io::Error) -> Error {
    #[cfg(unix)]
    if e.raw_os_error() == Some(libc::ENOTDIR) {
        let blocker = path.ancestors().skip(1).find_map(|a| {
            let m = std::fs::metadata(a).ok()?;
            (!m.is_dir()).then(|| (a, kind_name(m.file_type())))
        });
        return Error::Invalid(match blocker {
            Some((a, kind)) => format!(
                "{}: cannot write: {} is a {kind}, not a directory",
                path.display(),
                a.display()
            ),
            None => format!("{}: cannot write: {e}", path.display()),
        });
    }
    write_error(path, e)
}

/// Makes `dir` (and its parents) a directory to write outputs into. An existing directory,
/// or a link to one, is used as it is; anything else in the way is bad input.
pub fn create_dir(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(m) => {
            return Err(Error::Invalid(format!(
                "{}: is a {}, not a directory to write into",
                dir.display(),
                kind_name(m.file_type())
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(path_error(dir, e)),
    }
    std::fs::create_dir_all(dir).map_err(|e| match e.kind() {
        // A dangling link, or a file that appeared meanwhile.
        std::io::ErrorKind::AlreadyExists => Error::Invalid(format!(
            "{}: exists and is not a directory to write into",
            dir.display()
        )),
        _ => path_error(dir, e),
    })
}

/// Opens a log to append lines to, as a fresh regular file that replaces `path`: it starts
/// with the old file's lines that `keep` accepts (none without `keep`). A symbolic link, a
/// FIFO or a device at `path` is refused — a log is read back when a run resumes, and
/// nothing is opened for a blocking write.
pub fn open_log(path: &Path, keep: Option<&mut dyn FnMut(&str) -> bool>) -> Result<File> {
    let old = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(path_error(path, e)),
        Ok(m) if m.file_type().is_symlink() => {
            let target = std::fs::read_link(path)
                .ok()
                .map(|t| t.display().to_string());
            return Err(file_error(path, FileProblem::OutputLink { target }));
        }
        Ok(m) if m.is_file() => Some(m),
        Ok(m) => {
            return Err(file_error(
                path,
                FileProblem::NotRegular(kind_name(m.file_type())),
            ));
        }
    };
    let mut kept = String::new();
    if let (Some(keep), Some(_)) = (keep, &old) {
        let bytes = crate::error::read_bounded(path, crate::limits::TEXT_FILE_BYTES, "log")?;
        for line in String::from_utf8_lossy(&bytes).lines().filter(|l| keep(l)) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    let (temp, mut file) = create_temp_beside(path)?;
    let result = (|| {
        file.write_all(kept.as_bytes())?;
        if let Some(old) = &old {
            file.set_permissions(old.permissions())?;
        }
        std::fs::rename(&temp, path)
    })();
    match result {
        Ok(()) => Ok(file),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(write_error(path, e))
        }
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

/// Creates a new temporary file in the directory of `path` (created new, so it cannot be a
/// link someone planted). Its name is short and fixed in form, so any target name that
/// fits NAME_MAX has a temporary sibling that fits too.
fn create_temp_beside(path: &Path) -> Result<(PathBuf, File)> {
    if path.file_name().is_none() {
        return Err(write_error(path, std::io::Error::other("not a file name")));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".anatomy-{}-{n}.tmp", std::process::id()));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| path_error(path, e))?;
    Ok((temp, file))
}

/// Writes a temporary file beside `path`, then renames it over `path`: a reader sees the
/// old file or the new one, never half of one. `old` is the file being replaced, whose
/// permissions the new one keeps.
fn replace_atomically(
    path: &Path,
    old: Option<Metadata>,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let (temp, file) = create_temp_beside(path)?;
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

    /// An empty directory, removed with its contents when dropped (pass or fail).
    fn tmp(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("anatomy-files-{tag}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn outputs_replace_regular_files_and_refuse_links() {
        let dir = tmp("write");
        let d = dir.path();
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
            std::fs::read_dir(d).unwrap().count(),
            if cfg!(unix) { 2 } else { 1 }
        );
    }

    #[test]
    fn logs_keep_accepted_lines_and_refuse_links() {
        let dir = tmp("log");
        let d = dir.path();
        let log = d.join("log.jsonl");
        let mut f = open_log(&log, None).unwrap();
        f.write_all(b"1\n2\n3\n").unwrap();
        drop(f);
        let mut keep = |l: &str| l != "2";
        let mut f = open_log(&log, Some(&mut keep)).unwrap();
        f.write_all(b"4\n").unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"1\n3\n4\n");
        #[cfg(unix)]
        {
            let link = d.join("link");
            std::os::unix::fs::symlink(&log, &link).unwrap();
            assert!(matches!(open_log(&link, None), Err(Error::File { .. })));
            assert_eq!(std::fs::read(&log).unwrap(), b"1\n3\n4\n");
            let err = create_dir(&log.join("sub")).unwrap_err();
            assert!(err.is_bad_input() && err.to_string().contains("not a directory"));
        }
        // A name as long as a file system allows still has a temporary sibling.
        let long = d.join("x".repeat(250));
        write_output(&long, |w| w.write_all(b"ok")).unwrap();
    }
}
