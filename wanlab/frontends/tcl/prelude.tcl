# wanlab's ns-2 prelude: our own definitions of Simulator, nodes, links, LANs,
# agents, Program objects, `$ns at` and the tb-* commands, in the way Emulab's
# parser interposed on ns.  It is loaded into the *safe* Tcl interpreter in
# which the user's script then runs (run.tcl creates it, with no files,
# processes, sockets or sub-interpreters, and bounded in commands and time).
# Nothing is realized here: every declaration is recorded with the file and
# line it came from, and emit.tcl turns the records into JSON for
# wanlab/frontends/ns.py.
#
# Conventions:
#   * an object has an internal handle (_o12) that keys its state and never
#     leaves the interpreter, and a *name*, which is also its Tcl command and
#     the value user code sees: generated (node0, link0, ...) when created,
#     then the name of the global variable it is first assigned to (Emulab's
#     rule: `set n(1) [$ns node]` is n-1);
#   * its class is ::wl::cls($h) and its attributes live in ::wl::A($h,KEY) as
#     located values {value file line};
#   * methods of class C are procs ::wl::m::C::METHOD {self ...} (self = handle);
#   * ::wl::warn records a warning at the user's current line; ::wl::fail
#     raises an error carrying that location (errorcode WANLAB LOC file line).

namespace eval ::wl {
    variable seq 0
    variable order {}        ;# object handles in creation order
    variable last ""         ;# the most recently created nameable object
    variable renamed ""      ;# {generated-name handle} of the object the last `set` named
    variable warnings {}     ;# {msg file line} ...
    variable events {}       ;# {time cmd file line} ...
    variable simulated 0     ;# >0 inside make-simulated
    variable sim ""          ;# the Simulator's handle
    variable rtproto ""
    variable ospf ""
    variable ran 0
    variable tparams {}      ;# template parameters given by the caller
    variable tdecl {}        ;# {name default desc value file line} of each one defined
    variable swap {}         ;# idle / maxduration / noidle -> located value
    variable edge {}         ;# the edge settings (tb-set-edge-*) -> located value
    variable engine {}       ;# threads, cores -> located value (tb-set-engine-threads, -cores)
    variable ipv6 {}         ;# mode / prefix -> located value (tb-set-ipv6, tb-set-ip6-prefix)
    variable procdef         ;# proc name -> {file line} of its definition
    array set procdef {}
    variable anchors         ;# frame level -> {file line}: where that level's lines count from
    array set anchors {}
    variable chunks {}       ;# {level file line} of the chunks being run, innermost last
    variable cls
    array set cls {}
    variable A
    array set A {}
    variable nm              ;# handle -> current name
    array set nm {}
    variable obj             ;# name -> handle
    array set obj {}
    variable gen             ;# name prefix -> next number for generated names
    array set gen {}
    variable cache
    array set cache {}
    # classes named after their variable, with the prefix of their generated names
    variable named {Node node Link link Lan lan Program prog Agent agent EventGroup group
        EventSequence seq EventTimeline timeline Simulator sim}
    variable prefix [dict merge $named {Simplex simplex Queue queue Other obj ErrorModel em}]
}
namespace eval ::wl::m {}
namespace eval ::wl::o {}

# -- running the user's files ---------------------------------------------------

# Run TEXT (the contents of PATH) in the caller's frame, as `source` would, but
# in chunks of complete commands: `info frame` costs time proportional to the
# position in the script being run, so one script of 50 000 commands made
# every located value slow (parse time grew quadratically).  Each chunk's
# frame level is an anchor: lines inside it count from the chunk's first line.
proc ::wl::run_text {path text} {
    variable chunks
    variable anchors
    set lines [split $text \n]
    set n [llength $lines]
    set first 0
    set count 0
    set next 8
    for {set i 0} {$i < $n} {incr i} {
        incr count
        if {$count < $next && $i < $n - 1} { continue }
        set __wl_chunk__ [join [lrange $lines $first $i] \n]
        if {$i < $n - 1 && ([regexp {(?:^|[^\\])(?:\\\\)*\\$} [lindex $lines $i]]
                            || ![info complete $__wl_chunk__])} {
            # not a command boundary yet: look again after 1/8 more lines (linear overall)
            set next [expr {$count + max(1, $count / 8)}]
            continue
        }
        set level [expr {[info frame] + 1}]
        set outer [expr {[info exists anchors($level)] ? $anchors($level) : ""}]
        set anchors($level) [list $path [expr {$first + 1}]]
        lappend chunks [list $level $path [expr {$first + 1}]]
        set code [catch {uplevel 1 $__wl_chunk__} res opts]
        if {$code == 1} {
            # errorInfo counts lines from the chunk: give them in the file
            dict set opts -errorinfo [relocate [dict get $opts -errorinfo] [lrange $chunks end end]]
        }
        set chunks [lrange $chunks 0 end-1]
        if {$outer eq ""} { unset anchors($level) } else { set anchors($level) $outer }
        if {$code != 0} {
            dict incr opts -level
            return -options $opts $res
        }
        set first [expr {$i + 1}]
        set count 0
        set next 8
    }
    return ""
}

