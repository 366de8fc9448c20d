"""A LAN of four nodes with a slow member and a lossy uplink (see lan.tcl)."""
from wanlab.frontends.builder import ExperimentBuilder

b = ExperimentBuilder("lan")
server, gw = b.node("server"), b.node("gw")
hosts = [b.node(f"h-{i}") for i in (1, 2, 3)]
lan0 = b.lan([gw, *hosts], bandwidth="100Mb", delay="4ms", loss=0.01, name="lan0")
b.lan_member(lan0, hosts[2], delay="10ms", bandwidth="10Mb", loss=0.0)
b.link(gw, server, bandwidth="1Gb", delay="25ms", loss=0.001, name="uplink", ip_b="10.9.0.2")
b.at(30, "uplink", "down")
b.at(40, "uplink", "up")
experiment = b
