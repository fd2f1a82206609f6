#!/bin/sh
# Stop the service before its binary goes (not on an upgrade: postinstall restarts it).
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl disable --now lapse >/dev/null 2>&1 || true
fi