# Replace the markers that the chunks in STACK (innermost last) leave in
# errorInfo, innermost first, by (file "F" line N) markers, which ns.py reads.
proc ::wl::relocate {info stack} {
    set re {\("uplevel" body line (\d+)\)(\s+invoked from within\s+"uplevel 1 \$__wl_chunk__")}
    foreach c [lreverse $stack] {
        lassign $c level file line
        if {![regexp -indices $re $info all k]} { break }
        set k [string range $info {*}$k]
        set info [string replace $info {*}$all "(file \"$file\" line [expr {$line + $k - 1}])"]
    }
    return $info
}

# -- locations, warnings, errors ---------------------------------------------

# The innermost location in the user's code: {file line}, or {"" 0}. Within one
# call from the user's code into an object (dispatch) or `new`, it is computed
# once, as one command records several located values.
variable ::wl::here ""
proc ::wl::userloc {} {
    if {$::wl::here ne ""} { return $::wl::here }
    return [::wl::find_userloc]
}

proc ::wl::find_userloc {} {
    variable anchors
    variable procdef
    # the innermost frame that is not wanlab's own (wanlab's frames have a file:
    # the user's files run as chunks, which have none)
    for {set i [expr {[info frame] - 1}]} {$i > 0} {incr i -1} {
        if {![dict exists [info frame $i] file]} { break }
    }
    if {$i <= 0} { return [list "" 0] }
    set inner [info frame $i]
    set line [expr {[dict exists $inner line] ? [dict get $inner line] : 1}]
    # walk out to the nearest frame whose lines we can place: a chunk or a
    # make-simulated body (anchors), or a procedure defined in the user's code
    for {set j $i} {$j > 0} {incr j -1} {
        set f [expr {$j == $i ? $inner : [info frame $j]}]
        if {[info exists anchors($j)]} {
            lassign $anchors($j) file base
        } elseif {[dict get $f type] eq "proc" && [dict exists $f proc]
                  && [info exists procdef([dict get $f proc])]} {
            lassign $procdef([dict get $f proc]) file base
        } else {
            continue
        }
        if {$j == $i} { return [list $file [expr {$base + $line - 1}]] }
        # the user's command is inside a body run by the command of frame j: its line
        # counts from frame j's script when it falls within that command (a literal
        # body, as Tcl tracks it), else the command of frame j is the best we know
        set fl [expr {[dict exists $f line] ? [dict get $f line] : 1}]
        set span [regexp -all \n [dict get $f cmd]]
        if {$line >= $fl && $line <= $fl + $span} { set fl $line }
        return [list $file [expr {$base + $fl - 1}]]
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

proc ::wl::new_obj {class} {
    variable seq
    variable order
    variable cls
    variable A
    variable nm
    variable obj
    variable gen
    variable prefix
    variable named
    set h "_o[incr seq]"
    set cls($h) $class
    lappend order $h
    # a generated name, free both as an object name and as a command
    set p [dict get $prefix $class]
    if {![info exists gen($p)]} { set gen($p) 0 }
    while {[info exists obj($p$gen($p))] || [llength [info commands ::$p$gen($p)]]} {
        incr gen($p)
    }
    set name $p$gen($p)
    incr gen($p)
    set nm($h) $name
    set obj($name) $h
    lassign [userloc] file line
    set A($h,@file) $file
    set A($h,@line) $line
    # the driver makes ::wl::o::$h an alias of `::wl::dispatch $h`; renamed, it is the
    # object's command (an alias created under a reused name costs time in Tcl)
    ::wl::host_objcmd $h
    rename ::wl::o::$h ::$name
    if {[dict exists $named $class]} { set ::wl::last $h }
    return $h
}

# The handle of object X (a name; a handle is accepted too), or "".
proc ::wl::H {x} {
    variable obj
    variable cls
    if {[info exists obj($x)]} { return $obj($x) }
    if {[info exists cls($x)]} { return $x }
    return ""
}

# The name user code sees for handle H.
proc ::wl::N {h} { return $::wl::nm($h) }

proc ::wl::is_obj {x {class ""}} {
    variable cls
    set h [H $x]
    if {$h eq ""} { return 0 }
    if {$class eq ""} { return 1 }
    return [expr {$cls($h) in $class}]
}

# Check that X is an object of one of CLASS and return its handle.
proc ::wl::need {x class what} {
    set h [H $x]
    if {$h eq "" || $::wl::cls($h) ni $class} {
        if {$h ne ""} {
            fail "$what: expected a [join $class { or }], got a $::wl::cls($h) ('$x')"
        }
        fail "$what: '$x' is not a [join $class { or }]"
    }
    return $h
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

# Emulab's naming rule: an object assigned by `set` to a global variable right
# after its creation is renamed after the variable (`set n(1) [$ns node]` is
# n-1), and the variable then holds the new name. Emulab renamed only at global
# level; like Emulab, a variable made global in a proc (`global h`) counts too.
# A name that is not letters, digits and '-' is refused ('_' becomes '-', with a
# warning); a name already taken is an error, as in Emulab.
proc ::wl::on_set {cmd code result op} {
    variable last
    variable renamed
    if {$code != 0 || [llength $cmd] != 3} { return }
    if {$last eq ""} {
        # `set r [set routerp [$ns node]]`: the inner set named the node (routerp, as
        # Emulab does) but returned the generated name, which the outer variable holds
        if {$renamed ne "" && $result eq [lindex $renamed 0]} {
            uplevel 1 [list ::wl::set [lindex $cmd 1] $::wl::nm([lindex $renamed 1])]
        } else {
            set renamed ""
        }
        return
    }
    if {$result ne $::wl::nm($last)} { return }
    set var [lindex $cmd 1]
    set base [string trimleft [lindex [split $var (] 0] :]
    if {[info level] > 1 && ![string match ::* $var]
            && [uplevel 1 [list info locals $base]] ne ""} { return }
    set h $last
    set last ""
    set name [string trimleft $var :]
    regsub -all {[(),]} [string trimright $name )] - name
    set renamed [list $result $h]
    ::wl::rename_obj $h $name $var
    uplevel 1 [list ::wl::set $var $::wl::nm($h)]
}
trace add execution set leave ::wl::on_set

proc ::wl::rename_obj {h name var} {
    variable nm
    variable obj
    variable cls
    set old $nm($h)
    if {[string first _ $name] >= 0} {
        set want [string map {_ -} $name]
        warn "the $cls($h) in variable $var is named '$want' ('_' is not allowed in names)"
        set name $want
    }
    if {![regexp {^[A-Za-z][A-Za-z0-9-]{0,31}$} $name]} {
        fail "variable $var cannot name the $cls($h): names are letters, digits and '-', start with a letter and have at most 32 characters (use another variable name)"
    }
    if {$name eq "ns" && $cls($h) ne "Simulator"} {
        fail "variable $var cannot name the $cls($h): 'ns' is the simulator's name in events"
    }
    if {$name eq $old} { return }
    if {[info exists obj($name)]} {
        set o $obj($name)
        fail "variable $var cannot name the $cls($h): the $cls($o) created at line [lindex $::wl::A($o,@line) 0] is already named '$name' (each object needs its own variable, as in Emulab)"
    }
    unset obj($old)
    # give the generated name back when it was the last one handed out, so that
    # unnamed objects are numbered from 0 (node0, link0, ...)
    set p [dict get $::wl::prefix $cls($h)]
    if {$old eq "$p[expr {$::wl::gen($p) - 1}]"} { incr ::wl::gen($p) -1 }
    set nm($h) $name
    set obj($name) $h
    if {[llength [info commands ::$name]]} {
        # a Tcl command of that name (e.g. `set source [$ns node]`): the object is
        # named, passed by name to every wanlab command, but has no command of its
        # own; our `source` dispatches `$source METHOD ...` to it
        rename ::$old {}
        if {$name ne "source"} {
            warn "the $cls($h) '$name' has the name of the Tcl command '$name': pass it to wanlab commands, but '\$$var METHOD' calls the command"
        }
    } else {
        rename ::$old ::$name
    }
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

proc ::wl::has_method {h m} {
    set c $::wl::cls($h)
    return [expr {[llength [info commands ::wl::m::${c}::$m]] || [llength [info commands ::wl::m::Any::$m]]}]
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
                return [::wl::N $::wl::sim]
            }
            set ::wl::sim [::wl::new_obj Simulator]
            return [::wl::N $::wl::sim]
        }
        Program {
            return [::wl::N [::wl::new_obj Program]]
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
            return [::wl::N $h]
        }
        EventGroup {
            return [::wl::N [::wl::new_obj EventGroup]]
        }
        ErrorModel - ErrorModel/Uniform {
            # ns-2's packet error model: frames lost with probability rate_ (Uniform takes
            # the rate and the unit as arguments)
            set h [::wl::new_obj ErrorModel]
            if {[llength $args] >= 1} { ::wl::set_attr $h rate_ [lindex $args 0] }
            if {[llength $args] >= 2} { ::wl::set_attr $h unit [lindex $args 1] }
            return [::wl::N $h]
        }
        default {
            ::wl::warn "new $class: class not supported by wanlab; a placeholder object is returned and its methods are ignored"
            return [::wl::N [::wl::new_obj Other]]
        }
    }
}

# -- Simulator --------------------------------------------------------------------

namespace eval ::wl::m::Simulator {}

proc ::wl::m::Simulator::node {self args} {
    if {[llength $args]} { ::wl::warn "\$ns node: arguments '$args' ignored" }
    set h [::wl::new_obj Node]
    ::wl::set_attr $h kind [expr {$::wl::simulated ? "simulated" : "emulated"}]
    set ::wl::ifaces($h) {}
    return [::wl::N $h]
}

proc ::wl::queue_kind {q} {
    set k [string tolower [regsub {^Queue/} $q ""]]
    if {$k ni {droptail red gred}} {
        ::wl::fail "queue '$q' unknown; supported queues are DropTail, RED, GRED"
    }
    return $k
}

proc ::wl::make_link {a b bw delay q simplex} {
    set a [::wl::need $a Node "link endpoint"]
    set b [::wl::need $b Node "link endpoint"]
    if {$a eq $b} { ::wl::fail "a link cannot join a node to itself" }
    set kind [::wl::queue_kind $q]
    # A simplex-link b->a completing an earlier simplex-link a->b: one duplex link.
    if {$simplex && [info exists ::wl::cache(simplex,$b,$a)]} {
        set h $::wl::cache(simplex,$b,$a)
        unset ::wl::cache(simplex,$b,$a)
        foreach {k v} [list bw $bw delay $delay qkind $kind] { ::wl::set_attr $h ba,$k $v }
        ::wl::set_attr $h simplex 0
        return [::wl::N [::wl::direction $h ba]]
    }
    set h [::wl::new_obj Link]
    ::wl::set_attr $h a $a
    ::wl::set_attr $h b $b
    foreach d {ab ba} {
        foreach {k v} [list bw $bw delay $delay qkind $kind] { ::wl::set_attr $h $d,$k $v }
    }
    lappend ::wl::cache(links,$a,$b) $h
    lappend ::wl::cache(links,$b,$a) $h
    lappend ::wl::ifaces($a) [list link $h]
    lappend ::wl::ifaces($b) [list link $h]
    if {$simplex} {
        ::wl::set_attr $h simplex 1
        set ::wl::cache(simplex,$a,$b) $h
        return [::wl::N [::wl::direction $h ab]]
    }
    return [::wl::N $h]
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
        set m [::wl::need $n Node "$what member"]
        if {[info exists ::wl::member($h,$m)]} { ::wl::fail "$what lists node '$n' twice" }
        set ::wl::member($h,$m) 1
        lappend members $m
        lappend ::wl::ifaces($m) [list lan $h]
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
    return [::wl::N $h]
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
    return [::wl::N [::wl::new_obj Other]]
}

proc ::wl::m::Simulator::bridge {self args} {
    ::wl::warn "bridge: created as an ordinary node (no kernel bridging)"
    set h [::wl::new_obj Node]
    ::wl::set_attr $h kind emulated
    set ::wl::ifaces($h) {}
    return [::wl::N $h]
}

# The link joining n1 and n2 (error if none or ambiguous).
proc ::wl::link_between {n1 n2 what} {
    set h1 [::wl::need $n1 Node $what]
    set h2 [::wl::need $n2 Node $what]
    if {![info exists ::wl::cache(links,$h1,$h2)]} {
        ::wl::fail "$what: no link between $n1 and $n2"
    }
    set hs $::wl::cache(links,$h1,$h2)
    if {[llength $hs] > 1} {
        set names [lmap h $hs { ::wl::N $h }]
        ::wl::fail "$what: $n1 and $n2 are joined by [llength $hs] links ([join $names {, }]): name the link instead of its ends"
    }
    return [lindex $hs 0]
}

# A simplex direction object for link h ("ab" or "ba"), cached.
proc ::wl::direction {h d} {
    if {![info exists ::wl::cache(dir,$h,$d)]} {
        set o [::wl::new_obj Simplex]
        ::wl::set_attr $o parent $h
        ::wl::set_attr $o dir $d
        set ::wl::cache(dir,$h,$d) $o
    }
    return $::wl::cache(dir,$h,$d)
}

proc ::wl::simplex_of {n1 n2 what} {
    set h [::wl::link_between $n1 $n2 $what]
    return [::wl::direction $h [expr {[::wl::get_attr $h a] eq [::wl::H $n1] ? "ab" : "ba"}]]
}

proc ::wl::m::Simulator::link {self n1 n2} {
    return [::wl::N [::wl::simplex_of $n1 $n2 "\$ns link"]]
}

proc ::wl::m::Simulator::lanlink {self lan node} {
    set lan [::wl::need $lan Lan "\$ns lanlink"]
    set node [::wl::need $node Node "\$ns lanlink"]
    if {![info exists ::wl::member($lan,$node)]} { ::wl::fail "\$ns lanlink: node is not a member of the LAN" }
    return [::wl::N [::wl::direction $lan "m,$node,to"]]
}

# ns-2's error models on a link: `$ns lossmodel EM A B` and `$ns link-lossmodel EM A B`
# both make frames from A to B cross EM (ns-2 puts one after the queue, the other at the
# link's end; both lose frames after the queue, as the engine's loss stage does).
proc ::wl::lossmodel {what em n1 n2} {
    set e [::wl::need $em ErrorModel $what]
    set d [::wl::simplex_of $n1 $n2 $what]
    ::wl::set_attr [::wl::get_attr $d parent] [::wl::get_attr $d dir],imp,errmodel $e
}
proc ::wl::m::Simulator::lossmodel {self em n1 n2} { ::wl::lossmodel "\$ns lossmodel" $em $n1 $n2 }
proc ::wl::m::Simulator::link-lossmodel {self em n1 n2} { ::wl::lossmodel "\$ns link-lossmodel" $em $n1 $n2 }

proc ::wl::m::Simulator::queue-limit {self n1 n2 limit} {
    set d [::wl::simplex_of $n1 $n2 "\$ns queue-limit"]
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
        bgp { set r bgp }
        default { ::wl::fail "$what '$p' unknown; supported are Static, Session, ospf, BGP, Manual" }
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
    set node [::wl::need $node Node "attach-agent"]
    set agent [::wl::need $agent Agent "attach-agent"]
    ::wl::set_attr $agent node $node
}

proc ::wl::m::Simulator::detach-agent {self node agent} {
    ::wl::warn "detach-agent: ignored"
}

proc ::wl::m::Simulator::connect {self src dst} {
    set src [::wl::need $src Agent "\$ns connect"]
    set dst [::wl::need $dst Agent "\$ns connect"]
    ::wl::set_attr $src peer $dst
    ::wl::set_attr $dst peer $src
}

proc ::wl::m::Simulator::run {self} {
    set ::wl::ran 1
    return ""
}

proc ::wl::m::Simulator::make-simulated {self body} {
    incr ::wl::simulated
    # the body's commands are located on their own lines, counted from this command's
    set level [expr {[info frame] + 1}]
    set prev [expr {[info exists ::wl::anchors($level)] ? $::wl::anchors($level) : ""}]
    set ::wl::anchors($level) [::wl::userloc]
    set outer $::wl::here
    set ::wl::here ""
    set code [catch {uplevel 2 $body} res opts]
    set ::wl::here $outer
    if {$prev eq ""} { unset ::wl::anchors($level) } else { set ::wl::anchors($level) $prev }
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
    foreach d $::wl::tdecl {
        if {[lindex $d 0] eq $name} { ::wl::fail "define-template-parameter: '$name' is defined twice" }
    }
    if {[dict exists $::wl::tparams $name]} {
        set value [dict get $::wl::tparams $name]
        dict unset ::wl::tparams $name
    } else { set value $default }
    lassign [::wl::userloc] file line
    lappend ::wl::tdecl [list $name $default $desc $value $file $line]
    uplevel #0 [list set $name $value]
    return $value
}

proc ::wl::m::Simulator::event-group {self args} {
    set h [::wl::new_obj EventGroup]
    ::wl::set_attr $h items [concat {*}$args]
    ::wl::warn "event-group: supported best effort (events on the group are applied to each member)"
    return [::wl::N $h]
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
    return [::wl::N $h]
}

proc ::wl::m::Simulator::event-timeline {self args} {
    set h [::wl::new_obj EventTimeline]
    ::wl::set_attr $h items {}
    ::wl::warn "event-timeline: supported best effort (its events are scheduled relative to the time it is started)"
    return [::wl::N $h]
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
        return [::wl::N $p]
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
            set q [::wl::new_obj Queue]
            ::wl::set_attr $q dir $self
            set ::wl::cache(queue,$self) $q
        }
        return [::wl::N $::wl::cache(queue,$self)]
    }
    proc trace {self args} { ::wl::warn "link trace: accepted and ignored here; trace links with events (\$ns at T \"\$link trace start\"), see docs/ns-reference.md" }
}

