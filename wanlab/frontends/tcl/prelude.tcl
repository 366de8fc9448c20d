# wanlab's ns-2 prelude: our own definitions of Simulator, nodes, links, LANs,
# agents, Program objects, `$ns at` and the tb-* commands, in the way Emulab's
# parser interposed on ns.  A user's script runs after this file in the same
# interpreter (see run.tcl); nothing is realized here: every declaration is
# recorded with the file and line it came from, and run.tcl writes the
# records as JSON for wanlab/frontends/ns.py to turn into the IR.
#
# Conventions:
#   * an object is a command named like ns-2's handles (_o12) aliased to
#     ::wl::dispatch; its class is ::wl::cls($h) and its attributes live in
#     ::wl::A($h,KEY) as located values {value file line};
#   * methods of class C are procs ::wl::m::C::METHOD {self ...};
#   * ::wl::warn records a warning at the user's current line; ::wl::fail
#     raises an error carrying that location (errorcode WANLAB LOC file line).

namespace eval ::wl {
    variable seq 0
    variable order {}        ;# object handles in creation order
    variable pending {}      ;# dict: handles not yet found in a variable
    variable warnings {}     ;# {msg file line} ...
    variable events {}       ;# {time cmd file line} ...
    variable simulated 0     ;# >0 inside make-simulated
    variable anchors {}      ;# {file line} of the make-simulated bodies being run
    variable sim ""          ;# the Simulator
    variable rtproto ""
    variable ospf ""
    variable ran 0
    variable tparams {}      ;# template parameters given by the caller
    variable procdef         ;# proc name -> {file line} of its definition
    array set procdef {}
    variable dir [file dirname [file normalize [info script]]]
    variable cls
    array set cls {}
    variable A
    array set A {}
    variable var
    array set var {}
    variable cache
    array set cache {}
}
namespace eval ::wl::m {}

# -- locations, warnings, errors ---------------------------------------------

# The innermost frame in the user's code: {file line}, or {"" 0}. Within one call
# from the user's code into an object (dispatch) or `new`, it is computed once: `info
# frame` costs time proportional to the position in the script, and one command
# records several located values.
variable ::wl::here ""
proc ::wl::userloc {} {
    if {$::wl::here ne ""} { return $::wl::here }
    return [::wl::find_userloc]
}

proc ::wl::find_userloc {} {
    variable dir
    variable procdef
    for {set i [expr {[info frame] - 1}]} {$i > 0} {incr i -1} {
        if {[catch {info frame $i} f]} { continue }
        if {[dict exists $f file]} {
            set file [dict get $f file]
            if {[file dirname [file normalize $file]] eq $dir} { continue }
            return [list $file [dict get $f line]]
        }
        if {[dict get $f type] eq "eval" && [llength $::wl::anchors]} {
            # inside a make-simulated body: lines count from the body's first line
            lassign [lindex $::wl::anchors end] file line
            return [list $file [expr {$line + [dict get $f line] - 1}]]
        }
        if {[dict get $f type] eq "proc" && [dict exists $f proc]
                && [info exists procdef([dict get $f proc])]} {
            lassign $procdef([dict get $f proc]) file line
            return [list $file [expr {$line + [dict get $f line] - 1}]]
        }
    }
    return [list "" 0]
}

proc ::wl::warn {msg} {
    variable warnings
    lassign [userloc] file line
    lappend warnings [list $msg $file $line]
}

proc ::wl::fail {msg} {
    lassign [userloc] file line
    throw [list WANLAB LOC $file $line] $msg
}

# A located value: {value file line}.
proc ::wl::lv {value} {
    lassign [userloc] file line
    return [list $value $file $line]
}

# -- objects --------------------------------------------------------------------

proc ::wl::new_obj {class {named 1}} {
    variable seq
    variable order
    variable pending
    variable cls
    variable A
    set h "_o[incr seq]"
    set cls($h) $class
    lappend order $h
    if {$named} { dict set pending $h 1 }
    lassign [userloc] file line
    set A($h,@file) $file
    set A($h,@line) $line
    interp alias {} $h {} ::wl::dispatch $h
    return $h
}

