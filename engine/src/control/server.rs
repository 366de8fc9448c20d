//! The control socket, served by its own thread so that reading, parsing and validating a
//! request (a 6 MB `apply` takes tens of ms) never delays frames.
//!
//! The control thread owns the listener and the connections: it refuses peers that are
//! not root in the engine's network namespace (`io/peer.rs`), splits input into lines,
//! parses and validates each into a typed [`Command`] and hands it to the real-time loop
//! over a channel, waking it through an eventfd. The real-time loop executes commands in
//! arrival order and sends back reply lines (and subscription events) the same way; the
//! control thread writes them as each socket accepts.
//!
//! Limits: a line longer than [`MAX_LINE`] gets an error reply and is discarded; a client
//! that stops reading is disconnected once [`MAX_OUTBUF`] bytes are pending; a connection
//! with [`MAX_IN_FLIGHT`] requests not yet answered is not read until replies come back,
//! so no client can grow the engine's memory without bound.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;

use serde_json::Value;

use super::command::{validate, Command};
use super::exec::{Effect, Outcome};
use super::protocol::{err_reply, ok_reply, parse_request};
use crate::io::peer;
use crate::time::Instant;

/// Large enough for the `apply` of a few hundred thousand simulated nodes (100 000 take
/// about 35 MB).
pub const MAX_LINE: usize = 256 << 20;
pub const MAX_OUTBUF: usize = 64 << 20;
/// Requests of one connection waiting for their reply before the thread stops reading it.
pub const MAX_IN_FLIGHT: usize = 64;

/// A request for the real-time loop: its connection, its id and the command (or the error
/// found while parsing or validating it, which keeps its place in the reply order).
pub struct Incoming {
    pub conn: u64,
    pub id: Value,
    pub cmd: Result<Command, String>,
}

pub enum ToEngine {
    Request(Box<Incoming>),
    /// The connection is gone (its subscription ends).
    Closed(u64),
}

enum ToControl {
    Reply { conn: u64, line: String },
    Event { conn: u64, line: String },
    Exit,
}

/// An eventfd: one side writes to wake the other's poll.
struct Waker(RawFd);

impl Waker {
    fn new() -> io::Result<Waker> {
        // SAFETY: plain syscall creating an fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waker(fd))
    }
    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writing 8 bytes from a local buffer.
        unsafe { libc::write(self.0, one.as_ptr().cast(), 8) };
    }
    fn reset(&self) {
        let mut x = [0u8; 8];
        // SAFETY: reading 8 bytes into a local buffer.
        unsafe { libc::read(self.0, x.as_mut_ptr().cast(), 8) };
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        // SAFETY: we own this fd.
        unsafe { libc::close(self.0) };
    }
}

/// The real-time loop's end of the control thread.
pub struct Control {
    rx: Receiver<ToEngine>,
    to_engine: std::sync::Arc<Waker>,
    tx: Sender<ToControl>,
    to_control: std::sync::Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

/// Bind `path` (mode 0600). A leftover socket file (from a crashed engine) is replaced; any
/// other kind of file is refused.
fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{} is in use by a running engine", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        } else {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
    }
    // The socket file is created 0600 (umask while binding; no other thread runs yet), so
    // there is no moment when others could connect.
    // SAFETY: umask only changes the process's file creation mask.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

impl Control {
    /// Bind the socket and start the control thread.
    pub fn spawn(path: &Path) -> io::Result<Control> {
        let listener = bind(path)?;
        let (to_rt, rx) = channel();
        let (tx, from_rt) = channel();
        let to_engine = std::sync::Arc::new(Waker::new()?);
        let to_control = std::sync::Arc::new(Waker::new()?);
        let mut t = Thread {
            listener,
            path: path.to_path_buf(),
            conns: BTreeMap::new(),
            next_id: 0,
            tx: to_rt,
            rx: from_rt,
            wake_engine: to_engine.clone(),
            woken: to_control.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || t.run())?;
        Ok(Control {
            rx,
            to_engine,
            tx,
            to_control,
            thread: Some(thread),
        })
    }

    /// The fd that becomes readable when requests are waiting.
    pub fn wake_fd(&self) -> RawFd {
        self.to_engine.0
    }

    /// Clear the wake-up (after it was reported; [`Control::next`] still returns everything).
    pub fn reset_wake(&self) {
        self.to_engine.reset();
    }

    /// The next waiting message, if any.
    pub fn next(&self) -> Option<ToEngine> {
        self.rx.try_recv().ok()
    }

    /// Send the reply to a request.
    pub fn reply(&self, conn: u64, id: Value, outcome: &Outcome) {
        let line = match outcome {
            Ok((body, _)) => ok_reply(id, body.clone()),
            Err(e) => err_reply(id, e),
        };
        let _ = self.tx.send(ToControl::Reply { conn, line });
        self.to_control.wake();
    }