namespace eval ::wl::m::Queue {
    proc set {self key args} {
        ::wl::set d [::wl::get_attr $self dir]
        ::wl::set parent [::wl::get_attr $d parent]
        ::wl::set dir [::wl::get_attr $d dir]
        if {$key ni {limit_ queue-in-bytes_ gentle_ thresh_ maxthresh_ q_weight_ linterm_ mean_pktsize_ queue_in_bytes_}} {
            ::wl::warn "queue parameter '$key' is not supported by wanlab; ignored (supported: limit_ queue-in-bytes_ gentle_ thresh_ maxthresh_ q_weight_ linterm_ mean_pktsize_)"
            return ""
        }
        if {$key eq "queue_in_bytes_"} { ::wl::set key queue-in-bytes_ }
        if {![llength $args]} { return [::wl::get_attr $parent $dir,q,$key] }
        ::wl::set_attr $parent $dir,q,$key [lindex $args 0]
        return [lindex $args 0]
    }
}

# Links and LANs accept trace/up/down etc. as methods only in events.
namespace eval ::wl::m::Link {
    proc trace {self args} { ::wl::warn "link trace: accepted and ignored here; trace links with events (\$ns at T \"\$link trace start\"), see docs/ns-reference.md" }
}
namespace eval ::wl::m::Lan {
    proc trace {self args} { ::wl::warn "lan trace: accepted and ignored here; trace LANs with events (\$ns at T \"\$lan trace start\"), see docs/ns-reference.md" }
}

