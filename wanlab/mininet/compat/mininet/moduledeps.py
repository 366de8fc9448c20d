"""Mininet's module checks: wanlab needs no kernel module for its switches."""


def lsmod():
    return ""


def modprobe(mod):
    return ""


def moduleDeps(subtract=None, add=None):
    pass


def pathCheck(*args, **kwargs):
    import shutil
    for a in args:
        if not shutil.which(a):
            raise SystemExit(f"Cannot find required executable {a}.")
