# Netbed (OSDI 2002) §7.1, Figure 8: the New Reno "one drop" test. One TCP New Reno
# bulk transfer crosses a 1.5 Mbit/s, 20 ms bottleneck; exactly one of its data
# packets is dropped (the next one after t = 2 s). The sender should see three
# duplicate ACKs, fast-retransmit at once and halve its window: no timeout.
#
#   wanlab compare examples/onedrop/onedrop.tcl    # Linux TCP vs simulated NewReno
#   wanlab run --simulate examples/onedrop/onedrop.tcl
set ns [new Simulator]
source tb_compat.tcl

set s1 [$ns node]
set r1 [$ns node]
set k1 [$ns node]
$ns duplex-link $s1 $r1 10Mb 2ms DropTail
set bottleneck [$ns duplex-link $r1 $k1 1.5Mb 20ms DropTail]
$ns queue-limit $r1 $k1 50

# window_ caps the window below the queue's capacity, so the one drop is the only loss
set tcp [new Agent/TCP/Newreno]
$tcp set packetSize_ 1000
$tcp set window_ 20
$ns attach-agent $s1 $tcp
set sink [new Agent/TCPSink]
$ns attach-agent $k1 $sink
$ns connect $tcp $sink
set ftp [new Application/FTP]
$ftp attach-agent $tcp

$ns at 0.5 "$ftp start"
$ns at 2.0 "$bottleneck drop 1 ab"
$ns at 6.0 "$ftp stop"
$ns run
