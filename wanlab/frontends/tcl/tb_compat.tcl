# wanlab's tb_compat.tcl: Emulab's tb-* commands.  Loaded by prelude.tcl;
# a script's own `source tb_compat.tcl` is a no-op.  Commands that only make
# sense on a testbed of many machines are accepted, recorded where the IR has
# a field for them, and produce a warning saying what wanlab does instead.

# -- addresses and routing ------------------------------------------------------

proc tb-set-ip {node ip} {
    ::wl::need $node Node tb-set-ip
    ::wl::set_attr $node ip $ip
}

proc tb-set-ip-interface {src dst ip} {
    set h [::wl::link_between $src $dst tb-set-ip-interface]
    ::wl::set_attr $h [expr {[::wl::get_attr $h a] eq $src ? "ip_a" : "ip_b"}] $ip
}

proc tb-set-ip-link {src link ip} {
    ::wl::need $src Node tb-set-ip-link
    ::wl::need $link Link tb-set-ip-link
    if {[::wl::get_attr $link a] eq $src} { ::wl::set_attr $link ip_a $ip
    } elseif {[::wl::get_attr $link b] eq $src} { ::wl::set_attr $link ip_b $ip
    } else { ::wl::fail "tb-set-ip-link: the node is not an end of the link" }
}

proc tb-set-ip-lan {src lan ip} {
    ::wl::need $src Node tb-set-ip-lan
    ::wl::need $lan Lan tb-set-ip-lan
    if {$src ni [::wl::get_attr $lan members]} { ::wl::fail "tb-set-ip-lan: the node is not a member of the LAN" }
    ::wl::set_attr $lan m,$src,ip $ip
}

proc tb-set-netmask {lanlink mask} {
    ::wl::need $lanlink {Link Lan} tb-set-netmask
    ::wl::set_attr $lanlink netmask $mask
}

proc tb-set-ip-routing {type} {
    ::wl::set_rtproto $type tb-set-ip-routing
}

proc tb-use-ipassign {args} {
    ::wl::warn "tb-use-ipassign: ignored; wanlab's planner always assigns addresses"
}

# -- nodes ---------------------------------------------------------------------

proc tb-set-hardware {node type args} {
    ::wl::need $node Node tb-set-hardware
    ::wl::set_attr $node hardware $type
    ::wl::warn "tb-set-hardware $type: recorded; ignored: all nodes run as namespaces on this host"
}

proc tb-set-node-os {node os args} {
    ::wl::need $node Node tb-set-node-os
    ::wl::set_attr $node os $os
    ::wl::warn "tb-set-node-os $os: recorded only; every node runs the host's own filesystem and kernel (the default image)"
}

proc tb-set-node-startcmd {node cmd} {
    ::wl::need $node Node tb-set-node-startcmd
    ::wl::set_attr $node startcmd $cmd
}

proc tb-set-node-startup {node cmd} {
    ::wl::need $node Node tb-set-node-startup
    ::wl::set_attr $node startcmd $cmd
}

proc ::wl::ignored {name why} {
    proc ::$name {args} [list ::wl::warn "$name: $why"]
}

::wl::ignored tb-set-node-tarfiles "ignored: nodes share the host's filesystem; install software on the host"
::wl::ignored tb-set-node-rpms "ignored: nodes share the host's filesystem; install software on the host"
::wl::ignored tb-set-node-cmdline "ignored: nodes share the host's kernel"
::wl::ignored tb-set-node-failure-action "ignored: a node that fails to set up always fails the swap-in"
::wl::ignored tb-fix-node "ignored: all nodes run on this host"
::wl::ignored tb-set-colocate-factor "ignored: all nodes run on this host"
::wl::ignored tb-set-cpu-usage "ignored: all nodes run on this host"
::wl::ignored tb-set-mem-usage "ignored: all nodes run on this host"
::wl::ignored tb-set-sync-server "ignored: wanlab has no emulab-sync server"
::wl::ignored tb-make-soft-vtype "ignored: all nodes run on this host (no hardware types)"
::wl::ignored tb-make-hard-vtype "ignored: all nodes run on this host (no hardware types)"
::wl::ignored tb-make-weighted-vtype "ignored: all nodes run on this host (no hardware types)"
::wl::ignored tb-set-node-usesharednode "ignored: all nodes run on this host"
::wl::ignored tb-set-tarfiles "ignored: nodes share the host's filesystem"

# -- links ---------------------------------------------------------------------