    /// Send a subscription event.
    pub fn event(&self, conn: u64, line: String) {
        let _ = self.tx.send(ToControl::Event { conn, line });
        self.to_control.wake();
    }

    /// Write what is pending (e.g. the `shutdown` reply), close everything, remove the socket
    /// file and end the thread.
    pub fn shutdown(mut self) {
        let _ = self.tx.send(ToControl::Exit);
        self.to_control.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Conn {
    stream: UnixStream,
    inbuf: Vec<u8>,
    /// How much of `inbuf` is known to hold no newline: a line that arrives in many reads
    /// is searched once, not once per read.
    scanned: usize,
    outbuf: Vec<u8>,
    discarding: bool,
    in_flight: usize,
    closed: bool,
}

impl Conn {
    fn push_line(&mut self, line: &str) {
        if self.outbuf.len() + line.len() > MAX_OUTBUF {
            self.closed = true;
            return;
        }
        self.outbuf.extend_from_slice(line.as_bytes());
        self.outbuf.push(b'\n');
    }

    /// Write as much pending output as the socket takes.
    fn flush(&mut self) {
        while !self.outbuf.is_empty() {
            match self.stream.write(&self.outbuf) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    /// Read what the peer sent; returns the complete lines (an overlong one as an error).
    fn read_lines(&mut self) -> Vec<Result<String, String>> {
        let mut buf = [0u8; 65536];
        let mut lines = Vec::new();
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    self.closed = true;
                    break;
                }
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    break;
                }
            }
            let newline = self.inbuf[self.scanned..].contains(&b'\n');
            if !newline {
                self.scanned = self.inbuf.len();
            }
            if self.inbuf.len() > MAX_LINE && !newline {
                self.inbuf.clear();
                self.scanned = 0;
                if !self.discarding {
                    lines.push(Err(format!(
                        "request line longer than {MAX_LINE} bytes; discarded"
                    )));
                }
                self.discarding = true;
            }
        }
        let mut start = 0;
        let mut from = self.scanned.min(self.inbuf.len());
        while let Some(pos) = self.inbuf[from..].iter().position(|&b| b == b'\n') {
            let line = &self.inbuf[start..from + pos];
            start = from + pos + 1;
            from = start;
            if std::mem::take(&mut self.discarding) {
                continue; // tail of an overlong line
            }
            let text = String::from_utf8_lossy(line);
            let text = text.trim();
            if !text.is_empty() {
                lines.push(Ok(text.to_string()));
            }
        }
        self.inbuf.drain(..start);
        self.scanned = self.inbuf.len(); // what is left holds no newline
        lines
    }
}

/// The control thread's state.
struct Thread {
    listener: UnixListener,
    path: PathBuf,
    conns: BTreeMap<u64, Conn>,
    next_id: u64,
    tx: Sender<ToEngine>,
    rx: Receiver<ToControl>,
    wake_engine: std::sync::Arc<Waker>,
    woken: std::sync::Arc<Waker>,
}

