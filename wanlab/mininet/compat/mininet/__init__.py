"""wanlab's ``mininet`` package: Mininet's API over wanlab experiments (docs/mininet.md)."""

VERSION = "2.3.0 (wanlab)"
