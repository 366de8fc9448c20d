//! Who is on the other end of a control connection (`SO_PEERCRED`), and whether it may
//! drive the engine: root, in the engine's own network namespace. wanlab's control plane
//! runs in the host's namespace; node programs run in node namespaces and are refused even
//! though they are root and share the host's filesystem.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::MetadataExt;

/// The peer's pid, uid and gid, as the kernel recorded them at `connect`.
pub fn peer_cred(fd: RawFd) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// The inode of a process's network namespace (`self` or a pid).
pub fn netns_inode(pid: &str) -> io::Result<(u64, u64)> {
    let m = std::fs::metadata(format!("/proc/{pid}/ns/net"))?;
    Ok((m.dev(), m.ino()))
}

/// Why the peer on `fd` may not use the control socket, or None if it may.
pub fn refusal(fd: RawFd) -> Option<String> {
    let cred = match peer_cred(fd) {
        Ok(c) => c,
        Err(e) => return Some(format!("cannot read its credentials: {e}")),
    };
    if cred.uid != 0 {
        return Some(format!(
            "pid {} runs as uid {}, not root",
            cred.pid, cred.uid
        ));
    }
    let ours = match netns_inode("self") {
        Ok(n) => n,
        Err(e) => return Some(format!("cannot read the engine's network namespace: {e}")),
    };
    match netns_inode(&cred.pid.to_string()) {
        Ok(theirs) if theirs == ours => None,
        Ok(_) => Some(format!(
            "pid {} is in another network namespace than the engine (a node's?)",
            cred.pid
        )),
        Err(e) => Some(format!(
            "cannot read the network namespace of pid {}: {e}",
            cred.pid
        )),
    }
}
