"""Netbed (OSDI 2002), Figure 2, with wanlab's Python builder."""
from wanlab.frontends.builder import ExperimentBuilder

b = ExperimentBuilder("figure2", routing="static")
source = b.node("source", os="FBSD45-STD")
router = b.node("router")
dest = b.node("dest", hardware="pc-inet")
b.link(source, router, bandwidth="10Mb", delay="0ms", queue="RED")
b.link(router, dest, bandwidth="1.5Mb", delay="20ms", queue="DropTail")
experiment = b
