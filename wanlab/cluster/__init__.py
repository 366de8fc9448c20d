"""The cluster: one experiment over several machines, on Ray (issue 13).

``local`` makes and removes the local test cluster (machines as network namespaces),
``connect`` attaches this process to a cluster as a Ray driver, ``agent`` is the
long-lived host agent each machine runs (a Ray actor pinned to it), and ``experiment``
splits an experiment over machines and drives its parts through their agents. Without a
cluster nothing here is imported and no Ray process runs.
"""
