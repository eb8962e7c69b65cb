#!/usr/bin/env python3
"""A development desktop: Xvfb + xfwm4 + envd on 127.0.0.1:PORT, until Ctrl-C.

`make run` starts this (until cubicled can start real computers) and prints
how to call envd with curl.
"""

import os
import signal
import sys

import harness


def main():
    port = int(os.environ.get("ENVD_PORT", "7777"))
    desk = harness.Desktop().start()
    envd = harness.Envd(desk, listen="tcp:127.0.0.1:%d" % port)
    try:
        envd.start()
        desk.spawn(["xterm", "-geometry", "100x30+80+80"])
        t, p = envd.token, envd.port
        print("""
envd is serving a desktop (Xvfb %s, xfwm4, an xterm) on 127.0.0.1:%d.

  export ENVD=http://127.0.0.1:%d ENVD_TOKEN=%s
  curl -s -H "Authorization: Bearer $ENVD_TOKEN" $ENVD/health
  curl -s -H "Authorization: Bearer $ENVD_TOKEN" -d '{}' $ENVD/v1/actions/screenshot -o screen.png
  curl -s -H "Authorization: Bearer $ENVD_TOKEN" -d '{"x":300,"y":200}' $ENVD/v1/actions/left_click
  curl -s -H "Authorization: Bearer $ENVD_TOKEN" -d '{"text":"héllo 世界\\n"}' $ENVD/v1/actions/type
  curl -s -H "Authorization: Bearer $ENVD_TOKEN" -d '{"command":"uname -a"}' $ENVD/v1/actions/bash

The API is documented in envd/README.md. Ctrl-C stops everything.
""" % (desk.display, p, p, t))
        sys.stdout.flush()
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        try:
            envd.stop()
        finally:
            desk.stop()


def _on_term(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _on_term)
    main()
