"""The capabilities a node never has (its bounding set), shared by the node's confinement
(:mod:`wanlab.backends.emulate.nodes`) and the work done in its root
(:mod:`wanlab.backends.emulate.rootfs`)."""

# Capabilities a node never has (its bounding set): no mounts or setns (SYS_ADMIN), no ptrace
# or /proc/PID/{root,ns} of wanlab's own processes (SYS_PTRACE; and a smaller permitted set
# than theirs), no modules, raw I/O, reboot, clock, file handles that bypass mounts
# (DAC_READ_SEARCH), device nodes, file capabilities, kernel log, BPF. Kept: NET_ADMIN,
# NET_RAW, NET_BIND_SERVICE (FRR, ping, iperf3, tcpdump), SETUID/SETGID (FRR and tcpdump drop
# to their users), DAC_OVERRIDE, CHOWN, FOWNER, KILL, SYS_NICE, SYS_RESOURCE, IPC_*.
DROPPED_CAPS = ("sys_admin", "sys_ptrace", "sys_module", "sys_rawio", "sys_boot",
                "dac_read_search", "mknod", "sys_time", "setfcap", "mac_admin", "mac_override",
                "audit_control", "syslog", "bpf", "perfmon", "checkpoint_restore",
                "linux_immutable", "sys_pacct", "sys_tty_config", "wake_alarm", "block_suspend")
