# A LAN of four nodes (100Mb, 4ms member-to-member) with a slow member and a
# lossy uplink to a server.  Same experiment as lan.yaml and lan.py.
set ns [new Simulator]
source tb_compat.tcl

set server [$ns node]
set gw [$ns node]
foreach i {1 2 3} { set h($i) [$ns node] }

set lan0 [$ns make-lan "$gw $h(1) $h(2) $h(3)" 100Mb 4ms]
tb-set-node-lan-params $h(3) $lan0 10ms 10Mb 0.0
tb-set-lan-loss $lan0 0.01

set uplink [$ns duplex-link $gw $server 1Gb 25ms DropTail]
tb-set-link-loss $uplink 0.001
tb-set-ip-link $server $uplink 10.9.0.2

$ns at 30 "$uplink down"
$ns at 40 "$uplink up"
$ns run
