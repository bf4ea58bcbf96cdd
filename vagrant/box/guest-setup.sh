#!/bin/sh
# Runs inside the box's root filesystem (chroot) while vagrant/box/build.sh builds it:
# boot, network, logins and the nodes' Python environment. Arguments: ROOT_UUID MIRROR.
set -eu
uuid=$1
mirror=$2

printf 'UUID=%s / ext4 errors=remount-ro 0 1\n' "$uuid" >/etc/fstab
echo kch-box >/etc/hostname
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" \
    >/etc/apt/sources.list

# eth0 is vagrant-libvirt's management network (DHCP: vagrant finds the VM by its lease);
# vagrant itself adds eth1, the private network, to this file at `vagrant up`.
# net.ifnames=0 below keeps the names eth0, eth1 whatever slot the NICs sit in.
cat >/etc/network/interfaces <<'EOF'
auto lo
iface lo inet loopback

allow-hotplug eth0
iface eth0 inet dhcp
EOF

# Our own grub.cfg (not update-grub: its probing of the build machine's loop device is what
# breaks in containers). /vmlinuz and /initrd.img are the links Debian's kernel package keeps.
# The serial console makes a boot visible in libvirt's log of the VM (and to the KVM probe).
mkdir -p /boot/grub
cat >/boot/grub/grub.cfg <<EOF
set timeout=0
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root $uuid
linux /vmlinuz root=UUID=$uuid ro console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0
initrd /initrd.img
boot
EOF

# The login: user vagrant (passwordless sudo, as vagrant expects) and root, both with the
# box's own key (build.sh made it). No passwords anywhere; sshd takes keys only.
id vagrant >/dev/null 2>&1 || useradd -m -s /bin/bash vagrant
passwd -l vagrant >/dev/null
passwd -l root >/dev/null
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >/etc/sudoers.d/vagrant
chmod 440 /etc/sudoers.d/vagrant
for home in /home/vagrant /root; do
    install -d -m 700 "$home/.ssh"
    install -m 600 /tmp/authorized_keys "$home/.ssh/authorized_keys"
done
chown -R vagrant:vagrant /home/vagrant/.ssh
cat >/etc/ssh/sshd_config.d/kch.conf <<'EOF'
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
EOF

# Every VM made from this box must have host keys of its own: drop the ones made at build
# time and create fresh ones on first boot, before sshd starts.
rm -f /etc/ssh/ssh_host_*
cat >/etc/systemd/system/kch-ssh-hostkeys.service <<'EOF'
[Unit]
Description=Create this VM's own SSH host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
EOF
systemctl enable kch-ssh-hostkeys.service ssh.service >/dev/null 2>&1

# The clock follows the host's, the only time source (provision.sh names it in conf.d: the
# private network's .1, where `vms.py up` runs a chronyd): no pool, a step whenever it is off
# by more than 50 ms (a guest's clock starts from the emulated RTC, up to a second off).
cat >/etc/chrony/chrony.conf <<'CHRONY'
confdir /etc/chrony/conf.d
driftfile /var/lib/chrony/chrony.drift
makestep 0.05 -1
maxupdateskew 100.0
CHRONY
systemctl enable chrony.service >/dev/null 2>&1

# The nodes' interpreter: a venv with the packages they import (build.sh downloaded the
# wheels, KCH_REQUIREMENTS names them); provision.sh adds the project.
python3 -m venv /opt/kch/.venv
# shellcheck disable=SC2086  # one word per requirement
/opt/kch/.venv/bin/pip install -q --disable-pip-version-check --no-index --find-links /tmp/wheels \
    $KCH_REQUIREMENTS
/opt/kch/.venv/bin/python -c 'import mfusepy, paramiko, cryptography, toxiproxy'

# Faster boots under software emulation: no wait for a network that is up anyway.
# Nor for jobs a test host does not need (a filesystem scrub, apt and man-db timers): under
# TCG each of them costs the nodes CPU at boot or, worse, in the middle of a run.
for unit in systemd-networkd-wait-online.service e2scrub_reap.service e2scrub_all.timer \
        apt-daily.timer apt-daily-upgrade.timer man-db.timer fstrim.timer; do
    systemctl mask "$unit" >/dev/null 2>&1 || true
done
apt-get clean
rm -rf /var/lib/apt/lists/*
