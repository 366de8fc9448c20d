# An Emulab-style experiment: tb_compat, a proc that builds a chain of
# routers in an array, a LAN of clients, Program objects, CBR traffic and
# timed events.
set ns [new Simulator]
source tb_compat.tcl

define-template-parameter NROUTERS 3 "number of routers in the chain"

proc chain {ns count} {
    global r l
    for {set i 0} {$i < $count} {incr i} {
        set r($i) [$ns node]
        tb-set-hardware $r($i) pc850
        if {$i > 0} {
            set l($i) [$ns duplex-link $r([expr {$i - 1}]) $r($i) 100Mb 5ms DropTail]
        }
    }
}
chain $ns $NROUTERS

set server [$ns node]
set client1 [$ns node]
set client2 [$ns node]
tb-set-node-os $server UBUNTU22-64-STD
tb-set-node-startcmd $server "/usr/bin/env python3 -m http.server 8080"

set bottleneck [$ns duplex-link $r([expr {$NROUTERS - 1}]) $server 10Mb 20ms RED]
set q [[$ns link $r([expr {$NROUTERS - 1}]) $server] queue]
$q set limit_ 100
$q set thresh_ 10
$q set maxthresh_ 40
$q set gentle_ true

set clients [$ns make-lan "$r(0) $client1 $client2" 100Mb 2ms]
tb-set-ip-lan $client1 $clients 10.1.1.2
tb-set-netmask $clients 255.255.255.0
$ns rtproto Static

# Programs
set fetch [new Program $ns]
$fetch set node $client1
$fetch set command "curl -s http://server:8080/ -o /dev/null"
$fetch set timeout 30

# CBR over UDP from client2 to server
set udp0 [new Agent/UDP]
$ns attach-agent $client2 $udp0
set cbr0 [new Application/Traffic/CBR]
$cbr0 set packetSize_ 500
$cbr0 set rate_ 2Mb
$cbr0 attach-agent $udp0
set null0 [new Agent/Null]
$ns attach-agent $server $null0
$ns connect $udp0 $null0

$ns at 5.0 "$cbr0 start"
$ns at 10.0 "$fetch start"
$ns at 20.0 "$bottleneck bandwidth 5Mb"
$ns at 30.0 "$bottleneck down"
$ns at 35.0 "$bottleneck up"
$ns at 60.0 "$cbr0 stop"

$ns run
