"""``mininet.clean``: what ``mn -c`` does. On wanlab every experiment a script made is
terminated by the script's own ``net.stop()`` or, at its exit, by ``wanlab mininet``;
nothing is ever removed by pattern, so ``cleanup()`` ends the experiments of this process."""


def cleanup():
    from mininet.net import Mininet
    Mininet.stopAll()


class Cleanup:
    cleanup = staticmethod(cleanup)
