# Driver: tclsh run.tcl RECORDS-FILE SCRIPT ?NAME VALUE ...?
#
# Loads the prelude, runs SCRIPT at global level, and writes one JSON document
# to RECORDS-FILE (never to stdout, which belongs to the script's own puts):
#   {"ok": true, "objects": [...], "events": [...], "warnings": [...], ...}
# or {"ok": false, "error": {...}} when the script raised an error.

set ::wl_recfile [lindex $argv 0]
set ::wl_script [lindex $argv 1]
set ::wl_tparams [lrange $argv 2 end]
set argv {}
set argc 0
set argv0 $::wl_script

source [file join [file dirname [file normalize [info script]]] prelude.tcl]
set ::wl::tparams $::wl_tparams

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

proc ::wl::emit {fh} {
    variable order
    variable cls
    variable A
    variable var
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
            if {$key eq "members"} {
                set v [::wl::json::strs $v]
                lappend attrs "[::wl::json::str $key]:\[$v,[::wl::json::str $f],[expr {$n eq {} ? 0 : $n}]\]"
            } elseif {$key eq "items"} {
                set js [list]
                foreach it $v {
                    if {$cls($h) eq "EventGroup"} { lappend js [::wl::json::str $it]
                    } else { lappend js [::wl::json::strs $it] }
                }
                lappend attrs "[::wl::json::str $key]:\[\[[join $js ,]\],[::wl::json::str $f],[expr {$n eq {} ? 0 : $n}]\]"
            } else {
                lappend attrs "[::wl::json::str $key]:[::wl::json::lv $A($k)]"
            }
        }
        set v [expr {[info exists var($h)] ? [::wl::json::strs $var($h)] : "null"}]
        set line $A($h,@line)
        if {![string is integer -strict $line]} { set line 0 }
        lappend objs "\{\"h\":[::wl::json::str $h],\"class\":[::wl::json::str $cls($h)],\"var\":$v,\"file\":[::wl::json::str $A($h,@file)],\"line\":$line,\"attrs\":\{[join $attrs ,]\}\}"
    }
    set evs [list]
    foreach e $::wl::events {
        lassign $e t c f n
        set words null
        if {![catch {llength $c}]} { set words [::wl::json::strs $c] }
        lappend evs "\{\"time\":[::wl::json::str $t],\"cmd\":[::wl::json::str $c],\"words\":$words,\"file\":[::wl::json::str $f],\"line\":[expr {[string is integer -strict $n] ? $n : 0}]\}"
    }
    set ws [list]
    foreach w $::wl::warnings {
        lappend ws [::wl::json::lv $w]
    }
    set rt [expr {$::wl::rtproto eq "" ? "null" : [::wl::json::lv $::wl::rtproto]}]
    puts $fh "\{\"ok\":true,\"sim\":[::wl::json::str $::wl::sim],\"rtproto\":$rt,\"ospf\":\[[join $::wl::ospf ,]\],\"ran\":$::wl::ran,\"unused_params\":[::wl::json::strs [dict keys $::wl::tparams]],\"objects\":\[[join $objs ,\n]\],\"events\":\[[join $evs ,\n]\],\"warnings\":\[[join $ws ,\n]\]\}"
}

proc ::wl::emit_error {fh msg opts} {
    set code [dict get $opts -errorcode]
    set info [dict get $opts -errorinfo]
    set file ""
    set line 0
    if {[lrange $code 0 1] eq {WANLAB LOC}} {
        lassign [lrange $code 2 3] file line
    }
    set pd [list]
    foreach k [array names ::wl::procdef] {
        lassign $::wl::procdef($k) f n
        lappend pd "[::wl::json::str $k]:\[[::wl::json::str $f],$n\]"
    }
    puts $fh "\{\"ok\":false,\"error\":\{\"message\":[::wl::json::str $msg],\"errorinfo\":[::wl::json::str $info],\"file\":[::wl::json::str $file],\"line\":[expr {[string is integer -strict $line] ? $line : 0}],\"procs\":\{[join $pd ,]\}\}\}"
}

set ::wl_code [catch {uplevel #0 [list ::wl::tcl_source $::wl_script]} ::wl_msg ::wl_opts]
if {$::wl_code == 1 && [lrange [dict get $::wl_opts -errorcode] 0 1] eq {WANLAB EXIT}} {
    set ::wl_code 0
}
set ::wl_fh [open $::wl_recfile w]
fconfigure $::wl_fh -encoding utf-8
if {$::wl_code == 1} {
    ::wl::emit_error $::wl_fh $::wl_msg $::wl_opts
} else {
    if {[catch {::wl::scan_names; ::wl::emit $::wl_fh} m o]} {
        close $::wl_fh
        set ::wl_fh [open $::wl_recfile w]
        ::wl::emit_error $::wl_fh "internal error in wanlab's ns front end: $m" $o
    }
}
close $::wl_fh
::wl::tcl_exit 0
