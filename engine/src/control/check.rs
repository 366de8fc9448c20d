//! The checks of a validated `apply` against the network as it is: new ids are free, and
//! the ports links and LANs attach exist (or are created by the same request) and are not
//! attached yet. Each item is checked on its own ([`check_item`]), so a large `apply` can be
//! checked in slices between frames; the request's consistency in itself was checked by
//! `control/topology.rs`.

use super::topology::{sink_port, ApplyCmd};
use crate::model::network::{Network, TopologySpec};

/// Number of items [`check_item`] knows in `cmd`.
pub fn item_count(cmd: &ApplyCmd) -> usize {
    let t = &cmd.topo;
    t.ports.len()
        + t.routers.len()
        + t.patches.len()
        + t.hosts.len()
        + t.agents.len()
        + t.links.len()
        + t.lans.len()
}

/// Check item `k` of `cmd` (ports, then routers, patches, hosts, agents, links, LANs).
pub fn check_item(net: &Network, cmd: &ApplyCmd, k: usize) -> Result<(), String> {
    let t = &cmd.topo;
    let mut k = k;
    if k < t.ports.len() {
        let p = &t.ports[k];
        return port_is_free(net, p, &format!("ports[{k}] (\"{p}\").port"));
    }
    k -= t.ports.len();
    if k < t.routers.len() {
        return router(net, cmd, k);
    }
    k -= t.routers.len();
    if let Some(x) = t.patches.get(k) {
        let ctx = format!("patches[{k}] (\"{}\")", x.id);
        net_id_is_free(net, &x.id, &format!("{ctx}.patch"))?;
        for (j, p) in x.ports.iter().enumerate() {
            port_is_free(net, p, &format!("{ctx}.ports[{j}]"))?;
        }
        return Ok(());
    }
    k -= t.patches.len();
    if k < t.hosts.len() {
        let h = &t.hosts[k];
        let ctx = format!("hosts[{k}] (\"{}\")", h.id);
        if net.has_host(&h.id) {
            return Err(format!("{ctx}.host: id \"{}\" already exists", h.id));
        }
        return port_is_free(net, &h.port, &format!("{ctx}.port"));
    }
    k -= t.hosts.len();
    if k < t.agents.len() {
        return agent(net, cmd, k);
    }
    k -= t.agents.len();
    if k < t.links.len() {
        let l = &t.links[k];
        let ctx = format!("links[{k}] (\"{}\")", l.id);
        net_id_is_free(net, &l.id, &format!("{ctx}.link"))?;
        can_attach(net, cmd, &l.a, &format!("{ctx}.a"))?;
        return can_attach(net, cmd, &l.b, &format!("{ctx}.b"));
    }
    k -= t.links.len();
    if let Some(lan) = t.lans.get(k) {
        let ctx = format!("lans[{k}] (\"{}\")", lan.id);
        net_id_is_free(net, &lan.id, &format!("{ctx}.lan"))?;
        for (j, m) in lan.members.iter().enumerate() {
            can_attach(net, cmd, &m.port, &format!("{ctx}.members[{j}].port"))?;
        }
    }
    Ok(())
}

/// Check every item at once.
pub fn check_all(net: &Network, cmd: &ApplyCmd) -> Result<(), String> {
    (0..item_count(cmd)).try_for_each(|k| check_item(net, cmd, k))
}

/// Check a topology built without [`super::topology::build_apply`] (tests, tools) against
/// the network; its consistency in itself is the caller's business.
pub fn check_topology(net: &Network, topo: &TopologySpec) -> Result<(), String> {
    let mut cmd = ApplyCmd {
        topo: topo.clone(),
        ..Default::default()
    };
    cmd.new_ports.extend(topo.ports.iter().cloned());
    for r in &topo.routers {
        cmd.new_ports
            .extend(r.interfaces.iter().map(|(p, _)| p.clone()));
    }
    for x in &topo.patches {
        cmd.new_ports.extend(x.ports.iter().cloned());
    }
    for h in &topo.hosts {
        cmd.new_ports.insert(h.port.clone());
        cmd.new_hosts.insert(h.id.clone());
    }
    check_all(net, &cmd)
}

fn port_is_free(net: &Network, p: &str, field: &str) -> Result<(), String> {
    match net.port_index(p) {
        Some(_) => Err(format!("{field}: port \"{p}\" already exists")),
        None => Ok(()),
    }
}

/// Links, LANs and routers share one id space.
fn net_id_is_free(net: &Network, id: &str, field: &str) -> Result<(), String> {
    if net.has_link(id) || net.has_lan(id) || net.has_router(id) || net.has_patch(id) {
        return Err(format!(
            "{field}: id \"{id}\" already exists (routers, links and lans share ids)"
        ));
    }
    Ok(())
}

/// `port` exists (in the network or in this request) and is not attached yet.
fn can_attach(net: &Network, cmd: &ApplyCmd, port: &str, field: &str) -> Result<(), String> {
    if cmd.new_ports.contains(port) {
        return Ok(());
    }
    match net.port_index(port) {
        None => Err(format!("{field}: unknown port \"{port}\"")),
        Some(i) if net.port_attached(i) => {
            Err(format!("{field}: port \"{port}\" is already attached"))
        }
        Some(_) => Ok(()),
    }
}

fn router(net: &Network, cmd: &ApplyCmd, k: usize) -> Result<(), String> {
    let r = &cmd.topo.routers[k];
    let ctx = format!("routers[{k}] (\"{}\")", r.id);
    net_id_is_free(net, &r.id, &format!("{ctx}.router"))?;
    for (j, (p, _)) in r.interfaces.iter().enumerate() {
        port_is_free(net, p, &format!("{ctx}.interfaces[{j}].port"))?;
    }
    Ok(())
}

fn agent(net: &Network, cmd: &ApplyCmd, k: usize) -> Result<(), String> {
    let a = &cmd.topo.agents[k];
    let ctx = format!("agents[{k}] (\"{}\")", a.id);
    if net.has_agent(&a.id) {
        return Err(format!("{ctx}.agent: id \"{}\" already exists", a.id));
    }
    if !cmd.new_hosts.contains(&a.host) && !net.has_host(&a.host) {
        return Err(format!("{ctx}.host: unknown host \"{}\"", a.host));
    }
    if let Some((tcp, port)) = sink_port(&a.kind) {
        if net.host_has_sink(&a.host, tcp, port) {
            let what = if tcp { "tcp_sink" } else { "sink" };
            return Err(format!(
                "{ctx}.port: host \"{}\" already has a {what} on port {port}",
                a.host
            ));
        }
    }
    Ok(())
}
