//! Capture files confined to one directory (the experiment's folder, `--capture-dir`).
//!
//! The engine runs as root and a capture path comes from a request, so a path must never
//! reach a file outside that directory or replace one: it is resolved relative to a
//! directory fd opened at start, `..` and absolute paths outside the directory are refused
//! before any system call, every intermediate directory is opened with `O_NOFOLLOW` (a
//! symbolic link anywhere in the path is refused), and the file itself is created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600 (an existing file, or a link, is an error).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

#[derive(Debug)]
pub struct CaptureDir {
    fd: OwnedFd,
    /// The directory as given and canonicalized (absolute capture paths must be inside it).
    given: PathBuf,
    canonical: PathBuf,
}

fn cstr(s: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn open_at(
    dir: RawFd,
    name: &std::ffi::OsStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: valid NUL-terminated path; the returned fd is owned by the caller.
    let fd = unsafe { libc::openat(dir, c.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by openat and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl CaptureDir {
    /// Open `dir` (which must be a directory, not a symbolic link to one).
    pub fn open(dir: &Path) -> io::Result<CaptureDir> {
        let canonical = std::fs::canonicalize(dir)?;
        let fd = open_at(
            libc::AT_FDCWD,
            canonical.as_os_str(),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )?;
        Ok(CaptureDir {
            fd,
            given: dir.to_path_buf(),
            canonical,
        })
    }

    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// `path` as a relative path of plain components inside this directory.
    pub fn relative(&self, path: &str) -> Result<PathBuf, String> {
        let p = Path::new(path);
        let rel = if p.is_absolute() {
            p.strip_prefix(&self.canonical)
                .or_else(|_| p.strip_prefix(&self.given))
                .map_err(|_| {
                    format!(
                        "path: \"{path}\" is outside the capture directory {}",
                        self.canonical.display()
                    )
                })?
        } else {
            p
        };
        let mut out = PathBuf::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::CurDir => {}
                _ => {
                    return Err(format!(
                        "path: \"{path}\" must stay inside the capture directory (no \"..\")"
                    ))
                }
            }
        }
        if out.as_os_str().is_empty() {
            return Err(format!("path: \"{path}\" names no file"));
        }
        Ok(out)
    }

    /// Create the new file `path` (relative to the directory, or absolute inside it).
    pub fn create(&self, path: &str) -> Result<File, String> {
        let rel = self.relative(path)?;
        let mut parts: Vec<&std::ffi::OsStr> = rel.iter().collect();
        let name = parts.pop().unwrap_or_default();
        let mut dir: Option<OwnedFd> = None;
        let why = |e: io::Error| {
            match e.raw_os_error() {
            Some(libc::EEXIST) => format!(
                "path: \"{path}\" already exists; a capture never overwrites a file (choose a new name)"
            ),
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => format!(
                "path: \"{path}\": symbolic links and non-directories are not allowed in a capture path"
            ),
            _ => format!("path: cannot create \"{path}\": {e}"),
        }
        };
        for part in parts {
            let at = dir.as_ref().map_or(self.fd.as_raw_fd(), AsRawFd::as_raw_fd);
            let next = open_at(
                at,
                part,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(why)?;
            dir = Some(next);
        }
        let at = dir.as_ref().map_or(self.fd.as_raw_fd(), AsRawFd::as_raw_fd);
        let fd = open_at(
            at,
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(why)?;
        Ok(File::from(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wl-capdir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub")).unwrap();
        d
    }

    #[test]
    fn confined_exclusive_and_no_links() {
        let d = tmpdir("unit");
        let c = CaptureDir::open(&d).unwrap();
        c.create("a.pcap").unwrap();
        c.create("sub/b.pcap").unwrap();
        let abs = d.join("sub/c.pcap");
        c.create(abs.to_str().unwrap()).unwrap();
        assert!(c.create("a.pcap").unwrap_err().contains("already exists"));
        assert!(c.create("../x.pcap").unwrap_err().contains("no \"..\""));
        assert!(c
            .create("sub/../../x.pcap")
            .unwrap_err()
            .contains("no \"..\""));
        assert!(c.create("/etc/x.pcap").unwrap_err().contains("outside"));
        assert!(c.create("").unwrap_err().starts_with("path:"));
        std::os::unix::fs::symlink("/tmp", d.join("link")).unwrap();
        std::os::unix::fs::symlink("/tmp/wl-nonexistent-target", d.join("dangling")).unwrap();
        assert!(c
            .create("link/x.pcap")
            .unwrap_err()
            .contains("symbolic links"));
        assert!(c.create("dangling").unwrap_err().contains("already exists"));
        assert!(!Path::new("/tmp/wl-nonexistent-target").exists());
        assert!(c
            .create("nodir/x.pcap")
            .unwrap_err()
            .starts_with("path: cannot create"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
