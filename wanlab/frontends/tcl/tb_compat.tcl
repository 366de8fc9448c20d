# wanlab's tb_compat.tcl: Emulab's tb-* commands.  Loaded after prelude.tcl;
# a script's own `source tb_compat.tcl` (any path) is a no-op.  Each command
# follows Emulab's tb_compat.tcl (checked when it is called, as Emulab does);
# where they differ, docs/ns-reference.md says so.  Commands that only make
# sense on a testbed of many machines are accepted, recorded where the IR has
# a field for them, and produce one warning saying what wanlab does instead.

# -- addresses and routing ------------------------------------------------------

proc ::wl::check_ip {ip what} {
    if {![regexp {^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$} $ip -> a b c d]
            || $a > 255 || $b > 255 || $c > 255 || $d > 255} {
        ::wl::fail "$what: '$ip' is not an IPv4 address"
    }
}

proc ::wl::set_link_ip {link node ip what} {
    if {[::wl::get_attr $link a] eq $node} { ::wl::set_attr $link ip_a $ip
    } elseif {[::wl::get_attr $link b] eq $node} { ::wl::set_attr $link ip_b $ip
    } else { ::wl::fail "$what: [::wl::N $node] is not an end of link [::wl::N $link]" }
}

# Emulab: the node must have exactly one link or LAN *now*; the address goes on it
# (a link or LAN added later gets its own address).
proc tb-set-ip {node ip} {
    set h [::wl::need $node Node tb-set-ip]
    ::wl::check_ip $ip tb-set-ip
    set ifs $::wl::ifaces($h)
    if {[llength $ifs] != 1} {
        set n [llength $ifs]
        ::wl::fail "tb-set-ip: node $node has [expr {$n ? $n : "no"}] link[expr {$n == 1 ? "" : "s"}] or LANs at this point of the script; tb-set-ip needs exactly one (use tb-set-ip-link, tb-set-ip-lan or tb-set-ip-interface)"
    }
    lassign [lindex $ifs 0] kind obj
    if {$kind eq "link"} {
        ::wl::set_link_ip $obj $h $ip tb-set-ip
    } else {
        ::wl::set_attr $obj m,$h,ip $ip
    }
}

proc tb-set-ip-interface {src dst ip} {
    set link [::wl::link_between $src $dst tb-set-ip-interface]
    ::wl::check_ip $ip tb-set-ip-interface
    ::wl::set_link_ip $link [::wl::H $src] $ip tb-set-ip-interface
}

proc tb-set-ip-link {src link ip} {
    set h [::wl::need $src Node tb-set-ip-link]
    set l [::wl::need $link Link tb-set-ip-link]
    ::wl::check_ip $ip tb-set-ip-link
    ::wl::set_link_ip $l $h $ip tb-set-ip-link
}

proc tb-set-ip-lan {src lan ip} {
    set h [::wl::need $src Node tb-set-ip-lan]
    set l [::wl::need $lan Lan tb-set-ip-lan]
    ::wl::check_ip $ip tb-set-ip-lan
    if {![info exists ::wl::member($l,$h)]} { ::wl::fail "tb-set-ip-lan: $src is not a member of LAN $lan" }
    ::wl::set_attr $l m,$h,ip $ip
}

# -- IPv6 (wanlab extensions; docs/ns-reference.md) ------------------------------
# The addresses are checked by the front end (Python's parser), at the command's line.

proc tb-set-ipv6 {mode} { dict set ::wl::ipv6 mode [::wl::lv $mode] }

proc tb-set-ip6-prefix {prefix} { dict set ::wl::ipv6 prefix [::wl::lv $prefix] }

proc ::wl::set_link_ip6 {link node ip what} {
    if {[::wl::get_attr $link a] eq $node} { ::wl::set_attr $link ip6_a $ip
    } elseif {[::wl::get_attr $link b] eq $node} { ::wl::set_attr $link ip6_b $ip
    } else { ::wl::fail "$what: [::wl::N $node] is not an end of link [::wl::N $link]" }
}

