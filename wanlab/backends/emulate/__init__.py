"""Realization: turning a plan into namespaces, TAPs wired into the engine, and processes."""