# tb-set-link-loss link rate             both directions
# tb-set-link-loss link src rate         direction src -> other end
# tb-set-link-loss src dst rate          direction src -> dst of the link joining them
# tb-set-link-loss [$ns link a b] rate   direction a -> b
# tb-set-link-loss lan rate              same as tb-set-lan-loss
proc tb-set-link-loss {obj args} {
    switch -- [llength $args] {
        1 {
            set rate [lindex $args 0]
            if {[::wl::is_obj $obj Simplex]} {
                ::wl::set_attr [::wl::get_attr $obj parent] [::wl::get_attr $obj dir],loss $rate
            } elseif {[::wl::is_obj $obj Lan]} {
                ::wl::set_attr $obj loss $rate
            } else {
                ::wl::need $obj Link tb-set-link-loss
                ::wl::set_attr $obj ab,loss $rate
                ::wl::set_attr $obj ba,loss $rate
            }
        }
        2 {
            lassign $args x rate
            if {[::wl::is_obj $obj Link]} {
                ::wl::need $x Node tb-set-link-loss
                set d [::wl::dir_from $obj $x tb-set-link-loss]
                ::wl::set_attr $obj $d,loss $rate
            } else {
                set h [::wl::link_between $obj $x tb-set-link-loss]
                ::wl::set_attr $h [::wl::dir_from $h $obj tb-set-link-loss],loss $rate
            }
        }
        default { ::wl::fail "wrong # args: should be \"tb-set-link-loss link ?src? rate\"" }
    }
}

proc ::wl::dir_from {link node what} {
    if {[::wl::get_attr $link a] eq $node} { return ab }
    if {[::wl::get_attr $link b] eq $node} { return ba }
    ::wl::fail "$what: the node is not an end of the link"
}

proc tb-set-link-simplex-params {link src delay bw loss} {
    ::wl::need $link Link tb-set-link-simplex-params
    ::wl::need $src Node tb-set-link-simplex-params
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
    ::wl::need $lan Lan tb-set-lan-loss
    ::wl::set_attr $lan loss $rate
}

proc ::wl::lan_member {node lan what} {
    ::wl::need $node Node $what
    ::wl::need $lan Lan $what
    if {$node ni [::wl::get_attr $lan members]} { ::wl::fail "$what: the node is not a member of the LAN" }
}

proc tb-set-lan-simplex-params {lan node todelay tobw toloss fromdelay frombw fromloss} {
    ::wl::lan_member $node $lan tb-set-lan-simplex-params
    foreach {k v} [list to,delay $todelay to,bw $tobw to,loss $toloss \
                        from,delay $fromdelay from,bw $frombw from,loss $fromloss] {
        ::wl::set_attr $lan m,$node,$k $v
    }
}

proc tb-set-node-lan-delay {node lan delay} {
    ::wl::lan_member $node $lan tb-set-node-lan-delay
    foreach d {to from} { ::wl::set_attr $lan m,$node,$d,delay $delay }
}

proc tb-set-node-lan-bandwidth {node lan bw} {
    ::wl::lan_member $node $lan tb-set-node-lan-bandwidth
    foreach d {to from} { ::wl::set_attr $lan m,$node,$d,bw $bw }
}

proc tb-set-node-lan-loss {node lan loss} {
    ::wl::lan_member $node $lan tb-set-node-lan-loss
    foreach d {to from} { ::wl::set_attr $lan m,$node,$d,loss $loss }
}

proc tb-set-node-lan-params {node lan delay bw loss} {
    ::wl::lan_member $node $lan tb-set-node-lan-params
    foreach d {to from} {
        ::wl::set_attr $lan m,$node,$d,delay $delay
        ::wl::set_attr $lan m,$node,$d,bw $bw
        ::wl::set_attr $lan m,$node,$d,loss $loss
    }
}

::wl::ignored tb-set-lan-protocol "ignored: every LAN is an Ethernet switch in the engine"
::wl::ignored tb-set-lan-setting "ignored: every LAN is an Ethernet switch in the engine"

# -- shaping placement, wide area --------------------------------------------------

::wl::ignored tb-set-noshaping "ignored: every link is shaped by the wanlab engine"
::wl::ignored tb-set-endnodeshaping "ignored: every link is shaped by the wanlab engine"
::wl::ignored tb-set-multiplexed "ignored: every link is shaped by the wanlab engine"
::wl::ignored tb-set-link-encap "ignored: links carry plain Ethernet frames"
::wl::ignored tb-set-vlink-emulation "ignored: links carry plain Ethernet frames"
::wl::ignored tb-set-uselatestwadata "ignored: wanlab has no wide-area nodes"
::wl::ignored tb-set-usewatunnels "ignored: wanlab has no wide-area nodes"
::wl::ignored tb-set-wasolver-weights "ignored: wanlab has no wide-area nodes"
::wl::ignored tb-set-allowcolocate "ignored: all nodes run on this host"
::wl::ignored tb-set-dpdb "ignored"
::wl::ignored tb-set-security-level "ignored: no hardware isolation levels"