# as tb-set-ip: the node's one link or LAN at this point of the script
proc tb-set-ip6 {node ip} {
    set h [::wl::need $node Node tb-set-ip6]
    set ifs $::wl::ifaces($h)
    if {[llength $ifs] != 1} {
        set n [llength $ifs]
        ::wl::fail "tb-set-ip6: node $node has [expr {$n ? $n : "no"}] link[expr {$n == 1 ? "" : "s"}] or LANs at this point of the script; tb-set-ip6 needs exactly one (use tb-set-ip6-link, tb-set-ip6-lan or tb-set-ip6-interface)"
    }
    lassign [lindex $ifs 0] kind obj
    if {$kind eq "link"} {
        ::wl::set_link_ip6 $obj $h $ip tb-set-ip6
    } else {
        ::wl::set_attr $obj m,$h,ip6 $ip
    }
}

proc tb-set-ip6-interface {src dst ip} {
    set link [::wl::link_between $src $dst tb-set-ip6-interface]
    ::wl::set_link_ip6 $link [::wl::H $src] $ip tb-set-ip6-interface
}

proc tb-set-ip6-link {src link ip} {
    set h [::wl::need $src Node tb-set-ip6-link]
    set l [::wl::need $link Link tb-set-ip6-link]
    ::wl::set_link_ip6 $l $h $ip tb-set-ip6-link
}

proc tb-set-ip6-lan {src lan ip} {
    set h [::wl::need $src Node tb-set-ip6-lan]
    set l [::wl::need $lan Lan tb-set-ip6-lan]
    if {![info exists ::wl::member($l,$h)]} { ::wl::fail "tb-set-ip6-lan: $src is not a member of LAN $lan" }
    ::wl::set_attr $l m,$h,ip6 $ip
}

proc tb-set-netmask {lanlink mask} {
    set h [::wl::need $lanlink {Link Lan} tb-set-netmask]
    ::wl::set_attr $h netmask $mask
}

# Emulab: none | ospf; wanlab also takes its rtproto names.  none = no routes
# computed (rtproto Manual: only the script's add-route).
proc tb-set-ip-routing {type} {
    if {[string tolower $type] eq "none"} { set type manual }
    ::wl::set_rtproto $type tb-set-ip-routing
}

proc tb-use-ipassign {args} {
    ::wl::warn "tb-use-ipassign: ignored; wanlab's planner always assigns addresses"
}

# -- nodes ---------------------------------------------------------------------

proc tb-set-hardware {node type args} {
    set h [::wl::need $node Node tb-set-hardware]
    ::wl::set_attr $h hardware $type
    ::wl::warn "tb-set-hardware $type: recorded; ignored: all nodes run as namespaces on this host"
}

# tb-fix-node NODE MACHINE: on a cluster (create --cluster) the node runs on that machine
proc tb-fix-node {node machine} {
    set h [::wl::need $node Node tb-fix-node]
    ::wl::set_attr $h fixed $machine
}

# tb-set-node-wide-area NODE: on a cluster the node runs on a wide-area machine chosen by
# wanassign; a link between two wide-area nodes asks for that delay/bandwidth of the real path
proc tb-set-node-wide-area {node {on 1}} {
    set h [::wl::need $node Node tb-set-node-wide-area]
    if {![string is boolean -strict $on]} {
        ::wl::fail "tb-set-node-wide-area: $on is not a boolean"
    }
    ::wl::set_attr $h wide_area [expr {$on ? 1 : 0}]
}

proc tb-set-node-os {node os {parentos 0}} {
    set h [::wl::need $node Node tb-set-node-os]
    ::wl::set_attr $h os $os
}

