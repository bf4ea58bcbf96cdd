#!/bin/sh
# Provisioning of one VM host, run as root by `vagrant up` / `vagrant provision`. The box
# (box/build.sh) already holds the system packages, /opt/kch/.venv with mfusepy, and root's
# login key; this makes the synced copy of the project (/opt/kch/src) importable in that venv
# and writes the VM's private address to /etc/kch/address for vagrant/inventory.py.
# Idempotent, and offline: nothing is downloaded, which matters under software emulation.
set -eu

address=${1:?usage: provision.sh PRIVATE_ADDRESS}
src=/opt/kch/src
venv=/opt/kch/.venv

[ -x "$venv/bin/python" ] || { echo "provision.sh: no $venv: is this the kch/debian12 box?" >&2; exit 1; }
# The nodes run `python -m replication` and `python -m nemesis.lazyfs` only: a .pth entry
# puts the source tree on the venv's path, so `vagrant rsync` alone updates the code (no
# wheel build, which needs setuptools from PyPI).
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$src" >"$site/kch-src.pth"
"$venv/bin/python" -c 'import replication.__main__, nemesis.lazyfs.__main__'

# For inventories with user = "vagrant" (and sudo = true): its work directory.
install -d -o vagrant -g vagrant /var/lib/kch
install -d /etc/kch
printf '%s\n' "$address" >/etc/kch/address

# The time source: the host, at the private network's .1 (vms.py up starts its chronyd there).
if [ -d /etc/chrony/conf.d ]; then
    printf 'server %s iburst minpoll -2 maxpoll 0\n' "${address%.*}.1" >/etc/chrony/conf.d/kch.conf
    systemctl restart chrony.service 2>/dev/null || true
fi