namespace eval ::wl::m::ErrorModel {
    proc set {self key args} {
        if {$key ne "rate_"} {
            ::wl::warn "ErrorModel: variable '$key' is not supported; ignored (supported: rate_)"
            return ""
        }
        if {![llength $args]} { return [::wl::get_attr $self rate_] }
        ::wl::set_attr $self rate_ [lindex $args 0]
        return [lindex $args 0]
    }
    proc unit {self u} { ::wl::set_attr $self unit $u; return "" }
    proc ranvar {self args} { return "" }
    proc drop-target {self args} { return "" }
}

# -- Agents and applications ------------------------------------------------------

namespace eval ::wl::m::Agent {
    proc set {self key args} {
        if {![llength $args]} { return [::wl::get_attr $self param,$key] }
        ::wl::set_attr $self param,$key [lindex $args 0]
        return [lindex $args 0]
    }
    proc attach-agent {self agent} {
        ::wl::set agent [::wl::need $agent Agent "attach-agent"]
        ::wl::set_attr $self attached $agent
        return ""
    }
    proc select_ca {self ca} {
        ::wl::set_attr $self param,select_ca $ca
        return ""
    }
    proc attach-app {self kind} {
        ::wl::set h [::wl::new_obj Agent]
        ::wl::set_attr $h kind Application/$kind
        ::wl::set_attr $h attached $self
        return [::wl::N $h]
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
        if {$key eq "node"} {
            ::wl::set_attr $self var,node [::wl::need [lindex $args 0] Node "Program set node"]
            return [lindex $args 0]
        }
        ::wl::set_attr $self var,$key [lindex $args 0]
        return [lindex $args 0]
    }
}
foreach _m {start stop kill run} {
    proc ::wl::m::Program::$_m {self args} [list ::wl::warn "program $_m called directly: ignored; schedule it with \$ns at TIME \"\$prog $_m\""]
}
unset _m