# tb-set-node-tarfiles NODE DIR TARBALL ?DIR TARBALL ...?: unpacked in the node's own root
proc tb-set-node-tarfiles {node args} {
    set h [::wl::need $node Node tb-set-node-tarfiles]
    if {[llength $args] == 0 || [llength $args] % 2 != 0} {
        ::wl::fail "tb-set-node-tarfiles: give NODE then pairs of DIR TARBALL"
    }
    foreach {dir tarball} $args {
        set i [::wl::get_attr $h ntarfiles 0]
        ::wl::set_attr $h tarfile,$i,dir $dir
        ::wl::set_attr $h tarfile,$i,file $tarball
        ::wl::set_attr $h ntarfiles [expr {$i + 1}]
    }
}

# tb-set-node-rpms NODE PKG ...: Debian equivalents (or .deb files) installed in its root
proc tb-set-node-rpms {node args} {
    set h [::wl::need $node Node tb-set-node-rpms]
    if {[llength $args] == 0} { ::wl::fail "tb-set-node-rpms: give NODE then packages" }
    foreach p $args {
        set i [::wl::get_attr $h nrpms 0]
        ::wl::set_attr $h rpm,$i $p
        ::wl::set_attr $h nrpms [expr {$i + 1}]
    }
}

proc tb-set-node-startcmd {node cmd} {
    set h [::wl::need $node Node tb-set-node-startcmd]
    ::wl::set_attr $h startcmd $cmd
}

proc tb-set-node-startup {node cmd} {
    set h [::wl::need $node Node tb-set-node-startup]
    ::wl::set_attr $h startcmd $cmd
}

# wanlab extensions (the facility's swap policy; Emulab set these on its web form):
# tb-set-idleswap TIME (swap out after TIME without activity), tb-set-maxduration TIME,
# tb-set-noidleswap "reason". TIME is seconds, or with s/min/h/d.
proc tb-set-idleswap {time} { dict set ::wl::swap idle [::wl::lv $time] }
proc tb-set-maxduration {time} { dict set ::wl::swap maxduration [::wl::lv $time] }
proc tb-set-noidleswap {reason} { dict set ::wl::swap noidle [::wl::lv $reason] }

# tb-set-engine-threads N|auto (wanlab extension): the real-time engine's partitions, each on
# its own pinned thread (docs/architecture.md, "The engine on several cores").
proc tb-set-engine-threads {n} { dict set ::wl::engine threads [::wl::lv $n] }
# tb-set-engine-cores N (wanlab extension): CPUs reserved for the engine, which no node runs on
# (0: none; docs/resources.md)
proc tb-set-engine-cores {n} { dict set ::wl::engine cores [::wl::lv $n] }

# -- node resources (wanlab extensions; docs/resources.md): a cgroup per node --------

proc tb-set-node-cpu {node cores} {
    ::wl::set_attr [::wl::need $node Node tb-set-node-cpu] cpu $cores
}

proc tb-set-node-memory {node amount} {
    ::wl::set_attr [::wl::need $node Node tb-set-node-memory] memory $amount
}

proc tb-set-node-pids {node count} {
    ::wl::set_attr [::wl::need $node Node tb-set-node-pids] pids $count
}

proc tb-set-node-cpus {node cpulist} {
    ::wl::set_attr [::wl::need $node Node tb-set-node-cpus] cpus $cpulist
}

proc tb-set-node-cpu-weight {node weight} {
    ::wl::set_attr [::wl::need $node Node tb-set-node-cpu-weight] cpu_weight $weight
}

# -- the edge (wanlab extensions; docs/edge.md): egress, port forwards, WireGuard --------

# tb-set-node-egress NODE 1: a route out of the experiment through its edge gateway
proc tb-set-node-egress {node on} {
    ::wl::set_attr [::wl::need $node Node tb-set-node-egress] egress $on
}

