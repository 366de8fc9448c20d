"""xterms of nodes: refused (wanlab has no display; ``wanlab shell EXP NODE`` is its console)."""
from wanlab.mininet.refuse import refuse


def _no(*a, **k):
    raise refuse("makeTerm/xterm", "wanlab opens no terminals; use 'wanlab shell "
                 "EXPERIMENT NODE' for a node's console")


makeTerm = makeTerms = runX11 = cleanUpScreens = tunnelX11 = _no
