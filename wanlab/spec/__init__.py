"""Front ends: ns-2 Tcl scripts, YAML files and Python code, each producing the IR."""