# tb-set-node-forward NODE PORT ?PROTO? ?LISTEN?: outside clients reach PORT of NODE at
# port LISTEN (default PORT) of the edge gateway's uplink address
proc tb-set-node-forward {node port {proto tcp} {listen ""}} {
    set h [::wl::need $node Node tb-set-node-forward]
    set i [::wl::get_attr $h nforwards 0]
    ::wl::set_attr $h forward,$i,port $port
    ::wl::set_attr $h forward,$i,proto $proto
    if {$listen ne ""} { ::wl::set_attr $h forward,$i,listen $listen }
    ::wl::set_attr $h nforwards [expr {$i + 1}]
}

# tb-set-edge-uplink IFACE ADDRESS/LEN VIA: the gateway's way out is this host interface
proc tb-set-edge-uplink {iface address via} {
    dict set ::wl::edge interface [::wl::lv $iface]
    dict set ::wl::edge address [::wl::lv $address]
    dict set ::wl::edge via [::wl::lv $via]
}

# tb-set-edge-params DELAY ?BANDWIDTH? ?LOSS?: the shaping between nodes and the gateway
proc tb-set-edge-params {delay {bandwidth 0} {loss 0}} {
    dict set ::wl::edge delay [::wl::lv $delay]
    dict set ::wl::edge bandwidth [::wl::lv $bandwidth]
    dict set ::wl::edge loss [::wl::lv $loss]
}

# tb-set-edge-gateway NAME: the gateway node's name (default edge)
proc tb-set-edge-gateway {name} { dict set ::wl::edge gateway [::wl::lv $name] }

# tb-set-edge-wireguard ?PORT?: a WireGuard endpoint on the gateway (default port 51820)
proc tb-set-edge-wireguard {{port 51820}} { dict set ::wl::edge wireguard [::wl::lv $port] }

proc ::wl::ignored {name why} {
    proc ::$name {args} [list ::wl::warn "$name: $why"]
}

::wl::ignored tb-set-node-cmdline "ignored: nodes share the host's kernel"
::wl::ignored tb-set-node-failure-action "ignored: a node that fails to set up always fails the swap-in"
::wl::ignored tb-set-colocate-factor "ignored: all nodes run on this host"
::wl::ignored tb-set-cpu-usage "ignored: all nodes run on this host"
::wl::ignored tb-set-mem-usage "ignored: all nodes run on this host"
::wl::ignored tb-set-sync-server "ignored: wanlab has no emulab-sync server"
::wl::ignored tb-make-soft-vtype "ignored: all nodes run on this host (no hardware types)"
::wl::ignored tb-make-hard-vtype "ignored: all nodes run on this host (no hardware types)"
::wl::ignored tb-make-weighted-vtype "ignored: all nodes run on this host (no hardware types)"
::wl::ignored tb-set-node-usesharednode "ignored: all nodes run on this host"
::wl::ignored tb-set-tarfiles "ignored: give each node its tarfiles with tb-set-node-tarfiles"
::wl::ignored tb-set-node-deltas "ignored: no image deltas (a node's image is named with tb-set-node-os)"
::wl::ignored tb-set-node-id "ignored: wanlab numbers nothing by hand"
::wl::ignored tb-elab-in-elab "ignored: wanlab cannot run an Emulab inside an experiment"
::wl::ignored tb-elab-in-elab-topology "ignored: wanlab cannot run an Emulab inside an experiment"

# -- links ---------------------------------------------------------------------

