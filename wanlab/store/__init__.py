"""The embedded SQLite store of experiments, resources and history."""
