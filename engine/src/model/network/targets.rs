//! Addressing link and LAN directions by target id, optional LAN member and [`Dir`]: the
//! pipelines a `set`, `capture` or `down` acts on, and the acts themselves.
use super::{Network, PipeIdx, PortIdx};
use crate::model::lan::Member;
use crate::model::params::LinkParams;
use crate::time::Instant;

/// Which directions a `set`, `capture` or `down` addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Ab,
    Ba,
    ToLan,
    FromLan,
    Both,
}

impl Network {
    /// The pipelines addressed by a target (link or LAN id), optional LAN member and dir.
    pub fn select(
        &self,
        target: &str,
        member: Option<&str>,
        dir: Dir,
    ) -> Result<Vec<PipeIdx>, String> {
        if let Some(li) = self.links.index_of(target) {
            let l = self.links.get(li).ok_or("target: link vanished")?;
            if member.is_some() {
                return Err(format!("member: target \"{target}\" is a link, not a lan"));
            }
            return match dir {
                Dir::Ab => Ok(vec![l.ab]),
                Dir::Ba => Ok(vec![l.ba]),
                Dir::Both => Ok(vec![l.ab, l.ba]),
                _ => Err(format!(
                    "dir: link \"{target}\" has directions \"ab\", \"ba\", \"both\""
                )),
            };
        }
        if let Some(li) = self.lans.index_of(target) {
            let lan = self.lans.get(li).ok_or("target: lan vanished")?;
            let members: Vec<&Member> = match member {
                None => lan.members.iter().collect(),
                Some(m) => {
                    let pi = self.port_index(m);
                    let found: Vec<&Member> =
                        lan.members.iter().filter(|x| Some(x.port) == pi).collect();
                    if found.is_empty() {
                        return Err(format!(
                            "member: port \"{m}\" is not a member of lan \"{target}\""
                        ));
                    }
                    found
                }
            };
            let mut out = Vec::new();
            for m in members {
                match dir {
                    Dir::ToLan => out.push(m.to_lan),
                    Dir::FromLan => out.push(m.from_lan),
                    Dir::Both => out.extend([m.to_lan, m.from_lan]),
                    _ => {
                        return Err(format!(
                        "dir: lan \"{target}\" has directions \"to_lan\", \"from_lan\", \"both\""
                    ))
                    }
                }
            }
            return Ok(out);
        }
        Err(format!("target: no link or lan \"{target}\""))
    }

    /// The channel of one ordered pair of a LAN's members (a latency matrix's cell): from
    /// port `member` to port `to`.
    pub fn select_pair(
        &self,
        target: &str,
        member: Option<&str>,
        to: &str,
    ) -> Result<Vec<PipeIdx>, String> {
        let li = self
            .lans
            .index_of(target)
            .ok_or_else(|| format!("target: no lan \"{target}\" (a pair is on a lan)"))?;
        let lan = self.lans.get(li).ok_or("target: lan vanished")?;
        let from = member.ok_or("member: a pair channel needs its sending member")?;
        let index = |p: &str, what: &str| {
            let pi = self.port_index(p);
            lan.members
                .iter()
                .position(|m| Some(m.port) == pi)
                .ok_or_else(|| format!("{what}: port \"{p}\" is not a member of lan \"{target}\""))
        };
        let (i, j) = (index(from, "member")?, index(to, "to")?);
        lan.pair(i, j).map(|p| vec![p]).ok_or_else(|| {
            format!("to: lan \"{target}\" has no channel from \"{from}\" to \"{to}\" (no matrix)")
        })
    }

    pub fn pipe_params(&self, pipe: PipeIdx) -> Option<&LinkParams> {
        self.pipes.get(pipe).map(|s| s.pipe.params())
    }

    pub fn set_pipe_params(&mut self, pipe: PipeIdx, params: LinkParams, now: Instant) {
        self.quiet_stale = true;
        if let Some(slot) = self.pipes.get_mut(pipe) {
            slot.pipe.set_params(params, now);
        }
        self.reschedule(pipe);
    }

    pub fn set_capture(&mut self, pipe: PipeIdx, on: bool) {
        if let Some(slot) = self.pipes.get_mut(pipe) {
            slot.capture = on;
            slot.pipe.set_captured(on);
        }
    }

    pub fn pipe_exists(&self, pipe: PipeIdx) -> bool {
        self.pipes.get(pipe).is_some()
    }

    /// Bring a link, a whole LAN or one LAN member down or up. Returns the ports whose
    /// carrier follows (the link's two ends, or the affected members' ports).
    pub fn set_up(
        &mut self,
        target: &str,
        member: Option<&str>,
        up: bool,
        now: Instant,
    ) -> Result<Vec<PortIdx>, String> {
        let mut pipes = self.select(target, member, Dir::Both)?;
        if let Some(l) = self.links.by_id(target) {
            // a link's per-destination rules go down and up with it
            pipes.extend(l.rules.iter().flat_map(|&(_, ab, ba)| [ab, ba]));
        }
        let mut ports = Vec::new();
        if let Some(l) = self.links.by_id_mut(target) {
            l.up = up;
            ports.extend([l.a, l.b]);
        } else if self.lans.contains_id(target) {
            let pi = member.and_then(|m| self.port_index(m));
            if let Some(lan) = self.lans.by_id_mut(target) {
                for m in lan
                    .members
                    .iter_mut()
                    .filter(|m| member.is_none() || Some(m.port) == pi)
                {
                    m.up = up;
                    ports.push(m.port);
                }
            }
        }
        for p in pipes {
            if let Some(slot) = self.pipes.get_mut(p) {
                slot.pipe.set_up(up, now);
            }
            self.reschedule(p);
        }
        Ok(ports)
    }
}
