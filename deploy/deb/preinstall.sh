#!/bin/sh
# The .deb's system user: lapse runs as it (deploy/systemd/lapse.service,
# User=lapse) and reads the secret files of /etc/lapse through its group.
set -e
if ! getent group lapse >/dev/null; then
	groupadd --system lapse
fi
if ! getent passwd lapse >/dev/null; then
	useradd --system --gid lapse --home-dir /var/lib/lapse --no-create-home \
		--shell /usr/sbin/nologin --comment "lapse order-timeout service" lapse
fi
