# PrimoGENI (Van Vorst, Erazo, Liu), Fig. 4: one TCP flow across a dumbbell. Two routers
# joined by a 10 Mbit/s, 64 ms bottleneck; hosts attached by 1 Gbit/s links with
# negligible delay; 64 KB buffers on every interface.
#
#   wanlab compare examples/dumbbell/dumbbell.tcl
set ns [new Simulator]
source tb_compat.tcl

set h1 [$ns node]
set r1 [$ns node]
set r2 [$ns node]
set h2 [$ns node]
$ns duplex-link $h1 $r1 1Gb 0.01ms DropTail
set bottleneck [$ns duplex-link $r1 $r2 10Mb 64ms DropTail]
$ns duplex-link $r2 $h2 1Gb 0.01ms DropTail
# 64 KB buffers (64 packets of 1000-byte segments) on the routers' interfaces. A host's
# own interface keeps Linux's txqueuelen of 1000 packets: an emulated host has it whatever
# the link says, so the simulated host gets it too
foreach {x y} [list $r1 $h1 $r1 $r2 $r2 $r1 $r2 $h2] { $ns queue-limit $x $y 64 }
foreach {x y} [list $h1 $r1 $h2 $r2] { $ns queue-limit $x $y 1000 }

set tcp [new Agent/TCP/Linux]
$tcp select_ca cubic
$tcp set packetSize_ 1000
$ns attach-agent $h1 $tcp
set sink [new Agent/TCPSink]
$ns attach-agent $h2 $sink
$ns connect $tcp $sink
set ftp [new Application/FTP]
$ftp attach-agent $tcp

$ns at 0.5 "$ftp start"
$ns at 60.5 "$ftp stop"
$ns run
