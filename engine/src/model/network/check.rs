//! Validation of a [`TopologySpec`] against the network before it is applied: new ids are
//! unique, references resolve to existing or new ports, and no port gets two attachments.
//! Pure model logic (it reads the network's state and changes nothing).
use std::collections::HashMap;

use super::{AgentKind, AgentKindSpec, Network, TopologySpec};
use crate::model::sim::host;
use crate::model::sim::router::{self, Interface};

impl Network {
    /// Check that `spec` can be added as a whole: new ids are unique, references resolve to
    /// existing or new ports, and no port gets two attachments.
    pub fn check_apply(&self, spec: &TopologySpec) -> Result<(), String> {
        let mut new_ports = HashMap::new();
        for p in &spec.ports {
            if p.is_empty() {
                return Err("ports: port id must not be empty".into());
            }
            if self.ports.contains_id(p) || new_ports.insert(p.as_str(), ()).is_some() {
                return Err(format!("ports: port \"{p}\" already exists"));
            }
        }
        let mut seen_routers = HashMap::new();
        for (i, r) in spec.routers.iter().enumerate() {
            let by = format!("routers[{i}] (\"{}\")", r.id);
            if r.id.is_empty() {
                return Err(format!("{by}.router: id must not be empty"));
            }
            let clash = self.routers.contains_id(&r.id)
                || self.links.contains_id(&r.id)
                || self.lans.contains_id(&r.id)
                || spec.links.iter().any(|l| l.id == r.id)
                || spec.lans.iter().any(|l| l.id == r.id);
            if clash || seen_routers.insert(r.id.as_str(), ()).is_some() {
                return Err(format!(
                    "{by}.router: id already exists (routers, links and lans share ids)"
                ));
            }
            for (j, (p, _)) in r.interfaces.iter().enumerate() {
                if p.is_empty() {
                    return Err(format!(
                        "{by}.interfaces[{j}].port: port id must not be empty"
                    ));
                }
                if self.ports.contains_id(p) || new_ports.insert(p.as_str(), ()).is_some() {
                    return Err(format!(
                        "{by}.interfaces[{j}].port: port \"{p}\" already exists"
                    ));
                }
            }
            let ifs: Vec<Interface> = r.interfaces.iter().map(|(_, f)| f.clone()).collect();
            router::validate(&ifs, &r.routes).map_err(|e| format!("{by}.{e}"))?;
        }
        let mut seen_hosts = HashMap::new();
        for (i, h) in spec.hosts.iter().enumerate() {
            let by = format!("hosts[{i}] (\"{}\")", h.id);
            if h.id.is_empty() {
                return Err(format!("{by}.host: id must not be empty"));
            }
            if self.hosts.contains_id(&h.id) || seen_hosts.insert(h.id.as_str(), ()).is_some() {
                return Err(format!("{by}.host: id already exists"));
            }
            if h.port.is_empty() {
                return Err(format!("{by}.port: port id must not be empty"));
            }
            if self.ports.contains_id(&h.port) || new_ports.insert(h.port.as_str(), ()).is_some() {
                return Err(format!("{by}.port: port \"{}\" already exists", h.port));
            }
            host::validate(&h.cfg).map_err(|e| format!("{by}.{e}"))?;
        }
        let mut seen_agents = HashMap::new();
        let mut sink_ports: HashMap<(String, u16), ()> = HashMap::new();
        for a in self.agents.iter() {
            if let AgentKind::Sink(s) = &a.kind {
                let h = self
                    .hosts
                    .get(a.host)
                    .map(|h| h.id.clone())
                    .unwrap_or_default();
                sink_ports.insert((h, s.port), ());
            }
        }
        for (i, a) in spec.agents.iter().enumerate() {
            let by = format!("agents[{i}] (\"{}\")", a.id);
            if a.id.is_empty() {
                return Err(format!("{by}.agent: id must not be empty"));
            }
            if self.agents.contains_id(&a.id) || seen_agents.insert(a.id.as_str(), ()).is_some() {
                return Err(format!("{by}.agent: id already exists"));
            }
            if !self.hosts.contains_id(&a.host) && !seen_hosts.contains_key(a.host.as_str()) {
                return Err(format!("{by}.host: unknown host \"{}\"", a.host));
            }
            if let AgentKindSpec::Sink { port } = a.kind {
                if sink_ports.insert((a.host.clone(), port), ()).is_some() {
                    return Err(format!(
                        "{by}.port: host \"{}\" already has a sink on port {port}",
                        a.host
                    ));
                }
            }
        }
        self.check_tcp_sinks(spec)?;
        let mut used: HashMap<&str, String> = HashMap::new();
        let claim =
            |port: &str, by: String, used: &mut HashMap<&str, String>| -> Result<(), String> {
                match self.ports.index_of(port) {
                    Some(i) => {
                        if self.ports.get(i).is_some_and(|p| p.ingress.is_some()) {
                            return Err(format!("{by}: port \"{port}\" is already attached"));
                        }
                    }
                    None if new_ports.contains_key(port) => {}
                    None => return Err(format!("{by}: unknown port \"{port}\"")),
                }
                if let Some(other) = used.get(port) {
                    return Err(format!("{by}: port \"{port}\" is also used by {other}"));
                }
                Ok(())
            };
        let mut seen_links = HashMap::new();
        for l in &spec.links {
            let by = format!("link \"{}\"", l.id);
            if l.id.is_empty() {
                return Err("links: link id must not be empty".into());
            }
            if self.links.contains_id(&l.id)
                || self.lans.contains_id(&l.id)
                || self.routers.contains_id(&l.id)
                || seen_links.insert(l.id.as_str(), ()).is_some()
            {
                return Err(format!("{by}: id already exists"));
            }
            if l.a == l.b {
                return Err(format!("{by}: a and b are the same port \"{}\"", l.a));
            }
            claim(&l.a, by.clone(), &mut used)?;
            used.insert(l.a.as_str(), by.clone());
            claim(&l.b, by.clone(), &mut used)?;
            used.insert(l.b.as_str(), by);
        }
        for lan in &spec.lans {
            let by = format!("lan \"{}\"", lan.id);
            if lan.id.is_empty() {
                return Err("lans: lan id must not be empty".into());
            }
            if self.lans.contains_id(&lan.id)
                || self.links.contains_id(&lan.id)
                || self.routers.contains_id(&lan.id)
                || seen_links.insert(lan.id.as_str(), ()).is_some()
            {
                return Err(format!("{by}: id already exists"));
            }
            for m in &lan.members {
                claim(&m.port, by.clone(), &mut used)?;
                used.insert(m.port.as_str(), by.clone());
            }
        }
        Ok(())
    }

    /// At most one TCP sink per (host, port), counting existing ones.
    fn check_tcp_sinks(&self, spec: &TopologySpec) -> Result<(), String> {
        let mut ports: HashMap<(String, u16), ()> = HashMap::new();
        for a in self.agents.iter() {
            if let AgentKind::TcpSink(s) = &a.kind {
                let h = self
                    .hosts
                    .get(a.host)
                    .map(|h| h.id.clone())
                    .unwrap_or_default();
                ports.insert((h, s.port), ());
            }
        }
        for (i, a) in spec.agents.iter().enumerate() {
            if let AgentKindSpec::TcpSink { port, .. } = a.kind {
                if ports.insert((a.host.clone(), port), ()).is_some() {
                    return Err(format!("agents[{i}] (\"{}\").port: host \"{}\" already has a tcp_sink on port {port}", a.id, a.host));
                }
            }
        }
        Ok(())
    }
}
