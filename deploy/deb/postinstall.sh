#!/bin/sh
# /etc/lapse holds the settings and the secret files: root writes them, the
# lapse group reads them. The service is not started: set the store first.
set -e
chgrp lapse /etc/lapse /etc/lapse/lapse.env
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
if [ "$1" = configure ] && [ -z "$2" ]; then
	echo "lapse: set the store in /etc/lapse/lapse.env, then: systemctl enable --now lapse"
elif [ -d /run/systemd/system ] && systemctl is-active --quiet lapse; then
	# An upgrade: the unit migrates (ExecStartPre) and serves with the new binary.
	systemctl restart lapse || true
fi