impl Thread {
    fn run(&mut self) {
        // Parsing yields to the packet thread when both want the same core.
        // SAFETY: setpriority on this thread (Linux: PRIO_PROCESS with a thread id).
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, 10);
        }
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut ids: Vec<u64> = Vec::new();
        loop {
            fds.clear();
            ids.clear();
            let pfd = |fd, events| libc::pollfd {
                fd,
                events,
                revents: 0,
            };
            fds.push(pfd(self.listener.as_raw_fd(), libc::POLLIN));
            fds.push(pfd(self.woken.0, libc::POLLIN));
            for (&id, c) in &self.conns {
                let mut ev = 0;
                if c.in_flight < MAX_IN_FLIGHT {
                    ev |= libc::POLLIN;
                }
                if !c.outbuf.is_empty() {
                    ev |= libc::POLLOUT;
                }
                fds.push(pfd(c.stream.as_raw_fd(), ev));
                ids.push(id);
            }
            // SAFETY: fds is a valid array of pollfd of the given length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if n < 0 {
                continue; // EINTR
            }
            if fds[1].revents != 0 {
                self.woken.reset();
                if !self.deliver() {
                    self.exit();
                    return;
                }
            }
            if fds[0].revents != 0 {
                self.accept();
            }
            for (i, &id) in ids.iter().enumerate() {
                let rev = fds[i + 2].revents;
                if rev == 0 {
                    continue;
                }
                if let Some(c) = self.conns.get_mut(&id) {
                    if rev & libc::POLLOUT != 0 {
                        c.flush();
                    }
                    if rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                        self.service(id);
                    }
                }
            }
            self.reap();
        }
    }

    /// Accept every pending connection from an allowed peer.
    fn accept(&mut self) {
        while let Ok((stream, _)) = self.listener.accept() {
            if let Some(why) = peer::refusal(stream.as_raw_fd()) {
                eprintln!("wanlab-engine: refused a control connection: {why}");
                continue; // dropping the stream closes it
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            self.next_id += 1;
            self.conns.insert(
                self.next_id,
                Conn {
                    stream,
                    inbuf: Vec::new(),
                    scanned: 0,
                    outbuf: Vec::new(),
                    discarding: false,
                    in_flight: 0,
                    closed: false,
                },
            );
        }
    }

    /// Read a connection and pass every complete request on.
    fn service(&mut self, id: u64) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let lines = c.read_lines();
        c.in_flight += lines.len();
        let sent = !lines.is_empty();
        for line in lines {
            let (rid, cmd) = match line {
                Ok(text) => {
                    let (rid, req) = parse_request(&text);
                    (rid, req.and_then(validate))
                }
                Err(e) => (Value::Null, Err(e)),
            };
            let _ = self.tx.send(ToEngine::Request(Box::new(Incoming {
                conn: id,
                id: rid,
                cmd,
            })));
        }
        if sent {
            self.wake_engine.wake();
        }
    }

    /// Write what the real-time loop sent; false on exit.
    fn deliver(&mut self) -> bool {
        loop {
            let (conn, line, reply) = match self.rx.try_recv() {
                Ok(ToControl::Reply { conn, line }) => (conn, line, true),
                Ok(ToControl::Event { conn, line }) => (conn, line, false),
                Ok(ToControl::Exit) | Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => return true,
            };
            if let Some(c) = self.conns.get_mut(&conn) {
                if reply {
                    c.in_flight = c.in_flight.saturating_sub(1);
                }
                c.push_line(&line);
                c.flush();
            }
        }
    }

    fn reap(&mut self) {
        let dead: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.closed)
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            self.conns.remove(&id);
            let _ = self.tx.send(ToEngine::Closed(id));
        }
    }

    /// Flush replies (e.g. the shutdown acknowledgement) best effort, then remove the socket.
    fn exit(&mut self) {
        for c in self.conns.values_mut() {
            let _ = c.stream.set_nonblocking(false);
            let _ = c
                .stream
                .set_write_timeout(Some(std::time::Duration::from_millis(200)));
            c.flush();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A connection's statistics subscription (kept by the real-time loop, which has the stats).
pub struct Subscription {
    pub interval_ns: u64,
    pub next: Instant,
    pub target: Option<String>,
}

/// Subscriptions by connection.
#[derive(Default)]
pub struct Subscriptions(BTreeMap<u64, Subscription>);

impl Subscriptions {
    /// Record the effect of a command run for `conn` at `now`; true on shutdown.
    pub fn apply_effect(&mut self, conn: u64, outcome: &Outcome, now: Instant) -> bool {
        match outcome {
            Ok((
                _,
                Effect::Subscribe {
                    interval_ns,
                    target,
                },
            )) => {
                self.0.insert(
                    conn,
                    Subscription {
                        interval_ns: *interval_ns,
                        next: now.add_nanos(*interval_ns),
                        target: target.clone(),
                    },
                );
                false
            }
            Ok((_, Effect::Shutdown)) => true,
            _ => false,
        }
    }

    pub fn remove(&mut self, conn: u64) {
        self.0.remove(&conn);
    }

    /// Lines due at `now` (built by `stats`), and the earliest next push time.
    pub fn due(
        &mut self,
        now: Instant,
        mut stats: impl FnMut(Option<&str>) -> String,
    ) -> (Vec<(u64, String)>, Option<Instant>) {
        let (due, next) = self.due_targets(now);
        let lines = due
            .into_iter()
            .map(|(conn, t)| (conn, stats(t.as_deref())))
            .collect();
        (lines, next)
    }

    /// The connections (with their stats target) whose push is due at `now`, and the
    /// earliest next push time.
    pub fn due_targets(&mut self, now: Instant) -> (Vec<(u64, Option<String>)>, Option<Instant>) {
        let mut out = Vec::new();
        let mut next: Option<Instant> = None;
        for (&conn, sub) in self.0.iter_mut() {
            if sub.next <= now {
                out.push((conn, sub.target.clone()));
                // Keep the cadence; if we fell behind, restart it from now rather than bursting.
                sub.next = sub.next.add_nanos(sub.interval_ns);
                if sub.next <= now {
                    sub.next = now.add_nanos(sub.interval_ns);
                }
            }
            next = Some(next.map_or(sub.next, |n| n.min(sub.next)));
        }
        (out, next)
    }
}
