"""Running an experiment over time: the event scheduler, tevc, programs and traffic agents.

At swap-in each experiment gets its own scheduler process
(:mod:`wanlab.run.scheduler`). It defines t = 0 as the moment swap-in
finished (every node up, start commands launched), then fires the stored
timeline (``$ns at``) on time, accepts dynamic events (``wanlab tevc``) and
streams every fired event, with its outcome and lateness, to subscribers
(``wanlab events --follow``). The objects events act on (links, LANs,
programs, traffic agents, nodes, the simulator) are in
:mod:`wanlab.run.objects`.
"""
