# VINI's Abilene experiment (Bavier et al., SIGCOMM 2006, §5.2, Figure 8) on wanlab.
#
# The 11 Abilene PoPs and the 14 backbone links. Each link's one-way delay is the
# great-circle distance between its cities at 200 000 km/s (light in fibre), so real
# fibre routes would be somewhat longer. Its OSPF weight is that distance in km,
# which makes OSPF prefer the shortest path, as latency-based weights do. Weights and
# delays are both computed below from the cities' coordinates; no outside data is used.
# Links are 100 Mbit/s, scaled down from Abilene's 10 Gbit/s to suit a 2-core machine;
# a ping stream does not depend on that.
#
# Timeline: Washington pings Seattle every 100 ms; Denver-Kansas City fails at 12 s and
# is restored at 38 s; the ping stops at 60 s. OSPF (FRR) reroutes around the failure,
# which it learns from carrier loss, without any change to its configuration.
#   python3 examples/abilene/run.py          (plot + summary in bench/results/)
set ns [new Simulator]
source tb_compat.tcl
$ns rtproto OSPF
tb-set-ospf-timers 1 4

define-template-parameter TRAFFIC ping "ping (VINI Fig. 8) or tcp (Fig. 9)"

# city -> {latitude longitude}
array set where {
    seattle       {47.61 -122.33}
    sunnyvale     {37.37 -122.04}
    losangeles    {34.05 -118.24}
    denver        {39.74 -104.99}
    kansascity    {39.10  -94.58}
    houston       {29.76  -95.37}
    chicago       {41.88  -87.63}
    indianapolis  {39.77  -86.16}
    atlanta       {33.75  -84.39}
    washington    {38.91  -77.04}
    newyork       {40.71  -74.01}
}
foreach city [lsort [array names where]] {
    set $city [$ns node]
}

proc km {a b} {
    global where
    set r 0.017453292519943295
    lassign $where($a) la1 lo1
    lassign $where($b) la2 lo2
    set c [expr {sin($la1*$r)*sin($la2*$r) + cos($la1*$r)*cos($la2*$r)*cos(($lo2-$lo1)*$r)}]
    return [expr {6371.0 * acos(min(1.0, $c))}]
}

foreach {a b} {
    seattle sunnyvale    seattle denver       sunnyvale losangeles  sunnyvale denver
    losangeles houston   denver kansascity    kansascity houston    kansascity indianapolis
    houston atlanta      indianapolis chicago indianapolis atlanta  chicago newyork
    atlanta washington   newyork washington
} {
    set d [km $a $b]
    set L($a-$b) [$ns duplex-link [set $a] [set $b] 100Mb [format %.3fms [expr {$d / 200.0}]] DropTail]
    $ns cost [set $a] [set $b] [expr {max(1, round($d))}]
}

if {$TRAFFIC eq "ping"} {
    set pinger [new Program $ns]
    $pinger set node $washington
    # from Washington's loopback address to Seattle's (node names resolve to loopbacks
    # with dynamic routing), so both directions follow the routers' shortest path
    $pinger set command {ping -n -D -i 0.1 -c 600 -I $(getent hosts washington | cut -d" " -f1) seattle}
    $ns at 0 "$pinger start"
    $ns at 60 "$pinger stop"
} else {
    set tcp0 [new Agent/TCP]
    $ns attach-agent $washington $tcp0
    set sink0 [new Agent/TCPSink]
    $ns attach-agent $seattle $sink0
    $ns connect $tcp0 $sink0
    set ftp0 [new Application/FTP]
    $ftp0 attach-agent $tcp0
    $ns at 0 "$ftp0 start"
    $ns at 60 "$ftp0 stop"
}
$ns at 12 "$L(denver-kansascity) down"
$ns at 38 "$L(denver-kansascity) up"
$ns run
