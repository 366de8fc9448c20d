"""Tests of the front ends (wanlab.spec)."""