proc ::wl::is_obj {x {class ""}} {
    variable cls
    if {![info exists cls($x)]} { return 0 }
    if {$class eq ""} { return 1 }
    return [expr {[lsearch -exact $class $cls($x)] >= 0}]
}

proc ::wl::need {x class what} {
    if {![is_obj $x $class]} {
        if {[is_obj $x]} {
            fail "$what: expected a [join $class { or }], got a $::wl::cls($x)"
        }
        fail "$what: '$x' is not a [join $class { or }] object"
    }
    return $x
}

proc ::wl::set_attr {h key value} {
    variable A
    set A($h,$key) [lv $value]
}

proc ::wl::get_attr {h key {default ""}} {
    variable A
    if {[info exists A($h,$key)]} { return [lindex $A($h,$key) 0] }
    return $default
}

# Name objects after the global variables they were first assigned to
# (Emulab's rule). A global `set VAR [...]` names the object at once (on_set, an
# execution trace on `set`); objects assigned otherwise (`global x` in a proc,
# `array set`, ...) are looked for in the global variables and arrays once, when
# the script has finished (scan_names). Looking at every entry into the prelude
# instead cost one pass over all globals per call: quadratic in large scripts.
proc ::wl::on_set {cmd code result op} {
    if {$code != 0 || [llength $cmd] != 3 || [info level] != 1} { return }
    variable cls
    variable var
    if {![info exists cls($result)] || [info exists var($result)]} { return }
    variable pending
    if {![dict exists $pending $result]} { return }
    set name [string trimleft [lindex $cmd 1] :]
    if {[regexp {^([^(]+)\((.*)\)$} $name -> arr key]} {
        set var($result) [list $arr $key]
    } else {
        set var($result) [list $name]
    }
    dict unset pending $result
}
trace add execution set leave ::wl::on_set

proc ::wl::scan_names {} {
    variable pending
    if {![dict size $pending]} { return }
    variable var
    set want $pending
    set frames [list #0]   ;# globals only: proc-local variables never name objects
    foreach fr $frames {
        if {$fr eq "#0"} { set names [uplevel #0 {info vars}] } else {
            set names [uplevel $fr {info vars}]
        }
        foreach v [lsort $names] {
            if {[string match tcl_* $v] || $v in {env argv argv0 argc errorInfo errorCode auto_path auto_index}} {
                continue
            }
            if {[uplevel $fr [list array exists $v]]} {
                foreach {k x} [uplevel $fr [list array get $v]] {
                    if {[dict exists $want $x]} {
                        set var($x) [list $v $k]
                        dict unset want $x
                    }
                }
            } elseif {[uplevel $fr [list info exists $v]]} {
                set x [uplevel $fr [list set $v]]
                if {[dict exists $want $x]} {
                    set var($x) [list $v]
                    dict unset want $x
                }
            }
            if {![dict size $want]} { break }
        }
    }
    set pending $want
}

# Usage string of a method/command proc, for "wrong # args" messages.
proc ::wl::usage {p prefix} {
    set out [list]
    foreach a [lrange [info args $p] [expr {[string match ::wl::m::* $p] ? 1 : 0}] end] {
        if {$a eq "args"} { lappend out "?arg ...?"
        } elseif {[info default $p $a d]} { lappend out "?$a?"
        } else { lappend out $a }
    }
    return [string trim "$prefix [join $out { }]"]
}

proc ::wl::dispatch {h args} {
    set outer $::wl::here
    set ::wl::here [::wl::find_userloc]
    try {
        return [uplevel 1 [list ::wl::dispatch_in $h {*}$args]]
    } finally {
        set ::wl::here $outer
    }
}

proc ::wl::dispatch_in {h args} {
    variable cls
    set c $cls($h)
    if {![llength $args]} { fail "a $c object needs a method, e.g. \$obj set ..." }
    set args [lassign $args m]
    set p ::wl::m::${c}::$m
    if {[info commands $p] eq ""} {
        if {[info commands ::wl::m::Any::$m] ne ""} { set p ::wl::m::Any::$m } else {
            warn "$c: method '$m' is not supported by wanlab; ignored"
            return ""
        }
    }
    if {[catch {$p $h {*}$args} res opts]} {
        if {[lrange [dict get $opts -errorcode] 0 1] eq {TCL WRONGARGS}
                && [string match "wrong # args: should be \"$p *" $res]} {
            set pre [expr {$c eq "Simulator" ? "\$ns" : "\$[string tolower $c]"}]
            fail "wrong # args: should be \"[usage $p "$pre $m"]\""
        }
        dict incr opts -level
        return -options $opts $res
    }
    return $res
}

# Method available on every object: ns-2's instance variables.
namespace eval ::wl::m::Any {
    proc set {self key args} {
        if {[llength $args] > 1} { ::wl::fail "wrong # args: should be \"\$obj set var ?value?\"" }
        if {![llength $args]} { return [::wl::get_attr $self var,$key] }
        ::wl::set_attr $self var,$key [lindex $args 0]
        return [lindex $args 0]
    }
    proc instvar {self args} { return "" }
}

# -- new ------------------------------------------------------------------------

proc new {class args} {
    set outer $::wl::here
    set ::wl::here [::wl::find_userloc]
    try {
        return [uplevel 1 [list ::wl::new_in $class {*}$args]]
    } finally {
        set ::wl::here $outer
    }
}

proc ::wl::new_in {class args} {
    switch -glob -- $class {
        Simulator {
            if {$::wl::sim ne ""} {
                ::wl::warn "new Simulator: a second Simulator is the same as the first"
                return $::wl::sim
            }
            set ::wl::sim [::wl::new_obj Simulator 0]
            return $::wl::sim
        }
        Program {
            set h [::wl::new_obj Program]
            return $h
        }
        Agent/* - Application/* {
            set h [::wl::new_obj Agent]
            ::wl::set_attr $h kind $class
            if {![string match Agent/UDP* $class] && ![string match Agent/TCP* $class]
                    && $class ni {Agent/Null Agent/LossMonitor Application/FTP Application/Telnet
                        Application/Traffic/CBR Application/Traffic/Exponential
                        Application/Traffic/Pareto Application/Traffic/Poisson}} {
                ::wl::warn "new $class: recorded as an agent of kind $class; wanlab may not generate its traffic"
            }
            return $h
        }
        EventGroup {
            return [::wl::new_obj EventGroup]
        }
        default {
            ::wl::warn "new $class: class not supported by wanlab; a placeholder object is returned and its methods are ignored"
            return [::wl::new_obj Other 0]
        }
    }
}

# -- Simulator --------------------------------------------------------------------

namespace eval ::wl::m::Simulator {}

proc ::wl::m::Simulator::node {self args} {
    if {[llength $args]} { ::wl::warn "\$ns node: arguments '$args' ignored" }
    set h [::wl::new_obj Node]
    ::wl::set_attr $h kind [expr {$::wl::simulated ? "simulated" : "emulated"}]
    return $h
}

proc ::wl::queue_kind {q} {
    set k [string tolower [regsub {^Queue/} $q ""]]
    if {$k ni {droptail red gred}} {
        ::wl::fail "queue '$q' unknown; supported queues are DropTail, RED, GRED"
    }
    return $k
}

proc ::wl::make_link {a b bw delay q simplex} {
    ::wl::need $a Node "link endpoint"
    ::wl::need $b Node "link endpoint"
    if {$a eq $b} { ::wl::fail "a link cannot join a node to itself" }
    set kind [::wl::queue_kind $q]
    # A simplex-link b->a completing an earlier simplex-link a->b: one duplex link.
    if {$simplex && [info exists ::wl::cache(simplex,$b,$a)]} {
        set h $::wl::cache(simplex,$b,$a)
        unset ::wl::cache(simplex,$b,$a)
        foreach {k v} [list bw $bw delay $delay qkind $kind] { ::wl::set_attr $h ba,$k $v }
        ::wl::set_attr $h simplex 0
        return [::wl::direction $h ba]
    }
    set h [::wl::new_obj Link]
    ::wl::set_attr $h a $a
    ::wl::set_attr $h b $b
    foreach d {ab ba} {
        foreach {k v} [list bw $bw delay $delay qkind $kind] { ::wl::set_attr $h $d,$k $v }
    }
    lappend ::wl::cache(links,$a,$b) $h
    lappend ::wl::cache(links,$b,$a) $h
    if {$simplex} {
        ::wl::set_attr $h simplex 1
        set ::wl::cache(simplex,$a,$b) $h
        return [::wl::direction $h ab]
    }
    return $h
}

proc ::wl::m::Simulator::duplex-link {self n1 n2 bw delay {queue DropTail} args} {
    if {[llength $args]} { ::wl::warn "duplex-link: extra arguments '$args' ignored" }
    return [::wl::make_link $n1 $n2 $bw $delay $queue 0]
}

proc ::wl::m::Simulator::simplex-link {self n1 n2 bw delay {queue DropTail} args} {
    if {[llength $args]} { ::wl::warn "simplex-link: extra arguments '$args' ignored" }
    return [::wl::make_link $n1 $n2 $bw $delay $queue 1]
}

proc ::wl::make_lan {nodes bw delay extra what} {
    set h [::wl::new_obj Lan]
    set members [list]
    foreach n $nodes {
        ::wl::need $n Node "$what member"
        if {$n in $members} { ::wl::fail "$what lists a node twice" }
        lappend members $n
    }
    if {![llength $members]} { ::wl::fail "$what needs at least one node" }
    ::wl::set_attr $h members $members
    ::wl::set_attr $h bw $bw
    ::wl::set_attr $h delay $delay
    foreach x $extra {
        if {[string match Queue/* $x]} {
            ::wl::set_attr $h qkind [::wl::queue_kind $x]
        } elseif {$x ni {LL Mac Mac/802_3 Channel Phy/WiredPhy ""}} {
            ::wl::warn "$what: argument '$x' ignored"
        }
    }
    return $h
}

proc ::wl::m::Simulator::make-lan {self nodes bw delay args} {
    return [::wl::make_lan $nodes $bw $delay $args make-lan]
}

proc ::wl::m::Simulator::make-cloud {self nodes bw delay args} {
    ::wl::warn "make-cloud: realized as a LAN with the given bandwidth and delay between members"
    return [::wl::make_lan $nodes $bw $delay $args make-cloud]
}

proc ::wl::m::Simulator::make-path {self args} {
    ::wl::warn "make-path: ignored; wanlab shapes each link of a path separately"
    return [::wl::new_obj Other 0]
}

proc ::wl::m::Simulator::bridge {self args} {
    ::wl::warn "bridge: created as an ordinary node (no kernel bridging)"
    set h [::wl::new_obj Node]
    ::wl::set_attr $h kind emulated
    return $h
}

# The link joining n1 and n2 (error if none or ambiguous).
proc ::wl::link_between {n1 n2 what} {
    ::wl::need $n1 Node $what
    ::wl::need $n2 Node $what
    if {![info exists ::wl::cache(links,$n1,$n2)]} {
        ::wl::fail "$what: no link between these two nodes"
    }
    return [lindex $::wl::cache(links,$n1,$n2) 0]
}

# A simplex direction object for link h ("ab" or "ba"), cached.
proc ::wl::direction {h d} {
    if {![info exists ::wl::cache(dir,$h,$d)]} {
        set o [::wl::new_obj Simplex 0]
        ::wl::set_attr $o parent $h
        ::wl::set_attr $o dir $d
        set ::wl::cache(dir,$h,$d) $o
    }
    return $::wl::cache(dir,$h,$d)
}

proc ::wl::m::Simulator::link {self n1 n2} {
    set h [::wl::link_between $n1 $n2 "\$ns link"]
    return [::wl::direction $h [expr {[::wl::get_attr $h a] eq $n1 ? "ab" : "ba"}]]
}

proc ::wl::m::Simulator::lanlink {self lan node} {
    ::wl::need $lan Lan "\$ns lanlink"
    ::wl::need $node Node "\$ns lanlink"
    if {$node ni [::wl::get_attr $lan members]} { ::wl::fail "\$ns lanlink: node is not a member of the LAN" }
    return [::wl::direction $lan "m,$node,to"]
}

proc ::wl::m::Simulator::queue-limit {self n1 n2 limit} {
    set d [::wl::m::Simulator::link $self $n1 $n2]
    ::wl::set_attr [::wl::get_attr $d parent] [::wl::get_attr $d dir],q,limit_ $limit
}

proc ::wl::m::Simulator::cost {self n1 n2 c} {
    set h [::wl::link_between $n1 $n2 "\$ns cost"]
    if {![string is integer -strict $c] || $c < 1} { ::wl::fail "\$ns cost: cost '$c' must be a positive integer" }
    ::wl::set_attr $h cost $c
}

proc ::wl::set_rtproto {p what} {
    switch -- [string tolower $p] {
        static { set r static }
        manual { set r manual }
        session { set r session }
        ospf { set r ospf }
        default { ::wl::fail "$what '$p' unknown; supported are Static, Session, ospf, Manual" }
    }
    set ::wl::rtproto [::wl::lv $r]
}

# wanlab extension: OSPF hello and dead intervals (seconds) for rtproto Session/ospf
proc tb-set-ospf-timers {hello dead} {
    foreach {v what} [list $hello hello $dead dead] {
        if {![string is integer -strict $v] || $v < 1 || $v > 65535} {
            ::wl::fail "tb-set-ospf-timers: $what interval '$v' must be a whole number of seconds (1-65535)"
        }
    }
    if {$dead <= $hello} { ::wl::fail "tb-set-ospf-timers: the dead interval ($dead) must exceed the hello interval ($hello)" }
    set ::wl::ospf [list $hello $dead]
    return ""
}

proc ::wl::m::Simulator::rtproto {self proto args} {
    if {[llength $args]} { ::wl::warn "rtproto: node arguments '$args' ignored; routing applies to all nodes" }
    ::wl::set_rtproto $proto "\$ns rtproto"
}

proc ::wl::m::Simulator::at {self time event} {
    lassign [::wl::userloc] file line
    lappend ::wl::events [list $time $event $file $line]
    return ""
}

proc ::wl::m::Simulator::attach-agent {self node agent} {
    ::wl::need $node Node "attach-agent"
    ::wl::need $agent Agent "attach-agent"
    ::wl::set_attr $agent node $node
}

proc ::wl::m::Simulator::detach-agent {self node agent} {
    ::wl::warn "detach-agent: ignored"
}

proc ::wl::m::Simulator::connect {self src dst} {
    ::wl::need $src Agent "\$ns connect"
    ::wl::need $dst Agent "\$ns connect"
    ::wl::set_attr $src peer $dst
    ::wl::set_attr $dst peer $src
}

proc ::wl::m::Simulator::run {self} {
    set ::wl::ran 1
    return ""
}

proc ::wl::m::Simulator::make-simulated {self body} {
    incr ::wl::simulated
    lappend ::wl::anchors [::wl::userloc]
    set outer $::wl::here
    set ::wl::here ""        ;# the body's commands are located on their own lines
    set code [catch {uplevel 2 $body} res opts]
    set ::wl::here $outer
    set ::wl::anchors [lrange $::wl::anchors 0 end-1]
    incr ::wl::simulated -1
    if {$code == 1} {
        dict incr opts -level
        return -options $opts $res
    }
    return $res
}

proc ::wl::m::Simulator::define-template-parameter {self name default {desc ""}} {
    return [uplevel 2 [list define-template-parameter $name $default $desc]]
}

proc define-template-parameter {name default {desc ""}} {
    if {[dict exists $::wl::tparams $name]} {
        set value [dict get $::wl::tparams $name]
        dict unset ::wl::tparams $name
    } else { set value $default }
    uplevel #0 [list set $name $value]
    return $value
}

proc ::wl::m::Simulator::event-group {self args} {
    set h [::wl::new_obj EventGroup]
    ::wl::set_attr $h items [concat {*}$args]
    ::wl::warn "event-group: supported best effort (events on the group are applied to each member)"
    return $h
}

proc ::wl::m::Simulator::event-sequence {self {body ""}} {
    set h [::wl::new_obj EventSequence]
    set items [list]
    set cmd ""
    foreach l [split $body "\n;"] {
        append cmd $l "\n"
        if {[info complete $cmd]} {
            set c [string trim $cmd]
            set cmd ""
            if {$c eq "" || [string index $c 0] eq "#"} continue
            lappend items [list 0 [uplevel 2 [list subst $c]]]
        }
    }
    ::wl::set_attr $h items $items
    ::wl::warn "event-sequence: its steps run one after another when the sequence is started by \$ns at (tevc cannot start it)"
    return $h
}

proc ::wl::m::Simulator::event-timeline {self args} {
    set h [::wl::new_obj EventTimeline]
    ::wl::set_attr $h items {}
    ::wl::warn "event-timeline: supported best effort (its events are scheduled relative to the time it is started)"
    return $h
}

namespace eval ::wl::m::EventTimeline {
    proc at {self time event} {
        set items [::wl::get_attr $self items]
        lappend items [list $time $event]
        ::wl::set_attr $self items $items
        return ""
    }
}
namespace eval ::wl::m::EventSequence {
    proc append {self event} {
        set items [::wl::get_attr $self items]
        lappend items [list 0 $event]
        ::wl::set_attr $self items $items
        return ""
    }
}
namespace eval ::wl::m::EventGroup {
    proc add {self args} {
        set items [::wl::get_attr $self items]
        ::wl::set_attr $self items [concat $items {*}$args]
        return ""
    }
}

# Accepted and ignored on the Simulator (tracing, nam, scheduler choices).
foreach _m {duplex-link-op simplex-link-op namtrace-all namtrace-all-wireless trace-all
            trace-queue monitor-queue use-scheduler color flush-trace halt now
            set-animation-rate} {
    proc ::wl::m::Simulator::$_m {self args} [list ::wl::warn "\$ns $_m: accepted and ignored (wanlab records per-link statistics and captures instead)"]
}
unset _m
proc ::wl::m::Simulator::now {self} { return 0 }
proc ::wl::m::Simulator::use-scheduler {self args} {
    ::wl::warn "\$ns use-scheduler: ignored; the engine has its own scheduler"
}

# -- Node --------------------------------------------------------------------------

namespace eval ::wl::m::Node {
    proc add-route {self dst nexthop} {
        set i [::wl::get_attr $self nroutes 0]
        ::wl::set_attr $self route,$i,dst $dst
        ::wl::set_attr $self route,$i,via $nexthop
        ::wl::set_attr $self nroutes [expr {$i + 1}]
        return ""
    }
    proc start-command {self cmd} {
        ::wl::set_attr $self startcmd $cmd
        return ""
    }
    proc program-agent {self args} {
        set p [::wl::new_obj Program]
        ::wl::set_attr $p var,node $self
        foreach {opt val} $args {
            switch -- $opt {
                -command { ::wl::set_attr $p var,command $val }
                -dir { ::wl::set_attr $p var,dir $val }
                -timeout { ::wl::set_attr $p var,timeout $val }
                -expected-exit-code { ::wl::set_attr $p var,expected-exit-code $val }
                -tag { ::wl::set_attr $p var,tag $val }
                default { ::wl::fail "program-agent: unknown option '$opt'; options are -command -dir -timeout -expected-exit-code -tag" }
            }
        }
        return $p
    }
    proc console {self args} {
        ::wl::warn "node console: ignored (use 'wanlab shell' to enter a node)"
    }
    proc id {self} { return [string range $self 2 end] }
}
foreach _m {color shape label label-color add-mark delete-mark} {
    proc ::wl::m::Node::$_m {self args} [list ::wl::warn "node $_m: accepted and ignored (nam display attribute)"]
}
unset _m

# -- Link / LAN / simplex directions / queues -----------------------------------

namespace eval ::wl::m::Simplex {
    proc queue {self} {
        if {![info exists ::wl::cache(queue,$self)]} {
            set q [::wl::new_obj Queue 0]
            ::wl::set_attr $q dir $self
            set ::wl::cache(queue,$self) $q
        }
        return $::wl::cache(queue,$self)
    }
    proc trace {self args} { ::wl::warn "link trace: accepted and ignored here; use 'wanlab capture'" }
}

namespace eval ::wl::m::Queue {
    proc set {self key args} {
        ::set d [::wl::get_attr $self dir]
        ::set parent [::wl::get_attr $d parent]
        ::set dir [::wl::get_attr $d dir]
        if {$key ni {limit_ queue-in-bytes_ gentle_ thresh_ maxthresh_ q_weight_ linterm_ mean_pktsize_ queue_in_bytes_}} {
            ::wl::warn "queue parameter '$key' is not supported by wanlab; ignored (supported: limit_ queue-in-bytes_ gentle_ thresh_ maxthresh_ q_weight_ linterm_ mean_pktsize_)"
            return ""
        }
        if {$key eq "queue_in_bytes_"} { ::set key queue-in-bytes_ }
        if {![llength $args]} { return [::wl::get_attr $parent $dir,q,$key] }
        ::wl::set_attr $parent $dir,q,$key [lindex $args 0]
        return [lindex $args 0]
    }
}

# Links and LANs accept trace/up/down etc. as methods only in events.
namespace eval ::wl::m::Link {
    proc trace {self args} { ::wl::warn "link trace: accepted and ignored here; use 'wanlab capture'" }
}
namespace eval ::wl::m::Lan {
    proc trace {self args} { ::wl::warn "lan trace: accepted and ignored here; use 'wanlab capture'" }
}

# -- Agents and applications ------------------------------------------------------

namespace eval ::wl::m::Agent {
    proc set {self key args} {
        if {![llength $args]} { return [::wl::get_attr $self param,$key] }
        ::wl::set_attr $self param,$key [lindex $args 0]
        return [lindex $args 0]
    }
    proc attach-agent {self agent} {
        ::wl::need $agent Agent "attach-agent"
        ::wl::set_attr $self attached $agent
        return ""
    }
    proc select_ca {self ca} {
        ::wl::set_attr $self param,select_ca $ca
        return ""
    }
    proc attach-app {self kind} {
        ::set h [::wl::new_obj Agent]
        ::wl::set_attr $h kind Application/$kind
        ::wl::set_attr $h attached $self
        return $h
    }
}
foreach _m {start stop reset send produce producemore} {
    proc ::wl::m::Agent::$_m {self args} [list ::wl::warn "agent $_m called directly: ignored; schedule it with \$ns at TIME \"\$agent $_m\""]
}
unset _m

# -- Programs ------------------------------------------------------------------------

namespace eval ::wl::m::Program {
    proc set {self key args} {
        if {$key ni {node command dir timeout expected-exit-code tag}} {
            ::wl::warn "Program: variable '$key' is not supported; ignored (supported: node command dir timeout expected-exit-code tag)"
        }
        if {![llength $args]} { return [::wl::get_attr $self var,$key] }
        if {$key eq "node"} { ::wl::need [lindex $args 0] Node "Program set node" }
        ::wl::set_attr $self var,$key [lindex $args 0]
        return [lindex $args 0]
    }
}
foreach _m {start stop kill run} {
    proc ::wl::m::Program::$_m {self args} [list ::wl::warn "program $_m called directly: ignored; schedule it with \$ns at TIME \"\$prog $_m\""]
}
unset _m

# -- Tcl overrides ---------------------------------------------------------------------

rename unknown ::wl::tcl_unknown
proc unknown {args} {
    ::wl::warn "unknown command '[lindex $args 0]' ignored"
    return ""
}

rename source ::wl::tcl_source
proc source {args} {
    set f [lindex $args end]
    if {[file tail $f] in {tb_compat.tcl tb-compat.tcl}} { return "" }
    return [uplevel 1 [list ::wl::tcl_source {*}$args]]
}

rename exit ::wl::tcl_exit
proc exit {{code 0}} {
    throw [list WANLAB EXIT $code] "exit $code"
}

::wl::tcl_source [file join $::wl::dir tb_compat.tcl]

# Record where user procs are defined (for error lines inside procs).
rename proc ::wl::tcl_proc
::wl::tcl_proc proc {name params body} {
    set f [info frame -1]
    if {[dict exists $f file] && [dict exists $f line]} {
        set full $name
        if {![string match ::* $full]} {
            set ns [uplevel 1 {namespace current}]
            set full [expr {$ns eq "::" ? "::$name" : "${ns}::$name"}]
        }
        set ::wl::procdef($full) [list [dict get $f file] [dict get $f line]]
        set ::wl::procdef([namespace tail $name]) [list [dict get $f file] [dict get $f line]]
    }
    return [uplevel 1 [list ::wl::tcl_proc $name $params $body]]
}