# -- Tcl overrides ---------------------------------------------------------------------

# An unknown command is an error, as in Emulab's parser; the commands a safe
# interpreter hides (exec, open, file, socket, ...) say why they are missing.
proc unknown {args} {
    set c [lindex $args 0]
    if {$c in $::wl::hidden} {
        ::wl::fail "'$c' is not available: ns scripts are read in a sandbox, without files, processes or network access (wanlab runs programs in the nodes: tb-set-node-startcmd, Program objects)"
    }
    ::wl::fail "unknown command '$c'"
}

# `source tb_compat.tcl` (whatever its path) is ours, already loaded; other files
# are read by the driver (only files beside the script) and run here.
proc source {args} {
    # `$source METHOD ...` for a node named source (figure 2 of the Netbed paper)
    if {[info exists ::wl::obj(source)] && [llength $args]
            && [::wl::has_method $::wl::obj(source) [lindex $args 0]]} {
        return [uplevel 1 [list ::wl::dispatch $::wl::obj(source) {*}$args]]
    }
    if {[llength $args] != 1 && [llength $args] != 3} {
        ::wl::fail "wrong # args: should be \"source fileName\""
    }
    set f [lindex $args end]
    if {[lindex [split $f /] end] in {tb_compat.tcl tb-compat.tcl}} { return "" }
    lassign [::wl::host_read $f] path text
    return [uplevel 1 [list ::wl::run_text $path $text]]
}

proc exit {{code 0}} {
    throw [list WANLAB EXIT $code] "exit $code"
}

# The script's own output goes nowhere (the records are what counts).
proc puts {args} { return "" }

# Record where user procs are defined (for error lines inside procs).
rename proc ::wl::tcl_proc
::wl::tcl_proc proc {name params body} {
    lassign [::wl::find_userloc] file line
    if {$file ne ""} {
        set full $name
        if {![string match ::* $full]} {
            set ns [uplevel 1 {namespace current}]
            set full [expr {$ns eq "::" ? "::$name" : "${ns}::$name"}]
        }
        set ::wl::procdef($full) [list $file $line]
        set ::wl::procdef([namespace tail $name]) [list $file $line]
    }
    return [uplevel 1 [list ::wl::tcl_proc $name $params $body]]
}

# The driver's entry point: run the script at global level.
proc ::wl::main {path text} {
    set code [catch {uplevel #0 [list ::wl::run_text $path $text]} res opts]
    if {$code == 1 && [lrange [dict get $opts -errorcode] 0 1] eq {WANLAB EXIT}} { return "" }
    return -options $opts $res
}