# tb-set-link-loss LINK RATE             Emulab: the whole link (each direction loses RATE)
# tb-set-link-loss SRC DST RATE          Emulab: the link joining SRC and DST, both directions
# tb-set-link-loss LINK SRC RATE         wanlab: direction SRC -> other end only
# tb-set-link-loss [$ns link A B] RATE   wanlab: direction A -> B only
# tb-set-link-loss LAN RATE              wanlab: as tb-set-lan-loss
proc tb-set-link-loss {obj args} {
    switch -- [llength $args] {
        1 {
            set rate [lindex $args 0]
            if {![::wl::is_obj $obj {Lan Simplex}]} { ::wl::need $obj Link tb-set-link-loss }
            set h [::wl::H $obj]
            switch -- $::wl::cls($h) {
                Simplex { ::wl::set_attr [::wl::get_attr $h parent] [::wl::get_attr $h dir],loss $rate }
                Lan { ::wl::set_attr $h loss $rate }
                Link {
                    ::wl::set_attr $h ab,loss $rate
                    ::wl::set_attr $h ba,loss $rate
                }
            }
        }
        2 {
            lassign $args x rate
            if {[::wl::is_obj $obj Link]} {
                set h [::wl::H $obj]
                set d [::wl::dir_from $h [::wl::need $x Node tb-set-link-loss] tb-set-link-loss]
                ::wl::set_attr $h $d,loss $rate
            } else {
                set h [::wl::link_between $obj $x tb-set-link-loss]
                ::wl::set_attr $h ab,loss $rate
                ::wl::set_attr $h ba,loss $rate
            }
        }
        default { ::wl::fail "wrong # args: should be \"tb-set-link-loss link ?src? rate\" or \"tb-set-link-loss src dst rate\"" }
    }
}

proc ::wl::dir_from {link node what} {
    if {[::wl::get_attr $link a] eq $node} { return ab }
    if {[::wl::get_attr $link b] eq $node} { return ba }
    ::wl::fail "$what: [::wl::N $node] is not an end of link [::wl::N $link]"
}

proc tb-set-link-simplex-params {link src delay bw loss} {
    set link [::wl::need $link Link tb-set-link-simplex-params]
    set src [::wl::need $src Node tb-set-link-simplex-params]
    set d [::wl::dir_from $link $src tb-set-link-simplex-params]
    ::wl::set_attr $link $d,delay $delay
    ::wl::set_attr $link $d,bw $bw
    ::wl::set_attr $link $d,loss $loss
}

::wl::ignored tb-set-link-est-bandwidth "ignored: the engine shapes to the declared bandwidth"
::wl::ignored tb-set-link-backfill "ignored: the engine shapes to the declared bandwidth"
::wl::ignored tb-set-link-failure-action "ignored: a link that fails to set up always fails the swap-in"

# -- LANs --------------------------------------------------------------------------

proc tb-set-lan-loss {lan rate} {
    ::wl::set_attr [::wl::need $lan Lan tb-set-lan-loss] loss $rate
}

# {node-handle lan-handle} of a member, checked
proc ::wl::lan_member {node lan what} {
    set n [::wl::need $node Node $what]
    set l [::wl::need $lan Lan $what]
    if {![info exists ::wl::member($l,$n)]} { ::wl::fail "$what: $node is not a member of LAN $lan" }
    return [list $n $l]
}

proc tb-set-lan-simplex-params {lan node todelay tobw toloss fromdelay frombw fromloss} {
    lassign [::wl::lan_member $node $lan tb-set-lan-simplex-params] node lan
    foreach {k v} [list to,delay $todelay to,bw $tobw to,loss $toloss \
                        from,delay $fromdelay from,bw $frombw from,loss $fromloss] {
        ::wl::set_attr $lan m,$node,$k $v
    }
}

proc tb-set-node-lan-delay {node lan delay} {
    lassign [::wl::lan_member $node $lan tb-set-node-lan-delay] node lan
    foreach d {to from} { ::wl::set_attr $lan m,$node,$d,delay $delay }
}

proc tb-set-node-lan-bandwidth {node lan bw} {
    lassign [::wl::lan_member $node $lan tb-set-node-lan-bandwidth] node lan
    foreach d {to from} { ::wl::set_attr $lan m,$node,$d,bw $bw }
}

proc tb-set-node-lan-loss {node lan loss} {
    lassign [::wl::lan_member $node $lan tb-set-node-lan-loss] node lan
    foreach d {to from} { ::wl::set_attr $lan m,$node,$d,loss $loss }
}

