# An Armada-style timeline (Netbed, OSDI 2002, §7.2): a bulk TCP transfer runs
# while the bottleneck's bandwidth and delay change in steps.
#   wanlab run examples/armada.tcl     -> throughput over time, as a PNG
set ns [new Simulator]
source tb_compat.tcl

set client [$ns node]
set router [$ns node]
set server [$ns node]
$ns duplex-link $client $router 100Mb 1ms DropTail
set bottleneck [$ns duplex-link $router $server 10Mb 10ms DropTail]

set tcp0 [new Agent/TCP]
$ns attach-agent $client $tcp0
set sink0 [new Agent/TCPSink]
$ns attach-agent $server $sink0
$ns connect $tcp0 $sink0
set ftp0 [new Application/FTP]
$ftp0 attach-agent $tcp0

# background CBR: 1 Mbit/s of 1000-byte packets from the router
set udp0 [new Agent/UDP]
$ns attach-agent $router $udp0
set null0 [new Agent/Null]
$ns attach-agent $server $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 set packetSize_ 1000
$cbr0 set rate_ 1Mb
$cbr0 attach-agent $udp0

$ns at 0.5  "$ftp0 start"
$ns at 0.5  "$cbr0 start"
# the steps: bandwidth every 4 s, then a longer delay
set t 4.5
foreach bw {5Mb 2Mb 8Mb 10Mb} {
    $ns at $t "$bottleneck bandwidth $bw"
    set t [expr {$t + 4}]
}
$ns at 16.5 "$bottleneck delay 40ms"
$ns at 20.5 "$ftp0 stop"
$ns at 20.5 "$cbr0 stop"
$ns run
