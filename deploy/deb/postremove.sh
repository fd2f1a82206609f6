#!/bin/sh
# The unit file is gone: let systemd forget it. The lapse user and
# /var/lib/lapse (a SQLite store) stay, as Debian leaves a removed service's data.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
