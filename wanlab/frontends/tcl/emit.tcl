# The records as JSON, built inside the safe interpreter where they live and
# returned to run.tcl, which writes them for wanlab/frontends/ns.py:
#   {"ok": true, "objects": [...], "events": [...], "warnings": [...], ...}
# or {"ok": false, "error": {...}} when the script raised an error.
# Object state is keyed by internal handles; each object also carries its name.

namespace eval ::wl::json {
    variable map {\\ \\\\ \" \\\"}
    for {set i 0} {$i < 32} {incr i} {
        lappend map [format %c $i] [format \\u%04x $i]
    }
    proc str {s} {
        variable map
        return "\"[string map $map $s]\""
    }
    proc strs {l} {
        set out [list]
        foreach x $l { lappend out [str $x] }
        return "\[[join $out ,]\]"
    }
    # located value {v file line} -> [v, file, line]
    proc lv {l} {
        lassign $l v f n
        if {![string is integer -strict $n]} { set n 0 }
        return "\[[str $v],[str $f],$n\]"
    }
}

proc ::wl::emit {} {
    variable order
    variable cls
    variable A
    variable nm
    set objs [list]
    # each object's attribute keys, in one pass ([array names A $h,*] per object would
    # scan every attribute of every object: quadratic in big scripts)
    set keys [dict create]
    foreach k [array names A] {
        dict lappend keys [string range $k 0 [string first , $k]-1] $k
    }
    foreach h $order {
        set attrs [list]
        foreach k [lsort [expr {[dict exists $keys $h] ? [dict get $keys $h] : {}}]] {
            set key [string range $k [string length $h,] end]
            if {[string index $key 0] eq "@"} continue
            lassign $A($k) v f n
            if {![string is integer -strict $n]} { set n 0 }
            if {$key eq "members"} {
                lappend attrs "[json::str $key]:\[[json::strs $v],[json::str $f],$n\]"
            } elseif {$key eq "items"} {
                set js [list]
                foreach it $v {
                    if {$cls($h) eq "EventGroup"} { lappend js [json::str $it]
                    } else { lappend js [json::strs $it] }
                }
                lappend attrs "[json::str $key]:\[\[[join $js ,]\],[json::str $f],$n\]"
            } else {
                lappend attrs "[json::str $key]:[json::lv $A($k)]"
            }
        }
        set line $A($h,@line)
        if {![string is integer -strict $line]} { set line 0 }
        lappend objs "\{\"h\":[json::str $h],\"class\":[json::str $cls($h)],\"name\":[json::str $nm($h)],\"file\":[json::str $A($h,@file)],\"line\":$line,\"attrs\":\{[join $attrs ,]\}\}"
    }
    set evs [list]
    foreach e $::wl::events {
        lassign $e t c f n
        set words null
        if {![catch {llength $c}]} { set words [json::strs $c] }
        lappend evs "\{\"time\":[json::str $t],\"cmd\":[json::str $c],\"words\":$words,\"file\":[json::str $f],\"line\":[expr {[string is integer -strict $n] ? $n : 0}]\}"
    }
    set ws [list]
    foreach w $::wl::warnings {
        lappend ws [json::lv $w]
    }
    set rt [expr {$::wl::rtproto eq "" ? "null" : [json::lv $::wl::rtproto]}]
    set tds [list]
    foreach d $::wl::tdecl {
        lassign $d tn tdef tdesc tval tf tl
        if {![string is integer -strict $tl]} { set tl 0 }
        lappend tds "\[[json::str $tn],[json::str $tdef],[json::str $tdesc],[json::str $tval],[json::str $tf],$tl\]"
    }
    set sw [list]
    dict for {k v} $::wl::swap { lappend sw "[json::str $k]:[json::lv $v]" }
    set ed [list]
    dict for {k v} $::wl::edge { lappend ed "[json::str $k]:[json::lv $v]" }
    set eng [list]
    dict for {k v} $::wl::engine { lappend eng "[json::str $k]:[json::lv $v]" }
    set v6 [list]
    dict for {k v} $::wl::ipv6 { lappend v6 "[json::str $k]:[json::lv $v]" }
    return "\{\"ok\":true,\"sim\":[json::str $::wl::sim],\"rtproto\":$rt,\"ospf\":\[[join $::wl::ospf ,]\],\"ran\":$::wl::ran,\"unused_params\":[json::strs [dict keys $::wl::tparams]],\"tparams\":\[[join $tds ,]\],\"swap\":\{[join $sw ,]\},\"edge\":\{[join $ed ,]\},\"engine\":\{[join $eng ,]\},\"ipv6\":\{[join $v6 ,]\},\"objects\":\[[join $objs ,\n]\],\"events\":\[[join $evs ,\n]\],\"warnings\":\[[join $ws ,\n]\]\}"
}

proc ::wl::emit_error {msg info code} {
    set file ""
    set line 0
    if {[lrange $code 0 1] eq {WANLAB LOC}} {
        lassign [lrange $code 2 3] file line
    }
    set pd [list]
    foreach k [array names ::wl::procdef] {
        lassign $::wl::procdef($k) f n
        lappend pd "[json::str $k]:\[[json::str $f],$n\]"
    }
    return "\{\"ok\":false,\"error\":\{\"message\":[json::str $msg],\"errorinfo\":[json::str $info],\"file\":[json::str $file],\"line\":[expr {[string is integer -strict $line] ? $line : 0}],\"procs\":\{[join $pd ,]\}\}\}"
}

# After a resource limit stopped the script (no handler in the script could run):
# errorInfo with the chunks still on the stack placed in their files.
proc ::wl::limit_errorinfo {info} {
    return [relocate $info $::wl::chunks]
}
