"""Tests of the front ends (wanlab.frontends)."""
