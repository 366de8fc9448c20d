"""Mininet's log: ``setLogLevel('info')``, ``info``, ``output``, ``warn``, ``error``, ``debug``."""

import logging
import sys

OUTPUT = 25
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "output": OUTPUT,
          "warning": logging.WARNING, "warn": logging.WARNING, "error": logging.ERROR,
          "critical": logging.CRITICAL}
LOGLEVELDEFAULT = "output"


class _Logger:
    def __init__(self):
        self.level = LEVELS[LOGLEVELDEFAULT]

    def setLogLevel(self, levelname=None):
        if levelname is None:
            levelname = LOGLEVELDEFAULT
        if levelname not in LEVELS:
            raise Exception(f"unknown levelname seen in setLogLevel: {levelname}")
        self.level = LEVELS[levelname]

    def isEnabledFor(self, level):
        return level >= self.level

    def _log(self, level, *args):
        if level >= self.level:
            sys.stdout.write(" ".join(str(a) for a in args))
            sys.stdout.flush()

    def debug(self, *a):
        self._log(logging.DEBUG, *a)

    def info(self, *a):
        self._log(logging.INFO, *a)

    def output(self, *a):
        self._log(OUTPUT, *a)

    def warning(self, *a):
        self._log(logging.WARNING, *a)

    warn = warning

    def error(self, *a):
        self._log(logging.ERROR, *a)

    def critical(self, *a):
        self._log(logging.CRITICAL, *a)


lg = _Logger()
setLogLevel = lg.setLogLevel
debug, info, output, warn, warning, error = (lg.debug, lg.info, lg.output, lg.warn,
                                             lg.warning, lg.error)
critical = lg.critical
