# Armada's parameter study as a template (Netbed, OSDI 2002, section 7.2): a bulk TCP
# transfer across a bottleneck whose bandwidth and delay are template parameters.
#   wanlab sweep examples/armada/armada-sweep.tcl -p bw=2Mb,5Mb,10Mb -p delay=5ms,20ms,40ms \
#       --repeat 2 --both --out /tmp/armada-sweep
# (or python3 examples/armada/run.py, which does that and writes bench/results/).
set ns [new Simulator]
source tb_compat.tcl

$ns define-template-parameter bw 10Mb "bottleneck bandwidth"
$ns define-template-parameter delay 10ms "bottleneck one-way delay"
$ns define-template-parameter duration 8 "seconds of transfer"

set client [$ns node]
set router [$ns node]
set server [$ns node]
$ns duplex-link $client $router 100Mb 1ms DropTail
set bottleneck [$ns duplex-link $router $server $bw $delay DropTail]


# CUBIC, as Linux's TCP in the emulated nodes, so that both modes run one algorithm
set tcp0 [new Agent/TCP/Linux]
$tcp0 select_ca cubic
$ns attach-agent $client $tcp0
set sink0 [new Agent/TCPSink]
$ns attach-agent $server $sink0
$ns connect $tcp0 $sink0
set ftp0 [new Application/FTP]
$ftp0 attach-agent $tcp0

$ns at 0.5 "$ftp0 start"
$ns at [expr {0.5 + $duration}] "$ftp0 stop"
$ns run
