# PrimoGENI, Fig. 5: TCP fairness on the dumbbell. Two hosts on each side; the second
# flow starts 20 s after the first; both should converge to a fair share of 10 Mbit/s.
#
#   wanlab compare examples/dumbbell/fairness.tcl
set ns [new Simulator]
source tb_compat.tcl

set r1 [$ns node]
set r2 [$ns node]
set core [$ns duplex-link $r1 $r2 10Mb 64ms DropTail]
foreach n {a1 a2 b1 b2} { set $n [$ns node] }
set access [list $a1 $r1 $a2 $r1 $r2 $b1 $r2 $b2]
foreach {x y} $access { $ns duplex-link $x $y 1Gb 0.01ms DropTail }
# 64 KB buffers (64 packets of 1000-byte segments) on the routers' interfaces; the hosts'
# own interfaces keep Linux's txqueuelen of 1000 packets (as in dumbbell.tcl)
$ns queue-limit $r1 $r2 64
$ns queue-limit $r2 $r1 64
foreach {host router} [list $a1 $r1 $a2 $r1 $b1 $r2 $b2 $r2] {
    $ns queue-limit $host $router 1000
    $ns queue-limit $router $host 64
}

foreach {i src dst start} [list 1 $a1 $b1 0.5 2 $a2 $b2 20.5] {
    set tcp($i) [new Agent/TCP/Linux]
    $tcp($i) select_ca cubic
    $tcp($i) set packetSize_ 1000
    $ns attach-agent $src $tcp($i)
    set sink($i) [new Agent/TCPSink]
    $ns attach-agent $dst $sink($i)
    $ns connect $tcp($i) $sink($i)
    set ftp($i) [new Application/FTP]
    $ftp($i) attach-agent $tcp($i)
    $ns at $start "$ftp($i) start"
    $ns at 100.5 "$ftp($i) stop"
}
$ns run
