//! The control socket: a non-blocking Unix stream listener and its connections, serviced
//! from the driver's epoll loop (no threads, so requests and packets never race).
//!
//! Each connection has an input buffer split into lines and an output buffer written as the
//! socket accepts. A line longer than [`MAX_LINE`] gets an error reply and is discarded; a
//! client that stops reading while subscribed is disconnected once [`MAX_OUTBUF`] bytes are
//! pending, so a stuck client cannot grow the engine's memory.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::exec::{Effect, Engine};
use super::protocol::{err_reply, ok_reply, parse_request};
use crate::time::Instant;

pub const MAX_LINE: usize = 16 << 20;
pub const MAX_OUTBUF: usize = 64 << 20;

pub struct Subscription {
    pub interval_ns: u64,
    pub next: Instant,
    pub target: Option<String>,
}

pub struct Conn {
    stream: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    discarding: bool,
    pub sub: Option<Subscription>,
    pub closed: bool,
}

impl Conn {
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
    pub fn wants_write(&self) -> bool {
        !self.outbuf.is_empty()
    }

    fn push_line(&mut self, line: &str) {
        if self.outbuf.len() + line.len() > MAX_OUTBUF {
            self.closed = true;
            return;
        }
        self.outbuf.extend_from_slice(line.as_bytes());
        self.outbuf.push(b'\n');
    }

    /// Write as much pending output as the socket takes.
    pub fn flush(&mut self) {
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
}

pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    pub conns: BTreeMap<u64, Conn>,
    next_id: u64,
}

impl Server {
    /// Bind `path`. A leftover socket file (from a crashed engine) is replaced; any other
    /// kind of file is refused.
    pub fn bind(path: &Path) -> io::Result<Server> {
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
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(Server {
            listener,
            path: path.to_path_buf(),
            conns: BTreeMap::new(),
            next_id: 0,
        })
    }

    pub fn listener_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Accept every pending connection; returns the new ids.
    pub fn accept(&mut self) -> Vec<u64> {
        let mut ids = Vec::new();
        while let Ok((stream, _)) = self.listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            self.next_id += 1;
            self.conns.insert(
                self.next_id,
                Conn {
                    stream,
                    inbuf: Vec::new(),
                    outbuf: Vec::new(),
                    discarding: false,
                    sub: None,
                    closed: false,
                },
            );
            ids.push(self.next_id);
        }
        ids
    }

    /// Read what `conn` sent and execute every complete line. Returns true on shutdown.
    pub fn service(&mut self, id: u64, engine: &mut Engine, now: Instant) -> bool {
        let Some(c) = self.conns.get_mut(&id) else {
            return false;
        };
        let mut buf = [0u8; 65536];
        let mut shutdown = false;
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => {
                    c.closed = true;
                    break;
                }
                Ok(n) => c.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    c.closed = true;
                    break;
                }
            }
            if c.inbuf.len() > MAX_LINE && !c.inbuf.contains(&b'\n') {
                c.inbuf.clear();
                if !c.discarding {
                    c.push_line(&err_reply(
                        Value::Null,
                        &format!("request line longer than {MAX_LINE} bytes; discarded"),
                    ));
                }
                c.discarding = true;
            }
        }
        while let Some(pos) = c.inbuf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = c.inbuf.drain(..=pos).collect();
            if std::mem::take(&mut c.discarding) {
                continue; // tail of an overlong line
            }
            let text = String::from_utf8_lossy(&line[..line.len() - 1]);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let (rid, req) = parse_request(text);
            let reply = match req.and_then(|r| engine.execute(r, now)) {
                Ok((body, effect)) => {
                    match effect {
                        Effect::None => {}
                        Effect::Subscribe {
                            interval_ns,
                            target,
                        } => {
                            c.sub = Some(Subscription {
                                interval_ns,
                                next: now.add_nanos(interval_ns),
                                target,
                            });
                        }
                        Effect::Shutdown => shutdown = true,
                    }
                    ok_reply(rid, body)
                }
                Err(e) => err_reply(rid, &e),
            };
            c.push_line(&reply);
        }
        c.flush();
        shutdown
    }

    /// Push due statistics events; returns the earliest next push time.
    pub fn push_stats(&mut self, engine: &Engine, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for c in self.conns.values_mut() {
            let Some(sub) = c.sub.as_mut() else { continue };
            if sub.next <= now {
                let mut body = engine.stats(sub.target.as_deref(), now).unwrap_or_default();
                body.insert("event".into(), Value::String("stats".into()));
                let line = Value::Object(body).to_string();
                // Keep the cadence; if we fell behind, restart it from now rather than bursting.
                sub.next = sub.next.add_nanos(sub.interval_ns);
                if sub.next <= now {
                    sub.next = now.add_nanos(sub.interval_ns);
                }
                c.push_line(&line);
                c.flush();
            }
            if let Some(s) = &c.sub {
                next = Some(next.map_or(s.next, |n| n.min(s.next)));
            }
        }
        next
    }

    /// Drop closed connections; returns their fds' ids for the driver's bookkeeping.
    pub fn reap(&mut self) -> Vec<u64> {
        let dead: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.closed)
            .map(|(id, _)| *id)
            .collect();
        for id in &dead {
            self.conns.remove(id);
        }
        dead
    }

    /// Flush replies (e.g. the shutdown acknowledgement) before exit, best effort.
    pub fn flush_all(&mut self) {
        for c in self.conns.values_mut() {
            let _ = c.stream.set_nonblocking(false);
            let _ = c
                .stream
                .set_write_timeout(Some(std::time::Duration::from_millis(200)));
            c.flush();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
