# Netbed Figure 2 with a slower, longer bottleneck (1Mb, 50ms): for `wanlab modify`.
# (The paper writes comments after commands with '#'; real Tcl needs ';#'.)
set ns [new Simulator]                  ;# Create the simulator
source tb_compat.tcl                    ;# Add Netbed commands
$ns rtproto Static                      ;# Netbed computes routes

set source [$ns node]                   ;# define new nodes
set router [$ns node]
set dest   [$ns node]

# Connect source to router and router to dest
$ns duplex-link $source $router 10Mb 0ms RED
$ns duplex-link $router $dest 1Mb 50ms DropTail

tb-set-node-os $source FBSD45-STD       ;# Set OS on local node
tb-set-hardware $dest pc-inet           ;# Request distributed node

$ns run                                 ;# "run" on Netbed