proc tb-set-node-lan-params {node lan delay bw loss} {
    lassign [::wl::lan_member $node $lan tb-set-node-lan-params] node lan
    foreach d {to from} {
        ::wl::set_attr $lan m,$node,$d,delay $delay
        ::wl::set_attr $lan m,$node,$d,bw $bw
        ::wl::set_attr $lan m,$node,$d,loss $loss
    }
}

# wanlab extension: per-pair channels (a latency matrix; docs/ns-reference.md).
#   tb-set-lan-matrix $lan delay {{0 10ms 20ms} {10ms 0 30ms} {20ms 30ms 0}}
#   tb-set-lan-matrix $lan bandwidth|loss {...}       (optional, same shape)
#   tb-set-lan-matrix $lan csv FILE                   (relative to the script)
proc tb-set-lan-matrix {lan what value} {
    set l [::wl::need $lan Lan tb-set-lan-matrix]
    if {$what eq "csv"} { ::wl::set_attr $l matrix,csv $value; return }
    if {$what ni {delay bandwidth loss jitter duplicate corrupt}} {
        ::wl::fail "tb-set-lan-matrix: '$what' unknown; use delay, bandwidth, loss, jitter, duplicate, corrupt or csv"
    }
    if {[catch {llength $value} n]} { ::wl::fail "tb-set-lan-matrix: the $what matrix is not a Tcl list" }
    set i 0
    foreach row $value {
        if {[catch {join $row " "} r]} { ::wl::fail "tb-set-lan-matrix: row $i of the $what matrix is not a Tcl list" }
        ::wl::set_attr $l matrix,$what,$i $r
        incr i
    }
    ::wl::set_attr $l matrix,$what,n $n
}

# wanlab extension: gateway mode (hitbox): shaping only on frames to the gateway.
#   tb-set-lan-gateway $lan $node DELAY BW LOSS ?to|from|both?
proc tb-set-lan-gateway {lan node delay bw loss {direction to}} {
    lassign [::wl::lan_member $node $lan tb-set-lan-gateway] node lan
    ::wl::set_attr $lan gw,node $node
    foreach {k v} [list delay $delay bw $bw loss $loss dir $direction] {
        ::wl::set_attr $lan gw,$k $v
    }
}

