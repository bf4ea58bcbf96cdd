#!/bin/sh
# Provisioning of one VM host, run as root by `vagrant up` / `vagrant provision`:
# system packages, the project in /opt/kch/.venv, root login with the key vagrant installed,
# and the VM's private address in /etc/kch/address for vagrant/inventory.py. Idempotent.
set -eu

address=${1:?usage: provision.sh PRIVATE_ADDRESS}
src=/opt/kch/src
venv=/opt/kch/.venv

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq python3 python3-venv fuse3 iptables rsync openssh-server procps iproute2

# The nodes import only replication/ and nemesis/ (stdlib + mfusepy), so the project goes in
# without its dependencies (Spark, pandas, ... serve the machine that runs `harness`), and
# mfusepy with the version range pyproject.toml gives it.
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
fuse_requirement=$(python3 -c '
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
print(next(d for d in deps if re.match(r"mfusepy\b", d)))
' "$src/pyproject.toml")
"$venv/bin/pip" install -q --no-deps --force-reinstall "$src"
"$venv/bin/pip" install -q "$fuse_requirement"
"$venv/bin/python" -c 'import replication.__main__, nemesis.lazyfs.__main__'

# The harness logs in as root (nodes, iptables and FUSE need it) with vagrant's own key.
install -d -m 700 /root/.ssh
touch /root/.ssh/authorized_keys
while IFS= read -r key; do
    grep -qxF "$key" /root/.ssh/authorized_keys || printf '%s\n' "$key" >>/root/.ssh/authorized_keys
done </home/vagrant/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
printf 'PermitRootLogin prohibit-password\n' >/etc/ssh/sshd_config.d/kch.conf
systemctl reload ssh

# For inventories with user = "vagrant" (and sudo = true): its work directory.
install -d -o vagrant -g vagrant /var/lib/kch
install -d /etc/kch
printf '%s\n' "$address" >/etc/kch/address
