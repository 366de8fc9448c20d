# Driver: tclsh run.tcl RECORDS-FILE SCRIPT MAX-COMMANDS MAX-SECONDS ?NAME VALUE ...?
#
# Runs SCRIPT in a *safe* interpreter (interp create -safe: no exec, open,
# file, socket, cd, glob, load, ...; we also hide interp, after, vwait and
# update), loaded with wanlab's prelude and tb_compat.tcl, and bounded by
# MAX-COMMANDS Tcl commands and MAX-SECONDS of run time (interp limit).
# `source` in the script reaches back here (read_source): only regular files
# inside the script's folder, owned by the script's owner, are read.  The records are written as one JSON
# document to RECORDS-FILE (see emit.tcl).  This process's own memory is
# bounded by its parent (ns.py sets an rlimit).

lassign $argv recfile script maxcmds maxsecs
set tparams [lrange $argv 4 end]
set libdir [file dirname [file normalize [info script]]]
set script [file normalize $script]
set scriptdir [file dirname $script]
set MAX_BYTES [expr {64 * 1024 * 1024}]

proc read_text {path} {
    set fh [open $path r]
    fconfigure $fh -encoding utf-8
    set text [read $fh]
    close $fh
    return $text
}

# `source FILE` from the script: {path text}, or an error the user can act on.
proc read_source {f} {
    set p [file normalize [file join $::scriptdir $f]]
    if {[string first $::scriptdir/ $p] != 0} {
        error "source: '$f' is outside the script's folder $::scriptdir (ns scripts may source only files beside them)"
    }
    if {![file exists $p]} { error "source: no such file '$f' (looked in $::scriptdir)" }
    if {[file type $p] eq "link"} { error "source: '$f' is a symbolic link (not followed)" }
    if {![file isfile $p]} { error "source: '$f' is not a regular file" }
    if {[file size $p] > $::MAX_BYTES} { error "source: '$f' is larger than [expr {$::MAX_BYTES >> 20}] MB" }
    # in a shared folder (/tmp), only the script owner's own files
    if {[file attributes $p -owner] ne [file attributes $::script -owner]} {
        error "source: '$f' belongs to another user than the script"
    }
    return [list $p [read_text $p]]
}

proc objcmd {S h} {
    interp alias $S ::wl::o::$h $S ::wl::dispatch $h
}

set S [interp create -safe]
foreach c {interp after vwait update} { interp hide $S $c }
interp alias $S ::wl::host_objcmd {} objcmd $S
interp alias $S ::wl::host_read {} read_source
interp eval $S [list namespace eval ::wl [list variable hidden [interp hidden $S]]]
# wanlab's own code uses the built-in `set` as ::wl::set; the script's `set` is an
# alias of it that the prelude traces to name objects (a trace on the built-in
# would run for every `set` in wanlab's code too, and made parsing twice as slow)
interp eval $S {rename ::set ::wl::set}
interp alias $S ::set $S ::wl::set
foreach f {prelude.tcl tb_compat.tcl emit.tcl} {
    interp invokehidden $S source [file join $libdir $f]
}
interp eval $S {
    foreach ns [list ::wl::json {*}[namespace children ::wl::m]] {
        namespace eval $ns {namespace path ::wl}
    }
}
interp eval $S [list set ::wl::tparams $tparams]

proc write_records {text} {
    set fh [open $::recfile w]
    fconfigure $fh -encoding utf-8
    puts $fh $text
    close $fh
}

if {[file size $script] > $MAX_BYTES} {
    write_records [interp eval $S [list ::wl::emit_error "the script is larger than [expr {$MAX_BYTES >> 20}] MB" "" {}]]
    exit 0
}
set text [read_text $script]
interp limit $S commands -value [expr {[interp eval $S {info cmdcount}] + $maxcmds}]
set until [expr {[clock milliseconds] + int($maxsecs * 1000)}]
interp limit $S time -seconds [expr {$until / 1000}] -milliseconds [expr {$until % 1000}]
set code [catch {interp eval $S [list ::wl::main $script $text]} msg opts]
interp limit $S commands -value {}
interp limit $S time -seconds {} -milliseconds {}
if {$code == 1} {
    set info [dict get $opts -errorinfo]
    set ecode [dict get $opts -errorcode]
    if {$msg in {"command count limit exceeded" "time limit exceeded"}} {
        set info [interp eval $S [list ::wl::limit_errorinfo $info]]
        if {$msg eq "time limit exceeded"} {
            set msg "the script ran longer than the parse time limit ($maxsecs s; an endless loop?)"
        } else {
            set msg "the script ran more than $maxcmds Tcl commands, the parse limit (an endless loop?)"
        }
        set ecode {}
    }
    write_records [interp eval $S [list ::wl::emit_error $msg $info $ecode]]
} elseif {[catch {write_records [interp eval $S ::wl::emit]} m o]} {
    write_records [interp eval $S [list ::wl::emit_error "internal error in wanlab's ns front end: $m" [dict get $o -errorinfo] {}]]
}
exit 0