# wanlab extensions: netem's impairments (docs/impairments.md), each with netem's words.
#   tb-set-link-jitter LINK|[$ns link A B]|LAN JITTER ?DIST? ?CORRELATION? ?reorder?
#   tb-set-link-duplicate OBJ P         tb-set-link-corrupt OBJ P
#   tb-set-link-reorder OBJ P ?gap N?   tb-set-link-lossmodel OBJ gemodel|state|random ARGS...
#   tb-set-link-overhead OBJ BYTES      tb-set-link-cellsize OBJ BYTES
#   tb-set-link-cell-overhead OBJ BYTES
#   tb-set-link-trace OBJ FILE ?OFFSET? ?noloop?  (capacity from a Mahimahi trace)
#   tb-set-link-schedule OBJ CSV ?linear? ?loop?  (delay/bandwidth/loss over time)
#   tb-set-lan-VERB LAN ...             (LAN-wide: once between two members)
#   tb-set-node-lan-VERB NODE LAN ...   (one member: frames it receives)
# A LINK gets it both ways, [$ns link A B] one direction; a LAN's goes on the halves from
# its switch to each member.
proc ::wl::impair {verb what obj words} {
    if {![llength $words]} { ::wl::fail "$what: needs a value" }
    set h [::wl::need $obj {Link Lan Simplex} $what]
    switch -- $::wl::cls($h) {
        Link {
            ::wl::set_attr $h ab,imp,$verb $words
            ::wl::set_attr $h ba,imp,$verb $words
        }
        Simplex {
            set d [::wl::get_attr $h dir]
            if {[string match m,* $d]} { ::wl::fail "$what: give a LAN member as NODE LAN (tb-set-node-lan-...)" }
            ::wl::set_attr [::wl::get_attr $h parent] $d,imp,$verb $words
        }
        Lan { ::wl::set_attr $h imp,$verb $words }
    }
}
foreach {_v _name} {jitter jitter duplicate duplicate corrupt corrupt reorder reorder
                    lossmodel lossmodel overhead overhead cellsize cellsize
                    cell_overhead cell-overhead trace trace schedule schedule} {
    proc tb-set-link-$_name {obj args} [string map [list @V $_v @N $_name] {
        ::wl::impair @V tb-set-link-@N $obj $args
    }]
    proc tb-set-lan-$_name {lan args} [string map [list @V $_v @N $_name] {
        ::wl::impair @V tb-set-lan-@N [::wl::N [::wl::need $lan Lan tb-set-lan-@N]] $args
    }]
    proc tb-set-node-lan-$_name {node lan args} [string map [list @V $_v @N $_name] {
        lassign [::wl::lan_member $node $lan tb-set-node-lan-@N] node lan
        if {![llength $args]} { ::wl::fail "tb-set-node-lan-@N: needs a value" }
        ::wl::set_attr $lan m,$node,from,imp,@V $args
    }]
}
unset _v _name
# one pair of a LAN's matrix (docs/ns-reference.md): tb-set-lan-pair-VERB LAN SRC DST ...
foreach {_v _name} {jitter jitter duplicate duplicate corrupt corrupt reorder reorder
                    lossmodel lossmodel overhead overhead cellsize cellsize
                    cell_overhead cell-overhead} {
    proc tb-set-lan-pair-$_name {lan src dst args} [string map [list @V $_v @N $_name] {
        lassign [::wl::lan_member $src $lan tb-set-lan-pair-@N] src l
        lassign [::wl::lan_member $dst $lan tb-set-lan-pair-@N] dst l
        if {$src eq $dst} { ::wl::fail "tb-set-lan-pair-@N: a pair needs two members" }
        if {![llength $args]} { ::wl::fail "tb-set-lan-pair-@N: needs a value" }
        ::wl::set_attr $l p,$src,$dst,imp,@V $args
    }]
}
unset _v _name

::wl::ignored tb-set-lan-protocol "ignored: every LAN is an Ethernet switch in the engine"
::wl::ignored tb-set-lan-setting "ignored: every LAN is an Ethernet switch in the engine"

# -- shaping placement, wide area --------------------------------------------------

::wl::ignored tb-set-noshaping "ignored: every link is shaped by the wanlab engine"
::wl::ignored tb-set-endnodeshaping "ignored: every link is shaped by the wanlab engine between the nodes (no delay nodes, no end-node shaping)"
::wl::ignored tb-use-endnodeshaping "ignored: every link is shaped by the wanlab engine between the nodes (no delay nodes, no end-node shaping)"
::wl::ignored tb-force-endnodeshaping "ignored: every link is shaped by the wanlab engine between the nodes (no delay nodes, no end-node shaping)"
::wl::ignored tb-set-multiplexed "ignored: every link is shaped by the wanlab engine"
::wl::ignored tb-set-link-encap "ignored: links carry plain Ethernet frames"
::wl::ignored tb-set-vlink-emulation "ignored: links carry plain Ethernet frames"
::wl::ignored tb-set-uselatestwadata "ignored: wanlab has no wide-area nodes"
::wl::ignored tb-set-usewatunnels "ignored: wanlab has no wide-area nodes"
::wl::ignored tb-set-wasolver-weights "ignored: wanlab has no wide-area nodes"
::wl::ignored tb-set-allowcolocate "ignored: all nodes run on this host"
::wl::ignored tb-set-dpdb "ignored"
::wl::ignored tb-set-security-level "ignored: no hardware isolation levels"
